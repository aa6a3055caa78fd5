"""Warp-level operations (``shfl.sync``, ``vote.sync``, ``redux.sync``, ``match.sync``,
``activemask``, ``elect.sync``) and block reductions (``bar.red``) on the threads
executing them together.

The scheduler runs such an instruction once for all the threads that reached it
together (every live thread of each warp's member mask), so each function sees,
per warp, exactly the participating lanes.
"""

from __future__ import annotations

import numpy as np

from .numerics import BOOL, U32, U64


def _keys(T, ids):
    if ids is None:
        return T.wkey, T.lane
    return T.wkey[ids], T.lane[ids]


def _as(x, dtype, n):
    x = np.asarray(x)
    if x.ndim == 0:
        return np.full(n, x, dtype)
    return x.astype(dtype, copy=False)


def ballot(T, ids, pred):
    """Per thread: the mask of its warp's participating lanes whose ``pred`` is true."""
    wk, lane = _keys(T, ids)
    n = len(wk)
    pred = _as(pred, BOOL, n)
    bits = np.where(pred, np.left_shift(np.uint64(1), lane.astype(U64)), np.uint64(0))
    totals = np.zeros(T.nwkeys, U64)
    np.add.at(totals, wk, bits)
    return totals[wk].astype(U32)


def activemask(T, ids):
    wk, _ = _keys(T, ids)
    return ballot(T, ids, np.ones(len(wk), bool))


def _in_mask(lane, membermask):
    return ((membermask >> lane.astype(U32)) & np.uint32(1)).astype(bool)


def vote(T, ids, kind: str, pred, membermask):
    wk, lane = _keys(T, ids)
    n = len(wk)
    pred = _as(pred, BOOL, n)
    member = _in_mask(lane, _as(membermask, U32, n))
    if kind == "ballot":
        return ballot(T, ids, pred & member)
    count = np.zeros(T.nwkeys, np.int64)
    np.add.at(count, wk, member.astype(np.int64))
    true = np.zeros(T.nwkeys, np.int64)
    np.add.at(true, wk, (pred & member).astype(np.int64))
    c, t = count[wk], true[wk]
    if kind == "all":
        return t == c
    if kind == "any":
        return t > 0
    if kind == "uni":
        return (t == 0) | (t == c)
    raise ValueError(kind)


def shfl(T, ids, mode: str, a, b, c):
    """(values, in-range predicate) of ``shfl.sync.mode.b32``."""
    wk, lane = _keys(T, ids)
    n = len(wk)
    a = _as(a, U32, n)
    b = _as(b, U32, n).astype(np.int64)
    c = _as(c, U32, n).astype(np.int64)
    ln = lane.astype(np.int64)
    bval = b & 0x1F
    cval = c & 0x1F
    seg = (c >> 8) & 0x1F
    max_lane = (ln & seg) | (cval & ~seg)
    min_lane = ln & seg
    if mode == "up":
        j = ln - bval
        ok = j >= max_lane
    elif mode == "down":
        j = ln + bval
        ok = j <= max_lane
    elif mode == "bfly":
        j = ln ^ bval
        ok = j <= max_lane
    elif mode == "idx":
        j = min_lane | (bval & ~seg)
        ok = j <= max_lane
    else:
        raise ValueError(mode)
    j = np.where(ok, j, ln)
    where = np.full(T.nwkeys * 32, -1, np.int64)
    where[wk.astype(np.int64) * 32 + ln] = np.arange(n)
    src = where[wk.astype(np.int64) * 32 + np.clip(j, 0, 31)]
    src = np.where(src < 0, np.arange(n), src)  # an inactive source lane: undefined; keep our own value
    return a[src], ok


def redux(T, ids, op: str, values, membermask, signed: bool):
    wk, lane = _keys(T, ids)
    n = len(wk)
    member = _in_mask(lane, _as(membermask, U32, n))
    v = _as(values, U32, n)
    wk_m = wk[member]
    if op == "add":
        acc = np.zeros(T.nwkeys, np.int64)
        np.add.at(acc, wk_m, v[member].astype(np.int64))
        return (acc[wk] & 0xFFFFFFFF).astype(U32)
    if op in ("min", "max"):
        x = v.view(np.int32).astype(np.int64) if signed else v.astype(np.int64)
        init = np.iinfo(np.int64).max if op == "min" else np.iinfo(np.int64).min
        acc = np.full(T.nwkeys, init, np.int64)
        (np.minimum if op == "min" else np.maximum).at(acc, wk_m, x[member])
        return (acc[wk] & 0xFFFFFFFF).astype(U32)
    if op in ("and", "or", "xor"):
        init = 0xFFFFFFFF if op == "and" else 0
        acc = np.full(T.nwkeys, init, np.int64)
        ufunc = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        ufunc.at(acc, wk_m, v[member].astype(np.int64))
        return (acc[wk] & 0xFFFFFFFF).astype(U32)
    raise ValueError(op)


def match(T, ids, kind: str, values, membermask):
    """(masks, all-equal predicate) of ``match.{any,all}.sync``."""
    wk, lane = _keys(T, ids)
    n = len(wk)
    member = _in_mask(lane, _as(membermask, U32, n))
    v = np.asarray(values)
    if v.ndim == 0:
        v = np.full(n, v)
    v = v.astype(U64)
    bits = np.where(member, np.left_shift(np.uint64(1), lane.astype(U64)), np.uint64(0))
    order = np.lexsort((v, wk))
    sw, sv = wk[order], v[order]
    new = np.r_[True, (sw[1:] != sw[:-1]) | (sv[1:] != sv[:-1])]
    group = np.cumsum(new) - 1
    totals = np.zeros(group[-1] + 1 if n else 0, U64)
    np.add.at(totals, group, bits[order])
    same = np.empty(n, U64)
    same[order] = totals[group]
    warp_total = np.zeros(T.nwkeys, U64)
    np.add.at(warp_total, wk, bits)
    if kind == "any":
        return same.astype(U32), np.zeros(n, bool)
    all_equal = same == warp_total[wk]
    return np.where(all_equal, _as(membermask, U32, n), np.uint32(0)), all_equal


def elect(T, ids, membermask):
    """(leader lane, is-leader predicate) of ``elect.sync``: the lowest participating lane."""
    wk, lane = _keys(T, ids)
    n = len(wk)
    member = _in_mask(lane, _as(membermask, U32, n))
    low = np.full(T.nwkeys, 32, np.int64)
    np.minimum.at(low, wk[member], lane[member].astype(np.int64))
    leader = low[wk]
    return leader.astype(U32), lane.astype(np.int64) == leader


def bar_red(T, ids, op: str, pred):
    """``bar.red``: a reduction of a predicate over each block's participating threads."""
    cta = T.cta if ids is None else T.cta[ids]
    n = len(cta)
    pred = _as(pred, BOOL, n)
    ncta = int(cta.max()) + 1 if n else 0
    true = np.bincount(cta, weights=pred.astype(np.float64), minlength=ncta).astype(np.int64)
    count = np.bincount(cta, minlength=ncta)
    if op == "popc":
        return true[cta].astype(U32)
    if op == "and":
        return true[cta] == count[cta]
    if op == "or":
        return true[cta] > 0
    raise ValueError(op)
