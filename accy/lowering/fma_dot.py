"""``t.dot`` on FMAs in the tile distribution (:mod:`accy.lowering.distribute`), for the dots
tensor cores do not take: from shared-memory copies of its operands."""

from __future__ import annotations

from ..dsl.ir import Op
from ..dsl.ops import Precision
from ..dsl.traced import Traced
from ..dsl.types import f32, f64
from .rebuild import Part, Rebuild
from .registers import Registers, Regs
from .scratch import Scratch


def round_to_tf32(b, x: Traced) -> Traced:
    """``x`` (f32) rounded to tf32's 10 mantissa bits by builder ``b``, to nearest with ties away
    from zero, as ``cvt.rna.tf32.f32``: in f64, exactly (|x| / q + 0.5, floored, times q, with q
    the spacing of tf32 values at |x|, found by a binary search on the exponent)."""
    a = b.cast(b.abs(x), f64)
    p = b.constant(2.0 ** -126, f64)  # 2**e for the largest e <= log2 |x| (at least -126)
    for s in (128, 64, 32, 16, 8, 4, 2, 1):
        up = b.mul(p, b.constant(2.0 ** s, f64))
        p = b.select(b.le(up, a), up, p)
    q = b.mul(p, b.constant(2.0 ** -10, f64))
    rounded = b.mul(b.floor(b.add(b.div(a, q), b.constant(0.5, f64))), q)
    rounded = b.cast(b.copysign(rounded, b.cast(x, f64)), f32)
    special = b.logical_or(b.isnan(x), b.isinf(x))
    return b.select(special, x, rounded)


UNROLL = 4  # k's a trip of the dot's loop


class FmaDot(Part):
    """A dot as FMAs: both operands copied to the scratch (widened to the accumulator's type),
    then each thread's accumulator registers updated one k at a time."""

    def __init__(self, core: Rebuild, registers: Registers, scratch: Scratch):
        super().__init__(core)
        self.registers = registers
        self.scratch = scratch

    def dot(self, op: Op) -> None:
        core, registers, scratch = self.core, self.registers, self.scratch
        a, b_, acc = (self.env[v] for v in op.operands)
        acc = registers.regs(acc)
        a, b_ = registers.regs(a), registers.regs(b_)
        (m, kk), n = a.shape, b_.shape[1]
        c_type = acc.dtype
        tf32 = op.attrs.precision is Precision.TF32

        def widen(v):
            v = self.b.cast(v, c_type) if a.dtype != c_type else v
            return round_to_tf32(self.b, v) if tf32 else v

        array = scratch.scratch(c_type, m * kk + kk * n, op)
        scratch.before_write()
        registers.store_owned(array, a, lambda c: core.flat(c, (m, kk)), widen)
        registers.store_owned(array, b_, lambda c: core.flat(c, (kk, n), m * kk), widen)
        scratch.written()
        layout = acc.layout
        coords = registers.coords(layout)
        rows, cols = {}, {}
        for r in range(layout.registers):
            j0, j1 = layout.register_indices(r)
            rows.setdefault(j0, core.mul(coords[r][0], kk))
            cols.setdefault(j1, core.add(coords[r][1], m * kk))
        floats = c_type.is_float

        # LLVM does not unroll a distributed tile program's loops (accy.codegen.machine): a trip
        # does UNROLL k's here, each k's operands loaded just before its FMAs (unrolled whole,
        # ptxas would load every k's operands ahead of the FMAs: twice the registers)
        unroll = next(u for u in (UNROLL, 2, 1) if kk % u == 0)

        def step(inner, k0, accs):
            with core.region(inner):
                accs = list(accs)
                for u in range(unroll):
                    k = core.add(k0, u)
                    av = {j: scratch.load(array, core.add(at, k), c_type) for j, at in rows.items()}
                    kn = core.mul(k, n)
                    bv = {j: scratch.load(array, core.add(at, kn), c_type) for j, at in cols.items()}
                    for r in range(layout.registers):
                        j0, j1 = layout.register_indices(r)
                        if floats:
                            accs[r] = self.b.fma(av[j0], bv[j1], accs[r])
                        else:
                            accs[r] = self.b.add(accs[r], self.b.mul(av[j0], bv[j1]))
                return tuple(accs)

        result = self.b.fold_range(0, kk, unroll, tuple(acc.values), step)
        scratch.dirty = True
        self.env[op.result] = Regs(layout, c_type, tuple(result))
