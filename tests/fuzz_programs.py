"""Random well-typed accy programs for differential fuzzing (see tests/test_fuzz.py).

A program is first drawn as a *description*: plain frozen attrs classes and tuples,
no accy objects.  :func:`build` then traces the description into an
:class:`accy.Program`.  Hypothesis draws and shrinks the description, so a failing
example shrinks to a small program, and the description's ``repr`` together with
the program's text form shows what went wrong.

Every description is valid by construction:

* loads of input buffers use an index reduced into range, with ``min/max``
  (``clamp``) or with a floor-mod built from ``//`` (``mod``: ``e - (e // n) * n``,
  in ``[0, n)`` for ``n > 0`` even when the product wraps, because wrapping
  arithmetic is exact modulo 2^64 and the true result fits);
* index division never divides by zero: the divisor is ``max(e, 1)``,
  ``select(e == 0, 1, e)`` (which keeps negative divisors, ``-1`` included) or a
  non-zero constant;
* every thread stores only to its own element (its linear thread number) of the
  one or two outputs, and loads an output only at its own element, so there are
  no races;
* loop bounds are kept in known intervals (small clamps, or the edges of the index
  range) and the step is chosen so that no loop runs more than a few dozen
  iterations.

``exp`` taint: with ``exact_exp=False`` (the interpreter uses NumPy's own float32
``exp``, up to 2 ulps away from libm's ``expf`` that LLVM calls) a value that
depends on an ``exp`` may only flow into ops that keep its *relative* error
bounded (``neg``, ``max``, ``min``, ``sqrt``, the branches of ``select``) and into
stores.  With ``exact_exp=True`` (the test makes both backends compute the same
``expf``) there is no restriction.
"""

from __future__ import annotations

import math
import os
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st

from accy import Program, axis, dynamic_buffer, f32, index, schedule
from accy.dsl.types import INDEX_MAX, INDEX_MIN

# -- the --fuzz-long option ----------------------------------------------------------------------

DEFAULT_EXAMPLES = 150
LONG_EXAMPLES = 2000


def add_fuzz_option(parser) -> None:
    """Register ``--fuzz-long`` (call from ``pytest_addoption`` in tests/conftest.py)."""
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help=f"run the differential fuzzer with {LONG_EXAMPLES} examples per test "
                          f"instead of {DEFAULT_EXAMPLES}")


def fuzz_examples(config, default: int = DEFAULT_EXAMPLES, long: int = LONG_EXAMPLES) -> int:
    try:
        is_long = config.getoption("--fuzz-long", default=False)
    except ValueError:
        is_long = False
    return long if is_long else default


# -- the description ------------------------------------------------------------------------------
# types are the strings "index", "f32", "bool"

DTYPES = {"index": index, "f32": f32}


@attrs.frozen
class Const:
    type: str
    value: Any


@attrs.frozen
class Var:
    """The ``k``-th visible variable of ``type`` (thread indices, loop variables,
    accumulators, let-bound values, in the order they became visible)."""

    type: str
    k: int


@attrs.frozen
class Bin:
    op: str  # add sub mul div max min (index div: see IDiv)
    a: Any
    b: Any


@attrs.frozen
class IDiv:
    """Index floor division with a divisor that is never zero."""

    a: Any
    b: Any
    guard: str  # "max1": max(b, 1); "select": select(b == 0, 1, b); "const": b is a non-zero Const


@attrs.frozen
class Un:
    op: str  # neg exp sqrt
    a: Any


@attrs.frozen
class Cmp:
    op: str  # lt le gt ge eq ne
    a: Any
    b: Any


@attrs.frozen
class Logic:
    op: str  # and or
    a: Any
    b: Any


@attrs.frozen
class Not:
    a: Any


@attrs.frozen
class Select:
    cond: Any
    a: Any
    b: Any


@attrs.frozen
class Cast:
    to: str  # index or f32
    a: Any


@attrs.frozen
class Load:
    """``buffer[reduce(idx)]`` for an input buffer; ``mode`` is "clamp" or "mod"."""

    buffer: str
    idx: Any
    mode: str


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
class SpanDiv:
    """``a // (stop - start)`` inside a fold over ``start..stop``: the divisor is non-zero
    whenever the body runs (and zero, were it ever hoisted, for an empty loop)."""

    a: Any
    start: Any  # Vars naming the enclosing fold's bounds
    stop: Any


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
    """``INDEX_MAX - offset`` (side "max") or ``INDEX_MIN + offset`` (side "min")."""

    side: str
    offset: int


