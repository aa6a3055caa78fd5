"""Autotuning with a memory: pick the fastest of a kernel's configs once per key, and remember it.

``@accy.autotune(configs=[dict(BM=64, BN=64, warps=4), ...], key=("a", "b"))`` above
``@accy.kernel(...)`` makes an :class:`Autotuned` kernel whose body takes each config's entries
as keyword arguments (``def matmul(k, p, *, BM, BN, warps)``); it runs like a
:class:`~accy.Program`.  The first run for a new key (the named scalars' values, the named
arrays' shapes and dtypes) on a backend compiles and measures every config, on scratch copies of
the outputs, keeps the fastest, and stores the choice through the compile cache
(:mod:`accy.cache`, under ``ACCY_CACHE_DIR``), so a later process reuses it untimed:

- ``numpy``, ``llvm`` and ``cuda``: wall time, each config's best run after a warm-up run that
  compiles, the configs taking turns round by round so that load from other processes falls
  on all alike (a config far slower than the best is dropped after a round);
- ``ptx``: the emulator's wall time says nothing about a GPU, so configs are ranked by
  ``Program.profile``'s estimate for the run's ``arch`` (the ptx backend's sm_80 unless given).

A kernel with constexpr parameters (``BLOCK=accy.constexpr(int)``) takes a config's entries
that name them as their values (as Triton's ``triton.Config({"BLOCK": 64})``); the others come
with each run, and their values always key the choice (each value is a kernel of its own).

The store's key is every config's traced graph text (specialised on the run's constexpr
values), the key's values, the backend and its options, the device (the CPU for numpy and
llvm, the arch for ptx and cuda) and accy's version.
A record that cannot be read back is tuned again.  ``ACCY_AUTOTUNE=0`` takes the first config
without timing anything.

A config that fails (it does not trace or compile, its body raises any Python error, a run-time
check fails) is recorded with its error and skipped; when every config fails, AutotuneError lists
each with why.  Each run of a config (its warm-up, which compiles, and each timed run) has a time
limit of ``max(time_limit, time_factor x the best so far)`` (the best warm-up while warming up,
then the best timed run), ``time_limit=10`` s and ``time_factor=10`` unless given to
:func:`autotune` or set by ``ACCY_AUTOTUNE_TIME_LIMIT`` and ``ACCY_AUTOTUNE_TIME_FACTOR``; a run
past it is stopped (:mod:`accy.time_limit`: between an llvm launch's ~10 ms slices, the numpy
interpreters' blocks, the PTX emulator's steps) and its config recorded as failed with a
TimeLimitError.  Ctrl-C during tuning stops it as promptly (nothing is stored).  A progress line is drawn on stderr while tuning, when it is a terminal.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import threading
import time
from typing import Callable, Mapping, Sequence

import attrs
import numpy as np

from .errors import AccyError, ArgumentError, AutotuneError
from .program import Program
from .runtime import get_backend
from .time_limit import time_limit as run_limit
from .version import __version__

FORMAT = 1  # of a stored record; bump when it changes
TIMED_ROUNDS = 5  # rounds of timing, each running every config still in the running once
TUNING_SECONDS = 2.0  # the rounds stop once their runs took this long (after one round)
CUT_FACTOR = 3.0  # a config this many times slower than the best is not run in later rounds,
CUT_AFTER = 2  # from this round on (one run may be slowed several times over by other processes)
RUN_OPTIONS = ("counts", "shapes")  # Program.run's options that are not the backend's
UNDECIDING_OPTIONS = ("stream", "timing")  # cuda's: they change how a run is made or reported, not its speed
SCALARS = (bool, int, float, str)  # what a config's values may be: they are stored as JSON
TIME_LIMIT = 10.0  # seconds a config's run may always take (its warm-up compiles too) ...
TIME_FACTOR = 10.0  # ... or this many times the best so far, if longer


@attrs.frozen
class ConfigResult:
    """One config's outcome: ``seconds`` (the best wall time of ``runs`` runs, or on ptx the
    profile's estimate; None when untimed or failed) and ``failed`` (why it could not run)."""

    config: dict
    seconds: float | None = None
    runs: int = 0
    failed: str | None = None


