"""Random tile programs for the tile-level differential fuzzer (tests/test_fuzz_tiles.py).

:func:`draw` turns a seed into a :class:`Drawn` program: tensor parameters of random shapes,
dtypes and layouts (C and Fortran order, steps, reversed axes, transposed views), a grid of a
few programs, and a body the seeded RNG writes while the kernel is traced:

* values: masked ``load_tile`` boxes at each program's origin (shifted by -1..1, so edges of
  every side are masked), gathers through transformed index tiles whose masked-off indices
  may be replaced by wild ones (-1, +-2**62, the index type's extremes), aranges, constants,
  the program indices;
* elementwise chains of the ops that are bit-exact on every backend (no inexact math
  function), broadcasting through ``x[:, None]``-style reshapes, keepdims reductions and
  scalars; casts between every dtype; ``where``; ``reshape`` and ``trans``; static slices (any
  step, int indices), ``cat``, ``join``/``split``/``interleave``, ``flip``, ``permute``, ``ravel``;
* reductions (sum, max, min, argmax, argmin, integer prod) along random axes or all,
  keepdims or not; scans (cumsum, cummax, cummin, integer cumprod); ``t.reduce`` and
  ``t.associative_scan`` (reverse or not) with exact combines, a float + and a (value, index) argmax;
* a ``fold_range`` with a tile carry and a trip count the program's index decides; an
  ``if_`` on a scalar returning tiles;
* a dot (f32 ieee or tf32, f64, f16, bf16, i8, u8) walking K in a fold (three quarters of the f16,
  bf16, i8 and tf32 ones at tiles tensor cores take: mma.sync, ldmatrix, cp.async on ptx), stored with
  ``store_tile`` into an output tensor of random layout;
* tile atomics (i32 add/max/min histograms);
* the language issue's additions: operands of different types left to promotion, ``fmod`` and
  ``truncdiv``, Philox draws (``rand``, ``randint4x``), bitcasts, strided boxes
  (``steps=``), tiles of 4 and 5 dimensions and grids of 4 and 5 axes; slices, ``cat`` and
  the user's combines (``_Body.shape_op``, ``_Body.custom_combine``).

Every exact value the body makes may be sunk into a *probe*: one flat output buffer per
dtype, each program writing its values at ``pid * stride + offset`` (the stride a run-time
scalar).  A float sum or cumsum is sunk with its terms (an exact value), so the checker
bounds it with gamma_n * sum |terms| computed in float64 from the reference run's terms; a
dot is bounded from the input tensors.  Every other output (all of every output array, the
gaps of strided views included) must match the numpy backend bit for bit.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import attrs
import ml_dtypes
import numpy as np

import accy
from accy import axis, bf16, boolean, f16, f32, f64, i8, i32, index, u8, u32
from accy.dsl.promotion import computation_type, mixed_signedness
from accy.dsl.types import TileType

FLOATS = (f32, f16, bf16, f64)
INTS = (i32, i8, u8)
VALUE_DTYPES = FLOATS + INTS + (boolean, index)
PROBE_DTYPES = VALUE_DTYPES + (u32,)  # sums and cumsums of u8 are u32 (as Triton's)
UNIT = {"f32": 2.0**-24, "f64": 2.0**-53, "f16": 2.0**-11, "bf16": 2.0**-8}
# half the least subnormal of each float type: the absolute part of one rounding
TINY = {"f32": 2.0**-150, "f64": 2.0**-1075, "f16": 2.0**-25, "bf16": 2.0**-134}
# Open bugs the generator steers around, by name: each pinned, xfail(strict=True), in
# tests/test_tile_regressions.py, and avoided where ``"name" in KNOWN_BUGS`` (a fix drops the
# name and its avoidance; ACCY_FUZZ_TILE_KNOWN names others, "" none).  None is open now: bugs
# 1, 2, 3, 5 and 6 are fixed and their avoidance gone.
KNOWN_BUGS = frozenset(filter(None, os.environ.get("ACCY_FUZZ_TILE_KNOWN", "").split(",")))
WILD = (-1, -(2**62), 2**62, -(2**63), 2**63 - 1, 1 << 40)


def gamma(n, u: float):
    n = np.asarray(n, np.float64)
    return n * u / (1 - n * u)


# -- checks ------------------------------------------------------------------------------------


@attrs.frozen
class SumCheck:
    """Probe ``dtype`` elements [start, start + size) per program hold ``op`` (sum or cumsum) of
    the terms at ``terms`` (also per program, shape ``shape``) along ``axis`` (None: all)."""

    dtype: str
    start: int
    terms: int
    shape: tuple[int, ...]
    axis: int | None
    scan: bool

    def bound(self, terms: np.ndarray):
        """(exact, bound) in float64 for one program's ``terms``."""
        x = terms.astype(np.float64).reshape(self.shape)
        if self.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            axis = self.axis
        with np.errstate(all="ignore"):
            if self.scan:
                exact, mag = np.cumsum(x, axis=axis), np.cumsum(np.abs(x), axis=axis)
                n = np.arange(1, x.shape[axis] + 1).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
            else:
                exact, mag, n = x.sum(axis=axis), np.abs(x).sum(axis=axis), x.shape[axis]
            acc = "f64" if self.dtype == "f64" else "f32"
            error = gamma(n, UNIT[acc]) * mag + TINY[acc] * n
            if self.dtype in ("f16", "bf16"):  # rounded once from f32 at the end
                error = error + UNIT[self.dtype] * (np.abs(exact) + error) + TINY[self.dtype]
        return exact.reshape(-1), np.broadcast_to(error, exact.shape).reshape(-1)


@attrs.frozen
class DotCheck:
    """Output tensor ``name`` (its view) holds ``exact`` within ``bound`` where ``written``."""

    name: str
    exact: Any
    bound: Any
    written: Any


# -- tensors -----------------------------------------------------------------------------------


