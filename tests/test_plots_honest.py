"""Plots that do not mislead: a bar shrunk to fit compare's axis keeps its make-up (tf-ps
drawn as mostly communication, not as a compute bar), and a trace without memory
allocations (a replayed import) gets a memory plot that says so instead of empty axes."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest

from simulator.compare.charts import TIME_PARTS, bar_figure
from simulator.metrics.outputs import NO_MEMORY, memory_figure


def _row(name, compute, exposed, wait):
    return {"strategy": name, "oom": False, "compute_s": compute, "exposed_comm_s": exposed,
            "wait_s": wait}


def test_a_shrunk_bar_keeps_every_part_in_proportion():
    # tf-ps as compare measured it: 0.79 s compute, 6.56 s exposed comm, 10.53 s waiting
    ok = [_row("fsdp-full", 0.181, 0.003, 0.0), _row("ddp", 0.261, 0.005, 0.0),
          _row("tf-ps", 0.788, 6.557, 10.526)]
    fig = bar_figure(ok, TIME_PARTS, "s", "t")
    ax = fig.axes[0]
    limit = ax.get_xlim()[1]
    assert limit == pytest.approx(3 * (0.261 + 0.005))         # 3 x the median total (ddp)
    bars = {}
    for patch in ax.patches:
        bars.setdefault(round(patch.get_y(), 3), []).append(patch.get_width())
    tf_ps = bars[max(bars)]                                   # the last row (inverted axis)
    total = 0.788 + 6.557 + 10.526
    assert tf_ps == pytest.approx([v * limit / total for v in (0.788, 6.557, 10.526)])
    assert sum(tf_ps) == pytest.approx(limit)
    assert any("17.9 (shrunk" in t.get_text() for t in ax.texts)
    plt.close(fig)


def test_a_trace_without_memory_says_so():
    tl = SimpleNamespace(memory={"rank0": [(0.0, 0)], "rank1": [(0.0, 0), (0.5, 0)]},
                         iteration_time_s=1.0, capacity_bytes=80 << 30)
    fig = memory_figure(tl)
    assert [t.get_text() for t in fig.axes[0].texts] == [NO_MEMORY]
    plt.close(fig)
    tl.memory["rank0"].append((0.2, 1 << 30))
    fig = memory_figure(tl)
    assert len(fig.axes[0].texts) == 0 and len(fig.axes[0].lines) == 3   # 2 ranks + capacity
    plt.close(fig)
