"""Tensor-memory-accelerator copies of a pipelined fold's staged operands (sm_90a; see
:mod:`.software_pipeline`).

An operand loaded as a tensor's box (``p.x.load_tile(origin, shape)``: offsets ``offset + sum_d
stride_d (origin_d + i_d)``, the tensor's own bounds as the mask, zeros past them) and staged for
a warpgroup mma in a swizzled layout is copied by one thread with ``cp.async.bulk.tensor``: the
hardware clips the box at the tensor's edges and writes it in the swizzle the wgmma reads.  A
box's rows are consecutive staged rows, so A, whose rows are staged in the Mma layout's order
(:meth:`~.warpgroups.SwizzledRows.position`), goes 8 rows a box; a box's inner axis is one
swizzle span, so a wider row takes a box per span.

Whether the launch can describe the tensor to the hardware is known only then (its address and
strides; :mod:`accy.runtime.tensor_maps`): the copies run under its ``tma_ready`` flag, and the
``cp.async`` copies of the same operand run where it is false.  Either way thread 0 arrives on
the stage's mbarrier expecting the bytes its copies bring, so one wait serves both paths."""

from __future__ import annotations

import math

import attrs

from ..dsl.ir import Op, Value, constant_of
from ..dsl.ops import TensorMapAttrs, TmaLoadAttrs
from ..dsl.tensors import tensor_parameters
from ..dsl.traced import Traced
from ..dsl.types import index
from .rebuild import Part, Rebuild
from .tile_memory import Deferred
from .warpgroups import SwizzledRows

MAX_BOX = 256  # elements along one axis of a box


def polynomial(e) -> dict | None:
    """A tile_access expression as a sum of monomials: {(values sorted by id): coefficient}."""
    if isinstance(e, int):
        return {(): e} if e else {}
    if isinstance(e, Value):
        c = constant_of(e)
        if isinstance(c, int) and not isinstance(c, bool):
            return {(): c} if c else {}
        return {(e,): 1}
    if isinstance(e, tuple) and e[0] in ("add", "mul"):
        a, b = polynomial(e[1]), polynomial(e[2])
        if a is None or b is None:
            return None
        out: dict = {}
        if e[0] == "add":
            for part in (a, b):
                for k, v in part.items():
                    out[k] = out.get(k, 0) + v
        else:
            for ka, va in a.items():
                for kb, vb in b.items():
                    k = tuple(sorted(ka + kb, key=id))
                    out[k] = out.get(k, 0) + va * vb
        return {k: v for k, v in out.items() if v}
    return None


def _plus(*parts) -> dict:
    out: dict = {}
    for scale, p in parts:
        for k, v in p.items():
            out[k] = out.get(k, 0) + scale * v
    return {k: v for k, v in out.items() if v}


def _expression(p: dict):
    """A polynomial back as an expression."""
    out = 0
    for k, v in p.items():
        term = v
        for value in k:
            term = ("mul", term, value)
        out = term if out == 0 else ("add", out, term)
    return out


@attrs.frozen(eq=False)
class TensorBox:
    """A tile_load that reads tensor ``tensor``'s box at ``origin`` (an expression per axis)."""

    tensor: str
    origin: tuple


@attrs.frozen
class BoxCopy:
    """One ``cp.async.bulk.tensor`` of an operand: the map, and the box's first row and column in
    the loaded tile (on its row and column axes)."""

    map: TensorMapAttrs
    row: int
    col: int


