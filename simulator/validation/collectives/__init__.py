"""The collective validation (``validation/collectives/``): A100 and H100 nccl-tests tables
against simulated collectives (:mod:`.validate`), the fit of the calibration constants
(:mod:`.calibrate`) and ``clustersim validate collectives`` (:mod:`.command`)."""
