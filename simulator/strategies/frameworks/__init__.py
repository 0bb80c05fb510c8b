"""Framework spellings (Megatron-LM, torchtitan, DeepSpeed) translated into one
:class:`~simulator.strategies.parallel.plan.ParallelPlan`."""
