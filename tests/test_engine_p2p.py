"""send/recv between ranks replayed by the engine: a ping-pong against alpha-beta on the
route, classes of several ranks, and clear errors for unmatched or deadlocked transfers."""

import json

import pytest

from simulator.cluster import Cluster
from simulator.collectives.model import CollectiveModel
from simulator.engine import replay
from simulator.errors import ClusterSimError, ConfigError
from simulator.topology import load_topology
from simulator.trace import Op, RankClass, Trace
from simulator.trace.io import read_trace, trace_to_dict
from simulator.trace.transform import apply_stragglers

S = 1 << 28                       # 256 MiB: above NCCL_P2P_LL_THRESHOLD, so Simple
US = 1e-6


class NoCompute:
    def op_time_s(self, op_class, flops, bytes_accessed, precision):
        return 0.0


def model(topology, constants, nodes=None):
    G = load_topology(f"topologies/{topology}.yaml", nodes=nodes)
    return CollectiveModel(Cluster(G, link_efficiency=constants.link_efficiency), constants)


def send(i, peer, size=S, stream="p2p", **attrs):
    return Op(i, stream, "send", f"send{i}", size_bytes=size, peer=peer, attrs=attrs)


def recv(i, peer, size=S, stream="p2p", **attrs):
    return Op(i, stream, "recv", f"recv{i}", size_bytes=size, peer=peer, attrs=attrs)


def ping_pong(a, b, world):
    """Rank a sends S to b, then b sends S back; the other ranks do nothing."""
    idle = tuple(r for r in range(world) if r not in (a, b))
    classes = [RankClass("a", (a,), [send(0, b), recv(1, b)]),
               RankClass("b", (b,), [recv(0, a), send(1, a)])]
    if idle:
        classes.append(RankClass("idle", idle, []))
    return Trace(world, classes, {})


def ends(tl):
    return {(r.cls, r.name): (r.start_s, r.end_s) for r in tl.records}


@pytest.mark.parametrize("topology,nodes,a,b,hop_us,beta", [
    # two GPUs of one DGX A100: NVSwitch, the route's bottleneck is one GPU's NVLink3
    # bandwidth (links.yaml nvlink3: 300 GB/s); hop latency hwLat[nvlink][ring][Simple]
    ("dgx-a100", None, 0, 1, 3.4, 300e9),
    # GPU 0 of node 0 and GPU 0 of node 1 of a superpod: PCIe to the NIC, one HDR link
    # (200 Gb/s = 25 GB/s) each way through the leaf; hop latency hwLat[net][ring][Simple]
    ("dgx-a100-superpod", 2, 0, 8, 9.6, 25e9),
])
def test_ping_pong_takes_twice_alpha_plus_size_over_beta(ideal_constants, topology, nodes, a,
                                                         b, hop_us, beta):
    # The collective model's send_recv (algorithm "direct", protocol Simple above 16 KiB):
    # alpha = launch overhead + baseLat[ring][Simple] + hop latency
    #       = 4.359 us + 8.4 us + hop_us   (ideal constants: latency factor 1)
    # beta  = the route's bottleneck link at 100% of nominal (ideal constants)
    # one way = alpha + S / beta; the pong starts when the ping is delivered.
    k = ideal_constants
    assert k.launch_overhead_s == pytest.approx(4.359 * US)
    assert k.base_latency_s["ring"]["Simple"] == pytest.approx(8.4 * US)
    hw = "net" if nodes else "nvlink"
    assert k.hop_latency_s[hw]["ring"]["Simple"] == pytest.approx(hop_us * US)
    m = model(topology, k, nodes)
    world = len(m.cluster.gpus)
    tl = replay(ping_pong(a, b, world), m, NoCompute())
    one_way = (4.359 + 8.4 + hop_us) * US + S / beta
    # dgx: 16.159 us + 268435456 / 300e9 = 911.0 us; superpod: 22.359 us + 10737.4 us
    r = ends(tl)
    assert r[("a", "send0")] == pytest.approx((0.0, one_way), rel=1e-9)
    assert r[("b", "recv0")] == pytest.approx((0.0, one_way), rel=1e-9)
    assert r[("b", "send1")] == pytest.approx((one_way, 2 * one_way), rel=1e-9)
    assert r[("a", "recv1")] == pytest.approx((one_way, 2 * one_way), rel=1e-9)
    assert tl.iteration_time_s == pytest.approx(2 * one_way, rel=1e-9)
    assert {x.algorithm for x in tl.records} == {"direct"}
    assert {x.protocol for x in tl.records} == {"Simple"}
    # the bytes crossed the route: S each way on every link of it
    assert tl.machine.link_bytes.max() == pytest.approx(S, rel=1e-9)


