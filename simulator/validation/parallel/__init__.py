"""The ``parallel`` validation suite (``clustersim validate parallel``): Megatron-LM on
Selene (Korthikanti et al. 2022: iteration times and per-GPU memory, gated) and NeMo on DGX
H100 (reported). :mod:`.cases` reads ``validation/parallel/``, :mod:`.memory` checks the
memory model, :mod:`.iteration` simulates each run, :mod:`.report` writes the report."""
