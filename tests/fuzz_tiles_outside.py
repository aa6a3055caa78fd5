"""Out-of-bounds tile programs for the tile fuzzer (tests/test_fuzz_tiles.py).

:func:`draw_outside` takes the program :func:`fuzz_tiles.draw` gives a seed and makes exactly one
of its tensor accesses reach outside its tensor's shape, as a user gets it wrong (the RNG that
picks the fault is the seed's own, apart from the program's, which stays as drawn):

* a masked ``load`` (a gather through index tiles) or ``store`` (the output's reversed box), in
  one dimension: the mask loosened past the end (``a < extent + s``), the index shifted after
  the mask was made of it (``a + s``, below 0 or past the end), or the index shifted down by
  ``s`` under a mask with no lower bound (``a - s < extent``, Triton's usual mask).  The
  language promises an OutOfBoundsError where an active element is outside: naming the access
  and the tensor ("load from tensor 'x0'"), the dimension, and nothing written;
* a ``load_tile`` or ``store_tile`` box's origin moved partly (sometimes wholly) outside in
  one dimension.  A box masks its outside (accy/dsl/tiles.py: positions past the tensor's
  edges read ``other``, or are not written), so the run must succeed and agree with numpy.

Whether an active element does reach outside depends on the extents (drawn near the grid's
coverage, mostly not multiples of the tile), the amount, the program's other masks: the numpy run decides (:func:`check_outside`), and where it ran, every
backend must agree with it as an in-bounds program's runs do (:func:`fuzz_tiles.check`).
"""

from __future__ import annotations

import attrs
import numpy as np

import fuzz_tiles
from accy.errors import AccyError, OutOfBoundsError

MASKED = ("load", "store")  # the access kinds that fail outside; load_tile and store_tile mask
FORMS = {  # how a masked access's dimension is got wrong
    "mask past the end": "the mask loosened to a < extent + {s}",
    "index shifted after the mask": "the index shifted to a + {s}, the mask made of a",
    "no lower bound": "the index shifted to a - {s} under the mask a - {s} < extent",
}


@attrs.define
class Site:
    """One tensor access of a traced body: ``kind`` (load, store, load_tile, store_tile), its
    tensor and the tile's size along each dimension."""

    kind: str
    tensor: str
    sizes: list[int] = attrs.Factory(list)


@attrs.frozen
class Plan:
    """The fault: at access number ``site`` (in trace order), dimension ``dim``, ``form``
    (a key of FORMS, or "box moved") by ``amount`` elements."""

    site: int
    kind: str
    tensor: str
    dim: int
    form: str
    amount: int

    def describe(self) -> str:
        what = FORMS.get(self.form, "its origin moved by {s}").format(s=self.amount)
        return f"access {self.site}, {self.tensor}.{self.kind}, dimension {self.dim}: {what}"

    def message(self) -> str:
        """What an OutOfBoundsError for this fault says before its program's coordinates."""
        verb = "load from" if self.kind == "load" else "store to"
        return f"{verb} tensor '{self.tensor}': the index in dimension {self.dim} is outside its shape"


class Fault(fuzz_tiles.InBounds):
    """The hooks (:class:`fuzz_tiles.InBounds`) that record each access of a trace in ``sites``
    and, with a ``plan``, make its access reach outside."""

    def __init__(self, plan: Plan | None = None):
        self.plan = plan
        self.sites: list[Site] = []

    def begin(self):
        self.sites = []

    def _target(self) -> bool:
        return self.plan is not None and len(self.sites) - 1 == self.plan.site

    def box(self, kind, tensor, origin, shape):
        self.sites.append(Site(kind, tensor, list(shape)))
        if not self._target():
            return origin
        d = self.plan.dim
        return tuple(o + self.plan.amount if k == d else o for k, o in enumerate(origin))

    def access(self, kind, tensor):
        self.sites.append(Site(kind, tensor))

    def index(self, d, a, extent):
        self.sites[-1].sizes.append(a.shape[d])
        if not (self._target() and d == self.plan.dim):
            return super().index(d, a, extent)
        s = self.plan.amount
        if self.plan.form == "mask past the end":
            return a, (a >= 0) & (a < extent + s)
        if self.plan.form == "index shifted after the mask":
            return a + s, (a >= 0) & (a < extent)
        return a - s, a - s < extent  # no lower bound


@attrs.define
class Outside:
    seed: int  # draw_outside's (the program's own is drawn.seed)
    drawn: fuzz_tiles.Drawn
    plan: Plan

    @property
    def masked(self) -> bool:
        """Whether the fault is in a masked access (else in a box, which masks its outside)."""
        return self.plan.kind in MASKED

    def describe(self) -> str:
        return (f"out-of-bounds seed {self.seed}: " + self.drawn.describe()
                + "\n  out of bounds: " + self.plan.describe())