@attrs.frozen
class Fold:
    start: Any  # a bound
    stop: Any
    step: int
    inits: tuple  # expressions, one per accumulator
    updates: tuple  # expressions in the body's scope, one per accumulator
    store: Any = None  # None, or (buffer, expr): a store at this thread's own element inside the body
    spelling: str = "tuple"  # "tuple": init is a tuple; "single": one accumulator passed bare
    # In the body, Var("index", k) sees the enclosing variables, then the loop variable,
    # the accumulators (each appended to its type's list), then the start and stop bounds.


@attrs.frozen
class FoldE:
    """One result of a fold (``pick`` indexes the accumulators)."""

    fold: Fold
    pick: int


@attrs.frozen
class Let:
    e: Any


@attrs.frozen
class Store:
    buffer: str
    e: Any


@attrs.frozen
class Input:
    """An input buffer of ``size`` elements: ``values`` repeated (np.resize)."""

    values: tuple
    size: int

    def __len__(self) -> int:
        return self.size


@attrs.frozen
class ProgramDesc:
    extents: tuple[int, ...]  # x, y, z order
    block: tuple[int, ...] | None  # thread_blocks(x, y, z), or None for the default schedule
    f32_inputs: tuple[Input, ...]  # buffers a0, a1, ...
    index_inputs: tuple[Input, ...]  # buffers n0, ...
    outputs: tuple[str, ...]  # dtypes of out0 and out1 (every thread stores each at the end)
    prelude: tuple  # Let statements at kernel scope, before the launch
    statements: tuple  # Let and Store statements inside the launch
    fill_seed: int  # initial contents of the outputs

    @property
    def threads(self) -> int:
        return math.prod(self.extents)


AXIS_NAMES = ("x", "y", "z")


def f32_input_name(j): return f"a{j}"
def index_input_name(j): return f"n{j}"
def output_name(j): return f"out{j}"


# -- building a Program ------------------------------------------------------------------------