@attrs.frozen
class TuningRecord:
    """How an :class:`Autotuned` kernel chose its config for one key on one backend.

    ``method`` says what ``seconds`` are: "wall time", "estimate" (ptx: the profile's roofline
    estimate, not wall time) or "untuned" (``ACCY_AUTOTUNE=0``); ``ranking`` says it in words.
    ``from_store``: the choice was read back from the disk store, nothing was timed."""

    kernel: str
    backend: str
    key: dict  # key name -> its value as text
    device: str
    method: str
    ranking: str
    chosen: int
    results: tuple[ConfigResult, ...]
    from_store: bool = False
    tuning_seconds: float = 0.0  # spent measuring (0 when from the store or untuned)

    @property
    def config(self) -> dict:
        """The chosen config."""
        return dict(self.results[self.chosen].config)

    @property
    def seconds(self) -> list:
        """Each config's seconds, in config order (None: untimed or failed)."""
        return [r.seconds for r in self.results]

    def to_json(self) -> dict:
        return attrs.asdict(self, recurse=True)

    @classmethod
    def from_json(cls, data: dict) -> "TuningRecord":
        results = tuple(ConfigResult(**r) for r in data.pop("results"))
        return cls(**data, results=results)

    def __str__(self) -> str:
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        source = "from the store" if self.from_store else f"tuned in {self.tuning_seconds:.2f} s"
        lines = [f"autotune {self.kernel} on {self.backend} ({self.device}), {key}: {source}; {self.ranking}"]
        for i, r in enumerate(self.results):
            mark = "*" if i == self.chosen else " "
            figure = r.failed and f"failed: {r.failed}" or (_seconds(r.seconds) if r.seconds is not None else "-")
            lines.append(f" {mark} {_config_text(r.config)}: {figure}")
        return "\n".join(lines)


def _seconds(s: float) -> str:
    return f"{s * 1e3:.4g} ms" if s >= 1e-3 else f"{s * 1e6:.4g} us"


