"""Random cooperative (block-level) accy programs for differential fuzzing (see
tests/test_fuzz_cooperative.py).

A program is drawn as a *description*: frozen attrs classes and tuples, no accy objects.
:func:`build` traces it into an :class:`accy.Program`; :func:`make_arguments` makes its
arguments.  Hypothesis draws and shrinks the description, whose ``repr`` and the program's
text form show what went wrong.

What is drawn
-------------
* a launch of 1-3 grid axes (static extents, ``scalar(index)`` parameters, or
  ``ceil(buffer.size / k)`` expressions) of blocks of 1-3 thread axes; blocks whose
  programs use warp operations have 32, 64, 96 or 128 threads, others 1 to 128;
* a per-thread state ``(f: f32, i: i32)``, loaded from ``x[g]`` and ``xi[g]`` (``g`` the
  thread's global number) and stored to ``out_f[g]``, ``out_i[g]`` at the end;
* a sequence of *stages* transforming the state, nested at most two deep:
  pointwise math (add, sub, mul, div, max, min, bit ops, select, casts), thread-dependent
  ``if_`` and loops around pointwise stages and global atomics, uniform loops (static,
  block-dependent, loaded at a block-uniform index, broadcast by thread 0 through shared
  memory, or run-time trip counts; steps of either sign) and uniform ``if_`` branches
  (conditions of the same kinds) around anything, exchanges through shared or
  global memory (each thread writes its own slot, barrier, reads another thread's,
  barrier) of f32, f64, f16, bf16, i32, u32, i8 and u16, shuffles (idx, xor, down, up;
  constant, per-thread or per-iteration lane counts, including counts outside the warp) and warp and
  block reductions of those and i64, and atomics on global buffers and shared arrays of
  i32, u32, i64, u64, index, f32, f64, f16 and bf16 (a shared array is cleared, barrier,
  updated, barrier, read, barrier);
* the ptx backend's target: sm_75, sm_80 or sm_90 (atomics lower differently).

Race-free and deterministic by construction
-------------------------------------------
The order in which a GPU applies atomics is unspecified, so only order-independent
results are kept, and the generator decides which by evaluating each atomic's element
index for every thread in Python (:meth:`Lin.values`):

* where every thread updates its own element (the index is injective), any op on any
  value is deterministic, and the returned old value is folded into the state;
* where threads share an element: integer add/max/min (wrapping sums commute), float
  max/min (IEEE maximum/minimum commute, NaN included), f32/f64 add of small integers
  (``-8..7``: every partial sum is exact; f16 and bf16 atomics, whose sums would round
  past 2048 and 256, are only drawn one element per thread), exchange of a value that depends only on the
  element, and compare-and-swap from the known initial value to a value that depends
  only on the element (whoever wins, the element ends the same; the number of winners,
  counted by a second atomic, is the number of distinct elements touched).  The old
  values are then dropped.

Shared and global exchanges put a barrier between each thread's write and the other
threads' reads and another after the reads (a later stage, or the next iteration, may
write the slots again).  Every barrier and warp operation sits under uniform control
only: loop bounds and branch conditions depend on block coordinates and scalars, never on
the thread.

Tolerance: none.  The programs use no transcendental functions, every op is IEEE-exact
or integer, the order of a ``warp_reduce``/``block_reduce`` is fixed by the IR (a
butterfly of ``shuffle_xor`` then the warps in order: docs/ir.md), and atomics are used
only where every order gives the same bits, so all backends must agree bit for bit
(NaN payloads aside).  One exception made exact by construction: PTX's ``atom.add.f32``
on global memory flushes subnormals (docs/limitations.md), so a value a single thread adds
to an f32 element is first set to zero when it is below 1e-30 in magnitude (the element
starts at a small integer, so every sum is zero or a multiple of 2^-123: never subnormal).

Planted bugs (:func:`planted_programs`) take such a program and break one thing the
race detector must catch: a barrier dropped between a write and another thread's read, a
final store two threads make to one element, a shared read moved before the stage's
write, an atomic turned into a plain read-modify-write.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
from hypothesis import strategies as st

from accy import (Program, axis, bf16, boolean, dynamic_buffer, f16, f32, f64, i8, i32, i64, index, scalar, u16, u32,
                  u64)

DTYPES = {"f16": f16, "bf16": bf16, "f32": f32, "f64": f64, "i8": i8, "u16": u16, "i32": i32, "u32": u32,
          "i64": i64, "u64": u64, "index": index}
EXCHANGE_DTYPES = ("f32", "f64", "i32", "u32", "f16", "bf16", "i8", "u16")
SHUFFLE_DTYPES = ("f32", "f64", "i32", "u32", "i64", "f16", "bf16", "i8")
ATOMIC_DTYPES = ("i32", "u32", "i64", "u64", "index", "f32", "f64", "f16", "bf16")
NARROW_FLOATS = ("f16", "bf16")  # atomics: add only, one thread per element (their sums round early)
ARCHS = ("sm_75", "sm_80", "sm_90")
WARP = 32
MAX_BLOCKS = 8
GRID_NAMES = ("bx", "by", "bz")
THREAD_NAMES = ("tx", "ty", "tz")
THREAD_SOURCES = ("t", "g", "lane", "warp", "b") + GRID_NAMES + THREAD_NAMES
BLOCK_SOURCES = ("b",) + GRID_NAMES
TINY = 1e-30  # a single adder's f32 value below this becomes 0 (PTX's atom.add.f32 flushes subnormals)


def is_float(dtype: str) -> bool:
    return dtype in ("f16", "bf16", "f32", "f64")


def is_signed(dtype: str) -> bool:
    return is_float(dtype) or dtype.startswith("i")


# -- the launch --------------------------------------------------------------------------------------


@attrs.frozen
class GridAxis:
    """A grid axis of ``extent`` blocks.  ``source``: "static" (a Python int), "scalar" (a
    ``scalar(index)`` parameter) or "size" (``(len.size + per - 1) // per`` for a buffer of
    ``extent * per - slack`` elements)."""

    extent: int
    source: str = "static"
    per: int = 1
    slack: int = 0


@attrs.frozen
class Shape:
    grid: tuple[GridAxis, ...]  # x first
    threads: tuple[int, ...]  # x first

    @property
    def blocks(self) -> int:
        return math.prod(a.extent for a in self.grid)

    @property
    def block_threads(self) -> int:
        return math.prod(self.threads)

    @property
    def total(self) -> int:
        return self.blocks * self.block_threads

    @property
    def warps(self) -> bool:
        return self.block_threads % WARP == 0

    def sources(self, block_only: bool = False) -> tuple[str, ...]:
        names = GRID_NAMES[:len(self.grid)] + ("b",)
        if not block_only:
            names += THREAD_NAMES[:len(self.threads)] + ("t", "g", "lane", "warp")
        return names

    def coordinates(self) -> dict[str, np.ndarray]:
        """Every index source, shaped (blocks, threads per block): what :class:`Lin` evaluates."""
        blocks, threads = np.arange(self.blocks)[:, None], np.arange(self.block_threads)[None, :]
        shape = (self.blocks, self.block_threads)
        out = {"b": np.broadcast_to(blocks, shape), "t": np.broadcast_to(threads, shape),
               "g": blocks * self.block_threads + threads, "lane": np.broadcast_to(threads % WARP, shape),
               "warp": np.broadcast_to(threads // WARP, shape)}
        rest = blocks
        for name, a in zip(GRID_NAMES, self.grid):
            out[name] = np.broadcast_to(rest % a.extent, shape)
            rest = rest // a.extent
        rest = threads
        for name, n in zip(THREAD_NAMES, self.threads):
            out[name] = np.broadcast_to(rest % n, shape)
            rest = rest // n
        return out


# -- index expressions ---------------------------------------------------------------------------------


@attrs.frozen
class Lin:
    """``sum(coef * source) + const``, an index, reduced floor-modulo where it is used.
    The source ``loop`` (the innermost uniform loop's counter, 0 outside loops) cannot be
    evaluated in Python: such expressions are only drawn where nothing needs their values."""

    terms: tuple[tuple[str, int], ...]
    const: int = 0

    def sources(self) -> set[str]:
        return {name for name, _ in self.terms}

    def build(self, env: "Env"):
        value = None
        for name, coef in self.terms:
            term = env.source(name) * coef
            value = term if value is None else value + term
        return env.index_const(self.const) if value is None else value + self.const

    def values(self, coords: dict[str, np.ndarray]) -> np.ndarray:
        value = np.full(next(iter(coords.values())).shape, self.const, np.int64)
        for name, coef in self.terms:
            value = value + coef * coords[name]
        return value


# -- operands and pointwise stages -------------------------------------------------------------------------


@attrs.frozen
class Operand:
    """A value of the state's type: the state's ``f`` or ``i`` (cast across), a constant,
    an index expression (cast), ``x``/``xi`` loaded at an index expression, or the innermost
    uniform loop's counter (0 outside loops)."""

    kind: str  # f i const lin x xi loop
    const: Any = 0
    lin: Lin | None = None


@attrs.frozen
class Arith:
    """``state[target] = op(state[target], operand)`` (or the operands swapped)."""

    target: str  # "f" or "i"
    op: str
    operand: Operand
    swap: bool = False


@attrs.frozen
class Choose:
    """``state[target] = select(cmp(state[target], against), if_true, if_false)``."""

    target: str
    cmp: str
    against: Operand
    if_true: Operand
    if_false: Operand


@attrs.frozen
class Diverge:
    """Thread-dependent control around pointwise stages and global atomics: ``if_`` on
    ``split % modulus == 0`` (then ``body``, else ``otherwise``) or a loop of
    ``split % modulus`` trips."""

    kind: str  # "if" or "loop"
    split: Lin
    modulus: int
    body: tuple
    otherwise: tuple = ()


# -- cooperative stages --------------------------------------------------------------------------------------


@attrs.frozen
class Exchange:
    """Each thread writes ``cast(state[source], dtype)`` to its own slot (``offset + t`` of a
    shared array of ``block_threads + offset + pad`` elements, or ``g`` of a global scratch
    buffer), barrier, reads slot ``read % block_threads`` of its block, barrier; combines the
    value into ``state[into]``."""

    space: str  # "shared" or "global"
    dtype: str
    source: str
    read: Lin
    into: str
    combine: str
    offset: int = 0
    pad: int = 0


@attrs.frozen
class Shuffle:
    """``shuffle``/``shuffle_xor``/``shuffle_down``/``shuffle_up`` of ``cast(state[source], dtype)``
    by a constant (``delta``) or a per-thread count (``lin % 36 - 2``, ``lin`` as the lane for idx)."""

    mode: str  # idx xor down up
    dtype: str
    source: str
    into: str
    combine: str
    delta: int = 0
    lin: Lin | None = None


@attrs.frozen
class Reduce:
    scope: str  # "warp" or "block"
    op: str  # sum max min
    dtype: str
    source: str
    into: str
    combine: str


@attrs.frozen
class Atomic:
    """An atomic ``kind`` on element ``where % bins`` of a global buffer (``atom<id>``, every
    element starting at ``init``) or a shared array (cleared to ``init`` by the block, barrier,
    the atomic, barrier, each thread reads element ``read % bins`` into ``state[into]``,
    barrier).

    ``private``: the generator found ``where % bins`` injective over the threads it may run on
    (the launch's, or the block's for shared memory), so any value is fine and ``keep_old``
    folds the returned old value into ``state[into]``.  Otherwise only order-independent
    updates are made (the module docstring lists them)."""

    space: str
    kind: str  # add max min exchange cas
    dtype: str
    bins: int
    where: Lin
    source: str
    init: Any
    private: bool
    keep_old: bool = False
    into: str = "f"
    combine: str = "add"
    read: Lin | None = None  # shared arrays only
    cas_hit: bool = True  # private cas: compare with the element's current value (else a constant)
    shift: int = 0  # shared-element exchange / cas: the value stored is cast(bin + shift)


@attrs.frozen
class Trips:
    """A uniform trip count: ``static`` (``count``), ``block`` (``lin % count`` of block
    coordinates), ``load`` (``xi[lin % size] % count``: a load at a block-uniform index is
    uniform too), ``broadcast`` (thread 0 publishes ``state.i % count`` through shared
    memory: barrier, every thread reads it, barrier) or ``scalar`` (the ``trips`` parameter)."""

    kind: str
    count: int = 1
    lin: Lin | None = None

    def values(self, coords, desc) -> np.ndarray | None:
        """Per block; None where Python cannot tell (``broadcast``)."""
        blocks = coords["b"][:, 0]
        if self.kind == "broadcast":
            return None
        if self.kind == "static":
            return np.full(blocks.shape, self.count)
        if self.kind == "scalar":
            return np.full(blocks.shape, desc.trips)
        at = self.lin.values(coords)[:, 0]
        if self.kind == "load":
            xi = input_data(desc)[1]
            return np.mod(xi[np.mod(at, xi.size)].astype(np.int64), self.count)
        return np.mod(at, self.count)


@attrs.frozen
class Loop:
    """``fold_range(start, start + trips * step, step, (f, i), body)``: uniform for the block."""

    trips: Trips
    body: tuple
    start: int = 0
    step: int = 1


@attrs.frozen
class Cond:
    """A uniform condition: ``block`` (``lin % modulus == pick`` of block coordinates),
    ``load`` (``x[lin % size] > 0``), ``broadcast`` (thread 0's ``state.f > 0``, published
    through shared memory as for :class:`Trips`), ``flag`` (the bool parameter) or
    ``scalar`` (``trips > pick``)."""

    kind: str
    lin: Lin | None = None
    modulus: int = 2
    pick: int = 0

    def values(self, coords, desc) -> np.ndarray | None:
        blocks = coords["b"][:, 0]
        if self.kind == "broadcast":
            return None
        if self.kind == "flag":
            return np.full(blocks.shape, desc.flag)
        if self.kind == "scalar":
            return np.full(blocks.shape, desc.trips > self.pick)
        at = self.lin.values(coords)[:, 0]
        if self.kind == "load":
            x = input_data(desc)[0]
            return x[np.mod(at, x.size)] > 0
        return np.mod(at, self.modulus) == self.pick


@attrs.frozen
class Branch:
    cond: Cond
    then: tuple
    otherwise: tuple


@attrs.frozen
class CoopProgram:
    shape: Shape
    stages: tuple
    trips: int = 1  # the value of the ``trips`` scalar
    flag: bool = True  # the value of the ``flag`` scalar
    seed: int = 0
    floats: str = "normal"  # the data in x: ints eighths normal specials
    ints: str = "small"  # the data in xi: small wide
    arch: str = "sm_80"  # the ptx backend's target


@attrs.frozen
class Bug:
    """A planted bug: ``kind`` at the stage with pre-order number ``site`` (-1: the final store).

    kinds: ``drop_barrier`` (the barrier after an exchange's writes, or after a shared
    atomic's clearing, ``phase`` "init", or after its updates, ``phase`` "update"),
    ``racy_store`` (out_f[g // 2]), ``read_first`` (a shared exchange reads before it writes),
    ``plain_atomic`` (a global atomic as a plain read-modify-write).

    A later stage may overwrite the state a racy read fed, and the optimiser then removes
    the read (as a GPU compiler would): so the read is also stored to an output of its own,
    ``witness[g]``."""

    kind: str
    site: int = -1
    phase: str = ""

    @property
    def witnessed(self) -> bool:
        return self.kind == "read_first" or (self.kind == "drop_barrier" and self.phase != "init")


@attrs.frozen
class Planted:
    program: CoopProgram
    bug: Bug
    expect: str  # "RaceError" or "UninitializedError"


# -- walking descriptions ------------------------------------------------------------------------------------


def children(stage) -> tuple[tuple, ...]:
    if isinstance(stage, Loop):
        return (stage.body,)
    if isinstance(stage, Branch):
        return (stage.then, stage.otherwise)
    if isinstance(stage, Diverge):
        return (stage.body, stage.otherwise)
    return ()


def walk(stages):
    """Every stage in pre-order: the order :func:`build` numbers them in."""
    for stage in stages:
        yield stage
        for group in children(stage):
            yield from walk(group)


def uses_warps(stages) -> bool:
    return any(isinstance(s, (Shuffle, Reduce)) for s in walk(stages))


def reach(desc: CoopProgram) -> list[tuple[Any, np.ndarray, bool]]:
    """Per stage in pre-order: the blocks that run it, and whether it sits under
    thread-dependent control (then some of their threads may not)."""
    coords = desc.shape.coordinates()
    out = []

    def visit(stages, mask, divergent):
        for stage in stages:
            out.append((stage, mask, divergent))
            if isinstance(stage, Loop):  # unknown trip counts and conditions: reached by no block
                trips = stage.trips.values(coords, desc)
                visit(stage.body, mask & (False if trips is None else trips >= 1), divergent)
            elif isinstance(stage, Branch):
                cond = stage.cond.values(coords, desc)
                visit(stage.then, mask & (False if cond is None else cond), divergent)
                visit(stage.otherwise, mask & (False if cond is None else ~cond), divergent)
            elif isinstance(stage, Diverge):
                visit(stage.body, mask, True)
                visit(stage.otherwise, mask, True)

    visit(desc.stages, np.ones(desc.shape.blocks, bool), False)
    return out


# -- building ------------------------------------------------------------------------------------------------


def params_of(desc: CoopProgram, bug: Bug | None = None) -> dict:
    params = {"out_f": dynamic_buffer(f32), "out_i": dynamic_buffer(i32),
              "x": dynamic_buffer(f32), "xi": dynamic_buffer(i32),
              "trips": scalar(index), "flag": scalar(boolean)}
    if bug is not None and bug.witnessed:
        params["witness"] = dynamic_buffer(f64)
    for j, a in enumerate(desc.shape.grid):
        if a.source == "scalar":
            params[f"grid{j}"] = scalar(index)
        elif a.source == "size":
            params[f"len{j}"] = dynamic_buffer(i32)
    for k, stage in enumerate(walk(desc.stages)):
        if isinstance(stage, Exchange) and stage.space == "global":
            params[f"scratch{k}"] = dynamic_buffer(DTYPES[stage.dtype])
        if isinstance(stage, Atomic):
            if stage.space == "global":
                params[f"atom{k}"] = dynamic_buffer(DTYPES[stage.dtype])
            if stage.kind == "cas" and not stage.private:
                params[f"count{k}"] = dynamic_buffer(i32)
    return params


def input_data(desc: CoopProgram) -> tuple[np.ndarray, np.ndarray]:
    """The inputs ``x`` (f32) and ``xi`` (i32), one element per thread."""
    rng = np.random.default_rng(desc.seed)
    n = desc.shape.total
    if desc.floats == "ints":
        x = rng.integers(-8, 9, n).astype(np.float32)
    elif desc.floats == "eighths":
        x = (rng.integers(-128, 129, n) / 8).astype(np.float32)
    else:
        x = (rng.standard_normal(n) * 4).astype(np.float32)
        if desc.floats == "specials":
            special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e30, -1e30, 3e38], np.float32)
            pick = rng.random(n) < 0.3
            x[pick] = rng.choice(special, int(pick.sum()))
    if desc.ints == "wide":
        xi = rng.integers(-2**31, 2**31, n).astype(np.int32)
    else:
        xi = rng.integers(-16, 17, n).astype(np.int32)
    return x, xi