class _Scope:
    def __init__(self, builder, env, lin, desc, handles):
        self.b = builder
        self.env = env  # type -> list of Values
        self.lin = lin  # this thread's own element (None at kernel scope)
        self.desc = desc
        self.handles = handles

    def child(self, builder, extra):
        env = {t: list(vs) for t, vs in self.env.items()}
        for t, v in extra:
            env[t].append(v)
        return _Scope(builder, env, self.lin, self.desc, self.handles)

    def size(self, name):
        d = self.desc
        if name.startswith("a"):
            return len(d.f32_inputs[int(name[1:])])
        return len(d.index_inputs[int(name[1:])])

    # -- expressions
    def expr(self, e):
        b = self.b
        match e:
            case Const(t, value):
                return b.constant(value, {"index": index, "f32": f32, "bool": "bool"}[t])
            case Var(t, k):
                return self.env[t][k]
            case Bin(op, x, y):
                return getattr(b, op)(self.expr(x), self.expr(y))
            case IDiv(x, y, guard):
                num, den = self.expr(x), self.expr(y)
                if guard == "max1":
                    den = b.max(den, b.constant_index(1))
                elif guard == "select":
                    den = b.select(b.eq(den, b.constant_index(0)), b.constant_index(1), den)
                return b.div(num, den)  # guards "const" and "none": as drawn
            case SpanDiv(x, start, stop):
                return b.div(self.expr(x), b.sub(self.expr(stop), self.expr(start)))
            case LoadRaw(name, idx):
                return b.load(self.handles[name], self.expr(idx))
            case Un(op, x):
                return getattr(b, op)(self.expr(x))
            case Cmp(op, x, y):
                return getattr(b, op)(self.expr(x), self.expr(y))
            case Logic(op, x, y):
                return getattr(b, f"logical_{op}")(self.expr(x), self.expr(y))
            case Not(x):
                return b.logical_not(self.expr(x))
            case Select(c, x, y):
                return b.select(self.expr(c), self.expr(x), self.expr(y))
            case Cast(to, x):
                return b.cast(self.expr(x), DTYPES[to])
            case Load(name, idx, mode):
                n = self.size(name)
                i = self.expr(idx)
                if mode == "clamp":
                    i = b.min(b.max(i, b.constant_index(0)), b.constant_index(n - 1))
                else:
                    i = b.sub(i, b.mul(b.div(i, b.constant_index(n)), b.constant_index(n)))
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
            case LoadOwn(name):
                return b.load(self.handles[name], self.lin)
            case FoldE(fold, pick):
                results = self.fold(fold)
                return results[pick]
        raise TypeError(f"not an expression: {e!r}")

    def bound(self, bd):
        b = self.b
        match bd:
            case BConst(v):
                return b.constant_index(v)
            case BClamp(e, lo, hi):
                return b.min(b.max(self.expr(e), b.constant_index(lo)), b.constant_index(hi))
            case BEdge(side, off):
                return b.constant_index(INDEX_MAX - off if side == "max" else INDEX_MIN + off)
        raise TypeError(f"not a bound: {bd!r}")

    def fold(self, f: Fold):
        start, stop = self.bound(f.start), self.bound(f.stop)
        inits = [self.expr(e) for e in f.inits]

        def body(inner, i, accs):
            accs = (accs,) if f.spelling == "single" else tuple(accs)
            # the loop variable, the accumulators, then the loop's start and stop (see Fold)
            scope = self.child(inner, [("index", i)] + [(v.type.name, a) for v, a in zip(inits, accs)]
                               + [("index", start), ("index", stop)])
            if f.store is not None:
                name, e = f.store
                inner.store(self.handles[name], scope.expr(e), self.lin)
            new = tuple(scope.expr(u) for u in f.updates)
            return new[0] if f.spelling == "single" else new

        init = inits[0] if f.spelling == "single" else tuple(inits)
        result = self.b.fold_range(start, stop, f.step, init, body)
        return (result,) if f.spelling == "single" else result

    def statement(self, s):
        match s:
            case Let(e):
                v = self.expr(e)
                self.env[v.type.name].append(v)
            case Store(name, e):
                self.b.store(self.handles[name], self.expr(e), self.lin)
            case _:
                raise TypeError(f"not a statement: {s!r}")


def build(desc: ProgramDesc) -> Program:
    params = {}
    for j in range(len(desc.outputs)):
        params[output_name(j)] = dynamic_buffer(DTYPES[desc.outputs[j]])
    for j in range(len(desc.f32_inputs)):
        params[f32_input_name(j)] = dynamic_buffer(f32)
    for j in range(len(desc.index_inputs)):
        params[index_input_name(j)] = dynamic_buffer(index)
    ndim = len(desc.extents)

    def kernel(k, args):
        handles = {name: args.param(name) for name in params}
        top = _Scope(k, {"index": [], "f32": [], "bool": []}, None, desc, handles)
        for s in desc.prelude:
            top.statement(s)

        def each(inner, launch):
            coords = list(launch)
            lin = coords[0]
            stride = desc.extents[0]
            for c, extent in zip(coords[1:], desc.extents[1:]):
                lin = inner.add(lin, inner.mul(c, inner.constant_index(stride)))
                stride *= extent
            scope = top.child(inner, [("index", c) for c in coords] + [("index", lin)])
            scope.lin = lin
            for s in desc.statements:
                scope.statement(s)

        axes = [axis(n, e) for n, e in zip(AXIS_NAMES, desc.extents)]
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


def make_arguments(desc: ProgramDesc) -> list[np.ndarray]:
    """Fresh argument arrays in parameter order (outputs first, pre-filled)."""
    rng = np.random.default_rng(desc.fill_seed)
    args = []
    for t in desc.outputs:
        if t == "f32":
            a = rng.standard_normal(desc.threads).astype(np.float32)
            a[rng.random(desc.threads) < 0.1] = np.nan
        else:
            a = rng.integers(-50, 50, desc.threads, dtype=np.int64)
        args.append(a)
    args += [np.resize(np.array(b.values, np.float32), b.size) for b in desc.f32_inputs]
    args += [np.resize(np.array(b.values, np.int64), b.size) for b in desc.index_inputs]
    return args


# -- strategies -----------------------------------------------------------------------------------

