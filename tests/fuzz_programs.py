"""Random well-typed accy programs for differential fuzzing (see tests/test_fuzz.py).

A program is first drawn as a *description*: plain frozen attrs classes and tuples,
no accy objects.  :func:`build` then traces the description into an
:class:`accy.Program`.  Hypothesis draws and shrinks the description, so a failing
example shrinks to a small program, and the description's ``repr`` together with
the program's text form shows what went wrong.

What is drawn: every dtype (f16 bf16 f32 f64 f8e4m3 f8e4m3fnuz f8e5m2, i8..i64, u8..u64, bool, index) as
input and output buffer element, scalar parameter and intermediate value; casts
between any two; every pointwise op of ``accy.dsl.ops.OPS`` where its type rule
allows it, spelled as a builder method, a Python operator or a NumPy ufunc, with
Python literals lifted into constants; ``fold_range`` loops (several accumulators
of any type, divergent trip counts, stores and branches in the body); ``if_``
regions (with and without ``otherwise``, 0, 1 or several results, nested, in
loops and around them, stores inside, conditions uniform or per thread); scalar
parameters; launch extents that are constants, ``scalar(index)`` parameters,
``buffer.size`` or top-level expressions of them.  A description may hold two
*worlds*: two sets of scalar values and input sizes, so the same compiled program
runs at two launch sizes.

Every description is valid by construction:

* loads of input buffers use an index reduced into range, with ``min/max``
  (``clamp``), with a floor-mod built from ``//`` (``mod``: ``e - (e // n) * n``) or
  with the ``mod`` op (``rem``), against the buffer's size as a constant (the
  smaller of the worlds' sizes) or as ``buffer.size``;
* integer division and ``mod`` never divide by zero: the divisor is ``max(e, 1)``,
  ``select(e == 0, 1, e)``, ``e | 1`` or a non-zero constant (``-1`` and the most
  negative value included); for ``index`` also the span of the enclosing loop;
* every thread stores only to its own element (its linear thread number) of the
  one or two outputs, and loads an output only at its own element, so there are
  no races; every thread stores every output at the end, so nothing is unwritten;
* loop bounds are kept in known intervals and the step is chosen so that no loop
  runs more than a few dozen iterations;
* ``copysign`` takes its sign from ``select(isnan(b), 1, b)``: the sign of a NaN is
  not specified by IEEE 754 and differs between NumPy, LLVM's constant folder and
  the hardware.

Inexact math functions (exp exp2 expm1 log log2 log1p erf tanh sigmoid sin cos atan pow atan2)
are drawn in one of two modes:

* ``exact_math=True``: the test makes the interpreter compute them with the same
  routines the LLVM host inlines (accy.codegen.host.vecmath), so every result must agree
  bit for bit.  Where the argument might be a compile-time constant for LLVM, the
  generator still wraps it in :class:`Opaque` (``x + negz``, with the scalar parameter
  ``negz = -0.0`` that changes no value, NaN and signed zeros included), so that what
  runs is the routine, not a fold of it.  "Might be constant" is tracked conservatively
  (``static``): any integer or bool op counts as possibly constant (LLVM simplifies
  ``x - x``, ``x * 0``, shifts past the width, ...).
* ``exact_math=False`` (NumPy's own float64 functions, a few ulps away from
  vecmath's): a value that depends on one (``tainted``) may only flow into ops
  that keep its *relative* error bounded (``neg``, ``abs``, ``max``, ``min``,
  ``sqrt``, ``rsqrt``, widening float casts, ``select`` and ``if_`` branches, max/min
  accumulators) and into stores; outputs that receive a tainted store are compared
  with a tolerance, all others bit for bit.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st

from accy import Program, axis, dynamic_buffer, scalar, schedule
from accy.dsl.types import DTYPES, INDEX_MAX, INDEX_MIN

# -- types ------------------------------------------------------------------------------------------
# types are the dtype names: "f16" ... "index", "bool"

FLOATS = ("f32", "f64", "f16", "bf16", "f8e4m3", "f8e5m2", "f8e4m3fnuz")
SIGNED = ("i32", "i8", "i16", "i64")
UNSIGNED = ("u8", "u32", "u16", "u64")
INTS = ("index",) + SIGNED + UNSIGNED
TYPES = ("f32", "index", "bool", "i32", "f64", "f16", "bf16", "u8", "i8", "i64", "u32", "i16", "u16", "u64",
         "f8e4m3", "f8e5m2", "f8e4m3fnuz")
assert sorted(TYPES) == sorted(DTYPES)


def dt(t: str):
    return DTYPES[t]


def is_float(t): return t in FLOATS
def is_int(t): return t in INTS
def is_bool(t): return t == "bool"


def is_fp8(t):
    """fp8 values never depend on NumPy's inexact math (exact_math=False draws no math function
    of them): an f32 ulp between NumPy's result and vecmath's can round to a whole fp8 ulp
    (12-25%), past any tolerance worth having, so fp8 outputs are compared bit for bit."""
    return t in ("f8e4m3", "f8e5m2", "f8e4m3fnuz")


def float_bits(t):
    return {"f8e4m3": 8, "f8e5m2": 8, "f8e4m3fnuz": 8, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}[t]


def widens(src: str, dst: str) -> bool:
    """A float cast that is exact (keeps a relative error as it is)."""
    order = {"f8e4m3": 0, "f8e5m2": 0, "f8e4m3fnuz": 0, "f16": 1, "bf16": 1, "f32": 2, "f64": 3}  # fp8 to fp8 rounds
    return is_float(src) and is_float(dst) and (src == dst or order[dst] > order[src])


# -- the description ------------------------------------------------------------------------------


@attrs.frozen
class Const:
    """A constant; ``py=True``: spelled as a Python literal that the builder lifts (as an
    operand next to a traced value of the same type)."""

    type: str
    value: Any
    py: bool = False


@attrs.frozen
class Var:
    """The ``k``-th visible variable of ``type`` (scalar parameters, let-bound values,
    thread indices, loop variables, accumulators, in the order they became visible)."""

    type: str
    k: int


@attrs.frozen
class Op:
    """A pointwise op of the table (integer ``div``/``mod``: see :class:`IDiv`);
    ``spelling``: "method" (``inner.add``), "operator" (``a + b``) or "ufunc" (``np.add``)."""

    op: str
    args: tuple
    spelling: str = "method"


@attrs.frozen
class IDiv:
    """Integer ``div`` or ``mod`` with a divisor that is never zero (``guard``: "max1",
    ``max(b, 1)``; "select", ``select(b == 0, 1, b)``; "or1", ``b | 1``; "const", a
    non-zero Const; "none", as drawn: unchecked programs only)."""

    op: str
    a: Any
    b: Any
    guard: str
    spelling: str = "method"


@attrs.frozen
class SpanDiv:
    """``a // (stop - start)`` inside a fold over ``start..stop``: the divisor is non-zero
    whenever the body runs (and zero, were it ever hoisted, for an empty loop)."""

    a: Any
    start: Any  # Vars naming the enclosing fold's bounds
    stop: Any


@attrs.frozen
class Cast:
    to: str
    a: Any


def _swapped(e):
    """The binary op ``e`` with its operands swapped (inside the cast a narrow float's ``/`` or
    ``%`` takes back to its type)."""
    if isinstance(e, Cast):
        return attrs.evolve(e, a=_swapped(e.a))
    return attrs.evolve(e, args=e.args[::-1])


@attrs.frozen
class Opaque:
    """``e + negz`` (negz a scalar parameter, -0.0 at run time): the same value, which LLVM
    cannot evaluate at compile time (see the module docstring)."""

    e: Any


@attrs.frozen
class Size:
    """``buffer.size``: an index known at run time."""

    buffer: str


@attrs.frozen
class Load:
    """``buffer[reduce(idx)]`` for an input buffer: ``mode`` "clamp", "mod" (``e - (e // n) * n``)
    or "rem" (``e % n``); ``runtime``: n is ``buffer.size`` rather than a constant."""

    buffer: str
    idx: Any
    mode: str
    runtime: bool = False


@attrs.frozen
class LoadAffine:
    """``buffer[offset + sum(coef * var)]`` with no reduction: in bounds because the
    variables' ranges are known (thread coordinates, loop variables of small loops)."""

    buffer: str
    terms: tuple  # ((coef, Var), ...)
    offset: int


@attrs.frozen
class LoadRaw:
    """``buffer[idx]`` with no reduction (unchecked programs only: may be out of bounds)."""

    buffer: str
    idx: Any


@attrs.frozen
class LoadOwn:
    """An output buffer at this thread's own element (reads what this thread stored)."""

    buffer: str


@attrs.frozen
class BConst:
    value: int


@attrs.frozen
class BClamp:
    """``min(max(e, lo), hi)``."""

    e: Any
    lo: int
    hi: int


@attrs.frozen
class BEdge:
    """``INDEX_MAX - offset`` (side "max") or ``INDEX_MIN + offset`` (side "min"); with ``e``,
    the offset is ``min(max(e, 0), offset)``, different in each thread."""

    side: str
    offset: int
    e: Any = None


@attrs.frozen
class Fold:
    start: Any  # a bound
    stop: Any
    step: int
    inits: tuple  # expressions, one per accumulator
    updates: tuple  # expressions in the body's scope (after stmts), one per accumulator
    stmts: tuple = ()  # Let, Store and IfS statements at the start of the body
    spelling: str = "tuple"  # "tuple": init is a tuple; "single": one accumulator passed bare
    # In the body, Var(t, k) sees the enclosing variables, then the loop variable, the
    # accumulators (each appended to its type's list), then the start and stop bounds.


@attrs.frozen
class FoldE:
    """One result of a fold (``pick`` indexes the accumulators)."""

    fold: Fold
    pick: int


@attrs.frozen
class Branch:
    stmts: tuple  # Let, Store and IfS statements
    results: tuple  # expressions in the branch's scope, after stmts


@attrs.frozen
class If:
    """``if_(cond, then, otherwise)``; ``otherwise`` is None only without results.
    ``spelling``: "tuple" returns a tuple, "single" one bare value (one result),
    "none" both branches return None (no results, with otherwise)."""

    cond: Any
    then: Branch
    otherwise: Branch | None
    spelling: str = "tuple"


@attrs.frozen
class IfE:
    """One result of an if_ (``pick`` indexes its results)."""

    if_: If
    pick: int


@attrs.frozen
class Let:
    e: Any


@attrs.frozen
class Store:
    buffer: str
    e: Any


@attrs.frozen
class IfS:
    """An if_ as a statement (its results, if any, unused)."""

    if_: If


@attrs.frozen
class Input:
    """An input buffer of ``type``: ``values`` repeated (np.resize) to ``sizes[w]``
    elements in world ``w``."""

    type: str
    values: tuple
    sizes: tuple

    @property
    def size(self) -> int:
        """The size every world has at least (what constant clamps use)."""
        return min(self.sizes)


@attrs.frozen
class ScalarParam:
    """A scalar parameter of ``type``, ``values[w]`` in world ``w``."""

    type: str
    values: tuple


# launch extents: computed at the kernel's top level from constants, scalars and sizes


@attrs.frozen
class XConst:
    value: int


@attrs.frozen
class XScalar:
    """Scalar parameter ``j`` (an integer type), cast to index if it is not one."""

    j: int


@attrs.frozen
class XSize:
    buffer: str


@attrs.frozen
class XBin:
    op: str  # add sub mul div mod max min (div and mod by a positive value)
    a: Any
    b: Any


@attrs.frozen
class XVia:
    """``cast(cast(e, type), index)`` (values small enough to be exact in ``type``)."""

    type: str
    e: Any


@attrs.frozen
class ProgramDesc:
    extents: tuple  # x, y, z order: X* expressions
    block: tuple[int, ...] | None  # thread_blocks(x, y, z), or None for the default schedule
    inputs: tuple[Input, ...]  # buffers a0, a1, ...
    outputs: tuple[str, ...]  # dtypes of out0 and out1 (every thread stores each at the end)
    scalars: tuple[ScalarParam, ...]  # scalar parameters s0, s1, ...
    prelude: tuple  # Let statements at kernel scope, before the launch
    statements: tuple  # Let, Store and IfS statements inside the launch
    fill_seed: int  # initial contents of the outputs
    worlds: int = 1  # how many argument sets (sizes) the program runs with
    arch: str = "sm_80"  # the PTX target (sm_80, or sm_90)
    tainted: tuple = ()  # per output: receives a value that depends on NumPy's math (exact_math=False)

    def extent_values(self, world: int) -> tuple[int, ...]:
        return tuple(extent_value(e, self, world) for e in self.extents)

    def threads(self, world: int = 0) -> int:
        return math.prod(self.extent_values(world))


AXIS_NAMES = ("x", "y", "z")
NEGZ = "negz"  # the scalar parameter Opaque adds (f32, -0.0)


def input_name(j): return f"a{j}"
def output_name(j): return f"out{j}"
def scalar_name(j): return f"s{j}"


def extent_value(x, desc: ProgramDesc, world: int) -> int:
    """The value an extent expression has in ``world`` (plain Python, index arithmetic)."""
    match x:
        case XConst(v):
            return v
        case XScalar(j):
            return dt("index").wrap(int(desc.scalars[j].values[world]))  # cast to index: wraps
        case XSize(name):
            return desc.inputs[int(name[1:])].sizes[world]
        case XVia(_, e):
            return extent_value(e, desc, world)  # exact by construction
        case XBin(op, a, b):
            a, b = extent_value(a, desc, world), extent_value(b, desc, world)
            value = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a // b,
                     "mod": lambda: a % b, "max": lambda: max(a, b), "min": lambda: min(a, b)}[op]()
            return dt("index").wrap(value)
    raise TypeError(f"not an extent: {x!r}")


# -- building a Program ------------------------------------------------------------------------

_METHODS = {"and": ("logical_and", "bitwise_and"), "or": ("logical_or", "bitwise_or"),
            "xor": ("logical_xor", "bitwise_xor"), "not": ("logical_not", "bitwise_not")}
_OPERATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "mod": lambda a, b: a % b, "pow": lambda a, b: a ** b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "neg": lambda a: -a, "abs": lambda a: abs(a), "not": lambda a: ~a,
    "floor": lambda a: math.floor(a), "ceil": lambda a: math.ceil(a), "trunc": lambda a: math.trunc(a),
    "round": lambda a: round(a),
}
_UFUNCS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "mod": np.remainder,
    "pow": np.power, "neg": np.negative, "abs": np.absolute, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
    "log": np.log, "log2": np.log2, "log1p": np.log1p, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
    "cos": np.cos, "atan": np.arctan, "atan2": np.arctan2, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "trunc": np.trunc, "isnan": np.isnan,
    "isinf": np.isinf, "max": np.maximum, "min": np.minimum, "copysign": np.copysign, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "shl": np.left_shift, "shr": np.right_shift,
}
_BOOL_UFUNCS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor, "not": np.logical_not}
_INT_UFUNCS = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "not": np.invert}


