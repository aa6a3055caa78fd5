"""Helpers the generated block code calls: broadcasting, copy-on-write register
updates, parameter bytes, and the integer and bit operations NumPy has no single
function for (``mul.hi`` of 64-bit values, ``bfe``, ``prmt``, ``lop3`` ...).

Register arrays are never modified in place (a partial write copies), so one
array may be shared by several registers, and cached constant arrays can be
handed out freely.
"""

from __future__ import annotations

import numpy as np

from .errors import PtxError
from .numerics import F16, I8, I16, I32, I64, U8, U16, U32, U64

_UINT = {1: U8, 2: U16, 4: U32, 8: U64}
_INT = {1: I8, 2: I16, 4: I32, 8: I64}


def bc(value, n: int):
    """One value for every thread."""
    return np.full(n, value, np.asarray(value).dtype)


class Broadcast:
    """A constant broadcast to ``n`` threads, cached (the arrays are never written)."""

    __slots__ = ("value", "n", "array")

    def __init__(self, value):
        self.value, self.n, self.array = value, -1, None

    def get(self, n: int):
        if n != self.n:
            self.array = np.full(n, self.value, np.asarray(self.value).dtype)
            self.n = n
        return self.array


def put(old, ids, values):
    """``old`` with ``old[ids] = values`` (a copy: register arrays are never written in place)."""
    new = old.copy()
    new[ids] = values
    return new


def lanemask(lane, kind: str):
    one = np.uint32(1)
    bit = one << lane
    if kind == "eq":
        return bit
    lt = bit - one
    if kind == "lt":
        return lt
    if kind == "le":
        return lt | bit
    if kind == "ge":
        return ~lt
    if kind == "gt":
        return ~(lt | bit)
    raise ValueError(kind)


# -- parameters (bytes) -------------------------------------------------------------------------


def pld(reg, off: int, dtype, nvec: int = 1):
    """A value of ``dtype`` (``nvec`` of them) at byte ``off`` of a parameter register."""
    dtype = np.dtype(dtype)
    w = dtype.itemsize * nvec
    if off < 0 or off + w > reg.shape[1]:
        raise PtxError(f"parameter access at byte {off} of a {reg.shape[1]}-byte parameter")
    chunk = np.ascontiguousarray(reg[:, off:off + w]).view(dtype)
    return chunk if nvec > 1 else chunk.reshape(-1)


def pst(reg, off: int, values, dtype, nvec: int = 1):
    """A copy of the parameter register with ``values`` stored at byte ``off``."""
    dtype = np.dtype(dtype)
    w = dtype.itemsize * nvec
    if off < 0 or off + w > reg.shape[1]:
        raise PtxError(f"parameter access at byte {off} of a {reg.shape[1]}-byte parameter")
    new = reg.copy()
    v = np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype), (reg.shape[0], nvec) if nvec > 1
                                             else (reg.shape[0],)))
    new[:, off:off + w] = v.view(U8).reshape(reg.shape[0], w)
    return new


def kparam(T, off: int, dtype, nvec: int = 1):
    """A kernel parameter (the same for every thread) as one value (or a row of ``nvec``)."""
    dtype = np.dtype(dtype)
    w = dtype.itemsize * nvec
    raw = T.kparams[off:off + w]
    if len(raw) < w:
        raise PtxError(f"kernel parameter access past the end of the parameters (byte {off})")
    v = raw.view(dtype)
    return v[0] if nvec == 1 else v


# -- integers ------------------------------------------------------------------------------------------


def mulhi_u32(a, b):
    return ((np.asarray(a, U32).astype(U64) * np.asarray(b, U32).astype(U64)) >> np.uint64(32)).astype(U32)


def mulhi_s32(a, b):
    return ((np.asarray(a, I32).astype(I64) * np.asarray(b, I32).astype(I64)) >> np.int64(32)).astype(I32)


def mulhi_u16(a, b):
    return ((np.asarray(a, U16).astype(U32) * np.asarray(b, U16).astype(U32)) >> np.uint32(16)).astype(U16)


def mulhi_s16(a, b):
    return ((np.asarray(a, I16).astype(I32) * np.asarray(b, I16).astype(I32)) >> np.int32(16)).astype(I16)


def _mul_u64_full(a, b):
    """(high, low) 64-bit halves of the 128-bit product of uint64 arrays."""
    a, b = np.asarray(a, U64), np.asarray(b, U64)
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a_lo, a_hi = a & m32, a >> s32
    b_lo, b_hi = b & m32, b >> s32
    ll = a_lo * b_lo
    lh = a_lo * b_hi
    hl = a_hi * b_lo
    hh = a_hi * b_hi
    mid = (ll >> s32) + (lh & m32) + (hl & m32)
    high = hh + (lh >> s32) + (hl >> s32) + (mid >> s32)
    low = (mid << s32) | (ll & m32)
    return high, low


