"""The training validation (``validation/training/``): published A100 training throughput
against simulated iterations (:mod:`.validate`), the fit of the compute model's convolution
efficiencies (:mod:`.calibrate`) and ``clustersim validate training`` (:mod:`.command`)."""
