"""Strategies side by side on one model and cluster, with their cost (``clustersim compare``).

* :mod:`.options`: the strategies of ``--strategies`` and the person-days of
  ``--migration-days``;
* :mod:`.runner`: :func:`~.runner.compare`, one replayed iteration per strategy (and on
  twice the GPUs, and the largest model that fits);
* :mod:`.results`: the rows of the answer and the cheapest of them;
* :mod:`.cost`: what training costs (GPU-hours at a price, communication waits,
  migration);
* :mod:`.report`: the table, CSV, JSON and the output folder with charts.
"""
