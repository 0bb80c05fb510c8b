"""Many jobs, one cluster: job mixes, schedulers, placement, contention between jobs and
failures across the fleet (``clustersim cluster``, docs/cluster.md)."""
