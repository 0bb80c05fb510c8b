"""Collective cost model: algorithms x protocols, NCCL's tuner, and the flow to simulate.

A collective on a communicator becomes one *coupled flow* (see network/maxmin.py): every
edge of every channel of the chosen algorithm advances at one rate, as a pipeline does.
Its duration is ``latency + payload / rate``; the latency follows NCCL's model
(base + per-step hop latencies, constants in data/nccl.yaml) plus, per step, any link
latency above the catalog's (a what-if; NCCL's constants hold the catalog's), the rate
comes from the fabric (alone, or shared with whatever else is on the links).

The calibrated ``protocol_latency_factor`` scales NCCL's latency as far as the calibration
tables measured it: 1 and 2 servers, so a tree's first level between servers. The tuner
chooses with NCCL's own per-level cost beyond it (``2 x net tree hop`` per doubling); the
plan is timed with what a level is, one ring-like network step up and one down over the
tree's real depth (:mod:`simulator.collectives.tree_latency`; docs/collective-model.md,
"Latency across servers").
NVLS, NVLS-Tree and CollNet: :mod:`simulator.collectives.offload`; PAT:
:mod:`simulator.collectives.pat`; the NCCL knobs: :mod:`simulator.collectives.nccl_config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..choices import ALGOS_FOR_OP
from ..cluster import Cluster
from ..errors import ConfigError
from ..gcpause import gc_paused
from ..hardware import gpu_spec
from ..network.fabric import Flow, bottleneck_rate
from ..uniques import distinct_where
from .copies import star_plan
from .messages import net_ll_message_s, net_message_s, p2p_costs, peer_messages_s
from .ofi_tuner import nccl_env, nccl_tuner_view, platform_of, region_choice
from .p2p_net import DEFAULT_NET_CHUNK
from .nccl_own_tuner import ring_protocol
from .host_path import host_path_applies, load_host_path
from ..constants import ModelConstants, for_rccl, for_release
from .layouts import (Communicator, EdgeSet, blocks_exact, direct_edges, make_communicator,
                      ring_edge_sets, ring_edges,
                      tree_edges)
from .nccl_config import NcclConfig, release_entry
from .offload import (OFFLOAD_ALGOS, check_available, collnet_unavailable, nvls_unavailable,
                      offload_plan, simple_only)
from .groups import group_plans
from .pairs import pair_plans
from .one_shot import one_shot_latency_s, one_shot_unavailable
from .pat import pat_latency_s, pat_unavailable
from .plan import Plan
from .tree_latency import plugin_levels_s, timing_correction_s

REDUCING_OPS = ("all_reduce", "reduce_scatter", "reduce")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests busbw / algbw for ``op`` on ``n`` ranks (doc/PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _payload(op: str, algo: str, size: int, n: int) -> float:
    if n == 1:
        return 0.0
    if op == "all_reduce":     # one_shot: each GPU's whole buffer to every peer
        return size if algo in ("tree", "one_shot") else 2.0 * (n - 1) / n * size
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n * size
    if op == "all_to_all":
        return size / n
    return float(size)


def _ring_steps(op: str, n: int, nodes: int, minus: int = 0) -> tuple[int, int]:
    """NCCL's (nsteps, nInterSteps) of a ring ``op`` on ``n`` ranks over ``nodes`` servers;
    an all_reduce crosses ``2 (nodes - minus)`` times (``minus`` 0 or 1 by NCCL release)."""
    if op == "all_reduce":
        steps, inter_steps = 2 * (n - 1), (2 * (nodes - minus) if nodes > 1 else 0)
    else:
        steps, inter_steps = n - 1, nodes - 1
    return steps, min(inter_steps, steps)   # one GPU per node: every step crosses


def ceiling_row(k: ModelConstants, gpu) -> dict:
    """NCCL's per-channel ceilings for ``gpu``'s architecture: name -> (N1, N2, N4+) bytes/s.

    :raises ConfigError: for a GPU family nccl.yaml's ``family_row`` does not name.
    """
    arch = k.ceilings["family_row"].get(gpu.family)
    if arch is None:
        raise ConfigError(f"{gpu.name}: GPU family {gpu.family!r} has no row of NCCL's "
                          f"per-channel ceilings (nccl.yaml per_channel_ceilings.family_row)",
                          field="gpu")
    return {name: table[arch] for name, table in k.ceilings.items() if name != "family_row"}


def _n_idx(n_nodes: int) -> int:
    return 0 if n_nodes == 1 else 1 if n_nodes == 2 else 2


@dataclass(frozen=True)
class LaidRing:
    """A group's ring across servers, laid out ahead, where it is all that the group's
    plan depends on (:meth:`CollectiveModel.laid_ring`): ``shape``, what the plan reads of
    it but the link ids, and the group's own ``links`` and ``wire_coef``."""

    shape: tuple
    links: np.ndarray
    wire_coef: np.ndarray