def _config_text(config: Mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


# -- checking what the decorator is given ----------------------------------------------------------


def _checked_configs(configs) -> tuple[dict, ...]:
    if isinstance(configs, (str, bytes, Mapping)) or not isinstance(configs, Sequence) or not configs:
        raise AutotuneError(f"autotune: configs must be a non-empty list of dicts, got {configs!r}")
    checked = []
    for i, config in enumerate(configs):
        if not isinstance(config, Mapping):
            raise AutotuneError(f"autotune: config {i} must be a dict of keyword arguments, got {config!r}")
        bad = [k for k, v in config.items() if not isinstance(k, str) or not k.isidentifier()
               or not isinstance(v, SCALARS)]
        if bad:
            raise AutotuneError(f"autotune: config {i} {dict(config)!r}: {bad[0]!r} must name a keyword argument "
                                f"and hold a bool, int, float or str (configs are stored as JSON)")
        checked.append(dict(config))
    names = list(checked[0])
    for i, config in enumerate(checked[1:], 1):
        if set(config) != set(names):
            missing, extra = sorted(set(names) - set(config)), sorted(set(config) - set(names))
            raise AutotuneError(f"autotune: config {i} {config!r} does not have config 0's keys ({', '.join(names)}): "
                                + "; ".join(filter(None, [missing and f"missing {', '.join(missing)}",
                                                          extra and f"extra {', '.join(extra)}"])))
    return tuple(checked)


def _check_body_takes(body: Callable, names, kernel: str) -> None:
    try:
        params = inspect.signature(body, follow_wrapped=False).parameters  # a wrapper's own: it may fill some
    except (TypeError, ValueError):
        return  # a builtin or C callable: tracing will say
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = {n for n, p in params.items() if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                       inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    missing = [n for n in names if n not in takes]
    if missing:
        raise AutotuneError(f"autotune: the body of '{kernel}' takes no keyword argument {', '.join(missing)}; "
                            f"every config entry is passed to it (def {kernel}(k, p, *, {', '.join(names)}))")
    unset = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
             and p.default is inspect.Parameter.empty and n not in names]
    if unset:
        raise AutotuneError(f"autotune: the body of '{kernel}' needs keyword argument {', '.join(unset)}, which "
                            f"no config gives: add it to every config (or give it a default in the body)")


def _checked_key(key, program: Program, config_names) -> tuple[str, ...]:
    """The key's names, checked, and after them the constexpr parameters no config binds: each
    value of one is a kernel of its own, so it always keys the choice."""
    if isinstance(key, str):
        key = (key,)
    declared = [p.name for p in program.call_order]
    key = tuple(key)
    for name in key:
        if name not in declared:
            raise AutotuneError(f"autotune: key {name!r} is not a parameter of '{program.name}' "
                                f"(its parameters: {', '.join(declared)})")
        if name in config_names:
            raise AutotuneError(f"autotune: key {name!r} is a constexpr parameter every config sets, so its "
                                f"value cannot key the choice")
    return key + tuple(c.name for c in program.constexprs if c.name not in key and c.name not in config_names)


# -- the arguments: named, the key's values, scratch outputs ---------------------------------------


def _named(args, program) -> dict:
    params = program.call_order
    if isinstance(args, Mapping):
        return dict(args)
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or len(args) != len(params):
        raise AutotuneError(f"'{program.name}': expected {len(params)} arguments "
                            f"({', '.join(p.name for p in params)}), by position or by name")
    return {p.name: a for p, a in zip(params, args)}


def _key_text(value) -> str:
    """A scalar's value, or an array's shape and dtype."""
    shape = getattr(value, "shape", None)
    if shape is not None and getattr(value, "ndim", 0) > 0:
        # torch names its dtypes "torch.float32": the key of NumPy's float32, so either reuses the other's choice
        dtype = str(getattr(value, "dtype", "")).removeprefix("torch.")
        return f"{tuple(int(n) for n in shape)} {dtype}".rstrip()
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def _scratch(name: str, array):
    """A copy of ``array`` with its layout (a transposed view stays transposed)."""
    if isinstance(array, np.ndarray):
        copy = np.empty_like(array, order="K")
        np.copyto(copy, array)
        return copy
    for method in ("clone", "copy"):  # a torch tensor, a CuPy array
        if callable(getattr(array, method, None)):
            return getattr(array, method)()
    raise AutotuneError(f"autotune: cannot copy output '{name}' (a {type(array).__name__}) to tune on; pass a "
                        f"NumPy array, or an array with clone() or copy()")


def _restorer(scratch: dict, outputs: dict) -> Callable[[], None]:
    """Puts the caller's outputs' values back into the scratch copies."""
    def restore():
        for name, original in outputs.items():
            scratch[name][...] = original

    return restore


def _argument(args, name: str, position: int):
    return args[name] if isinstance(args, Mapping) else args[position]


def _cheap_key(value):
    """What of ``value`` a key depends on, fast: an array's shape and dtype, a scalar's type and value."""
    if isinstance(value, np.ndarray):
        return value.shape, value.dtype.str
    if isinstance(value, (bool, int, float, np.generic)):
        return type(value), value
    raise TypeError("no cheap key")  # another array type (hashed by identity): the full path, every time


def _untuned() -> bool:
    return os.environ.get("ACCY_AUTOTUNE", "1").lower() in ("0", "false", "no", "off")


# -- the device and the store ----------------------------------------------------------------------


def _device(backend: str, options: Mapping) -> str:
    return get_backend(backend).device(options)


def _store_key(programs: Sequence[Program], key: dict, backend: str, options: Mapping, device: str) -> str:
    from . import cache

    graphs = []
    for program in programs:
        try:
            text = program.traced_graph.text()
        except Exception as e:  # a config that does not trace is a failed config; its error names it
            text = f"untraceable: {type(e).__name__}: {e}"
        graphs.append(hashlib.sha256(text.encode()).hexdigest())
    return cache.cache_key("autotune", str(FORMAT), *graphs, json.dumps(key, sort_keys=True), backend,
                           json.dumps(dict(options), sort_keys=True, default=repr), device, f"accy-{__version__}")


def _load(store_key: str, configs: tuple[dict, ...]) -> TuningRecord | None:
    """The stored record, or None when there is none or it is unreadable or stale (retuned)."""
    from . import cache

    payload = cache.read(store_key)
    if payload is None:
        return None
    try:
        data = json.loads(payload)
        if data.pop("format") != FORMAT:
            return None
        record = TuningRecord.from_json(data)
        ok = ([r.config for r in record.results] == list(configs) and 0 <= record.chosen < len(configs)
              and record.results[record.chosen].failed is None)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return attrs.evolve(record, from_store=True, tuning_seconds=0.0) if ok else None


def _save(store_key: str, record: TuningRecord) -> None:
    from . import cache

    cache.write(store_key, json.dumps({"format": FORMAT, **record.to_json()}).encode())


# -- measuring ------------------------------------------------------------------------------------


class _Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, kernel: str, total: int):
        self.kernel, self.total = kernel, total
        self.on = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()

    def show(self, done: int, what: str) -> None:
        if self.on:
            bar = "#" * done + "." * (self.total - done)
            sys.stderr.write(f"\rautotune {self.kernel} [{bar}] {done}/{self.total} {what}\033[K")
            sys.stderr.flush()

    def close(self, record: TuningRecord) -> None:
        if self.on:
            sys.stderr.write(f"\rautotune {self.kernel}: {_config_text(record.config)} "
                             f"({record.tuning_seconds:.1f} s, {record.method})\033[K\n")
            sys.stderr.flush()


