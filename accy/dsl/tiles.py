"""The tile level of the tracing builder: what a ``for_each_tile`` program's builder ``t`` adds
to the scalar builder (a mixin of :class:`accy.dsl.builder.TileBuilder`).

A program computes on whole tiles: values of a static shape (:class:`~accy.dsl.types.TileType`).
Operands broadcast by NumPy's rules, recorded as explicit ``splat`` and ``broadcast`` ops, so
every pointwise op the graph holds takes operands of one shape and the backends never
broadcast.  Memory is read and written through tiles of element indices, one per dimension
of the tensor, with a mask: ``p.x.load((rows, cols), mask=..., other=0)``.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

from .combines import COMBINES, CombineRule
from .ops import (
    ArangeAttrs, ArgReduceAttrs, AtomicAttrs, Bounds, Combine, DotAttrs, LoadAttrs, OpTypeError, PermAttrs,
    Precision, ReduceAttrs, ShapeAttrs, StoreAttrs, dot_accumulator,
)
from .tensors import OUT_OF_SHAPE
from .traced import Tile, Traced, _error
from .types import MAX_TILE_ELEMENTS, MAX_TILE_RANK, TileType, boolean, element_type, i32, shape_of, u32



def cdiv(a, b):
    """``ceil(a / b)`` for non-negative integers, Python ints or traced index values."""
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        return -(-int(a) // int(b))
    return (a + (b - 1)) // b


def broadcast_shapes(*shapes: tuple[int, ...], what: str = "operands") -> tuple[int, ...]:
    """NumPy's broadcast of tile shapes, or a TraceError naming every shape."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise _error(f"{what} of shapes {' and '.join(map(str, shapes))} do not broadcast together "
                     "(NumPy's rules: trailing dimensions must match or be 1)") from None


def _static_shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, Traced) or (isinstance(shape, numbers.Integral) and not isinstance(shape, (bool, np.bool_))):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not shape:
        raise _error(f"{what}: a tile shape is a tuple of Python ints, got {shape!r}")
    for d in shape:
        if isinstance(d, Traced):
            raise _error(f"{what}: tile sizes are static (Python ints fixed when the kernel is traced), got a traced "
                         f"{d.type} value in {tuple(shape)!r}; mask the edges of a run-time extent instead")
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, numbers.Integral) or d < 1:
            raise _error(f"{what}: tile sizes are positive Python ints, got {d!r} in {tuple(shape)!r}")
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_TILE_RANK:
        raise _error(f"{what}: tiles have 1 to {MAX_TILE_RANK} dimensions, got {len(shape)} ({shape})")
    if math.prod(shape) > MAX_TILE_ELEMENTS:
        raise _error(f"{what}: {too_many(shape)}")
    return shape


def too_many(shape: tuple[int, ...]) -> str:
    return (f"a tile of shape {shape} holds {math.prod(shape)} elements, over the limit of {MAX_TILE_ELEMENTS} "
            "(2**20) per tile; use smaller tiles and loop over them with fold_range")


def _axis(axis, rank: int, what: str) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
        raise _error(f"{what}: axis must be a Python int or None, got {axis!r}")
    if not -rank <= axis < rank:
        raise _error(f"{what}: axis {axis} is out of range for a rank-{rank} tile")
    return int(axis) % rank