class TensorCopies(Part):
    """Which staged operands the tensor memory accelerator copies (:meth:`plan`), and the copies
    of a pipeline stage (:meth:`issue`)."""

    def __init__(self, core: Rebuild, memory, graph):
        super().__init__(core)
        self.memory = memory
        self.scalars = {p.name: v for p, v in zip(graph.scalars, graph.body.args)}
        self.tensors = {t.name: t for t in tensor_parameters(graph.params)}

    def tensor_box(self, op: Op) -> TensorBox | None:
        """``op`` as a box of a tensor (see the module's doc), or None."""
        t = self.tensors.get(op.attrs.get("buffer")) if op.opcode == "tile_load" else None
        if t is None or len(op.result.type.shape) != t.ndim:
            return None
        offsets, other, mask = op.operands
        if constant_of(other) not in (0, 0.0) or str(constant_of(other)) == "-0.0":
            return None
        shapes = self.memory.shapes
        form, box = shapes.affine(offsets), shapes.box(mask)
        if form is None or box is None or box.flags:
            return None
        name = t.name
        param = lambda s: {(self.scalars[f"{name}__{s}"],): 1}  # noqa: E731
        expected = param("offset")
        # an axis of one element has no position: its bounds hold or not for the whole tile
        # (0 <= origin, 0 < shape - origin), so they are matched to it by its shape
        zero_lows = [polynomial(e) for e in box.zero_lows]
        zero_highs = [polynomial(e) for e in box.zero_highs]
        origin = []
        for d in range(t.ndim):
            if op.result.type.shape[d] == 1:
                if box.lows[d] or box.highs[d]:
                    return None
                match = next(((lo, hi) for lo in zero_lows for hi in zero_highs if lo is not None and hi is not None
                              and hi == _plus((1, param(f"shape{d}")), (1, lo))), None)
                if match is None:
                    return None
                zero_lows.remove(match[0])
                zero_highs.remove(match[1])
                origin.append(_plus((-1, match[0])))
                continue
            if polynomial(form.coefs[d]) != param(f"stride{d}") or len(box.lows[d]) != 1 or len(box.highs[d]) != 1:
                return None
            low, high = polynomial(box.lows[d][0]), polynomial(box.highs[d][0])
            if low is None or high is None:
                return None
            start = _plus((-1, low))  # i >= -origin
            if high != _plus((1, param(f"shape{d}")), (-1, start)):  # i < shape - origin
                return None
            origin.append(start)
        for d, start in enumerate(origin):
            expected = _plus((1, expected), (1, polynomial(("mul", _expression(start),
                                                            self.scalars[f"{name}__stride{d}"]))))
        if zero_lows or zero_highs or polynomial(form.base) != expected:
            return None
        return TensorBox(name, tuple(_expression(o) for o in origin))

    def plan(self, x: Deferred, rows) -> list[BoxCopy] | None:
        """The copies of operand ``x`` staged as ``rows``, or None where it is no tensor's box,
        is not staged swizzled, or its rows do not split into boxes."""
        if not isinstance(rows, SwizzledRows) or x.op.opcode != "tile_load":
            return None
        found = self.tensor_box(x.op)
        shape = x.op.result.type.shape
        big = [d for d, n in enumerate(shape) if n != 1]
        if found is None or len(big) != 2 or big[1] != len(shape) - 1:
            return None
        n_rows, n_cols = shape[big[0]], shape[-1]
        run = 8 if rows.warps else min(n_rows, MAX_BOX)  # A's rows are permuted 8 at a time
        if n_rows % run or n_cols % rows.per_row:
            return None
        box = tuple(run if d == big[0] else rows.per_row if d == len(shape) - 1 else 1 for d in range(len(shape)))
        m = TensorMapAttrs(tensor=found.tensor, dtype=x.op.attrs.dtype, box=box, swizzle=rows.swizzle)
        return [BoxCopy(m, r, c) for r in range(0, n_rows, run) for c in range(0, n_cols, rows.per_row)]

    def issue(self, x: Deferred, copies: list[BoxCopy], array, base, rows, barrier: str, slot):
        """Thread 0's copies of ``x`` (a trip's operand, its values in ``env``) into ``array``
        from ``base`` (staged as ``rows``), completing on mbarrier ``slot`` of ``barrier``."""
        core = self.core
        found = self.tensor_box(x.op)
        shape = x.op.result.type.shape
        row_axis = next(d for d, n in enumerate(shape) if n != 1)
        origin = [self.memory.expr(o) for o in found.origin]
        for c in copies:
            at = core.add(base, rows.at(self.b, core, c.row, c.col))
            coords = [core.add(o, c.row if d == row_axis else c.col if d == len(shape) - 1 else 0)
                      for d, o in enumerate(origin)]
            a = c.map
            attrs_ = TmaLoadAttrs(shared=array.name, barrier=barrier, tensor=a.tensor, dtype=a.dtype, box=a.box,
                                  swizzle=a.swizzle)
            core.record("tma_load", [core.traced(v, index) for v in (at, slot, *coords)], attrs_)

    def ready(self, copies: list[BoxCopy]):
        return self.b.record("tma_ready", [], copies[0].map).result

    def all_ready(self, copies: list[list[BoxCopy]]):
        """Whether the launch could describe every tensor these operands' copies read."""
        out = None
        for c in copies:
            flag = Traced(self.ready(c))
            out = flag if out is None else self.b.logical_and(out, flag)
        return out


def stage_bytes(operands) -> int:
    """The bytes a stage's TMA copies bring: its operands' (Deferred) whole boxes."""
    return sum(x.dtype.itemsize * math.prod(x.op.result.type.shape) for x in operands)
