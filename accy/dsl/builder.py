"""The tracing builder: every call records one typed SSA op.

A kernel body receives a :class:`Builder` (the seed calls it ``k`` at the top
level and ``inner`` inside loops).  Each method checks its operands against the
op's type rule (:mod:`accy.dsl.ops`) and appends an :class:`~accy.dsl.ir.Op`
to the builder's block.  Errors are raised here, at trace time, with the line of
the user's source that made the call.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import attrs

from ..errors import TraceError
from . import tracing
from .ir import Axis, Block, Op, Param, Value
from .ops import OPS, OpTypeError
from .types import INDEX_MAX, INDEX_MIN, DType, as_dtype, boolean, f32, index

_NO_CTX = object()


def _describe(x) -> str:
    if isinstance(x, Value):
        return str(x.type)
    return f"Python {type(x).__name__}"


@attrs.frozen
class AxisIndex:
    """The index of the current logical thread along one named axis."""

    name: str
    extent: int
    index: Value = attrs.field(eq=False)


class LaunchIndex:
    """What a ``for_each_Nd`` body receives: ``.x``/``.y``/``.z`` axis indices.

    ``index["b"]`` gives the index value of the axis named ``b``; iterating gives
    the index values in x, y, z order.
    """

    __slots__ = ("axes",)

    def __init__(self, axes: Sequence[AxisIndex]):
        self.axes = tuple(axes)

    def _slot(self, i: int, slot: str) -> AxisIndex:
        if i >= len(self.axes):
            raise AttributeError(f"a {len(self.axes)}-D launch has no '{slot}' axis")
        return self.axes[i]

    x = property(lambda self: self._slot(0, "x"))
    y = property(lambda self: self._slot(1, "y"))
    z = property(lambda self: self._slot(2, "z"))

    def __getitem__(self, name: str) -> Value:
        for axis in self.axes:
            if axis.name == name:
                return axis.index
        names = ", ".join(a.name for a in self.axes)
        raise KeyError(f"no logical axis named {name!r}; this launch has {names}")

    def __iter__(self):
        return iter(a.index for a in self.axes)

    def __len__(self) -> int:
        return len(self.axes)


def axis(name: str, extent: int) -> Axis:
    """A named logical axis of ``extent`` threads (``logical.axis`` in the seed)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise TraceError(f"axis name must be an identifier string, got {name!r}", tracing.user_location())
    if isinstance(extent, bool) or not isinstance(extent, int):
        raise TraceError(f"axis '{name}': extent must be a Python int, got {extent!r}", tracing.user_location())
    if extent < 0 or extent > INDEX_MAX:
        raise TraceError(
            f"axis '{name}': extent {extent} is outside the index range [0, {INDEX_MAX}]",
            tracing.user_location(),
        )
    return Axis(name, extent)


class BufferHandle:
    """A kernel parameter as the body sees it: load with ``x[i]`` or ``x.load(inner, i)``."""

    __slots__ = ("param",)

    def __init__(self, param: Param):
        self.param = param

    name = property(lambda self: self.param.name)
    dtype = property(lambda self: self.param.dtype)

    def load(self, builder: "Builder", idx) -> Value:
        return builder.load(self, idx)

    def store(self, builder: "Builder", value, idx) -> None:
        builder.store(self, value, idx)

    def __getitem__(self, idx) -> Value:
        return tracing.current().load(self, idx)

    def __setitem__(self, idx, value) -> None:
        tracing.current().store(self, value, idx)

    def __repr__(self) -> str:
        return f"<buffer {self.name}: {self.dtype}>"


