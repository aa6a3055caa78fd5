"""Traced values: thin handles on IR values whose operators and methods record into the
active builder, with the launch indices, axes and buffer handles a kernel body holds."""

from __future__ import annotations

import difflib
import math
import numbers
from typing import Sequence

import attrs
import numpy as np

from ..errors import TraceError, UnknownOpError
from . import context
from .combines import COMBINES
from .analysis import uniformity
from .ir import Axis, Param, Value
from .ops import OPS
from .types import INDEX_MAX, DType, TileType
from ..targets import WARP_SIZE


_NO_CTX = object()
_METHOD_NAMES: dict[str, str] = {}  # method name -> op name, for every generated method (the builder fills it)


def _describe(x) -> str:
    if isinstance(x, Traced):
        return str(x.type)
    return f"Python {type(x).__name__}"


def _error(message: str) -> TraceError:
    return TraceError(message, context.user_location())


# ----------------------------------------------------------------------------- traced values


def _in_tile_program() -> bool:
    """Is a tile program's builder recording now (it has the tile accesses)?"""
    builders = context.stack()
    return bool(builders) and hasattr(builders[-1], "load_at")


class BuilderBase:
    """What traced values record into: :class:`accy.dsl.builder.Builder`, named here so that a
    value can tell a builder argument (the seed's ``value.op(builder, other)``) without importing it."""


class Traced:
    """A value of the kernel being traced.

    Arithmetic, comparisons, ``abs``, ``round``, ``math.floor``, ``x ** y`` and
    NumPy ufuncs on it record ops into the active builder; ``x.log()`` and the
    seed's ``x.mul(inner, y)`` do too.  Its value exists only when the kernel
    runs, so Python control flow on it (``if x:``, ``int(x)``) is an error.
    """

    __slots__ = ("value",)
    __array_ufunc__ = None  # replaced below: NumPy ufuncs and scalars defer to accy ops

    def __new__(cls, value: Value):
        # a tile-typed value is a Tile wherever accy wraps one (loop accumulators, branch results)
        if cls is Traced and isinstance(getattr(value, "type", None), TileType):
            cls = Tile
        return object.__new__(cls)

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
        # a tile program chooses element by element (its if_ branches the whole program on one scalar)
        choice = "t.where(cond, a, b) (mask=cond on a load or store)" if _in_tile_program() else \
            "select(cond, a, b) or if_(cond, then, otherwise)"
        raise _error(
            f"a traced {self.type} value cannot be used as a Python {what}: its value is only "
            f"known when the kernel runs. Use {choice} for a choice and fold_range(...) for a loop{hint}"
        )

    def __bool__(self):
        maximum = "t.maximum(a, b)" if _in_tile_program() else "inner.max(a, b)"
        self._no_python_value("bool (if/while/and/or/not, a chained comparison like 0 < i < n)",
                              "; combine conditions with (a) & (b), (a) | (b) and ~a, in parentheses, and split "
                              f"chained comparisons; Python's max()/min() compare with if: use {maximum}")

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

    to = cast  # Triton's x.to(dtype) and x.to(dtype, bitcast=True)