def test_the_receiver_waits_for_a_late_sender(ideal_constants):
    # rank 0 computes 1 ms (a delay) before its send; rank 1's recv starts at 0 and waits.
    m = model("dgx-a100", ideal_constants)
    late = [Op(0, "p2p", "delay", "think", duration_s=1e-3), send(1, 1)]
    trace = Trace(8, [RankClass("a", (0,), late), RankClass("b", (1,), [recv(0, 0)]),
                      RankClass("idle", tuple(range(2, 8)), [])], {})
    r = ends(replay(trace, m, NoCompute()))
    one_way = (4.359 + 8.4 + 3.4) * US + S / 300e9
    assert r[("b", "recv0")] == pytest.approx((1e-3, 1e-3 + one_way), rel=1e-9)


def two_halves(recv_peer=0, size=S):
    # class "a" = ranks 0-3 sends to peer 4 (member 0 + d -> 4 + d); "b" = 4-7 receives
    return Trace(8, [RankClass("a", (0, 1, 2, 3), [send(0, 4)]),
                     RankClass("b", (4, 5, 6, 7), [recv(0, recv_peer, size)])], {})


def test_a_class_of_several_ranks_sends_from_each_member_to_its_offset_peer(ideal_constants):
    # four transfers 0->4, 1->5, 2->6, 3->7 at once; each uses its own GPUs' NVLink ports,
    # so each takes as long as alone: alpha + S / beta
    m = model("dgx-a100", ideal_constants)
    tl = replay(two_halves(), m, NoCompute())
    one_way = (4.359 + 8.4 + 3.4) * US + S / 300e9
    assert tl.iteration_time_s == pytest.approx(one_way, rel=1e-9)
    # 4 transfers x S bytes x 2 NVLink hops each (GPU -> NVSwitch -> GPU)
    assert tl.machine.link_bytes.sum() == pytest.approx(4 * S * 2, rel=1e-9)


def test_a_straggler_split_keeps_the_partners(ideal_constants):
    # rank 6 split off class "b": its class starts at 6, so its peer is shifted to 2
    split = apply_stragglers(two_halves(), {6: 2.0})
    assert [(c.id, c.ranks, c.ops[0].peer) for c in split.classes] == [
        ("a", (0, 1, 2, 3), 4), ("b", (4, 5, 7), 0), ("b@x2", (6,), 2)]
    m = model("dgx-a100", ideal_constants)
    tl = replay(split, m, NoCompute())
    assert tl.iteration_time_s == pytest.approx((4.359 + 8.4 + 3.4) * US + S / 300e9,
                                                rel=1e-9)


def test_tags_match_transfers_of_one_pair_out_of_order(ideal_constants):
    # rank 0 sends "x" (1 MiB) then "y" (2 MiB) on one stream; rank 1 receives "y" and "x"
    # on two streams: each recv meets the send with its tag.
    m = model("dgx-a100", ideal_constants)
    a = [send(0, 1, 1 << 20, tag="x"), send(1, 1, 2 << 20, tag="y")]
    b = [recv(0, 0, 2 << 20, stream="s1", tag="y"), recv(1, 0, 1 << 20, stream="s2", tag="x")]
    trace = Trace(8, [RankClass("a", (0,), a), RankClass("b", (1,), b),
                      RankClass("idle", tuple(range(2, 8)), [])], {})
    r = ends(replay(trace, m, NoCompute()))
    assert r[("b", "recv1")][1] == pytest.approx(r[("a", "send0")][1])
    assert r[("b", "recv0")][1] == pytest.approx(r[("a", "send1")][1])


def test_an_unmatched_send_is_a_clear_error(tmp_path, ideal_constants):
    trace = Trace(2, [RankClass("a", (0,), [send(0, 1)]), RankClass("b", (1,), [])], {})
    msg = (r"rank class a, op 0 \(send0\): the 1st send from rank 0 to rank 1 has no "
           r"matching recv on rank 1")
    with pytest.raises(ValueError, match=msg):
        trace.validate()
    with pytest.raises(ValueError, match=msg):
        replay(trace, model("dgx-a100", ideal_constants), NoCompute())
    (tmp_path / "t.json").write_text(json.dumps(trace_to_dict(trace)))
    with pytest.raises(ConfigError, match=r"t\.json: classes: " + msg):
        read_trace(tmp_path / "t.json")


