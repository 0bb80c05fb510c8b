"""`clustersim collective`: sweep the sizes of one collective, like nccl-tests' *_perf
binaries, and print their table."""

from __future__ import annotations

import json
import math

import click

from .. import __version__
from ..errors import ConfigError
from ..choices import ALGOS, ALGOS_FOR_OP, ECMP_MODES, FIDELITIES, PROTOS
from ..units import format_size
from .collective_topology import load_collective_topology, located
from .common import (DEFAULT_TOPOLOGY, PROG, FactorType, OpType, SizeType, bad_parameter, format_ranks,
                     parse_ranks)

MAX_SIZES = 10_000


# ----------------------------------------------------------------------- result tables
COLUMNS = ("size_bytes", "count", "type", "time_us", "algbw_GBps", "busbw_GBps", "algorithm",
           "protocol")
FLOAT_BYTES = 4
_PER_RANK_COUNT = ("all_gather", "reduce_scatter", "all_to_all")


def element_count(op: str, size_bytes: int, n_ranks: int) -> int:
    """The ``count`` column of nccl-tests for a float buffer of ``size_bytes``.

    As nccl-tests prints it: elements per rank for all_gather, reduce_scatter and
    all_to_all (their size is the whole gathered buffer), else elements in the buffer.
    """
    if op in _PER_RANK_COUNT:
        return size_bytes // (FLOAT_BYTES * n_ranks)
    return size_bytes // FLOAT_BYTES


def _whole_elements(op: str, sizes: list[int], n_ranks: int) -> tuple[list[int], str]:
    """``sizes`` without those that give each rank no whole float (all_gather,
    reduce_scatter and all_to_all split the buffer over the ranks: 8 B on 32 ranks is no
    element each, ``count 0``), and a header line saying which were left out.

    :raises ConfigError: (``-e/--max-bytes``) when no size is left.
    """
    if op not in _PER_RANK_COUNT:
        return sizes, ""
    least = FLOAT_BYTES * n_ranks
    kept = [s for s in sizes if s >= least]
    if not kept:
        raise ConfigError(f"every size is below {least} B, one float per rank of {op} on "
                          f"{n_ranks} ranks", source="-e/--max-bytes")
    if len(kept) == len(sizes):
        return sizes, ""
    return kept, (f"sizes below {least} B (one float per rank on {n_ranks} ranks) left out: "
                  f"{', '.join(str(s) for s in sizes if s < least)}")


def result_row(res) -> dict:
    """One CollectiveResult as a row of :data:`COLUMNS` (GB/s = 1e9 bytes/s)."""
    return {
        "size_bytes": res.size_bytes,
        "count": element_count(res.op, res.size_bytes, res.n_ranks),
        "type": "float",
        "time_us": res.time_s * 1e6,
        "algbw_GBps": res.algbw_bytes_per_s / 1e9,
        "busbw_GBps": res.busbw_bytes_per_s / 1e9,
        "algorithm": res.algorithm,
        "protocol": res.protocol,
    }


def render_rows(rows: list[dict], fmt: str, header: list[str]) -> str:
    """Rows as an nccl-tests table (with ``# header`` lines), CSV, or a JSON list."""
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        import pandas as pd
        return pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(index=False).rstrip("\n")
    lines = [f"# {h}" if h else "#" for h in header]
    lines.append("#")
    lines.append(f"#{'size':>11} {'count':>13} {'type':>6} {'time':>10} {'algbw':>8} "
                 f"{'busbw':>8}  {'algorithm':>9} {'protocol':>8}")
    lines.append(f"#{'(B)':>11} {'(elements)':>13} {'':>6} {'(us)':>10} {'(GB/s)':>8} "
                 f"{'(GB/s)':>8}")
    for r in rows:
        lines.append(f"{r['size_bytes']:>12} {r['count']:>13} {r['type']:>6} "
                     f"{r['time_us']:>10.2f} {r['algbw_GBps']:>8.2f} {r['busbw_GBps']:>8.2f}  "
                     f"{r['algorithm']:>9} {r['protocol']:>8}")
    avg = sum(r["busbw_GBps"] for r in rows) / len(rows) if rows else 0.0
    lines.append(f"# Avg bus bandwidth    : {avg:g}")
    return "\n".join(lines)


