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

import difflib
import math
import numbers
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from ..errors import TraceError, UnknownOpError
from . import context
from .analysis import uniformity
from .ir import Axis, Block, Op, Param, Value
from .ops import (OPS, REDUCTIONS, AtomicAttrs, CastAttrs, ConstAttrs, FoldAttrs, ForEachAttrs, ForEachBlockAttrs,
                  IfAttrs, LoadAttrs, NoAttrs, OpTypeError, SharedAttrs, ShuffleAttrs, SizeAttrs,
                  StoreAttrs, infer)
from .types import INDEX_MAX, DType, as_dtype, boolean, f32, from_numpy, index, u32

_NO_CTX = object()


def _describe(x) -> str:
    if isinstance(x, Traced):
        return str(x.type)
    return f"Python {type(x).__name__}"


def _error(message: str) -> TraceError:
    return TraceError(message, context.user_location())


# ----------------------------------------------------------------------------- traced values


class Traced:
    """A value of the kernel being traced.

    Arithmetic, comparisons, ``abs``, ``round``, ``math.floor``, ``x ** y`` and
    NumPy ufuncs on it record ops into the active builder; ``x.log()`` and the
    seed's ``x.mul(inner, y)`` do too.  Its value exists only when the kernel
    runs, so Python control flow on it (``if x:``, ``int(x)``) is an error.
    """

    __slots__ = ("value",)
    __array_ufunc__ = None  # replaced below: NumPy ufuncs and scalars defer to accy ops

    def __init__(self, value: Value):
        self.value = value

    @property
    def type(self) -> DType:
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type

    def raw(self) -> "Traced":
        """The untyped SSA value (the seed's typed loads wrap one; here they are the same)."""
        return self

    def __repr__(self) -> str:
        return f"<traced {self.type}>"

    __hash__ = object.__hash__  # values are identities; == records an op (as in JAX)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unknown(name, "a traced value")

    # Python control flow cannot see traced values
    def _no_python_value(self, what, hint=""):
        raise _error(
            f"a traced {self.type} value cannot be used as a Python {what}: its value is only "
            "known when the kernel runs. Use select(cond, a, b) or if_(cond, then, otherwise) for a "
            f"choice and fold_range(...) for a loop{hint}"
        )

    def __bool__(self):
        self._no_python_value("bool (if/while/and/or/not, a chained comparison like 0 < i < n)",
                              "; combine conditions with (a) & (b), (a) | (b) and ~a, in parentheses, and split "
                              "chained comparisons; Python's max()/min() compare with if: use inner.max(a, b)")

    def __index__(self): self._no_python_value("int index")
    def __int__(self): self._no_python_value("int", "; cast(value, i32) converts inside the kernel")
    def __float__(self):
        self._no_python_value("float", "; Python's math module needs numbers: for math on traced values use the "
                                       "accy op, as a method (x.sqrt(), x.exp()) or from accy.math (accy.math.sqrt(x))")
    def __complex__(self): self._no_python_value("complex")
    def __iter__(self): self._no_python_value("iterable")
    def __len__(self): self._no_python_value("sequence (len)")
    def __getitem__(self, item): self._no_python_value("sequence ([])", "; index buffers, not values")
    def __matmul__(self, other): raise _error("@ is not an accy op; write a dot product with fold_range")
    __rmatmul__ = __matmul__

    def __pos__(self): return self

    def __round__(self, ndigits=None):
        if ndigits is not None:
            raise _error(f"round(x, {ndigits!r}): only round(x) (to an integer value) is an accy op")
        return context.current().round(self)

    def __divmod__(self, other):
        inner = context.current()
        return inner.floor_div(self, other), inner.mod(self, other)

    def __rdivmod__(self, other):
        inner = context.current()
        return inner.floor_div(other, self), inner.mod(other, self)

    def cast(self, *args, **options) -> "Traced":
        builder, args = _builder_and_args(args)
        return builder.cast(self, *args, **options)


def _builder_and_args(args):
    """``value.op(builder, other)`` (the seed) or ``value.op(other)`` (the active builder)."""
    if args and isinstance(args[0], Builder):
        return args[0], args[1:]
    return context.current(), args


def _value_method(method: str):
    def call(self, *args):
        builder, args = _builder_and_args(args)
        return getattr(builder, method)(self, *args)

    call.__name__ = method
    call.__doc__ = f"Record ``{method}`` with this value as the first operand."
    return call


def _operator(method: str, reflected: bool):
    if reflected:
        return lambda self, other: getattr(context.current(), method)(other, self)
    return lambda self, other: getattr(context.current(), method)(self, other)


_BINARY_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "true_div", "floordiv": "floor_div",
    "mod": "mod", "pow": "pow", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "shl", "rshift": "shr",
}
_COMPARISONS = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne"}
_UNARY_OPERATORS = {"neg": "neg", "abs": "abs", "invert": "bitwise_not", "floor": "floor", "ceil": "ceil",
                    "trunc": "trunc"}

for _name, _method in _BINARY_OPERATORS.items():
    setattr(Traced, f"__{_name}__", _operator(_method, False))
    setattr(Traced, f"__r{_name}__", _operator(_method, True))
for _name, _method in _COMPARISONS.items():
    setattr(Traced, f"__{_name}__", _operator(_method, False))
for _name, _method in _UNARY_OPERATORS.items():
    setattr(Traced, f"__{_name}__", lambda self, _m=_method: getattr(context.current(), _m)(self))
for _opdef in OPS.values():
    for _method in _opdef.methods:
        setattr(Traced, _method, _value_method(_method))

# NumPy ufuncs on traced values (np.exp(x), np.float32(2) * x) become accy ops
_UFUNCS = {
    "add": "add", "subtract": "sub", "multiply": "mul", "true_divide": "true_div", "divide": "true_div",
    "floor_divide": "floor_div", "remainder": "mod", "power": "pow", "negative": "neg", "positive": None,
    "absolute": "abs", "fabs": "abs", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log",
    "log2": "log2", "log1p": "log1p", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin", "cos": "cos",
    "arctan": "atan", "arctan2": "atan2",
    "floor": "floor", "ceil": "ceil", "rint": "round", "trunc": "trunc", "isnan": "isnan", "isinf": "isinf",
    "maximum": "max", "minimum": "min", "copysign": "copysign", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "logical_not": "logical_not",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "invert": "bitwise_not", "left_shift": "shl", "right_shift": "shr",
}


