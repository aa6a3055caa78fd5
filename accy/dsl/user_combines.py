"""Reductions and scans with combine functions the user writes (a mixin of
:class:`accy.dsl.builder.TileBuilder`): ``t.reduce(x, axis, combine)`` and
``t.associative_scan(x, axis, combine, reverse=False)``, over one tile or a tuple of tiles
(``combine((v0, i0), (v1, i1))`` for a (value, index) argmax), as Triton's ``tl.reduce`` and
``tl.associative_scan``.

Both are written here with the graph's own ops, so every backend runs the same combines in the
same order, and a combine that is exact (integer arithmetic, max, min, a choice) gives the
same bits everywhere:

* a reduction is a pairwise tree: each level combines adjacent positions ``(0, 1), (2, 3), ...``
  (strided slices) and carries an odd last position to the next level as it is, so the
  operands keep their order (a combine need be associative, not commutative) and
  ``ceil(log2 n)`` levels of whole-tile ops do it;
* a scan is Hillis and Steele's: at step ``d = 1, 2, 4, ...`` each position ``i >= d`` becomes
  ``combine(y[i - d], y[i])`` (the shifted tile a slice and a cat), ``ceil(log2 n)`` steps;
  ``reverse=True`` scans the flipped tile and flips the result back.

No identity is needed (nor taken): a position with no partner is carried, never combined with
a made-up value.  The built-in reductions (``t.sum``, ``t.max``, ...) keep their own ops, which
each backend runs its fastest way; ``t.sum(x, dtype=)`` and sums of bool tiles, and
``t.max``/``t.min`` with ``return_indices=True``, are here too.
"""

from __future__ import annotations

import inspect
from typing import Callable

from .combines import Combine
from .ops import ReduceAttrs
from .tiles import _axis, broadcast_shapes
from .traced import Tile, Traced, _error
from .types import element_type, shape_of