class Builder:
    """Records ops into one block. ``parent`` is the builder of the enclosing region."""

    def __init__(self, block: Block, parent: "Builder | None" = None):
        self.block = block
        self.parent = parent
        self._open = True
        self._launched = False  # top level: has for_each been called?
        self.is_launch_body = False  # the builder of a for_each region

    # -- context management: the Pythonic spelling records into the innermost builder
    def __enter__(self) -> "Builder":
        tracing.stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        popped = tracing.stack().pop()
        assert popped is self

    @property
    def is_kernel_scope(self) -> bool:
        return self.parent is None

    @property
    def in_launch(self) -> bool:
        """Inside a for_each body (directly or in a fold within it)?"""
        return any(b.is_launch_body for b in self._scopes())

    def _scopes(self):
        """This builder and the builders of the enclosing regions, innermost first."""
        builder = self
        while builder is not None:
            yield builder
            builder = builder.parent

    # -- recording ---------------------------------------------------------------
    def _error(self, message: str) -> TraceError:
        return TraceError(message, tracing.user_location())

    def _check_visible(self, opcode: str, value: Value) -> None:
        if not isinstance(value, Value):
            raise self._error(f"{opcode}: operand {value!r} is not a traced value")
        if not any(value.block is b.block for b in self._scopes()):
            raise self._error(
                f"{opcode}: operand {value.type} value was defined inside another region "
                "(a fold_range or for_each body) and is not visible here; return it from "
                "that body instead of keeping it in a variable"
            )

    def _record(self, opcode: str, operands: Sequence[Value], attrs=None, regions=()) -> Op:
        if not self._open:
            raise self._error(
                f"{opcode}: this builder belongs to a fold_range/for_each body that has already "
                "returned; record ops with the builder passed to the current body"
            )
        for v in operands:
            self._check_visible(opcode, v)
        attrs = attrs or {}
        try:
            result_types = OPS[opcode].infer(tuple(v.type for v in operands), attrs)
        except OpTypeError as e:
            types = ", ".join(str(v.type) for v in operands)
            raise self._error(f"{opcode}({types}): {e}") from None
        op = Op(opcode, operands, attrs, result_types, regions, tracing.user_location(), self.block)
        self.block.ops.append(op)
        return op

    # -- constants ---------------------------------------------------------------
    def constant(self, value, dtype) -> Value:
        dtype = as_dtype(dtype)
        if dtype.is_int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._error(f"constant_index: expected a Python int, got {value!r}")
            if not INDEX_MIN <= value <= INDEX_MAX:
                raise self._error(f"constant_index: {value} is outside the index range [{INDEX_MIN}, {INDEX_MAX}]")
            value = int(value)
        elif dtype.is_float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self._error(f"constant_float: expected a Python number, got {value!r}")
            value = float(value)
        else:
            if not isinstance(value, bool):
                raise self._error(f"constant_bool: expected True or False, got {value!r}")
        return self._record("const", (), {"value": value, "dtype": dtype}).result

    def constant_index(self, value: int) -> Value:
        return self.constant(value, index)

    def constant_float(self, dtype_or_value, value=None) -> Value:
        """``constant_float(f32, 0.5)`` as in the seed, or ``constant_float(0.5)``."""
        if value is None:
            dtype_or_value, value = f32, dtype_or_value
        dtype = as_dtype(dtype_or_value)
        if not dtype.is_float:
            raise self._error(f"constant_float: {dtype} is not a float type")
        return self.constant(value, dtype)

    def constant_bool(self, value: bool) -> Value:
        return self.constant(value, boolean)

    def _lift(self, x, like: DType | None, opcode: str) -> Value:
        """A Python number becomes a constant of the other operand's type."""
        if isinstance(x, Value):
            return x
        if isinstance(x, bool):
            return self.constant(x, boolean)
        if isinstance(x, int):
            return self.constant(x, like if like is not None and not like.is_bool else index)
        if isinstance(x, float):
            if like is not None and not like.is_float:
                raise self._error(
                    f"{opcode}({like}, Python float): a float cannot combine with {like}; "
                    f"cast the {like} value with cast(value, f32) first"
                )
            return self.constant(x, like if like is not None else f32)
        raise self._error(f"{opcode}: operand {x!r} is neither a traced value nor a Python number")

    def _operands(self, opcode: str, *xs) -> list[Value]:
        like = next((x.type for x in xs if isinstance(x, Value)), None)
        return [self._lift(x, like, opcode) for x in xs]

    def _op(self, opcode: str, *xs) -> Value:
        return self._record(opcode, self._operands(opcode, *xs)).result

    # -- arithmetic, comparisons, logic --------------------------------------------
    def add(self, a, b) -> Value: return self._op("add", a, b)
    def sub(self, a, b) -> Value: return self._op("sub", a, b)
    def mul(self, a, b) -> Value: return self._op("mul", a, b)

    def div(self, a, b) -> Value:
        """Division: IEEE for floats, floor division (Python's ``//``) for index."""
        return self._op("div", a, b)

    def true_div(self, a, b) -> Value:
        a, b = self._operands("div", a, b)
        if a.type.is_int and b.type.is_int:
            raise self._error("index / index: use // for index (floor) division, or cast to f32 first")
        return self._op("div", a, b)

    def floor_div(self, a, b) -> Value:
        a, b = self._operands("div", a, b)
        if a.type.is_float or b.type.is_float:
            raise self._error(f"{a.type} // {b.type}: // is index division; use / for floats")
        return self._op("div", a, b)

    def max(self, a, b) -> Value: return self._op("max", a, b)
    def min(self, a, b) -> Value: return self._op("min", a, b)
    def neg(self, a) -> Value: return self._op("neg", a)
    def exp(self, a) -> Value: return self._op("exp", a)
    def sqrt(self, a) -> Value: return self._op("sqrt", a)
    def lt(self, a, b) -> Value: return self._op("lt", a, b)
    def le(self, a, b) -> Value: return self._op("le", a, b)
    def gt(self, a, b) -> Value: return self._op("gt", a, b)
    def ge(self, a, b) -> Value: return self._op("ge", a, b)
    def eq(self, a, b) -> Value: return self._op("eq", a, b)
    def ne(self, a, b) -> Value: return self._op("ne", a, b)
    def logical_and(self, a, b) -> Value: return self._op("and", a, b)
    def logical_or(self, a, b) -> Value: return self._op("or", a, b)
    def logical_not(self, a) -> Value: return self._op("not", a)

    def select(self, cond, if_true, if_false) -> Value:
        """``if_true`` where ``cond`` holds, else ``if_false`` (both are evaluated)."""
        cond = self._lift(cond, boolean, "select")
        a, b = self._operands("select", if_true, if_false)
        return self._record("select", (cond, a, b)).result

    def cast(self, value, dtype) -> Value:
        """Convert: index→f32 rounds to nearest; f32→index truncates toward zero,
        saturating at the index range, with NaN giving 0; bool→number gives 0 or 1."""
        value = self._lift(value, None, "cast")
        return self._record("cast", (value,), {"dtype": as_dtype(dtype)}).result

    # -- memory --------------------------------------------------------------------
    def _buffer(self, opcode: str, buffer) -> BufferHandle:
        if not isinstance(buffer, BufferHandle):
            raise self._error(f"{opcode}: expected a kernel buffer parameter, got {buffer!r}")
        return buffer

    def load(self, buffer: BufferHandle, idx) -> Value:
        buffer = self._buffer("load", buffer)
        idx = self._lift(idx, index, "load")
        attrs_ = {"buffer": buffer.name, "dtype": buffer.dtype}
        return self._record("load", (idx,), attrs_).result

    def store(self, buffer: BufferHandle, value, idx) -> None:
        """Write ``value`` at ``idx`` (argument order as in the seed: value, then index)."""
        buffer = self._buffer("store", buffer)
        if not self.in_launch:
            raise self._error(
                f"store to '{buffer.name}' outside for_each: every GPU thread would write it; "
                "store inside a for_each body"
            )
        idx = self._lift(idx, index, "store")
        value = self._lift(value, buffer.dtype, "store")
        self._record("store", (idx, value), {"buffer": buffer.name, "dtype": buffer.dtype})

    # -- regions -------------------------------------------------------------------
    def _run_body(self, block: Block, body: Callable, args: tuple, what: str):
        inner = Builder(block, parent=self)
        inner.is_launch_body = what == "for_each"
        try:
            with inner:
                return inner, body(inner, *args)
        finally:
            inner._open = False

    def fold_range(self, start, stop, step, init, ctx: Any = _NO_CTX, body: Callable | None = None):
        """Loop ``i`` from ``start`` while ``i < stop`` (``i > stop`` for a negative
        step), threading ``acc`` through ``body(inner, i, acc[, ctx]) -> new acc``.

        ``init`` is one value or a tuple of values (several loop-carried values);
        the result has the same shape.  ``step`` is a non-zero Python int.
        """
        if body is None:
            body, ctx = ctx, _NO_CTX
        if not callable(body):
            raise self._error(f"fold_range: body must be a function (inner, i, acc[, ctx]), got {body!r}")
        step = self._static_step(step)
        # init first, then bounds: the order the seed's spelling records them in
        multiple = isinstance(init, (tuple, list))
        inits = [self._lift(v, None, "fold_range") for v in (init if multiple else (init,))]
        bounds = [self._lift(b, index, "fold_range") for b in (start, stop)]
        if not inits:
            raise self._error("fold_range: init must hold at least one value")
        for v in bounds + inits:
            self._check_visible("fold_range", v)
        block = Block([index] + [v.type for v in inits])
        iv, accs = block.args[0], block.args[1:]
        args = (iv, tuple(accs) if multiple else accs[0])
        if ctx is not _NO_CTX:
            args += (ctx,)
        inner, result = self._run_body(block, body, args, "fold_range")
        results = self._check_fold_result(body, result, inits, multiple)
        inner._open = True
        inner._record("yield", results)
        inner._open = False
        op = self._record("fold", (*bounds, *inits), {"step": step}, regions=(block,))
        return tuple(op.results) if multiple else op.results[0]

    def _static_step(self, step) -> int:
        if isinstance(step, Value) and step.owner is not step.block and step.owner.opcode == "const":
            step = step.owner.attrs["value"]
        if isinstance(step, bool) or not isinstance(step, int):
            raise self._error(f"fold_range: step must be a non-zero Python int, got {step!r}")
        if step == 0:
            raise self._error("fold_range: step must be non-zero")
        if not INDEX_MIN <= step <= INDEX_MAX:
            raise self._error(f"fold_range: step {step} is outside the index range")
        return step

    def _check_fold_result(self, body, result, inits, multiple) -> list[Value]:
        code = getattr(body, "__code__", None)
        where = f" (body {body.__name__} at line {code.co_firstlineno})" if code else ""
        results = list(result) if multiple and isinstance(result, (tuple, list)) else [result]
        if multiple and not isinstance(result, (tuple, list)):
            raise self._error(f"fold_range{where}: body returned {_describe(result)}, expected a tuple of {len(inits)}")
        if len(results) != len(inits):
            raise self._error(f"fold_range{where}: body returned {len(results)} values, expected {len(inits)}")
        checked = []
        for i, (r, init) in enumerate(zip(results, inits)):
            if not isinstance(r, Value) and isinstance(r, (int, float)) and not isinstance(r, bool):
                r = self._lift(r, init.type, "fold_range")
            if not isinstance(r, Value) or r.type != init.type:
                got = _describe(r) if r is not None else "None (did the body forget to return?)"
                raise self._error(
                    f"fold_range{where}: body returned {got} for accumulator {i}, "
                    f"expected {init.type} (the type of init)"
                )
            checked.append(r)
        return checked

    def _for_each(self, axes: Sequence[Axis], ctx, body) -> None:
        if not self.is_kernel_scope:
            raise self._error("for_each: launches can only be opened at the kernel's top level")
        if self._launched:
            raise self._error("for_each: a kernel opens exactly one launch; this one already has one")
        if body is None:
            # decorator form: @k.for_each_1d(axis("i", n))
            def decorate(fn):
                self._for_each(axes, ctx, fn)
                return fn

            return decorate
        if not callable(body):
            raise self._error(f"for_each: body must be a function (inner, index[, ctx]), got {body!r}")
        names = [a.name for a in axes]
        if len(set(names)) != len(names):
            raise self._error(f"for_each: axis names must differ, got {names}")
        total = math.prod(a.extent for a in axes)
        if total > INDEX_MAX:
            raise self._error(f"for_each: {' * '.join(map(str, axes))} = {total} threads overflows the index range")
        self._launched = True
        block = Block([index] * len(axes))
        launch = LaunchIndex([AxisIndex(a.name, a.extent, v) for a, v in zip(axes, block.args)])
        args = (launch,) if ctx is _NO_CTX else (launch, ctx)
        inner, result = self._run_body(block, body, args, "for_each")
        self._record("for_each", (), {"axes": tuple(axes)}, regions=(block,))
        return None

    def for_each_1d(self, x: Axis, ctx: Any = _NO_CTX, body=None):
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

    # the seed's camelCase spellings, so seed kernels port line by line
    constantIndex = constant_index
    constantFloat = constant_float
    foldRange = fold_range
    forEach1D = for_each_1d
    forEach2D = for_each_2d
    forEach3D = for_each_3d


def _as_axis(a) -> Axis:
    if isinstance(a, Axis):
        return a
    if isinstance(a, tuple) and len(a) == 2:
        return axis(*a)
    raise TraceError(f"expected an axis(name, extent), got {a!r}", tracing.user_location())


def _axes(axes, slots, **kw) -> list[Axis]:
    if axes is None:
        axes = {k: v for k, v in kw.items() if v is not None}
    elif not isinstance(axes, dict):
        axes = {slot: getattr(axes, slot) for slot in slots}
    missing = [s for s in slots if s not in axes]
    extra = [s for s in axes if s not in slots]
    if missing or extra:
        raise TraceError(
            f"for_each_{len(slots)}d needs axes {', '.join(slots)}; missing {missing}, unexpected {extra}",
            tracing.user_location(),
        )
    return [_as_axis(axes[s]) for s in slots]