@attrs.frozen
class Layout:
    """How a tensor argument's view is cut from its base array."""

    kind: str  # C, F, step, reversed, perm
    perm: tuple[int, ...] = ()
    axis_: int = 0

    def base_shape(self, shape):
        shape = list(shape)
        if self.kind == "step":
            shape[self.axis_] = shape[self.axis_] * 2 + 1
        if self.kind == "perm":
            shape = [shape[p] for p in np.argsort(self.perm)]
        return tuple(shape)

    def view(self, base: np.ndarray) -> np.ndarray:
        if self.kind == "F":
            return base  # made Fortran-ordered
        if self.kind == "step":
            return base[(slice(None),) * self.axis_ + (slice(1, None, 2),)]
        if self.kind == "reversed":
            return base[(slice(None),) * self.axis_ + (slice(None, None, -1),)]
        if self.kind == "perm":
            return np.transpose(base, self.perm)
        return base

    def __str__(self):
        return {"step": f"step(axis {self.axis_})", "reversed": f"reversed(axis {self.axis_})",
                "perm": f"transposed{self.perm}"}.get(self.kind, self.kind)


def numpy_dtype(dtype) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype == bf16 else np.dtype(dtype.numpy)


def random_values(rng, dtype, shape, specials: bool) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        scale = {"f16": 8.0, "bf16": 8.0}.get(dtype.name, 100.0)
        x = rng.standard_normal(n) * scale
        x[rng.random(n) < 0.2] = np.round(x[0])  # ties
        if specials:
            pick = rng.random(n)
            x = np.where(pick < 0.04, np.nan, x)
            x = np.where((pick >= 0.04) & (pick < 0.07), np.inf * np.sign(rng.standard_normal(n)), x)
            x = np.where((pick >= 0.07) & (pick < 0.12), -0.0, x)
            x = np.where((pick >= 0.12) & (pick < 0.16), 0.0, x)
            x = np.where((pick >= 0.16) & (pick < 0.18), float(np.finfo(numpy_dtype(dtype)).smallest_subnormal
                                                                if dtype != bf16 else 2.0**-133), x)
        return x.astype(numpy_dtype(dtype)).reshape(shape)
    info = np.iinfo(dtype.numpy)
    if rng.random() < 0.5:
        x = rng.integers(-9 if info.min else 0, 10, n)
    else:
        x = rng.integers(info.min, info.max, n, endpoint=True)
    return x.astype(dtype.numpy).reshape(shape)


@attrs.frozen
class TensorArg:
    name: str
    dtype: Any
    shape: tuple[int, ...]
    layout: Layout
    output: bool
    base: np.ndarray

    def fresh(self) -> tuple[np.ndarray, np.ndarray]:
        base = self.base.copy(order="A")
        return base, self.layout.view(base)


def make_tensor(rng, name, dtype, shape, output: bool, specials: bool) -> TensorArg:
    ndim = len(shape)
    kinds = ["C", "F", "step", "reversed"] + (["perm"] * (ndim > 1))
    kind = kinds[rng.integers(len(kinds))]
    perm = tuple(int(p) for p in rng.permutation(ndim)) if kind == "perm" else ()
    layout = Layout(kind, perm, int(rng.integers(ndim)))
    bshape = layout.base_shape(shape)
    if output:
        base = np.full(bshape, 77, numpy_dtype(dtype)) if not dtype.is_float else \
            np.full(bshape, np.nan, numpy_dtype(dtype))
        if dtype.is_bool:
            base = np.ones(bshape, bool)
    else:
        base = random_values(rng, dtype, bshape, specials)
    if kind == "F":
        base = np.asfortranarray(base)
    assert layout.view(base).shape == tuple(shape)
    return TensorArg(name, dtype, tuple(shape), layout, output, base)


# -- the drawn program --------------------------------------------------------------------------


@attrs.define
class Drawn:
    seed: int
    program: accy.Program
    tensors: list[TensorArg]
    grid: tuple[int, ...]
    probe_sizes: dict[str, int]
    sum_checks: list[SumCheck]
    dot_checks: list[DotCheck]
    notes: list[str]
    scalars: dict[str, int]
    hist: tuple[str, int] | None = None

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    def arguments(self) -> tuple[dict, dict]:
        """(the run's arguments by name, the base array of each tensor by name), fresh."""
        args, bases = {}, {}
        for t in self.tensors:
            bases[t.name], args[t.name] = t.fresh()
        for name in PROBE_DTYPES:
            size = max(1, self.probe_sizes.get(name.name, 0)) * self.programs
            args[f"probe_{name.name}"] = np.zeros(size, numpy_dtype(name))
            args[f"stride_{name.name}"] = self.probe_sizes.get(name.name, 0)
        args.update(self.scalars)
        if self.hist is not None:
            args["hist"] = np.zeros(self.hist[1], np.int32)
        return args, bases

    def describe(self) -> str:
        lines = [f"seed {self.seed}: grid {self.grid}"]
        lines += [f"  {t.name}: {'output' if t.output else 'input'} {t.dtype} {t.shape} {t.layout}" for t in self.tensors]
        lines += ["  " + n for n in self.notes]
        return "\n".join(lines)


class InBounds:
    """Where the body's tensor accesses get their box origins, and their indices with the mask
    that keeps them inside: as drawn, every one inside its tensor.  An out-of-bounds draw
    (tests/fuzz_tiles_outside.py) overrides these hooks to make one access reach outside."""

    def begin(self) -> None:
        """A trace of the body begins (a retrace sees the same accesses in the same order)."""

    def box(self, kind: str, tensor: str, origin: tuple, shape: tuple) -> tuple:
        """The origin of a ``load_tile`` or ``store_tile`` (``kind``) box of ``tensor``."""
        return origin

    def access(self, kind: str, tensor: str) -> None:
        """A masked ``load`` or ``store`` (``kind``) of ``tensor`` begins; :meth:`index` gives
        each of its dimensions' indices in turn."""

    def index(self, d: int, a, extent):
        """(the index, where it is inside) for the indices ``a`` of dimension ``d`` of ``extent``."""
        return a, (a >= 0) & (a < extent)