SPECIAL_F32 = [0.0, 1.0, -1.0, -0.0, 0.5, 2.0, 3.0, -2.5, float("nan"), float("inf"), float("-inf"),
               1e-45, -1e-45, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1e30, -1e30, 1e-30, 88.0, -88.0,
               89.0, -104.0, 16777216.0, 16777217.0, 9.2233720e18, -9.2233720e18, 1e19, 0.1]
SPECIAL_INDEX = [0, 1, -1, 2, 3, 7, -2, INDEX_MAX, INDEX_MIN, INDEX_MAX - 1, INDEX_MIN + 1,
                 2**31, -(2**31), 2**32, 2**53 + 1, 2**62 + 2**38 + 1, 16777217]

# signed zeros and small integers get a branch of their own: the sign of a zero is
# where IEEE operations most often differ between implementations
COMMON_F32 = [0.0, -0.0, 1.0, -1.0, 2.0]

f32_values = st.one_of(
    st.sampled_from(COMMON_F32),
    st.sampled_from(SPECIAL_F32),
    st.floats(-10, 10, width=32),
    st.floats(width=32),
)
index_values = st.one_of(
    st.integers(-8, 24),
    st.sampled_from(SPECIAL_INDEX),
    st.integers(INDEX_MIN, INDEX_MAX),
)
const_f32 = st.one_of(st.sampled_from(COMMON_F32), st.sampled_from(SPECIAL_F32), st.floats(-100, 100, width=32), st.floats(width=32))
const_index = st.one_of(st.integers(-4, 16), st.sampled_from(SPECIAL_INDEX))

# the loop-step candidates, simplest first; huge steps keep loops between the index edges short
STEPS = [1, 2, -1, 3, -2, 4, -3, 7, -4, 2**62, -(2**62), INDEX_MAX, -INDEX_MAX, INDEX_MIN]

# True: don't generate the constructs of the bugs listed in test_fuzz_regressions.py, to
# fuzz past them while they are open (ACCY_FUZZ_AVOID_KNOWN_BUGS=1).  Bugs 1-4 are fixed,
# so by default everything is generated.
AVOID_KNOWN_BUGS = os.environ.get("ACCY_FUZZ_AVOID_KNOWN_BUGS", "0") not in ("0", "no", "false", "off", "")

SMALL_LO, SMALL_HI = -8, 16  # the interval small clamps live in
EDGE_OFFSET = 16
MAX_TRIPS = (24, 8, 4)  # per nesting depth of the fold


def _no_negative_zero(e):
    """``e + 0.0``: the same value, except -0.0 becomes +0.0.  f32 max/min of zeros of
    different signs is bug 3 in test_fuzz_regressions.py."""
    return Bin("add", e, Const("f32", 0.0))


@attrs.define
class _Var:
    type: str
    tainted: bool  # depends on an exp (only matters with exact_exp=False)
    interval: tuple[int, int] | None = None  # for index variables whose range is known and small
    loop: bool = False  # a loop variable


