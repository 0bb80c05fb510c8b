"""The capture scripts' namespace helper and launcher (validation/capture/), no torch needed.

Command construction is checked without root; the integration tests that really create
namespaces need root and ``ip netns`` and are skipped elsewhere.
"""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURE = Path(__file__).resolve().parents[1] / "validation" / "capture"
sys.path.insert(0, str(CAPTURE))

import launch  # noqa: E402
import netns  # noqa: E402
from netns import LinkShape, NetnsPlan  # noqa: E402


def test_parse_rate_requires_a_unit():
    assert netns.parse_rate_bit_per_s("10gbit") == 1e10
    assert netns.parse_rate_bit_per_s("200mbit") == 2e8
    assert netns.parse_rate_bit_per_s("1.5Gbit") == 1.5e9
    for bad in ("100", "1 gb/s", "fast", "0mbit"):
        with pytest.raises(ValueError, match="rate"):
            netns.parse_rate_bit_per_s(bad)


def test_rate_label_round_trips():
    for text in ("10gbit", "1gbit", "200mbit", "64kbit"):
        assert netns.rate_label(netns.parse_rate_bit_per_s(text)) == text


def test_burst_is_one_ms_of_traffic_but_at_least_64_kib():
    assert LinkShape(2e8).burst == 64 * 1024          # 25 kB per ms < 64 KiB
    assert LinkShape(1e10).burst == 1_250_000         # 1.25 MB per ms
    assert LinkShape(1e9, burst_bytes=9000).burst == 9000


@pytest.mark.parametrize("field,kwargs", [
    ("rate_bit_per_s", {"rate_bit_per_s": 0}),
    ("burst_bytes", {"rate_bit_per_s": 1e9, "burst_bytes": 100}),
    ("tbf_latency_s", {"rate_bit_per_s": 1e9, "tbf_latency_s": 0}),
    ("delay_s", {"rate_bit_per_s": 1e9, "delay_s": -1}),
])
def test_link_shape_names_the_bad_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        LinkShape(**kwargs)


def test_plan_names_fit_linux_interface_limits():
    plan = NetnsPlan(4, prefix="cs")
    assert plan.namespaces() == ["cs-r0", "cs-r1", "cs-r2", "cs-r3", "cs-hub"]
    assert [plan.addr(r) for r in range(4)] == ["198.18.0.1", "198.18.0.2", "198.18.0.3",
                                                "198.18.0.4"]
    big = NetnsPlan(200, prefix="abcdef")
    assert len(big.hub_dev(199)) <= netns.IFNAMSIZ
    with pytest.raises(ValueError, match="rank"):
        plan.ns(4)
    with pytest.raises(ValueError, match="prefix"):
        NetnsPlan(2, prefix="Bad-Prefix")
    with pytest.raises(ValueError, match="ranks"):
        NetnsPlan(0)


def test_setup_builds_star_with_both_directions_shaped():
    plan = NetnsPlan(2, LinkShape(1e9), prefix="cs")
    cmds = [" ".join(c) for c in netns.setup_commands(plan)]
    assert cmds[0] == "ip netns add cs-hub"
    assert "ip -n cs-hub link add br0 type bridge" in cmds
    for r in (0, 1):
        assert (f"ip -n cs-hub link add csr{r}h type veth peer name eth0 netns cs-r{r}"
                in cmds)
        assert f"ip -n cs-hub link set csr{r}h master br0" in cmds
        assert f"ip -n cs-r{r} addr add 198.18.0.{r + 1}/24 dev eth0" in cmds
        tbf = "root handle 1: tbf rate 1000000000bit burst 125000 latency 50ms"
        assert f"tc -n cs-r{r} qdisc add dev eth0 {tbf}" in cmds       # rank -> switch
        assert f"tc -n cs-hub qdisc add dev csr{r}h {tbf}" in cmds      # switch -> rank
    # every rank namespace exists before the veth whose peer goes into it
    for r in (0, 1):
        assert cmds.index(f"ip netns add cs-r{r}") < next(
            i for i, c in enumerate(cmds) if f"netns cs-r{r}" in c)
    # nothing is ever created in the root namespace
    assert all(c.startswith(("ip netns add", "ip -n ", "tc -n ")) for c in cmds)


def test_unshaped_plan_has_no_qdiscs():
    assert not any(c[0] == "tc" for c in netns.setup_commands(NetnsPlan(3)))


def test_delay_puts_tbf_under_netem():
    cmds = LinkShape(1e9, delay_s=100e-6).qdisc_commands("ns", "eth0")
    assert [" ".join(c) for c in cmds] == [
        "tc -n ns qdisc add dev eth0 root handle 1: netem delay 100us limit 100000",
        "tc -n ns qdisc add dev eth0 parent 1:1 handle 10: tbf rate 1000000000bit burst "
        "125000 latency 50ms"]