def spellings(op: str, t: str) -> list[str]:
    """How ``op`` on operands of type ``t`` can be written."""
    out = ["method"]
    if op in _OPERATORS and not (op == "div" and not is_float(t)) and not (op in ("floor", "ceil", "trunc", "round")
                                                                          and not is_float(t)):
        out.append("operator")
    if op in _UFUNCS or op in _BOOL_UFUNCS:
        out.append("ufunc")
    return out


class _Scope:
    def __init__(self, builder, env, lin, desc, handles, negz):
        self.b = builder
        self.env = env  # type -> list of traced values
        self.lin = lin  # this thread's own element (None at kernel scope)
        self.desc = desc
        self.handles = handles
        self.negz = negz

    def child(self, builder, extra=()):
        env = {t: list(vs) for t, vs in self.env.items()}
        for t, v in extra:
            env[t].append(v)
        return _Scope(builder, env, self.lin, self.desc, self.handles, self.negz)

    def const(self, c: Const):
        return self.b.constant(c.value, dt(c.type))

    def operands(self, args):
        """Traced operands; Python literals (Const py=True) stay Python values where a traced
        operand of the same type is there for the builder to lift them against."""
        if not any(isinstance(a, Const) and a.py for a in args):
            return [self.expr(a) for a in args]
        traced = [not (isinstance(a, Const) and a.py) for a in args]
        if not any(traced):
            traced[0] = True
        return [self.expr(a) if keep else a.value for a, keep in zip(args, traced)]

    # -- expressions
    def expr(self, e):
        b = self.b
        match e:
            case Const():
                return self.const(e)
            case Var(t, k):
                return self.env[t][k]
            case Op(op, args, spelling):
                if op == "select":
                    c, x, y = args
                    xs = self.operands((x, y))
                    return b.select(self.expr(c), *xs) if spelling == "method" else b.where(self.expr(c), *xs)
                xs = self.operands(args)
                t = next(x.type for x in xs if not isinstance(x, (int, float, bool)))
                if spelling == "operator":
                    return _OPERATORS[op](*xs)
                if spelling == "ufunc":
                    table = _UFUNCS if op not in _INT_UFUNCS else _BOOL_UFUNCS if t.is_bool else _INT_UFUNCS
                    return table[op](*xs)
                if op in _METHODS:
                    return getattr(b, _METHODS[op][0 if t.is_bool else 1])(*xs)
                return getattr(b, op)(*xs)
            case IDiv(op, x, y, guard, spelling):
                num, den = self.expr(x), self.expr(y)
                t = den.type
                if guard == "max1":
                    den = b.max(den, b.constant(1, t))
                elif guard == "select":
                    den = b.select(b.eq(den, b.constant(0, t)), b.constant(1, t), den)
                elif guard == "or1":
                    den = b.bitwise_or(den, b.constant(1, t))
                if spelling == "operator":
                    return num // den if op == "div" else num % den
                if spelling == "ufunc":
                    return np.floor_divide(num, den) if op == "div" else np.remainder(num, den)
                return (b.floor_div(num, den) if op == "div" else b.mod(num, den)) if spelling == "named" \
                    else getattr(b, op)(num, den)
            case SpanDiv(x, start, stop):
                return b.div(self.expr(x), b.sub(self.expr(stop), self.expr(start)))
            case Cast(to, x):
                return b.cast(self.expr(x), dt(to))
            case Opaque(x):
                v = self.expr(x)
                z = self.negz if v.type == dt("f32") else b.cast(self.negz, v.type)
                return b.add(v, z)
            case Size(name):
                return self.handles[name].size
            case Load(name, idx, mode, runtime):
                i = self.expr(idx)
                j = int(name[1:])
                n = b.size(self.handles[name]) if runtime else b.constant_index(self.desc.inputs[j].size)
                if mode == "clamp":
                    i = b.min(b.max(i, b.constant_index(0)), b.sub(n, b.constant_index(1)))
                elif mode == "mod":
                    i = b.sub(i, b.mul(b.div(i, n), n))
                else:
                    i = b.mod(i, n)
                return b.load(self.handles[name], i)
            case LoadAffine(name, terms, offset):
                # spelled several ways: v * c, c * v, and i - v * |c| for a negative c
                i = None
                for coef, var in terms:
                    v = self.expr(var)
                    if i is not None and coef < 0:
                        i = b.sub(i, v if coef == -1 else b.mul(v, b.constant_index(-coef)))
                        continue
                    if coef != 1:
                        v = b.mul(v, b.constant_index(coef)) if coef > 0 else b.mul(b.constant_index(coef), v)
                    i = v if i is None else b.add(i, v)
                if offset or i is None:
                    i = b.constant_index(offset) if i is None else b.add(i, b.constant_index(offset))
                return b.load(self.handles[name], i)
            case LoadRaw(name, idx):
                return b.load(self.handles[name], self.expr(idx))
            case LoadOwn(name):
                return b.load(self.handles[name], self.lin)
            case FoldE(fold, pick):
                return self.fold(fold)[pick]
            case IfE(if_, pick):
                return self.if_(if_)[pick]
        raise TypeError(f"not an expression: {e!r}")

    def bound(self, bd):
        b = self.b
        match bd:
            case BConst(v):
                return b.constant_index(v)
            case BClamp(e, lo, hi):
                return b.min(b.max(self.expr(e), b.constant_index(lo)), b.constant_index(hi))
            case BEdge(side, off, None):
                return b.constant_index(INDEX_MAX - off if side == "max" else INDEX_MIN + off)
            case BEdge(side, off, e):
                off = b.min(b.max(self.expr(e), b.constant_index(0)), b.constant_index(off))
                return b.sub(b.constant_index(INDEX_MAX), off) if side == "max" else \
                    b.add(b.constant_index(INDEX_MIN), off)
        raise TypeError(f"not a bound: {bd!r}")

    def fold(self, f: Fold):
        start, stop = self.bound(f.start), self.bound(f.stop)
        # constant bounds go in as Python ints, and a Python literal init too (fold_range makes
        # index of an int, f32 of a float, bool of a bool); the body's scope sees traced values
        given = [bd.value if isinstance(bd, BConst) else v for bd, v in ((f.start, start), (f.stop, stop))]
        inits = [e.value if isinstance(e, Const) and e.py else self.expr(e) for e in f.inits]

        def body(inner, i, accs):
            accs = (accs,) if f.spelling == "single" else tuple(accs)
            # the loop variable, the accumulators, then the loop's start and stop (see Fold)
            scope = self.child(inner, [("index", i)] + [(a.type.name, a) for a in accs]
                               + [("index", start), ("index", stop)])
            for s in f.stmts:
                scope.statement(s)
            new = tuple(scope.expr(u) for u in f.updates)
            return new[0] if f.spelling == "single" else new

        init = inits[0] if f.spelling == "single" else tuple(inits)
        result = self.b.fold_range(*given, f.step, init, body)
        return (result,) if f.spelling == "single" else result

    def if_(self, node: If):
        cond = self.expr(node.cond)

        def branch(br: Branch):
            def run(inner):
                scope = self.child(inner)
                for s in br.stmts:
                    scope.statement(s)
                values = [scope.expr(r) for r in br.results]
                if node.spelling == "single":
                    return values[0]
                return tuple(values) if values or node.spelling == "tuple" else None
            return run

        if node.otherwise is None:
            def then(inner):
                branch(node.then)(inner)  # returns nothing
            self.b.if_(cond, then)
            return ()
        out = self.b.if_(cond, branch(node.then), branch(node.otherwise))
        if out is None:
            return ()
        return (out,) if node.spelling == "single" else tuple(out)

    def statement(self, s):
        match s:
            case Let(e):
                v = self.expr(e)
                self.env[v.type.name].append(v)
            case Store(name, e):
                self.b.store(self.handles[name], self.expr(e), self.lin)
            case IfS(node):
                self.if_(node)
            case _:
                raise TypeError(f"not a statement: {s!r}")


