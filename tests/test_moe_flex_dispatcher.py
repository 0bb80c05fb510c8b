"""Megatron-Core's flex token dispatcher (DeepEP / HybridEP): the distinct remote domains a
token reaches, the bytes over the inter-domain network and over NVLink for 2 and 4
domains, flex inside one domain against the all-to-all dispatcher, the fields' refusals,
the argument file, and a 2-node run where flex is faster and sends fewer bytes over IB."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from simulator.errors import ConfigError
from simulator.models import load_model
from simulator.strategies import World
from simulator.strategies.frameworks.megatron import MegatronConfig, read_file
from simulator.strategies.parallel import ParallelPlan
from simulator.strategies.parallel.generate import build_parallel
from simulator.strategies.parallel.moe import (EpSizes, ep_loads, ep_sizes, flex_sizes,
                                               remote_domains)
from simulator.strategies.parallel.place import domain_groups

QWEN = load_model("qwen3-30b-a3b")        # 128 experts, top 8, hidden 2048


def test_remote_domains_is_the_formula_and_a_brute_force_count():
    # E = 8 experts over N = 4 domains (2 each), k = 3: (4 - 1)(1 - C(6, 3) / C(8, 3))
    # = 3 (1 - 20 / 56) = 27 / 14
    assert remote_domains(8, 3, 4) == pytest.approx(3 * (1 - 20 / 56)) == pytest.approx(27 / 14)
    # brute force: a token on domain 0 (experts 0, 1) picks each 3-subset alike; count the
    # other domains {2,3}, {4,5}, {6,7} it touches
    picks = list(itertools.combinations(range(8), 3))
    mean = sum(len({x // 2 for x in p} - {0}) for p in picks) / len(picks)
    assert remote_domains(8, 3, 4) == pytest.approx(mean)
    assert remote_domains(128, 8, 1) == 0.0
    # DeepSeek-V3's 256 experts, top 8, over 4 domains: 3 (1 - C(192, 8) / C(256, 8))
    assert remote_domains(256, 8, 4) == pytest.approx(
        3 * (1 - math.comb(192, 8) / math.comb(256, 8)))


def _loads(ep: int, tokens: int = 4096):
    return ep_loads(QWEN, tokens, ep)


@pytest.mark.parametrize("domains", [2, 4])
def test_bytes_over_the_network_and_over_nvlink(domains):
    ep, t, k, h, e = 32, 4096, 8, 2048, 2
    sizes = flex_sizes(QWEN, _loads(ep, t), e, domains)
    d = ep // domains
    # inside a domain: every copy the rank's experts take (t k, even routing) arrives
    # over NVLink, its own domain's and the forwarded ones alike: t k h e + t k fp32
    assert sizes.flex_dispatch == t * k * h * e + t * k * 4
    assert sizes.flex_combine == t * k * h * e
    nvlink_out = sizes.flex_combine * (d - 1) / d      # what leaves the rank over NVLink
    assert nvlink_out == t * k * h * e * (d - 1) / d
    # across domains: each rank sends each of its N - 1 rail peers the tokens with an
    # expert there, t p of them, p = 1 - C(128 - 128 / N, 8) / C(128, 8)
    p = 1 - math.comb(128 - 128 // domains, 8) / math.comb(128, 8)
    per_peer = math.ceil(t * p) * h * e
    assert sizes.rail_combine == domains * per_peer
    assert sizes.rail_dispatch == domains * per_peer + t * k * 4
    ib_out = sizes.rail_combine * (domains - 1) / domains
    alltoall_ib_out = t * k * h * e * (ep - d) / ep   # the all-to-all dispatcher's copies
    assert ib_out / alltoall_ib_out == pytest.approx(
        math.ceil(t * p) * (domains - 1) / (t * k * (domains - 1) / domains))
    assert ib_out / alltoall_ib_out == pytest.approx(
        remote_domains(128, 8, domains) / (k * (domains - 1) / domains), rel=1e-3)
    # the exchange of counts: (ep + E) int32
    assert sizes.notify == (32 + 128) * 4


def test_domain_groups_are_the_domains_and_the_rails():
    inside, rails, n = domain_groups([tuple(range(16))], 8)
    assert n == 2 and inside == [tuple(range(8)), tuple(range(8, 16))]
    assert rails == [(i, i + 8) for i in range(8)]
    # an EP group strided by 2 (etp = tp = 2): 4 ranks per domain, the same index paired
    inside, rails, n = domain_groups([tuple(range(0, 32, 2))], 8)
    assert n == 4 and inside[0] == (0, 2, 4, 6) and rails[0] == (0, 8, 16, 24)
    with pytest.raises(ConfigError, match="uneven"):
        domain_groups([tuple(range(12))], 8)


def test_flex_inside_one_domain_is_the_token_all_to_all_without_the_metadata():
    loads = _loads(8)
    a2a, flex = ep_sizes(QWEN, loads, 2), flex_sizes(QWEN, loads, 2, 1)
    assert flex == EpSizes(notify=(8 + 128) * 4, flex_dispatch=a2a.tokens + a2a.probs,
                           flex_combine=a2a.tokens)
    model = dataclasses.replace(QWEN, layers=2)
    ops = {}
    for kind in ("alltoall", "flex"):
        cfg = MegatronConfig(micro_batch=1, grad_accum=2, use_distributed_optimizer=True,
                             moe_token_dispatcher_type=kind)
        trace = build_parallel(model, ParallelPlan(dp_shard=8, ep=8, dp_mode="zero1"), cfg,
                               World(8, 8), seq_len=1024)
        ops[kind] = [o for o in trace.classes[0].ops if o.kind == "collective"
                     and o.comm.startswith("ep")]
    tokens = [(o.name, o.size_bytes) for o in ops["alltoall"]
              if o.name.startswith(("moe_dispatch.", "moe_combine"))]
    (probs,) = {o.size_bytes for o in ops["alltoall"] if "probs" in o.name}
    assert probs == 1024 * 8 * 4       # t k fp32
    # the same all-to-alls in the same order, the dispatch's with the probabilities
    flex = [(o.name, o.size_bytes - probs * o.name.startswith("moe_dispatch."))
            for o in ops["flex"] if o.name.startswith(("moe_dispatch.", "moe_combine"))]
    assert tokens == flex and len(tokens) == 2 * 2 * 4
    assert not [o for o in ops["flex"] if "rail" in o.name or "probs" in o.name
                or "counts" in o.name]
    assert {o.comm for o in ops["flex"] if o.name.startswith("moe_dispatch.")} == {"ep_nvl.s0"}


@pytest.mark.parametrize("strategy,field", [
    ({"moe_token_dispatcher_type": "allgather"}, "strategy.moe_token_dispatcher_type"),
    ({"moe_enable_deepep": True}, "strategy.moe_enable_deepep"),
    ({"moe_enable_deepep": True, "moe_token_dispatcher_type": "flex",
      "moe_flex_dispatcher_backend": "hybridep"}, "strategy.moe_enable_deepep"),
    ({"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "ncclep"},
     "moe_flex_dispatcher_backend")])
def test_refusals_name_the_field(strategy, field):
    with pytest.raises((ConfigError, ValueError), match=field.split(".")[-1]):
        MegatronConfig(**strategy)


def test_accepted_spellings():
    assert MegatronConfig(moe_token_dispatcher_type="flex",
                          moe_enable_deepep=True).moe_flex_dispatcher_backend == "deepep"
    # the backend without flex is ignored, as Megatron-Core ignores it
    assert MegatronConfig(moe_flex_dispatcher_backend="hybridep").moe_token_dispatcher_type \
        == "alltoall"


def test_argument_file(tmp_path):
    path = tmp_path / "moe.args"
    path.write_text("--expert-model-parallel-size 16 --moe-token-dispatcher-type flex \\\n"
                    "--moe-flex-dispatcher-backend hybridep\n")
    pieces = read_file(path)
    assert pieces.strategy["moe_token_dispatcher_type"] == "flex"
    assert pieces.strategy["moe_flex_dispatcher_backend"] == "hybridep"
    path.write_text("--moe-token-dispatcher-type flex --moe-enable-deepep\n")
    assert read_file(path).strategy["moe_enable_deepep"] is True


def _run(kind: str):
    from simulator.metrics.tables import link_utilization
    from simulator.pipeline import build_setup, run_setup
    from simulator.scenario import load_scenario, resolve_scenario
    scn = load_scenario(resolve_scenario("quickstart"), [
        "model=qwen3-30b-a3b", "cluster.topology=dgx-h100-superpod", "cluster.nodes=2",
        "training.seq_len=4096", "training.micro_batch=2", "training.grad_accum=1",
        "strategy={name: megatron, expert_model_parallel_size: 16, "
        f"use_distributed_optimizer: true, moe_token_dispatcher_type: {kind}}}"])
    setup = build_setup(scn, extrapolate_steps=False)
    result = run_setup(setup)
    links = link_utilization(result.timeline, setup.cluster)
    ib = links[links.link_type.str.startswith("ib")].wire_bytes.sum()
    # what each rank's EP all-to-alls send off its node (half of each: 2 nodes)
    ops = [o for o in setup.trace.classes[0].ops if o.kind == "collective"
           and o.collective == "all_to_all" and o.comm.split(".")[0] in ("ep", "ep_rail")]
    return result.metrics.iteration_time_s, ib, sum(o.size_bytes for o in ops) / 2


def test_two_dgx_nodes_ep16_flex_is_faster_and_sends_fewer_ib_bytes():
    t_a2a, ib_a2a, off_a2a = _run("alltoall")
    t_flex, ib_flex, off_flex = _run("flex")
    assert t_flex < 0.8 * t_a2a
    # off-node EP bytes per rank: t k h e / 2 per token all-to-all for alltoall (t = 8192,
    # k = 8, h e = 4096; 4 per MoE block, 48 blocks; the probabilities t k 4 / 2 twice),
    # flex: N t p h e / 2 per rail all-to-all, p = 1 - C(64, 8) / C(128, 8)
    t, blocks = 8192, 48
    p = 1 - math.comb(64, 8) / math.comb(128, 8)
    assert off_a2a == blocks * (4 * t * 8 * 4096 / 2 + 2 * t * 8 * 4 / 2)
    assert off_flex == pytest.approx(blocks * (4 * 2 * math.ceil(t * p) * 4096 / 2
                                               + 2 * t * 8 * 4 / 2) + blocks * 160 * 4 / 2)
    # over the links: the rail all-to-all's pairs share a leaf (NIC -> leaf -> NIC, 2 IB
    # links); of the all-to-all dispatcher's off-node bytes 1/8 goes to the same rail and
    # 7/8 to another (NIC -> leaf -> spine -> leaf -> NIC, 4); the gradient traffic is the
    # same in both runs, so the difference is the EP bytes' over all 16 ranks
    expected = 16 * (off_a2a * (2 / 8 + 4 * 7 / 8) - off_flex * 2)
    assert ib_a2a - ib_flex == pytest.approx(expected, rel=1e-4)


def test_two_domains_run_the_rail_and_nvlink_all_to_alls_side_by_side():
    model = dataclasses.replace(QWEN, layers=2)
    cfg = MegatronConfig(micro_batch=1, grad_accum=1, use_distributed_optimizer=True,
                         moe_token_dispatcher_type="flex")
    trace = build_parallel(model, ParallelPlan(dp_shard=16, ep=16, dp_mode="zero1"), cfg,
                           World(16, 8), seq_len=1024)
    ops = trace.classes[0].ops
    by_id = {o.id: o for o in ops}
    rail = next(i for i, o in by_id.items() if o.name.startswith("moe_dispatch_rail."))
    nvl = next(i for i, o in by_id.items() if o.name.startswith("moe_dispatch.")
               and by_id[i].phase == "forward")
    assert by_id[rail].stream == "ep_rail" and by_id[nvl].stream == "ep"
    assert by_id[rail].deps == by_id[nvl].deps          # issued side by side
    # the first kernel fed by the dispatch waits for both
    fed = next(o for o in ops if o.kind == "compute" and rail in o.deps)
    assert nvl in fed.deps
    assert trace.communicators["ep_rail.s0"].groups == tuple((i, i + 8) for i in range(8))
    # the CPU waits for the exchange of counts (DeepEP's notify) before it launches on
    notify = next(o for o in ops if o.name.startswith("moe_dispatch_notify."))
    assert [o.stream for o in ops if notify.id in o.deps] == ["host"]
