"""accy.autotune: the fastest config is chosen per key, on scratch outputs, and remembered on disk.

The kernels' slow configs do the same work ``reps`` times over (a fold whose every trip reloads
the tile and takes a maximum that does not change), so they are slower by a large factor, and
every config gives the same bits.  No assertion here is on a time; the choice is checked by
which config won, the store by the tuning record (and by the measuring function never being
called), not by how long anything took.
"""

import importlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import accy
from accy import axis, cdiv, f32, tensor
from accy.errors import AutotuneError

from spoiled_entries import SPOILS, not_blocked, spoil_entry

autotune_module = importlib.import_module("accy.autotune")  # accy.autotune is the decorator
FAST = dict(BLOCK=128, reps=1, warps=1)
SLOW = dict(BLOCK=128, reps=200, warps=1)
SLOWER_TILING = dict(BLOCK=32, reps=200, warps=1)
CONFIGS = [SLOW, FAST, SLOWER_TILING]  # the fast one neither first nor last


def doubled(configs=CONFIGS, key=("x",)):
    """dst = 2 x, with ``reps`` redundant trips over each tile."""

    @accy.autotune(configs=configs, key=key)
    @accy.kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
    def double(k, p, *, BLOCK, reps, warps):
        (n,) = p.x.shape

        @k.for_each_tile(grid=axis("i", cdiv(n, BLOCK)), warps=warps)
        def program(t, pid):
            start = pid["i"] * BLOCK

            def again(t, trip, acc):
                return t.maximum(acc, p.x.load_tile((start,), (BLOCK,)) * 2.0)

            p.dst.store_tile((start,), t.fold_range(0, reps, 1, t.full((BLOCK,), float("-inf"), f32), again))

    return double


def accumulating(configs=CONFIGS):
    """acc += x: an output that is read too, so every run the caller saw would show."""

    @accy.autotune(configs=configs, key=("x",))
    @accy.kernel(acc=tensor(f32, 1), x=tensor(f32, 1))
    def accumulate(k, p, *, BLOCK, reps, warps):
        (n,) = p.x.shape

        @k.for_each_tile(grid=axis("i", cdiv(n, BLOCK)), warps=warps)
        def program(t, pid):
            start = pid["i"] * BLOCK

            def again(t, trip, m):
                return t.maximum(m, p.x.load_tile((start,), (BLOCK,)))

            x = t.fold_range(0, reps, 1, t.full((BLOCK,), float("-inf"), f32), again)
            p.acc.store_tile((start,), p.acc.load_tile((start,), (BLOCK,)) + x)

    return accumulate


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """Each test tunes into a store of its own, with tuning on."""
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path / "store"))
    monkeypatch.delenv("ACCY_AUTOTUNE", raising=False)


@pytest.fixture
def measured(monkeypatch):
    """The configs measured, in order (the tuner's measuring function, spied on)."""
    calls = []
    original = autotune_module._measure

    def spy(program, *args, **kwargs):
        calls.append(program.body.keywords)
        return original(program, *args, **kwargs)

    monkeypatch.setattr(autotune_module, "_measure", spy)
    return calls


def inputs(n=3000, seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return np.full(n, np.nan, np.float32), x


@pytest.mark.parametrize("backend", ["numpy", "llvm"])
def test_picks_the_fast_config_and_matches_numpy(backend, measured):
    kernel = doubled()
    dst, x = inputs()
    kernel.run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, 2 * x)
    log = kernel.tuning_log([dst, x], backend=backend)
    assert kernel.best_config([dst, x], backend=backend) == FAST == log.config
    assert log.chosen == 1 and not log.from_store and log.method == "wall time"
    assert measured == CONFIGS  # each config measured once, and only on the first call
    assert all(r.failed is None and r.runs >= 1 and r.seconds > 0 for r in log.results)
    assert log.seconds == [r.seconds for r in log.results]
    assert log.key == {"x": "(3000,) float32"} and log.backend == backend
    assert "wall time" in log.ranking and "* BLOCK=128, reps=1, warps=1" in str(log)


def test_tuning_writes_only_scratch_copies_of_the_outputs():
    kernel = accumulating()
    start, x = np.arange(3000, dtype=np.float32), inputs()[1]
    acc = start.copy()
    log = kernel.tuning_log([acc, x], backend="llvm")  # tunes: every config runs several times
    assert sum(r.runs for r in log.results) > len(CONFIGS)
    np.testing.assert_array_equal(acc, start)  # untouched
    kernel.run([acc, x], backend="llvm")
    np.testing.assert_array_equal(acc, start + x)  # one addition: the final run's


