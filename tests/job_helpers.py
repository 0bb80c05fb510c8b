"""Small jobs for the machine/job and fleet tests: one all-reduce of ``SIZE`` bytes on a
communicator of every rank, with compute that costs nothing."""

from __future__ import annotations

from conftest import GB
from simulator.trace import Communicator, Op, RankClass, Trace

SIZE = 1 << 30          # bytes of each all-reduce
NIC = 10 * GB           # NIC and spine uplink bandwidth of the test stars


class NoCompute:
    def op_time_s(self, op_class, flops, bytes_accessed, precision, shape=None):
        return 0.0


def all_reduce(ranks: int = 2) -> Trace:
    op = Op(id=0, stream="comm", kind="collective", name="ar", collective="all_reduce",
            size_bytes=SIZE, comm="world")
    world = tuple(range(ranks))
    return Trace(ranks, [RankClass("all", world, [op])],
                 {"world": Communicator("world", (world,))})


def spy_on(monkeypatch, module, *names: str) -> list:
    """Replace each class ``names`` of ``module`` by a subclass that notes a weak reference
    to every instance made (the list returned): what a test checks is freed."""
    import weakref
    made: list = []
    for name in names:
        cls = getattr(module, name)

        class Spy(cls):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                made.append(weakref.ref(self))
        monkeypatch.setattr(module, name, Spy)
    return made