def make_arguments(desc: CoopProgram, bug: Bug | None = None) -> list:
    """Arrays and scalars in parameter order."""
    n = desc.shape.total
    x, xi = input_data(desc)
    values = {"out_f": np.zeros(n, np.float32), "out_i": np.zeros(n, np.int32), "x": x, "xi": xi,
              "trips": desc.trips, "flag": desc.flag, "witness": np.zeros(n, np.float64)}
    for j, a in enumerate(desc.shape.grid):
        if a.source == "scalar":
            values[f"grid{j}"] = a.extent
        elif a.source == "size":
            values[f"len{j}"] = np.zeros(a.extent * a.per - a.slack, np.int32)
    for k, stage in enumerate(walk(desc.stages)):
        if isinstance(stage, Exchange) and stage.space == "global":
            values[f"scratch{k}"] = np.zeros(n, DTYPES[stage.dtype].numpy)
        if isinstance(stage, Atomic):
            if stage.space == "global":
                values[f"atom{k}"] = np.full(stage.bins, stage.init, DTYPES[stage.dtype].numpy)
            if stage.kind == "cas" and not stage.private:
                values[f"count{k}"] = np.zeros(1, np.int32)
    return [values[name] for name in params_of(desc, bug)]


@attrs.define
class Env:
    """What the stages see while the body is traced."""

    desc: CoopProgram
    args: Any
    bug: Bug | None
    sources: dict = attrs.field(factory=dict)  # index source name -> traced index
    shared: dict = attrs.field(factory=dict)  # stage number -> shared array
    loops: list = attrs.field(factory=list)  # counters of the enclosing uniform loops
    counter: int = 0

    def source(self, name: str):
        if name == "loop":
            return self.loops[-1] if self.loops else self.sources["zero"]
        return self.sources[name]

    def index_const(self, value: int):
        return self.sources["zero"] + value

    def planted(self, k: int, kind: str, phase: str = "") -> bool:
        b = self.bug
        return b is not None and b.kind == kind and b.site == k and b.phase == phase

    def witness(self, inner, k: int, value) -> None:
        """Keep a planted bug's read alive (see :class:`Bug`)."""
        if self.bug is not None and self.bug.site == k and self.bug.witnessed:
            self.args.witness[self.sources["g"]] = inner.cast(value, f64)


