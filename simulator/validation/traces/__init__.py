"""The trace validation (``validation/traces/``): the A100 DDP profiler trace replayed and
compared with what it recorded (:mod:`.validate`, :mod:`.report`), and ``clustersim validate
traces`` (:mod:`.command`)."""
