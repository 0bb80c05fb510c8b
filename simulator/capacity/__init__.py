"""Largest model of a family that fits per strategy on a cluster (``clustersim capacity``).

The question "how big a model can I train here with DDP, with FSDP?" is answered with the
engine's own memory verdict, not a formula: for each strategy we replay one iteration of
candidate models (the scenario's training settings) and read ``metrics.oom`` and
``metrics.peak_memory_gib``, binary-searching a *size ladder* of the family for the largest
model that fits. See ``docs/capacity.md`` for what it finds on one DGX A100.

* :mod:`.ladder`: the size ladder (catalog models plus generated decoder configs about
  15 % apart in parameters), whose doc gives the rule;
* :mod:`.probe`: the strategies of ``--strategies`` and the replay of one rung under one
  of them (:class:`~.probe.Prober`);
* :mod:`.search`: the bisection of the ladder for one strategy;
* :mod:`.claim`: the folk claim "on 8x A100-80GB, DDP trains about 7B, FSDP about 30B";
* :mod:`.report`: :func:`~.report.capacity`, the whole answer.
"""