class _Body:
    """The RNG-driven writer of one program body (run while the kernel is traced)."""

    def __init__(self, rng, drawn: Drawn, shape, inputs, outputs, dot, hist, specials, depth):
        self.rng, self.d, self.S = rng, drawn, shape
        self.inputs, self.outputs, self.dot, self.hist = inputs, outputs, dot, hist
        self.specials, self.depth = specials, depth
        self.pool: list = []  # exact traced values

    # helpers
    def chance(self, p):
        return self.rng.random() < p

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def note(self, text):
        self.d.notes.append(text)

    def tiles(self, pred=lambda v: True):
        return [v for v in self.pool if isinstance(v, accy.dsl.traced.Tile) and pred(v)]

    def add(self, v, what):
        self.pool.append(v)
        self.note(f"v{len(self.pool) - 1} = {what}: {v.type}")
        return v

    def name(self, v):
        return next((f"v{k}" for k, w in enumerate(self.pool) if w is v), "?")

    # the program's origin of the main box
    def origin(self, t, pid, shift=True):
        return tuple(program_along(pid, self.d.grid, len(self.S), d) * self.S[d] + (int(self.rng.integers(-1, 2)) if shift else 0)
                     for d in range(len(self.S)))

    def pid_linear(self, pid):
        lin = None
        for d, n in enumerate(self.d.grid):
            lin = pid[f"a{d}"] if lin is None else lin * n + pid[f"a{d}"]
        return lin

    # -- sources --
    def source(self, t, pid):
        kind = self.pick(["box", "box", "gather", "arange", "full", "pid"])
        if kind in ("box", "gather") and self.inputs:
            x = self.pick(self.inputs)
            handle = getattr(self.p, x.name)
            other = self.other(x.dtype)
            if kind == "box":
                org = self.fault.box("load_tile", x.name, self.origin(t, pid), self.S)
                steps = tuple(int(self.pick([1, 1, 1, 2, 3, -1])) for _ in self.S) if self.chance(0.3) else None
                return self.add(handle.load_tile(org, self.S, other=other, steps=steps),
                                f"{x.name}.load_tile(shifted origin, {self.S}, other={other}, steps={steps})")
            idx, inside = [], None
            self.fault.access("load", x.name)
            for d in range(len(self.S)):
                a = t.arange(self.S[d])
                form = self.pick(["plain", "reversed", "double", "shift"])
                if form == "reversed":
                    a = (self.S[d] - 1) - a
                elif form == "double":
                    a = a * 2
                elif form == "shift":
                    a = a + int(self.rng.integers(-3, 4))
                a = a + program_along(pid, self.d.grid, len(self.S), d) * self.S[d]
                if len(self.S) > 1:
                    a = a.reshape(tuple(self.S[d] if k == d else 1 for k in range(len(self.S))))
                a, here = self.fault.index(d, a, handle.shape[d])
                inside = here if inside is None else inside & here
                idx.append(a)
            mask = inside
            extra = self.tiles(lambda v: v.dtype.is_bool and v.shape == self.S)
            if extra and self.chance(0.5):
                mask = mask & self.pick(extra)
            if self.chance(0.5):
                wild = self.pick(WILD)
                idx = [t.where(mask, i, wild) for i in idx]
                self.note(f"masked-off gather indices are {wild}")
            return self.add(handle.load(tuple(idx), mask=mask, other=other), f"{x.name}.load(gather {len(idx)}-d)")
        if kind == "arange":
            d = int(self.rng.integers(len(self.S)))
            a = t.arange(self.S[d]) + pid["a0"] * 3
            if len(self.S) > 1:
                a = t.broadcast_to(a.reshape(tuple(self.S[d] if k == d else 1 for k in range(len(self.S)))), self.S)
            dt = self.pick(VALUE_DTYPES)
            return self.add(a.cast(dt) if dt != index else a, f"arange along {d} as {dt}")
        if kind == "full":
            dt = self.pick(VALUE_DTYPES)
            value = self.other(dt)
            return self.add(t.full(self.S, value, dt), f"full({value}, {dt})")
        dt = self.pick(VALUE_DTYPES)
        v = (self.pid_linear(pid) * 7 + 3)
        return self.add(v.cast(dt) if dt != index else v, f"pid scalar as {dt}")

    def other(self, dtype):
        if dtype.is_bool:
            return bool(self.chance(0.5))
        if dtype.is_float:
            return float(self.pick([0.0, -0.0, 1.5, -2.0, float("inf"), float("-inf"), float("nan")]))
        return int(self.pick([0, 1, -1 if dtype.is_signed else 255, 7]))

    # -- elementwise --
    def to_dtype(self, t, v, dt):
        return v if v.dtype == dt else v.cast(dt)

    def broadcastable(self, t, v):
        """``v`` made into something that broadcasts against the main shape: itself, a keepdims
        reduction of it, x[:, None]-style, or a scalar."""
        if not isinstance(v, accy.dsl.traced.Tile) or v.shape == self.S:
            return v
        if v.ndim <= len(self.S) and all(a in (1, b) for a, b in zip(reversed(v.shape), reversed(self.S))):
            return v  # keepdims results, x[:, None]: NumPy's rules broadcast them
        if v.size == 1:
            return v.reshape((1,) * len(self.S))
        if v.ndim == 1 and v.shape[0] == self.S[-1]:
            return v.reshape((1,) * (len(self.S) - 1) + v.shape)
        if len(self.S) > 1 and v.ndim == 1 and v.shape[0] == self.S[0]:
            return v.reshape((self.S[0],) + (1,) * (len(self.S) - 1))  # x[:, None]
        return None

    def elementwise(self, t):
        values = [v for v in self.pool if self.broadcastable(t, v) is not None]
        a = self.pick(values)
        dt = a.dtype
        kind = self.pick(["binary", "binary", "binary", "unary", "cast", "compare", "where", "random", "bitcast"])
        if kind == "random":
            return self.random(t, a)
        if kind == "bitcast":
            return self.bitcast(t, a)
        if kind == "unary":
            if dt.is_float:
                op = self.pick(["neg", "abs", "sqrt", "floor", "ceil", "round", "trunc", "isnan"])
            elif dt.is_bool:
                op = "logical_not"
            else:
                op = self.pick(["neg", "abs", "invert"])
            return self.add(getattr(t, op)(a), f"{op}({self.name(a)})")
        if kind == "cast":
            to = self.pick(VALUE_DTYPES)
            return self.add(a.cast(to), f"cast({self.name(a)}, {to})")
        b = self.pick(values)
        bb = self.broadcastable(t, b)
        aa = self.broadcastable(t, a)
        promoted = isinstance(bb, accy.dsl.traced.Traced) and bb.dtype != dt and self.chance(0.4)
        if promoted:  # the builder converts them (docs/ir.md, "Type promotion")
            dt = computation_type([dt, bb.dtype])
            self.note(f"{a.dtype} meets {bb.dtype}: {dt}")
        elif isinstance(bb, accy.dsl.traced.Traced) and bb.dtype != dt:
            bb = bb.cast(dt)
        if kind == "compare":
            op = self.pick(["lt", "le", "gt", "ge", "eq", "ne"]) if not dt.is_bool else self.pick(["eq", "ne"])
            return self.add(getattr(t, op)(aa, bb), f"{op}({self.name(a)}, {self.name(b)})")
        if kind == "where":
            conds = [v for v in values if v.dtype.is_bool]
            if not conds:
                return None
            c = self.broadcastable(t, self.pick(conds))
            return self.add(t.where(c, aa, bb), f"where(bool, {self.name(a)}, {self.name(b)})")
        if dt.is_bool:
            op = self.pick(["logical_and", "logical_or", "logical_xor"])
        elif dt.is_float:
            op = self.pick(["add", "sub", "mul", "div", "maximum", "minimum", "mod", "copysign", "fma", "fmod"])
        else:
            op = self.pick(["add", "sub", "mul", "bitwise_and", "bitwise_or", "bitwise_xor", "maximum", "minimum",
                            "shl", "shr", "floor_div", "mod", "fmod", "truncdiv"])
        if op in ("floor_div", "mod", "fmod", "truncdiv") and promoted and mixed_signedness([a.dtype, bb.dtype]):
            aa, bb = self.to_dtype(t, aa, dt), self.to_dtype(t, bb, dt)  # refused mixed: converted first
        if op in ("floor_div", "mod", "fmod", "truncdiv") and not dt.is_float:
            bb = t.where(bb == 0, bb * 0 + 1, bb)  # never a zero divisor
        if op == "copysign":  # a NaN's sign is no part of the rules (backends make NaNs of either sign)
            bb = t.where(t.isnan(bb), 1.0, bb) if bb.dtype.is_float else bb
        if op == "fma":
            return self.add(t.fma(aa, bb, aa), f"fma({self.name(a)}, {self.name(b)}, {self.name(a)})")
        return self.add(getattr(t, op)(aa, bb), f"{op}({self.name(a)}, {self.name(b)})")

    def random(self, t, a):
        """Philox draws (bit-exact: randint, and rand's conversion and product) at offsets made of
        ``a``, under a seed of 64 bits or the program's index."""
        offsets = self.broadcastable(t, a)
        if offsets.dtype.is_float or offsets.dtype.is_bool:
            offsets = self.to_dtype(t, offsets, i32)
        seed = self.pick([0, 12345, -7, 2**40 + 5, None])
        seed_text = seed if seed is not None else "pid"
        seed = seed if seed is not None else self.pid_linear(self.pid) * 7 + 1
        if self.chance(0.5):
            return self.add(t.rand(seed, offsets), f"rand({seed_text}, {self.name(a)})")
        word = int(self.rng.integers(4))
        return self.add(t.randint4x(seed, offsets)[word].cast(i32), f"randint4x({seed_text}, {self.name(a)})[{word}]")

    def bitcast(self, t, a):
        partner = {"f32": i32, "i32": f32, "f64": index, "index": f64, "i8": u8, "u8": i8}.get(a.dtype.name)
        if partner is None:
            return None
        if a.dtype.is_float:  # a NaN's payload is no part of the rules: its bits are not compared
            a = t.where(t.isnan(a), 0.0, a)
        return self.add(t.bitcast(a, partner), f"bitcast({self.name(a)}, {partner})")

    def reshape(self, t):
        tiles = self.tiles()
        if not tiles:
            return None
        v = self.pick(tiles)
        kind = self.pick(["reshape", "trans", "flat", "newaxis"])
        if kind == "trans" and v.ndim > 1:
            perm = tuple(int(p) for p in self.rng.permutation(v.ndim))
            return self.add(t.trans(v, perm), f"trans({self.name(v)}, {perm})")
        if kind == "newaxis" and v.ndim < 3:
            return self.add(v[:, None] if self.chance(0.5) else v[None, :] if v.ndim == 1 else v[:, None],
                            f"{self.name(v)} with a new axis")
        if kind == "flat":
            return self.add(v.reshape((v.size,)), f"{self.name(v)} flattened")
        # a random factorisation of the size
        n, dims = v.size, []
        for _ in range(int(self.rng.integers(1, 4)) - 1):
            divisors = [k for k in range(1, n + 1) if n % k == 0]
            k = self.pick(divisors)
            dims.append(k)
            n //= k
        dims.append(n)
        shape = tuple(int(d) for d in self.rng.permutation(dims))
        return self.add(v.reshape(shape), f"{self.name(v)}.reshape({shape})")

    def reduction(self, t, sink):
        tiles = self.tiles()
        if not tiles:
            return None
        x = self.pick(tiles)
        axis_ = None if self.chance(0.25) else int(self.rng.integers(x.ndim))
        keep = self.chance(0.3)
        dt = x.dtype
        ops = ["max", "min", "argmax", "argmin", "sum", "max_indices", "min_indices"]
        if dt.is_int or dt.is_index:
            ops += ["prod", "wide_sum"]
        if dt.is_bool:
            ops = ["sum"]  # a bool tile sums as an i32 count (max and argmax refuse bools)
        op = self.pick(ops)
        what = f"{op}({self.name(x)}, axis={axis_}, keepdims={keep})"
        if op.endswith("_indices"):
            values, indices = getattr(t, op[:3])(x, axis=axis_, keepdims=keep, return_indices=True)
            self.add(values, what + "[0]")
            return self.add(indices, what + "[1]")
        if op == "wide_sum":
            return self.add(t.sum(x, axis=axis_, keepdims=keep, dtype=self.pick([i32, index])), what)
        r = getattr(t, op)(x, axis=axis_, keepdims=keep)
        if op == "sum" and dt.is_float:
            terms = sink(x)
            start = sink(r)
            self.d.sum_checks.append(SumCheck(dt.name, start, terms, x.shape, axis_, False))
            self.note(f"{what} (bounded) -> probe_{dt.name}[{start}]")
            return None
        return self.add(r, what)

    def scan(self, t, sink):
        tiles = self.tiles(lambda v: not v.dtype.is_bool)
        if not tiles:
            return None
        x = self.pick(tiles)
        axis_ = None if self.chance(0.2) else int(self.rng.integers(x.ndim))
        ops = ["cumsum", "cummax", "cummin"] + (["cumprod"] if not x.dtype.is_float else [])
        op = self.pick(ops)
        reverse = not (op == "cumsum" and x.dtype.is_float) and self.chance(0.3)  # a bounded cumsum runs forward
        r = getattr(t, op)(x, axis_, reverse=reverse)
        what = f"{op}({self.name(x)}, axis={axis_}, reverse={reverse})"
        if op == "cumsum" and x.dtype.is_float:
            terms = sink(x)
            start = sink(r)
            self.d.sum_checks.append(SumCheck(x.dtype.name, start, terms, x.shape, axis_, True))
            self.note(f"{what} (bounded) -> probe_{x.dtype.name}[{start}]")
            return None
        return self.add(r, what)

    def shape_op(self, t):
        """A static slice (any steps), an int index, cat, join/split/interleave, flip, permute or ravel."""
        tiles = self.tiles()
        if not tiles:
            return None
        v = self.pick(tiles)
        kind = self.pick(["slice", "slice", "index", "cat", "join", "interleave", "flip", "permute", "ravel"])
        if kind in ("slice", "index"):
            key = []
            for n in v.shape:
                step = int(self.pick([1, 1, 2, 3, -1, -2]))
                a, b = sorted(int(e) for e in self.rng.integers(0, n + 1, 2))
                if a == b:
                    a, b = 0, n
                key.append(slice(a, b, step) if step > 0 else slice(b - 1, None if a == 0 else a - 1, step))
            if kind == "index":
                d = int(self.rng.integers(v.ndim))
                key[d] = int(self.rng.integers(-v.shape[d], v.shape[d]))
            return self.add(v[tuple(key)], f"{self.name(v)}[{', '.join(map(str, key))}]")
        if kind == "cat":
            d = int(self.rng.integers(v.ndim))
            part = v[tuple(slice(None, None, -1) if k == d else slice(None) for k in range(v.ndim))]
            part = part[tuple(slice(0, max(1, v.shape[d] // 2)) if k == d else slice(None) for k in range(v.ndim))]
            first, second = (v, part) if self.chance(0.5) else (part, v)
            return self.add(t.cat(first, second, axis=d), f"cat({self.name(v)} and its reversed half, axis={d})")
        if kind in ("join", "interleave") and v.ndim < 3:  # a join adds an axis (rank 3 at most)
            w = self.pick([u for u in tiles if u.type == v.type])
            if kind == "interleave":
                return self.add(t.interleave(v, w), f"interleave({self.name(v)}, {self.name(w)})")
            a, b = t.split(t.join(v, w))
            self.add(t.join(b, a), f"join(split(join({self.name(v)}, {self.name(w)})) swapped)")
            return self.add(a, f"split(join({self.name(v)}, ...))[0]")
        if kind == "flip":
            d = None if self.chance(0.3) else int(self.rng.integers(v.ndim))
            return self.add(t.flip(v, d), f"flip({self.name(v)}, {d})")
        if kind == "permute" and v.ndim > 1:
            perm = tuple(int(p) for p in self.rng.permutation(v.ndim))
            return self.add(t.permute(v, *perm), f"permute({self.name(v)}, {perm})")
        return self.add(t.ravel(v), f"ravel({self.name(v)})")

    def custom_combine(self, t):
        """``t.reduce`` or ``t.associative_scan`` with an exact combine (max, min, integer +, *, ^,
        a float + (one order on every backend), a (value, index) argmax) along an axis or all."""
        tiles = self.tiles(lambda v: not v.dtype.is_bool)
        if not tiles:
            return None
        x = self.pick(tiles)
        axis_ = None if self.chance(0.2) else int(self.rng.integers(x.ndim))
        names = ["maximum", "minimum", "add", "argmax"] + (["mul", "bitwise_xor"] if not x.dtype.is_float else [])
        name = self.pick(names)
        scan = self.chance(0.5)
        reverse = self.chance(0.5)
        if name == "argmax":
            n = x.size if axis_ is None else x.shape[axis_]
            at = t.arange(n)
            if axis_ is not None and x.ndim > 1:
                at = t.broadcast_to(at.reshape(tuple(n if k == axis_ else 1 for k in range(x.ndim))), x.shape)
            elif x.ndim > 1:
                at = at.reshape(x.shape)

            def combine(a, b):
                (va, ia), (vb, ib) = a, b
                first = (va > vb) | ((va == vb) & (ia < ib)) | (t.isnan(va) if x.dtype.is_float else False)
                return t.where(first, va, vb), t.where(first, ia, ib)

            operand = (x, at)
        else:
            def combine(a, b):
                return getattr(t, name)(a, b)

            operand = x
        if scan:
            r = t.associative_scan(operand, axis_, combine, reverse=reverse)
            what = f"associative_scan({self.name(x)}, axis={axis_}, {name}, reverse={reverse})"
        else:
            r = t.reduce(operand, axis_, combine, keepdims=reverse)
            what = f"reduce({self.name(x)}, axis={axis_}, {name}, keepdims={reverse})"
        for k, value in enumerate(r if isinstance(r, tuple) else (r,)):
            self.add(value, f"{what}[{k}]")
        return r

    def fold(self, t, pid):
        tiles = self.tiles(lambda v: not v.dtype.is_bool)
        if not tiles:
            return None
        init = self.pick(tiles)
        others = [v for v in self.pool if self.broadcastable(t, v) is not None]
        x = self.pick(others) if others else init
        trips = self.pid_linear(pid) % 3 + int(self.rng.integers(0, 3))
        mode = self.pick(["max", "axpy"])
        dt = init.dtype
        shape = init.shape

        def body(t, i, acc):
            step = x if shape_fits(x, shape) else None
            ii = i.cast(dt)
            if mode == "max":
                return t.maximum(acc, ii + acc * 0) if step is None else t.maximum(acc, self.to_dtype(t, step, dt) - ii)
            return acc * 3 + ii if step is None else acc + self.to_dtype(t, step, dt) * ii

        out = t.fold_range(0, trips, 1, init, body)
        return self.add(out, f"fold(pid % 3 + c trips, init {self.name(init)}, {mode} with {self.name(x)})")

    def branch(self, t, pid):
        tiles = self.tiles()
        if len(tiles) < 1:
            return None
        a = self.pick(tiles)
        b = self.pick([v for v in tiles if v.type == a.type])
        cond = (self.pid_linear(pid) % 2) == 0
        ints = [v for v in self.pool if not isinstance(v, accy.dsl.traced.Tile) and (v.dtype.is_int or v.dtype.is_index)]
        if ints and self.chance(0.5):
            cond = self.pick(ints) > 0
        out = t.if_(cond, lambda t: a + a if not a.dtype.is_bool else ~a, lambda t: b)
        return self.add(out, f"if_(scalar, {self.name(a)} doubled, {self.name(b)})")


def axes_along(grid, rank: int, d: int) -> list[int]:
    """The grid axes whose indices place a program's box along dimension ``d``: one (cycling)
    where the grid has no more axes than the box, else every axis ``j`` with ``j % rank == d``,
    so that two programs never share a box."""
    return [d % len(grid)] if len(grid) <= rank else [j for j in range(len(grid)) if j % rank == d]


def program_along(pid, grid, rank: int, d: int):
    """The program's box index along dimension ``d`` (its axes of :func:`axes_along`, linearised)."""
    index, scale = None, 1
    for j in axes_along(grid, rank, d):
        term = pid[f"a{j}"] * scale if scale != 1 else pid[f"a{j}"]
        index, scale = term if index is None else index + term, scale * grid[j]
    return index


def shape_fits(v, shape):
    return not isinstance(v, accy.dsl.traced.Tile) or v.shape == shape


def draw(seed: int, *, big: bool = False, fault: InBounds | None = None) -> Drawn:
    """The tile program the seed gives (``big``: larger tiles and grids, for llvm runs);
    ``fault``: the hooks its tensor accesses go through (:class:`InBounds`, as drawn)."""
    fault = InBounds() if fault is None else fault
    rng = np.random.default_rng(seed)
    rank = int(rng.choice([1, 1, 2, 2, 3, 3, 4, 5]))
    sizes = [1, 2, 3, 4, 5, 7, 8] + ([16, 17, 32] if big else [])
    limit = 512 if big else 64
    while True:
        S = tuple(int(rng.choice(sizes)) for _ in range(rank))
        if math.prod(S) <= limit:
            break
    grid = tuple(int(rng.integers(1, 4)) for _ in range(int(rng.integers(1, min(rank, 2) + 1))))
    if rng.random() < 0.15:  # more than three axes: folded onto the GPU's three
        grid = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(4, 6))))
    specials = rng.random() < 0.5
    tensors: list[TensorArg] = []

    def covering(d):  # an extent near the grid's coverage: some edges ragged, some past
        g = math.prod(grid[j] for j in axes_along(grid, rank, d))
        return max(1, g * S[d] + int(rng.integers(-S[d], 2)))

    n_in = int(rng.integers(1, 4))
    for k in range(n_in):
        dt = VALUE_DTYPES[int(rng.integers(len(VALUE_DTYPES) - 1))]  # no index tensors
        tensors.append(make_tensor(rng, f"x{k}", dt, tuple(covering(d) for d in range(rank)), False, specials))
    outputs = []
    if rng.random() < 0.7:
        dt = VALUE_DTYPES[int(rng.integers(len(VALUE_DTYPES) - 1))]
        outputs.append(make_tensor(rng, "out", dt, tuple(covering(d) for d in range(rank)), True, specials))
    dot = None
    warps = int(rng.choice([1, 1, 2, 4]))
    if rng.random() < 0.5:
        dt = [f32, f32, f64, f16, bf16, i8, u8][int(rng.integers(7))]
        tf32 = dt == f32 and rng.random() < 0.5
        depth = {"f16": 16, "bf16": 16, "i8": 32}.get(dt.name, 8 if tf32 else None)
        if depth is not None and rng.random() < 0.75:  # tiles tensor cores take on ptx
            Mt, Nt, Kt = 16 * warps, 8 * int(rng.choice([1, 2])), depth * int(rng.choice([1, 2]))
        else:
            Mt, Nt, Kt = (int(rng.choice([1, 2, 3, 4, 5, 8] + ([16] if big else []))) for _ in range(3))
        g = int(np.prod(grid))  # one row block per program: two programs never write one element
        M, N, K = max(1, g * Mt - int(rng.integers(0, Mt))), int(rng.integers(1, Nt * 2 + 1)), int(rng.integers(1, 3 * Kt + 1))
        spec_vals = specials and dt.is_float and rng.random() < 0.3
        A = make_tensor(rng, "da", dt, (M, K), False, spec_vals)
        B = make_tensor(rng, "db", dt, (K, N), False, spec_vals)
        acc_dt = {"f64": f64, "i8": i32, "u8": i32}.get(dt.name, f32)
        C = make_tensor(rng, "dc", acc_dt, (M, N), True, False)
        tensors += [A, B, C]
        dot = (dt, tf32, Mt, Nt, Kt, A, B, C)
    hist = None
    if rng.random() < 0.3:
        hist = (str(rng.choice(["add", "max", "min"])), int(rng.integers(1, 9)))
    tensors += outputs

    params: dict[str, Any] = {t.name: accy.tensor(t.dtype, len(t.shape)) for t in tensors}
    for dt in PROBE_DTYPES:
        params[f"probe_{dt.name}"] = accy.dynamic_buffer(dt)
        params[f"stride_{dt.name}"] = accy.scalar(index)
    scalars = {}
    if hist is not None:
        params["hist"] = accy.dynamic_buffer(i32)
    drawn = Drawn(seed, None, tensors, grid, {}, [], [], [], scalars, hist)
    if hist is not None:
        drawn.notes.append(f"hist: atomic_{hist[0]} into {hist[1]} bins")
    steps = int(rng.integers(6, 24 if big else 16))
    body_seed = int(rng.integers(2**63))
    dot_checks: list = []

    def kernel(k, p):
        @k.for_each_tile(grid=tuple(axis(f"a{d}", n) for d, n in enumerate(grid)), warps=warps)
        def body(t, pid):
            # a fresh RNG per trace: tracing again draws the same body
            drawn.notes[:] = [n for n in drawn.notes if n.startswith("hist")]
            drawn.sum_checks.clear()
            w = _Body(np.random.default_rng(body_seed), drawn, S, [x for x in tensors if not x.output and x.name not in ("da", "db")],
                      outputs, dot, hist, specials, 0)
            w.p, w.fault, w.pid = p, fault, pid
            fault.begin()
            lin = w.pid_linear(pid)
            sizes: dict[str, int] = {}

            def sink(v):
                dt = v.dtype.name
                start = sizes.get(dt, 0)
                n = v.size if isinstance(v, accy.dsl.traced.Tile) else 1
                sizes[dt] = start + n
                buf = getattr(p, f"probe_{dt}")
                base = lin * getattr(p, f"stride_{dt}") + start
                if isinstance(v, accy.dsl.traced.Tile):
                    flat = v.reshape((n,)) if v.ndim > 1 else v
                    buf.store(base + t.arange(n), flat)
                else:
                    buf.store(base, v)
                return start

            for _ in range(2):
                w.source(t, pid)
            for _ in range(steps):
                kind = w.pick(["source", "elementwise", "elementwise", "elementwise", "elementwise", "reshape",
                               "reduction", "reduction", "reduction", "scan", "scan", "fold", "branch", "shape",
                               "shape", "combine"])
                if kind == "source":
                    w.source(t, pid)
                elif kind == "elementwise":
                    w.elementwise(t)
                elif kind == "reshape":
                    w.reshape(t)
                elif kind == "shape":
                    w.shape_op(t)
                elif kind == "combine":
                    w.custom_combine(t)
                elif kind == "reduction":
                    w.reduction(t, sink)
                elif kind == "scan":
                    w.scan(t, sink)
                elif kind == "fold":
                    w.fold(t, pid)
                else:
                    w.branch(t, pid)
            for k_, v in enumerate(w.pool):
                if w.chance(0.8):
                    w.note(f"v{k_} -> probe_{v.dtype.name}[{sink(v)}]")
            for out in outputs:  # the last value of the main shape, stored at the program's box
                same = [v for v in w.pool if isinstance(v, accy.dsl.traced.Tile) and v.shape == S]
                if not same:
                    continue
                v = w.to_dtype(t, same[-1], out.dtype)
                handle = getattr(p, out.name)
                if w.chance(0.5):
                    handle.store_tile(w.fault.box("store_tile", out.name, w.origin(t, pid, shift=False), S), v)
                    w.note(f"out.store_tile(program box, {v.type})")
                else:
                    idx, inside = [], None
                    w.fault.access("store", out.name)
                    for d in range(len(S)):
                        a = (S[d] - 1) - t.arange(S[d]) + program_along(pid, grid, len(S), d) * S[d]
                        if len(S) > 1:
                            a = a.reshape(tuple(S[d] if q == d else 1 for q in range(len(S))))
                        a, here = w.fault.index(d, a, handle.shape[d])
                        inside = here if inside is None else inside & here
                        idx.append(a)
                    mask = inside
                    if w.chance(0.5):
                        bools = [b for b in w.pool if isinstance(b, accy.dsl.traced.Tile) and b.dtype.is_bool and b.shape == S]
                        if bools:
                            mask = mask & bools[0]
                    if w.chance(0.5):
                        wild = w.pick(WILD)
                        idx = [t.where(mask, i, wild) for i in idx]
                        w.note(f"masked-off store indices are {wild}")
                    handle.store(tuple(idx), v, mask=mask)
                    w.note(f"out.store(reversed program box, masked, {v.type})")
            if hist is not None:
                kind, bins = hist
                ints = [v for v in w.pool if isinstance(v, accy.dsl.traced.Tile) and (v.dtype.is_int or v.dtype.is_index)]
                if ints:
                    v = ints[0]
                    where = (v.cast(index) % bins + bins) % bins
                    value = (v.cast(i32) & 255) - 100
                    m = where != (lin % bins)
                    getattr(p.hist, f"atomic_{kind}")(where, value, mask=m)
            if dot is not None:
                dt, tf32, Mt, Nt, Kt, A, B, C = dot
                acc_dt = {"f64": f64, "i8": i32, "u8": i32}.get(dt.name, f32)
                m0 = lin * Mt
                K = p.da.shape[1]
                N = p.db.shape[1]

                def step(t, k0, acc):
                    a = p.da.load_tile((m0, k0), (Mt, Kt))
                    b = p.db.load_tile((k0, 0), (Kt, Nt))
                    return t.dot(a, b, acc, precision="tf32" if tf32 else "ieee")

                acc = t.fold_range(0, K, Kt, t.zeros((Mt, Nt), acc_dt), step)
                p.dc.store_tile((m0, 0), acc)
            drawn.probe_sizes.update(sizes)

    drawn.program = accy.Program(f"fuzz_tile_{seed}", params, kernel)
    drawn.program.traced_graph  # trace now: the body fills the probe sizes and checks
    if dot is not None:
        dt, tf32, Mt, Nt, Kt, A, B, C = dot
        a, b = A.layout.view(A.base), B.layout.view(B.base)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if tf32:
            from tile_kernels import tf32_reference
            a64, b64 = tf32_reference(a).astype(np.float64), tf32_reference(b).astype(np.float64)
        M, N = C.shape
        rows = min(M, int(np.prod(grid)) * Mt)
        cols = min(N, Nt)
        written = np.zeros((M, N), bool)
        written[:rows, :cols] = True
        with np.errstate(all="ignore"):
            exact = a64 @ b64
            mag = np.abs(a64) @ np.abs(b64)
        if dt.is_int:
            exact = (np.asarray(a, np.int64) @ np.asarray(b, np.int64)).astype(np.int32)
            bound = None
        else:
            K = a.shape[1]
            u = UNIT["f64" if dt == f64 else "f32"]
            iters = -(-K // Kt)
            bound = gamma(K + iters, u) * mag + TINY["f64" if dt == f64 else "f32"] * (K + 1)
        dot_checks.append(DotCheck("dc", exact, bound, written))
        drawn.notes.append(f"dot {dt}{' tf32' if tf32 else ''}: tiles {Mt}x{Kt} @ {Kt}x{Nt} over K={A.shape[1]} "
                           f"in a fold -> dc ({rows}x{cols} written)")
    drawn.dot_checks = dot_checks
    return drawn


# -- running and checking -------------------------------------------------------------------------


@attrs.frozen
class Run:
    args: dict | None = None
    bases: dict | None = None
    error: Exception | None = None


def run_on(drawn: Drawn, backend: str, **options) -> Run:
    """One run of ``drawn`` on ``backend`` on fresh arguments."""
    args, bases = drawn.arguments()
    try:
        drawn.program.run(args, backend=backend, **options)
    except accy.errors.AccyError as e:
        return Run(error=e)
    return Run(args, bases)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fV" else a


def _same(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Elementwise: equal bits (a zero's sign counts), or both NaN."""
    same = _bits(want) == _bits(got)
    if want.dtype.kind in "fV":
        same |= np.isnan(want.astype(np.float64)) & np.isnan(got.astype(np.float64))
    return same


def _first(name, bad, want, got, extra="") -> str:
    i = int(np.flatnonzero(bad)[0])
    return (f"{name}: {int(bad.sum())} of {bad.size} elements differ, first at flat [{i}]: want "
            f"{want.reshape(-1)[i]!r}, got {got.reshape(-1)[i]!r}{extra}")


def _within(name, exact, bound, got, dtype) -> str | None:
    if isinstance(dtype, np.dtype):
        dtype = bf16 if dtype == numpy_dtype(bf16) else accy.dsl.types.as_dtype(dtype.name.replace("float", "f").replace("int", "i"))
    g = got.astype(np.float64)
    finite = np.isfinite(exact)
    top = float(np.finfo(numpy_dtype(dtype)).max) if dtype != bf16 else float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    with np.errstate(all="ignore"):
        near_overflow = np.abs(exact) + bound >= top
        ok = np.where(finite, (np.abs(g - exact) <= bound) | (near_overflow & (np.isinf(g) | (np.abs(g - exact) <= bound))),
                      (np.isnan(exact) & np.isnan(g)) | (g == exact))
    if ok.all():
        return None
    i = int(np.flatnonzero(~ok)[0])
    return (f"{name}: {int((~ok).sum())} of {ok.size} outside the bound, first at [{i}]: exact {exact[i]!r}, "
            f"got {g[i]!r}, bound {bound[i]!r}")


def check(drawn: Drawn, runs: dict[str, Run]) -> list[str]:
    """What disagrees: any run that raised (every fuzzed program is valid and in bounds), and
    every output against the numpy run (bit for bit) or against float64 (within the bound)."""
    problems = [f"{name} raised {type(r.error).__name__}: {r.error}" for name, r in runs.items() if r.error]
    ref = runs["numpy"]
    if ref.error is not None:
        return problems
    bounded: dict[str, np.ndarray] = {}  # probe name -> the elements checked by bound, not bits
    for c in drawn.sum_checks:
        n = drawn.probe_sizes[c.dtype]
        mask = bounded.setdefault(c.dtype, np.zeros(n * drawn.programs, bool))
        size = len(c.bound(np.zeros(math.prod(c.shape)))[0])
        for prog in range(drawn.programs):
            mask[prog * n + c.start: prog * n + c.start + size] = True
    for name, r in runs.items():
        if r.error is not None or name == "numpy":
            continue
        for tname, base in ref.bases.items():
            got = r.bases[tname]
            if tname == "dc" and not drawn.dot_checks[0].exact.dtype.kind == "i":
                continue
            bad = ~_same(base, got)
            if bad.any():
                problems.append(_first(f"{tname} (base array): numpy vs {name}", bad, base, got))
        for dt in PROBE_DTYPES:
            key = f"probe_{dt.name}"
            want, got = ref.args[key], r.args[key]
            bad = ~_same(want, got) & ~bounded.get(dt.name, np.zeros(want.shape, bool))
            if bad.any():
                problems.append(_first(f"{key}: numpy vs {name}", bad, want, got))
        if drawn.hist is not None:
            bad = ref.args["hist"] != r.args["hist"]
            if bad.any():
                problems.append(_first(f"hist: numpy vs {name}", bad, ref.args["hist"], r.args["hist"]))
    for name, r in runs.items():  # the bounded results, the reference's too
        if r.error is not None:
            continue
        for c in drawn.sum_checks:
            n = drawn.probe_sizes[c.dtype]
            probe, terms_of = r.args[f"probe_{c.dtype}"], ref.args[f"probe_{c.dtype}"]
            size = math.prod(c.shape)
            for prog in range(drawn.programs):
                terms = terms_of[prog * n + c.terms: prog * n + c.terms + size]
                exact, bound = c.bound(terms)
                got = probe[prog * n + c.start: prog * n + c.start + exact.size]
                p = _within(f"{'cum' if c.scan else ''}sum of {c.dtype} {c.shape} axis {c.axis} "
                            f"(probe [{c.start}], program {prog}) on {name}", exact, bound, got,
                            getattr(accy, c.dtype))
                if p:
                    problems.append(p)
        for c in drawn.dot_checks:
            got = r.args[c.name]
            init = next(t for t in drawn.tensors if t.name == c.name).layout.view(
                next(t for t in drawn.tensors if t.name == c.name).base)
            unwritten = ~c.written & ~_same(init, got)
            if unwritten.any():
                problems.append(_first(f"dc (unwritten part) on {name}", unwritten, init, got))
            if c.bound is None:
                bad = c.written & (got != c.exact)
                if bad.any():
                    problems.append(_first(f"integer dot on {name}", bad, c.exact, got))
                continue
            p = _within(f"dot on {name}", c.exact[c.written], c.bound[c.written], got[c.written], got.dtype)
            if p:
                problems.append(p)
    return problems