def build(desc: CoopProgram, bug: Bug | None = None) -> Program:
    shape = desc.shape

    def body(k, args):
        extents = []
        for j, a in enumerate(shape.grid):
            if a.source == "scalar":
                extents.append(args.param(f"grid{j}"))
            elif a.source == "size":
                extents.append((args.param(f"len{j}").size + (a.per - 1)) // a.per)
            else:
                extents.append(a.extent)
        grid = tuple(axis(name, e) for name, e in zip(GRID_NAMES, extents))
        threads = tuple(axis(name, n) for name, n in zip(THREAD_NAMES, shape.threads))

        def block_body(inner, block, thread):
            env = Env(desc, args, bug)
            for k_, stage in enumerate(walk(desc.stages)):
                need = _shared_need(stage, shape)
                if need is not None:
                    env.shared[k_] = inner.shared(DTYPES[need[0]], need[1], f"s{k_}")
            src = env.sources
            b, stride = None, 1
            for name, e in zip(GRID_NAMES, extents):
                src[name] = block[name]
                b = block[name] if b is None else b + block[name] * stride
                stride = e * stride
            t, stride = None, 1
            for name, n in zip(THREAD_NAMES, shape.threads):
                src[name] = thread[name]
                t = thread[name] if t is None else t + thread[name] * stride
                stride *= n
            src["b"], src["t"] = b, t
            src["g"] = b * shape.block_threads + t
            src["lane"], src["warp"] = inner.lane, inner.warp
            src["zero"] = inner.constant(0, index)  # uniform: t * 0 would count as thread-dependent
            for k_, stage in enumerate(walk(desc.stages)):
                if isinstance(stage, Exchange) and stage.space == "global":
                    # each thread clears its slot first: where the exchange's read is dead, the
                    # optimised kernel only writes the buffer, which must then be written everywhere
                    args.param(f"scratch{k_}")[src["g"]] = inner.constant(0, DTYPES[stage.dtype])
            state = {"f": args.x[src["g"]], "i": args.xi[src["g"]]}
            state = run_stages(inner, env, desc.stages, state)
            where = src["g"] // 2 if bug is not None and bug.kind == "racy_store" else src["g"]
            args.out_f[where] = state["f"]
            args.out_i[src["g"]] = state["i"]

        k.for_each_block(grid=grid, threads=threads, body=block_body)

    return Program("coop", params_of(desc, bug), body)


def _shared_need(stage, shape: Shape):
    if isinstance(stage, Loop) and stage.trips.kind == "broadcast":
        return "i32", 1
    if isinstance(stage, Branch) and stage.cond.kind == "broadcast":
        return "f32", 1
    if isinstance(stage, Exchange) and stage.space == "shared":
        return stage.dtype, shape.block_threads + stage.offset + stage.pad
    if isinstance(stage, Atomic) and stage.space == "shared":
        return stage.dtype, stage.bins
    return None


def run_stages(inner, env: Env, stages, state: dict) -> dict:
    for stage in stages:
        k = env.counter
        env.counter += 1
        state = BUILDERS[type(stage)](inner, env, k, stage, dict(state))
    return state


# -- the stages' tracing ---------------------------------------------------------------------------------------


def _state_type(name: str):
    return f32 if name == "f" else i32


def operand(inner, env: Env, op: Operand, state: dict, target: str):
    dtype = _state_type(target)
    if op.kind in ("f", "i"):
        v = state[op.kind]
        return v if op.kind == target else inner.cast(v, dtype)
    if op.kind == "const":
        return inner.constant(op.const, dtype)
    if op.kind == "lin":
        return inner.cast(op.lin.build(env), dtype)
    if op.kind == "x":
        v = env.args.x[op.lin.build(env) % env.args.x.size]
        return v if target == "f" else inner.cast(v, dtype)
    if op.kind == "xi":
        v = env.args.xi[op.lin.build(env) % env.args.xi.size]
        return v if target == "i" else inner.cast(v, dtype)
    if op.kind == "loop":
        return inner.cast(env.loops[-1] if env.loops else env.index_const(0), dtype)
    raise ValueError(op.kind)


FLOAT_OPS = ("add", "sub", "mul", "div", "max", "min")
INT_OPS = ("add", "sub", "mul", "max", "min", "xor", "and", "or", "shr", "shl")


def binary(inner, op: str, a, b):
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "max":
        return inner.max(a, b)
    if op == "min":
        return inner.min(a, b)
    if op == "xor":
        return a ^ b
    if op == "and":
        return a & b
    if op == "or":
        return a | b
    if op == "shr":
        return a >> b
    if op == "shl":
        return a << b
    raise ValueError(op)


def combine(inner, state: dict, into: str, how: str, value, dtype: str) -> dict:
    """``state[into] = cast(how(cast(state[into], dtype), value))``."""
    d = DTYPES[dtype]
    mine = inner.cast(state[into], d)
    new = value if how == "replace" else binary(inner, how, mine, value)
    state[into] = inner.cast(new, _state_type(into))
    return state


def build_arith(inner, env, k, s: Arith, state):
    a, b = state[s.target], operand(inner, env, s.operand, state, s.target)
    state[s.target] = binary(inner, s.op, *((b, a) if s.swap else (a, b)))
    return state


def build_choose(inner, env, k, s: Choose, state):
    a, b = state[s.target], operand(inner, env, s.against, state, s.target)
    cond = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b}[s.cmp]
    state[s.target] = inner.select(cond, operand(inner, env, s.if_true, state, s.target),
                                   operand(inner, env, s.if_false, state, s.target))
    return state


