"""The captured-run validation (``validation/traces/captured/``): the capture machine as the
simulator sees it (:mod:`.calibration` from its microbenchmarks, :mod:`.machine`), the runs
replayed, predicted at other bandwidths and scaled (:mod:`.validate`, :mod:`.scaling`), the
report (:mod:`.report`, :mod:`.text`) and ``clustersim validate captured`` (:mod:`.command`)."""