def test_mismatched_recvs_are_named():
    # class b's recv peer 1 would pair rank 4 with rank 1, not with its sender 0
    with pytest.raises(ValueError, match="the 1st send from rank 0 to rank 4 has no matching"):
        two_halves(recv_peer=1).validate()
    with pytest.raises(ValueError, match="sends 268435456 bytes to rank 4, whose recv .* "
                                         "expects 1024"):
        two_halves(size=1024).validate()
    listed = Trace(2, [RankClass("a", (0,), [send(0, 1, tag=[1])]),
                       RankClass("b", (1,), [recv(0, 0, tag=[1])])], {})
    with pytest.raises(ValueError, match=r"op 0 \(send0\): tag must be a string or an "
                                         r"integer, got \[1\]"):
        listed.validate()
    bad = Trace(8, [RankClass("a", (0, 1, 2, 3), [send(0, 6)]),
                    RankClass("b", (4, 5, 6, 7), [])], {})
    with pytest.raises(ValueError, match=r"op 0 \(send0\): rank 2 would send to rank 8 "
                                         r"\(peer 6 \+ offset 2\), outside the world of 8"):
        bad.validate()


def test_a_deadlock_is_an_error_at_the_end_of_replay(ideal_constants):
    # both ranks send first (NCCL's send blocks until the recv is posted): nothing moves
    trace = Trace(8, [RankClass("a", (0,), [send(0, 1), recv(1, 1)]),
                      RankClass("b", (1,), [send(0, 0), recv(1, 0)]),
                      RankClass("idle", tuple(range(2, 8)), [])], {})
    trace.validate()                      # every transfer has its partner: not a typo
    with pytest.raises(ClusterSimError, match=r"deadlocked with 4 op\(s\) unfinished: rank "
                                              r"class a, op 0 \(send0\): send from rank 0 to "
                                              r"rank 1 waits for its recv on rank 1"):
        replay(trace, model("dgx-a100", ideal_constants), NoCompute())


def test_ops_group_by_their_transfers_without_listing_them():
    # the replay pairs a send op with the recv op carrying the very same transfers from a
    # compact key (senders, receiver - sender, tag, k): equal exactly when the lists are
    from itertools import combinations

    from simulator.engine.p2p import _transfers_id
    from simulator.trace.matching import peer_ops
    from simulator.trace.schema import op_transfer_keys

    classes = [RankClass("a", (0, 1, 2, 3), [send(0, 4), send(1, 4, tag=1), recv(2, 4),
                                             send(3, 5), send(4, 4)]),
               RankClass("b", (4, 5, 6, 7), [recv(0, 0), recv(1, 0, tag=1), send(2, 0),
                                             recv(3, 1), recv(4, 0)]),
               RankClass("c", (5, 6, 7, 8), [recv(0, 0), send(1, 9)]),
               RankClass("d", (9, 10, 11, 12), [recv(0, 5)])]
    entries = [(cls, op, tag, k) for cls in classes for op, tag, k in peer_ops(cls)]
    senders: dict = {}
    ids = [_transfers_id(e, senders) for e in entries]
    same_lists = same_ids = 0
    for (e, i), (f, j) in combinations(zip(entries, ids), 2):
        assert (i == j) == (op_transfer_keys(*e) == op_transfer_keys(*f)), (e[1], f[1])
        same_ids += i == j
    # a's sends 0, 1, 4 with b's recvs 0, 1, 4; b's send 2 with a's recv 2; a's send 3
    # (0->5 .. 3->8) with c's recv; c's send with d's recv (b's recv 3, 1->4 .. 4->7, none)
    assert same_ids == 6
    # the groups share one list of (sender, receiver) pairs per distinct list, whatever the
    # tag and k: a -> b (0->4 ..), b -> a, a -> c (0->5 ..), c -> d
    import simpy

    from simulator.engine.p2p import PointToPoint
    p2p = PointToPoint(simpy.Environment(), None, None, classes)
    assert sorted(p[0] for p in p2p._pairs) == [(0, 4), (0, 5), (4, 0), (5, 9)]
    assert len(p2p._group) == 12