def _positional_count(fn: Callable) -> int | None:
    """How many positional parameters ``fn`` takes (None when it does not say, or takes any)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


class CombineOps:
    """The tile builder's reductions and scans with a combine function, and the options of the
    built-in ones that compose with other ops."""

    # -- operands and the user's combine --------------------------------------------------
    def _combined_operands(self, x, what: str) -> tuple[list[Tile], bool]:
        """The tiles of ``x`` (one, or a tuple or list of them), broadcast together, and whether
        ``x`` was a tuple."""
        many = isinstance(x, (tuple, list))
        xs = list(x) if many else [x]
        if not xs:
            raise _error(f"{what}: got an empty tuple of tiles")
        for k, v in enumerate(xs):
            self._tile(v, f"{what}{f' (operand {k})' if many else ''}")
        return [Traced(v) for v in self._broadcast_together(what, [v.value for v in xs])], many

    def _combine(self, combine: Callable, a: list[Tile], b: list[Tile], many: bool, what: str) -> list[Tile]:
        """``combine(a, b)`` (tuples where the operand was one), checked to give a tile (or
        scalar, broadcast) of each operand's type."""
        flat = many and _positional_count(combine) == 2 * len(a)  # Triton's combine(a0, a1, b0, b1)
        got = combine(*a, *b) if flat else combine(tuple(a), tuple(b)) if many else combine(a[0], b[0])
        results = list(got) if many and isinstance(got, (tuple, list)) else [got]
        if many and (not isinstance(got, (tuple, list)) or len(results) != len(a)):
            raise _error(f"{what}: the combine function takes and returns tuples of {len(a)} values, got {got!r}")
        out = []
        where_k = lambda k: f" (value {k})" if many else ""  # noqa: E731
        for k, (r, like) in enumerate(zip(results, a)):
            v = self._lift(r, like.dtype, what)
            dtype = element_type(v.type)
            if dtype != like.dtype:
                raise _error(f"{what}: the combine function returned {dtype}{where_k(k)} for {like.dtype} operands; it "
                             f"must return values of its operands' types (cast inside it)")
            broadcast_shapes(shape_of(v.type), like.shape, what=f"{what}: the combine function's result{where_k(k)}")
            if broadcast_shapes(shape_of(v.type), like.shape) != like.shape:
                raise _error(f"{what}: the combine function returned a {v.type}{where_k(k)} for operands of shape "
                             f"{like.shape}")
            out.append(Traced(self._to_shape(v, like.shape)))
        return out

    def _whole(self, xs: list[Tile], axis) -> tuple[list[Tile], int]:
        """Axis None: every operand flattened, along axis 0."""
        if axis is None:
            return [self._flat(x) for x in xs], 0
        return xs, _axis(axis, xs[0].ndim, "axis")

    # -- reduce ------------------------------------------------------------------------------
    def reduce(self, x, axis, combine: Callable, keepdims: bool = False, *, keep_dims: bool | None = None):
        """``combine`` folded over ``axis`` (every element for None) by a pairwise tree that keeps
        the operands' order; ``x`` is a tile or a tuple of tiles (then ``combine`` takes and
        returns tuples); the result is a tile, or a scalar where no axis is left."""
        what = "reduce"
        keepdims = keepdims if keep_dims is None else keep_dims  # Triton's spelling
        xs, many = self._combined_operands(x, what)
        shape = xs[0].shape
        xs, ax = self._whole(xs, axis)
        n = xs[0].shape[ax]
        while n > 1:
            half = n // 2
            evens = [self._along(v, ax, 0, 2, half) for v in xs]
            odds = [self._along(v, ax, 1, 2, half) for v in xs]
            ys = self._combine(combine, evens, odds, many, what)
            if n % 2:  # the last position has no partner: carried to the next level as it is
                ys = [self._cat(y, self._along(v, ax, n - 1, 1, 1), ax) for y, v in zip(ys, xs)]
            xs, n = ys, half + n % 2
        if axis is None:
            out = [self.reshape(v, (1,) * len(shape)) if keepdims else self._only_element(v) for v in xs]
        else:
            kept = shape[:ax] + (1,) + shape[ax + 1:]
            dropped = shape[:ax] + shape[ax + 1:]
            out = [self.reshape(v, kept) if keepdims else self.reshape(v, dropped) if dropped else self._only_element(v)
                   for v in xs]
        return tuple(out) if many else out[0]

    # -- scan ----------------------------------------------------------------------------------
    def associative_scan(self, x, axis, combine: Callable, reverse: bool = False):
        """The inclusive running ``combine`` along ``axis`` (flattened for None): position ``i``
        holds ``x[0]`` combined with each next one up to ``x[i]`` (from the end for
        ``reverse``), for an associative ``combine``; ``x`` a tile or a tuple of tiles."""
        what = "associative_scan"
        xs, many = self._combined_operands(x, what)
        xs, ax = self._whole(xs, axis)
        if reverse:
            xs = [self.flip(v, ax) for v in xs]
        n = xs[0].shape[ax]
        position = self.reshape(self.arange(n), tuple(n if d == ax else 1 for d in range(xs[0].ndim))) \
            if xs[0].ndim > 1 else self.arange(n)
        d = 1
        while d < n:
            # y[i - d] at each i >= d; positions below d (never chosen) see y[0 .. d-1]
            shifted = [self._cat(self._along(v, ax, 0, 1, d), self._along(v, ax, 0, 1, n - d), ax) for v in xs]
            ys = self._combine(combine, shifted, xs, many, what)
            later = position >= d
            xs = [self.where(later, y, v) for y, v in zip(ys, xs)]
            d *= 2
        if reverse:
            xs = [self.flip(v, ax) for v in xs]
        return tuple(xs) if many else xs[0]

    # -- the built-in reductions' options ----------------------------------------------------------
    def sum(self, x, axis=None, keepdims: bool = False, *, dtype=None, keep_dims: bool | None = None) -> Traced:
        """The sum along ``axis`` (every element for None: a scalar), as ``np.add.reduce``; f16 and
        bf16 compute in f32 and round once.  ``dtype``: the elements are cast to it first, and it
        accumulates there; without it an integer narrower than 32 bits sums in i32 (u32 when
        unsigned) and a bool tile as an i32 count, as Triton's."""
        keepdims = keepdims if keep_dims is None else keep_dims
        x = self._tile(x, "sum")
        x = self.cast(x, self._dtype(dtype, "sum")) if dtype is not None else self._summed(x)
        return self._reduce("reduce", Combine.SUM, x, axis, keepdims, ReduceAttrs)

    def max(self, x, *others, axis=None, keepdims: bool = False, return_indices: bool = False,
            keep_dims: bool | None = None):
        """``t.max(x, axis)``: the largest element along ``axis`` (NaN propagates); with
        ``return_indices``, also the index of the first largest (first NaN), as ``t.argmax``;
        ``t.max(a, b)``: the elementwise maximum."""
        return self._extreme("max", x, others, axis, keepdims if keep_dims is None else keep_dims, return_indices)

    def min(self, x, *others, axis=None, keepdims: bool = False, return_indices: bool = False,
            keep_dims: bool | None = None):
        """As :meth:`max`, the smallest."""
        return self._extreme("min", x, others, axis, keepdims if keep_dims is None else keep_dims, return_indices)

    def _extreme(self, name: str, x, others, axis, keepdims: bool, return_indices: bool):
        values = getattr(super(), name)(x, *others, axis=axis, keepdims=keepdims)
        if not return_indices:
            return values
        if others:
            raise _error(f"{name}: return_indices is for a reduction (t.{name}(x, axis)), not the elementwise "
                         f"t.{name}(a, b)")
        return values, getattr(self, f"arg{name}")(x, axis=axis, keepdims=keepdims)
