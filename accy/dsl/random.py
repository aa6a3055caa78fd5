"""Counter-based random numbers: Philox-4x32 (Salmon et al., "Parallel random numbers: as easy
as 1, 2, 3", SC'11), keyed by a seed and counted by an offset per element, so every element
draws independently of the others and of the backend (a mixin of the builder: ``t.rand`` in a
tile program, ``inner.rand`` in a thread).

The stream is Triton's (``tl.randint4x``, ``tl.rand``, ``tl.randn``) for the same seed and
offsets of the same type, so a dropout ported from Triton draws the same mask: the seed's 64
bits are the key, the offset's low and high 32 bits the first two counter words. Everything is
recorded as ordinary integer and float ops (``umulhi`` as a widened multiply), so every backend
computes the same bits; ``randn``'s ``log``, ``sqrt`` and ``cos`` are within their documented
ulps.
"""

from __future__ import annotations

import numbers

import numpy as np

from .traced import Traced, _error
from .types import DType, element_type, i32, u8, u16, u32, u64

# Philox-4x32's multipliers and Weyl key increments (the paper's constants)
ROUND_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
KEY_INCREMENTS = (0x9E3779B9, 0xBB67AE85)
DEFAULT_ROUNDS = 10
# the largest f32 below 2**-31 such that (2**31 - 1) times it rounds below 1.0
UNIFORM_SCALE = 4.6566127342e-10