def test_outputs_that_are_views_keep_their_layout_in_scratch():
    kernel = doubled()
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    base = np.zeros(2000, np.float32)
    dst = base[::2]  # a strided view: every other element
    kernel.run({"dst": dst, "x": x}, backend="numpy")
    np.testing.assert_array_equal(base[::2], 2 * x)
    assert not base[1::2].any()


def test_the_choice_is_stored_and_another_kernel_object_reuses_it_untimed(measured):
    dst, x = inputs()
    first = doubled().tuning_log([dst, x], backend="llvm")
    measured.clear()
    again = doubled().tuning_log([dst, x], backend="llvm")  # a fresh object: nothing in memory
    assert again.from_store and not first.from_store
    assert measured == []
    assert again.chosen == first.chosen == 1 and again.seconds == first.seconds
    assert first.tuning_seconds > 0 and again.tuning_seconds == 0


SECOND_PROCESS = """
import json, sys
import numpy as np
import test_autotune
module = test_autotune.autotune_module

measured = []
original = module._measure
module._measure = lambda program, *a, **k: measured.append(program.body.keywords) or original(program, *a, **k)
kernel = test_autotune.doubled()
dst, x = test_autotune.inputs()
kernel.run([dst, x], backend="llvm")
log = kernel.tuning_log([dst, x], backend="llvm")
print(json.dumps({"from_store": log.from_store, "config": log.config, "seconds": log.seconds,
                  "measured": measured, "right": bool((dst == 2 * x).all())}))
"""


def test_a_second_process_reuses_the_stored_choice_without_timing(tmp_path):
    env = dict(os.environ, ACCY_CACHE_DIR=str(tmp_path / "shared"))
    env.pop("ACCY_AUTOTUNE", None)
    here = os.path.dirname(os.path.abspath(__file__))

    def process():
        done = subprocess.run([sys.executable, "-c", SECOND_PROCESS], env=env, cwd=here, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no progress bar: stderr is not a terminal
        return json.loads(done.stdout.splitlines()[-1])

    first, second = process(), process()
    assert not first["from_store"] and len(first["measured"]) == len(CONFIGS) and first["right"]
    assert second["from_store"] and second["measured"] == [] and second["right"]
    assert second["config"] == first["config"] == FAST and second["seconds"] == first["seconds"]


def test_a_corrupt_record_is_tuned_again(measured):
    from accy import cache

    dst, x = inputs()
    kernel = doubled()
    kernel.tuning_log([dst, x], backend="numpy")
    key = autotune_module._store_key(kernel.programs, {"x": "(3000,) float32"}, "numpy", {"limits": "None"},
                                     autotune_module._device("numpy", {}))
    assert cache.read(key) is not None  # the record the tuner wrote
    for payload in (b"not json", json.dumps({"format": autotune_module.FORMAT, "chosen": 7}).encode()):
        cache.write(key, payload)
        measured.clear()
        log = doubled().tuning_log([dst, x], backend="numpy")
        assert not log.from_store and measured == CONFIGS and log.config == FAST
    assert doubled().tuning_log([dst, x], backend="numpy").from_store  # and stored again


def test_accy_autotune_0_takes_the_first_config_untimed(monkeypatch, measured):
    monkeypatch.setenv("ACCY_AUTOTUNE", "0")
    kernel = doubled()
    dst, x = inputs()
    kernel.run([dst, x], backend="llvm")
    np.testing.assert_array_equal(dst, 2 * x)
    log = kernel.tuning_log([dst, x], backend="llvm")
    assert log.config == CONFIGS[0] and log.method == "untuned" and "ACCY_AUTOTUNE=0" in log.ranking
    assert measured == [] and log.seconds == [None] * len(CONFIGS)


def test_a_new_shape_is_tuned_again_and_a_known_one_is_not(measured):
    kernel = doubled()
    small, large = inputs(1000), inputs(5000)
    kernel.run(small, backend="numpy")
    first = kernel.tuning_log(small, backend="numpy")
    kernel.run(inputs(1000, seed=1), backend="numpy")  # same shape: no tuning
    assert kernel.tuning_log(inputs(1000, seed=1), backend="numpy") is first
    assert len(measured) == len(CONFIGS)
    kernel.run({"x": large[1], "dst": large[0]}, backend="numpy")  # by name, a new shape: tuned
    other = kernel.tuning_log(large, backend="numpy")
    assert len(measured) == 2 * len(CONFIGS) and other.key == {"x": "(5000,) float32"} and other is not first
    np.testing.assert_array_equal(large[0], 2 * large[1])
    kernel.run(inputs(1000, seed=2), backend="llvm")  # another backend: tuned for it
    assert len(measured) == 3 * len(CONFIGS)


def test_a_scalar_key_is_its_value():
    @accy.autotune(configs=[dict(BLOCK=64), dict(BLOCK=128)], key=("a",))
    @accy.kernel(dst=tensor(f32, 1), x=tensor(f32, 1), a=accy.scalar(f32))
    def scale(k, p, *, BLOCK):
        @k.for_each_tile(grid=axis("i", cdiv(p.x.shape[0], BLOCK)))
        def program(t, pid):
            p.dst.store_tile((pid["i"] * BLOCK,), p.x.load_tile((pid["i"] * BLOCK,), (BLOCK,)) * p.a)

    dst, x = inputs(500)
    assert scale.tuning_log([dst, x, 2.5], backend="numpy").key == {"a": "2.5"}
    assert scale.tuning_log([dst, x, 3.0], backend="numpy").key == {"a": "3.0"}
    scale.run([dst, x, 3.0], backend="numpy")
    np.testing.assert_array_equal(dst, x * np.float32(3.0))


def test_ptx_ranks_by_the_profiles_estimate():
    configs = [dict(BLOCK=64, reps=8, warps=1), dict(BLOCK=64, reps=1, warps=1), dict(BLOCK=32, reps=1, warps=1)]
    kernel = doubled(configs)
    dst, x = inputs(256)
    kernel.run([dst, x], backend="ptx")
    np.testing.assert_array_equal(dst, 2 * x)
    log = kernel.tuning_log([dst, x], backend="ptx")
    assert log.method == "estimate" and "not by the emulator's wall time" in log.ranking and "sm_80" in log.ranking
    estimates = [p.profile([dst, x], arch="sm_80").estimated_seconds for p in kernel.programs]
    assert log.seconds == estimates  # the estimates themselves, not a wall time
    assert log.chosen == int(np.argmin(estimates)) and log.chosen != 0
    assert estimates[1] != estimates[2]  # the same work in tiles of 64 and of 32: the busiest SM's share differs
    assert log.device == "ptx sm_80"


def test_a_config_that_fails_is_recorded_and_skipped():
    too_big = dict(BLOCK=1 << 21, reps=1, warps=1)  # over the largest tile (2**20)
    kernel = doubled([too_big, FAST])
    dst, x = inputs(1000)
    kernel.run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, 2 * x)
    log = kernel.tuning_log([dst, x], backend="numpy")
    assert log.chosen == 1 and log.results[0].seconds is None and "TraceError" in log.results[0].failed
    with pytest.raises(AutotuneError, match="every config failed"):
        doubled([too_big]).run([dst, x], backend="numpy")


