"""Host-side launch rate of a PyTorch profiler (Kineto) trace: the measurement behind
``simulator/data/host.yaml``.

    python -m simulator.compute.host_trace TRACE...

For each thread that launches kernels (``cuda_runtime`` launch calls): the number of
launches and the median time between successive ones (the CPU's cost of one launch while
it runs ahead of the GPU; the mean would include the stalls where it waits). Forward
kernels launch from the Python thread, backward ones from the autograd engine's thread.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from simulator.compute.kernels import _read_events

_LAUNCH = "aunchKernel"        # cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel(Ex)


def launch_gaps(path) -> list[tuple[object, int, float]]:
    """[(thread id, launches, median gap in seconds)], most launches first."""
    by_thread = defaultdict(list)
    for e in _read_events(path):
        if e.get("cat") == "cuda_runtime" and _LAUNCH in str(e.get("name", "")):
            by_thread[e.get("tid")].append(float(e.get("ts", 0.0)))
    out = []
    for tid, ts in by_thread.items():
        ts.sort()
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        out.append((tid, len(ts), statistics.median(gaps) * 1e-6 if gaps else 0.0))
    return sorted(out, key=lambda r: -r[1])


def main(argv=None) -> int:
    for path in (argv if argv is not None else sys.argv[1:]):
        for tid, n, gap_s in launch_gaps(path):
            print(f"{path}: thread {tid}: {n} launches, median gap {gap_s * 1e6:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