def _region(env: Env, stages, loop_var=None):
    """A body for fold_range or if_ running ``stages`` on the state it is handed."""
    def run(inner, state_tuple):
        if loop_var is not None:
            env.loops.append(loop_var)
        try:
            state = run_stages(inner, env, stages, {"f": state_tuple[0], "i": state_tuple[1]})
        finally:
            if loop_var is not None:
                env.loops.pop()
        return state["f"], state["i"]
    return run


def build_diverge(inner, env, k, s: Diverge, state):
    split = s.split.build(env) % s.modulus
    init = (state["f"], state["i"])
    if s.kind == "if":
        f, i = inner.if_(split == 0, lambda inner: _region(env, s.body)(inner, init),
                         lambda inner: _region(env, s.otherwise)(inner, init))
    else:
        f, i = inner.fold_range(0, split, 1, init, lambda inner, j, acc: _region(env, s.body)(inner, acc))
    return {"f": f, "i": i}


def broadcast(inner, env: Env, k: int, value):
    """Thread 0's ``value`` for every thread of the block, through shared memory: a load at
    a uniform index, so a barrier may depend on it."""
    cell = env.shared[k]
    inner.if_(env.source("t") == 0, lambda inner: cell.__setitem__(0, value))
    inner.barrier()
    got = cell[0]
    inner.barrier()  # everyone has read it before thread 0 may write it again
    return got