def mulhi_u64(a, b):
    return _mul_u64_full(a, b)[0]


def mulhi_s64(a, b):
    a, b = np.asarray(a, I64), np.asarray(b, I64)
    hi, _ = _mul_u64_full(a.view(U64) if a.ndim else np.uint64(int(a) & (2**64 - 1)),
                          b.view(U64) if b.ndim else np.uint64(int(b) & (2**64 - 1)))
    # signed correction: hi(a*b) = hi_u(a, b) - (a < 0 ? b : 0) - (b < 0 ? a : 0)
    hi = hi - np.where(a < 0, b.view(U64) if b.ndim else np.uint64(int(b) & (2**64 - 1)), np.uint64(0)) \
        - np.where(b < 0, a.view(U64) if a.ndim else np.uint64(int(a) & (2**64 - 1)), np.uint64(0))
    return np.asarray(hi, U64).view(I64) if np.ndim(hi) else np.uint64(hi).view(I64)


def mulwide(a, b, dtype_wide):
    return np.asarray(a).astype(dtype_wide) * np.asarray(b).astype(dtype_wide)


def mul24(a, b, signed: bool, hi: bool):
    a, b = np.asarray(a, U32), np.asarray(b, U32)
    if signed:
        a24 = ((a.astype(I64) << 40) >> 40) if np.ndim(a) else np.int64(((int(a) & 0xFFFFFF) ^ 0x800000) - 0x800000)
        b24 = ((b.astype(I64) << 40) >> 40) if np.ndim(b) else np.int64(((int(b) & 0xFFFFFF) ^ 0x800000) - 0x800000)
        p = a24 * b24
        p = p.view(U64) if np.ndim(p) else np.uint64(int(p) & (2**64 - 1))
    else:
        p = (a & np.uint32(0xFFFFFF)).astype(U64) * (b & np.uint32(0xFFFFFF)).astype(U64)
    if hi:
        return ((p >> np.uint64(16)) & np.uint64(0xFFFFFFFF)).astype(U32)
    return (p & np.uint64(0xFFFFFFFF)).astype(U32)


def div_u(a, b):
    """Unsigned division; x / 0 is all ones (what the GPU's division sequence gives)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    zero = b == 0
    q = a // np.where(zero, 1, b).astype(a.dtype)
    return np.where(zero, ~np.zeros((), a.dtype), q).astype(a.dtype)


def rem_u(a, b):
    """Unsigned remainder; x % 0 is x."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    zero = b == 0
    r = a % np.where(zero, 1, b).astype(a.dtype)
    return np.where(zero, a, r).astype(a.dtype)


def _uabs(x, udt):
    """|x| of signed values as unsigned (|MIN| wraps to 2**(n-1))."""
    u = x.view(udt) if x.ndim else np.asarray(x).view(udt)
    return np.where(x < 0, (~u) + udt.type(1), u).astype(udt)


def div_s(a, b):
    """Signed division truncating toward zero; MIN / -1 = MIN; x / 0 = -1 for x >= 0, 1 for x < 0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    dt = a.dtype
    udt = _UINT[dt.itemsize]
    ua, ub = _uabs(a, udt), _uabs(b, udt)
    zero = ub == 0
    q = ua // np.where(zero, udt.type(1), ub)
    q = np.where(zero, ~np.zeros((), udt), q)
    neg = (a < 0) != (b < 0)
    q = np.where(neg, (~q) + udt.type(1), q).astype(udt)
    return q.view(dt)


def rem_s(a, b):
    """Signed remainder with the dividend's sign; x % 0 = x."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    dt = a.dtype
    udt = _UINT[dt.itemsize]
    ua, ub = _uabs(a, udt), _uabs(b, udt)
    zero = ub == 0
    r = ua % np.where(zero, udt.type(1), ub)
    r = np.where(a < 0, (~r) + udt.type(1), r).astype(udt).view(dt)
    return np.where(zero, a, r).astype(dt)


def sat_add_s32(a, b):
    r = np.asarray(a, I32).astype(I64) + np.asarray(b, I32).astype(I64)
    return np.clip(r, -2**31, 2**31 - 1).astype(I32)


def sat_sub_s32(a, b):
    r = np.asarray(a, I32).astype(I64) - np.asarray(b, I32).astype(I64)
    return np.clip(r, -2**31, 2**31 - 1).astype(I32)