class Tile(Traced):
    """A tile of a ``for_each_tile`` program: a static ``shape`` of ``dtype`` elements.

    Operators, math methods and NumPy ufuncs work elementwise with NumPy's broadcasting
    (a scalar broadcasts to every element); ``x[:, None]`` and ``x[None, :]`` add an axis,
    ``x.T`` transposes, ``a @ b`` is ``t.dot(a, b)``, and ``x.sum(axis)``, ``x.max(axis)``,
    ``x.argmax(axis)`` and ``x.cumsum(axis)`` reduce and scan as the builder's methods do (every name the
    combine table spells, :data:`accy.dsl.combines.COMBINES`).
    """

    __slots__ = ()

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def ndim(self) -> int:
        return len(self.value.type.shape)

    @property
    def size(self) -> int:
        return self.value.type.size

    def __repr__(self) -> str:
        return f"<traced {self.type}>"

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        raise _error(f"iterating over a {self.type} is not possible while tracing; tiles are whole values "
                     "(reduce them with t.sum(x, axis), or index memory with tiles of indices)")

    def __getitem__(self, key):
        """``x[:, None]`` adds an axis, ``x[:, :32]`` and ``x[::-1]`` slice (static ranges, any step),
        ``x[3]`` picks a position: as NumPy's basic indexing (see :meth:`accy.dsl.shapes.ShapeOps.index_tile`)."""
        return context.current().index_tile(self, key)

    @property
    def T(self) -> "Tile":
        return context.current().trans(self)

    def reshape(self, *shape) -> "Tile":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return context.current().reshape(self, shape)

    def __matmul__(self, other):
        return context.current().dot(self, other)

    def reduce(self, axis, combine, keepdims: bool = False):
        """``t.reduce(x, axis, combine)`` on this tile."""
        return context.current().reduce(self, axis, combine, keepdims)

    def associative_scan(self, axis, combine, reverse: bool = False):
        """``t.associative_scan(x, axis, combine, reverse)`` on this tile."""
        return context.current().associative_scan(self, axis, combine, reverse)

    def permute(self, *dims) -> "Tile":
        return context.current().permute(self, *dims)

    def ravel(self) -> "Tile":
        return context.current().ravel(self)

    def broadcast_to(self, *shape) -> "Tile":
        return context.current().broadcast_to(self, shape[0] if len(shape) == 1 else shape)

    def split(self):
        return context.current().split(self)

    def __rmatmul__(self, other):
        return context.current().dot(other, self)



def _reduction(name: str):
    def call(self, *args, axis=None, keepdims: bool = False, keep_dims: bool | None = None, **options):
        builder, args = _builder_and_args(args)
        keepdims = keepdims if keep_dims is None else keep_dims  # Triton's spelling
        if name in ("max", "min") and args and not isinstance(args[0], (int, type(None))):
            return getattr(builder, name)(self, *args)  # x.max(y): elementwise, as on scalars
        if args:
            (axis,) = args
        # options: sum's dtype=, max's and min's return_indices=
        return getattr(builder, name)(self, axis=axis, keepdims=keepdims, **options)

    call.__name__ = name
    call.__doc__ = f"``t.{name}(x, axis, keepdims)`` on this tile."
    return call


def _scan(name: str):
    def call(self, axis=None, reverse: bool = False) -> "Tile":
        return getattr(context.current(), name)(self, axis, reverse=reverse)

    call.__name__ = name
    call.__doc__ = f"``t.{name}(x, axis)`` on this tile."
    return call


# a tile's reductions and scans, as the combine table spells them (x.sum(axis), x.cumsum(axis))
for _rule in COMBINES.values():
    for _name in (_rule.reduction, _rule.arg_reduction):
        if _name:
            setattr(Tile, _name, _reduction(_name))
    if _rule.scan:
        setattr(Tile, _rule.scan, _scan(_rule.scan))
del _rule, _name


def _key_text(k) -> str:
    if isinstance(k, slice):  # spelled out: == would compare a traced bound
        parts = ["" if v is None else "n" if isinstance(v, Traced) else str(v) for v in (k.start, k.stop, k.step)]
        return ":".join(parts[:2] if k.step is None else parts)
    return "None" if k is None else "..." if k is Ellipsis else repr(k)


def _builder_and_args(args):
    """``value.op(builder, other)`` (the seed) or ``value.op(other)`` (the active builder)."""
    if args and isinstance(args[0], BuilderBase):
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
    "absolute": "abs", "fabs": "abs", "sqrt": "sqrt",
    "floor": "floor", "ceil": "ceil", "rint": "round", "trunc": "trunc", "isnan": "isnan", "isinf": "isinf",
    "maximum": "max", "minimum": "min", "copysign": "copysign", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge", "equal": "eq", "not_equal": "ne", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "logical_not": "logical_not",
    "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "invert": "bitwise_not", "left_shift": "shl", "right_shift": "shr",
    **{opdef.numpy: name for name, opdef in OPS.items() if opdef.numpy},  # the math functions
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


# Triton's names with no op of that name here, and what says it in accy
TRITON_SPELLINGS = {
    "program_id": "a program's index is pid[\"name\"], the second argument of the for_each_tile body",
    "num_programs": "the grid is the kernel's own: keep its extents in a variable where the grid is made",
    "make_block_ptr": "a tensor parameter's boxes are p.x.load_tile(origin, shape) and p.x.store_tile",
    "advance": "a tensor parameter's boxes are p.x.load_tile(origin, shape) at a new origin",
    "static_range": "a Python range() unrolls while tracing; t.fold_range(start, stop, step, init, body) is a loop",
    "device_print": "print from a program is not there yet; run it on backend='numpy' with debug_thread",
}


