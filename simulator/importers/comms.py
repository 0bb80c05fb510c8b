"""Collectives as profilers name them: operation, element sizes, process groups.

Sizes follow nccl-tests (the simulator's convention): the whole buffer for all_reduce and
broadcast, the gathered output for all_gather, the input being scattered for
reduce_scatter. PyTorch records ``In msg nelems`` / ``Out msg nelems`` and a dtype
(``record_param_comms`` and NCCL kernel args); gloo ops record ``Input Dims`` and
``Input type``; TensorFlow records no size at all (the user gives one).
"""

from __future__ import annotations

import math
import re

from ..errors import ConfigError
from ..units import UnitError, parse_size

# PyTorch c10d / record_param_comms / gloo / NCCL kernel / TensorFlow op -> simulator name
_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced":
    "all_reduce", "barrier": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced":
    "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "alltoallv": "all_to_all",
    "send": "send", "recv": "recv", "sendrecv": "send_recv", "gather": "gather",
    "scatter": "scatter",
    # TensorFlow collective ops
    "collectivereduce": "all_reduce", "collectivereducev2": "all_reduce",
    "ncclallreduce": "all_reduce", "collectivegather": "all_gather",
    "collectivegatherv2": "all_gather", "collectivereducescatterv2": "reduce_scatter",
    "collectivebcastsend": "broadcast", "collectivebcastrecv": "broadcast",
    "collectivebcastsendv2": "broadcast", "collectivebcastrecvv2": "broadcast",
    "collectivealltoallv2": "all_to_all", "collectivealltoallv3": "all_to_all",
}
_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2,
    "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "int64": 8,
    "long int": 8, "int": 4, "int32": 4, "short": 2, "int16": 2, "byte": 1, "uint8": 1,
    "char": 1, "int8": 1, "bool": 1, "complexfloat": 8, "c10::complex<float>": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1,
}
_NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)_?(.*?)(?:\(|$)")


def collective_name(raw: str) -> str | None:
    """Simulator name of a profiler's collective name (None if not a collective)."""
    key = raw.strip().lower()
    for prefix in ("c10d::", "gloo:", "nccl:", "ncclkernel_", "nccldevkernel_"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = key.rstrip("_")
    return _NAMES.get(key)


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a PyTorch/NCCL dtype name (None if unknown)."""
    return _DTYPE_BYTES.get(str(dtype).strip().lower()) if dtype else None


def nccl_kernel(name: str) -> tuple[str | None, dict]:
    """(collective, {"algorithm", "protocol"}) read from an NCCL kernel name such as
    ``ncclKernel_AllReduce_RING_LL_Sum_float`` or ``ncclDevKernel_AllGather_RING_LL``."""
    m = _NCCL_KERNEL.match(name)
    if not m:
        return None, {}
    coll = collective_name(m.group(1))
    tokens = set(re.split(r"[_\W]+", m.group(2).upper()))
    hints = {}
    for algo in ("RING", "TREE"):
        if algo in tokens:
            hints["algorithm"] = algo.lower()
    for proto, ours in (("LL128", "LL128"), ("LL", "LL"), ("SIMPLE", "Simple")):
        if proto in tokens:
            hints["protocol"] = ours
            break
    return coll, hints


def size_from_nelems(collective: str, in_nelems, out_nelems, dtype) -> int | None:
    """nccl-tests size from PyTorch's element counts (the larger buffer of the two)."""
    width = dtype_bytes(dtype)
    counts = [int(x) for x in (in_nelems, out_nelems) if isinstance(x, (int, float)) and x > 0]
    if width is None or not counts:
        return None
    if collective == "all_to_all":
        return int(counts[0]) * width
    return max(counts) * width


def size_from_dims(collective: str, dims, dtypes, group_size: int) -> int | None:
    """nccl-tests size from a gloo/c10d op's first input tensor (``Input Dims``)."""
    try:
        shape = dims[0]
        while shape and isinstance(shape[0], list):      # a TensorList: its first tensor
            shape = shape[0]
        count = math.prod(int(d) for d in shape)
        dtype = dtypes[0] if isinstance(dtypes, list) and dtypes else dtypes
    except (TypeError, ValueError, IndexError):
        return None
    width = dtype_bytes(dtype)
    if width is None or count <= 0:
        return None
    return count * width * (group_size if collective == "all_gather" else 1)


def parse_ranks(value) -> tuple[int, ...] | None:
    """Ranks from ``[0, 1]``, ``"[0, 1]"`` or ``"0,1"`` (None if unreadable or empty)."""
    if isinstance(value, str):
        value = re.findall(r"-?\d+", value)
    try:
        ranks = tuple(int(r) for r in value)
    except (TypeError, ValueError):
        return None
    return ranks or None


def parse_collective_bytes(items, source: str = "--collective-bytes") -> dict[str, int]:
    """``["CollectiveReduceV2=1.5M", ...]`` -> {name: bytes}.

    :raises ConfigError: naming the item that is not NAME=SIZE.
    """
    out = {}
    for item in items or ():
        name, eq, size = str(item).partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"expected NAME=SIZE, got {item!r}", source=source)
        try:
            out[name.strip()] = parse_size(size.strip())
        except UnitError as exc:
            raise ConfigError(str(exc), source=source) from None
    return out
