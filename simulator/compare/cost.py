"""What training with a strategy costs: GPU-hours at a price, the part of them spent
waiting on communication, and a one-off migration (``clustersim compare``).

For a strategy on ``gpus`` GPUs whose iteration takes ``iteration_time_s``, of which the
GPUs spend ``comm_wait_s`` neither computing nor hiding communication under compute
(``exposed_comm_s + wait_s`` of :mod:`simulator.metrics.summary`)::

    cost an hour             = usd_per_gpu_hour * gpus                (the whole job's GPUs)
    cost per iteration       = usd_per_gpu_hour * gpus * iteration_time_s / 3600
    cost per 1M tokens       = cost per iteration / tokens per iteration * 1e6
    comm-wait per iteration  = usd_per_gpu_hour * gpus * comm_wait_s / 3600
    iterations               = budget / work per iteration    (tokens, epochs * dataset
                                                               samples, or iterations)
    training cost            = cost per iteration * iterations
    comm-wait cost           = comm-wait per iteration * iterations   (PART of training)
    migration cost           = person-days * day rate                 (one-off)
    total                    = training cost + migration cost

The GPUs are paid while they wait, so the comm-wait cost is inside the training cost, not
added to it; it is reported on its own (and as ``comm_wait_share`` of the training cost)
so that a claim such as "half the budget is wasted on communication" can be read off.
Iterations are counted pro rata (a budget of 1.5 iterations costs 1.5 iterations).

Prices: ``simulator/data/prices.yaml`` holds public cloud list on-demand prices with their
sources; :func:`resolve_price` picks one by GPU model, by instance name, or takes a rate.
:func:`step_cost` prices one simulated step; ``compare``, ``study`` and ``run`` all price
through it, so one scenario costs the same in each.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError, validation_error
from ..yamlio import read_yaml
from ..yamlio import data_file

SECONDS_PER_HOUR = 3600.0
BUDGET_KINDS = ("iterations", "tokens", "epochs")


# ----------------------------------------------------------------------------- prices
class _Instance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str
    instance: str
    gpu: str
    gpus: int = Field(gt=0)
    usd_per_hour: float = Field(gt=0)
    region: str
    retrieved: str
    source: str


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default_instance: dict[str, str] = Field(default_factory=dict)
    default_topology_instance: dict[str, str] = Field(default_factory=dict)
    instances: dict[str, _Instance]


@dataclass(frozen=True)
class Price:
    """A price per GPU-hour and where it comes from."""

    usd_per_gpu_hour: float
    label: str
    source: str

    def __post_init__(self):
        if not (math.isfinite(self.usd_per_gpu_hour) and self.usd_per_gpu_hour > 0):
            raise ConfigError(f"must be a positive number of USD, got {self.usd_per_gpu_hour!r}",
                              source="--price-per-gpu-hour")


def load_price_file(path=None) -> _PriceFile:
    """The price catalog (default ``simulator/data/prices.yaml``), validated."""
    path = path or data_file("prices.yaml")
    try:
        table = _PriceFile.model_validate(read_yaml(path, "price catalog"))
    except ValidationError as exc:
        raise validation_error(exc, source=str(path), style="raw") from None
    for key, names in (("default_instance", table.default_instance),
                       ("default_topology_instance", table.default_topology_instance)):
        for gpu, name in names.items():
            if name not in table.instances:
                raise ConfigError(f"names no instance of this file: {name!r}",
                                  source=str(path), field=f"{key}.{gpu}")
    return table


def instance_price(name: str, table: _PriceFile | None = None) -> Price:
    """The per-GPU-hour price of catalog entry ``name``; ConfigError (``--instance``) if none."""
    table = table or load_price_file()
    if name not in table.instances:
        raise ConfigError(f"no price for {name!r}; known: {', '.join(table.instances)}",
                          source="--instance")
    e = table.instances[name]
    return Price(e.usd_per_hour / e.gpus,
                 f"{name}: {e.provider} {e.instance}, {e.region}, list on-demand "
                 f"{e.usd_per_hour:.2f} USD/h for {e.gpus} x {e.gpu} (retrieved {e.retrieved})",
                 e.source)


def resolve_price(gpu: str, usd_per_gpu_hour: float | None = None,
                  instance: str | None = None, topology: str | None = None) -> Price | None:
    """A given rate, else the named catalog instance, else the catalog's default for the
    shipped ``topology``, else for ``gpu``; None when the catalog has no price for either."""
    if usd_per_gpu_hour is not None:
        if instance is not None:
            raise ConfigError("give --price-per-gpu-hour or --instance, not both",
                              source="--instance")
        return Price(usd_per_gpu_hour, f"{usd_per_gpu_hour:g} USD per GPU-hour (given)",
                     "--price-per-gpu-hour")
    table = load_price_file()
    if instance is not None:
        return instance_price(instance, table)
    name = table.default_topology_instance.get(topology) or table.default_instance.get(gpu)
    return instance_price(name, table) if name else None


# ----------------------------------------------------------------------------- budget
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_count(text: str | float | int, option: str) -> float:
    """``"300B"``, ``"2T"``, ``"1.2M"``, ``"1e12"`` -> a positive number (decimal prefixes:
    K, M, B or G, T); ConfigError naming ``option`` otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _COUNT.match(str(text))
        if not m:
            raise ConfigError(f"expected a positive count such as 300B, 2T or 1.2e6, got "
                              f"{text!r}", source=option)
        value = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"must be positive, got {text!r}", source=option)
    return value