_ARRAY_FUNCTIONS = {"where": "inner.select(cond, a, b) (also inner.where)", "clip": "inner.min(inner.max(x, lo), hi)",
                    "sum": "fold_range or block_reduce", "dot": "fold_range"}


def _array_function(self, func, types, args, kwargs):
    name = getattr(func, "__name__", str(func))
    hint = _ARRAY_FUNCTIONS.get(name, "the builder's methods (inner.select, inner.max, ...) or accy.math")
    raise _error(f"numpy.{name} does not work on traced values; use {hint}")


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = getattr(ufunc, "__name__", str(ufunc))
    if method != "__call__" or kwargs or name not in _UFUNCS:
        raise _error(f"numpy.{name}{'' if method == '__call__' else '.' + method} is not an accy op on traced "
                     "values; use the builder's methods (inner.exp(x)) or accy.math")
    target = _UFUNCS[name]
    return inputs[0] if target is None else getattr(context.current(), target)(*inputs)


Traced.__array_ufunc__ = _array_ufunc
Traced.__array_function__ = _array_function


def _unknown(name: str, where: str) -> UnknownOpError:
    names = sorted(set(_METHOD_NAMES) | set(Builder.__dict__) | set(Traced.__dict__))
    names = [n for n in names if not n.startswith("_")]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "; see docs/ir.md for every op"
    return UnknownOpError(f"no op named '{name}' on {where}{hint}", context.user_location())


# ----------------------------------------------------------------------------- launch indices


@attrs.frozen
class AxisIndex:
    """The index of the current logical thread along one named axis."""

    name: str
    extent: int | None
    index: Traced = attrs.field(eq=False)


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

    def __getitem__(self, name: str) -> Traced:
        for axis in self.axes:
            if axis.name == name:
                return axis.index
        names = ", ".join(a.name for a in self.axes)
        raise _error(f"no logical axis named {name!r}; this launch has {names}")

    def __iter__(self):
        return iter(a.index for a in self.axes)

    def __len__(self) -> int:
        return len(self.axes)


@attrs.define(eq=False)
class _LaunchInfo:
    """What the builders inside a launch know about it."""

    blocks: bool  # a for_each_block launch (threads cooperate) rather than for_each
    thread_values: tuple[Value, ...]  # the values that differ between the threads of a block
    thread_extents: tuple[int, ...]  # a block launch's threads per axis, x first
    body: "Builder | None" = None  # the builder of the launch region
    shared_names: set = attrs.field(factory=set)
    # region arguments -> the values they come from (a loop's bounds, an accumulator's init
    # and what the body yields), for the uniformity analysis
    sources: dict = attrs.field(factory=dict)
    open_accumulators: set = attrs.field(factory=set)  # of loops still being traced

    @property
    def threads(self) -> int:
        return math.prod(self.thread_extents)

    def varies(self, value: Value) -> bool:
        """Can ``value`` differ between the threads of one block (:mod:`.analysis.uniformity`)?
        Conservatively, so does the accumulator of a loop that is still being traced."""
        return uniformity.varies(value, lambda v: v in self.thread_values or v in self.open_accumulators,
                                 self.sources)


@attrs.frozen
class RuntimeAxis:
    """A named axis whose extent is an ``index`` value computed when the kernel runs."""

    name: str
    extent: Traced = attrs.field(eq=False)


def axis(name: str, extent) -> Axis | RuntimeAxis:
    """A named logical axis (``logical.axis`` in the seed): ``extent`` is a Python int, or an
    ``index`` value known at run time (a ``scalar(index)`` parameter, ``buffer.size``, or an
    expression of them computed at the kernel's top level)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise _error(f"axis name must be an identifier string, got {name!r}")
    if isinstance(extent, Traced):
        if not extent.type.is_index:
            raise _error(f"axis '{name}': extent is {extent.type}; launch extents are index "
                         f"(declare the parameter scalar(index), or cast(value, index))")
        return RuntimeAxis(name, extent)
    if isinstance(extent, (bool, np.bool_)) or not isinstance(extent, numbers.Integral):
        raise _error(f"axis '{name}': extent must be a Python int or a traced index value, got {extent!r}")
    extent = int(extent)
    if extent < 0 or extent > INDEX_MAX:
        raise _error(f"axis '{name}': extent {extent} is outside the index range [0, {INDEX_MAX}]")
    return Axis(name, extent)


# ----------------------------------------------------------------------------- parameters


class MemoryHandle:
    """Memory a kernel indexes: ``x[i]``, ``x[i] = v``, ``x.size``."""

    __slots__ = ()
    space = "global"
    kind = "buffer"

    def load(self, builder: "Builder", idx) -> Traced:
        return builder.load(self, idx)

    def store(self, builder: "Builder", value, idx) -> None:
        builder.store(self, value, idx)

    def __getitem__(self, idx) -> Traced:
        return context.current().load(self, idx)

    def __setitem__(self, idx, value) -> None:
        context.current().store(self, value, idx)

    def __iter__(self):
        raise _error(f"iterating over {self.kind} '{self.name}' is not possible while tracing; "
                     "loop with fold_range or launch a thread per element")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _unknown(name, f"{self.kind} '{self.name}'")

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}: {self.dtype}>"


class SharedArray(MemoryHandle):
    """A per-block array in shared memory (``inner.shared(dtype, count)``)."""

    __slots__ = ("name", "dtype", "count")
    space = "shared"
    kind = "shared array"

    def __init__(self, name: str, dtype: DType, count: int):
        self.name, self.dtype, self.count = name, dtype, count

    @property
    def size(self) -> int:
        """The element count, known when the kernel is traced."""
        return self.count

    def __len__(self) -> int:
        return self.count


class BufferHandle(MemoryHandle):
    """A buffer parameter as the body sees it: ``x[i]``, ``x[i] = v``, ``x.size``."""

    __slots__ = ("param",)

    def __init__(self, param: Param):
        self.param = param

    name = property(lambda self: self.param.name)
    dtype = property(lambda self: self.param.dtype)

    @property
    def size(self) -> Traced:
        """The buffer's element count, an ``index`` value (known when the kernel runs)."""
        return context.current().size(self)

    def __len__(self):
        raise _error(f"len({self.name}): Python's len() must return an int, but a buffer's length is only "
                     f"known when the kernel runs; use {self.name}.size (an index value)")


