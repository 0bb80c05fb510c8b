"""The ``clustersim`` command line.

Each subcommand is one small function registered on the :func:`cli` group; shared pieces
(argument types, rank specs, table rendering) live in :mod:`simulator.cli_util`.

:func:`main` is the console script. Every user mistake (bad option, bad size, bad rank,
bad topology file) ends as ONE line on stderr, ``clustersim: error: ...``, with exit code 2;
Ctrl-C exits with 130. A traceback means a bug in clustersim, not in the input.
"""

from __future__ import annotations

import os
import sys

import click

from . import __version__
from .choices import ALGOS, ALGOS_FOR_OP, ECMP_MODES, FIDELITIES, PROTOS
from .cli_util import (OpType, SizeType, describe_sizes, format_ranks, parse_ranks,
                       render_rows, result_row, sweep_length, topology_summary)
from .errors import ClusterSimError, ConfigError
from .units import UnitError, format_size

PROG = "clustersim"
DEFAULT_TOPOLOGY = "dgx-a100"
MAX_SIZES = 10_000
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


# ------------------------------------------------------------------------------ group
@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name=PROG,
                      message="%(prog)s %(version)s")
def cli() -> None:
    """clustersim: simulate GPU clusters, their fabrics, NCCL-style collectives and
    training iterations.

    `run` replays one training iteration of a scenario (scenarios/, default quickstart:
    Llama-2-7B with FSDP on one DGX A100) and says how long it takes, where the time goes
    and how much memory each GPU needs. `collective` predicts collectives like nccl-tests.
    Clusters come from topology YAML files (shipped ones by bare name, e.g. dgx-a100,
    dgx-a100-superpod).
    """


# -------------------------------------------------------------------------- helpers
def _load(topology: str, nodes: int | None, option: str):
    """(path, graph) of a topology name or file; errors name ``option`` or the file."""
    from .topology.loader import load_topology, resolve_topology
    try:
        path = resolve_topology(topology)
    except ConfigError as exc:
        raise ConfigError(exc.reason, source=option) from None
    return path, load_topology(path, nodes=nodes)


def _bad(message: str, option: str):
    return click.BadParameter(message, param_hint=f"'{option}'")


def _choose_ranks(op: str, spec: str | None, n_gpus: int) -> list[int]:
    if op == "send_recv":
        if spec is None:
            if n_gpus < 2:
                raise _bad(f"send_recv needs 2 GPUs; the cluster has {n_gpus}", "--ranks")
            return [0, 1]
        ranks = parse_ranks(spec, n_gpus)
        if len(ranks) != 2:
            raise _bad(f"send_recv takes exactly 2 ranks (sender,receiver), got "
                       f"{len(ranks)} from {spec!r}", "--ranks")
        return ranks
    return list(range(n_gpus)) if spec is None else parse_ranks(spec, n_gpus)


def _root_position(cluster, ranks: list[int], root: int | None) -> int:
    """``--root`` (a global rank among ``ranks``) as a position in the communicator."""
    from .collectives.layouts import make_communicator
    root = min(ranks) if root is None else root
    if root not in ranks:
        raise _bad(f"root {root} is not one of the ranks ({format_ranks(ranks)})", "--root")
    return make_communicator(cluster, ranks).gpus.index(cluster.gpus[root])


# ------------------------------------------------------------------------ collective
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
@click.option("-f", "--step-factor", type=click.FloatRange(min=1, min_open=True), default=2.0,
              show_default=True, help="Multiply the size by this between steps.")
@click.option("--algo", type=click.Choice(("auto",) + ALGOS), default="auto",
              show_default=True, help="Algorithm; auto picks as NCCL's tuner does.")
@click.option("--proto", type=click.Choice(("auto",) + PROTOS), default="auto",
              show_default=True, help="Protocol; auto picks as NCCL's tuner does.")
@click.option("--fidelity", type=click.Choice(tuple(FIDELITIES)), default="flow",
              show_default=True, help="Network model: " + "; ".join(
                  f"{k}: {v}" for k, v in FIDELITIES.items()) + ".")
@click.option("--ecmp", type=click.Choice(ECMP_MODES), default="spread",
              show_default=True, help="Multipath: split evenly, or hash each flow to one path.")
@click.option("--seed", type=int, default=0, show_default=True, help="ECMP hash seed.")
@click.option("--root", type=click.IntRange(min=0), default=None,
              help="Root rank of broadcast/reduce [default: lowest rank].")
@click.option("-G", "--cuda-graph", is_flag=True,
              help="Collectives replayed from a CUDA graph (nccl-tests -G): no per-call "
                   "launch overhead.")
@click.option("--format", "fmt", type=click.Choice(("table", "csv", "json")), default="table",
              show_default=True, help="Output format.")
