"""The op-by-op send/recv checks (simulator/trace/matching.py) agree with the member-by-member
ones they stand in for: they accept what matches and say no to every kind of mismatch, so
that the schema's own check words the error (same line as before)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.trace.matching import _members_match, ops_match, peers_fit, transfers_match
from simulator.trace.schema import Op, RankClass, Trace, TraceError


def _op(i, kind, peer, size=4096, **attrs):
    return Op(i, "p2p", kind, f"{kind}{i}", size_bytes=size, peer=peer, attrs=attrs)


def _halves(recv_peer=0, size=4096, sends=None, recvs=None):
    """Ranks 0-3 send to 4-7 (member offset), tagged and untagged, twice each."""
    sends = sends or [_op(0, "send", 4), _op(1, "send", 4, tag="t"), _op(2, "send", 4)]
    recvs = recvs or [_op(0, "recv", recv_peer), _op(1, "recv", recv_peer, tag="t"),
                      _op(2, "recv", recv_peer, size)]
    return [RankClass("a", (0, 1, 2, 3), sends), RankClass("b", (4, 5, 6, 7), recvs)]


def test_matching_transfers_pass_the_fast_check():
    assert transfers_match(_halves(), 8)
    Trace(8, _halves(), {}).validate()
    # a class whose members are not contiguous, receiving from two classes
    classes = [RankClass("a", (0, 2), [_op(0, "send", 1)]),
               RankClass("b", (1, 3), [_op(0, "recv", 0), _op(1, "recv", 4)]),
               RankClass("c", (4, 6), [_op(0, "send", 1)]),
               RankClass("d", (5, 7), [])]
    assert transfers_match(classes, 8)
    assert ops_match(classes) and ops_match(_halves())
    # one recv op of b takes its transfers from two classes' send ops: no one send op
    # carries them, so the op-by-op check says no and the transfer-by-transfer one decides
    split = [RankClass("a0", (0,), [_op(0, "send", 1)]),
             RankClass("a2", (2,), [_op(0, "send", 3)]),
             RankClass("b", (1, 3), [_op(0, "recv", 0)])]
    assert not ops_match(split) and _members_match(split, 4) and transfers_match(split, 4)
    Trace(4, split, {}).validate()


def _transfers(classes, kind):
    """(sender, receiver, tag, ordinal) -> size of every member's ``kind``, by the rule."""
    out = {}
    for cls in classes:
        seen = {}
        for op in cls.ops:
            if op.kind != kind:
                continue
            tag = op.attrs.get("tag")
            k = seen[(op.peer, tag)] = seen.get((op.peer, tag), -1) + 1
            for r in cls.ranks:
                p = op.peer + r - cls.ranks[0]
                out[(r, p, tag, k) if kind == "send" else (p, r, tag, k)] = op.size_bytes
    return out


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 0, 3, 2)])
@pytest.mark.parametrize("recv_order", [(4, 5, 6, 7), (7, 6, 5, 4)])
def test_ops_match_only_where_every_member_matches(order, recv_order):
    sends = [_op(0, "send", 4 + order[0]), _op(1, "send", 4 + order[0], tag="t")]
    recvs = [_op(0, "recv", recv_order[0] - 4), _op(1, "recv", recv_order[0] - 4, tag="t")]
    classes = [RankClass("a", order, sends), RankClass("b", recv_order, recvs)]
    same = _transfers(classes, "send") == _transfers(classes, "recv")
    assert transfers_match(classes, 8) == same
    if ops_match(classes):
        assert same
    assert ops_match(classes) == (same and [r + 4 for r in order] == list(recv_order))


@pytest.mark.parametrize("classes, words", [
    (_halves(recv_peer=1), "has no matching"),                 # recv from the wrong ranks
    (_halves(size=8192), "expects 8192"),                      # sizes differ
    (_halves(recvs=[_op(0, "recv", 0), _op(1, "recv", 0, tag="u"), _op(2, "recv", 0)]),
     "has no matching"),                                        # tags differ
    (_halves(recvs=[_op(0, "recv", 0), _op(1, "recv", 0, tag="t")]),
     "has no matching"),                                        # one recv short
])
def test_every_mismatch_fails_the_fast_check_and_is_worded_by_the_schema(classes, words):
    assert not ops_match(classes) and not _members_match(classes, 8)
    assert not transfers_match(classes, 8)
    with pytest.raises(TraceError, match=words):
        Trace(8, classes, {}).validate()


def test_peers_fit_is_the_member_by_member_rule():
    ranks = np.array([0, 1, 2, 3])
    for offset in range(-5, 8):
        by_member = all(0 <= r + offset < 8 and offset != 0 for r in ranks.tolist())
        assert peers_fit(ranks, offset, 8) == by_member
    assert not peers_fit(None, 1, 8)                        # a rank beyond 64 bits
    assert not peers_fit(np.array([0, 9]), 1, 8)            # a rank outside the world
    assert not peers_fit(ranks, 1 << 70, 8)                  # an offset beyond 64 bits


def test_sizes_compare_as_integers_and_as_objects_alike():
    # int64 where every size is a plain int; as objects otherwise (a huge or a float size):
    # equal values match either way, different ones never do
    from simulator.trace.matching import _sizes_array
    assert _sizes_array([4096, 8192]).dtype == np.int64
    assert _sizes_array([4096, 1 << 70]).dtype == object
    assert _sizes_array([4096, 4096.0]).dtype == object
    assert transfers_match(_halves(size=4096.0), 8)
    assert not transfers_match(_halves(size=4096.5), 8)
    huge = 1 << 70
    sends = [_op(0, "send", 4, huge), _op(1, "send", 4, tag="t"), _op(2, "send", 4)]
    assert transfers_match(_halves(size=4096, sends=sends,
                                   recvs=[_op(0, "recv", 0, huge), _op(1, "recv", 0, tag="t"),
                                          _op(2, "recv", 0)]), 8)
    assert not transfers_match(_halves(sends=sends), 8)
