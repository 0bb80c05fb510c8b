"""The send/recv checks of :meth:`Trace.validate`, op by op instead of member by member.

A send or recv op of a class stands for one transfer per member (members map by offset,
:mod:`simulator.trace.schema`), so a 3-D parallel trace on thousands of GPUs has millions
of transfers: too many to check one Python tuple at a time each time a trace is
checked. Here each op's members are one numpy array: ``peers_fit`` checks that no member
sends to itself or outside the world, ``transfers_match`` that every send has its recv of the
same size and the other way round: first op by op (a send op and a recv op carry the same
transfers when the recv's class, shifted by its peer offset, lists the send's ranks in the
same order), else by sorting one integer key per transfer.

Both only answer "all good"; where they say no (or cannot tell, e.g. keys too wide for 64
bits), the schema runs its member-by-member check, which finds the first offender and
words the error exactly as before. So a good trace is accepted as before and a bad one is
refused with the same line.
"""

from __future__ import annotations

from simulator.lazy import LazyModule

np = LazyModule("numpy")        # loaded by the first check, not by reading a trace file

_KEY_LIMIT = 1 << 62          # keys stay below this, so int64 sums cannot wrap


def ranks_array(ranks: tuple) -> np.ndarray | None:
    """The class's ranks as int64 (None where a rank does not fit in 64 bits)."""
    try:
        return np.asarray(ranks, dtype=np.int64)
    except OverflowError:
        return None


def peers_fit(ranks: np.ndarray | None, offset: int, world_size: int) -> bool:
    """Every member ``r`` of the class has its partner ``r + offset`` in the world and is
    not its own partner."""
    if (ranks is None or not (-_KEY_LIMIT < offset < _KEY_LIMIT) or not len(ranks)
            or ranks.min() < 0 or ranks.max() >= world_size):
        return False
    peers = ranks + offset
    return offset != 0 and bool(((peers >= 0) & (peers < world_size)).all())


def peer_ops(cls):
    """(op, tag, k) of each send/recv between ranks of ``cls``, in list order: the op is
    its members' k-th of that kind to (or from) that peer with that tag."""
    seen: dict[tuple, int] = {}
    for op in cls.ops:
        if not op.is_peer_transfer:
            continue
        tag = op.attrs.get("tag")
        k = seen.get((op.kind, op.peer, tag), 0)
        seen[(op.kind, op.peer, tag)] = k + 1
        yield op, tag, k


def transfers_match(classes: list, world_size: int) -> bool:
    """Every send between ranks of ``classes`` has exactly one recv with the same sender,
    receiver, tag and ordinal and the same size, and every recv its send (peers already
    checked with :func:`peers_fit`)."""
    return ops_match(classes) or _members_match(classes, world_size)


def ops_match(classes: list) -> bool:
    """Every send op of ``classes`` has a recv op carrying the very same transfers (same
    senders in the same order, receivers, tag, ordinal and size) and the other way round.

    A send op of ranks ``R`` at offset ``o`` carries ``(r, r + o)`` for ``r`` in ``R``; a
    recv op of ranks ``Q`` at offset ``p`` carries ``(q + p, q)``: the same transfers when
    ``o == -p`` and ``R == Q + p`` in order. Ranks are distinct within and across classes
    and ordinals distinct within one (checked before), so every transfer is one key, and
    equal counts of op keys on both sides mean equal transfers. False says nothing about
    the members (one recv op may take its transfers from several send ops' classes)."""
    balance: dict = {}
    for cls in classes:
        ranks = ranks_array(cls.ranks)
        if ranks is None:
            return False
        own = None
        for op, tag, k in peer_ops(cls):
            offset = op.peer - cls.ranks[0]
            if op.kind == "send":
                own = ranks.tobytes() if own is None else own
                key, step = (own, offset, tag, k, op.size_bytes), 1
            else:
                if not -_KEY_LIMIT < offset < _KEY_LIMIT:
                    return False
                key, step = ((ranks + offset).tobytes(), -offset, tag, k, op.size_bytes), -1
            balance[key] = balance.get(key, 0) + step
    return not any(balance.values())


def _members_match(classes: list, world_size: int) -> bool:
    """:func:`transfers_match` transfer by transfer: one sorted integer key per member."""
    tags: dict = {}                     # (tag, k) -> small integer
    sides = {"send": ([], [], []), "recv": ([], [], [])}   # keys of pairs, (tag, k), sizes
    for cls in classes:
        ranks = ranks_array(cls.ranks)
        if ranks is None:
            return False
        for op, tag, k in peer_ops(cls):
            peers = ranks + (op.peer - int(ranks[0]))
            src, dst = (ranks, peers) if op.kind == "send" else (peers, ranks)
            pairs, tks, sizes = sides[op.kind]
            pairs.append(src * world_size + dst)
            tks.append((tags.setdefault((tag, k), len(tags)), len(ranks)))
            sizes.append(op.size_bytes)
    if world_size * world_size * max(len(tags), 1) >= _KEY_LIMIT:
        return False
    send, recv = (_sorted_keys(*sides[kind], len(tags)) for kind in ("send", "recv"))
    return (len(send[0]) == len(recv[0]) and np.array_equal(send[0], recv[0])
            and bool((np.diff(send[0]) > 0).all()) and np.array_equal(send[1], recv[1]))


def _sorted_keys(pairs: list, tks: list, sizes: list, n_tags: int):
    """(sorted transfer keys, the sizes in the same order) of one side."""
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    counts = [n for _, n in tks]
    keys = np.concatenate(pairs) * max(n_tags, 1) + np.repeat([t for t, _ in tks], counts)
    order = np.argsort(keys, kind="stable")
    return keys[order], np.repeat(_sizes_array(sizes), counts)[order]


def _sizes_array(sizes: list) -> np.ndarray:
    """The ops' sizes as int64 where every one is an int that fits (compared as fast
    integers), else as Python objects (compared as they are)."""
    if all(type(x) is int and -_KEY_LIMIT < x < _KEY_LIMIT for x in sizes):
        return np.asarray(sizes, dtype=np.int64)
    return np.asarray(sizes, dtype=object)
