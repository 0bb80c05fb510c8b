"""Framework spellings (Megatron-LM, torchtitan, DeepSpeed) translated into one
:class:`~simulator.parallel.plan.ParallelPlan`."""