class CollectiveModel:
    """Plans collectives on one cluster with one set of constants (caches layouts)."""

    def __init__(self, cluster: Cluster, constants: ModelConstants,
                 nccl: NcclConfig | None = None):
        self.cluster = cluster
        self.nccl = nccl or NcclConfig()
        self.gpu = gpu_spec(cluster.G.graph.get("gpu"))
        k = constants.replace(channels=self.nccl.channels(constants.channels))
        release = self.nccl.tuner_release()
        if self.gpu.vendor == "amd":
            if release:
                raise ConfigError(f"{self.gpu.name} runs RCCL, whose latencies are "
                                  f"simulator/data/rccl.yaml's; an NCCL release's tuner "
                                  f"table ({release}) does not apply", field="nccl.version")
            self.k = for_rccl(k)
        else:
            self.k = for_release(k, release_entry(release)[1]) if release else k
        # NCCL < 2.12 has no PXN: a NIC off the GPU's PCIe switch is reached through the CPU
        self.host_path = (load_host_path() if not self.nccl.has_pxn()
                          and host_path_applies(cluster) else None)
        self._edges: dict = {}
        self._pair_shapes: dict = {}        # send/recv plans read off (collectives.pairs)
        self._group_shapes: dict = {}       # group plans read off (collectives.groups)
        self._comms: dict = {}              # rank list -> its Communicator
        self.sm80 = str(cluster.G.graph.get("gpu", "")).startswith("A100")
        self.ceilings = ceiling_row(self.k, self.gpu)
        self.has_nvswitch = any(kind == "nvswitch" for _, kind in cluster.G.nodes(data="kind"))
        self.message_s = net_message_s(cluster, self.k)     # EFA's per-message cost, or 0
        self.ll_message_s = net_ll_message_s(cluster, self.k)   # the same, LL/LL128
        self.ofi_platform = platform_of(cluster)    # aws-ofi-nccl's tuner regions, or None
        # point-to-point across servers as NCCL plans it (collectives/p2p_net.py), priced
        # where the fabric has p2p costs (EFA): the ring graph's channels and the
        # NCCL_P2P_NET_CHUNKSIZE that aws-ofi-nccl's platform sets, else NCCL's defaults
        self.p2p_costs = p2p_costs(cluster, self.k)
        view = nccl_tuner_view(self.ofi_platform) if self.ofi_platform else None
        self.p2p_ring_channels = view["graph_channels"] if view else self.k.channels
        # the net plugin's reported latency (graph->latencyInter), which a tree's levels
        # between servers wait for (collectives/tree_latency.py, plugin_levels_s); rings
        # on such a fabric pay its fitted step cost instead (collectives/messages.py)
        self.latency_inter_s = view.get("latency_inter_us", 0.0) * 1e-6 if view else 0.0
        self.p2p_step = (nccl_env(self.ofi_platform) if self.ofi_platform else {}).get(
            "p2p_net_chunksize", DEFAULT_NET_CHUNK)

    # ------------------------------------------------------------------ layout
    def _edge_set(self, op: str, algo: str, comm: Communicator, root: int,
                  pairs) -> EdgeSet:
        key = (op if op in ("broadcast", "reduce", "send_recv") else "", algo, comm, root,
               pairs)
        es = self._edges.get(key)
        if es is None:
            eff, host = self.k.pcie_p2p_efficiency, self.host_path
            if algo == "tree":
                es = tree_edges(self.cluster, comm, eff, host)
            elif algo in ("direct", "one_shot"):    # one_shot: every ordered pair
                es = direct_edges(self.cluster, comm, pairs, eff, host)
            else:                      # ring, and PAT's ring-equivalent bytes
                chain = root if op in ("broadcast", "reduce") else None
                es = ring_edges(self.cluster, comm, chain, eff, host)
            self._edges[key] = es
        return es

    # ----------------------------------------------------------------- latency
    def latency_s(self, op: str, algo: str, proto: str, comm: Communicator,
                  hw: str, size: int) -> float:
        k, n, nodes = self.k, comm.n_ranks, comm.n_nodes
        scale = k.protocol_latency_factor[proto]
        if algo == "direct":
            hop = k.hop_latency_s["net" if nodes > 1 else hw]["ring"][proto]
            return (k.launch_overhead_s + scale * (k.base_latency_s["ring"][proto] + hop)
                    + peer_messages_s(op, comm, size, self.p2p_costs, self.p2p_ring_channels,
                                      self.p2p_step))
        base = k.base_latency_s[algo][proto]
        if algo == "ring" and nodes > 1 and self.message_s:
            # a fabric with a per-message cost (EFA): each ring step waits for one network
            # message, in place of NCCL's hop latencies (collectives/messages.py)
            steps, _ = _ring_steps(op, n, nodes)
            step = self.message_s if proto == "Simple" else self.ll_message_s
            return k.launch_overhead_s + scale * base + steps * step
        intra = k.hop_latency_s[hw][algo][proto]
        inter = k.hop_latency_s["net"][algo][proto]
        if algo == "tree":
            levels = math.log2(nodes)
            fixed = base + 2 * ((comm.ppn - 1) * intra + min(levels, 1.0) * inter)
            net = 2 * max(levels - 1.0, 0.0) * inter
        else:
            steps, inter_steps = _ring_steps(op, n, nodes, k.ring_inter_steps_per_node_minus)
            fixed = base + (steps - inter_steps) * intra + inter_steps * inter
            net = 0.0
        lat = scale * fixed + net
        if (algo == "ring" and proto == "Simple" and nodes > 1 and op == "all_reduce"
                and size >= n / 16.0 * 65536):
            lat *= k.ring_simple_plateau_factor
        return k.launch_overhead_s + lat

    def link_latency_extra_s(self, op: str, algo: str, comm: Communicator,
                             es: EdgeSet) -> float:
        """Link latency above the catalog's (a what-if) on the critical path, counted with
        the steps of :meth:`latency_s`: each step crosses the slowest route of its kind
        (inside a server, ``es.intra_extra_s``, or between servers, ``es.inter_extra_s``).
        NCCL's hop latencies were measured on the catalog's links, so only the difference
        is added; 0.0 without a what-if."""
        intra, inter = es.step_extra_s()
        if not (intra or inter):
            return 0.0
        n, nodes = comm.n_ranks, comm.n_nodes
        if algo in ("direct", "one_shot"):      # one step
            return max(intra, inter)
        if algo == "tree":
            return 2 * ((comm.ppn - 1) * intra + math.log2(nodes) * inter)
        steps, inter_steps = _ring_steps(op, n, nodes, self.k.ring_inter_steps_per_node_minus)
        return (steps - inter_steps) * intra + inter_steps * inter

    def with_link_latency(self, nccl_latency: float, algo: str, proto: str,
                          extra_s: float) -> float:
        """NCCL's latency plus ``extra_s`` (a link latency what-if's); a link faster than
        the catalog's takes off at most the hop latencies, never NCCL's base and launch
        latency (of ``algo``, the ring's for ``direct``, and ``proto``).

        :raises KeyError: if the constants have no base latency for ``algo`` and ``proto``.
        """
        if not extra_s:
            return nccl_latency
        k = self.k
        if algo == "one_shot":                  # no base latency (collectives/one_shot.py)
            return max(nccl_latency + extra_s, k.launch_overhead_s)
        base = k.base_latency_s["ring" if algo == "direct" else algo][proto]
        floor = k.launch_overhead_s + k.protocol_latency_factor[proto] * base
        return max(nccl_latency + extra_s, floor)

    # --------------------------------------------------------------- bandwidth
    def _factor(self, algo: str, proto: str, op: str, comm: Communicator, size: int) -> float:
        factor = self.k.protocol_bw_efficiency[proto] * self._nccl_factor(algo, proto, op, comm,
                                                                          size)
        if comm.ppn < 2 and comm.n_nodes > 1 and proto != "LL128":
            # NCCL: "if ppn < 2, then we are sending/receiving at the same GPU through the
            # NIC, apply some bw discount" (0.7, in LL128's factor); the GPU that both sends
            # and receives through one NIC is as slow with the other protocols.
            factor *= self.k.ppn1_bw_factor
        return factor

    def _nccl_factor(self, algo: str, proto: str, op: str, comm: Communicator,
                     size: int) -> float:
        bf = self.k.bandwidth_factor
        if algo in ("direct", "one_shot"):
            return 1.0
        if algo == "pat":
            return bf["pat"]["Simple"]           # NCCL 2.23+: busBw *= .75
        if algo == "ring":
            if proto == "LL":
                single_other = comm.n_nodes == 1 and op not in ("all_reduce", "reduce")
                return bf["ring"]["LL_single_node_other"] if single_other else bf["ring"]["LL"]
            if proto == "LL128":
                return bf["ring"]["LL128_one_gpu_per_node"] if comm.ppn < 2 else \
                    bf["ring"]["LL128"]
            return bf["ring"]["Simple"]
        if proto == "LL128":
            f = bf["tree"]["LL128_single_node"] if comm.n_nodes == 1 else bf["tree"]["LL128"]
        else:
            f = bf["tree"][proto]
        log_size = int(math.log2(max(size >> 6, 1)))
        table = self.k.tree_correction[proto]
        return f * (table[log_size] if log_size < len(table) else 1.0)

    def _max_rate(self, algo: str, proto: str, op: str, comm: Communicator) -> float:
        """NCCL's per-channel ceilings of this GPU's architecture (nccl.yaml
        ``per_channel_ceilings``, tuning.cc of NCCL 2.28) times the channels, as a cap on
        the flow's rate; point-to-point (``direct``: all_to_all, send/recv) has none."""
        k, cap = self.k, math.inf
        ch = k.channels
        n_idx = _n_idx(comm.n_nodes)
        row = self.ceilings
        if algo == "ring" and proto == "LL":
            cap = row["ll"][n_idx]
        if algo == "ring" and proto == "LL128":
            cap = row["ring_ll128"][n_idx] * ch
        if algo == "tree":
            cap = row["tree"][n_idx] * ch
            if proto == "LL":
                cap = min(cap, row["ll"][n_idx])
            if proto == "LL128":
                cap = min(cap, row["tree_ll128"][n_idx] * ch)
        if self.sm80 and op in REDUCING_OPS:
            # NCCL's tuner caps A100 bus bandwidth at 235 GB/s. Measured A100 all_reduce
            # plateaus there, while copy-only collectives go past it, so the cap is taken as
            # the rate of the reduction kernels and applied to reducing collectives only.
            cap = min(cap, k.sm80_bus_bw_cap)
        return cap

    def _ring_rate(self, comm: Communicator, root: int) -> float:
        es = self._edge_set("all_reduce", "ring", comm, root, None)
        links, coef = es.arrays()
        return bottleneck_rate(Flow(1.0, links, coef), self.cluster.capacity_bytes_per_s,
                               es.link_index())

    # -------------------------------------------------------------------- plan
    def plan(self, op: str, size_bytes: int, ranks: list[int], algo: str = "auto",
             proto: str = "auto", root: int = 0) -> Plan:
        """Lay out and cost one collective; ``auto`` picks as NCCL's tuner does. ``star``
        (reduce/broadcast by copies, TensorFlow's copy-based reductions) is only chosen by
        name (:mod:`simulator.collectives.copies`)."""
        if algo == "star":
            return star_plan(self, op, size_bytes, ranks, root)
        comm = self._communicator(ranks)
        if comm.n_ranks == 1:
            return self.local_plan(op, size_bytes)
        p2p = op in ("all_to_all", "send_recv")
        algos = self._candidates(op, comm) if algo == "auto" else (algo,)
        if p2p:
            # NCCL picks the p2p protocol by size, not by the tuner.
            per_peer = size_bytes / comm.n_ranks if op == "all_to_all" else size_bytes
            auto = "LL" if per_peer <= self.k.p2p_ll_threshold_bytes else "Simple"
            if proto not in ("auto", auto):
                raise ConfigError(f"{op} of {per_peer:.0f} B per peer uses the {auto} "
                                  f"protocol (NCCL_P2P_LL_THRESHOLD = "
                                  f"{self.k.p2p_ll_threshold_bytes} B); got {proto}",
                                  field="proto")
            protos = (auto,)
        else:
            protos = self.nccl.allowed_protos() if proto == "auto" else (proto,)
        forced = (region_choice(self.ofi_platform, op, size_bytes, comm.n_ranks, comm.n_nodes,
                                lambda a, p: a in algos and p in protos)
                  if algo == "auto" and proto == "auto" and not p2p else None)
        if forced:      # aws-ofi-nccl's tuner plugin overrides NCCL's choice (ofi_tuner.py)
            algos, protos = (forced[0],), (forced[1],)
        elif algo == "auto" and proto == "auto" and not p2p and "ring" in algos:
            # where the plugin leaves the choice (an all_gather or reduce_scatter ring
            # across AWS instances), NCCL's own tuner picks the ring's protocol with its
            # own view of the instance (nccl_own_tuner.py)
            own = ring_protocol(self.ofi_platform, op, size_bytes, comm.n_ranks,
                                comm.n_nodes, protos)
            if own:
                algos, protos = ("ring",), (own,)
        best, best_tuner_s = None, math.inf
        for a in algos:
            if a not in ALGOS_FOR_OP[op]:
                raise ConfigError(f"algorithm {a!r} does not implement {op}; "
                                  f"choose from {', '.join(ALGOS_FOR_OP[op])}", field="algo")
            check_available(self._unavailable(op, a, comm))
            for p in simple_only(a, protos, proto):
                plan, tuner_s = self._plan_one(op, a, p, comm, size_bytes, root, ranks)
                if best is None or tuner_s < best_tuner_s:
                    best, best_tuner_s = plan, tuner_s
        return best

    def _communicator(self, ranks) -> Communicator:
        """``make_communicator`` of ``ranks``, kept per rank list where it is long (a
        collective across every server is planned for each of its sizes and operations;
        the pairs and small groups planned one by one are not kept) or its ring was laid
        out ahead (:meth:`lay_out_rings`)."""
        key = tuple(ranks)
        comm = self._comms.get(key)
        if comm is None:
            comm = make_communicator(self.cluster, ranks)
            if len(ranks) >= 64:
                self._comms[key] = comm
        return comm

    def lay_out_rings(self, op: str, groups, algo: str = "auto", root: int = 0) -> None:
        """Lay out together the rings that :meth:`plan` of ``op`` would lay out group by
        group for each of ``groups`` (rank lists across servers), kept where
        :meth:`_edge_set` finds them: the same edge sets
        (:func:`~simulator.collectives.layouts.ring_edge_sets`)."""
        if (algo not in ("auto", "ring") or "ring" not in ALGOS_FOR_OP[op]
                or op in ("broadcast", "reduce") or not blocks_exact(self.cluster, self.host_path)):
            return
        comms: dict = {}
        for group in groups:
            ranks = tuple(group)
            comm = self._communicator(ranks)
            key = ("", "ring", comm, root, None)
            if comm.n_nodes > 1 and key not in self._edges:
                self._comms[ranks] = comm
                comms.setdefault(key, comm)
        if comms:
            laid = ring_edge_sets(self.cluster, list(comms.values()),
                                  self.k.pcie_p2p_efficiency)
            self._edges.update(zip(comms, laid))

    def laid_ring(self, op: str, ranks, algo: str = "auto", root: int = 0) -> LaidRing | None:
        """The ring of ``ranks`` (a group across servers) laid out ahead by
        :meth:`lay_out_rings`, where :meth:`plan` of ``op`` has no algorithm but the ring to
        compare (``algo`` ring, or auto where the others are unavailable); None elsewhere.
        Its ``shape`` is all that such a plan reads besides the link ids: the
        communicator's ranks, servers and ranks per server, the class of the links inside a
        server, a link latency what-if's step latencies, the ring's coefficients, which of
        its entries cross one link (each entry named by the first entry on its link), and
        each entry's capacity now. NCCL's tuner, the latency, the factors, the ceilings and
        the bottleneck rate (each link's coefficients summed in entry order, the least
        capacity / load) follow from those, so two groups of one shape get one plan, each on
        its own links (:mod:`.groups`)."""
        if algo not in ("auto", "ring") or op in ("broadcast", "reduce", "all_to_all",
                                                  "send_recv"):
            return None
        comm = self._comms.get(tuple(ranks))
        ring = None if comm is None else self._edges.get(("", "ring", comm, root, None))
        if ring is None or comm.n_nodes < 2:
            return None
        if algo == "auto" and self._candidates(op, comm) != ("ring",):
            return None
        links, coef = ring.arrays()
        _, first, where = distinct_where(links, first=True, inverse=True)
        shape = (comm.n_ranks, comm.n_nodes, comm.ppn, ring.intra_hw, ring.step_extra_s(),
                 coef.dtype.str, coef.tobytes(), first[where].tobytes(),
                 self.cluster.capacity_bytes_per_s[links].tobytes())
        return LaidRing(shape, links, ring.wire_coef())

    def plan_pairs(self, size_bytes: int, pairs: list[tuple[int, int]]) -> list[Plan]:
        """``plan("send_recv", size_bytes, [a, b])`` of each (a, b) of ``pairs``, one per
        pair shape (:mod:`simulator.collectives.pairs`)."""
        with gc_paused():       # a plan per pair, no cycles
            return pair_plans(self, size_bytes, pairs, self._pair_shapes)

    def plan_groups(self, op: str, size_bytes: int, groups, algo: str = "auto",
                    proto: str = "auto", root: int = 0) -> list[Plan]:
        """``plan(op, size_bytes, list(g), algo, proto, root)`` of each group ``g`` of
        ``groups``, one per group shape inside a server (:mod:`simulator.collectives.groups`)."""
        with gc_paused():       # a plan per group, no cycles
            return group_plans(self, op, size_bytes, groups, algo, proto, root,
                               self._group_shapes)

    def _unavailable(self, op: str, algo: str, comm: Communicator) -> str | None:
        """Why the hardware cannot run ``algo`` for ``op`` on ``comm`` (None if it can)."""
        if algo.startswith("nvls"):
            return nvls_unavailable(self, op, algo, comm)
        if algo.startswith("collnet"):
            return collnet_unavailable(self, op, algo, comm)
        if algo == "pat":
            return pat_unavailable(op, comm)
        if algo == "one_shot":
            return one_shot_unavailable(self, op, comm)
        return None

    def _candidates(self, op: str, comm: Communicator) -> tuple[str, ...]:
        """What NCCL's tuner compares for ``op``: the op's algorithms that this NCCL
        release and its knobs allow and the hardware can run."""
        allowed = self.nccl.allowed_algos()
        out = tuple(a for a in ALGOS_FOR_OP[op]
                    if a in allowed and self._unavailable(op, a, comm) is None)
        if not out and not any(a in allowed for a in ALGOS_FOR_OP[op]):
            # NCCL_ALGO names none of this op's algorithms: NCCL keeps the ring available
            # ("at least set ring algo available", tuning.cc 2.19+)
            return ("ring",)
        if not out:
            why = [r for a in ALGOS_FOR_OP[op] if a in allowed
                   for r in (self._unavailable(op, a, comm),) if r]
            raise ConfigError(f"no algorithm left for {op}: NCCL {self.nccl.version} with "
                              f"algo={self.nccl.algo!r} allows "
                              f"{', '.join(a for a in ALGOS_FOR_OP[op] if a in allowed) or 'none'}"
                              f" of {', '.join(ALGOS_FOR_OP[op])}"
                              + (f", and {'; '.join(why)}" if why else ""), field="nccl.algo")
        return out

    def local_plan(self, op: str, size: int) -> Plan:
        """The plan of ``op`` of ``size`` bytes on one rank: nothing crosses a link, but
        NCCL still launches a kernel (a local copy), so it takes the launch overhead."""
        empty = np.zeros(0, np.int64)
        lat = self.k.launch_overhead_s
        return Plan(op, "local", "Simple", 1, 1, size, lat, 0.0, empty, np.zeros(0), math.inf,
                    lat)

    def _plan_one(self, op, algo, proto, comm, size, root, ranks) -> Plan:
        if algo in OFFLOAD_ALGOS:
            return offload_plan(self, op, algo, comm, size)
        pairs = None
        if op == "send_recv":
            pairs = ((self.cluster.gpus[ranks[0]], self.cluster.gpus[ranks[1]]),)
        es = self._edge_set(op, algo, comm, root, pairs)
        links, coef = es.arrays()
        factor = self._factor(algo, proto, op, comm, size)
        coef = coef / factor
        payload = _payload(op, algo, size, comm.n_ranks)
        nccl_latency = (pat_latency_s(self, comm) if algo == "pat" else
                        one_shot_latency_s(self) if algo == "one_shot" else
                        self.latency_s(op, algo, proto, comm, es.intra_hw, size))
        timed = nccl_latency + (timing_correction_s(self.k, proto, comm.n_nodes)
                                if algo == "tree" else 0.0)
        if algo == "tree":
            timed += plugin_levels_s(self.latency_inter_s, proto, comm.n_nodes)
        latency = self.with_link_latency(timed, algo, proto,
                                         self.link_latency_extra_s(op, algo, comm, es))
        max_rate = self._max_rate(algo, proto, op, comm)
        if algo == "tree" and payload:
            # NCCL models a tree at half the bus bandwidth of its rings ("ratio = .5" in
            # ncclTopoTuneModel); real trees do not beat that, so it is also a ceiling.
            max_rate = min(max_rate, 0.5 * factor * self._ring_rate(comm, root))
        flow = Flow(payload, links, coef, latency, max_rate)
        rate = bottleneck_rate(flow, self.cluster.capacity_bytes_per_s, es.link_index()) \
            if payload else math.inf
        transfer = payload / rate if payload else 0.0
        plan = Plan(op, algo, proto, comm.n_ranks, comm.n_nodes, size, latency, payload,
                    links, coef, max_rate, latency + transfer, wire_coef=es.wire_coef())
        # NCCL's tuner never measures a link's latency: it chooses on its own constants.
        return plan, nccl_latency + transfer
