"""Load the NCCL cost-model constants and the calibration constants (data files)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from .choices import PROTOS
from .parsedcache import fresh_copy
from .yamlio import read_yaml
from .yamlio import data_file

_US = 1e-6
_GBPS = 1e9


@dataclass(frozen=True)
class ModelConstants:
    """Everything the collective cost model needs, in seconds and bytes/s."""

    base_latency_s: dict            # [algo][proto]
    hop_latency_s: dict             # [hw][algo][proto], hw in nvlink|pcie|net (NCCL) or
                                    # infinity_fabric|pcie|net (RCCL, for_rccl)
    bandwidth_factor: dict          # raw table from nccl.yaml
    ceilings: dict                  # per-channel ceilings, bytes/s: [name][arch] ->
                                    # (N1, N2, N4+) (nccl.yaml per_channel_ceilings)
    sm80_bus_bw_cap: float
    tree_correction: dict           # [proto] list of factors
    ring_simple_plateau_factor: float
    p2p_ll_threshold_bytes: int
    link_efficiency: dict           # link_type or link_class -> fraction
    pcie_p2p_efficiency: float
    launch_overhead_s: float
    channels: int
    ppn1_bw_factor: float           # bandwidth discount with one GPU per node (NCCL)
    protocol_bw_efficiency: dict    # [proto] multiplier on NCCL's bandwidth factor
    protocol_latency_factor: dict   # [proto] multiplier on NCCL's base + intra-node latency
    offload_latency_s: dict = None  # [nvls|nvls_tree|collnet_*][base|nvlink|net]
    pat_latency_s: dict = None      # [base|net]
    nvls_efficiency: float = 1.0    # fraction of NVLink bandwidth NVLS reaches
    ring_inter_steps_per_node_minus: int = 0   # ring all_reduce nInterSteps = 2(nNodes - this)
    tree_level_step_protos: tuple = ()  # protocols whose deeper tree levels take a ring step
    tree_level_hop_from: str = "ring"   # whose network hop times such a level
    net_message_us: dict = None     # NIC link_type -> cost of one network message (us)
    net_ll_message_us: dict = None  # NIC link_type -> the same for LL/LL128's ring step (us)
    p2p_op_us: dict = None          # NIC link_type -> cost of one p2p proxy operation (us)
    p2p_message_us: dict = None     # NIC link_type -> cost of one p2p network message (us)

    def replace(self, **changes) -> "ModelConstants":
        """A copy with some fields changed (used by calibration)."""
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        fields.update(changes)
        return ModelConstants(**fields)


def _scale(table: dict, factor: float) -> dict:
    return {k: (_scale(v, factor) if isinstance(v, dict) else float(v) * factor)
            for k, v in table.items()}


def read_data(name: str) -> dict:
    """The parsed YAML of the shipped data file ``simulator/data/<name>`` (parsed once per
    process; each caller gets its own copy)."""
    return fresh_copy(_parsed(name))


@cache
def _parsed(name: str) -> dict:
    # read as every shipped data file is (simulator.yamlio: libyaml's parser, the checks of
    # a file people write); PyYAML's pure-Python safe_load took 50-60 ms of every process
    # for nccl.yaml, calibration.yaml and variability.yaml
    return read_yaml(data_file(name), "data file")


@cache
def load_constants() -> ModelConstants:
    """The shipped constants (``simulator/data/nccl.yaml`` + ``calibration.yaml``)."""
    nccl, cal = read_data("nccl.yaml"), read_data("calibration.yaml")
    return ModelConstants(
        base_latency_s=_scale(nccl["base_latency_us"], _US),
        hop_latency_s=_scale(nccl["hop_latency_us"], _US),
        bandwidth_factor=nccl["bandwidth_factor"],
        ceilings=_ceilings(nccl["per_channel_ceilings"]),
        sm80_bus_bw_cap=nccl["sm80_bus_bw_cap_gbps"] * _GBPS,
        tree_correction=nccl["tree_correction"],
        ring_simple_plateau_factor=float(nccl["ring_simple_plateau_factor"]),
        p2p_ll_threshold_bytes=int(nccl["p2p_ll_threshold_bytes"]),
        link_efficiency={k: float(v["value"]) for k, v in cal["link_efficiency"].items()},
        pcie_p2p_efficiency=float(cal["pcie_p2p_efficiency"]["value"]),
        launch_overhead_s=float(cal["launch_overhead_us"]["value"]) * _US,
        channels=int(cal["channels"]["value"]),
        ppn1_bw_factor=float(nccl["bandwidth_factor"]["ring"]["LL128_one_gpu_per_node"]
                             / nccl["bandwidth_factor"]["ring"]["LL128"]),
        protocol_bw_efficiency={p: float(cal["protocol_bw_efficiency"][p]["value"])
                                for p in PROTOS},
        protocol_latency_factor={p: float(cal["protocol_latency_factor"][p]["value"])
                                 for p in PROTOS},
        offload_latency_s=_scale(nccl["offload_latency_us"], _US),
        pat_latency_s=_scale(nccl["pat_latency_us"], _US),
        nvls_efficiency=float(cal["nvls_efficiency"]["value"]),
        tree_level_step_protos=tuple(nccl["tree_level_step"]["protocols"]),
        tree_level_hop_from=str(nccl["tree_level_step"]["hop_from"]),
        net_message_us={k: float(v["value"]) for k, v in cal["net_message_us"].items()},
        net_ll_message_us={k: float(v["value"]) for k, v in cal["net_ll_message_us"].items()},
        p2p_op_us={k: float(v["value"]) for k, v in cal["p2p_op_us"].items()},
        p2p_message_us={k: float(v["value"]) for k, v in cal["p2p_message_us"].items()},
    )


def _ceilings(table: dict) -> dict:
    """nccl.yaml ``per_channel_ceilings`` in bytes/s: ``[name][arch] -> (N1, N2, N4+)`` for
    ``ring_ll128``, ``tree_ll128``, ``tree`` and ``ll`` (llMaxBws: the architecture's own
    on one node, the CPU row across nodes), and ``family_row``: GPU family -> arch."""
    out = {name: {arch: tuple(float(v) * _GBPS for v in row)
                  for arch, row in table[f"{name}_gbps"].items()}
           for name in ("ring_ll128", "tree_ll128", "tree")}
    across = tuple(float(v) * _GBPS for v in table["ll_max_across_nodes_gbps"])
    out["ll"] = {arch: (float(one) * _GBPS, *across)
                 for arch, one in table["ll_max_one_node_gbps"].items()}
    out["family_row"] = dict(table["family_row"])
    return out


def for_rccl(k: ModelConstants) -> ModelConstants:
    """``k`` with RCCL's base and hop latencies (``simulator/data/rccl.yaml``): the
    constants of a cluster of AMD GPUs. ``protocol_latency_factor`` is 1 for each protocol:
    it was fitted on NCCL's latencies (A100 tables) and does not carry over to RCCL's own
    constants. The rest stays (RCCL runs NCCL's algorithms and protocols)."""
    rccl = read_data("rccl.yaml")
    return k.replace(base_latency_s=_scale(rccl["base_latency_us"], _US),
                     hop_latency_s=_scale(rccl["hop_latency_us"], _US),
                     protocol_latency_factor={p: 1.0 for p in k.protocol_latency_factor})


_INTER_STEPS = {"2n": 0, "2n-2": 1}


def for_release(k: ModelConstants, e: dict) -> ModelConstants:
    """``k`` with the tuner constants of one ``tuner_releases`` entry ``e`` of nccl.yaml
    (:func:`simulator.collectives.nccl_config.release_entry`): base and hop latencies, the
    offload latencies it lists, the ring Simple plateau factor, the ring's inter-node step
    count and its LL bandwidth factor. The calibration fields stay as they are."""
    bf = {algo: dict(v) for algo, v in k.bandwidth_factor.items()}
    bf["ring"]["LL"] = float(e["ring_ll_bw_factor"])
    offload = {**k.offload_latency_s, **_scale(e.get("offload_latency_us", {}), _US)}
    return k.replace(base_latency_s=_scale(e["base_latency_us"], _US),
                     hop_latency_s=_scale(e["hop_latency_us"], _US),
                     offload_latency_s=offload, bandwidth_factor=bf,
                     ring_simple_plateau_factor=float(e["ring_simple_plateau_factor"]),
                     ring_inter_steps_per_node_minus=_INTER_STEPS[
                         e["ring_all_reduce_inter_steps"]])


def with_cuda_graph(k: ModelConstants) -> ModelConstants:
    """Constants for collectives replayed from a CUDA graph (nccl-tests ``-G``): the CPU
    launch is done once for the whole graph, so no per-call launch overhead is paid."""
    return k.replace(launch_overhead_s=0.0)