@dataclass(frozen=True)
class Budget:
    """How much training to price: ``amount`` iterations, tokens, or epochs (of
    ``dataset_samples`` samples each)."""

    kind: str
    amount: float
    dataset_samples: float | None = None

    def __post_init__(self):
        if self.kind not in BUDGET_KINDS:
            raise ConfigError(f"budget kind must be one of {', '.join(BUDGET_KINDS)}, got "
                              f"{self.kind!r}", source="--budget")
        parse_count(self.amount, f"--{self.kind}")
        if (self.kind == "epochs") != (self.dataset_samples is not None):
            raise ConfigError("--epochs needs --dataset-samples (samples per epoch), and "
                              "--dataset-samples only goes with --epochs",
                              source="--dataset-samples")
        if self.dataset_samples is not None:
            parse_count(self.dataset_samples, "--dataset-samples")

    def iterations(self, samples_per_iteration: float, tokens_per_iteration: float) -> float | None:
        """Iterations the budget takes (pro rata); None for a token budget of a model
        without tokens (a CNN)."""
        if self.kind == "iterations":
            return self.amount
        if self.kind == "tokens":
            return self.amount / tokens_per_iteration if tokens_per_iteration > 0 else None
        return self.amount * self.dataset_samples / samples_per_iteration

    def describe(self) -> str:
        if self.kind == "epochs":
            return f"{self.amount:g} epoch(s) of {self.dataset_samples:,.0f} samples"
        return f"{self.amount:,.0f} {self.kind}"


# ------------------------------------------------------------------------------- cost
@dataclass(frozen=True)
class Cost:
    """The cost of one strategy (USD); budget fields are None without a budget."""

    gpus: int
    usd_per_gpu_hour: float
    usd_per_hour: float                     # the job's GPUs, all of them, an hour
    per_iteration_usd: float
    comm_wait_per_iteration_usd: float
    comm_wait_share: float
    per_million_tokens_usd: float | None
    per_thousand_samples_usd: float
    iterations: float | None
    gpu_hours: float | None
    wall_hours: float | None
    training_usd: float | None
    comm_wait_usd: float | None
    migration_usd: float
    total_usd: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def migration_cost(days: float, usd_per_day: float | None) -> float:
    """``days`` person-days at ``usd_per_day``; ConfigError for negative input or days
    without a day rate."""
    if not (math.isfinite(days) and days >= 0):
        raise ConfigError(f"must be >= 0 person-days, got {days!r}", source="--migration-days")
    if days == 0:
        return 0.0
    if usd_per_day is None:
        raise ConfigError("migration days need --day-rate (USD per person-day)",
                          source="--day-rate")
    if not (math.isfinite(usd_per_day) and usd_per_day >= 0):
        raise ConfigError(f"must be >= 0 USD, got {usd_per_day!r}", source="--day-rate")
    return days * usd_per_day


