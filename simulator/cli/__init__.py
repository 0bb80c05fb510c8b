"""The ``clustersim`` command line.

Each command lives in its own module of this package (``collective``, ``topology``,
``run`` with ``trace``, ``capacity``, ``compare``, ``plan``, ``reliability``, ``study``, ``replay``
with ``import``, ``validate``, ``fleet`` (the ``cluster`` command)), whose ``register`` adds it to the :func:`cli` group; shared
pieces (argument types, rank specs, the metrics lines) live in :mod:`simulator.cli.common`.

:func:`main` is the console script. Every user mistake (bad option, bad size, bad rank,
bad topology file) ends as ONE line on stderr, ``clustersim: error: ...``, with exit code 2;
Ctrl-C exits with 130. A traceback means a bug in clustersim, not in the input.
"""

from __future__ import annotations

import gc
import os
import sys

# A command's start (the imports, then a scenario's models, cluster and trace) allocates
# hundreds of thousands of objects that live to the end and makes no garbage cycles worth
# a pass: at the collector's default pace (a pass per 700 allocations) its passes walk
# what the imports made again and again and free next to nothing. A pass per 100,000
# allocations instead (the older generations' pace kept); `run` and the replays pause the
# collector where they build (:mod:`simulator.gcpause`).
gc.set_threshold(100_000, *gc.get_threshold()[1:])

# The simulator runs on one thread and asks BLAS for nothing large: OpenBLAS's own threads
# (one per core, started as numpy loads) would only spin on the other cores: CPU at every
# start and a competitor of the simulation on a small loaded machine. Set
# before numpy is first imported; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click  # noqa: E402  (after the environment above, like every import below)

from .. import __version__
from ..errors import ClusterSimError
from ..lifetime import ends_with_exit
from ..units import UnitError
from . import (capacity, collective, compare, fleet, listing, plan, reliability, replay,
               run, study, topology, validate)
from .common import PROG

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


for _register in (collective.register, topology.register, run.register, capacity.register,
                  compare.register, plan.register, reliability.register, study.register,
                  replay.register, validate.register, fleet.register, listing.register):
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


def entry() -> None:
    """The ``clustersim`` executable: :func:`main`, then the process ends at once.

    Python's own teardown would free, one by one, every object a command left alive (a
    simulation's cluster, caches and modules: tenths of a second at scale) only for the
    operating system to take the memory back anyway; for the same reason a replay's
    working objects and ``run``'s setup and timeline are kept to the end, not freed
    (:mod:`simulator.lifetime`). Every file a command writes is
    closed by then and its pools are shut down; what is left to do is flush stdout and
    stderr, then ``os._exit`` with :func:`main`'s code (an exit status that is not a
    number, ``sys.exit("text")``, takes Python's ordinary way out, and so does a process
    under a profiler or tracer, ``python -m cProfile`` or coverage, which write their
    results at exit). Tests and library callers use :func:`main`, which exits normally."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        main()
        return
    ends_with_exit()        # objects kept to the end are not freed one by one (lifetime)
    try:
        main()
        code = 0
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            raise
        code = exc.code or 0
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:          # `clustersim ... | head`: the reader has gone
        pass
    except OSError as exc:           # a full disk under `> file`, say: one line, exit 1
        try:
            os.write(2, f"{PROG}: error: could not write the output: {exc}\n".encode())
        except OSError:
            pass
        code = code or 1
    os._exit(code)
