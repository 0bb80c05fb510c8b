"""The single-GPU validation (``validation/gpu/``): H200 runs against the simulator's model
of each job and against replays of their profiles (:mod:`.validate`, :mod:`.report`), and
``clustersim validate gpu`` (:mod:`.command`)."""