def build_loop(inner, env, k, s: Loop, state):
    trips = s.trips
    if trips.kind == "broadcast":
        n = inner.cast(broadcast(inner, env, k, state["i"] % trips.count), index)
    elif trips.kind == "static":
        n = trips.count
    elif trips.kind == "scalar":
        n = env.args.trips
    elif trips.kind == "load":
        n = inner.cast(env.args.xi[trips.lin.build(env) % env.args.xi.size], index) % trips.count
    else:
        n = trips.lin.build(env) % trips.count
    stop = s.start + n * s.step
    f, i = inner.fold_range(s.start, stop, s.step, (state["f"], state["i"]),
                            lambda inner, j, acc: _region(env, s.body, j)(inner, acc))
    return {"f": f, "i": i}


def build_branch(inner, env, k, s: Branch, state):
    c = s.cond
    if c.kind == "broadcast":
        cond = broadcast(inner, env, k, state["f"]) > 0.0
    elif c.kind == "flag":
        cond = env.args.flag
    elif c.kind == "scalar":
        cond = env.args.trips > c.pick
    elif c.kind == "load":
        cond = env.args.x[c.lin.build(env) % env.args.x.size] > 0.0
    else:
        cond = (c.lin.build(env) % c.modulus) == c.pick
    init = (state["f"], state["i"])
    f, i = inner.if_(cond, lambda inner: _region(env, s.then)(inner, init),
                     lambda inner: _region(env, s.otherwise)(inner, init))
    return {"f": f, "i": i}


