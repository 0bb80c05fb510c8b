"""Names the command line offers as choices (collectives, algorithms, protocols, fabrics...).

Each is defined here once and imported from here by the module that owns it
(:mod:`simulator.collectives.model`, :mod:`simulator.network.fabric`, ...), so that
``clustersim`` can build its options without importing numpy, networkx, pandas or the
simulator behind them. Keep this module free of imports: ``clustersim --help`` loads it.
"""

from __future__ import annotations

# --------------------------------------------------------------------- collectives
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "send_recv")
ALGOS_FOR_OP = {
    "all_reduce": ("ring", "tree"),
    "all_gather": ("ring",),
    "reduce_scatter": ("ring",),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "all_to_all": ("direct",),
    "send_recv": ("direct",),
}
ALGOS = ("ring", "tree", "direct")
PROTOS = ("LL", "LL128", "Simple")

# ------------------------------------------------------------------------- network
ECMP_MODES = ("spread", "hash")
# Fabric fidelity -> what it models (the classes: simulator.network.fabric.FABRICS).
FIDELITIES = {
    "analytical": "closed-form alpha-beta, congestion-unaware; fastest, exact when alone",
    "flow": "max-min fair sharing of every link among concurrent flows; use for contention",
}

# ------------------------------------------------------------------------ scenarios
DEFAULT_SCENARIO = "quickstart"

# ------------------------------------------------------------------------- capacity
DEFAULT_STRATEGIES = ("ddp", "fsdp:FULL_SHARD", "fsdp:SHARD_GRAD_OP", "fsdp:HYBRID_SHARD")
# Size-ladder anchors (catalog models) per model family (simulator.capacity_ladder).
FAMILIES: dict[str, tuple[str, ...]] = {
    "llama": ("llama-2-7b", "llama-2-13b", "llama-2-34b", "llama-2-70b"),
    "gpt": ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b"),
}