class TileOps:
    """The tile builder's own methods (``t.arange``, ``t.dot``, ``t.sum``, ...) and how it
    broadcasts operands."""

    def _block_launch(self, what: str):
        raise _error(f"{what}: a tile program has no threads of its own to cooperate (no shared memory, barriers "
                     "or shuffles): it computes on whole tiles, and the compiler spreads them over threads; use "
                     "t.sum/t.max/t.cumsum for reductions and scans, or write a SIMT kernel with for_each_block")

    def if_(self, cond, then, otherwise=None):
        """As the scalar builder's: the condition is one scalar for the whole program (for an
        elementwise choice, ``t.where(cond, a, b)``)."""
        if isinstance(cond, Tile):
            raise _error(f"if_: the condition is a {cond.type}; if_ branches the whole program on one bool "
                         "scalar; for an elementwise choice use t.where(cond, a, b), and mask loads and stores")
        return super().if_(cond, then, otherwise)

    # -- broadcasting ----------------------------------------------------------------
    def _operands(self, opcode: str, *xs) -> list:
        return self._broadcast_together(opcode, super()._operands(opcode, *xs))

    def _broadcast_together(self, opcode: str, values: list) -> list:
        shapes = [shape_of(v.type) for v in values]
        if not any(shapes):
            return values
        shape = broadcast_shapes(*shapes, what=f"{opcode}: operands")
        return [self._to_shape(v, shape) for v in values]

    def _to_shape(self, v, shape: tuple[int, ...]):
        """``v`` (a scalar or a tile) as a tile of ``shape``, by NumPy's broadcasting."""
        v = v.value if isinstance(v, Traced) else v
        own = shape_of(v.type)
        if own == shape:
            return v
        if not own:
            return self._record("splat", (v,), ShapeAttrs(shape=shape)).result
        if len(own) < len(shape):
            own = (1,) * (len(shape) - len(own)) + own
            v = self._record("reshape", (v,), ShapeAttrs(shape=own)).result
        return self._record("broadcast", (v,), ShapeAttrs(shape=shape)).result if own != shape else v

    def select(self, cond, if_true, if_false) -> Traced:
        """``if_true`` where ``cond`` holds, else ``if_false``, elementwise, all broadcast together."""
        cond = self._stored(cond, boolean, "where")  # a number is true where it is not 0 (a cast), as Triton's
        a, b = super()._operands("where", if_true, if_false)
        cond, a, b = self._broadcast_together("where", [cond, a, b])
        return Traced(self._record("select", (cond, a, b)).result)

    where = select

    def maximum(self, a, b) -> Traced:
        """The elementwise maximum (NaN propagates)."""
        return self._op("max", a, b)

    def minimum(self, a, b) -> Traced:
        return self._op("min", a, b)

    # -- making tiles ------------------------------------------------------------------
    def _tile(self, x, what: str) -> Tile:
        if not isinstance(x, Tile):
            raise _error(f"{what}: expected a tile, got {'a ' + str(x.type) + ' scalar' if isinstance(x, Traced) else repr(x)}")
        return x

    def arange(self, n, end=None) -> Tile:
        """The ``index`` tile ``0, 1, ..., n - 1``; ``t.arange(start, end)`` is ``start, ...,
        end - 1`` (Triton's ``tl.arange(start, end)``), both Python ints."""
        if end is not None:
            if isinstance(n, Traced) or isinstance(end, Traced):
                raise _error("arange(start, end): both are Python ints (the tile's size is static); add a traced "
                             "offset to t.arange(size) instead")
            return self.arange(end - n) + n if n else self.arange(end)
        (n,) = _static_shape(n, "arange")
        return Traced(self._record("arange", (), ArangeAttrs(n=n)).result)

    def cdiv(self, a, b):
        """``ceil(a / b)`` for non-negative integers (``accy.cdiv``)."""
        return cdiv(a, b)

    def full(self, shape, value, dtype=None) -> Tile:
        """A tile of ``shape`` holding ``value`` everywhere, of ``dtype``, else of the value's type:
        a Python int makes an ``index`` tile and a float an ``f32`` one, so give ``dtype`` for a
        tile to store into a tensor of another type (``t.full(shape, 1, p.h.dtype)``)."""
        shape = _static_shape(shape, "full")
        if dtype is not None:
            dtype = self._dtype(dtype, "full")
            value = self.cast(value, dtype) if isinstance(value, Traced) else self.constant(value, dtype)
        v = self._lift(value, None, "full")
        if isinstance(v.type, TileType):
            raise _error(f"full: the value must be a scalar, got a {v.type}; use t.broadcast_to for a tile")
        return Traced(self._to_shape(v, shape))

    def zeros(self, shape, dtype=None) -> Tile:
        """A tile of zeros of ``dtype`` (f32 unless given)."""
        dtype = self._dtype(dtype if dtype is not None else "f32", "zeros")
        return self.full(shape, False if dtype.is_bool else 0, dtype)

    def broadcast_to(self, x, shape) -> Tile:
        shape = _static_shape(shape, "broadcast_to")
        v = self._lift(x, None, "broadcast_to")
        broadcast_shapes(shape_of(v.type), shape, what="broadcast_to: shapes")
        if broadcast_shapes(shape_of(v.type), shape) != shape:
            raise _error(f"broadcast_to: a tile of shape {shape_of(v.type)} cannot broadcast to {shape}")
        return Traced(self._to_shape(v, shape))

    def reshape(self, x, shape) -> Tile:
        """The same elements in row-major order, in ``shape`` (one dimension may be -1)."""
        x = self._tile(x, "reshape")
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if shape.count(-1) == 1:
            rest = math.prod(d for d in shape if d != -1)
            shape = tuple(x.size // rest if d == -1 and rest and x.size % rest == 0 else d for d in shape)
        shape = _static_shape(shape, "reshape")
        if math.prod(shape) != x.size:
            raise _error(f"reshape: cannot reshape a tile of shape {x.shape} ({x.size} elements) to {shape} "
                         f"({math.prod(shape)} elements)")
        if shape == x.shape:
            return x
        return Traced(self._record("reshape", (x,), ShapeAttrs(shape=shape)).result)

    def expand_dims(self, x, axis: int) -> Tile:
        x = self._tile(x, "expand_dims")
        axis = _axis(axis, x.ndim + 1, "expand_dims")
        return self.reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])

    def trans(self, x, perm: Sequence[int] | None = None) -> Tile:
        """The transpose (``x.T``); for rank 3, ``perm`` orders the axes as ``np.transpose``."""
        x = self._tile(x, "trans")
        perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(perm)
        if sorted(perm) != list(range(x.ndim)):
            raise _error(f"trans: perm {perm} is not a permutation of the {x.ndim} axes of a {x.type}")
        if perm == tuple(range(x.ndim)):
            return x
        return Traced(self._record("trans", (x,), PermAttrs(perm=perm)).result)

    transpose = trans

    # -- reductions and scans -------------------------------------------------------
    def _flat(self, x: Tile) -> Tile:
        return self.reshape(x, (x.size,)) if x.ndim != 1 else x

    def _reduce(self, opcode: str, combine: Combine, x, axis, keepdims: bool, attrs_cls):
        what = f"{'arg' if opcode == 'argreduce' else ''}{combine}"
        x = self._tile(x, what)
        if axis is None:
            result = self._reduce(opcode, combine, self._flat(x), 0, False, attrs_cls)
            return self.full((1,) * x.ndim, result) if keepdims else result
        axis = _axis(axis, x.ndim, what)
        op = self._record(opcode, (x,), attrs_cls(op=combine, axis=axis))
        result = Traced(op.result)
        if keepdims:
            shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
            return Traced(self._to_shape(result, shape)) if x.ndim == 1 else self.reshape(result, shape)
        return result

    def max(self, x, *others, axis=None, keepdims: bool = False) -> Traced:
        """``t.max(x, axis)``: the largest element along ``axis`` (NaN propagates);
        ``t.max(a, b)``: the elementwise maximum, as the scalar builder's."""
        if others:
            self._not_an_axis("max", "maximum", x, others)
            return self._op("max", x, *others)
        if not isinstance(x, Tile):
            raise _error("max: t.max(x, axis) reduces a tile; t.max(a, b) (or t.maximum) compares two values")
        return self._reduce("reduce", Combine.MAX, x, axis, keepdims, ReduceAttrs)

    def min(self, x, *others, axis=None, keepdims: bool = False) -> Traced:
        """``t.min(x, axis)``: the smallest element along ``axis`` (NaN propagates);
        ``t.min(a, b)``: the elementwise minimum, as the scalar builder's."""
        if others:
            self._not_an_axis("min", "minimum", x, others)
            return self._op("min", x, *others)
        if not isinstance(x, Tile):
            raise _error("min: t.min(x, axis) reduces a tile; t.min(a, b) (or t.minimum) compares two values")
        return self._reduce("reduce", Combine.MIN, x, axis, keepdims, ReduceAttrs)

    def _not_an_axis(self, name: str, word: str, x, others) -> None:
        """``t.max(x, 1)`` reduces along axis 1 in Triton and would be the elementwise maximum
        with 1 here: refused rather than either silently."""
        if isinstance(x, Tile) and len(others) == 1 and isinstance(others[0], numbers.Integral) \
                and not isinstance(others[0], (bool, np.bool_)):
            k = int(others[0])
            raise _error(f"{name}(tile, {k}): write t.{name}(x, axis={k}) for the reduction along axis {k} (Triton's "
                         f"tl.{name}(x, {k})) or t.{word}(x, {k}) for the elementwise {word}")

    def _summed(self, x: Tile) -> Tile:
        """``x`` in the type Triton sums it in: an integer narrower than 32 bits (and bool) in i32,
        or u32 for an unsigned one, so that a sum of bytes does not wrap."""
        t = x.dtype
        if t.is_bool or (t.is_int and t.bits < 32):
            return self.cast(x, u32 if t.is_unsigned else i32)
        return x

    def _scan(self, combine: Combine, x, axis, reverse: bool = False) -> Tile:
        x = self._tile(x, f"cum{combine}")
        if axis is None:
            x, axis = self._flat(x), 0
        axis = _axis(axis, x.ndim, f"cum{combine}")
        if combine == Combine.SUM:
            x = self._summed(x)
        if reverse:  # from the end: the flipped tile's scan, flipped back (flip: accy.dsl.shapes)
            return self.flip(self._scan(combine, self.flip(x, axis), axis), axis)
        return Traced(self._record("scan", (x,), ReduceAttrs(op=combine, axis=axis)).result)

    # -- dot ----------------------------------------------------------------------------
    def dot(self, a, b, acc=None, *, precision: str = "ieee") -> Tile:
        """``acc + a @ b`` for (M, K) and (K, N) tiles: f16, bf16 and fp8 inputs accumulate in f32,
        f32 in f32, f64 in f64, i8 and u8 in i32; ``precision="tf32"`` (f32 inputs) first rounds
        each input to tf32, as tensor cores do."""
        a, b = self._tile(a, "dot: a"), self._tile(b, "dot: b")
        try:
            precision = Precision(precision)
        except ValueError:
            raise _error(f"dot: precision must be 'ieee' or 'tf32', got {precision!r}") from None
        if acc is None:  # zeros of the accumulator type; the op's type rule checks the rest
            wanted = dot_accumulator(a.dtype) if a.ndim == b.ndim == 2 else None
            if wanted is not None:
                acc = self.zeros((a.shape[0], b.shape[1]), wanted)
        if not isinstance(acc, Tile):
            got = acc.type if isinstance(acc, Traced) else repr(acc)
            raise _error(f"dot({a.type}, {b.type}): the accumulator must be a tile, got {got}"
                         if acc is not None else f"dot({a.type}, {b.type}): takes 2-D tiles of float or "
                                                 f"8-bit integer elements")
        return Traced(self._record("dot", (a, b, acc), DotAttrs(precision=precision)).result)

    # -- memory -----------------------------------------------------------------------
    def _layout(self, handle, what: str):
        """(shape, strides, offset) of a buffer or tensor parameter, as traced index values; None
        for the strides and offset of a plain buffer (unit stride from 0)."""
        if getattr(handle, "space", None) != "global":
            raise _error(f"{what}: tile programs read and write kernel parameters (buffers and tensors), got "
                         f"{handle!r}")
        if hasattr(handle, "strides") and hasattr(handle, "offset"):
            return tuple(handle.shape), tuple(handle.strides), handle.offset
        return (self.size(handle),), None, None

    def _indices(self, handle, idx, what: str, inside_known: bool = False):
        """The flat element offsets for per-dimension indices ``idx`` and where they are inside the
        tensor (None for a plain buffer, whose load checks its one dimension itself, and where the
        caller's mask already keeps every active index inside)."""
        shape, strides, offset = self._layout(handle, what)
        idx = tuple(idx) if isinstance(idx, (tuple, list)) else (idx,)
        if len(idx) != len(shape):
            raise _error(f"{what}: '{handle.name}' has {len(shape)} dimension{'s' * (len(shape) != 1)}, got "
                         f"{len(idx)} index{'es' * (len(idx) != 1)}")
        values = [Traced(self._index(what, i)) for i in idx]
        broadcast_shapes(*(shape_of(v.type) for v in values), what=f"{what}: indices")
        if strides is None:
            return values[0], None
        # each dimension's term at its own shape; the sum broadcasts them (rows[:, None] * s0 + cols)
        flat, code = offset, None
        for d, (i, n, s) in enumerate(zip(values, shape, strides)):
            flat = flat + i * s
            if not inside_known:  # a base-3 digit per dimension: 1 past its end, 2 below 0 (as tensor[i, j])
                digit = self.select(i >= n, 3**d, self.select(i < 0, 2 * 3**d, 0))
                code = digit if code is None else code + digit
        return flat, code

    def _mask(self, mask, like, what: str):
        if mask is None:
            return None
        m = self._lift(mask, boolean, what)
        if not element_type(m.type).is_bool:
            raise _error(f"{what}: mask must be bool (a comparison), got {m.type}")
        return Traced(m)

    def _access(self, handle, idx, mask, what: str, inside_known: bool = False):
        """(offsets, mask) tiles of one shape for a masked access; an unmasked index outside a
        tensor's shape becomes :data:`accy.dsl.tensors.OUT_OF_SHAPE` plus a digit per such
        dimension, outside its memory, so that the access's bounds check reports it."""
        offsets, code = self._indices(handle, idx, what, inside_known)
        mask = self._mask(mask, offsets, what)
        parts = [offsets] + ([mask] if mask is not None else [])
        shape = broadcast_shapes(*(shape_of(p.type) for p in parts), what=f"{what}: indices and mask")
        if code is not None:  # outside the shape: the marker every backend's bounds check reports by dimension
            offsets = self.select(code == 0, offsets, code + OUT_OF_SHAPE)
        offsets = Traced(self._to_shape(offsets, shape)) if shape else offsets
        mask = Traced(self._to_shape(mask if mask is not None else self.constant(True, boolean), shape)) \
            if shape else mask
        return offsets, mask

    def load_at(self, handle, idx, mask=None, other=None, *, inside_known: bool = False) -> Traced:
        """``p.x.load(idx, mask=None, other=None)``: the elements at ``idx`` (one index or tile of
        indices per dimension, broadcast together) where ``mask`` holds, ``other`` elsewhere (by
        default a zero of the parameter's dtype: False for bool)."""
        what = f"{handle.name}.load"
        offsets, mask = self._access(handle, idx, mask, what, inside_known)
        if other is None:  # a Python 0 would be an index constant where the parameter holds bools
            other = False if handle.dtype.is_bool else 0
        other = self._stored(other, handle.dtype, what)
        if other.type != handle.dtype:
            raise _error(f"{what}: other is a {other.type}, but '{handle.name}' holds {handle.dtype} (other is one "
                         "value, which every masked-off element reads)")
        # a box inside the shape (load_tile) needs no check of its own on the backends that skip it
        bounds = Bounds.SHAPE if inside_known else Bounds.CHECKED
        attrs_ = LoadAttrs(buffer=handle.name, dtype=handle.dtype)
        if not isinstance(offsets.type, TileType):  # every index a scalar: a scalar access
            if mask is None:
                return Traced(self._record("load", (offsets,), attrs_).result)
            return self.if_(mask, lambda t: Traced(t._record("load", (offsets,), attrs_).result),
                            lambda t: Traced(other))
        op = self._record("tile_load", (offsets, other, mask),
                          LoadAttrs(buffer=handle.name, dtype=handle.dtype, bounds=bounds))
        return Traced(op.result)

    def store_at(self, handle, idx, value, mask=None, *, inside_known: bool = False) -> None:
        """``p.x.store(idx, value, mask=None)``: write ``value`` (broadcast to the indices' shape)
        where ``mask`` holds; elements where it does not are never touched."""
        what = f"{handle.name}.store"
        offsets, mask = self._access(handle, idx, mask, what, inside_known)
        v = self._stored(value, handle.dtype, what)  # a store converts, as cast does
        shape = shape_of(offsets.type)
        if not shape:
            if shape_of(v.type):
                raise _error(f"{what}: a {v.type} stored at scalar indices; give a tile of indices per dimension")
            attrs_ = StoreAttrs(buffer=handle.name, dtype=handle.dtype)
            if mask is None:
                self._record("store", (offsets, v), attrs_)
            else:
                self.if_(mask, lambda t: t._record("store", (offsets, v), attrs_) and None)
            return
        broadcast_shapes(shape_of(v.type), shape, what=f"{what}: value and indices")
        if broadcast_shapes(shape_of(v.type), shape) != shape:
            raise _error(f"{what}: a value of shape {shape_of(v.type)} does not fit indices of shape {shape}")
        v = self._to_shape(v, shape)
        bounds = Bounds.SHAPE if inside_known else Bounds.CHECKED  # as load_at's
        self._record("tile_store", (offsets, v, mask), StoreAttrs(buffer=handle.name, dtype=handle.dtype, bounds=bounds))

    def _tile_box(self, handle, origin, shape, what: str, steps=None):
        """Per-dimension index tiles of the box at ``origin`` of ``shape`` (element ``j`` of axis
        ``d`` at ``origin[d] + j * steps[d]``), and where it is inside."""
        tensor_shape = self._layout(handle, what)[0]
        origin = tuple(origin) if isinstance(origin, (tuple, list)) else (origin,)
        if len(origin) != len(tensor_shape):
            dims = f"{len(tensor_shape)} dimension{'s' * (len(tensor_shape) != 1)}"
            raise _error(f"{what}: '{handle.name}' has {dims}, the origin gives {len(origin)}")
        if len(shape) != len(tensor_shape):
            raise _error(f"{what}: the tile shape {shape} must have one size per dimension of '{handle.name}' "
                         f"({len(tensor_shape)})")
        steps = self._steps(steps, len(shape), what)
        idx, inside = [], None
        for d, (o, n, extent, step) in enumerate(zip(origin, shape, tensor_shape, steps)):
            axis_shape = tuple(n if k == d else 1 for k in range(len(shape)))
            i = self.arange(n) if isinstance(step, int) and step == 1 else self.arange(n) * step
            i = self.reshape(i, axis_shape) + o if len(shape) > 1 else i + o
            here = (i >= 0) & (i < extent)
            inside = here if inside is None else inside & here
            idx.append(i)
        return idx, inside

    def load_tile(self, handle, origin, shape, other=None, steps=None) -> Tile:
        """``p.x.load_tile(origin, shape, other=None, steps=None)``: the box of ``shape`` at
        element offsets ``origin``, ``steps[d]`` elements apart along axis ``d`` (1 by default:
        a stride or dilation otherwise); positions past the tensor's edges read ``other`` (as
        :meth:`load_at`'s)."""
        shape = _static_shape(shape, f"{handle.name}.load_tile")
        idx, inside = self._tile_box(handle, origin, shape, f"{handle.name}.load_tile", steps)
        return self.load_at(handle, tuple(idx), inside, other, inside_known=True)

    def store_tile(self, handle, origin, value, steps=None) -> None:
        """``p.x.store_tile(origin, value, steps=None)``: write the tile at element offsets
        ``origin`` (``steps`` apart, as :meth:`load_tile`'s); positions past the tensor's edges
        are not written."""
        v = self._tile(value, f"{handle.name}.store_tile")
        idx, inside = self._tile_box(handle, origin, v.shape, f"{handle.name}.store_tile", steps)
        self.store_at(handle, tuple(idx), v, inside, inside_known=True)

    def _steps(self, steps, rank: int, what: str) -> tuple:
        """A box's steps: one per axis, each a non-zero Python int or an integer scalar."""
        if steps is None:
            return (1,) * rank
        steps = tuple(steps) if isinstance(steps, (tuple, list)) else (steps,)
        if len(steps) != rank:
            raise _error(f"{what}: steps gives {len(steps)} value{'s' * (len(steps) != 1)} for a box of {rank} "
                         f"dimension{'s' * (rank != 1)}")
        out = []
        for s in steps:
            if isinstance(s, Traced) and not isinstance(s, Tile) and element_type(s.type).is_int:
                out.append(Traced(self._index(what, s)))
            elif isinstance(s, numbers.Integral) and not isinstance(s, (bool, np.bool_)) and s != 0:
                out.append(int(s))
            else:
                raise _error(f"{what}: each step is a non-zero Python int or an integer scalar, got "
                             f"{s.type if isinstance(s, Traced) else repr(s)}")
        return tuple(out)

    def _tile_atomic(self, kind: str, handle, idx, value, mask) -> Traced | None:
        what = f"{handle.name}.atomic_{kind}"
        offsets, mask = self._access(handle, idx, mask, what)
        v = self._stored(value, handle.dtype, what)
        shape = shape_of(offsets.type) or shape_of(v.type)
        if not shape:  # every index and the value scalars: one atomic per program, as a scalar store is
            attrs_ = AtomicAttrs(op=kind, buffer=handle.name, dtype=handle.dtype)
            if mask is None:
                return Traced(self._record("atomic", (offsets, v), attrs_).result)
            self.if_(mask, lambda t: t._record("atomic", (offsets, v), attrs_) and None)
            return None
        if not shape_of(offsets.type):
            offsets = Traced(self._to_shape(offsets, shape))
            mask = Traced(self._to_shape(mask if mask is not None else self.constant(True, boolean), shape))
        broadcast_shapes(shape_of(v.type), shape, what=f"{what}: value and indices")
        v = self._to_shape(v, shape)
        try:
            self._record("tile_atomic", (offsets, v, mask), AtomicAttrs(op=kind, buffer=handle.name,
                                                                          dtype=handle.dtype))
        except OpTypeError as e:  # pragma: no cover - _record turns it into a TraceError
            raise _error(f"{what}: {e}") from None



