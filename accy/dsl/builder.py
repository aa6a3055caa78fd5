"""The tracing builder: every call records one typed SSA op.

A kernel body receives a :class:`Builder` (the seed calls it ``k`` at the top
level and ``inner`` inside loops).  Each method checks its operands against the
op's type rule (:mod:`accy.dsl.ops`) and appends an :class:`~accy.dsl.ir.Op` to
the builder's block.  What the body holds are :class:`Traced` values: thin
handles on IR values whose operators and methods record into the builder that
is active.  Errors are raised here, at trace time, with the line of the user's
source that made the call.

The per-op methods of :class:`Builder` and :class:`Traced` are generated from
the op table; only ops with attributes or regions are written by hand.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Sequence

import numpy as np

from . import context
from .control import ControlFlow
from .cooperation import Cooperation
from .ir import Axis, Block, Op, Value
from .memory import Memory
from .ops import (
    OPS, CastAttrs, ConstAttrs, ForEachAttrs, ForEachBlockAttrs, ForEachTileAttrs, NoAttrs, Programs, OpTypeError, infer,
)
from .traced import (
    _METHOD_NAMES, AxisIndex, BuilderBase, LaunchIndex, RuntimeAxis, SharedArray, Traced, _LaunchInfo, _NO_CTX,
    _describe, _error, _unknown, axis,
)
from .random import RandomOps
from .shapes import ShapeOps
from .tiles import TileOps, too_many
from .user_combines import CombineOps
from .promotion import computation_type, division_type, is_weak, mixed_signedness
from .types import INDEX_MAX, MAX_TILE_ELEMENTS, DType, TileType, as_dtype, boolean, element_type, f32, f64, from_numpy, i64, index, u64

def _holds(dtype: DType, x) -> bool:
    """Whether the number ``x`` is a constant of ``dtype`` as it is (an int in range, a float
    within the largest finite value, or one that is not finite)."""
    if dtype.is_bool:
        return False
    if isinstance(x, numbers.Integral):
        return not dtype.is_int or dtype.min <= int(x) <= dtype.max
    value = float(x)
    return dtype.is_float and (not math.isfinite(value) or abs(value) <= dtype.max)


class Builder(ControlFlow, Memory, Cooperation, RandomOps, BuilderBase):
    """Records ops into one block. ``parent`` is the builder of the enclosing region."""

    def __init__(self, block: Block, parent: "Builder | None" = None):
        self.block = block
        self.parent = parent
        self._open = True
        self._launched = False  # top level: has the launch been opened?
        self.launch_info: _LaunchInfo | None = None  # set on the builder of a launch region
        self.guard: tuple[str, tuple[Value, ...], object] | None = None  # (what, values, where) of a loop or branch
        self.int_literal_accumulators: dict[Value, int] = {}  # fold accumulators whose init is a Python int

    # -- context management: the Pythonic spelling records into the innermost builder
    def __enter__(self) -> "Builder":
        context.stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        popped = context.stack().pop()
        assert popped is self

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unknown(name, "the builder")

    @property
    def is_kernel_scope(self) -> bool:
        return self.parent is None

    @property
    def in_launch(self) -> bool:
        """Inside a launch body (directly or in a region within it)?"""
        return self._launch_info() is not None

    def _launch_info(self) -> "_LaunchInfo | None":
        return next((b.launch_info for b in self._scopes() if b.launch_info is not None), None)

    def _scopes(self):
        """The builder that records for this one and the builders of the enclosing regions,
        innermost first."""
        builder = self._active()
        while builder is not None:
            yield builder
            builder = builder.parent

    def _active(self) -> "Builder":
        """The builder that records for this one: itself, or, while a body inside its region is
        being traced, that innermost body's builder.  A body may call an enclosing body's builder
        (the outer ``t`` inside a fold_range body): its ops then happen where the call is, in
        every trip of the loop, as the body's own builder's would."""
        builders = context.stack()
        innermost = builders[-1] if builders else self
        scope = innermost.parent
        while innermost is not self and scope is not None:
            if scope is self:
                return innermost
            scope = scope.parent
        return self

    # -- recording ---------------------------------------------------------------
    _error = staticmethod(_error)

    def _check_visible(self, opcode: str, value) -> Value:
        if isinstance(value, Traced):
            value = value.value
        if not isinstance(value, Value):
            raise _error(f"{opcode}: operand {value!r} is not a traced value")
        if not any(value.block is b.block for b in self._scopes()):
            raise _error(
                f"{opcode}: operand {value.type} value was defined inside another region "
                "(a fold_range, if_ or launch body) and is not visible here; return it from "
                "that body instead of keeping it in a variable"
            )
        return value

    def _record(self, opcode: str, operands: Sequence, attrs=None, regions=()) -> Op:
        if not self._open:
            raise _error(
                f"{opcode}: this builder belongs to a body that has already returned; "
                "record ops with the builder passed to the current body"
            )
        active = self._active()
        if active is not self:
            return active._record(opcode, operands, attrs, regions)
        return self._record_here(opcode, operands, attrs, regions)

    def _record_here(self, opcode: str, operands: Sequence, attrs=None, regions=()) -> Op:
        """Record into this builder's own block (see :meth:`_active`)."""
        operands = [self._check_visible(opcode, v) for v in operands]
        attrs = NoAttrs() if attrs is None else attrs  # else an instance of OPS[opcode].schema
        try:
            result_types = infer(opcode, (v.type for v in operands), attrs)
        except OpTypeError as e:
            types = ", ".join(str(v.type) for v in operands)
            raise _error(f"{opcode}({types}): {e}{self._literal_init_hint(operands)}") from None
        for t in result_types:  # however a tile is made (a broadcast, a dot), the same limit
            if isinstance(t, TileType) and t.size > MAX_TILE_ELEMENTS:
                raise _error(f"{opcode}: its result, {too_many(t.shape)}")
        op = Op(opcode, operands, attrs, result_types, regions, context.user_location(), self.block)
        self.block.ops.append(op)
        return op

    def _literal_init_hint(self, operands) -> str:
        """A loop accumulator started from a Python int is an index: say so where it trips."""
        for scope in self._scopes():
            for v in operands:
                if v in scope.int_literal_accumulators:
                    raw = scope.int_literal_accumulators[v]
                    return (f"; init={raw!r} is a Python int, so the accumulator is index; write init={float(raw)!r} "
                            f"for a float accumulator, or init=inner.constant({raw!r}, i32) (or np.int32({raw!r})) for "
                            "another integer type")
        return ""

    def _traced(self, op: Op) -> Traced:
        return Traced(op.result)

    # -- for passes that rebuild a graph op by op (accy.lowering) --------------------
    def record(self, opcode: str, operands: Sequence, attrs=None) -> Op:
        """Record the op ``opcode`` of ``operands`` (traced or graph values) and ``attrs`` (its
        op's attrs, none by default) as it is given, checked and typed like every op; returns it."""
        return self._record(opcode, operands, attrs)

    def loop(self, start, stop, step, init: tuple, body: Callable) -> tuple:
        """A ``fold`` carrying the values of ``init``, a tuple of any length (none too):
        ``body(inner, i, accs)`` returns the next ones; returns the last ones (a tuple)."""
        return self._loop(start, stop, step, tuple(init), _NO_CTX, body)

    def declare_scratch(self, dtype, count: int, stem: str) -> tuple[SharedArray, Op]:
        """A shared array of ``count`` ``dtype`` that a pass needs in this block launch, declared
        first in its body and named ``stem<k>`` (the first free k): the array and its ``shared``
        op, whose attrs the pass may set to the size it ends up needing."""
        info = self._launch_info()
        if info is None or not info.blocks:
            raise _error(f"declare_scratch: {stem} scratch is shared memory, which only a for_each_block body has")
        array = info.body._declare_shared(info, dtype, count, None, first=True, stem=stem)
        return array, info.body.block.ops[0]

    def varies(self, value) -> bool:
        """Can ``value`` (traced or a graph value) differ between the threads of this block
        launch (the uniformity analysis)?"""
        return self._launch_info().varies(value.value if isinstance(value, Traced) else value)

    # -- constants ---------------------------------------------------------------
    def constant(self, value, dtype) -> Traced:
        """A constant of ``dtype``: a Python (or NumPy) number, rounded to a float type
        or checked against an integer type's range."""
        dtype = as_dtype(dtype)
        what = f"constant of type {dtype}"
        if dtype.is_bool:
            if not isinstance(value, (bool, np.bool_)):
                raise _error(f"{what}: expected True or False, got {value!r}")
            value = bool(value)
        elif dtype.is_int:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
                raise _error(f"{what}: expected a Python int, got {value!r}")
            value = int(value)
            if not dtype.min <= value <= dtype.max:
                raise _error(f"constant {value} is outside the {dtype} range [{dtype.min}, {dtype.max}]")
        else:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
                raise _error(f"{what}: expected a Python number, got {value!r}")
            value = self._rounded_float(value, dtype)
        return self._traced(self._record("const", (), ConstAttrs(dtype=dtype, value=value)))

    @staticmethod
    def _rounded_float(value, dtype: DType) -> float:
        """``value`` rounded to ``dtype``; a finite number that has no finite value there is an
        error, not a silent infinity (or NaN, in a type without infinities)."""
        try:
            exact = float(value)
        except OverflowError:  # a Python int past f64's range
            exact = None
        with np.errstate(all="ignore"):
            rounded = float(np.asarray(exact).astype(dtype.numpy)) if exact is not None else math.inf
        if (exact is None or math.isfinite(exact)) and not math.isfinite(rounded):
            shown = repr(value) if len(repr(value)) <= 24 else f"{str(value)[:8]}... ({len(str(value))} digits)"
            raise _error(f"constant {shown} overflows {dtype}: it is past the largest finite {dtype}, "
                         f"{dtype.max!r}; write float('inf') for an infinity, or compute in a wider type")
        return rounded

    def constant_index(self, value: int) -> Traced:
        return self.constant(value, index)

    def constant_float(self, dtype_or_value, value=None) -> Traced:
        """``constant_float(f32, 0.5)`` as in the seed, or ``constant_float(0.5)``."""
        if value is None:
            dtype_or_value, value = f32, dtype_or_value
        dtype = as_dtype(dtype_or_value)
        if not dtype.is_float:
            raise _error(f"constant_float: {dtype} is not a float type")
        return self.constant(value, dtype)

    def constant_bool(self, value: bool) -> Traced:
        return self.constant(value, boolean)

    def _lift(self, x, like: DType | None, opcode: str) -> Value:
        """A Python or NumPy number becomes a constant of the other operand's type."""
        if isinstance(x, Traced):
            return x.value
        if isinstance(x, (bool, np.bool_)):
            return self.constant(bool(x), boolean).value
        if like is None and isinstance(x, np.generic) and from_numpy(x.dtype) is not None:
            return self.constant(x.item(), from_numpy(x.dtype)).value  # a NumPy scalar keeps its type
        if isinstance(x, numbers.Integral):
            target = like if like is not None and not like.is_bool else index
            return self.constant(int(x), target).value
        if isinstance(x, numbers.Real):
            if like is not None and not like.is_float:
                raise _error(
                    f"{opcode}({like}, Python float): the constant {float(x)!r} cannot combine with {like} "
                    f"values; make that value a float first: cast(value, f32)"
                )
            return self.constant(float(x), like if like is not None else f32).value
        if getattr(x, "space", None) == "global":
            raise _error(f"{opcode}: '{x.name}' is a kernel parameter, not a pointer: read its elements with "
                         f"p.{x.name}.load(offsets, mask=...) (Triton's tl.load({x.name}_ptr + offsets, mask=...))")
        raise _error(f"{opcode}: operand {x!r} is neither a traced value nor a number")

    def _operands(self, opcode: str, *xs) -> list[Value]:
        """``xs`` as values of the type they compute in (accy.dsl.promotion): Python numbers
        become constants of it and values of other types are cast to it."""
        traced = [element_type(x.type) for x in xs if isinstance(x, Traced)]
        target = computation_type(traced, [x for x in xs if is_weak(x)])
        return [self._converted(x, target, opcode) for x in xs]

    def _converted(self, x, dtype: DType | None, opcode: str) -> Value:
        """``x`` (traced, or a number ``dtype`` holds) as a value of ``dtype``: cast where it is
        another type (a number it may not hold goes through :meth:`_stored`)."""
        v = self._lift(x, dtype, opcode)
        if dtype is not None and element_type(v.type) != dtype:
            v = self.cast(Traced(v), dtype).value
        return v

    def _stored(self, x, dtype: DType, opcode: str) -> Value:
        """``x`` converted to ``dtype`` as a store converts it (a cast): a number ``dtype`` does
        not hold wraps, rounds or saturates as a cast of it would (``other=-1`` for u8 is 255)."""
        if is_weak(x) and not _holds(dtype, x):
            wide = f64 if not isinstance(x, numbers.Integral) else i64 if -2**63 <= int(x) < 2**63 else u64
            return self.cast(self.constant(x, wide), dtype).value
        return self._converted(x, dtype, opcode)

    def _op(self, opcode: str, *xs) -> Traced:
        return self._traced(self._record(opcode, self._operands(opcode, *xs)))

    # -- ops with rules of their own ------------------------------------------------
    def true_div(self, a, b) -> Traced:
        """``a / b``: true division; integers divide as f32 (as Triton's ``/``; ``//`` is floor
        division)."""
        return self._traced(self._record("div", self._division_operands("div", a, b, true_division=True)))

    def floor_div(self, a, b) -> Traced:
        """``a // b``: integers only (floor division, as Python's)."""
        self._same_signedness("//", a, b)
        written = [x.type if isinstance(x, Traced) else type(x).__name__ for x in (a, b)]
        a, b = self._operands("div", a, b)
        if a.type.is_float or b.type.is_float:
            raise _error(f"{written[0]} // {written[1]}: // is integer division; use / for floats "
                         "(and floor(a / b) for a rounded quotient)")
        return self._traced(self._record("div", (a, b)))

    def mod(self, a, b) -> Traced:
        """``a % b``: the remainder with the divisor's sign (Python's; ``fmod`` is C's); f16 and
        bf16 in f32, as Triton's."""
        self._same_signedness("%", a, b)
        return self._traced(self._record("mod", self._division_operands("mod", a, b, true_division=False)))

    def _division_operands(self, opcode: str, a, b, *, true_division: bool) -> list[Value]:
        a, b = self._operands(opcode, a, b)
        wanted = division_type(element_type(a.type), true_division)
        return [self._converted(Traced(v), wanted, opcode) for v in (a, b)]

    rem = mod

    def truncdiv(self, a, b) -> Traced:
        """C's integer division: the quotient rounded toward zero (``//`` rounds toward -inf)."""
        self._same_signedness("truncdiv", a, b)
        a, b = (Traced(v) for v in self._operands("truncdiv", a, b))
        if not a.type.is_int:
            raise _error(f"truncdiv({a.type}, {b.type}): integers only; for floats write trunc(a / b)")
        if a.type.is_unsigned:
            return self.floor_div(a, b)
        floor = self.floor_div(a, b)
        inexact = self.ne(self.mod(a, b), 0) & self.ne(self.lt(a, 0), self.lt(b, 0))
        return self.add(floor, self.cast(inexact, element_type(a.type)))

    def fmod(self, a, b) -> Traced:
        """C's remainder (``fmod``, and ``%`` in C and Triton): the sign of the dividend ``a``
        (``%`` takes the divisor's); exact for floats, as ``math.fmod``."""
        self._same_signedness("fmod", a, b)
        a, b = (Traced(v) for v in self._division_operands("fmod", a, b, true_division=False))
        if a.type.is_float:  # |a| mod |b| is the same both ways: only the sign differs
            return self.copysign(self.mod(self.abs(a), self.abs(b)), a)
        rest = self.mod(a, b)
        if a.type.is_unsigned:
            return rest
        other_sign = self.ne(rest, 0) & self.ne(self.lt(a, 0), self.lt(b, 0))
        return self.select(other_sign, self.sub(rest, b), rest)

    @staticmethod
    def _same_signedness(symbol: str, a, b) -> None:
        types = [element_type(x.type) for x in (a, b) if isinstance(x, Traced)]
        if mixed_signedness(types):
            raise _error(f"{types[0]} {symbol} {types[1]}: operands of different signedness; cast one so both are "
                         "signed or both unsigned (floor division and remainder differ between the two)")

    def pow(self, a, b) -> Traced:
        """``a ** b``: C's pow for floats; an integer to a constant power ``>= 0`` multiplies out."""
        if isinstance(a, Traced) and a.type.is_int:
            if isinstance(b, (bool, np.bool_)) or not isinstance(b, numbers.Integral) or int(b) < 0:
                raise _error(f"{a.type} ** {_describe(b) if isinstance(b, Traced) else repr(b)}: an integer power "
                             "needs a constant exponent >= 0 (a Python int); cast to a float for pow")
            return self._int_power(a, int(b))
        return self._op("pow", a, b)

    def _int_power(self, base: Traced, exponent: int) -> Traced:
        result, square = None, base
        while exponent:
            if exponent & 1:
                result = square if result is None else self.mul(result, square)
            exponent >>= 1
            if exponent:
                square = self.mul(square, square)
        return result if result is not None else self.constant(1, base.type)

    def select(self, cond, if_true, if_false) -> Traced:
        """``if_true`` where ``cond`` holds, else ``if_false`` (both are evaluated)."""
        cond = self._lift(cond, boolean, "select")
        a, b = self._operands("select", if_true, if_false)
        return self._traced(self._record("select", (cond, a, b)))

    where = select

    def bitcast(self, value, dtype) -> Traced:
        """The bits of ``value`` read as ``dtype``, a type of the same width (``f32`` and ``i32``
        or ``u32``, ``f16``/``bf16`` and ``i16``, ...; Triton's ``x.to(dtype, bitcast=True)``)."""
        value = self._lift(value, None, "bitcast")
        dtype = self._dtype(dtype, "bitcast")
        return self._traced(self._record("bitcast", (value,), CastAttrs(dtype=dtype)))

    @staticmethod
    def _dtype(dtype, what: str) -> DType:
        try:
            return as_dtype(dtype)
        except TypeError as e:
            raise _error(f"{what}: {e}") from None

    def cast(self, value, dtype, *, saturate: bool = False, bitcast: bool = False) -> Traced:
        """Convert to ``dtype`` (see docs/ir.md): float to float and int to float round to
        nearest even; float to int truncates toward zero, saturating, NaN giving 0; int to
        int wraps; to bool is ``!= 0``.  ``saturate=True`` (a float ``dtype``): a value past
        the largest finite ``dtype`` value, an infinity included, becomes that value (NaN
        stays NaN), as PTX's ``.satfinite``; it is recorded as compares and selects around
        the cast."""
        if bitcast:
            return self.bitcast(value, dtype)
        value = self._lift(value, None, "cast")
        dtype = self._dtype(dtype, "cast")
        if not isinstance(saturate, (bool, np.bool_)):
            raise _error(f"cast: saturate must be True or False, got {saturate!r}")
        result = self._traced(self._record("cast", (value,), CastAttrs(dtype=dtype)))
        if not saturate:
            return result
        if not dtype.is_float:
            raise _error(f"cast(value, {dtype}, saturate=True): saturate is for float types; a float to "
                         f"{dtype} cast saturates anyway, an integer one wraps (clamp it with max and min)")
        return self._saturated(Traced(value), dtype, result)

    def _saturated(self, x: Traced, dtype: DType, cast: Traced) -> Traced:
        """``cast`` (of ``x``), with ``dtype``'s largest finite value where ``x`` is past it."""
        src = x.type
        if src.is_bool:
            return cast
        # the largest src value at most dtype.max: x > it exactly where x > dtype.max
        if src.is_int:
            bound = math.floor(dtype.max) if src.max > dtype.max else None
        elif src.max <= dtype.max:
            bound = src.max if src.format.inf_code is not None else None  # only an infinity is past it
        else:
            code = src.code(dtype.max)
            bound = src.value_of(code if src.value_of(code) <= dtype.max else code - 1)  # rounded up: one below
        if bound is None:
            return cast
        result = cast
        if not src.is_unsigned:
            below = self._op("lt", x, self.constant(-bound, src))
            result = self.select(below, self.constant(-dtype.max, dtype), result)
        above = self._op("gt", x, self.constant(bound, src))
        return self.select(above, self.constant(dtype.max, dtype), result)

    # -- the launch ------------------------------------------------------------------
    def _extent(self, axis_) -> Value:
        if isinstance(axis_, Axis):
            return self.constant_index(axis_.extent).value
        value = self._check_visible("for_each", axis_.extent)
        if value.block is not self.block:
            raise _error(f"axis '{axis_.name}': its extent must be computed at the kernel's top level")
        _check_extent_source(axis_.name, value)
        return value

    def _for_each(self, axes: Sequence, ctx, body) -> None:
        if not self.is_kernel_scope:
            raise _error("for_each: launches can only be opened at the kernel's top level")
        if self._launched:
            raise _error("for_each: a kernel opens exactly one launch; this one already has one")
        if body is None:
            # decorator form: @k.for_each_1d(axis("i", n))
            def decorate(fn):
                self._for_each(axes, ctx, fn)
                return fn

            return decorate
        if not callable(body):
            raise _error(f"for_each: body must be a function (inner, index[, ctx]), got {body!r}")
        names = [a.name for a in axes]
        if len(set(names)) != len(names):
            raise _error(f"for_each: axis names must differ, got {names}")
        _check_index_range("for_each", axes, "threads")
        extents = [self._extent(a) for a in axes]
        self._launched = True
        block = Block([index] * len(axes))
        launch = LaunchIndex([AxisIndex(a.name, a.extent if isinstance(a, Axis) else None, Traced(v))
                              for a, v in zip(axes, block.args)])
        args = (launch,) if ctx is _NO_CTX else (launch, ctx)
        self._run_body(block, body, args, launch=_LaunchInfo(False, tuple(block.args), ()))
        self._record("for_each", extents, ForEachAttrs(axes=tuple(names)), regions=(block,))
        return None

    def for_each_1d(self, x, ctx: Any = _NO_CTX, body=None):
        """Run ``body(inner, index[, ctx])`` once per logical thread of one axis."""
        if body is None and callable(ctx):
            body, ctx = ctx, _NO_CTX
        return self._for_each([_as_axis(x)], ctx, body)

    def for_each_2d(self, axes=None, ctx: Any = _NO_CTX, body=None, *, x=None, y=None):
        if body is None and callable(ctx):
            body, ctx = ctx, _NO_CTX
        return self._for_each(_axes(axes, ("x", "y"), x=x, y=y), ctx, body)

    def for_each_3d(self, axes=None, ctx: Any = _NO_CTX, body=None, *, x=None, y=None, z=None):
        """Seed style: ``k.for_each_3d({"x": axis(..), "y": .., "z": ..}, ctx, body)``,
        or with keywords ``x=, y=, z=``."""
        if body is None and callable(ctx):
            body, ctx = ctx, _NO_CTX
        return self._for_each(_axes(axes, ("x", "y", "z"), x=x, y=y, z=z), ctx, body)

    # -- the block level ------------------------------------------------------------
    def for_each_block(self, grid=None, threads=None, body=None):
        """Launch ``grid`` blocks of ``threads`` threads: ``body(inner, block, thread)`` runs once
        per thread, with the block's and the thread's indices (``block["row"]``, ``thread.x``).

        ``grid`` is one axis or a tuple of them (extents may be run-time values; past three axes
        the first ones fold onto the GPU's x dimension, see docs/ir.md); ``threads`` one axis or
        a tuple of 1 to 3 with static extents: the block shape.  The threads of a
        block may share memory (``inner.shared``), wait for each other (``inner.barrier()``) and
        exchange values within a warp of 32 (``inner.shuffle``).  Also a decorator.
        """
        if not self.is_kernel_scope:
            raise _error("for_each_block: launches can only be opened at the kernel's top level")
        if self._launched:
            raise _error("for_each_block: a kernel opens exactly one launch; this one already has one")
        if grid is None or threads is None:
            raise _error("for_each_block needs grid=axis(...) (or a tuple of axes) and threads=axis(...)")
        grid_axes, thread_axes = _axis_tuple("grid", grid), _axis_tuple("threads", threads, most=3)
        for a in thread_axes:
            if not isinstance(a, Axis):
                raise _error(f"for_each_block: thread axis '{a.name}' has a run-time extent; the block shape "
                             "is fixed when the kernel is traced (grid extents may be run-time values)")
            if a.extent < 1:
                raise _error(f"for_each_block: thread axis '{a.name}' has extent {a.extent}; blocks have threads")
        if body is None:
            def decorate(fn):
                self.for_each_block(grid, threads, fn)
                return fn

            return decorate
        if not callable(body):
            raise _error(f"for_each_block: body must be a function (inner, block, thread), got {body!r}")
        names = [a.name for a in grid_axes + thread_axes]
        if len(set(names)) != len(names):
            raise _error(f"for_each_block: axis names must differ, got {names}")
        _check_index_range("for_each_block", grid_axes, "blocks")
        extents = [self._extent(a) for a in grid_axes]
        self._launched = True
        block = Block([index] * len(names))
        grid_args, thread_args = block.args[:len(grid_axes)], block.args[len(grid_axes):]
        block_index = LaunchIndex([AxisIndex(a.name, a.extent if isinstance(a, Axis) else None, Traced(v))
                                   for a, v in zip(grid_axes, grid_args)])
        thread_index = LaunchIndex([AxisIndex(a.name, a.extent, Traced(v)) for a, v in zip(thread_axes, thread_args)])
        info = _LaunchInfo(True, tuple(thread_args), tuple(a.extent for a in thread_axes))
        self._run_body(block, body, (block_index, thread_index), launch=info)
        attrs_ = ForEachBlockAttrs(axes=tuple(a.name for a in grid_axes),
                                   threads=tuple((a.name, a.extent) for a in thread_axes))
        self._record("for_each_block", extents, attrs_, regions=(block,))
        return None

    forEachBlock = for_each_block

    # -- the tile level -------------------------------------------------------------
    def for_each_tile(self, grid=None, warps: int = 4, body=None, *, num_stages: int = 2, persistent: bool = False):
        """Run ``body(t, pid)`` once per program: one per point of ``grid`` (one axis or a tuple of
        any number, extents may be run-time values), with the tile builder ``t`` and the program's
        indices (``pid["m"]``).  A program computes on whole tiles (``t.arange``, ``p.x.load_tile``,
        ``t.dot``, ``t.sum``); the compiler spreads each over ``warps`` * 32 GPU threads (on the
        CPU a program runs on one core and ``warps`` is a hint).  ``num_stages`` (1 to 8): on a
        GPU with tensor cores, a ``fold_range`` whose dots' operands are loaded per trip keeps the
        copies of ``num_stages - 1`` trips ahead in flight (software pipelining; 1: none; fewer
        where shared memory runs short).  ``persistent``: on a GPU, one block per SM, each walking
        the programs in grouped order (runs of 8 along the first axis, so neighbours share their
        operands in L2) rather than a block per program; the results are the same.  Also a decorator."""
        if not self.is_kernel_scope:
            raise _error("for_each_tile: launches can only be opened at the kernel's top level")
        if self._launched:
            raise _error("for_each_tile: a kernel opens exactly one launch; this one already has one")
        if grid is None:
            raise _error("for_each_tile needs grid=axis(...) (or a tuple of axes)")
        if isinstance(warps, (bool, np.bool_)) or warps not in (1, 2, 4, 8, 16, 32):
            raise _error(f"for_each_tile: warps must be 1, 2, 4, 8, 16 or 32 (threads per program / 32), "
                         f"got {warps!r}")
        if isinstance(num_stages, (bool, np.bool_)) or num_stages not in range(1, 9):
            raise _error(f"for_each_tile: num_stages must be an int from 1 to 8, got {num_stages!r}")
        if body is None:
            def decorate(fn):
                self.for_each_tile(grid, warps, fn, num_stages=num_stages, persistent=persistent)
                return fn

            return decorate
        if not callable(body):
            raise _error(f"for_each_tile: body must be a function (t, pid), got {body!r}")
        axes = _axis_tuple("grid", grid, "for_each_tile")
        names = [a.name for a in axes]
        if len(set(names)) != len(names):
            raise _error(f"for_each_tile: axis names must differ, got {names}")
        _check_index_range("for_each_tile", axes, "programs")
        extents = [self._extent(a) for a in axes]
        self._launched = True
        block = Block([index] * len(axes))
        pid = LaunchIndex([AxisIndex(a.name, a.extent if isinstance(a, Axis) else None, Traced(v))
                           for a, v in zip(axes, block.args)])
        self._run_body(block, body, (pid,), launch=_LaunchInfo(False, tuple(block.args), ()), builder=TileBuilder)
        if not isinstance(persistent, (bool, np.bool_)):
            raise _error(f"for_each_tile: persistent must be True or False, got {persistent!r}")
        programs = Programs.PERSISTENT if persistent else Programs.PER_BLOCK
        self._record("for_each_tile", extents, ForEachTileAttrs(axes=tuple(names), warps=int(warps),
                                                                num_stages=int(num_stages), programs=programs),
                     regions=(block,))
        return None

    forEachTile = for_each_tile

    # the seed's camelCase spellings, so seed kernels port line by line
    constantIndex = constant_index
    constantFloat = constant_float
    forEach1D = for_each_1d
    forEach2D = for_each_2d
    forEach3D = for_each_3d


