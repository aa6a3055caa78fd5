"""The rebuilding core of the tile distribution (:mod:`accy.lowering.distribute`): what every
part of it records into and reads, and index arithmetic on coordinates."""

from __future__ import annotations

import contextlib

from ..dsl.ir import Op, Value
from ..dsl.traced import Traced
from ..dsl.types import index


def strides(shape) -> tuple[int, ...]:
    """The row-major strides of ``shape``."""
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


class Rebuild:
    """The SIMT graph being recorded: the builder of the region being built (``b``), each tile-graph
    value's distributed value (``env``), caches scoped to regions, this thread's index (``tid``) of
    ``T`` threads, and arithmetic on coordinates that folds Python ints (so that tiles' static
    coordinates record nothing)."""

    def __init__(self, threads: int):
        self.T = threads
        self.b = None  # the builder of the region being recorded
        self.launch = None  # the builder of the program's (block launch's) body
        self.tid = None  # this thread's index in its program
        self.env: dict[Value, object] = {}
        self.scopes: list[dict] = [{}]
        self.current_op: Op | None = None  # the tile op being rewritten (for errors)

    # -- scopes: caches of what was recorded in a region are not seen outside it --------
    def lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key, value):
        self.scopes[-1][key] = value
        return value

    @contextlib.contextmanager
    def region(self, inner):
        saved = self.b
        self.b = inner
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.b = saved

    def within(self, inner, fn):
        """``fn()`` recorded into the region of builder ``inner``."""
        with self.region(inner):
            result = fn()
        return result

    def record(self, opcode: str, operands, attrs_=None) -> Op:
        return self.b.record(opcode, operands, attrs_)

    def copy(self, op: Op) -> None:
        """The tile graph's scalar ``op`` recorded as it is, on its operands' values."""
        new = self.record(op.opcode, [self.env[v] for v in op.operands], op.attrs)
        for old, value in zip(op.results, new.results):
            self.env[old] = Traced(value)

    # -- small arithmetic on coordinates (Python ints fold here) ------------------------
    def const(self, value, dtype=index) -> Traced:
        return self.b.constant(value, dtype)

    def traced(self, x, dtype=index) -> Traced:
        return x if isinstance(x, Traced) else self.const(x, dtype)

    def add(self, a, b):
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if isinstance(b, int) and b == 0:
            return a
        if isinstance(a, int) and a == 0:
            return b
        return self.b.add(self.traced(a), self.traced(b))

    def mul(self, a, k: int):
        if isinstance(a, int):
            return a * k
        if k == 1:
            return a
        if k == 0:
            return 0
        return self.b.mul(a, k)

    def times(self, a, b):
        """``a * b`` for ints or traced indices, Python ints folded."""
        if isinstance(b, int):
            return self.mul(a, b)
        if isinstance(a, int):
            return self.mul(b, a)
        return self.b.mul(a, b)

    def divmod_(self, a, k: int):
        if isinstance(a, int):
            return divmod(a, k)
        if k == 1:
            return a, 0
        return self.b.floor_div(a, k), self.b.mod(a, k)

    def flat(self, coords, shape, base=0):
        """The row-major position of ``coords`` in ``shape`` (plus ``base``)."""
        out = base
        for c, s in zip(coords, strides(shape)):
            out = self.add(out, self.mul(c, s))
        return out

    def unflat(self, e, shape):
        out = []
        for n in reversed(shape):
            if n == 1:
                out.append(0)
                continue
            q, r = self.divmod_(e, n)
            out.append(r)
            e = q
        return tuple(reversed(out))

    def all_of(self, conds):
        conds = [c for c in conds if c is not None]
        out = None
        for c in conds:
            out = c if out is None else self.b.logical_and(out, c)
        return out


class Part:
    """A part of the distribution: it records through the rebuilding core it holds (``core``);
    ``b``, ``env``, ``tid`` and ``T`` read the core's."""

    def __init__(self, core: Rebuild):
        self.core = core

    @property
    def b(self):
        return self.core.b

    @property
    def env(self) -> dict:
        return self.core.env

    @property
    def tid(self):
        return self.core.tid

    @property
    def T(self) -> int:
        return self.core.T
