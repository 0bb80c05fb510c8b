"""The reliability validation (``validation/reliability/``): the job-level simulation against
Daly's closed form, the Meta RSC-1 study and Llama 3's interruption count (:mod:`.checks`),
and its report (:mod:`.report`; ``python -m simulator.validation.reliability``)."""
