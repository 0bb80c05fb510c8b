"""Validation of the simulator against real measurements, one package per suite, as the data
folders under the repository's ``validation/``:

* :mod:`.collectives`: simulated collectives against A100 nccl-tests tables, and the fit of
  the collective model's calibration constants;
* :mod:`.training`: simulated training throughput against published A100 runs, and the fit
  of the compute model's convolution efficiencies;
* :mod:`.traces`: the replay of a real A100 DDP profiler trace;
* :mod:`.captured`: the captured CPU runs replayed on the capture machine;
* :mod:`.gpu`: single-GPU H200 runs, generated and replayed;
* :mod:`.reliability`: the job-level reliability simulation against Daly, Meta RSC-1, Llama 3;
* :mod:`.suite`: every suite at once (``clustersim validate``) and ``validation/REPORT.md``.

Shared by the suites: :mod:`.common` (input files, report helpers), :mod:`.known_misses`,
:mod:`.paths`, :mod:`.optimize` (the bounded minimisers of both calibrations) and
:mod:`.commands` (pieces of the commands). :mod:`.cli` attaches every ``clustersim validate``
command to the main CLI.
"""