def _extent(b, x, handles, scalars):
    """The traced (or, for a constant, Python int) extent."""
    match x:
        case XConst(v):
            return v
        case XScalar(j):
            s = scalars[j]
            return s if s.type.is_index else b.cast(s, dt("index"))
        case XSize(name):
            return handles[name].size
        case XVia(t, e):
            return b.cast(b.cast(_traced_extent(b, e, handles, scalars), dt(t)), dt("index"))
        case XBin(op, l, r):
            l, r = (_traced_extent(b, v, handles, scalars) for v in (l, r))
            return {"add": b.add, "sub": b.sub, "mul": b.mul, "div": b.floor_div, "mod": b.mod,
                    "max": b.max, "min": b.min}[op](l, r)
    raise TypeError(f"not an extent: {x!r}")


def _traced_extent(b, x, handles, scalars):
    v = _extent(b, x, handles, scalars)
    return b.constant_index(v) if isinstance(v, int) else v


def parameters(desc: ProgramDesc) -> dict:
    params = {}
    for j, t in enumerate(desc.outputs):
        params[output_name(j)] = dynamic_buffer(dt(t))
    for j, inp in enumerate(desc.inputs):
        params[input_name(j)] = dynamic_buffer(dt(inp.type))
    for j, s in enumerate(desc.scalars):
        params[scalar_name(j)] = scalar(dt(s.type))
    params[NEGZ] = scalar(dt("f32"))
    return params


