"""Masked rows held without their padding (:class:`Tailed`), and the ops that evaluate on that form
(a :class:`TailOps`, a part of :class:`.tiles.TileInterpreter`).

A Triton-style load ``x.load((row, cols), mask=cols < C, other=v)`` with a block wider than ``C``
is, in every program, ``C`` real elements along the last axis and then ``block - C`` copies of
``v``.  Copying each program's row into a fresh padded array costs as much as the ops that read
it, so such a load is held as the real columns (a view of the buffer where it can be) and the
tail value, and the ops that can keep the form do: pointwise ops apply to the real part and to
the tail value (elementwise, so bit for bit the padded array's), reductions and arg reductions
along the last axis combine the real part's result with the tail's where that is exactly the
padded array's (see :meth:`TailOps.op_reduce`), and a store whose mask stays in the real columns
writes from them.  Any other use evaluates the padded array (TileInterpreter.env does, on first
reading), which is the definition of every result here.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...dsl.combines import COMBINES, Combine
from ...dsl.ir import Op
from ...dsl.types import element_type
from . import numerics
from .pointwise import EVAL, WIDE
from .tile_numerics import arg_along, reduce_along


@attrs.frozen(eq=False)
class Tailed:
    """A tile (P or 1, *shape) whose elements along the last axis are ``real`` (P or 1, *shape[:-1],
    C), 0 < C < shape[-1], and then ``tail`` (a () or (P,) array, the real part's dtype) in every
    remaining column."""

    real: np.ndarray
    tail: np.ndarray
    shape: tuple[int, ...]

    @property
    def columns(self) -> int:
        return self.real.shape[-1]

    def tail_tile(self, ndim: int) -> np.ndarray:
        """The tail value shaped to broadcast against an array of ``ndim`` axes (programs first)."""
        t = self.tail
        return t.reshape(t.shape + (1,) * (ndim - t.ndim)) if t.ndim else t

    def evaluate(self) -> np.ndarray:
        """The padded array, as a masked load builds it."""
        real, rank = self.real, 1 + len(self.shape)
        lead = max(real.shape[0], self.tail.shape[0] if self.tail.ndim else 1)
        out = np.empty((lead,) + self.shape, real.dtype)
        out[..., :self.columns] = real
        out[..., self.columns:] = self.tail_tile(rank)
        return out

    # the shape ops keep the form where the last axis stays last and whole; else None (evaluated)
    def broadcast(self, shape):
        if shape[-1] != self.shape[-1]:
            return None
        real = self.real
        return Tailed(np.broadcast_to(real, real.shape[:1] + shape[:-1] + (self.columns,)), self.tail, shape)

    def reshaped(self, axes, shape):
        if axes[-1] != len(self.shape) - 1:
            return None
        real = self.real
        return Tailed(real.reshape(real.shape[:1] + shape[:-1] + (self.columns,)), self.tail, shape)

    def transposed(self, perm, shape):
        return None

    def per_program(self, fn):
        return Tailed(fn(self.real), np.asarray(fn(self.tail)), self.shape)


_ABSENT = object()


class TailOps:
    """The ops of ``interpreter``'s launch on :class:`Tailed` operands (any other operand: as the
    interpreter evaluates it)."""

    def __init__(self, interpreter):
        self.interpreter = interpreter
        self.fns: dict[Op, object] = {}

    def _parts(self, op: Op):
        """Each operand as (real part, tail value), where every tile operand is a Tailed one of one
        width or a tile the same in all its elements (a splat); else None.  None also where no
        operand is Tailed."""
        run = self.interpreter
        lazy = run.lazy
        held = [lazy.get(v) for v in op.operands]
        tailed = [h for h in held if type(h) is Tailed]
        if not tailed:
            return None
        first = tailed[0]
        rank = 1 + len(first.shape)
        parts = []
        for v, h in zip(op.operands, held):
            if type(h) is Tailed:
                if h.shape != first.shape or h.columns != first.columns:
                    return None
                parts.append((h.real, h.tail))
                continue
            x = np.asarray(run.env[v])
            if x.ndim == 0:
                parts.append((x, x))
                continue
            if x.ndim != rank or x.shape[1:] != first.shape:
                return None
            if any(s != 0 and n > 1 for s, n in zip(x.strides[1:], x.shape[1:])):
                return None  # differs between elements: its tail would too
            compact = x[(slice(None),) + (slice(0, 1),) * (rank - 1)]
            parts.append((compact, compact.reshape(compact.shape[:1]) if compact.shape[0] > 1 else compact.reshape(())))
        return first, parts

    def tile_pointwise(self, op: Op) -> None:
        """A pointwise op with a tile result: on the real parts and the tail values where it can."""
        run = self.interpreter
        fn = self.fns.get(op)
        if fn is None:
            fn = self.fns[op] = EVAL[op.opcode]
            if op.operands and not numerics._narrow(element_type(op.operands[0].type).numpy):
                fn = WIDE.get(fn, fn)
        if not self.elementwise(op, fn):
            run.env[op.result] = fn(*[run.env[v] for v in op.operands])

    def elementwise(self, op: Op, fn) -> bool:
        """Elementwise ``fn`` of ``op``'s operands on the real parts and the tail values, where
        some operand is Tailed and the others allow it (see :meth:`_parts`)."""
        found = self._parts(op)
        if found is None:
            return False
        first, parts = found
        real = np.asarray(fn(*[r for r, _ in parts]))
        tail = np.asarray(fn(*[t for _, t in parts]))
        real = np.broadcast_to(real, real.shape[:1] + first.shape[:-1] + (first.columns,))
        self.interpreter.lazy[op.result] = Tailed(real, tail, first.shape)
        return True

    def cast(self, op: Op) -> bool:
        """A cast of a Tailed tile to a non-index type: of its real part and tail value."""
        run = self.interpreter
        (value,) = op.operands
        held = run.lazy.get(value)
        if type(held) is not Tailed or element_type(op.result.type).is_index:
            return False
        src, dst = element_type(value.type), element_type(op.result.type)
        run.lazy[op.result] = Tailed(numerics.cast(held.real, src, dst), np.asarray(numerics.cast(held.tail, src, dst)),
                                     held.shape)
        return True

    def _last_axis(self, op: Op):
        """The Tailed operand of a reduction along its last axis, else None."""
        held = self.interpreter.lazy.get(op.operands[0])
        if type(held) is Tailed and op.attrs.axis == len(held.shape) - 1:
            return held
        return None

    def reduce(self, op: Op):
        """The reduction of a Tailed tile along its last axis, combined from the real part's and
        the tail's where that is exactly the padded array's: max and min (a NaN result is left to
        the padded array: which NaN it keeps depends on NumPy's order), the bitwise combines of
        integers and bools, integer sums and products (they wrap, so in any order); None for the
        others (float sums and products round in NumPy's pairwise order)."""
        held = self._last_axis(op)
        if held is None:
            return None
        combine, dtype = op.attrs.op, held.real.dtype
        rule = COMBINES[combine]
        repeats = held.shape[-1] - held.columns
        if not (rule.idempotent or dtype.kind in "iu"):
            return None
        axis = len(held.shape)
        real = reduce_along(held.real, combine, axis)
        tail = held.tail_tile(real.ndim)
        if combine is Combine.SUM:
            tail = np.multiply(tail, np.asarray(repeats).astype(dtype), dtype=dtype)
        elif combine is Combine.PROD:
            tail = np.power(tail, np.asarray(repeats).astype(dtype), dtype=dtype)
        elif combine is Combine.XOR and repeats % 2 == 0:
            tail = np.zeros_like(tail)
        shape = np.broadcast_shapes(real.shape, np.shape(tail))
        both = np.stack([np.broadcast_to(real, shape), np.broadcast_to(tail, shape)], axis=-1)
        result = reduce_along(both, combine, both.ndim - 1)
        if dtype.kind == "f" or numerics._narrow(dtype):
            if np.isnan(result.astype(np.float32) if numerics._narrow(dtype) else result).any():
                return None
        return result

    def argreduce(self, op: Op):
        """argmax / argmin of a Tailed tile along its last axis: the real part's, or the first tail
        column where the tail wins (np.argmax's rules: the first of equals, the first NaN)."""
        held = self._last_axis(op)
        if held is None:
            return None
        axis = len(held.shape)
        index = arg_along(held.real, op.attrs.op, axis)
        best = np.take_along_axis(held.real, index[..., None], axis)[..., 0]
        tail = held.tail_tile(best.ndim)
        if numerics._narrow(best.dtype):
            best, tail = best.astype(np.float32), np.asarray(tail).astype(np.float32)
        beats = tail > best if op.attrs.op is Combine.MAX else tail < best
        wins = (beats | np.isnan(tail)) & ~np.isnan(best) if best.dtype.kind == "f" else beats
        return np.where(wins, np.int64(held.columns), index)

    def store_values(self, value, plans) -> np.ndarray | None:
        """The real part of a Tailed value a store writes, where every box of ``plans`` lies in the
        real columns; else None."""
        held = self.interpreter.lazy.get(value)
        if type(held) is not Tailed or not plans:
            return None
        if any(plan.box()[-1].stop > held.columns for plan in plans):
            return None
        return held.real