def _unknown(name: str, where: str) -> UnknownOpError:
    builders = {n for cls in BuilderBase.__subclasses__() for n in dir(cls)}
    names = sorted(set(_METHOD_NAMES) | builders | set(Traced.__dict__))
    names = [n for n in names if not n.startswith("_")]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; {TRITON_SPELLINGS[name]}" if name in TRITON_SPELLINGS else \
        f"; did you mean '{close[0]}'?" if close else "; see docs/ir.md for every op"
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
    body: "BuilderBase | None" = None  # the builder of the launch region
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

    def load(self, builder: "BuilderBase", idx) -> Traced:
        return builder.load(self, idx)

    def store(self, builder: "BuilderBase", value, idx) -> None:
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


class TileAccess:
    """Loads and stores by index tuples with masks, and whole tiles, on a kernel parameter:
    ``p.x.load(idx, mask=None, other=None)``, ``p.x.store(idx, value, mask=None)``,
    ``p.x.load_tile(origin, shape, other=None)``, ``p.x.store_tile(origin, value)``,
    ``p.x.atomic_add(idx, value, mask=None)`` (``atomic_max``, ``atomic_min``).  In a tile
    program the indices may be tiles; in a SIMT kernel they are scalars and there is no mask.
    ``other`` (what a masked-off element reads) defaults to a zero of the parameter's dtype.
    The seed's ``x.load(builder, idx)`` and ``x.store(builder, value, idx)`` still work."""

    __slots__ = ()

    def _tile_builder(self, what: str, mask=None):
        builder = context.current()
        if not hasattr(builder, "load_at"):
            if mask is not None or what in ("load_tile", "store_tile"):
                raise _error(f"{self.name}.{what}{' with a mask' if mask is not None else ''} is a tile-level access "
                             "(inside k.for_each_tile); in a SIMT kernel guard the access with if_")
            return None, builder
        return builder, builder

    def load(self, *args, mask=None, other=None) -> Traced:
        if args and isinstance(args[0], BuilderBase):  # the seed's x.load(builder, idx)
            return args[0].load(self, *args[1:])
        (idx,) = args
        tiles, builder = self._tile_builder("load", mask)
        return tiles.load_at(self, idx, mask, other) if tiles is not None else builder.load(self, idx)

    def store(self, *args, mask=None) -> None:
        if args and isinstance(args[0], BuilderBase):  # the seed's x.store(builder, value, idx)
            return args[0].store(self, *args[1:])
        idx, value = args
        tiles, builder = self._tile_builder("store", mask)
        if tiles is not None:
            tiles.store_at(self, idx, value, mask)
        else:
            builder.store(self, value, idx)

    def load_tile(self, origin, shape, other=None, steps=None):
        return self._tile_builder("load_tile")[0].load_tile(self, origin, shape, other, steps)

    def store_tile(self, origin, value, steps=None) -> None:
        self._tile_builder("store_tile")[0].store_tile(self, origin, value, steps)

    def _atomic(kind: str):
        def call(self, *args, mask=None):
            if args and isinstance(args[0], BuilderBase):
                return getattr(args[0], f"atomic_{kind}")(self, *args[1:])
            idx, value = args
            tiles, builder = self._tile_builder(f"atomic_{kind}", mask)
            if tiles is not None:
                return tiles._tile_atomic(kind, self, idx, value, mask)
            return getattr(builder, f"atomic_{kind}")(self, idx, value)

        call.__name__ = f"atomic_{kind}"
        return call

    atomic_add = _atomic("add")
    atomic_max = _atomic("max")
    atomic_min = _atomic("min")
    del _atomic


class BufferHandle(TileAccess, MemoryHandle):
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

    # as a contiguous 1-D tensor's (accy.dsl.tensors.TensorHandle), so code can treat both alike
    ndim = 1
    strides = (1,)

    @property
    def shape(self) -> tuple[Traced]:
        return (self.size,)

    def __len__(self):
        raise _error(f"len({self.name}): Python's len() must return an int, but a buffer's length is only "
                     f"known when the kernel runs; use {self.name}.size (an index value)")


# ----------------------------------------------------------------------------- the builder