def build(desc: ProgramDesc) -> Program:
    params = parameters(desc)
    ndim = len(desc.extents)

    def kernel(k, args):
        handles = {name: args.param(name) for name in params if not name.startswith(("s", NEGZ))}
        scalars = [args.param(scalar_name(j)) for j in range(len(desc.scalars))]
        env = {t: [] for t in TYPES}
        for s in scalars:
            env[s.type.name].append(s)
        top = _Scope(k, env, None, desc, handles, args.param(NEGZ))
        for s in desc.prelude:
            top.statement(s)
        extents = [_extent(k, x, handles, scalars) for x in desc.extents]

        def each(inner, launch):
            coords = list(launch)
            lin = coords[0]
            stride = None
            for c, previous in zip(coords[1:], extents):
                previous = inner.constant_index(previous) if isinstance(previous, int) else previous
                stride = previous if stride is None else inner.mul(stride, previous)
                lin = inner.add(lin, inner.mul(c, stride))
            scope = top.child(inner, [("index", c) for c in coords] + [("index", lin)])
            scope.lin = lin
            for s in desc.statements:
                scope.statement(s)

        axes = [axis(n, e) for n, e in zip(AXIS_NAMES, extents)]
        if ndim == 1:
            k.for_each_1d(axes[0], each)
        elif ndim == 2:
            k.for_each_2d(x=axes[0], y=axes[1], body=each)
        else:
            k.for_each_3d(x=axes[0], y=axes[1], z=axes[2], body=each)

    program = Program("fuzz", params, kernel)
    if desc.block is not None:
        program = program.with_schedule(schedule.thread_blocks(*desc.block))
    return program


def _fill(rng, t: str, n: int) -> np.ndarray:
    d = dt(t)
    if is_bool(t):
        return rng.random(n) < 0.5
    if is_float(t):
        a = rng.standard_normal(n)
        a[rng.random(n) < 0.1] = np.nan
        return a.astype(d.numpy)
    return rng.integers(max(d.min, -50), min(d.max, 50), n, endpoint=True).astype(d.numpy)


def make_arguments(desc: ProgramDesc, world: int = 0) -> list:
    """Fresh arguments in parameter order (outputs first, pre-filled) for ``world``."""
    rng = np.random.default_rng(desc.fill_seed + world)
    threads = desc.threads(world)
    args = [_fill(rng, t, threads) for t in desc.outputs]
    args += [np.resize(np.array(b.values, dt(b.type).numpy), b.sizes[world]) for b in desc.inputs]
    args += [np.array(s.values[world], dt(s.type).numpy)[()] for s in desc.scalars]
    args.append(np.float32(-0.0))
    return args


# -- values -----------------------------------------------------------------------------------------

# strategies are built once and reused: building one per draw costs more than the draw
BOOLS = st.booleans()


@functools.lru_cache(maxsize=None)
def _ints(lo: int, hi: int):
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=None)
def _sampled_tuple(options: tuple):
    return st.sampled_from(options)


def _sampled(options):
    return _sampled_tuple(tuple(options))



def round_to(t: str, v: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.array(v, np.float64).astype(dt(t).numpy))


def _float_specials(t):
    import ml_dtypes

    info = ml_dtypes.finfo(dt(t).numpy)
    big = float(info.max)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, math.nan, math.inf, -math.inf, big, -big,
              float(info.tiny), -float(info.tiny), float(info.smallest_subnormal), 1e-3, 0.1, 100.5, -0.75,
              127.5, 128.0, -129.0, 255.5, 256.0, 32767.5, 65504.0, 65536.0, 2.0**31, -(2.0**31), 2.0**32,
              2.0**63, -(2.0**63), 2.0**64, 16777217.0, 1e30, -1e30, 88.0, -104.0, 710.0, 1e300]
    return sorted({round_to(t, v) for v in values if not math.isnan(v)}, key=lambda v: (abs(v), v)) + [math.nan]


def _float_ties(t):
    """Ties and near-ties of the narrower types, where rounding twice differs from rounding once
    (and the edges of f16's range), as far as ``t`` holds them."""
    values = [1 + 2**-8, 1 + 2**-8 + 2**-23, -(1 + 2**-8 + 2**-40), 3 * (1 + 2**-8 + 2**-35), 1 + 2**-11,
              1 + 2**-11 + 2**-23, -(1 + 2**-11 + 2**-40), 1 + 2**-24, 1 + 2**-24 + 2**-50, -(1 + 2**-24 + 2**-60),
              2**-25, 2**-25 + 2**-40, 1.5 * 2**-24, 2**-134 + 2**-150, 2**-150, 65520.0, 65519.99, -65520.0,
              2.0**128 * (1 - 2**-25), 2.0**24 + 1, 2.0**31 - 0.5, 2.0**32 - 0.5, -0.5, -1.5,
              1 + 2**-4, 1 + 2**-4 + 2**-30, -(1 + 2**-3), 1 + 2**-3 + 2**-20, 2**-10, 2**-10 + 2**-30, 2**-17,
              # fp8: ties, half the smallest subnormal, overflow edges
              464.0, 464.5, 61440.0, 61439.5, 248.0, 247.5, 2**-11, -(2**-11)]
    return sorted({round_to(t, v) for v in values}, key=lambda v: (abs(v), v))


def _int_specials(t):
    d = dt(t)
    values = [0, 1, -1, 2, 3, 7, -2, d.max, d.min, d.max - 1, d.min + 1, 100, -100, 127, 128, 255, 256,
              2**15, 2**16, 2**31, -(2**31), 2**32, 2**53 + 1, 2**62 + 2**38 + 1, 16777217, 2**63]
    return [v for v in dict.fromkeys(values) if d.min <= v <= d.max]


COMMON_FLOATS = [0.0, -0.0, 1.0, -1.0, 2.0]


def _float_value(t, small=False):
    width = {"f8e4m3": 16, "f8e5m2": 16, "f8e4m3fnuz": 16, "f16": 16, "bf16": 32, "f32": 32, "f64": 64}[t]
    if small:
        base = st.one_of(_sampled(COMMON_FLOATS), st.floats(-10, 10, width=width))
    else:
        base = st.one_of(_sampled(COMMON_FLOATS), _sampled(_float_specials(t)), _sampled(_float_ties(t)),
                         st.floats(-10, 10, width=width), st.floats(width=width))
    return base.map(lambda v: round_to(t, v))


@functools.lru_cache(maxsize=None)
def value_of(t: str, small: bool = False):
    """A strategy for Python values of type ``t`` (floats already rounded to it)."""
    if is_bool(t):
        return BOOLS
    if is_float(t):
        return _float_value(t, small)
    d = dt(t)
    near = _ints(max(d.min, -8), min(d.max, 24))
    if small:
        return near
    return st.one_of(near, _sampled(_int_specials(t)), _ints(d.min, d.max))


# -- strategies -----------------------------------------------------------------------------------

# the loop-step candidates, simplest first; huge steps keep loops between the index edges short
STEPS = [1, 2, -1, 3, -2, 4, -3, 7, -4, 2**62, -(2**62), INDEX_MAX, -INDEX_MAX, INDEX_MIN]

SMALL_LO, SMALL_HI = -8, 16  # the interval small clamps live in
EDGE_OFFSET = 16
MAX_TRIPS = (24, 8, 4)  # per nesting depth of the fold
MAX_IF_DEPTH = 3