def test_configs_with_different_keys_are_an_error_naming_the_config():
    with pytest.raises(AutotuneError, match=r"config 1 \{'BLOCK': 64\}.*missing reps, warps"):
        doubled([FAST, dict(BLOCK=64)])
    with pytest.raises(AutotuneError, match="config 1 .*extra spare"):
        doubled([FAST, dict(FAST, spare=1)])


def test_bad_decorations_are_errors_at_decoration_time():
    with pytest.raises(AutotuneError, match="key 'y' is not a parameter of 'double'.*dst, x"):
        doubled(key=("y",))
    with pytest.raises(AutotuneError, match="takes no keyword argument spare"):
        doubled([dict(FAST, spare=1)])
    with pytest.raises(AutotuneError, match="non-empty list"):
        doubled([])
    with pytest.raises(AutotuneError, match="config 0.*'BLOCK' must name a keyword argument and hold"):
        doubled([dict(BLOCK=[64])])
    with pytest.raises(AutotuneError, match="above @accy.kernel"):
        accy.autotune(configs=[FAST])(lambda k, p: None)
    with pytest.raises(AutotuneError, match="needs keyword argument warps, which no config gives"):
        doubled([dict(BLOCK=64, reps=1)])


def test_a_wrapped_body_that_fills_a_keyword_itself_is_taken():
    import functools

    def body(k, p, *, BLOCK, reps, warps, scale):
        (n,) = p.x.shape

        @k.for_each_tile(grid=axis("i", cdiv(n, BLOCK)), warps=warps)
        def program(t, pid):
            p.dst.store_tile((pid["i"] * BLOCK,), p.x.load_tile((pid["i"] * BLOCK,), (BLOCK,)) * scale)

    @functools.wraps(body)
    def wrapper(k, p, **config):
        return body(k, p, scale=2.0, **config)

    scaled = accy.autotune(configs=[FAST], key=("x",))(
        accy.kernel(dst=tensor(f32, 1), x=tensor(f32, 1))(wrapper))
    x = np.arange(100, dtype=np.float32)
    dst = np.zeros_like(x)
    scaled.run([dst, x], backend="numpy")
    np.testing.assert_array_equal(dst, 2 * x)