# ----------------------------------------------------------------------------- the builder


class Builder:
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
        """This builder and the builders of the enclosing regions, innermost first."""
        builder = self
        while builder is not None:
            yield builder
            builder = builder.parent

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
        operands = [self._check_visible(opcode, v) for v in operands]
        attrs = NoAttrs() if attrs is None else attrs  # else an instance of OPS[opcode].schema
        try:
            result_types = infer(opcode, (v.type for v in operands), attrs)
        except OpTypeError as e:
            types = ", ".join(str(v.type) for v in operands)
            raise _error(f"{opcode}({types}): {e}{self._literal_init_hint(operands)}") from None
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
        raise _error(f"{opcode}: operand {x!r} is neither a traced value nor a number")

    def _operands(self, opcode: str, *xs) -> list[Value]:
        like = next((x.type for x in xs if isinstance(x, Traced)), None)
        return [self._lift(x, like, opcode) for x in xs]

    def _op(self, opcode: str, *xs) -> Traced:
        return self._traced(self._record(opcode, self._operands(opcode, *xs)))

    # -- ops with rules of their own ------------------------------------------------
    def true_div(self, a, b) -> Traced:
        """``a / b``: floats only (integers divide with ``//``)."""
        a, b = self._operands("div", a, b)
        if a.type.is_int and b.type.is_int:
            raise _error(f"{a.type} / {b.type}: use // for {a.type} (floor) division, or cast to a float first")
        return self._traced(self._record("div", (a, b)))

    def floor_div(self, a, b) -> Traced:
        """``a // b``: integers only (floor division, as Python's)."""
        a, b = self._operands("div", a, b)
        if a.type.is_float or b.type.is_float:
            raise _error(f"{a.type} // {b.type}: // is integer division; use / for floats "
                         "(and floor(a / b) for a rounded quotient)")
        return self._traced(self._record("div", (a, b)))

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

    def cast(self, value, dtype, *, saturate: bool = False) -> Traced:
        """Convert to ``dtype`` (see docs/ir.md): float to float and int to float round to
        nearest even; float to int truncates toward zero, saturating, NaN giving 0; int to
        int wraps; to bool is ``!= 0``.  ``saturate=True`` (a float ``dtype``): a value past
        the largest finite ``dtype`` value, an infinity included, becomes that value (NaN
        stays NaN), as PTX's ``.satfinite``; it is recorded as compares and selects around
        the cast."""
        value = self._lift(value, None, "cast")
        try:
            dtype = as_dtype(dtype)
        except TypeError as e:
            raise _error(f"cast: {e}") from None
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

    # -- memory --------------------------------------------------------------------
    def _buffer(self, opcode: str, buffer) -> MemoryHandle:
        if not isinstance(buffer, MemoryHandle):
            raise _error(f"{opcode}: expected a kernel buffer parameter or a shared array, got {buffer!r}")
        if buffer.space == "shared" and self._launch_info() is None:
            raise _error(f"{opcode}: shared array '{buffer.name}' is used outside its block body")
        return buffer

    def size(self, buffer: BufferHandle) -> Traced:
        """The element count of ``buffer`` (an ``index``), e.g. for a launch extent."""
        if not isinstance(buffer, BufferHandle):
            raise _error(f"size: expected a kernel buffer parameter, got {buffer!r}")
        return self._traced(self._record("size", (), SizeAttrs(buffer=buffer.name)))

    def _index(self, opcode: str, idx) -> Value:
        if isinstance(idx, tuple):
            raise _error(f"{opcode}: buffers are 1-D; compute a flat index (row * columns + column)")
        return self._lift(idx, index, opcode)

    def load(self, buffer: BufferHandle, idx) -> Traced:
        buffer = self._buffer("load", buffer)
        attrs_ = LoadAttrs(buffer=buffer.name, dtype=buffer.dtype, space=buffer.space)
        return self._traced(self._record("load", (self._index("load", idx),), attrs_))

    def store(self, buffer: BufferHandle, value, idx) -> None:
        """Write ``value`` at ``idx`` (argument order as in the seed: value, then index)."""
        buffer = self._buffer("store", buffer)
        if not self.in_launch:
            raise _error(
                f"store to '{buffer.name}' outside for_each: every GPU thread would write it; "
                "store inside a for_each body"
            )
        idx = self._index("store", idx)
        if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_, numbers.Integral)) \
                and not buffer.dtype.is_float:
            raise _error(f"store to '{buffer.name}': {float(value)!r} is a float but the buffer holds "
                         f"{buffer.dtype}; convert it: cast(value, {buffer.dtype})")
        value = self._lift(value, buffer.dtype, "store")
        self._record("store", (idx, value), StoreAttrs(buffer=buffer.name, dtype=buffer.dtype, space=buffer.space))

    # -- regions -------------------------------------------------------------------
    def _run_body(self, block: Block, body: Callable, args: tuple, *, launch: "_LaunchInfo | None" = None,
                  int_literals: dict | None = None, guard=None):
        inner = Builder(block, parent=self)
        inner.launch_info = launch
        inner.int_literal_accumulators = int_literals or {}
        inner.guard = guard
        if launch is not None:
            launch.body = inner
        try:
            with inner:
                return inner, body(inner, *args)
        finally:
            inner._open = False

    def _yield(self, inner: "Builder", values) -> None:
        inner._open = True
        inner._record("yield", values)
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
            raise _error(f"fold_range: body must be a function (inner, i, acc[, ctx]), got {body!r}")
        if isinstance(init, (tuple, list)) and not init:
            raise _error("fold_range: init must hold at least one value (for a loop without one, use for_range)")
        return self._loop(start, stop, step, init, ctx, body)

    foldRange = fold_range

    def for_range(self, start, stop, step, body: Callable, ctx: Any = _NO_CTX) -> None:
        """Loop ``i`` as ``fold_range`` does, calling ``body(inner, i[, ctx])`` for what it does
        (stores, atomics); nothing is carried from one iteration to the next."""
        if not callable(body):
            raise _error(f"for_range: body must be a function (inner, i[, ctx]), got {body!r}")

        def each(inner, i, accs, *extra):
            result = body(inner, i, *extra)
            done_for_effect = isinstance(result, Traced) and result.value.op is not None \
                and not OPS[result.value.op.opcode].pure
            if result is not None and not done_for_effect:
                raise _error(f"for_range: the body returned {_describe(result)}; it carries nothing from one "
                             "iteration to the next (use fold_range to compute a value)")
            return ()

        self._loop(start, stop, step, (), ctx, each)

    def _loop(self, start, stop, step, init, ctx, body):
        step = self._static_step(step)
        # init first, then bounds: the order the seed's spelling records them in
        multiple = isinstance(init, (tuple, list))
        raw_inits = list(init) if multiple else [init]
        inits = [self._lift(v, None, "fold_range") for v in raw_inits]
        bounds = [self._lift(b, index, "fold_range") for b in (start, stop)]
        for v in bounds + inits:
            self._check_visible("fold_range", v)
        block = Block([index] + [v.type for v in inits])
        accs = [Traced(a) for a in block.args[1:]]
        args = (Traced(block.args[0]), tuple(accs) if multiple else accs[0])
        if ctx is not _NO_CTX:
            args += (ctx,)
        literals = {a: int(raw) for a, raw in zip(block.args[1:], raw_inits)
                    if isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_))}
        guard = ("a fold_range whose bounds depend", tuple(bounds), context.user_location())
        info = self._launch_info()
        if info is not None:  # where the loop's values come from, for the uniformity analysis
            info.sources[block.args[0]] = tuple(bounds)
            for arg, init in zip(block.args[1:], inits):
                info.sources[arg] = (init,)
                info.open_accumulators.add(arg)
        try:
            inner, result = self._run_body(block, body, args, int_literals=literals, guard=guard)
        finally:
            if info is not None:
                info.open_accumulators.difference_update(block.args[1:])
        results = self._check_fold_result(body, result, inits, raw_inits, multiple)
        if info is not None:
            for arg, value in zip(block.args[1:], results):
                info.sources[arg] += (value,)
        self._yield(inner, results)
        op = self._record("fold", (*bounds, *inits), FoldAttrs(step=step), regions=(block,))
        results = tuple(Traced(r) for r in op.results)
        return results if multiple else results[0]

    def _static_step(self, step) -> int:
        if isinstance(step, Traced) and step.value.op is not None and step.value.op.opcode == "const":
            step = step.value.op.attrs.value
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, numbers.Integral):
            raise _error(f"fold_range: step must be a non-zero Python int, got {step!r}")
        step = int(step)
        if step == 0:
            raise _error("fold_range: step must be non-zero")
        if not -INDEX_MAX - 1 <= step <= INDEX_MAX:
            raise _error(f"fold_range: step {step} is outside the index range")
        return step

    def _check_fold_result(self, body, result, inits, raw_inits, multiple) -> list[Value]:
        code = getattr(body, "__code__", None)
        where = f" (body {body.__name__} at line {code.co_firstlineno})" if code else ""
        if multiple and not isinstance(result, (tuple, list)):
            raise _error(f"fold_range{where}: body returned {_describe(result)}, expected a tuple of {len(inits)}")
        results = list(result) if multiple else [result]
        if len(results) != len(inits):
            raise _error(f"fold_range{where}: body returned {len(results)} values, expected {len(inits)}")
        checked = []
        for i, (r, init, raw) in enumerate(zip(results, inits, raw_inits)):
            if not isinstance(r, Traced) and isinstance(r, numbers.Real) and not isinstance(r, (bool, np.bool_)):
                r = Traced(self._lift(r, init.type, "fold_range"))
            if not isinstance(r, Traced) or r.type != init.type:
                got = _describe(r) if r is not None else "None (did the body forget to return?)"
                hint = ""
                if isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_)) \
                        and isinstance(r, Traced) and r.type.is_float:
                    hint = (f": init={raw!r} is a Python int, so the accumulator is index; "
                            f"write init={float(raw)!r} for a float accumulator")
                elif isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_)) \
                        and isinstance(r, Traced) and r.type.is_int:
                    hint = (f": init={raw!r} is a Python int, so the accumulator is index; write "
                            f"init=inner.constant({raw!r}, {r.type}) (or a NumPy scalar of that type)")
                raise _error(
                    f"fold_range{where}: body returned {got} for accumulator {i}, "
                    f"expected {init.type} (the type of init){hint}"
                )
            checked.append(r.value)
        return checked

    def if_(self, cond, then: Callable, otherwise: Callable | None = None):
        """Run ``then(inner)`` where ``cond`` holds, else ``otherwise(inner)``.

        Branches may load, store, loop and nest.  With ``otherwise``, both return
        values of equal types (one value or a tuple), which ``if_`` returns;
        without it, ``then`` returns nothing.
        """
        cond = self._lift(cond, boolean, "if_")
        cond = self._check_visible("if_", cond)
        if not cond.type.is_bool:
            raise _error(f"if_: condition is {cond.type}; if_ needs a bool condition (use a comparison)")
        for name, fn in (("then", then), ("otherwise", otherwise)):
            if fn is not None and not callable(fn):
                raise _error(f"if_: {name} must be a function (inner) -> values, got {fn!r}")
        guard = ("an if_ whose condition depends", (cond,), context.user_location())
        then_block = Block()
        then_inner, then_result = self._run_body(then_block, then, (), guard=guard)
        regions, results = [then_block], []
        if otherwise is None:
            # what an atomic returns is often left over from a lambda: it was done for its effect
            done_for_effect = isinstance(then_result, Traced) and then_result.value.op is not None \
                and not OPS[then_result.value.op.opcode].pure
            if then_result is not None and not done_for_effect:
                raise _error("if_: then returned a value but there is no otherwise; give otherwise=... "
                             "returning values of the same types")
            self._yield(then_inner, ())
        else:
            else_block = Block()
            else_inner, else_result = self._run_body(else_block, otherwise, (), guard=guard)
            results = self._branch_results(then_inner, then_result, else_inner, else_result)
            regions.append(else_block)
        types = tuple(v.type for v in results[0]) if results else ()
        op = self._record("if", (cond,), IfAttrs(results=types), regions=regions)
        out = tuple(Traced(r) for r in op.results)
        if not out:
            return None
        return out if isinstance(then_result, (tuple, list)) else out[0]

    def _branch_results(self, then_inner, then_result, else_inner, else_result):
        def values(result):
            if result is None:
                return []
            return list(result) if isinstance(result, (tuple, list)) else [result]

        then_values, else_values = values(then_result), values(else_result)
        if len(then_values) != len(else_values) or isinstance(then_result, (tuple, list)) != isinstance(
                else_result, (tuple, list)):
            raise _error(f"if_: then returned {len(then_values)} value(s) and otherwise {len(else_values)}; "
                         "both branches must return the same number of values")
        like = [v.type if isinstance(v, Traced) else w.type if isinstance(w, Traced) else None
                for v, w in zip(then_values, else_values)]
        lifted = []
        for inner, vals in ((then_inner, then_values), (else_inner, else_values)):
            inner._open = True
            try:
                lifted.append([inner._check_visible("if_", inner._lift(v, t, "if_")) for v, t in zip(vals, like)])
            finally:
                inner._open = False
        for i, (a, b) in enumerate(zip(*lifted)):
            if a.type != b.type:
                raise _error(f"if_: value {i} is {a.type} in then and {b.type} in otherwise; they must match")
        self._yield(then_inner, lifted[0])
        self._yield(else_inner, lifted[1])
        return lifted

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
        static = [a.extent for a in axes if isinstance(a, Axis)]
        if len(static) == len(axes) and math.prod(static) > INDEX_MAX:
            raise _error(f"for_each: {' * '.join(map(str, axes))} = {math.prod(static)} threads "
                         "overflows the index range")
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

        ``grid`` is one axis or a tuple of 1 to 3 (extents may be run-time values); ``threads``
        one axis or a tuple of 1 to 3 with static extents: the block shape.  The threads of a
        block may share memory (``inner.shared``), wait for each other (``inner.barrier()``) and
        exchange values within a warp of 32 (``inner.shuffle``).  Also a decorator.
        """
        if not self.is_kernel_scope:
            raise _error("for_each_block: launches can only be opened at the kernel's top level")
        if self._launched:
            raise _error("for_each_block: a kernel opens exactly one launch; this one already has one")
        if grid is None or threads is None:
            raise _error("for_each_block needs grid=axis(...) (or a tuple of axes) and threads=axis(...)")
        grid_axes, thread_axes = _axis_tuple("grid", grid), _axis_tuple("threads", threads)
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

    def _block_launch(self, what: str) -> _LaunchInfo:
        info = self._launch_info()
        if info is None or not info.blocks:
            raise _error(f"{what}: only inside a for_each_block body (the threads of a block cooperate; "
                         "for_each's threads are independent)")
        return info

    def _check_uniform(self, what: str, info: _LaunchInfo) -> None:
        """``what`` must be reached by every thread of the block: each enclosing loop's bounds
        and branch's condition must be the same for the whole block."""
        for scope in self._scopes():
            if scope.launch_info is not None:
                return
            kind, values, where = scope.guard
            if any(info.varies(v) for v in values):
                at = f" (at {where.line})" if where is not None else ""
                raise _error(f"{what} inside {kind} on the thread{at}: not every thread of the block "
                             "would reach it; make the bounds or condition the same for the whole block")

    def shared(self, dtype, count: int, name: str | None = None) -> SharedArray:
        """A per-block array of ``count`` elements of ``dtype`` in shared memory: ``s[i]`` reads,
        ``s[i] = v`` writes.  Allocated at the top of the block body; its bytes count against
        ``Limits.max_shared_bytes`` when the kernel is launched."""
        info = self._block_launch("shared")
        if self is not info.body:
            raise _error("shared: shared arrays are allocated at the top of the block body, not inside a loop or "
                         "branch (allocate it before the loop and use it inside)")
        return self._declare_shared(info, dtype, count, name)

    def _declare_shared(self, info: _LaunchInfo, dtype, count, name, *, first: bool = False,
                        stem: str = "shared") -> SharedArray:
        try:
            dtype = as_dtype(dtype)
        except TypeError as e:
            raise _error(f"shared: {e}") from None
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, numbers.Integral) or count < 1:
            raise _error(f"shared: count must be a positive Python int (the size is fixed when the kernel is traced), "
                         f"got {count!r}")
        if name is None:  # the first free stem<k>: a name the kernel chose may look like one
            k = len(info.shared_names)
            while f"{stem}{k}" in info.shared_names:
                k += 1
            name = f"{stem}{k}"
        if not isinstance(name, str) or not name.isidentifier():
            raise _error(f"shared: name must be a new identifier, got {name!r}")
        if name in info.shared_names:
            raise _error(f"shared: name must be a new identifier, got {name!r}: this block already has a shared "
                         "array of that name (yours, or the scratch of a block_reduce, block_scan or block_arg* "
                         "traced before this line)")
        info.shared_names.add(name)
        op = self._record("shared", (), SharedAttrs(name=name, dtype=dtype, count=int(count)))
        if first:  # scratch the builder needs: declared before everything else in the block body
            self.block.ops.remove(op)
            self.block.ops.insert(0, op)
        return SharedArray(name, dtype, int(count))

    def barrier(self) -> None:
        """Every thread of the block waits here until all have arrived; memory written before it
        is visible to every thread of the block after it."""
        info = self._block_launch("barrier")
        self._check_uniform("barrier", info)
        self._record("barrier", ())

    syncthreads = barrier

    # -- atomics ---------------------------------------------------------------------
    def _atomic(self, kind: str, target, idx, *values) -> Traced:
        target = self._buffer(f"atomic_{kind}", target)
        if not self.in_launch:
            raise _error(f"atomic_{kind} on '{target.name}' outside the launch; call it inside a launch body")
        operands = [self._index(f"atomic_{kind}", idx)]
        operands += [self._lift(v, target.dtype, f"atomic_{kind}") for v in values]
        attrs_ = AtomicAttrs(op=kind, buffer=target.name, dtype=target.dtype, space=target.space)
        return self._traced(self._record("atomic", operands, attrs_))

    def atomic_add(self, target, idx, value) -> Traced:
        """Add ``value`` to ``target[idx]`` atomically; returns the element's old value."""
        return self._atomic("add", target, idx, value)

    def atomic_max(self, target, idx, value) -> Traced:
        """``target[idx] = max(target[idx], value)`` atomically (IEEE maximum for floats); returns the old value."""
        return self._atomic("max", target, idx, value)

    def atomic_min(self, target, idx, value) -> Traced:
        """``target[idx] = min(target[idx], value)`` atomically; returns the old value."""
        return self._atomic("min", target, idx, value)

    def atomic_exchange(self, target, idx, value) -> Traced:
        """Store ``value`` at ``target[idx]`` atomically; returns the old value."""
        return self._atomic("exchange", target, idx, value)

    def atomic_cas(self, target, idx, compare, value) -> Traced:
        """Where ``target[idx]`` equals ``compare`` (bit for bit), store ``value``; atomically.
        Returns the old value (equal to ``compare`` when the store happened)."""
        return self._atomic("cas", target, idx, compare, value)

    # -- warps -----------------------------------------------------------------------
    def _linear_thread(self, info: _LaunchInfo) -> Traced:
        linear, stride = None, 1
        for value, extent in zip(info.thread_values, info.thread_extents):
            term = Traced(value) if stride == 1 else self.mul(Traced(value), stride)
            linear = term if linear is None else self.add(linear, term)
            stride *= extent
        return linear

    def _warps(self, what: str) -> _LaunchInfo:
        info = self._block_launch(what)
        if info.threads % WARP:
            raise _error(f"{what}: warp operations need blocks of a multiple of {WARP} threads (a block's threads "
                         f"linearised x fastest form its warps); this block has {info.threads}")
        return info

    @property
    def lane(self) -> Traced:
        """This thread's lane in its warp of 32 (threads linearised x fastest), an index."""
        info = self._block_launch("lane")
        return self.mod(self._linear_thread(info), WARP)

    @property
    def warp(self) -> Traced:
        """The number of this thread's warp within its block, an index."""
        info = self._block_launch("warp")
        return self.floor_div(self._linear_thread(info), WARP)

    def _shuffle(self, mode: str, value, lane) -> Traced:
        what = {"idx": "shuffle", "xor": "shuffle_xor", "down": "shuffle_down", "up": "shuffle_up"}[mode]
        info = self._warps(what)
        self._check_uniform(what, info)
        value = self._lift(value, None, what)
        return self._traced(self._record("shuffle", (value, self._lift(lane, index, what)), ShuffleAttrs(mode=mode)))

    def shuffle(self, value, src_lane) -> Traced:
        """``value`` as lane ``src_lane`` (taken modulo 32) of this warp holds it."""
        return self._shuffle("idx", value, src_lane)

    def shuffle_xor(self, value, mask) -> Traced:
        """``value`` from lane ``lane ^ mask``; a lane past the warp gives this thread's own value."""
        return self._shuffle("xor", value, mask)

    def shuffle_down(self, value, delta) -> Traced:
        """``value`` from lane ``lane + delta``; past the last lane, this thread's own value."""
        return self._shuffle("down", value, delta)

    def shuffle_up(self, value, delta) -> Traced:
        """``value`` from lane ``lane - delta``; before lane 0, this thread's own value."""
        return self._shuffle("up", value, delta)

    def _combine(self, what: str, op: str) -> str:
        """The builder method a reduction named ``op`` combines with."""
        if op not in ("sum", "max", "min"):
            raise _error(f"{what}: op must be 'sum', 'max' or 'min', got {op!r}")
        return OPS[REDUCTIONS[op]].methods[0]

    def warp_reduce(self, value, op: str = "sum") -> Traced:
        """``op`` ("sum", "max" or "min") over the 32 lanes of the warp; every lane gets the result
        (a butterfly of shuffles, so every backend combines in the same order)."""
        combine = getattr(self, self._combine("warp_reduce", op))
        value = Traced(self._lift(value, None, "warp_reduce"))
        for offset in (16, 8, 4, 2, 1):
            value = combine(value, self.shuffle_xor(value, offset))
        return value

    def block_reduce(self, value, op: str = "sum") -> Traced:
        """``op`` ("sum", "max" or "min") over every thread of the block; every thread gets the
        result.  Each warp reduces with shuffles, then every thread combines the warps' results
        in order from a shared array (with barriers around it)."""
        info = self._warps("block_reduce")
        combine = self._combine("block_reduce", op)
        partial = self.warp_reduce(value, op)
        warps = info.threads // WARP
        if warps == 1:
            return partial
        scratch = info.body._declare_shared(info, partial.type, warps, None, first=True, stem="reduce")
        warp = self.warp
        self.if_(self.eq(self.lane, 0), lambda inner: inner.store(scratch, partial, warp))
        self.barrier()
        total = self.fold_range(1, warps, 1, scratch[0],
                                lambda inner, w, acc: getattr(inner, combine)(acc, scratch[w]))
        self.barrier()  # every thread has read the partials before any reuses the scratch
        return total

    # -- warp votes ------------------------------------------------------------------
    def _ballot_bits(self, what: str, cond) -> Traced:
        """The warp's ballot in every lane: an or-butterfly of shuffles of each lane's bit, so
        every backend computes it from ops it already has (with the shuffles' rules)."""
        info = self._warps(what)
        self._check_uniform(what, info)
        cond = self._lift(cond, boolean, what)
        if not cond.type.is_bool:
            raise _error(f"{what}: the condition is {cond.type}; it must be a bool (use a comparison)")
        bit = self.shl(self.constant(1, u32), self.cast(self.lane, u32))
        bits = self.select(Traced(cond), bit, self.constant(0, u32))
        for offset in (16, 8, 4, 2, 1):
            bits = self.bitwise_or(bits, self.shuffle_xor(bits, offset))
        return bits

    def ballot(self, cond) -> Traced:
        """A u32 with bit ``lane`` set for each lane of this warp where ``cond`` holds; every lane
        gets it.  As shuffles: whole warps, reached by the whole block."""
        return self._ballot_bits("ballot", cond)

    def vote_any(self, cond) -> Traced:
        """True in every lane when ``cond`` holds in any lane of this warp."""
        return self.ne(self._ballot_bits("vote_any", cond), self.constant(0, u32))

    def vote_all(self, cond) -> Traced:
        """True in every lane when ``cond`` holds in every lane of this warp."""
        return self.eq(self._ballot_bits("vote_all", cond), self.constant(0xFFFFFFFF, u32))

    # -- block scans and arg-reductions ------------------------------------------------
    def _block_number(self, what: str, value) -> tuple[_LaunchInfo, Traced]:
        info = self._block_launch(what)
        self._check_uniform(what, info)
        value = self._lift(value, None, what)
        if value.type.is_bool:
            raise _error(f"{what}: the value is bool; it takes a number type (select(cond, 1, 0) counts)")
        return info, Traced(value)

    def _group_scan(self, lanes: "_Neighbours", values: tuple, combine) -> tuple:
        """The inclusive scan of ``values`` within each group of 32 consecutive threads
        (a warp): Hillis-Steele steps 1, 2, 4, 8, 16, each thread at ``lane >= d`` taking
        ``combine(values of the thread d before, its own)``."""
        d = 1
        while d < min(WARP, lanes.info.threads):
            before = lanes.earlier(values, d)
            step = combine(self, before, values)
            far = self.ge(lanes.lane, d)
            values = tuple(self.select(far, s, v) for s, v in zip(step, values))
            d *= 2
        return values

    def _group_totals(self, lanes: "_Neighbours", values: tuple, stem: str) -> list:
        """Shared arrays holding, at ``g``, ``values`` of the last thread of group ``g``."""
        info = lanes.info
        groups = -(-info.threads // WARP)
        totals = [info.body._declare_shared(info, v.type, groups, None, first=True, stem=stem) for v in values]
        last = self.logical_or(self.eq(lanes.lane, WARP - 1), self.eq(lanes.linear, info.threads - 1))
        group = self.floor_div(lanes.linear, WARP)

        def write(inner):
            for array, v in zip(totals, values):
                inner.store(array, v, group)

        self.if_(last, write)
        self.barrier()
        return totals

    def block_scan(self, value, op: str = "sum", inclusive: bool = True) -> Traced:
        """The scan of ``value`` over the block's threads in linear order (x fastest): thread
        ``t`` gets ``op`` ("sum", "max" or "min") over threads ``0..t`` (``inclusive=True``) or
        ``0..t-1`` (else; thread 0 gets the op's identity: 0, or the type's lowest or highest
        value, -inf or +inf for floats).

        Floats combine in one order on every backend (so results agree bit for bit): within
        each group of 32 threads, Hillis-Steele steps of 1, 2, 4, 8 and 16 (a thread at lane
        ``>= d`` combines the partial of the thread ``d`` before it with its own, earlier
        operand first); then a thread of group ``g`` combines the groups' totals in order,
        ``((T0 + T1) + ...) + T(g-1)``, and that with its group's partial.  An exclusive scan
        is the inclusive scan of the thread before (the same bits).  Blocks of any size; whole
        warps exchange with shuffles, other blocks through shared memory."""
        info, value = self._block_number("block_scan", value)
        method = self._combine("block_scan", op)
        if not isinstance(inclusive, (bool, np.bool_)):
            raise _error(f"block_scan: inclusive must be True or False, got {inclusive!r}")

        def combine(b, earlier, later):
            return (getattr(b, method)(earlier[0], later[0]),)

        lanes = _Neighbours(self, info, "scan")
        (local,) = self._group_scan(lanes, (value,), combine)
        shifted = None
        if not inclusive:  # each thread's local scan moves one thread on (thread 0's is replaced below)
            shifted = local if info.threads == 1 else lanes.earlier((local,), 1)[0]
        if info.threads <= WARP:
            result = local if inclusive else shifted
            prefix = None
        else:
            (totals,) = self._group_totals(lanes, (local,), "scan")
            group = self.floor_div(lanes.linear, WARP)
            prefix = self.fold_range(1, group, 1, totals[0],
                                     lambda inner, w, acc: getattr(inner, method)(acc, totals[w]))
            later = self.gt(group, 0)
            result = self.select(later, getattr(self, method)(prefix, local if inclusive else shifted),
                                 local if inclusive else shifted)
        if not inclusive:
            first = self._identity(op, value.type)
            at_lane0 = first if prefix is None else self.select(self.gt(self.floor_div(lanes.linear, WARP), 0),
                                                                prefix, first)
            result = self.select(self.eq(lanes.lane, 0), at_lane0, result)
        if lanes.used_shared or prefix is not None:
            self.barrier()  # every thread has read the scratch before any reuses it (in a loop)
        return result

    def _identity(self, op: str, dtype: DType) -> Traced:
        """What ``op`` leaves a value as: 0, or the lowest (highest) value of ``dtype``;
        -inf (+inf) for a float type that has infinities."""
        if op == "sum":
            return self.constant(0, dtype)
        low = op == "max"
        if dtype.is_float:
            with np.errstate(all="ignore"):
                inf = float(np.asarray(-math.inf if low else math.inf).astype(dtype.numpy))
            return self.constant(inf if math.isinf(inf) else (dtype.min if low else dtype.max), dtype)
        return self.constant(dtype.min if low else dtype.max, dtype)

    def block_argmax(self, value) -> tuple[Traced, Traced]:
        """``(value, thread)``: the block's largest ``value`` and the linear index (x fastest,
        an index) of the first thread holding it, as NumPy's argmax: ties go to the lowest
        index, and a NaN counts as largest (the first NaN wins)."""
        return self._block_arg("block_argmax", value, largest=True)

    def block_argmin(self, value) -> tuple[Traced, Traced]:
        """``(value, thread)``: the block's smallest ``value`` and the lowest linear index holding
        it, as NumPy's argmin (ties to the lowest index; the first NaN wins)."""
        return self._block_arg("block_argmin", value, largest=False)

    def _block_arg(self, what: str, value, largest: bool) -> tuple[Traced, Traced]:
        info, value = self._block_number(what, value)
        floats = value.type.is_float

        def combine(b, p, q):  # symmetric: the better pair, of equals the lower index
            (pv, pi), (qv, qi) = p, q
            better = b.gt(qv, pv) if largest else b.lt(qv, pv)
            tie = b.eq(qv, pv)
            if floats:  # NaN beats numbers; two NaNs tie
                pn, qn = b.isnan(pv), b.isnan(qv)
                better = b.logical_or(better, b.logical_and(qn, b.logical_not(pn)))
                tie = b.logical_or(tie, b.logical_and(pn, qn))
            take = b.logical_or(better, b.logical_and(tie, b.lt(qi, pi)))
            return b.select(take, qv, pv), b.select(take, qi, pi)

        lanes = _Neighbours(self, info, "arg")
        pair = (value, lanes.linear)
        if lanes.shuffles:  # every lane gets its warp's pair from a butterfly
            for offset in (16, 8, 4, 2, 1):
                pair = combine(self, pair, tuple(self.shuffle_xor(v, offset) for v in pair))
            if info.threads == WARP:
                return pair
        else:
            pair = self._group_scan(lanes, pair, combine)
        totals = self._group_totals(lanes, pair, "arg")
        groups = -(-info.threads // WARP)
        first = tuple(array[0] for array in totals)
        pair = self.fold_range(1, groups, 1, first,
                               lambda inner, w, acc: combine(inner, acc, tuple(array[w] for array in totals)))
        self.barrier()  # every thread has read the totals before any reuses them (in a loop)
        return tuple(pair)


    # the seed's camelCase spellings, so seed kernels port line by line
    constantIndex = constant_index
    constantFloat = constant_float
    forEach1D = for_each_1d
    forEach2D = for_each_2d
    forEach3D = for_each_3d


class _Neighbours:
    """What a thread reads of the thread ``d`` before it in its group of 32 (a warp): a
    ``shuffle_up`` where the block is whole warps, else a round through shared memory.  The
    rounds alternate between two sets of arrays, so one barrier a round orders each round's
    writes after the reads of the round before it."""

    def __init__(self, builder: Builder, info: _LaunchInfo, stem: str):
        self.builder, self.info, self.stem = builder, info, stem
        self.linear = builder._linear_thread(info)
        self.lane = builder.mod(self.linear, WARP)
        self.shuffles = info.threads % WARP == 0
        self.sets: list[list[SharedArray]] = []
        self.rounds = 0

    @property
    def used_shared(self) -> bool:
        return bool(self.sets)

    def earlier(self, values: tuple, d: int) -> tuple:
        """``values`` as the thread ``d`` before holds them, where ``lane >= d`` (elsewhere the
        thread's own)."""
        b = self.builder
        if self.shuffles:
            return tuple(b.shuffle_up(v, d) for v in values)
        if not self.sets:
            info = self.info
            self.sets = [[info.body._declare_shared(info, v.type, info.threads, None, first=True, stem=self.stem)
                          for v in values] for _ in range(2)]
        arrays = self.sets[self.rounds % 2]
        self.rounds += 1
        for array, v in zip(arrays, values):
            b.store(array, v, self.linear)
        b.barrier()
        source = b.select(b.ge(self.lane, d), b.sub(self.linear, d), self.linear)
        return tuple(b.load(array, source) for array in arrays)


def _pointwise_method(opcode: str, method: str, arity: int):
    def call(self, *xs):
        if len(xs) != arity:
            raise _error(f"{method} takes {arity} operand{'s' if arity != 1 else ''}, got {len(xs)}")
        return self._op(opcode, *xs)

    call.__name__ = method
    call.__doc__ = OPS[opcode].doc or f"Record ``{opcode}``."
    return call


_METHOD_NAMES: dict[str, str] = {}  # method name -> op name, for every generated method
for _opdef in OPS.values():
    for _method in _opdef.methods:
        _METHOD_NAMES[_method] = _opdef.name
        if _opdef.pointwise and _method not in Builder.__dict__:
            setattr(Builder, _method, _pointwise_method(_opdef.name, _method, _opdef.arity))


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


WARP = 32


def _axis_tuple(role: str, axes) -> list:
    axes = list(axes) if isinstance(axes, (tuple, list)) and not (
        len(axes) == 2 and isinstance(axes[0], str)) else [axes]
    if not 1 <= len(axes) <= 3:
        raise _error(f"for_each_block: {role} takes 1 to 3 axes, got {len(axes)}")
    return [_as_axis(a) for a in axes]


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