def _pointwise_method(opcode: str, method: str, arity: int):
    def call(self, *xs):
        if len(xs) != arity:
            raise _error(f"{method} takes {arity} operand{'s' if arity != 1 else ''}, got {len(xs)}")
        return self._op(opcode, *xs)

    call.__name__ = method
    call.__doc__ = OPS[opcode].doc or f"Record ``{opcode}``."
    return call


for _opdef in OPS.values():
    for _method in _opdef.methods:
        _METHOD_NAMES[_method] = _opdef.name
        if _opdef.pointwise and not any(_method in cls.__dict__ for cls in Builder.__mro__):
            setattr(Builder, _method, _pointwise_method(_opdef.name, _method, _opdef.arity))


class TileBuilder(CombineOps, ShapeOps, TileOps, Builder):
    """The builder of a ``for_each_tile`` program and the regions inside it: the scalar
    builder's methods, on tiles as on scalars, and the tile level's own."""


_EXTENT_SOURCES = {"const", "size"}


def _check_extent_source(name: str, value: Value) -> None:
    """A launch extent is computed from constants, scalar parameters and buffer sizes only,
    so the launch can be sized before the kernel runs."""
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        op = v.op
        if op is None:
            continue  # a scalar parameter
        if op.opcode == "load":
            raise _error(f"axis '{name}': its extent depends on a load from '{op.attrs.buffer}'; extents are "
                         "computed from constants, scalar parameters and buffer sizes")
        if op.opcode not in _EXTENT_SOURCES and not OPS[op.opcode].pointwise and op.opcode != "cast":
            raise _error(f"axis '{name}': its extent depends on a {op.opcode}; extents are computed from "
                         "constants, scalar parameters and buffer sizes")
        todo.extend(op.operands)


