"""Point-to-point across servers as NCCL plans it: channels per peer, parts, messages.

An all_to_all (nccl-tests ``alltoall_perf``) is one send and one receive per peer, grouped;
a send/recv between servers is one of each. NCCL (NVIDIA/nccl v2.28.7-1, the release the
AWS p5 runs pinned; the same code in v2.27.7-1) plans each remote peer as follows:

* **p2p channels** (``src/graph/paths.cc``, ``ncclTopoComputeP2pChannels``):
  ``p2pnChannels = pow2Up(min(nChannels, NCCL_MAX_P2P_NCHANNELS = 32))``, with
  ``nChannels`` the ring graph's channels.
* **channels per network peer** (``ncclTopoGetNchannels``, ``NCCL_NCHANNELS_PER_NET_PEER``
  unset): start from 2 and halve "while nChannelsMax x nRanks > p2pnChannels x 4", then
  at least the NICs needed for the GPU's bandwidth (one here: aws-ofi-nccl presents a
  GPU's 4 EFA rails as one NCCL device). ``p2pnChannelsPerPeer`` is the power of two of the
  smallest over all peers, a network peer's (NVLink peers get at least 2).
* **parts of one peer's bytes** (``src/enqueue.cc``): ``nChannelsMin`` is
  ``p2pnChannelsPerPeer`` halved while ``nChannelsMin x nRanks > p2pnChannels``;
  ``addP2pToPlan`` starts from ``min(nChannelsMin, ceil(bytes / (stepSize / 2)))`` parts and
  doubles them, up to ``p2pnChannelsPerPeer``, while a part exceeds ``stepSize`` (across
  servers). Each part is its own proxy operation on its own channel.
* **message size** (``addP2pToPlan``, "Tune chunk size for the network"): ``stepSize`` is
  ``NCCL_P2P_NET_CHUNKSIZE`` (default 128 KiB; aws-ofi-nccl sets 512 KiB on p5/p5e,
  ``src/platform-aws.cpp``), divided by 4 for a peer's bytes below one step, by 2 below 8
  steps. The proxy sends a part as messages of that size.

This module is the arithmetic only; :func:`p2p_net_s` prices it with a fabric's costs
(``calibration.yaml`` ``p2p_op_us`` and ``p2p_message_us``, per NIC link type).
"""

from __future__ import annotations

import math

MAX_P2P_CHANNELS = 32          # NCCL_MAX_P2P_NCHANNELS default (MAXCHANNELS)
DEFAULT_NET_CHUNK = 1 << 17    # NCCL_P2P_NET_CHUNKSIZE default (init.cc: 128 kB)
_US = 1e-6


def _pow2_up(x: int) -> int:
    return 1 << max(int(x) - 1, 0).bit_length()


def p2p_channels(ring_channels: int) -> int:
    """``p2pnChannels``: the ring graph's channels, at most 32, rounded up to a power of 2."""
    return _pow2_up(min(ring_channels, MAX_P2P_CHANNELS))


def channels_per_net_peer(n_ranks: int, p2p_ch: int) -> int:
    """``p2pnChannelsPerPeer`` with network peers: 2, halved while 2 x nRanks exceeds
    4 x p2pnChannels, at least 1 (one NCCL network device per GPU)."""
    ch = 2
    while ch * n_ranks > p2p_ch * 4 and ch > 1:
        ch //= 2
    return min(_pow2_up(max(1, ch)), p2p_ch)


def parts(peer_bytes: int, n_ranks: int, p2p_ch: int, step: int) -> int:
    """Channels (proxy operations) one remote peer's ``peer_bytes`` are split over."""
    if peer_bytes <= 0:
        return 1
    most = channels_per_net_peer(n_ranks, p2p_ch)
    least = most
    while least * n_ranks > p2p_ch and least > 1:
        least //= 2
    n = min(least, math.ceil(peer_bytes / (step // 2)))
    part = max(step // 2, math.ceil(peer_bytes / n))
    while part > step and n <= most // 2:
        n *= 2
        part = math.ceil(peer_bytes / n)
    return n


def message_bytes(peer_bytes: int, step: int) -> int:
    """NCCL's network message (chunk) size for a peer's ``peer_bytes`` (Simple protocol)."""
    if peer_bytes < step:
        return step // 4
    if peer_bytes < 8 * step:
        return step // 2
    return step


def messages(peer_bytes: int, n_parts: int, step: int) -> int:
    """Messages the proxy sends for one peer: per part, its bytes in messages."""
    if peer_bytes <= 0:
        return 0
    return n_parts * math.ceil(math.ceil(peer_bytes / n_parts) / message_bytes(peer_bytes,
                                                                               step))


def p2p_net_s(peer_bytes: int, remote_peers: int, n_ranks: int, ring_channels: int,
              step: int, op_s: float, message_s: float) -> float:
    """Seconds a rank's sends to ``remote_peers`` peers across servers cost beyond their
    bytes: ``op_s`` per proxy operation (a peer's part) and ``message_s`` per message, in
    series on the rank's proxy."""
    if remote_peers <= 0 or not (op_s or message_s):
        return 0.0
    ch = p2p_channels(ring_channels)
    n = parts(peer_bytes, n_ranks, ch, step)
    return remote_peers * (n * op_s + messages(peer_bytes, n, step) * message_s)


__all__ = ["DEFAULT_NET_CHUNK", "MAX_P2P_CHANNELS", "channels_per_net_peer",
           "message_bytes", "messages", "p2p_channels", "p2p_net_s", "parts"]
