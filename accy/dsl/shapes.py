"""Shape operations of the tile builder (a mixin of :class:`accy.dsl.builder.TileBuilder`):
static slices (``x[:, :32]``, ``x[::-1]``, ``x[3]``), ``cat``, ``join``, ``split``,
``interleave``, ``ravel``, ``permute`` and ``flip``.

Two graph ops carry them all: ``slice`` (a static start and step per axis: a strided box of
the operand) and ``cat`` (two tiles one after the other along an axis); the rest are
compositions of those with ``reshape`` and ``trans``.  Semantics follow Triton's ``tl.join``,
``tl.split``, ``tl.interleave``, ``tl.cat``, ``tl.ravel`` and ``tl.permute``; ``cat`` here
keeps the order always, takes any axis, and operands whose sizes along it differ.
"""

from __future__ import annotations

import numbers

import numpy as np

from .combines import Combine
from .ops import CatAttrs, ReduceAttrs, SliceAttrs
from .tiles import _axis, _static_shape
from .traced import Tile, Traced, _error, _key_text


def _static_int(k, what: str) -> int:
    if isinstance(k, Traced):
        raise _error(f"{what}: tile slices are static (Python ints fixed when the kernel is traced), got a traced "
                     f"{k.type} value; load the elements from memory with p.x.load(indices) instead")
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise _error(f"{what}: a tile is indexed with Python ints, slices of them, None and '...', got {k!r}")
    return int(k)