class RandomOps:
    """``rand``, ``randn``, ``randint``, ``randint4x``, ``rand4x``, ``randn4x`` and ``umulhi``."""

    def umulhi(self, a, b) -> Traced:
        """The high half of the full product of ``a`` and ``b``'s bits read as unsigned (as
        CUDA's ``__umulhi``/``__umul64hi`` and Triton's ``umulhi``), in their (promoted)
        integer type."""
        a, b = (Traced(v) for v in self._operands("umulhi", a, b))
        t = element_type(a.type)
        if not t.is_int:
            raise _error(f"umulhi({a.type}, {b.type}): takes integers")
        unsigned = _UNSIGNED[t.bits]
        ua, ub = (x if t == unsigned else self.cast(x, unsigned) for x in (a, b))
        high = self._high_half(ua, ub, unsigned)
        return high if t == unsigned else self.cast(high, t)

    def _high_half(self, a: Traced, b: Traced, t: DType) -> Traced:
        if t.bits < 64:  # widen, multiply, keep the top half
            wide = _UNSIGNED[2 * t.bits]
            product = self.cast(a, wide) * self.cast(b, wide)
            return self.cast(product >> t.bits, t)
        # 64 bits: schoolbook on 32-bit halves, each partial product exact in 64 bits
        low = 0xFFFFFFFF
        a0, a1, b0, b1 = a & low, a >> 32, b & low, b >> 32
        p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
        middle = (p00 >> 32) + (p01 & low) + (p10 & low)  # below 3 * 2**32: no carry lost
        return p11 + (p01 >> 32) + (p10 >> 32) + (middle >> 32)

    def randint4x(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> tuple:
        """Four u32 values per element of ``offsets`` (an integer scalar or tile): Philox-4x32
        with ``n_rounds`` rounds of the counter (offset's low 32 bits, its high 32 bits (0 for
        a type of 32 bits or fewer), 0, 0) under the key of ``seed``'s 64 bits (an integer,
        sign-extended)."""
        return self._philox(seed, offsets, n_rounds, "randint4x")

    def _philox(self, seed, offsets, n_rounds, what: str) -> tuple:
        rounds = _rounds(n_rounds, what)
        offsets = self._lift(offsets, None, what)
        t = element_type(offsets.type)
        if not t.is_int:
            raise _error(f"{what}: offsets must be integers, got {offsets.type}")
        offsets = Traced(offsets)
        c0 = self.cast(offsets, u32)
        zero = c0 * 0
        c1 = self.cast(offsets >> 32, u32) if t.bits > 32 else zero
        k0, k1 = self._key(seed, what)
        c2, c3 = zero, zero
        for _ in range(rounds):
            (m0, m1), (w0, w1) = ROUND_MULTIPLIERS, KEY_INCREMENTS
            c0, c1, c2, c3 = (self.umulhi(m1, c2) ^ c1 ^ k0, c2 * m1, self.umulhi(m0, c0) ^ c3 ^ k1, c0 * m0)
            k0, k1 = k0 + w0, k1 + w1
        return c0, c1, c2, c3

    def _key(self, seed, what: str) -> tuple:
        """The seed's low and high 32 bits, as u32 values (constants for a Python int)."""
        if isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)):
            if not -2**63 <= int(seed) < 2**64:
                raise _error(f"{what}: the seed {seed} does not fit in 64 bits")
            bits = int(seed) % 2**64
            return self.constant(bits & 0xFFFFFFFF, u32), self.constant(bits >> 32, u32)
        if not isinstance(seed, Traced) or not element_type(seed.type).is_int or element_type(seed.type) != seed.type:
            got = seed.type if isinstance(seed, Traced) else repr(seed)
            raise _error(f"{what}: the seed is an integer scalar (a Python int or a scalar parameter), got {got}")
        wide = self.cast(seed, u64)  # a signed seed sign-extends, as Triton's seed.to(uint64)
        return self.cast(wide, u32), self.cast(wide >> 32, u32)

    def randint(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> Traced:
        """The first of :meth:`randint4x`'s four u32 values."""
        return self._philox(seed, offsets, n_rounds, "randint")[0]

    def uint_to_uniform(self, x) -> Traced:
        """A u32 (or i32) as an f32 in [0, 1): its bits as i32, negatives complemented, times
        :data:`UNIFORM_SCALE` (Triton's ``uint_to_uniform_float``)."""
        x = self.cast(x, i32)
        return self.where(x < 0, ~x, x) * UNIFORM_SCALE

    def rand(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> Traced:
        """An f32 uniform in [0, 1) per element of ``offsets`` (from :meth:`randint`)."""
        return self.uint_to_uniform(self._philox(seed, offsets, n_rounds, "rand")[0])

    def rand4x(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> tuple:
        """Four independent f32 uniforms in [0, 1) per element of ``offsets``."""
        return tuple(self.uint_to_uniform(x) for x in self._philox(seed, offsets, n_rounds, "rand4x"))

    def randn(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> Traced:
        """An f32 from the standard normal distribution per element of ``offsets``: Box-Muller's
        ``sqrt(-2 log u1) cos(2 pi u2)`` on the first two uniforms of :meth:`randint4x` (``u1``
        at least 1e-7)."""
        i1, i2, _, _ = self._philox(seed, offsets, n_rounds, "randn")
        return self._box_muller(i1, i2)[0]

    def randn4x(self, seed, offsets, n_rounds: int = DEFAULT_ROUNDS) -> tuple:
        """Four f32 standard normals per element of ``offsets``: Box-Muller's cosine and sine on
        each pair of :meth:`randint4x`'s uniforms (the first is :meth:`randn`'s)."""
        i1, i2, i3, i4 = self._philox(seed, offsets, n_rounds, "randn4x")
        return self._box_muller(i1, i2) + self._box_muller(i3, i4)

    def _box_muller(self, i1, i2) -> tuple:
        """``r cos(theta)`` and ``r sin(theta)`` of two u32 draws made uniform (Triton's
        ``pair_uniform_to_normal``): ``u1`` at least 1e-7."""
        u1 = self.max(self.uint_to_uniform(i1), 1.0e-7)
        angle = self.uint_to_uniform(i2) * 6.283185307179586
        radius = self.sqrt(self.log(u1) * -2.0)
        return radius * self.cos(angle), radius * self.sin(angle)


_UNSIGNED = {8: u8, 16: u16, 32: u32, 64: u64}


def _rounds(n_rounds, what: str) -> int:
    if isinstance(n_rounds, (bool, np.bool_)) or not isinstance(n_rounds, numbers.Integral) or n_rounds < 1:
        raise _error(f"{what}: n_rounds is a positive Python int (10 by default), got {n_rounds!r}")
    return int(n_rounds)