INEXACT = ("exp", "exp2", "expm1", "log", "log2", "log1p", "erf", "tanh", "sigmoid", "sin", "cos", "atan")
INEXACT_BINARY = ("pow", "atan2")
ROUNDING = ("floor", "ceil", "round", "trunc", "flush_subnormal")  # exact, on exact operands
# ops that keep a relative error bounded (exact_math=False lets tainted values through them)
KEEPS_ERROR = ("neg", "abs", "max", "min", "sqrt", "rsqrt")


@attrs.define
class _Var:
    type: str
    tainted: bool = False  # depends on an inexact NumPy math function (exact_math=False)
    static: bool = True  # might be a compile-time constant for LLVM (exact_math=True)
    interval: tuple[int, int] | None = None  # for index variables whose range is known and small
    loop: bool = False  # a loop variable
    used: bool = False  # some expression reads it (leaves prefer unused variables: less dead code)


@attrs.frozen
class _E:
    """A drawn expression: its description and what the rules above need to know."""

    e: Any
    tainted: bool = False
    static: bool = True


def _is_nan_const(e) -> bool:
    return isinstance(e, Const) and isinstance(e.value, float) and math.isnan(e.value)


COVERAGE = None  # a collections.Counter while a test measures what the generator reaches


def _note(*key):
    if COVERAGE is not None:
        COVERAGE[key] += 1