class ShapeOps:
    """The tile builder's shape methods."""

    # -- the two graph ops ----------------------------------------------------------------
    def _slice(self, x: Tile, starts, steps, shape) -> Tile:
        """Element ``i`` of the result is ``x``'s at ``starts + steps * i`` along each axis."""
        starts, steps, shape = tuple(starts), tuple(steps), tuple(shape)
        if shape == x.shape and starts == (0,) * x.ndim and steps == (1,) * x.ndim:
            return x
        return Traced(self._record("slice", (x,), SliceAttrs(starts=starts, steps=steps, shape=shape)).result)

    def _cat(self, a: Tile, b: Tile, axis: int) -> Tile:
        return Traced(self._record("cat", (a, b), CatAttrs(axis=axis)).result)

    def _along(self, x: Tile, axis: int, start: int, step: int, size: int) -> Tile:
        """``x``'s elements ``start, start + step, ...`` (``size`` of them) along ``axis``."""
        starts, steps = [0] * x.ndim, [1] * x.ndim
        starts[axis], steps[axis] = start, step
        return self._slice(x, starts, steps, x.shape[:axis] + (size,) + x.shape[axis + 1:])

    def _only_element(self, x: Tile) -> Traced:
        """The one element of a tile of size 1, as a scalar (a reduction of one element, which
        returns it bit for bit: an or of integers and bools, a max of floats)."""
        x = self._flat(x)
        combine = Combine.MAX if x.dtype.is_float else Combine.OR
        return Traced(self._record("reduce", (x,), ReduceAttrs(op=combine, axis=0)).result)

    # -- indexing --------------------------------------------------------------------------
    def index_tile(self, x, key) -> Traced:
        """``x[key]`` for static keys: an int picks one position (its axis goes), a slice keeps a
        strided range of positions (a negative step reverses), None adds an axis of 1, '...'
        stands for the axes not named."""
        x = self._tile(x, "tile indexing")
        keys = key if isinstance(key, tuple) else (key,)
        text = f"[{', '.join(map(_key_text, keys))}]"
        if sum(k is Ellipsis for k in keys) > 1:
            raise _error(f"{text}: an index holds '...' at most once")
        named = sum(k is not None and k is not Ellipsis for k in keys)
        if named > x.ndim:
            raise _error(f"{text}: too many indices for a {x.type} ({named} for {x.ndim} axes)")
        if any(k is Ellipsis for k in keys):  # not `in`: a slice of a traced bound would compare it
            at = next(d for d, k in enumerate(keys) if k is Ellipsis)
            keys = keys[:at] + (slice(None),) * (x.ndim - named) + keys[at + 1:]
        else:
            keys = keys + (slice(None),) * (x.ndim - named)
        starts, steps, sizes, shape = [], [], [], []  # the slice's, then the result's
        axis = 0
        for k in keys:
            if k is None:
                shape.append(1)
                continue
            n = x.shape[axis]
            if isinstance(k, slice):
                start, stop, step = (None if v is None else _static_int(v, f"{text}") for v in (k.start, k.stop, k.step))
                if step == 0:
                    raise _error(f"{text}: a slice step of 0 along axis {axis}")
                start, stop, step = slice(start, stop, step).indices(n)
                size = len(range(start, stop, step))
                if size == 0:
                    raise _error(f"{text}: axis {axis} of a {x.type} keeps no element ({k.start}:{k.stop}:{k.step} of "
                                 f"{n}); tiles are never empty")
                shape.append(size)
            else:
                i = _static_int(k, text)
                if not -n <= i < n:
                    raise _error(f"{text}: index {i} is out of range for axis {axis} of a {x.type} (size {n})")
                start, step, size = i % n, 1, 1
            starts.append(start)
            steps.append(step)
            sizes.append(size)
            axis += 1
        y = self._slice(x, starts, steps, sizes)
        if not shape:
            return self._only_element(y)
        return self.reshape(y, tuple(shape))

    # -- composing tiles ------------------------------------------------------------------------
    def cat(self, a, b, axis: int = 0, *, can_reorder: bool = False) -> Tile:
        """``a`` then ``b`` along ``axis`` (``np.concatenate``): tiles of one element type whose
        other axes match (Triton's ``tl.cat(a, b, dim=axis)``, in order always: ``can_reorder``
        is taken and needs nothing)."""
        a, b = self._tile(a, "cat"), self._tile(b, "cat")
        if a.dtype != b.dtype:
            raise _error(f"cat: the tiles hold {a.dtype} and {b.dtype}; cast one to the other's type first")
        if a.ndim != b.ndim:
            raise _error(f"cat: tiles of one rank, got {a.type} and {b.type}")
        axis = _axis(axis, a.ndim, "cat")
        if any(m != n for d, (m, n) in enumerate(zip(a.shape, b.shape)) if d != axis):
            raise _error(f"cat along axis {axis}: the other axes must match, got shapes {a.shape} and {b.shape}")
        return self._cat(a, b, axis)

    def join(self, a, b) -> Tile:
        """``a`` and ``b`` (promoted and broadcast together) side by side along a new last axis of
        2: ``join(a, b)[..., 0]`` is ``a`` (``tl.join``)."""
        a, b = (Traced(v) for v in self._operands("join", a, b))
        if not isinstance(a, Tile):
            a, b = (Traced(self._to_shape(v.value, (1,))) for v in (a, b))  # two scalars make a (2,) tile
            return self._cat(a, b, 0)
        shape = _static_shape(a.shape + (1,), "join")
        return self._cat(self.reshape(a, shape), self.reshape(b, shape), a.ndim)

    def split(self, x) -> tuple[Traced, Traced]:
        """The two halves of a tile whose last axis has 2 elements, that axis dropped (``tl.split``,
        the inverse of :meth:`join`); a (2,) tile splits into two scalars."""
        x = self._tile(x, "split")
        if x.shape[-1] != 2:
            raise _error(f"split: the last axis must have 2 elements, got a {x.type}")
        return self.index_tile(x, (Ellipsis, 0)), self.index_tile(x, (Ellipsis, 1))

    def interleave(self, a, b) -> Tile:
        """The elements of ``a`` and ``b`` alternating along the last axis (``tl.interleave``):
        ``join(a, b)`` with its last two axes merged."""
        joined = self.join(a, b)
        if joined.ndim == 1:
            return joined
        return self.reshape(joined, joined.shape[:-2] + (2 * joined.shape[-2],))

    def ravel(self, x) -> Tile:
        """The elements in row-major order, as a 1-D tile (``tl.ravel``)."""
        x = self._tile(x, "ravel")
        return self.reshape(x, (x.size,))

    def permute(self, x, *dims) -> Tile:
        """The axes of ``x`` reordered: ``permute(x, (2, 0, 1))`` or ``permute(x, 2, 0, 1)``
        (``tl.permute``, ``np.transpose``)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        x = self._tile(x, "permute")
        if len(dims) != x.ndim:
            raise _error(f"permute: {len(dims)} axes {tuple(dims)} for a {x.type}; give each of its {x.ndim} axes once")
        return self.trans(x, tuple(_axis(d, x.ndim, "permute") for d in dims))

    def flip(self, x, axis=None) -> Tile:
        """The elements in reverse order along ``axis``, the last for None (as ``tl.flip``; every
        axis is ``x[::-1, ::-1]``)."""
        x = self._tile(x, "flip")
        d = x.ndim - 1 if axis is None else _axis(axis, x.ndim, "flip")
        if x.shape[d] == 1:
            return x
        return self._along(x, d, x.shape[d] - 1, -1, x.shape[d])