def describe_sizes(sizes: list[int]) -> str:
    n = len(sizes)
    return f"{format_size(sizes[0])} .. {format_size(sizes[-1])} ({n} size{'s' * (n != 1)})"


def sweep_length(min_bytes: int, max_bytes: int, step_factor: float) -> int:
    """How many sizes ``size_sweep`` would produce (without building them)."""
    if math.isinf(step_factor):
        return 1
    return int(math.log(max_bytes / min_bytes) / math.log(step_factor) + 1e-9) + 1


# ---------------------------------------------------------------------------- command
def _choose_ranks(op: str, spec: str | None, n_gpus: int) -> list[int]:
    if op == "send_recv":
        if spec is None:
            if n_gpus < 2:
                raise bad_parameter(f"send_recv needs 2 GPUs; the cluster has {n_gpus}",
                                    "--ranks")
            return [0, 1]
        ranks = parse_ranks(spec, n_gpus)
        if len(ranks) != 2:
            raise bad_parameter(f"send_recv takes exactly 2 ranks (sender,receiver), got "
                                f"{len(ranks)} from {spec!r}", "--ranks")
        return ranks
    return list(range(n_gpus)) if spec is None else parse_ranks(spec, n_gpus)


def _root_position(cluster, ranks: list[int], root: int | None) -> int:
    """``--root`` (a global rank among ``ranks``) as a position in the communicator."""
    from ..collectives.layouts import make_communicator
    root = min(ranks) if root is None else root
    if root not in ranks:
        raise bad_parameter(f"root {root} is not one of the ranks ({format_ranks(ranks)})",
                            "--root")
    return make_communicator(cluster, ranks).gpus.index(cluster.gpus[root])


_NCCL_OPTIONS = {"nccl_version": ("version", "--nccl-version"),
                 "nccl_algo": ("algo", "--nccl-algo"), "nccl_proto": ("proto", "--nccl-proto"),
                 "min_channels": ("min_channels", "--min-channels"),
                 "max_channels": ("max_channels", "--max-channels"),
                 "collnet": ("collnet_enable", "--collnet"),
                 "ib_qps": ("ib_qps_per_connection", "--ib-qps")}


def nccl_options(no_nvls: bool = False, **given):
    """The :class:`~simulator.collectives.nccl_config.NcclConfig` of the NCCL options; a
    bad value is a usage error of its option."""
    from pydantic import ValidationError

    from ..collectives.nccl_config import NcclConfig
    fields = {_NCCL_OPTIONS[k][0]: v for k, v in given.items() if v is not None and v is not False}
    if no_nvls:
        fields["nvls_enable"] = False
    try:
        return NcclConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        option = next(o for f, o in _NCCL_OPTIONS.values() if f == err["loc"][0])
        raise bad_parameter(err["msg"].removeprefix("Value error, "), option) from None


def nccl_note(nccl) -> str:
    """The header words of the NCCL knobs that differ from the defaults."""
    from ..collectives.nccl_config import NcclConfig
    default = NcclConfig()
    changed = [f"{k}={v}" for k, v in nccl.model_dump().items()
               if v != getattr(default, k) or (k == "version" and nccl.tuner_release())]
    return ("  nccl: " + " ".join(changed)) if changed else ""