def _reduction(rule: CombineRule, opcode: str, attrs_cls, name: str):
    def method(self, x, axis=None, keepdims: bool = False, *, keep_dims: bool | None = None,
               tie_break_left: bool = True) -> Traced:
        if not tie_break_left:
            raise _error(f"{name}: tie_break_left=False is not there; the first of equal elements wins (as NumPy's)")
        keepdims = keepdims if keep_dims is None else keep_dims  # Triton's spelling
        return self._reduce(opcode, rule.combine, x, axis, keepdims, attrs_cls)
    method.__name__ = method.__qualname__ = name
    return method


def _scan_method(rule: CombineRule):
    def method(self, x, axis=None, reverse: bool = False) -> Tile:
        return self._scan(rule.combine, x, axis, reverse)
    method.__name__ = method.__qualname__ = rule.scan
    return method


def _spell_combines() -> None:
    """Each combine's tile methods, from the table (``t.max``/``t.min`` are written out above:
    with two operands they compare elementwise)."""
    for rule in COMBINES.values():
        if rule.reduction and not hasattr(TileOps, rule.reduction):
            method = _reduction(rule, "reduce", ReduceAttrs, rule.reduction)
            method.__doc__ = (f"The {rule.combine} along ``axis`` (every element for None: a scalar), as "
                              f"``np.{rule.ufunc.__name__}.reduce``; f16 and bf16 compute in f32 and round once.")
            setattr(TileOps, rule.reduction, method)
        if rule.arg_reduction:
            method = _reduction(rule, "argreduce", ArgReduceAttrs, rule.arg_reduction)
            method.__doc__ = (f"The index of the first {'largest' if rule.combine == 'max' else 'smallest'} element along "
                              f"``axis`` (the first NaN if any, as ``np.{rule.arg_reduction}``); for None, the row-major "
                              "position in the whole tile.")
            setattr(TileOps, rule.arg_reduction, method)
        if rule.scan:
            method = _scan_method(rule)
            method.__doc__ = (f"The inclusive running {rule.combine} along ``axis`` (flattened for None), as "
                              f"``np.{rule.ufunc.__name__}.accumulate``; from the end for ``reverse``.")
            setattr(TileOps, rule.scan, method)


_spell_combines()