def _axis_tuple(role: str, axes, launch: str = "for_each_block", most: int | None = None) -> list:
    """``axes``, one axis or a tuple of them (a grid may have any number: past three, the GPU
    launch folds them onto its three dimensions; a block's threads at most three)."""
    axes = list(axes) if isinstance(axes, (tuple, list)) and not (
        len(axes) == 2 and isinstance(axes[0], str)) else [axes]
    if not axes:
        raise _error(f"{launch}: {role} takes one axis or more, got none")
    if most is not None and len(axes) > most:
        raise _error(f"{launch}: {role} takes 1 to {most} axes, got {len(axes)}")
    return [_as_axis(a) for a in axes]


def _check_index_range(launch: str, axes, unit: str) -> None:
    """The launch's threads, blocks or programs must be countable in an index: a product of
    static extents past its range is refused here (run-time extents, as the launch is sized)."""
    static = [a.extent for a in axes if isinstance(a, Axis)]
    if len(static) == len(axes) and math.prod(static) > INDEX_MAX:
        raise _error(f"{launch}: {' * '.join(map(str, axes))} = {math.prod(static)} {unit} "
                     "overflows the index range")


def _as_axis(a):
    if isinstance(a, (Axis, RuntimeAxis)):
        return a
    if isinstance(a, tuple) and len(a) == 2:
        return axis(*a)
    raise _error(f"expected an axis(name, extent), got {a!r}")


def _axes(axes, slots, **kw) -> list:
    if axes is None:
        axes = {k: v for k, v in kw.items() if v is not None}
    elif not isinstance(axes, dict):
        axes = {slot: getattr(axes, slot) for slot in slots}
    missing = [s for s in slots if s not in axes]
    extra = [s for s in axes if s not in slots]
    if missing or extra:
        raise _error(f"for_each_{len(slots)}d needs axes {', '.join(slots)}; missing {missing}, unexpected {extra}")
    return [_as_axis(axes[s]) for s in slots]