def register(cli: click.Group) -> None:
    """Add ``collective`` to the ``clustersim`` group."""

    @cli.command("collective")
    @click.argument("op", type=OpType())
    @click.option("--topology", default=DEFAULT_TOPOLOGY, show_default=True,
                  metavar="FILE|NAME", help="Topology YAML file or shipped topology name.")
    @click.option("--nodes", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Number of servers (multi-node topologies only).")
    @click.option("--ranks", default=None, metavar="SPEC",
                  help="Ranks taking part, e.g. 0-7, 0,8,16 or 0-3,8-11 "
                       "[default: all GPUs; 0,1 for send_recv].")
    @click.option("-b", "--min-bytes", type=SizeType(), default="8", show_default=True,
                  help="Smallest size (8, 64K, 1M, 8G; binary prefixes).")
    @click.option("-e", "--max-bytes", type=SizeType(), default="8G", show_default=True,
                  help="Largest size.")
    @click.option("-f", "--step-factor", type=FactorType(),
                  default=2.0, show_default=True,
                  help="Multiply the size by this between steps.")
    @click.option("--algo", type=click.Choice(("auto",) + ALGOS), default="auto",
                  show_default=True, help="Algorithm; auto picks as NCCL's tuner does "
                  "(on AWS p5 all_reduce, as aws-ofi-nccl's tuner plugin does).")
    @click.option("--proto", type=click.Choice(("auto",) + PROTOS), default="auto",
                  show_default=True, help="Protocol; auto picks as NCCL's tuner does.")
    @click.option("--fidelity", type=click.Choice(tuple(FIDELITIES)), default="flow",
                  show_default=True, help="Network model: " + "; ".join(
                      f"{k}: {v}" for k, v in FIDELITIES.items()) + ".")
    @click.option("--ecmp", type=click.Choice(ECMP_MODES), default="spread",
                  show_default=True,
                  help="Multipath: split evenly, or hash each flow to one path.")
    @click.option("--seed", type=int, default=0, show_default=True, help="ECMP hash seed.")
    @click.option("--root", type=click.IntRange(min=0), default=None,
                  help="Root rank of broadcast/reduce [default: lowest rank].")
    @click.option("-G", "--cuda-graph", is_flag=True,
                  help="Collectives replayed from a CUDA graph (nccl-tests -G): no per-call "
                       "launch overhead.")
    @click.option("--nccl-version", default=None, metavar="X.Y",
                  help="NCCL release: the tuner offers only the algorithms it has (NVLS "
                       "2.17, NVLS-Tree 2.18, PAT 2.23) and uses that release's tuning.cc "
                       "constants (2.7, 2.19, 2.28 tables); below 2.12 no PXN (a NIC off "
                       "the GPU's PCIe switch is reached through the CPU) [default: 2.21's "
                       "algorithms with the calibrated constants].")
    @click.option("--nccl-algo", default=None, metavar="LIST",
                  help="NCCL_ALGO: algorithms the tuner may choose, e.g. ring,tree or ^nvls.")
    @click.option("--nccl-proto", default=None, metavar="LIST",
                  help="NCCL_PROTO: protocols the tuner may choose, e.g. ^LL128.")
    @click.option("--min-channels", type=int, default=None, metavar="N",
                  help="NCCL_MIN_NCHANNELS (1-64).")
    @click.option("--max-channels", type=int, default=None, metavar="N",
                  help="NCCL_MAX_NCHANNELS (1-64): fewer channels lower NCCL's per-channel "
                       "bandwidth ceilings.")
    @click.option("--collnet", is_flag=True,
                  help="NCCL_COLLNET_ENABLE=1: let the tuner use IB SHARP (CollNet) on "
                       "fabrics with SHARP switches.")
    @click.option("--no-nvls", is_flag=True, help="NCCL_NVLS_ENABLE=0.")
    @click.option("--ib-qps", type=int, default=None, metavar="N",
                  help="NCCL_IB_QPS_PER_CONNECTION (1-128): with --ecmp hash each queue "
                       "pair is hashed to its own path between servers [default: 1].")
    @click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                  help="Change a key of the topology file before building it (repeatable), "
                       "e.g. a degraded fabric: --set params.node.nics=4 (fewer usable NICs "
                       "per server), --set 'links={ib-ndr: {bw: 200 Gb/s}}' (a link below "
                       "line rate), --set params.sharp=false.")
    @click.option("--format", "fmt", type=click.Choice(("table", "csv", "json")),
                  default="table", show_default=True, help="Output format.")
    def collective_cmd(op, topology, nodes, ranks, min_bytes, max_bytes, step_factor, algo,
                       proto, fidelity, ecmp, seed, root, cuda_graph, nccl_version, nccl_algo,
                       nccl_proto, min_channels, max_channels, collnet, no_nvls, ib_qps,
                       sets, fmt) -> None:
        """Sweep sizes of one collective OP, like nccl-tests' *_perf binaries.

        OP is all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or
        send_recv; nccl-tests names (all_reduce_perf, allreduce, sendrecv, alltoall...) work too.
        GB/s are 1e9 bytes/s, as in nccl-tests.
        """
        if algo != "auto" and algo not in ALGOS_FOR_OP[op]:
            raise bad_parameter(f"{algo} does not implement {op}; choose auto or "
                                f"{', '.join(ALGOS_FOR_OP[op])}", "--algo")
        if min_bytes > max_bytes:
            raise bad_parameter(f"{format_size(min_bytes)} is larger than --max-bytes "
                                f"{format_size(max_bytes)}", "--min-bytes")
        if sweep_length(min_bytes, max_bytes, step_factor) > MAX_SIZES:
            raise bad_parameter(f"{step_factor:g} gives more than {MAX_SIZES} sizes from "
                                f"{format_size(min_bytes)} to {format_size(max_bytes)}; use "
                                f"a larger factor", "--step-factor")
        nccl = nccl_options(nccl_version=nccl_version, nccl_algo=nccl_algo,
                            nccl_proto=nccl_proto, min_channels=min_channels,
                            max_channels=max_channels, collnet=collnet, no_nvls=no_nvls,
                            ib_qps=ib_qps)
        path, G = load_collective_topology(topology, nodes, sets)
        from ..cluster import Cluster           # the simulator: once the input is good
        from ..constants import load_constants, with_cuda_graph
        from ..collectives.model import CollectiveModel
        from ..collectives.run import run_collective, size_sweep
        sizes = list(dict.fromkeys(size_sweep(min_bytes, max_bytes, step_factor)))
        constants = load_constants()
        cluster = Cluster.from_graph(G, constants, ecmp=ecmp, seed=seed,
                                     qps=nccl.ib_qps_per_connection)
        rank_list = _choose_ranks(op, ranks, cluster.n_gpus)
        rooted = op in ("broadcast", "reduce")
        root_pos = _root_position(cluster, rank_list, root) if rooted else 0
        model = CollectiveModel(cluster, with_cuda_graph(constants) if cuda_graph else constants,
                                nccl)
        sizes, too_small = _whole_elements(op, sizes, len(rank_list))

        try:
            rows = [result_row(run_collective(model, op, s, rank_list, algo, proto, fidelity,
                                              root_pos)) for s in sizes]
        except ConfigError as exc:
            raise located(exc, path) from None
        n_nodes = len({int(cluster.server_of_rank[r]) for r in rank_list})
        header = [
            f"{PROG} {__version__}: {op}, {describe_sizes(sizes)}, step factor {step_factor:g}",
            f"topology: {G.graph.get('name', path.stem)} ({path})"
            + (f"  set: {' '.join(sets)}" if sets else ""),
            f"GPUs: {cluster.n_gpus} x {G.graph.get('gpu', '?')} in {G.graph.get('nodes', '?')} "
            f"node(s); ranks: {len(rank_list)} ({format_ranks(rank_list)}) on {n_nodes} node(s)",
            f"op: {op}  algo: {algo}  proto: {proto}  fidelity: {fidelity}  ecmp: {ecmp}  "
            f"seed: {seed}" + ("  cuda graph" if cuda_graph else "") + nccl_note(nccl)
            + (f"  root: {min(rank_list) if root is None else root}" if rooted else ""),
        ] + ([too_small] if too_small else [])
        click.echo(render_rows(rows, fmt, header))