def test_compare_runs_the_autotuned_kernel_on_each_backend():
    report = accy.compare(doubled(), list(inputs(700)), backends=("numpy", "llvm"))
    assert report.agree and report.ran == ("numpy", "llvm") and report.kernel == "double"


def test_the_progress_line_is_drawn_only_on_a_terminal(monkeypatch, capsys):
    doubled().tuning_log(inputs(300), backend="numpy")
    assert capsys.readouterr().err == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    doubled().tuning_log(inputs(400), backend="numpy")
    text = terminal.getvalue()
    assert "\rautotune double [...] 0/3 BLOCK=128, reps=200" in text and "\rautotune double [##.] 2/3" in text
    assert text.endswith("\rautotune double: BLOCK=128, reps=1, warps=1 (" + text.split(" (")[-1])
    assert text.endswith("wall time)\x1b[K\n")


# -- configs that raise, never end, or are interrupted ----------------------------------------------


def raising(configs):
    """dst = 2 x; a config with ``bad`` raises a plain Python error in its body."""

    @accy.autotune(configs=configs, key=("x",))
    @accy.kernel(dst=tensor(f32, 1), x=tensor(f32, 1))
    def double(k, p, *, BLOCK, bad):
        if bad:
            raise ZeroDivisionError(f"no config with BLOCK={BLOCK}")
        (n,) = p.x.shape

        @k.for_each_tile(grid=axis("i", cdiv(n, BLOCK)))
        def program(t, pid):
            p.dst.store_tile((pid["i"] * BLOCK,), p.x.load_tile((pid["i"] * BLOCK,), (BLOCK,)) * 2.0)

    return double


@pytest.mark.parametrize("backend", ["numpy", "llvm", "ptx"])
def test_a_config_whose_body_raises_a_python_error_is_recorded_and_skipped(backend):
    kernel = raising([dict(BLOCK=64, bad=True), dict(BLOCK=64, bad=False)])
    dst, x = inputs(256)
    kernel.run([dst, x], backend=backend)
    np.testing.assert_array_equal(dst, 2 * x)
    log = kernel.tuning_log([dst, x], backend=backend)
    assert log.chosen == 1 and log.results[0].failed == "ZeroDivisionError: no config with BLOCK=64"
    with pytest.raises(AutotuneError, match=r"every config failed:\n  BLOCK=32, bad=True: ZeroDivisionError: no "
                                            r"config with BLOCK=32\n  BLOCK=16, bad=True: ZeroDivisionError"):
        raising([dict(BLOCK=32, bad=True), dict(BLOCK=16, bad=True)]).run([dst, x], backend=backend)


# a config that would run for minutes (reps trips over each tile, in many short programs), and its
# size per backend: the emulator is slow, llvm is fast
ENDLESS = {"numpy": (dict(BLOCK=128, reps=10**6, warps=1), 1 << 14),
           "llvm": (dict(BLOCK=128, reps=10**6, warps=1), 1 << 18),
           "ptx": (dict(BLOCK=32, reps=10**6, warps=1), 1 << 10)}


def _compiled(kernel, backend, n):
    """Every config compiled beforehand (on one tile of input), so what is timed is running."""
    if backend == "llvm":
        for program in kernel.programs:
            program.run(list(inputs(128)), backend="llvm")
    return inputs(n)


@pytest.mark.parametrize("backend", ["numpy", "llvm", "ptx"])
def test_a_config_that_runs_past_its_time_limit_is_stopped_and_recorded(backend):
    import time

    endless, n = ENDLESS[backend]
    fast = dict(endless, reps=1)
    kernel = doubled([endless, fast])
    kernel.time_limit, kernel.time_factor = 0.3, 2.0
    dst, x = _compiled(kernel, backend, n)
    start = time.perf_counter()
    log = kernel.tuning_log([dst, x], backend=backend)
    assert time.perf_counter() - start < 10  # the endless config alone: minutes
    assert log.chosen == 1
    assert log.results[0].failed.startswith(f"TimeLimitError: config {autotune_module._config_text(endless)} "
                                            "(time limit max(0.3 s, 2 x the best so far)) ran past its time limit")
    assert "failed: TimeLimitError" in str(log)
    with pytest.raises(AutotuneError, match=r"every config failed:\n  BLOCK=\d+, reps=1000000, warps=1: "
                                            r"TimeLimitError"):
        only = doubled([endless])
        only.time_limit = 0.3
        only.run([dst, x], backend=backend)