def test_teardown_deletes_every_namespace():
    plan = NetnsPlan(3, prefix="cs")
    assert netns.teardown_commands(plan) == [
        ["ip", "netns", "del", ns] for ns in ("cs-r0", "cs-r1", "cs-r2", "cs-hub")]


def test_exec_prefix_pins_with_taskset():
    plan = NetnsPlan(4)
    assert netns.exec_prefix(plan, 1) == ["ip", "netns", "exec", "cs-r1"]
    assert netns.exec_prefix(plan, 3, "1") == ["ip", "netns", "exec", "cs-r3",
                                               "taskset", "-c", "1"]
    assert [launch.cpu_for_rank(r, 2) for r in range(4)] == ["0", "1", "0", "1"]


class Recorder:
    def __init__(self, fail_on: str | None = None):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, argv, check=True):
        self.calls.append(" ".join(argv))
        if self.fail_on and self.fail_on in self.calls[-1] and check:
            raise RuntimeError(f"failed: {self.calls[-1]}")


def _deletes(calls):
    return [c for c in calls if c.startswith("ip netns del")]


def test_context_manager_tears_down_when_the_job_fails():
    plan, rec = NetnsPlan(2, LinkShape(2e8)), Recorder()
    with pytest.raises(ZeroDivisionError):
        with netns.shaped_network(plan, runner=rec):
            1 / 0
    # stale leftovers removed first, then setup, then everything removed again
    assert rec.calls[:3] == ["ip netns del cs-r0", "ip netns del cs-r1", "ip netns del cs-hub"]
    assert _deletes(rec.calls[3:]) == rec.calls[-3:] == rec.calls[:3]


def test_context_manager_tears_down_when_setup_fails_half_way():
    plan, rec = NetnsPlan(2, LinkShape(2e8)), Recorder(fail_on="qdisc add dev eth0")
    with pytest.raises(RuntimeError, match="qdisc"):
        with netns.shaped_network(plan, runner=rec):
            pytest.fail("body must not run")
    assert rec.calls[-3:] == ["ip netns del cs-r0", "ip netns del cs-r1", "ip netns del cs-hub"]


def test_context_manager_tears_down_on_sigterm():
    plan, rec = NetnsPlan(2), Recorder()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(BaseException, match="signal"):
        with netns.shaped_network(plan, runner=rec):
            os.kill(os.getpid(), signal.SIGTERM)
    assert rec.calls[-1] == "ip netns del cs-hub"
    assert signal.getsignal(signal.SIGTERM) is before


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs as a normal user)"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "iproute2 (ip, tc) not installed"
    probe = subprocess.run(["ip", "netns", "add", "cscheck-probe"], capture_output=True)
    subprocess.run(["ip", "netns", "del", "cscheck-probe"], capture_output=True)
    if probe.returncode != 0:
        return f"ip netns add not permitted here: {probe.stderr.decode().strip()}"
    return None


_NO_NETNS = _can_make_namespaces()
root_only = pytest.mark.skipif(_NO_NETNS is not None, reason=str(_NO_NETNS))


def _ours(prefix):
    return [ns for ns in netns.existing_namespaces() if ns.startswith(prefix + "-")]


@root_only
def test_real_namespaces_are_shaped_and_reachable_then_removed():
    import sockcheck
    plan = NetnsPlan(2, LinkShape(2e8), prefix="cstst")
    with netns.shaped_network(plan):
        assert sorted(_ours("cstst")) == ["cstst-hub", "cstst-r0", "cstst-r1"]
        assert "tbf" in netns.qdiscs_in("cstst-r0") and "tbf" in netns.qdiscs_in("cstst-hub")
        (res,) = sockcheck.check(plan, pings=5, bulk=2 << 20, timeout_s=20)
        assert 0.5 * 2e8 < res["bulk_bit_per_s"] < 1.2 * 2e8    # the shaped rate, roughly
    assert _ours("cstst") == []


@root_only
def test_failing_job_leaves_no_namespace_process_or_qdisc(tmp_path):
    plan = NetnsPlan(2, LinkShape(1e9), prefix="cstst")
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    fail = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with pytest.raises(launch.RanksFailed, match="rank 1 exited with 3"):
        with netns.shaped_network(plan):
            launch.run_ranks(plan, lambda r: slow if r == 0 else fail, lambda r: {},
                             tmp_path, timeout_s=30)
    assert _ours("cstst") == []
    left = subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"], capture_output=True, text=True)
    assert left.stdout.strip() == ""