def collective_cmd(op, topology, nodes, ranks, min_bytes, max_bytes, step_factor, algo, proto,
                   fidelity, ecmp, seed, root, cuda_graph, fmt) -> None:
    """Sweep sizes of one collective OP, like nccl-tests' *_perf binaries.

    OP is all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all or
    send_recv; nccl-tests names (all_reduce_perf, allreduce, sendrecv, alltoall...) work too.
    GB/s are 1e9 bytes/s, as in nccl-tests.
    """
    from .collectives.constants import load_constants, with_cuda_graph
    from .collectives.model import CollectiveModel
    from .collectives.run import run_collective, size_sweep
    from .cluster import Cluster

    if algo != "auto" and algo not in ALGOS_FOR_OP[op]:
        raise _bad(f"{algo} does not implement {op}; choose auto or "
                   f"{', '.join(ALGOS_FOR_OP[op])}", "--algo")
    if min_bytes > max_bytes:
        raise _bad(f"{format_size(min_bytes)} is larger than --max-bytes "
                   f"{format_size(max_bytes)}", "--min-bytes")
    if sweep_length(min_bytes, max_bytes, step_factor) > MAX_SIZES:
        raise _bad(f"{step_factor:g} gives more than {MAX_SIZES} sizes from "
                   f"{format_size(min_bytes)} to {format_size(max_bytes)}; use a larger factor",
                   "--step-factor")
    sizes = list(dict.fromkeys(size_sweep(min_bytes, max_bytes, step_factor)))

    path, G = _load(topology, nodes, "--topology")
    constants = load_constants()
    cluster = Cluster.from_graph(G, constants, ecmp=ecmp, seed=seed)
    rank_list = _choose_ranks(op, ranks, cluster.n_gpus)
    root_pos = _root_position(cluster, rank_list, root) if op in ("broadcast", "reduce") else 0
    model = CollectiveModel(cluster, with_cuda_graph(constants) if cuda_graph else constants)

    rows = [result_row(run_collective(model, op, s, rank_list, algo, proto, fidelity, root_pos))
            for s in sizes]
    n_nodes = len({int(cluster.server_of_rank[r]) for r in rank_list})
    header = [
        f"{PROG} {__version__}: {op}, {describe_sizes(sizes)}, step factor {step_factor:g}",
        f"topology: {G.graph.get('name', path.stem)} ({path})",
        f"GPUs: {cluster.n_gpus} x {G.graph.get('gpu', '?')} in {G.graph.get('nodes', '?')} "
        f"node(s); ranks: {len(rank_list)} ({format_ranks(rank_list)}) on {n_nodes} node(s)",
        f"op: {op}  algo: {algo}  proto: {proto}  fidelity: {fidelity}  ecmp: {ecmp}  "
        f"seed: {seed}" + ("  cuda graph" if cuda_graph else "") + (f"  root: {min(rank_list) if root is None else root}"
                           if op in ("broadcast", "reduce") else ""),
    ]
    click.echo(render_rows(rows, fmt, header))


# -------------------------------------------------------------------------- topology
@cli.command("topology")
@click.argument("topology", default=DEFAULT_TOPOLOGY, metavar="[FILE|NAME]")
@click.option("--nodes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Number of servers (multi-node topologies only).")
def topology_cmd(topology, nodes) -> None:
    """Summarise a topology: servers, GPUs, NICs, switches, links, leaf ratio.

    FILE|NAME is a topology YAML file or a shipped name [default: dgx-a100].
    """
    path, G = _load(topology, nodes, "TOPOLOGY")
    click.echo("\n".join(topology_summary(G, path)))


from .cli_capacity import register as _register_capacity  # noqa: E402
from .cli_compare import register as _register_compare  # noqa: E402
from .cli_import import register as _register_import  # noqa: E402
from .cli_reliability import register as _register_reliability  # noqa: E402
from .cli_run import register as _register_run  # noqa: E402
from .cli_study import register as _register_study  # noqa: E402
from .validation.cli import register as _register_validate  # noqa: E402

for _register in (_register_run, _register_capacity, _register_compare, _register_reliability,
                  _register_study, _register_import, _register_validate):
    _register(cli)


# ------------------------------------------------------------------------ entry point
def _fail(message: str, code: int = EXIT_USAGE):
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    click.echo(f"{PROG}: error: {line}", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console script: run :func:`cli`, turning user mistakes into one line and exit 2."""
    no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
    try:
        rc = cli.main(args=argv, prog_name=PROG, standalone_mode=False)
    except no_args_help as exc:              # bare `clustersim` (click >= 8.2): show help
        click.echo(exc.ctx.get_help())
        rc = 0
    except click.UsageError as exc:
        hint = (f" (see '{exc.ctx.command_path} --help')"
                if exc.ctx is not None and not isinstance(exc, click.BadParameter) else "")
        _fail(exc.format_message() + hint)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except (ClusterSimError, UnitError) as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, click.exceptions.Abort):
        _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:                   # `clustersim ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