def test_time_limits_come_from_the_arguments_or_the_environment_and_are_checked(monkeypatch):
    assert autotune_module._time_limits(None, None) == (10.0, 10.0)
    monkeypatch.setenv("ACCY_AUTOTUNE_TIME_LIMIT", "0.5")
    monkeypatch.setenv("ACCY_AUTOTUNE_TIME_FACTOR", "3")
    assert autotune_module._time_limits(None, None) == (0.5, 3.0)
    assert autotune_module._time_limits(2, None) == (2.0, 3.0)
    monkeypatch.setenv("ACCY_AUTOTUNE_TIME_FACTOR", "fast")
    with pytest.raises(AutotuneError, match="ACCY_AUTOTUNE_TIME_FACTOR must be a positive number.*'fast'"):
        autotune_module._time_limits(None, None)
    with pytest.raises(AutotuneError, match="autotune's time_limit must be a positive number.*-1"):
        accy.autotune(configs=[FAST], time_limit=-1)


def gathering(configs):
    """dst[i] = the largest x[(i + trip) % n] over ``reps`` trips: a checked gather inside a fold
    (on llvm, the launch's check-only pass runs the whole fold in every program first)."""

    @accy.autotune(configs=configs, key=("x",))
    @accy.kernel(dst=accy.dynamic_buffer(f32), x=accy.dynamic_buffer(f32))
    def gather(k, p, *, BLOCK, reps, warps):
        n = p.x.size

        @k.for_each_tile(grid=axis("i", cdiv(n, BLOCK)), warps=warps)
        def program(t, pid):
            r = pid["i"] * BLOCK + t.arange(BLOCK)
            top = t.fold_range(0, reps, 1, t.full((BLOCK,), float("-inf"), f32),
                               lambda t, trip, m: t.maximum(m, p.x.load((r + trip) % n, mask=r < n)))
            p.dst.store(r, top, mask=r < n)

    return gather


@pytest.mark.parametrize("backend", ["numpy", "llvm", "ptx"])
def test_ctrl_c_during_tuning_lands_promptly(backend):
    import _thread
    import threading
    import time

    endless, n = ENDLESS[backend]
    kernel = gathering([endless, dict(endless, reps=1)])  # under the default time limit, 10 s
    dst, x = _compiled(kernel, backend, n)
    done = threading.Event()

    def press():
        # Ctrl-C every 0.3 s until the run stops: one that lands while Python runs a finalizer
        # (llvmlite disposing an old JIT engine at a garbage collection) is printed and dropped,
        # as Python drops every exception raised in __del__ (CI saw it twice); a user presses again
        while not done.wait(0.3):
            _thread.interrupt_main()

    presser = threading.Thread(target=press, daemon=True)
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        presser.start()
        kernel.run([dst, x], backend=backend)
    elapsed = time.perf_counter() - start
    while presser.is_alive():  # a press already on its way when the run stopped lands here
        try:
            done.set()
            presser.join()
        except KeyboardInterrupt:
            continue
    assert elapsed < 5.0  # ~10 ms slices; before, it ran on past 60 s (room for a loaded machine)
    assert np.isnan(dst).all()  # tuning writes scratch copies; nothing ran on dst


@SPOILS
def test_a_record_whose_header_is_no_object_or_a_fifo_is_tuned_again_without_blocking(measured, tmp_path, spoil):
    dst, x = inputs()
    doubled().tuning_log([dst, x], backend="numpy")
    key = autotune_module._store_key(doubled().programs, {"x": "(3000,) float32"}, "numpy", {"limits": "None"},
                                     autotune_module._device("numpy", {}))
    (path,) = (tmp_path / "store").rglob(key)
    spoil_entry(path, spoil)
    measured.clear()
    with not_blocked(path), pytest.warns(accy.errors.CacheWarning, match="corrupt; rebuilding|not a regular file"):
        log = doubled().tuning_log([dst, x], backend="numpy")
    assert not log.from_store and measured == CONFIGS and log.config == FAST
    assert doubled().tuning_log([dst, x], backend="numpy").from_store  # and stored again