def _failure(config: dict, error: Exception) -> ConfigResult:
    lines = str(error).splitlines()
    return ConfigResult(config, failed=f"{type(error).__name__}: {lines[0] if lines else repr(error)}")


def _time_limits(time_limit, time_factor) -> tuple[float, float]:
    """(floor seconds, factor): as given to autotune, else from the environment, else the defaults."""
    limits = []
    for given, variable, default in ((time_limit, "ACCY_AUTOTUNE_TIME_LIMIT", TIME_LIMIT),
                                     (time_factor, "ACCY_AUTOTUNE_TIME_FACTOR", TIME_FACTOR)):
        where = "autotune's " + ("time_limit" if variable.endswith("LIMIT") else "time_factor")
        if given is None:
            given, where = os.environ.get(variable, default), variable
        try:
            value = float(given)
        except (TypeError, ValueError):
            value = float("nan")
        if isinstance(given, bool) or not value > 0 or value == float("inf"):
            raise AutotuneError(f"autotune: {where} must be a positive number of seconds or a factor, got {given!r}")
        limits.append(value)
    return limits[0], limits[1]


class _Limit:
    """Each config run's time limit: max(floor, factor x the best so far)."""

    def __init__(self, floor: float, factor: float):
        self.floor, self.factor, self.best = floor, factor, None

    def seconds(self) -> float:
        return self.floor if self.best is None else max(self.floor, self.factor * self.best)

    def ran(self, seconds: float) -> None:
        self.best = seconds if self.best is None else min(self.best, seconds)

    def __call__(self, config: dict):
        seconds = self.seconds()
        return run_limit(seconds, f"config {_config_text(config)} (time limit max({self.floor:g} s, "
                                  f"{self.factor:g} x the best so far))")


@attrs.define
class _Timed:
    """A config's program ready to time: compiled and warmed by one run on scratch outputs."""

    config: dict
    run: Callable[[], object]
    reset: Callable[[], None]
    times: list = attrs.Factory(list)

    def once(self, limit: _Limit) -> float:
        self.reset()  # the outputs as the caller passed them, untimed
        start = time.perf_counter()
        with limit(self.config):
            self.run()
        seconds = time.perf_counter() - start
        self.times.append(seconds)
        return seconds