def add_carry(a, b, cin):
    """(a + b + cin, carry out) for uint32/uint64 arrays; cin is 0/1 (uint32)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    dt = a.dtype
    c = np.asarray(cin).astype(dt)
    d = a + b + c
    carry = (d < a) | ((c == 1) & (d == a))
    return d, carry.astype(U32)


def sub_borrow(a, b, bin_):
    """(a - b - bin, borrow out)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    dt = a.dtype
    c = np.asarray(bin_).astype(dt)
    d = a - b - c
    borrow = (a < b) | ((c == 1) & (a == b))
    return d, borrow.astype(U32)


def shl(a, n):
    """Shift left; amounts of the width or more give 0."""
    a = np.asarray(a)
    return np.left_shift(a, np.minimum(np.asarray(n).astype(U64), a.dtype.itemsize * 8).astype(a.dtype)).astype(a.dtype)


def shr(a, n):
    """Shift right (arithmetic for signed types); large amounts saturate."""
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    amount = np.minimum(np.asarray(n).astype(U64), bits)
    if a.dtype.kind == "i":
        amount = np.minimum(amount, bits - 1)
        return np.right_shift(a, amount.astype(a.dtype)).astype(a.dtype)
    return np.right_shift(a, amount.astype(a.dtype)).astype(a.dtype)


