"""The transfers of a send/recv op (trace/schema.op_transfer_keys) by the matching rule:
member ``r`` of the class pairs with ``peer_of(op, r)``, the sender first."""

import numpy as np
import pytest

from simulator.trace.schema import Op, RankClass, op_transfer_keys


@pytest.mark.parametrize("ranks", [(8, 9, 10, 11), tuple(np.arange(40, 48, 2).tolist()), ()])
@pytest.mark.parametrize("kind", ["send", "recv"])
def test_each_member_pairs_with_its_peer_of(ranks, kind):
    op = Op(id=3, kind=kind, name="x", stream="comm", size_bytes=64, peer=100)
    cls = RankClass("c", ranks, [op])
    want = [(r, cls.peer_of(op, r), "t", 2) if kind == "send" else
            (cls.peer_of(op, r), r, "t", 2) for r in ranks]
    got = op_transfer_keys(cls, op, "t", 2)
    assert got == want and all(type(x) is type(y) for g, w in zip(got, want)
                               for x, y in zip(g, w))