def _measure(program: Program, config: dict, args: dict, scratch: dict, reset: Callable[[], None], backend: str,
             limits, options: dict, limit: _Limit):
    """One config made ready: on ptx its result (the profile's estimate, for ``args``: the profile
    writes to scratch itself), elsewhere a :class:`_Timed` on the ``scratch`` arguments after its
    warm-up run (which compiles), or a failed result; run under ``limit``, and its time given to it."""
    start = time.perf_counter()
    try:  # any error a config raises, accy's or the body's own, is that config's failure (Ctrl-C is not)
        with limit(config):
            estimate = get_backend(backend).estimate
            if estimate is not None:  # the profile writes to scratch itself
                outcome = ConfigResult(config, estimate(program, args, options, limits), 1)
            else:
                outcome = _Timed(config, lambda: program.run(scratch, backend, limits=limits, **options), reset)
                outcome.reset()
                outcome.run()
    except Exception as e:
        return _failure(config, e)
    limit.ran(time.perf_counter() - start)
    return outcome


def _time_in_turns(ready: dict[int, _Timed], results: list, progress: _Progress, limit: _Limit) -> None:
    """Time the ready configs in rounds, one run of each per round, so that load from other
    processes falls on all of them alike; from round CUT_AFTER on, a config slower than
    CUT_FACTOR x the best is dropped after its round; rounds stop after TIMED_ROUNDS or once
    their runs took TUNING_SECONDS.  Each run has ``limit`` (from the best timed run, once there
    is one).  Fills ``results`` with each one's best run."""
    spent, live = 0.0, dict(ready)
    limit.best = None
    for round_ in range(TIMED_ROUNDS):
        progress.show(progress.total, f"timing, round {round_ + 1} of at most {TIMED_ROUNDS}")
        for i, timed in list(live.items()):
            try:
                seconds = timed.once(limit)
            except Exception as e:  # ran once already: a run-time check on these values, or the time limit
                results[i], live = _failure(timed.config, e), {j: t for j, t in live.items() if j != i}
                continue
            spent += seconds
            limit.ran(seconds)
        if not live or spent >= TUNING_SECONDS:
            break
        if round_ + 1 >= CUT_AFTER:
            best = min(min(t.times) for t in live.values())
            live = {i: t for i, t in live.items() if min(t.times) <= CUT_FACTOR * best}
    for i, timed in ready.items():
        if results[i] is None:
            results[i] = ConfigResult(timed.config, min(timed.times), len(timed.times))


def _outputs(programs: Sequence[Program]) -> frozenset[str]:
    """The buffers the kernel writes, from the first config that traces (none traces: no outputs,
    and every config fails when it is measured)."""
    for program in programs:
        try:
            return program.graph.stored_buffers()
        except Exception:  # the body's own error too: that config fails when measured
            continue
    return frozenset()


def _ranking(backend: str, options: Mapping) -> tuple[str, str]:
    if get_backend(backend).estimate is not None:
        from .emulator.profile import default_gpu

        arch = options.get("arch", "sm_80")
        return "estimate", (f"ranked by accy profile's estimate for {arch} on {default_gpu(arch).name} (the "
                            f"emulator's counts through a roofline model), not by the emulator's wall time")
    return "wall time", (f"ranked by wall time: each config's best run, the configs taking turns for up to "
                         f"{TIMED_ROUNDS} rounds after a warm-up run that compiles")


# -- the autotuned kernel -------------------------------------------------------------------------