def popc(a):
    a = np.asarray(a)
    if hasattr(np, "bitwise_count"):  # NumPy >= 2.0
        return np.bitwise_count(a).astype(U32)
    udt = _UINT[a.dtype.itemsize]
    x = a.view(udt).astype(U64)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((x * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(U32)


def clz(a):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    u = a.view(_UINT[a.dtype.itemsize]) if a.ndim else np.asarray(a).view(_UINT[a.dtype.itemsize])
    n = np.zeros(u.shape, U32)
    x = u.copy()
    shift = bits // 2
    while shift:
        top = x >> u.dtype.type(bits - shift)
        empty = top == 0
        n += np.where(empty, np.uint32(shift), np.uint32(0))
        x = np.where(empty, x << u.dtype.type(shift), x)
        shift //= 2
    n += (x >> u.dtype.type(bits - 1) == 0).astype(U32)
    return n if np.ndim(a) else n[()]


def bfind(a, signed: bool, shiftamt: bool):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    udt = _UINT[a.dtype.itemsize]
    u = a.view(udt) if a.ndim else np.asarray(a).view(udt)
    if signed:
        u = np.where(a < 0, ~u, u).astype(udt)
    z = clz(u)
    d = np.where(u == 0, np.uint32(0xFFFFFFFF), np.uint32(bits - 1) - z).astype(U32)
    if shiftamt:
        d = np.where(u == 0, d, np.uint32(bits - 1) - d).astype(U32)
    return d


def brev(a):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    udt = _UINT[a.dtype.itemsize]
    x = a.view(udt).copy() if a.ndim else np.asarray(a).view(udt).copy()
    out = np.zeros_like(x)
    for i in range(bits):
        out |= ((x >> udt.type(i)) & udt.type(1)) << udt.type(bits - 1 - i)
    return out.view(a.dtype)


def bfe(a, b, c, signed: bool):
    a = np.asarray(a)
    bits = a.dtype.itemsize * 8
    udt = _UINT[a.dtype.itemsize]
    u = a.view(udt) if a.ndim else np.asarray(a).view(udt)
    pos = (np.asarray(b).astype(U64) & np.uint64(0xFF)).astype(np.int64)
    ln = (np.asarray(c).astype(U64) & np.uint64(0xFF)).astype(np.int64)
    pos, ln, u = np.broadcast_arrays(pos, ln, u)
    shifted = np.where(pos >= bits, udt.type(0), u >> np.minimum(pos, bits - 1).astype(udt))
    take = np.minimum(ln, np.maximum(bits - pos, 0))  # bits actually extracted
    mask = np.where(take >= bits, ~udt.type(0), (udt.type(1) << np.minimum(take, bits - 1).astype(udt)) - udt.type(1))
    field = shifted & mask
    if signed:
        msb_index = np.minimum(pos + ln - 1, bits - 1)
        sbit = np.where(ln == 0, 0, (u >> np.maximum(msb_index, 0).astype(udt)) & udt.type(1)).astype(udt)
        fill = np.where(sbit == 1, ~mask, udt.type(0))
        field = np.where(ln == 0, udt.type(0), field | fill)
    else:
        field = np.where(ln == 0, udt.type(0), field)
    return field.astype(udt).view(a.dtype)


def bfi(a, b, c, d):
    """Insert the low bits of ``a`` into ``b`` at position ``c`` (``d`` bits)."""
    a, b = np.asarray(a), np.asarray(b)
    bits = b.dtype.itemsize * 8
    udt = _UINT[b.dtype.itemsize]
    pos = (np.asarray(c).astype(U64) & np.uint64(0xFF)).astype(np.int64)
    ln = (np.asarray(d).astype(U64) & np.uint64(0xFF)).astype(np.int64)
    ua = a.view(udt) if a.ndim else np.asarray(a).view(udt)
    ub = b.view(udt) if b.ndim else np.asarray(b).view(udt)
    ua, ub, pos, ln = np.broadcast_arrays(ua, ub, pos, ln)
    take = np.minimum(ln, np.maximum(bits - pos, 0))
    mask = np.where(take >= bits, ~udt.type(0), (udt.type(1) << np.minimum(take, bits - 1).astype(udt)) - udt.type(1))
    sh = np.minimum(pos, bits - 1).astype(udt)
    placed_mask = np.where(pos >= bits, udt.type(0), mask << sh)
    out = (ub & ~placed_mask) | ((ua << sh) & placed_mask)
    return out.astype(udt)


_PRMT_MODES = {
    "f4e": lambda c, i: (c + i) & 7,
    "b4e": lambda c, i: (c - i) & 7,
    "rc8": lambda c, i: c,
    "ecl": lambda c, i: np.maximum(c, i),
    "ecr": lambda c, i: np.minimum(c, i),
    "rc16": lambda c, i: ((c & 1) * 2) + (i & 1),
}


def prmt(a, b, c, mode: str | None):
    a, b, c = (np.asarray(x).astype(U32) for x in (a, b, c))
    a, b, c = np.broadcast_arrays(a, b, c)
    src = (b.astype(U64) << np.uint64(32)) | a.astype(U64)
    out = np.zeros(a.shape, U32)
    for i in range(4):
        if mode is None:
            sel = (c >> np.uint32(4 * i)) & np.uint32(0xF)
            byte_index = (sel & np.uint32(7)).astype(U64)
            byte = ((src >> (byte_index * np.uint64(8))) & np.uint64(0xFF)).astype(U32)
            sign = (sel & np.uint32(8)) != 0
            byte = np.where(sign, np.where(byte & np.uint32(0x80), np.uint32(0xFF), np.uint32(0)), byte)
        else:
            ci = (c & np.uint32(3)).astype(np.int64)
            byte_index = np.asarray(_PRMT_MODES[mode](ci, i)).astype(U64)
            byte = ((src >> (byte_index * np.uint64(8))) & np.uint64(0xFF)).astype(U32)
        out |= byte << np.uint32(8 * i)
    return out


def lop3(a, b, c, lut: int):
    a, b, c = (np.asarray(x) for x in (a, b, c))
    dt = np.result_type(a, b, c)
    a, b, c = a.astype(dt), b.astype(dt), c.astype(dt)
    out = np.zeros(np.broadcast(a, b, c).shape, dt)
    for i in range(8):
        if (lut >> i) & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out


def shf(a, b, c, left: bool, clamp: bool):
    a, b, c = (np.asarray(x).astype(U32) for x in (a, b, c))
    n = np.minimum(c, np.uint32(32)) if clamp else (c & np.uint32(31))
    cat = (b.astype(U64) << np.uint64(32)) | a.astype(U64)
    n64 = n.astype(U64)
    if left:
        return ((cat << n64) >> np.uint64(32)).astype(U32)
    return ((cat >> n64) & np.uint64(0xFFFFFFFF)).astype(U32)


def fns(mask, base, offset):
    mask, base, offset = (np.asarray(x) for x in (mask, base, offset))
    mask, base, offset = np.broadcast_arrays(mask.astype(U32), base.astype(U32).astype(np.int64),
                                             offset.astype(U32).view(I32).astype(np.int64))
    out = np.full(mask.shape, 0xFFFFFFFF, U32)
    flat = [x.reshape(-1) for x in (mask, base, offset)]
    res = out.reshape(-1)
    for k in range(res.size):
        m, pos, off = int(flat[0][k]), int(flat[1][k]), int(flat[2][k])
        if off == 0:
            if 0 <= pos < 32 and (m >> pos) & 1:
                res[k] = pos
            continue
        count, inc = abs(off) - 1, 1 if off > 0 else -1
        while 0 <= pos < 32:
            if (m >> pos) & 1:
                if count == 0:
                    res[k] = pos
                    break
                count -= 1
            pos += inc
    return out


def bmsk(a, b, clamp: bool):
    a, b = np.broadcast_arrays(np.asarray(a, U32).astype(np.int64), np.asarray(b, U32).astype(np.int64))
    a1, b1 = a & 31, b & 31
    mask0 = (0xFFFFFFFF << a1) & 0xFFFFFFFF
    total = a1 + b1
    mask1 = np.where(total >= 32, 0, (0xFFFFFFFF << np.minimum(total, 31)) & 0xFFFFFFFF)
    zero_mask1 = total >= 32
    if clamp:
        mask0 = np.where(a >= 32, 0, mask0)
        zero_mask1 |= (a >= 32) | (b >= 32)
    mask1 = np.where(zero_mask1, 0, np.where(b1 == 0, 0xFFFFFFFF, mask1))
    return (mask0 & ~mask1 & 0xFFFFFFFF).astype(U32)


def szext(a, b, clamp: bool, signed: bool):
    a, b = np.broadcast_arrays(np.asarray(a, U32).astype(np.int64), np.asarray(b, U32).astype(np.int64))
    b1 = b & 31
    too_large = (b >= 32) if clamp else np.zeros(b.shape, bool)
    mask = np.where(too_large, 0, (0xFFFFFFFF << b1) & 0xFFFFFFFF)
    if signed:
        sign_bit = np.where((b1 == 0) | too_large, 0, (a >> ((b1 - 1) & 31)) & 1)
    else:
        sign_bit = np.zeros(a.shape, np.int64)
    return ((a & ~mask) | np.where(sign_bit == 1, mask, 0)).astype(np.uint64).astype(U32)


def sad(a, b, c):
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    diff = np.where(a < b, b - a, a - b)
    return (diff.astype(c.dtype if hasattr(c, "dtype") else a.dtype) + c).astype(a.dtype)


def dp4a(a, b, c, a_signed: bool, b_signed: bool):
    out = np.asarray(c).astype(I64)
    a, b = np.asarray(a, U32), np.asarray(b, U32)
    for i in range(4):
        x = ((a >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(I64)
        y = ((b >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(I64)
        if a_signed:
            x = np.where(x >= 128, x - 256, x)
        if b_signed:
            y = np.where(y >= 128, y - 256, y)
        out = out + x * y
    return (out & 0xFFFFFFFF).astype(U64).astype(U32)


# -- packed halves -------------------------------------------------------------------------------------


def lo16(x):
    return (np.asarray(x, U32) & np.uint32(0xFFFF)).astype(U16)


def hi16(x):
    return (np.asarray(x, U32) >> np.uint32(16)).astype(U16)


def pack16(lo, hi):
    return (np.asarray(hi).astype(U16).astype(U32) << np.uint32(16)) | np.asarray(lo).astype(U16).astype(U32)


def lo32(x):
    return (np.asarray(x, U64) & np.uint64(0xFFFFFFFF)).astype(U32)


def hi32(x):
    return (np.asarray(x, U64) >> np.uint64(32)).astype(U32)


def pack32(lo, hi):
    return (np.asarray(hi).astype(U32).astype(U64) << np.uint64(32)) | np.asarray(lo).astype(U32).astype(U64)


def packed2(fn, *args):
    """Apply ``fn`` (on uint16 bit patterns) to the low and the high halves of packed operands."""
    lows = [lo16(a) for a in args]
    highs = [hi16(a) for a in args]
    return pack16(fn(*lows), fn(*highs))


def as_f16(bits):
    return np.asarray(bits, U16).view(F16)


def f16_as_bits(x):
    from .numerics import f16_bits

    return f16_bits(np.asarray(x, F16))


# -- control -------------------------------------------------------------------------------------------


def trap(T, ids, mask, site, what="trap"):
    from .memory import thread_text

    lanes = np.arange(T.n) if ids is None else ids
    if mask is not None:
        lanes = lanes[np.asarray(mask, bool)]
        if len(lanes) == 0:
            return
    raise PtxError(f"{what} executed", line=site.line, source=site.text, thread=thread_text(T, lanes[0]))


count_nonzero = np.count_nonzero


def branch_index(T, ids, site, table, index):
    """``brx.idx``: the block each thread jumps to (an int when they all agree)."""
    index = np.asarray(index).astype(np.int64)
    bad = index >= len(table)
    if bad.any():
        from .memory import thread_text

        k = int(np.flatnonzero(bad)[0])
        lane = k if ids is None else int(ids[k])
        raise PtxError(f"brx.idx index {int(index[k])} is past the {len(table)} branch targets",
                       line=site.line, source=site.text, thread=thread_text(T, lane))
    targets = table[index]
    if len(targets) and (targets == targets[0]).all():
        return int(targets[0])
    return targets