class _Gen:
    """Draws expressions and statements, with the scope's visible variables and budgets."""

    def __init__(self, draw, parts, exact_math: bool, checked: bool = True, favoured=TYPES):
        self.draw = draw
        self.favoured = list(favoured)  # the program's favourite types: values of one type meet more often
        self.parts = parts  # inputs, outputs, extents
        self.exact_math = exact_math
        self.checked = checked  # False: loads and divisions may fail at run time
        self.tainted_outputs = set()

    # -- helpers
    def pick(self, options):
        return self.draw(_sampled(list(options)))

    def type(self) -> str:
        """A type for a new value: one of the program's favourites three times in four."""
        return self.pick(self.favoured) if not self.chance(4) else self.pick(TYPES)

    def chance(self, n: int) -> bool:
        """True with probability 1/n."""
        return self.draw(_ints(0, n - 1)) == 0

    def inputs_of(self, t):
        return [j for j, b in enumerate(self.parts["inputs"]) if b.type == t]

    def const(self, t, py_ok=False) -> _E:
        v = self.draw(value_of(t))
        py = py_ok and self.chance(4) and not (is_int(t) and isinstance(v, bool))
        return _E(Const(t, v, py), False, True)

    def var(self, env, t, allow_taint):
        choices = [k for k, v in enumerate(env[t]) if allow_taint or not v.tainted]
        if not choices:
            return None
        unused = [k for k in choices if not env[t][k].used]
        k = self.pick(unused if unused and not self.chance(4) else choices)
        v = env[t][k]
        v.used = True
        return _E(Var(t, k), v.tainted, v.static)

    # -- leaves
    def leaf(self, env, t, allow_taint, allow_load=True, py_ok=False) -> _E:
        kinds = ["var", "var", "const"] if env[t] else ["const"]
        if any(not v.used for v in env[t]):
            kinds += ["var", "var"]
        if allow_load and self.inputs_of(t):
            kinds.append("load")
        if env["own"] and t in self.parts["outputs"]:
            kinds.append("own")
        if t == "index":
            kinds.append("size")
        if allow_load and any(env[s] for s in TYPES if s != t):
            kinds.append("cast")  # a variable of another type, converted: a leaf that is not constant
        kind = self.pick(kinds)
        if kind == "var":
            got = self.var(env, t, allow_taint)
            if got is not None:
                return got
            kind = "const"
        if kind == "load":
            return self.load(env, t, 0)
        if kind == "own":
            js = [j for j, o in enumerate(self.parts["outputs"]) if o == t]
            return _E(LoadOwn(output_name(self.pick(js))), False, False)
        if kind == "cast":
            sources = [s for s in TYPES if s != t and any(not v.tainted for v in env[s])]
            waiting = [s for s in sources if any(not v.used for v in env[s])]
            sources = waiting if waiting and not self.chance(4) else sources
            if sources:
                src = self.pick(sources)
                got = self.var(env, src, False)
                _note("cast", src, t)
                return _E(Cast(t, got.e), False, got.static if is_float(t) else True)
            kind = "const"
        if kind == "size":
            names = [input_name(j) for j in range(len(self.parts["inputs"]))]
            names += [output_name(j) for j in range(len(self.parts["outputs"]))]
            return _E(Size(self.pick(names)), False, False)
        return self.const(t, py_ok)

    # -- loads
    def load(self, env, t, depth) -> _E:
        j = self.pick(self.inputs_of(t))
        name = input_name(j)
        size = self.parts["inputs"][j].size
        modes = ["clamp", "mod", "rem", "affine"]
        if any(v.loop and v.interval is not None for v in env["index"]):
            modes += ["affine", "affine"]  # the loop patterns backends optimise
        if not self.checked:
            modes += ["raw", "raw"]
        mode = self.pick(modes)
        if mode == "raw":
            return _E(LoadRaw(name, self.raw_index(env, size, depth)), False, False)
        if mode == "affine":
            affine = self.affine(env, size)
            if affine is not None:
                terms, offset = affine
                return _E(LoadAffine(name, terms, offset), False, False)
            mode = "clamp"
        if depth <= 0:  # a load in a leaf: its index is a leaf without another load
            idx = self.leaf(env, "index", False, allow_load=False).e
        else:
            idx = self.expr(env, "index", depth, allow_taint=False).e
        return _E(Load(name, idx, mode, self.draw(BOOLS)), False, False)

    def raw_index(self, env, size, depth):
        """An index that is often, not always, in bounds (unchecked programs)."""
        draw = self.draw
        loop_vars = [k for k, v in enumerate(env["index"]) if v.interval is not None and v.loop]
        kinds = ["affine", "affine", "expr"] + (["quadratic", "quadratic"] if loop_vars else [])
        kind = self.pick(kinds)
        if kind == "affine":
            got = self.affine(env, size, slack=2)
            if got is not None:
                terms, offset = got
                e = Const("index", offset)
                for coef, var in terms:
                    e = Op("add", (Op("mul", (var, Const("index", coef))), e))
                return e
        if kind == "quadratic":  # i * (i + c) + offset: not affine in i
            k = self.pick(loop_vars)
            v = Var("index", k)
            c = draw(_ints(-2, 4))
            a, b = env["index"][k].interval
            values = [i * (i + c) for i in range(a, max(a, b) + 1)]  # a > b: the body never runs
            lo, hi = min(values), max(values)
            offset = draw(_ints(-lo - 2, max(size - 1 - hi + 2, -lo - 2)))
            c = Const("index", c)
            square = Op("mul", (v, Op("add", (v, c)))) if draw(BOOLS) else Op("mul", (Op("add", (c, v)), v))
            return Op("add", (square, Const("index", offset)))
        return self.expr(env, "index", min(depth, 2), allow_taint=False).e

    def affine(self, env, size, slack=0):
        """((coef, Var), ...) and an offset with every index in [0, size), or None;
        ``slack`` > 0 lets the range overshoot either end by that much."""
        known = [k for k, v in enumerate(env["index"]) if v.interval is not None]
        if not known:
            return None
        draw = self.draw
        # the innermost loop variable first: that is the pattern a backend may optimise
        picks = [known[-1]] if draw(BOOLS) else [self.pick(known)]
        if len(known) > 1 and draw(BOOLS):
            picks.append(self.pick(known))
        terms, lo, hi = [], 0, 0
        for k in picks:
            coef = self.pick([1, -1, 2, 3, -2, 5])
            a, b = env["index"][k].interval
            lo, hi = lo + min(coef * a, coef * b), hi + max(coef * a, coef * b)
            terms.append((coef, Var("index", k)))
        if hi - lo > size - 1 + 2 * slack:
            return None
        offset = draw(_ints(-lo - slack, size - 1 - hi + slack))
        return tuple(terms), offset

    # -- expressions
    def opaque(self, x: _E) -> _E:
        """Where LLVM might see a constant, hide it (exact_math only)."""
        if self.exact_math and x.static:
            return _E(Opaque(x.e), x.tainted, False)
        return x

    def operand_taint(self, allow_taint, keeps):
        return allow_taint and keeps and not self.exact_math

    def kinds_for(self, env, t):
        kinds = ["leaf", "leaf"]
        if is_float(t):
            kinds += ["arith", "arith", "arith", "unary", "rounding", "fma", "copysign"]
            if self.exact_math or not is_fp8(t):  # see is_fp8
                kinds += ["math", "math", "pow"]
        elif is_int(t):
            kinds += ["arith", "arith", "idiv", "idiv", "unary", "bits", "shift", "shift"]
        else:
            kinds += ["cmp", "cmp", "cmp", "fclass", "bits", "not"]
        kinds += ["select", "cast", "cast"]
        if self.inputs_of(t):
            kinds += ["load", "load"]
        if env["fold_depth"] < len(MAX_TRIPS):
            kinds.append("fold")
        if env["if_depth"] < MAX_IF_DEPTH:
            kinds.append("if")
        return kinds

    def expr(self, env, t, depth, allow_taint=True) -> _E:
        """An expression of type ``t``; ``allow_taint`` (exact_math=False): may depend on
        NumPy's inexact math."""
        allow_taint = allow_taint and not self.exact_math
        _note("value", t)
        if depth <= 0:
            return self.leaf(env, t, allow_taint)
        kind = self.pick(self.kinds_for(env, t))
        d = depth - 1
        if kind == "leaf":
            return self.leaf(env, t, allow_taint)
        if kind == "arith":
            ops = ["add", "sub", "mul", "max", "min"] + (["div", "mod"] if is_float(t) else [])
            op = self.pick(ops)
            keeps = op in KEEPS_ERROR
            a = self.expr(env, t, d, allow_taint and keeps)
            b = self.leaf(env, t, allow_taint and keeps, py_ok=True) if self.chance(3) else \
                self.expr(env, t, d, allow_taint and keeps)
            if self.draw(BOOLS):
                a, b = b, a
            return self.op(op, t, (a, b))
        if kind == "idiv":
            op = self.pick(["div", "mod"])
            a = self.expr(env, t, d, False)
            guards = ["max1", "select", "or1", "const"]
            if t == "index" and env["spans"]:
                guards += ["span", "span"]
            if not self.checked:
                guards += ["none", "none"]
            guard = self.pick(guards)
            _note("op", op, t)
            _note("feature", f"guard {guard}")
            if guard == "span":  # non-zero because this body runs
                k_start, k_stop = self.pick(env["spans"])
                return _E(SpanDiv(a.e, Var("index", k_start), Var("index", k_stop)))
            if guard == "const":
                d_ = dt(t)
                candidates = [v for v in (2, 3, -1, 1, -2, 7, d_.max, d_.min, -7) if v and d_.min <= v <= d_.max]
                b = Const(t, self.pick(candidates))
            else:
                b = self.expr(env, t, d, False).e
            return _E(IDiv(op, a.e, b, guard, self.pick(["method", "named", "operator", "ufunc"])))
        if kind == "unary":
            # rsqrt is inexact: the interpreter's f64 1 / sqrt(x) rounds twice, vecmath's once,
            # and NVPTX's rounds twice at every type
            inexact = not self.exact_math
            if is_float(t):
                op = self.pick(["neg", "abs", "sqrt"] + (["rsqrt"] if (allow_taint and not is_fp8(t)) or not inexact
                                                         else []))
            else:
                op = self.pick(["neg", "abs", "not"])
            a = self.expr(env, t, d, allow_taint)
            result = self.op(op, t, (a,))
            return attrs.evolve(result, tainted=True) if op == "rsqrt" and inexact else result
        if kind == "rounding":
            return self.op(self.pick(ROUNDING), t, (self.expr(env, t, d, False),))
        if kind == "math":
            op = self.pick(INEXACT)
            a = self.opaque(self.expr(env, t, d, False))
            result = self.op(op, t, (a,))
            return attrs.evolve(result, tainted=not self.exact_math)
        if kind == "pow":
            a = self.opaque(self.expr(env, t, d, False))
            b = self.opaque(self.expr(env, t, d, False))
            return attrs.evolve(self.op(self.pick(INEXACT_BINARY), t, (a, b)), tainted=not self.exact_math)
        if kind == "fma":
            xs = [self.expr(env, t, d, False) for _ in range(3)]
            return self.op("fma", t, xs)
        if kind == "copysign":
            a = self.expr(env, t, d, allow_taint)
            b = self.expr(env, t, d, False)
            # the sign of a NaN is unspecified: take the sign of 1 there
            sign = Op("select", (Op("isnan", (b.e,)), Const(t, 1.0), b.e))
            return self.op("copysign", t, (a, _E(sign, False, b.static)))
        if kind == "bits":
            op = self.pick(["and", "or", "xor"])
            a, b = self.expr(env, t, d, False), self.expr(env, t, d, False)
            return self.op(op, t, (a, b))
        if kind == "not":
            return self.op("not", t, (self.expr(env, t, d, False),))
        if kind == "shift":
            op = self.pick(["shl", "shr"])
            a = self.expr(env, t, d, False)
            return self.op(op, t, (a, self.shift_count(env, t, d)))
        if kind == "cmp":
            src = self.type()
            ops = ["eq", "ne"] if is_bool(src) else ["lt", "le", "gt", "ge", "eq", "ne"]
            a, b = self.expr(env, src, d, False), self.leaf(env, src, False, py_ok=True) if self.chance(3) \
                else self.expr(env, src, d, False)
            return self.op(self.pick(ops), src, (a, b))
        if kind == "fclass":
            src = self.pick(FLOATS)
            return self.op(self.pick(["isnan", "isinf"]), src, (self.expr(env, src, d, False),))
        if kind == "select":
            c = self.expr(env, "bool", d, False)
            a, b = self.expr(env, t, d, allow_taint), self.expr(env, t, d, allow_taint)
            static = a.static or b.static if is_float(t) else True
            _note("op", "select", t)
            return _E(Op("select", (c.e, a.e, b.e), self.pick(["method", "where"])), a.tainted or b.tainted, static)
        if kind == "cast":
            src = self.type()
            if src == t and not self.chance(8):
                src = self.pick([s for s in TYPES if s != t])
            keeps = widens(src, t)
            a = self.expr(env, src, d, allow_taint and keeps)
            static = a.static if is_float(t) else True
            _note("cast", src, t)
            return _E(Cast(t, a.e), a.tainted, static)
        if kind == "load":
            return self.load(env, t, d)
        if kind == "fold":
            return self.fold_expr(env, t, d, allow_taint)
        if kind == "if":
            return self.if_expr(env, t, d, allow_taint)
        raise AssertionError(kind)

    def op(self, op: str, t: str, xs) -> _E:
        """An Op of operand type ``t`` with a drawn spelling; taint and static propagate."""
        xs = list(xs)
        spelling = self.pick(spellings(op, t))
        tainted = any(x.tainted for x in xs)
        if is_float(t) and op not in ("isnan", "isinf", "lt", "le", "gt", "ge", "eq", "ne"):
            # a float op with a dynamic operand stays dynamic (LLVM folds nothing but x op NaN)
            static = all(x.static for x in xs) or any(_is_nan_const(x.e) for x in xs)
        else:
            static = True  # integer and bool ops: LLVM may simplify them to a constant
        _note("op", op, t)
        if spelling != "method":
            _note("feature", spelling)
        if any(isinstance(x.e, Const) and x.e.py for x in xs):
            _note("feature", "literal")
        e = Op(op, tuple(x.e for x in xs), spelling)
        if op in ("div", "mod") and is_float(t) and dt(t).bits < 32:  # / and % of narrow floats are f32 (Triton's)
            e = Cast(t, e)
        return _E(e, tainted, static)

    def shift_count(self, env, t, d) -> _E:
        bits = dt(t).bits
        d_ = dt(t)
        kind = self.pick(["inside", "outside", "masked", "expr"])
        if kind == "inside":
            return _E(Const(t, self.draw(_ints(0, bits - 1)), self.chance(3)))
        if kind == "outside":
            values = [v for v in (bits, bits + 1, 2 * bits, -1, -bits, d_.max, d_.min, 255) if d_.min <= v <= d_.max]
            return _E(Const(t, self.pick(values)))
        e = self.expr(env, t, d, False)
        if kind == "masked":
            return _E(Op("and", (e.e, Const(t, bits - 1))))
        return e

    # -- folds
    def bound(self, env, depth):
        kind = self.pick(["const", "clamp", "edge", "clamp", "const"])
        if kind == "const":
            v = self.draw(_ints(SMALL_LO, SMALL_HI))
            return BConst(v), (v, v)
        if kind == "clamp":
            lo = self.draw(_ints(SMALL_LO, SMALL_HI))
            hi = self.draw(_ints(lo, SMALL_HI))
            e = self.expr(env, "index", depth, False)
            return BClamp(e.e, lo, hi), (lo, hi)
        side = self.pick(["max", "min"])
        off = self.draw(_ints(0, EDGE_OFFSET))
        if self.draw(BOOLS):  # per thread: a divergent loop that ends near the edge
            e = self.expr(env, "index", depth, False).e
            return BEdge(side, off, e), ((INDEX_MAX - off, INDEX_MAX) if side == "max" else (INDEX_MIN, INDEX_MIN + off))
        v = INDEX_MAX - off if side == "max" else INDEX_MIN + off
        return BEdge(side, off), (v, v)

    def combine_ops(self, t):
        if is_float(t):
            return ["add", "max", "min", "mul"]
        if is_int(t):
            return ["add", "max", "min", "mul", "and", "or", "xor"]
        return ["and", "or", "xor"]

    def fold_expr(self, env, t, depth, allow_taint) -> _E:
        fold_depth = env["fold_depth"]
        start, (s_lo, s_hi) = self.bound(env, min(depth, 2))
        stop, (t_lo, t_hi) = self.bound(env, min(depth, 2))
        limit = MAX_TRIPS[min(fold_depth, len(MAX_TRIPS) - 1)]

        def trips(step):
            span = (t_hi - s_lo) if step > 0 else (s_hi - t_lo)
            return 0 if span <= 0 else -(-span // abs(step))

        step = self.pick([s for s in STEPS if trips(s) <= limit])
        n_acc = self.draw(_ints(1, 3))
        pick = self.draw(_ints(0, n_acc - 1))
        types = [t if j == pick else self.type() for j in range(n_acc)]
        inits = [self.expr(env, ty, depth - 1, allow_taint) for ty in types]
        inits = [attrs.evolve(i, e=attrs.evolve(i.e, py=True)) if isinstance(i.e, Const) and i.e.type in
                 ("index", "f32", "bool") and self.draw(BOOLS) else i for i in inits]
        # the body's scope: the loop variable, then the accumulators
        inner = _child_env(env)
        if step > 0:
            iv_range = (s_lo, t_hi - 1)
        else:
            iv_range = (t_lo + 1, s_hi)
        small = iv_range[1] - iv_range[0] <= 64 and max(map(abs, iv_range)) <= 2**20
        inner["index"].append(_Var("index", interval=iv_range if small else None, loop=True))
        for ty, init in zip(types, inits):
            inner[ty].append(_Var(ty, tainted=init.tainted))
        # the bounds: the start is a value the loop variable takes, so it has the same range
        # (while the body runs); stop - start is non-zero while it runs
        k_start = len(inner["index"])
        inner["index"].append(_Var("index", interval=iv_range if small else None))
        inner["index"].append(_Var("index"))
        inner["spans"] = inner["spans"] + [(k_start, k_start + 1)]
        inner["fold_depth"] = fold_depth + 1
        body_depth = max(depth - 1, 2)  # fold_depth bounds the recursion
        stmts = []
        if self.chance(3):
            stmts = self.statements(inner, self.draw(_ints(1, 2)), body_depth)
        updates = []
        for j, (ty, init) in enumerate(zip(types, inits)):
            acc_var = Var(ty, len(env[ty]) + (1 if ty == "index" else 0) + sum(1 for x in types[:j] if x == ty))
            form = self.pick(["combine", "combine", "free", "keep"])
            if form == "combine":  # acc op term: what the interpreter vectorises
                op = self.pick(self.combine_ops(ty))
                if init.tainted and op not in KEEPS_ERROR:
                    op = "max"  # a tainted accumulator only goes through ops that keep its error
                # an untainted accumulator must stay untainted: its taint was fixed by init
                term = self.expr(inner, ty, body_depth, init.tainted and op in KEEPS_ERROR).e
                upd = Op(op, (acc_var, term) if self.draw(BOOLS) else (term, acc_var))
            elif form == "keep":
                upd = acc_var
            else:
                upd = self.expr(inner, ty, body_depth, init.tainted).e
            updates.append(upd)
        spelling = "single" if n_acc == 1 and self.draw(BOOLS) else "tuple"
        fold = Fold(start, stop, step, tuple(i.e for i in inits), tuple(updates), tuple(stmts), spelling)
        return _E(FoldE(fold, pick), inits[pick].tainted, True)

    # -- branches
    def condition(self, env, depth) -> Any:
        """A bool: uniform (kernel-scope values only) or per thread."""
        if self.draw(BOOLS):
            uniform = _uniform_env(env)
            return self.expr(uniform, "bool", min(depth, 2), False).e
        return self.expr(env, "bool", depth, False).e

    def branch(self, env, types, depth, allow_taint):
        inner = _child_env(env)
        inner["if_depth"] = env["if_depth"] + 1
        stmts = self.statements(inner, self.draw(_ints(0, 2)), depth) if self.draw(BOOLS) else []
        results = [self.expr(inner, ty, depth, allow_taint) for ty in types]
        return Branch(tuple(stmts), tuple(r.e for r in results)), results

    def if_expr(self, env, t, depth, allow_taint) -> _E:
        n = self.draw(_ints(1, 3))
        pick = self.draw(_ints(0, n - 1))
        types = [t if j == pick else self.type() for j in range(n)]
        cond = self.condition(env, depth)
        then, a = self.branch(env, types, depth, allow_taint)
        otherwise, b = self.branch(env, types, depth, allow_taint)
        spelling = "single" if n == 1 and self.draw(BOOLS) else "tuple"
        tainted = a[pick].tainted or b[pick].tainted
        static = a[pick].static or b[pick].static if is_float(t) else True
        return _E(IfE(If(cond, then, otherwise, spelling), pick), tainted, static)

    def if_statement(self, env, depth):
        """An if_ with no results (stores inside), with or without otherwise; or, now
        and then, one whose results are not used."""
        cond = self.condition(env, depth)
        kind = self.pick(["bare", "else", "results"])
        types = [self.type() for _ in range(self.draw(_ints(1, 2)))] if kind == "results" else []
        then, _ = self.branch(env, types, depth, True)
        if kind == "bare":
            return IfS(If(cond, then, None, "tuple"))
        otherwise, _ = self.branch(env, types, depth, True)
        return IfS(If(cond, then, otherwise, "none" if kind == "else" else "tuple"))

    # -- statements
    def store(self, env, depth):
        j = self.draw(_ints(0, len(self.parts["outputs"]) - 1))
        e = self.expr(env, self.parts["outputs"][j], depth, True)
        if e.tainted:
            self.tainted_outputs.add(j)
        return Store(output_name(j), e.e)

    def statements(self, env, n, depth):
        """``n`` statements in ``env`` (which takes the variables they define)."""
        out = []
        for _ in range(n):
            kinds = ["let", "let", "twin"] + (["store", "store"] if env["own"] else [])
            if env["if_depth"] < MAX_IF_DEPTH:
                kinds.append("if")
            kind = self.pick(kinds)
            if kind == "let":
                t = self.type()
                e = self.expr(env, t, self.draw(_ints(min(2, depth), max(depth, 1))))
                out.append(Let(e.e))
                env[t].append(_Var(t, e.tainted, e.static))
                _note("let", t)
            elif kind == "twin":  # a binary op twice, or with its operands swapped: work for CSE
                t = self.type()
                ops = ["add", "sub", "mul", "max", "min"] + (["div", "mod"] if is_float(t) else []) \
                    + (["and", "or", "xor"] if not is_float(t) else []) + (["shl", "shr"] if is_int(t) else [])
                if is_bool(t):
                    ops = ["and", "or", "xor", "eq", "ne"]
                op = self.pick(ops)
                d = self.draw(_ints(1, max(depth - 1, 1)))
                keeps = op in KEEPS_ERROR
                a, b = (self.expr(env, t, d, keeps) for _ in range(2))
                e = self.op(op, t, (a, b))
                twin = _swapped(e.e) if self.draw(BOOLS) else e.e
                for x in (e.e, twin):
                    out.append(Let(x))
                    env[t].append(_Var(t, e.tainted, e.static))
                _note("let", t)
            elif kind == "store":
                out.append(self.store(env, self.draw(_ints(1, max(depth, 1)))))
            else:
                out.append(self.if_statement(env, max(depth - 1, 1)))
        return out


def _child_env(env):
    return {k: (list(v) if isinstance(v, list) else v) for k, v in env.items()}


def _uniform_env(env):
    """The kernel-scope prefix of ``env``: the same Var numbers, no thread values."""
    out = _child_env(env)
    for t in TYPES:
        out[t] = out[t][:env["ntop"][t]]
    # no loops or branches: their bodies would number their variables from the prefix
    out.update(own=False, spans=[], fold_depth=len(MAX_TRIPS), if_depth=MAX_IF_DEPTH)
    return out


# -- extents


def _draw_extent(draw, gen_scalars, inputs, worlds, cap):
    """An extent expression and its values per world (each in [0, cap])."""
    def value(x):
        desc = ProgramDesc((), None, inputs, (), gen_scalars, (), (), 0)
        return [extent_value(x, desc, w) for w in range(worlds)]

    def leaf():
        kinds = ["const"]
        index_like = [j for j, s in enumerate(gen_scalars) if is_int(s.type)]
        if index_like:
            kinds += ["scalar", "scalar"]
        if inputs:
            kinds += ["size", "size"]
        kind = draw(_sampled(kinds))
        if kind == "scalar":
            return XScalar(draw(_sampled(index_like)))
        if kind == "size":
            return XSize(input_name(draw(_ints(0, len(inputs) - 1))))
        return XConst(draw(_ints(0, cap)))

    x = leaf()
    for _ in range(draw(_ints(0, 2))):
        op = draw(_sampled(["add", "sub", "mul", "div", "mod", "max", "min"]))
        other = leaf()
        if op in ("div", "mod"):
            if any(v <= 0 for v in value(other)):
                other = XBin("max", other, XConst(1))
        x = XBin(op, x, other) if draw(BOOLS) or op in ("div", "mod") else XBin(op, other, x)
    values = value(x)
    if draw(_ints(0, 3)) == 0 and all(abs(v) <= 2048 for v in values):
        exact = ["f16", "f32", "f64", "i16", "i32"] + (["bf16"] if all(abs(v) <= 256 for v in values) else []) \
            + (["u16"] if all(v >= 0 for v in values) else [])
        x = XVia(draw(_sampled(exact)), x)
    if any(not 0 <= v <= cap for v in values):
        x = XBin("min", XBin("max", x, XConst(0)), XConst(cap))
    return x


@st.composite
def programs(draw, exact_math: bool = True, checked: bool = True, max_depth: int = 5) -> ProgramDesc:
    """Descriptions of random programs.  ``checked=False``: loads may be out of bounds
    and integer division may divide by zero (run-time errors both backends must report)."""
    ndim = draw(_ints(1, 3))
    cap = {1: 70, 2: 12, 3: 6}[ndim]
    # the program's favourite types: most of its buffers, scalars and values are of these
    favoured = draw(st.lists(_sampled(TYPES), min_size=1, max_size=3, unique=True))

    def some_type():
        return draw(_sampled(favoured)) if draw(_ints(0, 3)) else draw(_sampled(TYPES))

    worlds = draw(_ints(1, 2))
    block = None
    if draw(BOOLS):
        sizes = [draw(_sampled([1, 2, 3, 4, 5, 8, 16, 32, 64])) for _ in range(ndim)]
        while math.prod(sizes) > 1024:
            sizes[sizes.index(max(sizes))] //= 2
        block = tuple(sizes)
    inputs = []
    for _ in range(draw(_ints(0, 3))):
        t = some_type()
        values = tuple(draw(st.lists(value_of(t), min_size=1, max_size=16)))
        sizes = tuple(draw(_ints(1, 48)) for _ in range(worlds))
        inputs.append(Input(t, values, sizes))
    inputs = tuple(inputs)
    scalars = []
    for _ in range(draw(_ints(0, 3))):
        t = some_type()
        small = draw(BOOLS)
        scalars.append(ScalarParam(t, tuple(draw(value_of(t, small)) for _ in range(worlds))))
    scalars = tuple(scalars)
    extents = tuple(_draw_extent(draw, scalars, inputs, worlds, cap) if draw(_ints(0, 2)) else
                    XConst(draw(_ints(0, cap)) if draw(_ints(0, 15)) == 0 else draw(_ints(1, cap)))
                    for _ in range(ndim))
    outputs = tuple(some_type() for _ in range(draw(_ints(1, 2))))
    parts = {"inputs": inputs, "outputs": outputs}
    gen = _Gen(draw, parts, exact_math, checked, favoured)
    desc0 = ProgramDesc(extents, block, inputs, outputs, scalars, (), (), 0, worlds)
    sizes = [desc0.extent_values(w) for w in range(worlds)]

    # kernel scope: the scalars, no thread indices, no own element
    env = {t: [] for t in TYPES}
    env.update(fold_depth=0, if_depth=0, own=False, spans=[], kernel_scope=True)
    for s in scalars:
        env[s.type].append(_Var(s.type, static=False))
    env["ntop"] = {t: len(env[t]) for t in TYPES}
    prelude = []
    for _ in range(draw(_ints(0, 2))):
        t = gen.type()
        e = gen.expr(env, t, draw(_ints(0, 2)))
        prelude.append(Let(e.e))
        env[t].append(_Var(t, e.tainted, e.static))
    env["ntop"] = {t: len(env[t]) for t in TYPES}

    env.update(own=True, kernel_scope=False)
    # coordinates, then the linear thread number (ranges: the largest of the worlds')
    env["index"] += [_Var("index", static=False, interval=(0, max(max(s[i] for s in sizes) - 1, 0)))
                     for i in range(ndim)]
    env["index"].append(_Var("index", static=False,
                             interval=(0, max(max(math.prod(s) for s in sizes) - 1, 0))))
    statements = gen.statements(env, draw(_ints(1, 6)), max_depth)
    # every output is stored by every thread at the end, so no element is left unwritten
    # (the suite's interpreter memory checks would flag it); out0 last
    for j in reversed(range(len(outputs))):
        t = outputs[j]
        e = gen.expr(env, t, draw(_ints(2, max_depth)))
        if draw(_ints(0, 2)):
            # what this thread stored before shows through: mixed into the last value it stores
            # (a value that depends on NumPy's math only through max, which keeps its error)
            mix = "xor" if not is_float(t) else "max" if e.tainted else draw(_sampled(["add", "sub"]))
            own = _E(LoadOwn(output_name(j)), False, False)
            e = gen.op(mix, t, (own, e) if draw(BOOLS) else (e, own))
        if e.tainted:
            gen.tainted_outputs.add(j)
        statements.append(Store(output_name(j), e.e))
    arch = "sm_90" if draw(_ints(0, 3)) == 0 else "sm_80"
    tainted = tuple(j in gen.tainted_outputs for j in range(len(outputs)))
    return ProgramDesc(extents, block, inputs, outputs, scalars, tuple(prelude), tuple(statements),
                       draw(_ints(0, 2**16)), worlds, arch, tainted)