@attrs.define(eq=False)
class Autotuned:
    """A kernel with several configs, run with the fastest for each key (see the module's doc).

    ``programs[i]`` is the :class:`~accy.Program` of ``configs[i]`` (a config's entries that name
    constexpr parameters are bound, :meth:`~accy.Program.specialized`; the others are the body's
    keywords); ``run``, ``best_config`` and ``tuning_log`` tune on first use for a key and
    backend, then reuse the choice."""

    program: Program  # as @accy.kernel made it: its body takes the config's keywords
    configs: tuple[dict, ...]
    key: tuple[str, ...]
    time_limit: float | None = None  # a config run's limit: max(time_limit, time_factor x the best so far);
    time_factor: float | None = None  # None: from the environment, else the defaults (see the module)
    programs: tuple[Program, ...] = attrs.field(init=False)
    _records: dict = attrs.field(init=False, factory=dict)
    _recent: dict = attrs.field(init=False, factory=dict)  # a run's cheap key -> its record (run's fast path)
    _positions: tuple[int, ...] = attrs.field(init=False)  # the key's parameters' argument positions
    _lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def __attrs_post_init__(self):
        programs = []
        for i, config in enumerate(self.configs):
            try:
                programs.append(_config_program(self.program, config))
            except ArgumentError as e:  # a value a constexpr parameter does not take
                raise AutotuneError(f"autotune: config {i} {config!r}: {e}") from None
        self.programs = tuple(programs)
        declared = [p.name for p in self.call_order]
        self._positions = tuple(declared.index(name) for name in self.key)

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def parameters(self):
        return self.program.parameters

    @property
    def constexprs(self):
        """The constexpr parameters no config binds: a run passes their values."""
        return self.programs[0].constexprs

    @property
    def call_order(self):
        """What a run passes one argument for, in order (:attr:`accy.Program.call_order`; not
        the constexprs the configs bind)."""
        return self.programs[0].call_order

    def stored_buffers(self) -> frozenset[str]:
        """The parameters any config stores to (a config may write fewer)."""
        return frozenset().union(*(p.stored_buffers() for p in self.programs))

    def _specialised(self, named: dict) -> tuple[tuple[Program, ...], dict]:
        """Each config's program specialised on the run's constexpr values, and the other arguments."""
        if not self.constexprs:
            return self.programs, named
        specialised = [p.specialized_for(named) for p in self.programs]
        return tuple(p for p, _ in specialised), specialised[0][1]

    def run(self, args, backend: str = "numpy", *, limits=None, **options):
        """Run with the best config for these arguments' key on ``backend`` (tuning first when
        the key is new); outputs are written in place, as :meth:`accy.Program.run`."""
        try:  # what decides the config, cheaply: no checks, nothing formatted
            recent = (backend, limits, tuple(options.items()), _untuned(),
                      tuple(_cheap_key(_argument(args, name, at)) for name, at in zip(self.key, self._positions)))
            record = self._recent.get(recent)
        except Exception:  # unhashable, or arguments the full path will name the fault in
            recent = record = None
        if record is None:
            record = self.tuning_log(args, backend, limits=limits, **options)
            if recent is not None:
                self._recent[recent] = record
        return self.programs[record.chosen].run(args, backend, limits=limits, **options)

    def program_for(self, args, backend: str = "numpy", *, limits=None, **options) -> Program:
        """The :class:`~accy.Program` of the best config for these arguments on ``backend``."""
        return self.programs[self.tuning_log(args, backend, limits=limits, **options).chosen]

    def best_config(self, args, backend: str = "numpy", *, limits=None, **options) -> dict:
        """The config chosen for these arguments' key on ``backend`` (tuning first if needed)."""
        return self.tuning_log(args, backend, limits=limits, **options).config

    def tuning_log(self, args, backend: str = "numpy", *, limits=None, **options) -> TuningRecord:
        """How the config for these arguments' key on ``backend`` was chosen (tuning first if needed)."""
        checked = {k: v for k, v in options.items() if k not in RUN_OPTIONS}  # the backend's own options
        options = dict(options, **get_backend(backend).checked_options(checked))
        named = _named(args, self)
        key = {name: _key_text(named[name]) for name in self.key}
        untuned = _untuned()
        deciding = {k: v for k, v in options.items() if k not in UNDECIDING_OPTIONS}
        memo = (backend, repr(limits), json.dumps(deciding, sort_keys=True, default=repr),
                json.dumps(key, sort_keys=True), untuned)
        with self._lock:
            record = self._records.get(memo)
            if record is None:
                record = self._records[memo] = self._choose(named, key, backend, limits, options, deciding, untuned)
        return record

    def _choose(self, named: dict, key: dict, backend: str, limits, options: dict, deciding: dict,
                untuned: bool) -> TuningRecord:
        device = _device(backend, options)
        if untuned:
            return TuningRecord(self.name, backend, key, device, "untuned", "ACCY_AUTOTUNE=0: the first config, "
                                "nothing timed", 0, tuple(ConfigResult(c) for c in self.configs))
        programs, named = self._specialised(named)
        store_key = _store_key(programs, key, backend, dict(deciding, limits=repr(limits)), device)
        record = _load(store_key, self.configs)
        if record is None:
            record = self._tune(programs, named, key, backend, limits, options, device)
            _save(store_key, record)
        return record

    def _tune(self, programs: tuple[Program, ...], named: dict, key: dict, backend: str, limits, options: dict,
              device: str) -> TuningRecord:
        method, ranking = _ranking(backend, options)
        limit = _Limit(*_time_limits(self.time_limit, self.time_factor))
        written = _outputs(programs)
        outputs = {name: a for name, a in named.items() if name in written}
        estimated = get_backend(backend).estimate is not None  # a profile writes to scratch itself
        scratch = named if estimated else dict(named, **{n: _scratch(n, a) for n, a in outputs.items()})
        reset = _restorer(scratch, outputs)
        progress = _Progress(self.name, len(programs))
        start = time.perf_counter()
        results, ready = [None] * len(programs), {}
        for i, program in enumerate(programs):
            progress.show(i, _config_text(self.configs[i]))
            outcome = _measure(program, self.configs[i], named, scratch, reset, backend, limits, options, limit)
            if isinstance(outcome, ConfigResult):
                results[i] = outcome
            else:
                ready[i] = outcome
        _time_in_turns(ready, results, progress, limit)
        timed = [i for i, r in enumerate(results) if r.seconds is not None]
        if not timed:
            raise AutotuneError(f"autotune '{self.name}' on {backend}: every config failed:\n"
                                + "\n".join(f"  {_config_text(r.config)}: {r.failed}" for r in results))
        chosen = min(timed, key=lambda i: results[i].seconds)  # the first of equals
        record = TuningRecord(self.name, backend, key, device, method, ranking, chosen, tuple(results),
                              tuning_seconds=time.perf_counter() - start)
        progress.close(record)
        return record