class _Gen:
    """Draws one expression tree, with the scope's visible variables and budgets."""

    def __init__(self, draw, desc_parts, exact_exp: bool, checked: bool = True):
        self.draw = draw
        self.parts = desc_parts  # dict with inputs/outputs/extents etc.
        self.exact_exp = exact_exp
        self.checked = checked  # False: loads and divisions may fail at run time

    def var(self, env, t, allow_taint):
        choices = [k for k, v in enumerate(env[t]) if allow_taint or not v.tainted]
        if not choices:
            return None
        k = self.draw(st.sampled_from(choices))
        return Var(t, k), env[t][k].tainted

    def leaf(self, env, t, allow_taint, allow_load=True):
        kinds = ["var", "const"] if env[t] else ["const"]
        if allow_load and t == "f32" and self.parts["f32_inputs"]:
            kinds.append("load")
        if allow_load and t == "index" and self.parts["index_inputs"]:
            kinds.append("load")
        if env.get("own") and any(o == t for o in self.parts["outputs"]):
            kinds.append("own")
        kind = self.draw(st.sampled_from(kinds))
        if kind == "var":
            got = self.var(env, t, allow_taint)
            if got is not None:
                return got
            kind = "const"
        if kind == "load":
            # a load whose index is a leaf: recursion goes through expr()
            return self.load(env, t, 0, allow_taint)
        if kind == "own":
            js = [j for j, o in enumerate(self.parts["outputs"]) if o == t]
            return LoadOwn(output_name(self.draw(st.sampled_from(js)))), False
        if t == "f32":
            return Const("f32", self.draw(const_f32)), False
        if t == "index":
            return Const("index", self.draw(const_index)), False
        return Const("bool", self.draw(st.booleans())), False

    def load(self, env, t, depth, allow_taint):
        if t == "f32":
            name = f32_input_name(self.draw(st.integers(0, len(self.parts["f32_inputs"]) - 1)))
        else:
            name = index_input_name(self.draw(st.integers(0, len(self.parts["index_inputs"]) - 1)))
        size = len(self.parts["f32_inputs" if t == "f32" else "index_inputs"][int(name[1:])])
        modes = ["clamp", "mod", "affine"]
        if any(v.loop and v.interval is not None for v in env["index"]):
            modes += ["affine", "affine"]  # the loop patterns backends optimise
        if not self.checked:
            modes += ["raw", "raw"]
        mode = self.draw(st.sampled_from(modes))
        if mode == "raw":
            return LoadRaw(name, self.raw_index(env, size, depth)), False
        if mode == "affine":
            affine = self.affine(env, size)
            if affine is not None:
                terms, offset = affine
                return LoadAffine(name, terms, offset), False
            mode = "clamp"
        if depth <= 0:  # a load in a leaf: its index is a leaf without another load
            idx, _ = self.leaf(env, "index", False, allow_load=False)
        else:
            idx, _ = self.expr(env, "index", depth, allow_taint=False)
        if AVOID_KNOWN_BUGS and mode == "mod" and env["fold_depth"] > 0:
            # e - (e // n) * n inside a loop: the LLVM loop range check walks the sub and
            # crashes when e is built from an accumulator (bug 1 in test_fuzz_regressions.py)
            mode = "clamp"
        return Load(name, idx, mode), False

    def raw_index(self, env, size, depth):
        """An index that is often, not always, in bounds (unchecked programs)."""
        draw = self.draw
        kinds = ["affine", "affine"]
        loop_vars = [k for k, v in enumerate(env["index"]) if v.interval is not None and v.loop]
        if loop_vars and not AVOID_KNOWN_BUGS:
            kinds += ["quadratic", "quadratic"]  # bug 2 in test_fuzz_regressions.py
        if env["fold_depth"] == 0 or not AVOID_KNOWN_BUGS:
            kinds.append("expr")  # may be an accumulator: bug 1 in test_fuzz_regressions.py
        kind = draw(st.sampled_from(kinds))
        if kind == "affine":
            got = self.affine(env, size, slack=2)
            if got is not None:
                terms, offset = got
                e = Const("index", offset)
                for coef, var in terms:
                    e = Bin("add", Bin("mul", var, Const("index", coef)), e)
                return e
        if kind == "quadratic":  # i * (i + c) + offset: not affine in i
            k = draw(st.sampled_from(loop_vars))
            v = Var("index", k)
            c = draw(st.integers(-2, 4))
            # an offset that puts the values in bounds, give or take 2 at either end
            a, b = env["index"][k].interval
            values = [i * (i + c) for i in range(a, max(a, b) + 1)]  # a > b: the body never runs
            lo, hi = min(values), max(values)
            offset = draw(st.integers(-lo - 2, max(size - 1 - hi + 2, -lo - 2)))
            c = Const("index", c)
            square = Bin("mul", v, Bin("add", v, c)) if draw(st.booleans()) else Bin("mul", Bin("add", c, v), v)
            return Bin("add", square, Const("index", offset))
        if "expr" not in kinds:  # the affine form did not fit; an index from no accumulator
            return Const("index", draw(st.integers(-1, size)))
        e, _ = self.expr(env, "index", min(depth, 2), allow_taint=False)
        return e

    def affine(self, env, size, slack=0):
        """((coef, Var), ...) and an offset with every index in [0, size), or None;
        ``slack`` > 0 lets the range overshoot either end by that much."""
        known = [k for k, v in enumerate(env["index"]) if v.interval is not None]
        if not known:
            return None
        draw = self.draw
        # the innermost loop variable first: that is the pattern a backend may optimise
        picks = [known[-1]] if draw(st.booleans()) else [draw(st.sampled_from(known))]
        if len(known) > 1 and draw(st.booleans()):
            picks.append(draw(st.sampled_from(known)))
        terms, lo, hi = [], 0, 0
        for k in picks:
            coef = draw(st.sampled_from([1, -1, 2, 3, -2, 5]))
            a, b = env["index"][k].interval
            lo, hi = lo + min(coef * a, coef * b), hi + max(coef * a, coef * b)
            terms.append((coef, Var("index", k)))
        if hi - lo > size - 1 + 2 * slack:
            return None
        offset = draw(st.integers(-lo - slack, size - 1 - hi + slack))
        return tuple(terms), offset

    def expr(self, env, t, depth, allow_taint=True):
        """(description, tainted) of an expression of type ``t``."""
        allow_taint = allow_taint or self.exact_exp
        if depth <= 0:
            return self.leaf(env, t, allow_taint)
        kinds = ["leaf"]
        if t in ("index", "f32"):
            kinds += ["bin", "bin", "un", "select", "cast", "load", "load"]
            if env["fold_depth"] < len(MAX_TRIPS) - 1 or env["fold_depth"] == 0:
                kinds.append("fold")
        else:
            kinds += ["cmp", "logic", "not", "select"]
        kind = self.draw(st.sampled_from(kinds))
        d = depth - 1
        draw = self.draw
        # taint rules (exact_exp=False): exp, and the ops whose relative error a tainted
        # operand could blow up, take untainted operands only
        if kind == "leaf":
            return self.leaf(env, t, allow_taint)
        if kind == "bin":
            ops = ["add", "sub", "mul", "div", "max", "min"] + (["div"] if t == "index" else [])
            op = draw(st.sampled_from(ops))
            if t == "index" and op == "div":
                a, _ = self.expr(env, t, d, False)
                guards = ["max1", "select", "const"] + (["span", "span"] if env["spans"] else [])
                guard = draw(st.sampled_from(guards + ([] if self.checked else ["none", "none"])))
                if guard == "span":  # non-zero because this body runs
                    k_start, k_stop = draw(st.sampled_from(env["spans"]))
                    return SpanDiv(a, Var("index", k_start), Var("index", k_stop)), False
                if guard == "const":
                    b = Const("index", draw(st.sampled_from([2, 3, -1, -2, 7, 1, INDEX_MAX, INDEX_MIN])))
                else:
                    b, _ = self.expr(env, t, d, False)
                return IDiv(a, b, guard), False
            keeps = op in ("max", "min")
            a, ta = self.expr(env, t, d, allow_taint and keeps)
            b, tb = self.expr(env, t, d, allow_taint and keeps)
            if keeps and t == "f32" and AVOID_KNOWN_BUGS:
                a, b = _no_negative_zero(a), _no_negative_zero(b)
            return Bin(op, a, b), ta or tb
        if kind == "un":
            ops = ["neg"] + (["exp", "sqrt", "exp"] if t == "f32" else [])
            op = draw(st.sampled_from(ops))
            if op == "exp":
                a, _ = self.expr(env, t, d, allow_taint=self.exact_exp)
                return Un(op, a), True
            a, ta = self.expr(env, t, d, allow_taint)
            return Un(op, a), ta
        if kind == "select":
            c, _ = self.expr(env, "bool", d, False)
            a, ta = self.expr(env, t, d, allow_taint)
            b, tb = self.expr(env, t, d, allow_taint)
            return Select(c, a, b), ta or tb
        if kind == "cast":
            src = draw(st.sampled_from([s for s in ("index", "f32", "bool") if s != t]))
            a, _ = self.expr(env, src, d, False)
            return Cast(t, a), False
        if kind == "load":
            if not self.parts["f32_inputs" if t == "f32" else "index_inputs"]:
                return self.leaf(env, t, allow_taint)
            return self.load(env, t, d, allow_taint)
        if kind == "fold":
            return self.fold_expr(env, t, d, allow_taint)
        if kind == "cmp":
            src = draw(st.sampled_from(["index", "f32", "bool"]))
            ops = ["eq", "ne"] if src == "bool" else ["lt", "le", "gt", "ge", "eq", "ne"]
            op = draw(st.sampled_from(ops))
            a, _ = self.expr(env, src, d, False)
            b, _ = self.expr(env, src, d, False)
            return Cmp(op, a, b), False
        if kind == "logic":
            op = draw(st.sampled_from(["and", "or"]))
            a, _ = self.expr(env, "bool", d, False)
            b, _ = self.expr(env, "bool", d, False)
            return Logic(op, a, b), False
        if kind == "not":
            a, _ = self.expr(env, "bool", d, False)
            return Not(a), False
        raise AssertionError(kind)

    # -- folds
    def bound(self, env, depth):
        kind = self.draw(st.sampled_from(["const", "clamp", "edge", "clamp", "const"]))
        if kind == "const":
            v = self.draw(st.integers(SMALL_LO, SMALL_HI))
            return BConst(v), (v, v)
        if kind == "clamp":
            lo = self.draw(st.integers(SMALL_LO, SMALL_HI))
            hi = self.draw(st.integers(lo, SMALL_HI))
            e, _ = self.expr(env, "index", depth, False)
            return BClamp(e, lo, hi), (lo, hi)
        side = self.draw(st.sampled_from(["max", "min"]))
        off = self.draw(st.integers(0, EDGE_OFFSET))
        v = INDEX_MAX - off if side == "max" else INDEX_MIN + off
        return BEdge(side, off), (v, v)

    def fold_expr(self, env, t, depth, allow_taint):
        fold_depth = env["fold_depth"]
        start, (s_lo, s_hi) = self.bound(env, min(depth, 2))
        stop, (t_lo, t_hi) = self.bound(env, min(depth, 2))
        limit = MAX_TRIPS[min(fold_depth, len(MAX_TRIPS) - 1)]

        def trips(step):
            span = (t_hi - s_lo) if step > 0 else (s_hi - t_lo)
            return 0 if span <= 0 else -(-span // abs(step))

        step = self.draw(st.sampled_from([s for s in STEPS if trips(s) <= limit]))
        n_acc = self.draw(st.integers(1, 2))
        pick = self.draw(st.integers(0, n_acc - 1))
        types = [t if j == pick else self.draw(st.sampled_from(["f32", "index", "bool"])) for j in range(n_acc)]
        inits, acc_taint = [], []
        for ty in types:
            e, tainted = self.expr(env, ty, depth - 1, allow_taint)
            inits.append(e)
            acc_taint.append(tainted)
        # the body's scope: the loop variable, then the accumulators
        inner = {k: (list(v) if isinstance(v, list) else v) for k, v in env.items()}
        if step > 0:
            iv_range = (s_lo, t_hi - 1)
        else:
            iv_range = (t_lo + 1, s_hi)
        small = iv_range[1] - iv_range[0] <= 64 and max(map(abs, iv_range)) <= 2**20
        inner["index"].append(_Var("index", False, iv_range if small else None, loop=True))
        for ty, tainted in zip(types, acc_taint):
            inner[ty].append(_Var(ty, tainted))
        # the bounds: the start is a value the loop variable takes, so it has the same range
        # (while the body runs); stop - start is non-zero while it runs
        k_start = len(inner["index"])
        inner["index"].append(_Var("index", False, iv_range if small else None))
        inner["index"].append(_Var("index", False))
        inner["spans"] = inner["spans"] + [(k_start, k_start + 1)]
        inner["fold_depth"] = fold_depth + 1
        body_depth = max(depth - 1, 2)  # fold_depth bounds the recursion
        store = None
        if env.get("own") and self.draw(st.integers(0, 4)) == 0:
            j = self.draw(st.integers(0, len(self.parts["outputs"]) - 1))
            e, _ = self.expr(inner, self.parts["outputs"][j], body_depth, True)
            store = (output_name(j), e)
        updates = []
        for j, (ty, tainted) in enumerate(zip(types, acc_taint)):
            acc_var = Var(ty, len(env[ty]) + (1 if ty == "index" else 0) + sum(1 for x in types[:j] if x == ty))
            form = self.draw(st.sampled_from(["combine", "free", "keep"])) if ty != "bool" else "free"
            if form == "combine":  # acc op term: what the interpreter vectorises
                op = self.draw(st.sampled_from(["add", "max", "min"]))
                if tainted and not self.exact_exp and op == "add":
                    op = "max"  # a tainted accumulator only goes through ops that keep its error
                # an untainted accumulator must stay untainted: its taint was fixed by init
                term, _ = self.expr(inner, ty, body_depth, tainted and op != "add")
                if op != "add" and ty == "f32" and AVOID_KNOWN_BUGS:  # see _no_negative_zero
                    term = _no_negative_zero(term)
                    inits[j] = _no_negative_zero(inits[j])
                upd = Bin(op, acc_var, term) if self.draw(st.booleans()) else Bin(op, term, acc_var)
            elif form == "keep":
                upd = acc_var
            else:
                upd, _ = self.expr(inner, ty, body_depth, tainted)
            updates.append(upd)
        spelling = "single" if n_acc == 1 and self.draw(st.booleans()) else "tuple"
        fold = Fold(start, stop, step, tuple(inits), tuple(updates), store, spelling)
        return FoldE(fold, pick), acc_taint[pick]


@st.composite
def programs(draw, exact_exp: bool = True, checked: bool = True, max_depth: int = 5) -> ProgramDesc:
    """Descriptions of random programs.  ``checked=False``: loads may be out of bounds
    and index division may divide by zero (run-time errors both backends must report)."""
    ndim = draw(st.integers(1, 3))
    cap = {1: 70, 2: 12, 3: 6}[ndim]
    extents = tuple(draw(st.integers(0, cap)) if draw(st.integers(0, 15)) == 0 else draw(st.integers(1, cap))
                    for _ in range(ndim))
    block = None
    if draw(st.booleans()):
        sizes = [draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16, 32, 64])) for _ in range(ndim)]
        while math.prod(sizes) > 1024:
            sizes[sizes.index(max(sizes))] //= 2
        block = tuple(sizes)
    f32_inputs = tuple(Input(tuple(draw(st.lists(f32_values, min_size=1, max_size=24))), draw(st.integers(1, 64)))
                       for _ in range(draw(st.integers(0, 2))))
    index_inputs = tuple(Input(tuple(draw(st.lists(index_values, min_size=1, max_size=12))),
                               draw(st.integers(1, 40)))
                         for _ in range(draw(st.integers(0, 1))))
    outputs = tuple(draw(st.sampled_from(["f32", "index"])) for _ in range(draw(st.integers(1, 2))))
    parts = {"f32_inputs": f32_inputs, "index_inputs": index_inputs, "outputs": outputs, "extents": extents}
    gen = _Gen(draw, parts, exact_exp, checked)

    # kernel scope: no thread indices, no own element
    env = {"index": [], "f32": [], "bool": [], "fold_depth": 0, "own": False, "spans": []}
    prelude = []
    for _ in range(draw(st.integers(0, 2))):
        t = draw(st.sampled_from(["f32", "index", "bool"]))
        e, tainted = gen.expr(env, t, draw(st.integers(0, 2)))
        prelude.append(Let(e))
        env[t].append(_Var(t, tainted))

    env["own"] = True
    # coordinates, then the linear thread number
    env["index"] += [_Var("index", False, (0, max(e - 1, 0))) for e in extents]
    env["index"].append(_Var("index", False, (0, max(math.prod(extents) - 1, 0))))
    statements = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            t = draw(st.sampled_from(["f32", "index", "bool"]))
            e, tainted = gen.expr(env, t, draw(st.integers(1, max_depth)))
            statements.append(Let(e))
            env[t].append(_Var(t, tainted))
        else:
            j = draw(st.integers(0, len(outputs) - 1))
            e, _ = gen.expr(env, outputs[j], draw(st.integers(1, max_depth)))
            statements.append(Store(output_name(j), e))
    # every output is stored by every thread at the end, so no element is left unwritten
    # (the suite's interpreter memory checks would flag it); out0 last
    for j in reversed(range(len(outputs))):
        e, _ = gen.expr(env, outputs[j], draw(st.integers(1, max_depth)))
        statements.append(Store(output_name(j), e))
    return ProgramDesc(extents, block, f32_inputs, index_inputs, outputs, tuple(prelude), tuple(statements),
                       draw(st.integers(0, 2**16)))