def build_exchange(inner, env, k, s: Exchange, state):
    n = env.desc.shape.block_threads
    value = inner.cast(state[s.source], DTYPES[s.dtype])
    t, g, b = env.source("t"), env.source("g"), env.source("b")
    slot = s.read.build(env) % n
    if s.space == "shared":
        memory = env.shared[k]
        mine, theirs = t + s.offset, slot + s.offset
    else:
        memory = env.args.param(f"scratch{k}")
        mine, theirs = g, b * n + slot
    if env.planted(k, "read_first"):
        got = memory[theirs]
        memory[mine] = value
    else:
        memory[mine] = value
        if not env.planted(k, "drop_barrier"):
            inner.barrier()
        got = memory[theirs]
    env.witness(inner, k, got)
    inner.barrier()  # before anyone writes the slots again
    return combine(inner, state, s.into, s.combine, got, s.dtype)


def build_shuffle(inner, env, k, s: Shuffle, state):
    value = inner.cast(state[s.source], DTYPES[s.dtype])
    if s.lin is None:
        delta = s.delta
    elif s.mode == "idx":
        delta = s.lin.build(env)
    else:
        delta = s.lin.build(env) % 36 - 2
    fn = {"idx": inner.shuffle, "xor": inner.shuffle_xor, "down": inner.shuffle_down, "up": inner.shuffle_up}[s.mode]
    return combine(inner, state, s.into, s.combine, fn(value, delta), s.dtype)


def build_reduce(inner, env, k, s: Reduce, state):
    value = inner.cast(state[s.source], DTYPES[s.dtype])
    fn = inner.warp_reduce if s.scope == "warp" else inner.block_reduce
    return combine(inner, state, s.into, s.combine, fn(value, s.op), s.dtype)


def _small_integer(inner, value, dtype):
    """A value in -8..7 of ``dtype``, derived from ``value`` (exact to add in any order)."""
    return inner.cast((inner.cast(value, i32) & 15) - 8, DTYPES[dtype])


def build_atomic(inner, env, k, s: Atomic, state):
    d = DTYPES[s.dtype]
    memory = env.shared[k] if s.space == "shared" else env.args.param(f"atom{k}")
    if s.space == "shared":
        n = env.desc.shape.block_threads
        inner.for_range(env.source("t"), s.bins, n, lambda inner, j: memory.__setitem__(j, inner.constant(s.init, d)))
        if not env.planted(k, "drop_barrier", "init"):
            inner.barrier()
    element = s.where.build(env) % s.bins
    value = inner.cast(state[s.source], d)
    per_element = inner.cast(element, d) + s.shift  # a value that depends only on the element
    if s.kind == "add" and is_float(s.dtype):
        if not s.private:
            value = _small_integer(inner, state[s.source], s.dtype)
        elif s.dtype == "f32":
            value = inner.select(abs(value) < TINY, inner.constant(0.0, d), value)
    if s.kind == "exchange" and not s.private:
        value = per_element
    old = None
    if env.planted(k, "plain_atomic"):
        current = memory[element]
        if s.kind == "cas":
            value = per_element
        memory[element] = value if s.kind in ("exchange", "cas") else binary(inner, s.kind, current, value)
    elif s.kind == "cas":
        if s.private:
            compare = memory[element] if s.cas_hit else inner.constant(s.init, d) + 1
            old = inner.atomic_cas(memory, element, compare, value)
        else:
            got = inner.atomic_cas(memory, element, inner.constant(s.init, d), per_element)
            inner.atomic_add(env.args.param(f"count{k}"), 0, inner.cast(got != per_element, i32))
    else:
        old = getattr(inner, f"atomic_{s.kind}")(memory, element, value)
    if s.private and s.keep_old and old is not None:
        state = combine(inner, state, s.into, s.combine, old, s.dtype)
    if s.space == "shared":
        if not env.planted(k, "drop_barrier", "update"):
            inner.barrier()
        got = memory[s.read.build(env) % s.bins]
        env.witness(inner, k, got)
        inner.barrier()  # before the next clearing
        state = combine(inner, state, s.into, "add" if s.keep_old else s.combine, got, s.dtype)
    return state


BUILDERS = {Arith: build_arith, Choose: build_choose, Diverge: build_diverge, Loop: build_loop,
            Branch: build_branch, Exchange: build_exchange, Shuffle: build_shuffle, Reduce: build_reduce,
            Atomic: build_atomic}