def _config_program(program: Program, config: dict) -> Program:
    """``program`` for ``config``: its entries that name constexpr parameters bound, the others
    passed to the body as keywords."""
    constexprs = {c.name for c in program.constexprs}
    keywords = {k: v for k, v in config.items() if k not in constexprs}
    bound = attrs.evolve(program, body=functools.partial(program.body, **keywords))
    return bound.specialized(**{k: v for k, v in config.items() if k in constexprs})


def autotune(configs, key=(), *, time_limit: float | None = None,
             time_factor: float | None = None) -> Callable[[Program], Autotuned]:
    """``@accy.autotune(configs=[dict(BM=64, warps=4), ...], key=("a", "n"))`` above
    ``@accy.kernel(...)``: the kernel's body takes each config's entries as keyword arguments,
    and each run uses the fastest config for its key (see :mod:`accy.autotune`).  Every config
    has the same keys; ``key`` names parameters: a scalar's value, or an array's shape and dtype,
    tells the tuner when to measure again (empty: once per backend).  A config's run is stopped
    past ``max(time_limit, time_factor x the best so far)`` (default 10 s and 10, or
    ``ACCY_AUTOTUNE_TIME_LIMIT`` and ``ACCY_AUTOTUNE_TIME_FACTOR``) and counts as failed."""
    configs = _checked_configs(configs)
    if time_limit is not None or time_factor is not None:
        _time_limits(time_limit, time_factor)  # a bad value is an error here, not at the first run
    if isinstance(key, (bytes, Mapping)) or not isinstance(key, (str, Sequence)):
        raise AutotuneError(f"autotune: key must name parameters (a tuple of names), got {key!r}")

    def make(program: Program) -> Autotuned:
        if not isinstance(program, Program):
            raise AutotuneError(f"@autotune goes above @accy.kernel(...): it takes a Program, got {program!r}")
        bound = {c.name for c in program.constexprs} & set(configs[0])
        _check_body_takes(program.body, [n for n in configs[0] if n not in bound], program.name)
        return Autotuned(program, configs, _checked_key(key, program, bound), time_limit, time_factor)

    return make


__all__ = ["Autotuned", "ConfigResult", "TuningRecord", "autotune"]