def _plan(rng, sites: list[Site], pool: list[int], extents: dict[str, tuple[int, ...]]) -> Plan:
    k = int(pool[int(rng.integers(len(pool)))])
    site = sites[k]
    d = int(rng.integers(len(site.sizes)))
    size, extent = site.sizes[d], extents[site.tensor][d]
    if site.kind in MASKED:  # amounts from a step past the edge to a tile's and the extent's
        form = list(FORMS)[int(rng.integers(len(FORMS)))]
        amount = int(rng.choice([1, 1, 2, size, 2 * size + 1, extent]))
        if form == "index shifted after the mask" and rng.random() < 0.5:
            amount = -amount
    else:  # partly outside at either end; now and then wholly
        form = "box moved"
        amount = int(rng.choice([1, 2, max(1, size - 1), size, extent])) * int(rng.choice([-1, 1]))
    return Plan(k, site.kind, site.tensor, d, form, amount)


def draw_outside(seed: int) -> Outside:
    """A program :func:`fuzz_tiles.draw` gives, with one access reaching outside: three times in
    four a masked access's, else a box's.  The program is the one ``seed`` gives if it has an
    access of that kind, else the first that has of ``seed + j * 2**32`` (a program no other
    seed under 2**32 takes)."""
    rng = np.random.default_rng([seed, 0x0B])
    masked = rng.random() < 0.75
    for j in range(100):
        census = Fault()
        drawn = fuzz_tiles.draw(seed + j * 2**32, fault=census)
        pool = [k for k, s in enumerate(census.sites) if (s.kind in MASKED) == masked]
        if pool:
            break
    else:
        raise AssertionError(f"seed {seed}: 100 programs and none with a {'masked' if masked else 'box'} access")
    plan = _plan(rng, census.sites, pool, {t.name: t.shape for t in drawn.tensors})
    return Outside(seed, fuzz_tiles.draw(drawn.seed, fault=Fault(plan)), plan)


# -- running and checking -------------------------------------------------------------------------


@attrs.frozen
class Kept:
    """One run on fresh arguments: the arrays after it (those given kept even where it raised),
    as they were before it, and what it raised."""

    args: dict
    bases: dict
    before: dict
    error: AccyError | None


def _arrays(args: dict, bases: dict) -> dict:
    """Every array a run can change: the tensors' base arrays (gaps included), the buffers."""
    return dict(bases) | {name: a for name, a in args.items() if isinstance(a, np.ndarray) and name not in bases}


def run_kept(drawn: fuzz_tiles.Drawn, backend: str, **options) -> Kept:
    args, bases = drawn.arguments()
    before = {name: a.copy(order="A") for name, a in _arrays(args, bases).items()}
    try:
        drawn.program.run(args, backend=backend, **options)
    except AccyError as e:
        return Kept(args, bases, before, e)
    return Kept(args, bases, before, None)


def _head(error: Exception) -> str:
    """The message up to the program's coordinates: the GPU's programs run at once, so any
    failing one may be the one reported."""
    return str(error).split(" (")[0]


def check_outside(o: Outside, runs: dict[str, Kept]) -> tuple[bool, list[str]]:
    """(whether the program reached outside, what disagrees).  Reached: numpy's run raised
    OutOfBoundsError (only a masked access may), and every run must raise it too, naming the
    tensor and dimension of the fault and leaving every array as it was.  Else every run must
    agree with numpy's as an in-bounds program's do."""
    ref = runs["numpy"]
    if ref.error is None:
        plain = {name: fuzz_tiles.Run(error=r.error) if r.error else fuzz_tiles.Run(r.args, r.bases)
                 for name, r in runs.items()}
        return False, fuzz_tiles.check(o.drawn, plain)
    if not isinstance(ref.error, OutOfBoundsError) or not o.masked:
        return False, [f"numpy raised {type(ref.error).__name__}: {ref.error}"
                       + ("" if o.masked else " (a box masks its outside: it must run)")]
    problems = []
    if _head(ref.error) != o.plan.message():
        problems.append(f"numpy's error does not name the fault ({o.plan.message()}): {ref.error}")
    for name, r in runs.items():
        if not isinstance(r.error, OutOfBoundsError):
            got = "ran" if r.error is None else f"raised {type(r.error).__name__}: {r.error}"
            problems.append(f"{name} {got}; numpy raised OutOfBoundsError: {ref.error}")
        elif _head(r.error) != _head(ref.error):
            problems.append(f"{name} raised {r.error}; numpy raised {ref.error}")
        for array, was in r.before.items():
            now = _arrays(r.args, r.bases)[array]
            bad = fuzz_tiles._bits(was) != fuzz_tiles._bits(now)
            if bad.any():
                problems.append(fuzz_tiles._first(f"{array} written by {name}'s failed run", bad, was, now))
    return True, problems