def training_cost(price: Price, gpus: int, iteration_time_s: float, comm_wait_s: float,
                  samples_per_iteration: float, tokens_per_iteration: float,
                  budget: Budget | None = None, migration_usd: float = 0.0) -> Cost:
    """The cost of training (module doc); ConfigError for impossible inputs."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"must be a positive integer, got {gpus!r}", field="gpus")
    if not (iteration_time_s > 0 and 0 <= comm_wait_s <= iteration_time_s * (1 + 1e-9)):
        raise ConfigError(f"need iteration time > 0 and 0 <= comm wait <= iteration time, "
                          f"got {iteration_time_s!r} and {comm_wait_s!r}", field="time")
    if samples_per_iteration <= 0:
        raise ConfigError(f"must be positive, got {samples_per_iteration!r}",
                          field="samples_per_iteration")
    usd_per_s = price.usd_per_gpu_hour * gpus / SECONDS_PER_HOUR     # the whole job
    per_iter = usd_per_s * iteration_time_s
    wait_iter = usd_per_s * comm_wait_s
    n = budget.iterations(samples_per_iteration, tokens_per_iteration) if budget else None
    training = per_iter * n if n is not None else None
    return Cost(
        gpus=gpus, usd_per_gpu_hour=price.usd_per_gpu_hour,
        usd_per_hour=price.usd_per_gpu_hour * gpus, per_iteration_usd=per_iter,
        comm_wait_per_iteration_usd=wait_iter, comm_wait_share=comm_wait_s / iteration_time_s,
        per_million_tokens_usd=per_iter / tokens_per_iteration * 1e6
        if tokens_per_iteration > 0 else None,
        per_thousand_samples_usd=per_iter / samples_per_iteration * 1e3,
        iterations=n,
        gpu_hours=gpus * iteration_time_s * n / SECONDS_PER_HOUR if n is not None else None,
        wall_hours=iteration_time_s * n / SECONDS_PER_HOUR if n is not None else None,
        training_usd=training, comm_wait_usd=wait_iter * n if n is not None else None,
        migration_usd=migration_usd,
        total_usd=training + migration_usd if training is not None else None)


def step_cost(price: Price | None, gpus: int, metrics, global_batch: int,
              tokens_per_sample: float, budget: Budget | None = None,
              migration_usd: float = 0.0) -> Cost | None:
    """The cost of a simulated step (``metrics``: its :class:`~simulator.metrics.summary.
    Metrics`) on ``gpus`` paid GPUs, the scenario's all (a strategy that leaves some without
    work still rents them); ``global_batch`` samples of ``tokens_per_sample`` tokens a step.
    The comm-wait is the step's exposed communication and waits. None without a price or
    without a step to price."""
    if price is None or metrics is None or metrics.iteration_time_s <= 0 or global_batch <= 0:
        return None
    return training_cost(price, gpus, metrics.iteration_time_s,
                         min(metrics.exposed_comm_s + metrics.wait_s, metrics.iteration_time_s),
                         global_batch, global_batch * tokens_per_sample, budget, migration_usd)


def no_price_line(gpu: str) -> str:
    """What a command says in place of a cost for a GPU the catalog has no price for."""
    return (f"no price in the catalog for {gpu} (simulator/data/prices.yaml): pass "
            f"--price-per-gpu-hour or --instance")