# -- strategies ------------------------------------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def shapes(draw, warps: bool | None = None) -> Shape:
    warps = draw(st.booleans()) if warps is None else warps
    if warps:
        total = draw(st.sampled_from([32, 64, 96, 128]))
    else:
        total = draw(st.one_of(st.integers(1, 8), st.integers(9, 128)))
    dims = draw(st.integers(1, 3))
    threads = []
    rest = total
    for _ in range(dims - 1):
        d = draw(st.sampled_from(_divisors(rest)))
        threads.append(d)
        rest //= d
    threads.append(rest)
    if len(threads) == 3 and threads[2] > 64:  # CUDA's block z is at most 64 (x and y: 1024)
        threads[0], threads[2] = threads[2], threads[0]
    n_grid = draw(st.integers(1, 3))
    grid, blocks = [], 1
    for _ in range(n_grid):
        extent = draw(st.integers(1, max(1, min(4, MAX_BLOCKS // blocks))))
        blocks *= extent
        source = draw(st.sampled_from(["static", "static", "scalar", "size"]))
        per = draw(st.integers(1, 4)) if source == "size" else 1
        slack = draw(st.integers(0, per - 1)) if source == "size" else 0
        grid.append(GridAxis(extent, source, per, slack))
    return Shape(tuple(grid), tuple(threads))


def lins(shape: Shape, *, block_only: bool = False, max_terms: int = 2, in_loop: bool = False):
    sources = shape.sources(block_only) + (("loop",) if in_loop else ())
    generic = st.builds(Lin, st.lists(st.tuples(st.sampled_from(sources), st.integers(-3, 5)), min_size=0 if
                                      block_only else 1, max_size=max_terms).map(tuple), st.integers(-8, 40))
    if block_only:
        return generic
    n = shape.block_threads
    special = st.sampled_from([
        Lin((("t", -1),), n - 1),  # reversed
        Lin((("t", 1),), 1),  # neighbour
        Lin((("t", 1),), n // 2),  # half-way round
        Lin((("t", 2),), 1),  # strided
        Lin((("lane", 1), ("warp", 32)), 5),
    ] + ([Lin((("tx", shape.threads[1]), ("ty", 1)))] if len(shape.threads) >= 2 else []))
    return st.one_of(special, generic)


FLOAT_CONSTS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -0.125, 7.0, 1e10, float("inf")]


def operands(shape: Shape, target: str, in_loop: bool):
    kinds = ["f", "i", "const", "lin", "x", "xi"] + (["loop"] if in_loop else [])
    const = st.sampled_from(FLOAT_CONSTS) if target == "f" else st.integers(-40, 40)

    @st.composite
    def draw_operand(draw):
        kind = draw(st.sampled_from(kinds))
        if kind == "const":
            return Operand(kind, draw(const))
        if kind in ("lin", "x", "xi"):
            return Operand(kind, lin=draw(lins(shape, in_loop=in_loop)))
        return Operand(kind)

    return draw_operand()


@st.composite
def pointwise(draw, shape: Shape, in_loop: bool):
    target = draw(st.sampled_from("fi"))
    if draw(st.integers(0, 3)) == 0:
        return Choose(target, draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"])),
                      *(draw(operands(shape, target, in_loop)) for _ in range(3)))
    op = draw(st.sampled_from(FLOAT_OPS if target == "f" else INT_OPS))
    return Arith(target, op, draw(operands(shape, target, in_loop)), draw(st.booleans()))


def _combines(dtype: str):
    return st.sampled_from(["add", "sub", "mul", "max", "min", "replace"] + ([] if is_float(dtype) else ["xor"]))


@st.composite
def exchanges(draw, shape: Shape, in_loop: bool = False):
    dtype = draw(st.sampled_from(EXCHANGE_DTYPES))
    return Exchange(draw(st.sampled_from(["shared", "shared", "global"])), dtype, draw(st.sampled_from("fi")),
                    draw(lins(shape, in_loop=in_loop)), draw(st.sampled_from("fi")), draw(_combines(dtype)),
                    draw(st.integers(0, 3)), draw(st.integers(0, 2)))


@st.composite
def shuffles(draw, shape: Shape, in_loop: bool = False):
    dtype = draw(st.sampled_from(SHUFFLE_DTYPES))
    mode = draw(st.sampled_from(["idx", "xor", "down", "up"]))
    per_thread = draw(st.booleans())
    lin = draw(lins(shape, in_loop=in_loop)) if per_thread else None
    delta = draw(st.integers(-3, 40)) if not per_thread else 0
    return Shuffle(mode, dtype, draw(st.sampled_from("fi")), draw(st.sampled_from("fi")), draw(_combines(dtype)),
                   delta, lin)


@st.composite
def reduces(draw, shape: Shape):
    dtype = draw(st.sampled_from(SHUFFLE_DTYPES))
    return Reduce(draw(st.sampled_from(["warp", "block"])), draw(st.sampled_from(["sum", "max", "min"])), dtype,
                  draw(st.sampled_from("fi")), draw(st.sampled_from("fi")), draw(_combines(dtype)))


def _injective(values: np.ndarray) -> bool:
    """Every row (a block's threads, or the whole launch as one row) maps to distinct elements."""
    return all(np.unique(row).size == row.size for row in values)


@st.composite
def atomics(draw, shape: Shape, space: str):
    dtype = draw(st.sampled_from(ATOMIC_DTYPES))
    narrow = dtype in NARROW_FLOATS
    kind = "add" if narrow else draw(st.sampled_from(["add", "add", "max", "min", "exchange", "cas"]))
    n = shape.block_threads if space == "shared" else shape.total
    own = Lin((("t" if space == "shared" else "g", 1),), 0)
    if narrow or draw(st.booleans()):  # one element per thread
        where, bins = own, draw(st.sampled_from([n, n + 3]))
    else:
        where, bins = draw(lins(shape)), draw(st.sampled_from(sorted({1, 2, 3, 7, 16, n, n + 3})))
    values = np.mod(where.values(shape.coordinates()), bins)
    private = _injective(values if space == "shared" else values.reshape(1, -1))
    if kind == "add" and is_float(dtype):
        init = float(draw(st.integers(-20, 20)))
    elif is_float(dtype):
        init = draw(st.sampled_from([0.0, -0.0, 5.0, -3.0, float("inf"), float("-inf"), float("nan")]))
    elif kind == "cas" and not private:
        init = draw(st.sampled_from([-1, 2**20])) if is_signed(dtype) else 2**20
    else:
        init = draw(st.integers(-50, 50)) if is_signed(dtype) else draw(st.integers(0, 50))
    shift = draw(st.integers(0, 8))
    if kind == "cas" and not private and not is_float(dtype) and init == 2**20:
        shift = 0  # bin + shift stays below 2**20 for every bin: never the initial value
    read = draw(lins(shape)) if space == "shared" else None
    return Atomic(space, kind, dtype, bins, where, draw(st.sampled_from("fi")), init, private,
                  draw(st.booleans()) and private, draw(st.sampled_from("fi")), draw(_combines(dtype)), read,
                  draw(st.booleans()), shift)


@st.composite
def trip_counts(draw, shape: Shape):
    kind = draw(st.sampled_from(["static", "block", "load", "broadcast", "scalar"]))
    if kind in ("block", "load"):
        return Trips(kind, draw(st.integers(1, 4)), draw(lins(shape, block_only=True)))
    if kind == "broadcast":  # a modulus
        return Trips(kind, draw(st.integers(1, 4)))
    return Trips(kind, draw(st.integers(0, 3)))


@st.composite
def conditions(draw, shape: Shape):
    kind = draw(st.sampled_from(["block", "block", "load", "broadcast", "flag", "scalar"]))
    if kind in ("block", "load"):
        modulus = draw(st.integers(2, 3))
        return Cond(kind, draw(lins(shape, block_only=True)), modulus, draw(st.integers(0, modulus - 1)))
    return Cond(kind, pick=draw(st.integers(0, 2)))


@st.composite
def stage_lists(draw, shape: Shape, depth: int = 0, in_loop: bool = False, divergent: bool = False,
                size: int | None = None):
    """A tuple of stages; under ``divergent`` control only pointwise stages and global atomics."""
    count = draw(st.integers(1, 5 if depth == 0 else 3)) if size is None else size
    kinds = ["pointwise", "pointwise", "global_atomic"]
    if not divergent:
        kinds += ["exchange", "exchange", "shared_atomic"]
        if shape.warps:
            kinds += ["shuffle", "shuffle", "reduce", "reduce"]
    if depth < 2:
        kinds += ["diverge"] + ([] if divergent else ["loop", "branch"])
    out = []
    for _ in range(count):
        kind = draw(st.sampled_from(kinds))
        if kind == "pointwise":
            out.append(draw(pointwise(shape, in_loop)))
        elif kind == "global_atomic":
            out.append(draw(atomics(shape, "global")))
        elif kind == "shared_atomic":
            out.append(draw(atomics(shape, "shared")))
        elif kind == "exchange":
            out.append(draw(exchanges(shape, in_loop)))
        elif kind == "shuffle":
            out.append(draw(shuffles(shape, in_loop)))
        elif kind == "reduce":
            out.append(draw(reduces(shape)))
        elif kind == "diverge":
            split_kind = draw(st.sampled_from(["if", "loop"]))
            body = draw(stage_lists(shape, depth + 1, in_loop, True))
            other = draw(stage_lists(shape, depth + 1, in_loop, True)) if split_kind == "if" else ()
            out.append(Diverge(split_kind, draw(lins(shape, in_loop=in_loop)), draw(st.integers(2, 4)), body, other))
        elif kind == "loop":
            out.append(Loop(draw(trip_counts(shape)), draw(stage_lists(shape, depth + 1, True, divergent)),
                            draw(st.integers(-2, 3)), draw(st.sampled_from([1, 2, -1, -3]))))
        else:
            out.append(Branch(draw(conditions(shape)), draw(stage_lists(shape, depth + 1, in_loop, divergent)),
                              draw(stage_lists(shape, depth + 1, in_loop, divergent))))
    return tuple(out)


@st.composite
def programs(draw, warps: bool | None = None) -> CoopProgram:
    shape = draw(shapes(warps))
    return CoopProgram(shape, draw(stage_lists(shape)), draw(st.integers(0, 3)), draw(st.booleans()),
                       draw(st.integers(0, 2**32 - 1)), draw(st.sampled_from(["ints", "eighths", "normal", "specials"])),
                       draw(st.sampled_from(["small", "wide"])), draw(st.sampled_from(ARCHS)))


# -- planted bugs ---------------------------------------------------------------------------------------------


def bug_sites(desc: CoopProgram) -> list[tuple[Bug, str]]:
    """Every bug that can be planted in ``desc`` so that the detector must see it, with the
    error it must raise: only at stages some block runs with all its threads."""
    shape = desc.shape
    coords = shape.coordinates()
    n = shape.block_threads
    sites = []
    if shape.total >= 2:
        sites.append((Bug("racy_store"), "RaceError"))
    for k, (stage, blocks, divergent) in enumerate(reach(desc)):
        if divergent or not blocks.any():
            continue
        ran = {name: v[blocks] for name, v in coords.items()}
        if isinstance(stage, Exchange):
            slots = None if "loop" in stage.read.sources() else np.mod(stage.read.values(ran), n)
            if slots is not None and (slots != ran["t"]).any():  # someone reads another thread's slot
                sites.append((Bug("drop_barrier", k), "RaceError"))
            if stage.space == "shared":
                sites.append((Bug("read_first", k), "UninitializedError"))
        elif isinstance(stage, Atomic):
            elements = np.mod(stage.where.values(ran), stage.bins)
            if stage.space == "shared":
                cleared_by = elements % n  # element j is cleared by thread j % n
                if (cleared_by != ran["t"]).any():
                    sites.append((Bug("drop_barrier", k, "init"), "RaceError"))
                read = np.mod(stage.read.values(ran), stage.bins)
                others = ~np.eye(n, dtype=bool)  # [reader, updater]: two different threads
                if any(((r[:, None] == e[None, :]) & others).any() for r, e in zip(read, elements)):
                    sites.append((Bug("drop_barrier", k, "update"), "RaceError"))
            else:
                flat = elements.reshape(-1)
                if np.unique(flat).size < flat.size:
                    sites.append((Bug("plain_atomic", k), "RaceError"))
    return sites


@st.composite
def planted_programs(draw) -> Planted:
    desc = draw(programs())
    sites = bug_sites(desc)
    if not sites:  # a one-thread launch: give it a second block
        shape = desc.shape
        grid = (attrs.evolve(shape.grid[0], extent=shape.grid[0].extent + 1),) + shape.grid[1:]
        desc = attrs.evolve(desc, shape=attrs.evolve(shape, grid=grid))
        sites = bug_sites(desc)
    bug, expect = draw(st.sampled_from(sites))
    return Planted(desc, bug, expect)
