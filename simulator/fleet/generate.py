"""A seeded job mix drawn from a published cluster's job statistics (the Acme summary).

The Acme summary (InternLM/AcmeTrace, NSDI'24; ``data/clusters/acme/cluster_summary.csv``, a
copy of ``validation/clusters/acme/``) gives, per cluster, the median and mean GPUs of a GPU
job and the median, mean and maximum of its run time. Each quantity is drawn from the
log-normal with that median and mean (median ``m`` and mean ``a`` give ``sigma =
sqrt(2 ln(a / m))``): GPUs as a power of two (``2 ** round(x)``, ``x`` normal in log2 with
the median's log2 as its centre, then held within ``min_gpus`` and ``max_gpus``: a mix of
the larger jobs only, say), run times in seconds cut at the row's maximum. Arrivals are
a Poisson process whose rate makes the offered GPU-time ``load`` times the cluster's. A job's
run time is its ``duration`` (its time alone on the cluster); its scenario is drawn among
those that run on its GPU count.
"""

from __future__ import annotations

import csv
import math
from importlib import resources

import numpy as np

from ..errors import ConfigError
from .mix import Generate, JobEntry

_SUMMARY = ("data", "clusters", "acme", "cluster_summary.csv")


def acme_row(cluster: str) -> dict[str, float]:
    """The numbers of ``cluster``'s row of the Acme summary (empty fields left out)."""
    path = resources.files("simulator").joinpath(*_SUMMARY)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["id"] == cluster:
                return {k: float(v) for k, v in row.items() if k != "id" and v != ""}
    raise ConfigError(f"no cluster {cluster!r} in the Acme summary", field="generate.cluster")


def lognormal_sigma(median: float, mean: float) -> float:
    """The sigma of the log-normal with this ``median`` and ``mean`` (0 where mean <= median)."""
    return math.sqrt(2.0 * math.log(mean / median)) if mean > median else 0.0


def generate_jobs(gen: Generate, n_gpus: int, gpus_per_node: int, seed: int) -> list[JobEntry]:
    """``gen.jobs`` jobs drawn with ``seed`` for a cluster of ``n_gpus`` GPUs, ``gpus_per_node``
    to a server (a job of more GPUs than a server takes whole servers).

    :raises ConfigError: (``generate.scenarios``) when no scenario runs on one GPU count drawn;
        (``generate.min_gpus``) above the largest job the cluster, ``max_gpus`` and the row
        allow.
    """
    row = acme_row(gen.cluster)
    rng = np.random.default_rng(seed)
    cap = min(gen.max_gpus or n_gpus, n_gpus, int(row["max_gpu"]))
    if gen.min_gpus > cap:                  # every job would be held below it: not honoured
        raise ConfigError(f"{gen.min_gpus} GPUs is more than a job may take here ({cap}: "
                          f"the least of max_gpus, the cluster's {n_gpus} and {gen.cluster}'s "
                          f"largest job)", field="generate.min_gpus")
    log2_sigma = lognormal_sigma(row["med_gpu_num"], row["avg_gpu_num"]) / math.log(2)
    x = rng.normal(math.log2(row["med_gpu_num"]), log2_sigma, gen.jobs)
    gpus = np.clip(2 ** np.clip(np.rint(x), 0, 62), min(gen.min_gpus, cap), cap).astype(int)
    gpus = np.where(gpus > gpus_per_node, gpus // gpus_per_node * gpus_per_node, gpus)
    med, mean = row["med_run_time_gpu"], row["avg_run_time_gpu"]
    runs = np.minimum(rng.lognormal(math.log(med), lognormal_sigma(med, mean), gen.jobs),
                      row["max_run_time_gpu"])
    runs = np.maximum(np.rint(runs), 1.0)
    span = float(np.sum(gpus * runs)) / (gen.load * n_gpus)
    arrivals = np.cumsum(rng.exponential(span / gen.jobs, gen.jobs))
    arrivals -= arrivals[0]
    high = rng.random(gen.jobs) < gen.high_priority
    names = sorted(gen.scenarios)
    picks = rng.random(gen.jobs)
    jobs = []
    for i in range(gen.jobs):
        fits = [s for s in names if gen.scenarios[s] <= gpus[i]]
        if not fits:
            raise ConfigError(f"no scenario runs on {gpus[i]} GPU(s) (the fewest: "
                              f"{min(gen.scenarios.values())})", field="generate.scenarios")
        jobs.append(JobEntry(name=f"job{i}", arrival=f"{arrivals[i]:.3f} s",
                             scenario=fits[int(picks[i] * len(fits))], gpus=int(gpus[i]),
                             duration=f"{runs[i]:.0f} s", priority=int(high[i]),
                             checkpoint=gen.checkpoint))
    return jobs
