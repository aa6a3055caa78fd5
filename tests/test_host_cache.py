"""Host machine code in the disk cache: a later process loads it without compiling, and the
store is guarded (private directories; a foreign, writable, symlinked or corrupt entry is
refused and recompiled, never run).  In the process, a launcher keeps its machine code alone
and goes with the last Program of its graph."""

import gc
import os
import stat
import subprocess
import sys
import textwrap
import weakref

import llvmlite.binding as llvm
import numpy as np
import pytest

from accy import Program, axis, dynamic_buffer, f32, index, scalar
from accy.codegen import machine as codegen
from accy.codegen.host import code_store as host_code
from accy.errors import CacheWarning, OutOfBoundsError

from spoiled_entries import SPOILS, not_blocked, spoil_entry

OTHER_UID = 4242  # a user that is not this one (the tests that need one run as root)


def scaled_add():
    """A small kernel (dst = 2 a + b, with an exp to inline) of a fresh Program each call."""
    def body(k, args):
        def each(inner, idx):
            i = idx["i"]
            args.dst[i] = args.a[i] * 2.0 + inner.exp(args.b[i] * 0.0)

        k.for_each_1d(axis("i", args.dst.size), each)

    return Program("scaled_add", {"dst": dynamic_buffer(f32), "a": dynamic_buffer(f32), "b": dynamic_buffer(f32)},
                   body)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache of the test's own, and no launcher kept in this process: every run below
    takes its launcher from the disk or compiles it."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("ACCY_CACHE_DIR", str(directory))
    monkeypatch.delenv("ACCY_CACHE", raising=False)
    forget_launchers(monkeypatch)
    return directory


def forget_launchers(monkeypatch):
    """No launcher kept: each graph holds its own, so each Program traces a graph of its own too."""
    monkeypatch.setattr(codegen, "_host_kernels", type(codegen._host_kernels)())  # a fresh one of its kind
    monkeypatch.setenv("ACCY_TRACE_CACHE", "0")


def run_once(monkeypatch) -> dict:
    """Run the kernel in a fresh Program with nothing kept from earlier runs; check its result
    and return how many launchers were compiled and loaded meanwhile."""
    forget_launchers(monkeypatch)
    before = dict(codegen.compilations)
    a = np.arange(37, dtype=np.float32)
    b = np.ones(37, np.float32)
    dst = np.zeros(37, np.float32)
    scaled_add().run([dst, a, b], backend="llvm")
    np.testing.assert_array_equal(dst, 2 * a + 1)
    return {k: codegen.compilations[k] - before[k] for k in ("host", "host_loaded")}


def entries(directory):
    return sorted(p for p in directory.rglob("*") if p.is_file() or p.is_symlink())


def test_second_run_loads_the_code_from_disk(cache_dir, monkeypatch):
    assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}
    assert len(entries(cache_dir)) == 1
    assert run_once(monkeypatch) == {"host": 0, "host_loaded": 1}


def test_key_names_the_cpu_and_the_vector_width(cache_dir, monkeypatch):
    graph = scaled_add().graph
    keys = {host_code.host_code_key(graph, codegen.Target.host(vector_width=w)) for w in (4, 8)}
    monkeypatch.setattr(host_code, "host_cpu", lambda: "another-cpu +avx512f")
    keys.add(host_code.host_code_key(graph, codegen.Target.host(vector_width=4)))
    keys.add(host_code.host_code_key(graph, codegen.Target.host(vector_width=4, checks=False)))
    assert len(keys) == 4
    assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}  # compiled for "another" CPU


def test_cache_off_compiles_every_time(cache_dir, monkeypatch):
    monkeypatch.setenv("ACCY_CACHE", "0")
    assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}
    assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}
    assert not cache_dir.exists()


def test_directories_are_private(cache_dir, monkeypatch):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    for path in (cache_dir, entry.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_corrupt_object_is_recompiled_not_run(cache_dir, monkeypatch):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF  # a flipped byte in the machine code
    entry.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="corrupt"):
        assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}  # and the result is right
    assert run_once(monkeypatch) == {"host": 0, "host_loaded": 1}  # rewritten whole


def refused(monkeypatch, match: str) -> None:
    with pytest.warns(CacheWarning, match=match):
        assert run_once(monkeypatch) == {"host": 1, "host_loaded": 0}


def test_entry_others_may_write_is_refused_then_replaced(cache_dir, monkeypatch):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    entry.chmod(0o620)  # group-writable
    refused(monkeypatch, "refusing the entry .* writable by its group or others")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600  # the rebuilt entry took its place
    assert run_once(monkeypatch) == {"host": 0, "host_loaded": 1}


def test_symlinked_entry_is_refused(cache_dir, monkeypatch):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    elsewhere = cache_dir.parent / "planted"
    entry.rename(elsewhere)  # a valid entry, reached through a link
    entry.symlink_to(elsewhere)
    refused(monkeypatch, "refusing the entry")
    assert not entry.is_symlink()


def test_directory_others_may_write_is_refused(cache_dir, monkeypatch):
    run_once(monkeypatch)
    cache_dir.chmod(0o777)
    refused(monkeypatch, "refusing the directory .* writable by its group or others")
    (entry,) = entries(cache_dir)
    entry.parent.chmod(0o770)  # a shard folder too
    cache_dir.chmod(0o700)
    refused(monkeypatch, "refusing the directory")


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")


@needs_root
def test_entry_another_user_owns_is_refused(cache_dir, monkeypatch):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    os.chown(entry, OTHER_UID, -1)
    refused(monkeypatch, f"refusing the entry .* owned by uid {OTHER_UID}")


@needs_root
def test_directory_another_user_owns_is_refused(cache_dir, monkeypatch):
    run_once(monkeypatch)
    os.chown(cache_dir, OTHER_UID, -1)
    refused(monkeypatch, f"refusing the directory .* owned by uid {OTHER_UID}")


SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_host_cache import scaled_add
    from accy.codegen import machine as codegen
    a = np.arange(37, dtype=np.float32)
    dst = np.zeros(37, np.float32)
    scaled_add().run([dst, a, np.ones(37, np.float32)], backend="llvm")
    assert (dst == 2 * a + 1).all()
    print(json.dumps(codegen.compilations))
""")


def test_a_second_process_loads_without_compiling(cache_dir):
    env = dict(os.environ, ACCY_CACHE_DIR=str(cache_dir))
    env.pop("ACCY_CACHE", None)
    code = SECOND_PROCESS.format(tests=os.path.dirname(__file__))

    def counts():
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert counts() == '{"host": 1, "ptx": 0, "host_loaded": 0}'
    assert counts() == '{"host": 0, "ptx": 0, "host_loaded": 1}'


def shifted_copy():
    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(
            idx["i"], args.x[idx["i"] + args.s]))

    return Program("shifted_copy", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "s": scalar(index)}, body)


def test_the_version_with_every_check_is_compiled_only_when_a_launch_needs_it(cache_dir, monkeypatch):
    """The launcher leaves out the checks the launch proof covers; a launch prepare cannot
    prove in bounds compiles (once) the launcher with every check, which names the failure."""
    program = shifted_copy()
    x = np.arange(40, dtype=np.float32)
    dst = np.zeros(32, np.float32)
    before = codegen.compilations["host"]
    program.run([dst, x, 8], backend="llvm")  # x[i + 8] < 40: proven
    np.testing.assert_array_equal(dst, x[8:])
    assert codegen.compilations["host"] - before == 1
    for _ in range(2):
        with pytest.raises(OutOfBoundsError, match="index 40 is out of bounds for 40 elements"):
            program.run([dst, x, 9], backend="llvm")
    assert codegen.compilations["host"] - before == 2
    np.testing.assert_array_equal(dst, x[8:])  # nothing half-written


@SPOILS
def test_a_header_that_is_no_object_or_a_fifo_entry_is_recompiled_without_blocking(cache_dir, monkeypatch, spoil):
    run_once(monkeypatch)
    (entry,) = entries(cache_dir)
    spoil_entry(entry, spoil)
    with not_blocked(entry):
        refused(monkeypatch, "corrupt; rebuilding|not a regular file")
    assert run_once(monkeypatch) == {"host": 0, "host_loaded": 1}  # rewritten whole


def shifted_scaled(c: float):
    """dst = c x[i + s]: a kernel of its own for each ``c``."""
    def body(k, args):
        k.for_each_1d(axis("i", args.dst.size), lambda inner, idx: args.dst.__setitem__(
            idx["i"], args.x[idx["i"] + args.s] * c))

    return Program("shifted_scaled", {"dst": dynamic_buffer(f32), "x": dynamic_buffer(f32), "s": scalar(index)},
                   body)


def test_a_dropped_programs_launchers_and_their_machine_code_are_released(cache_dir, monkeypatch):
    """Compiled or loaded from the disk, a launcher, its engine and its version with every check
    go with the last Program of their graph: a process making many kernels does not keep them
    (here no graph is kept by the trace cache, which keeps the last few by design)."""
    x = np.arange(16, dtype=np.float32)
    for source in ("host", "host_loaded"):  # the same kernels again: loaded from the disk
        refs = []
        for c in range(6):
            before = codegen.compilations[source]
            program = shifted_scaled(float(c))
            dst = np.zeros(16, np.float32)
            program.run([dst, x, 0], backend="llvm")
            np.testing.assert_array_equal(dst, c * x)
            with pytest.raises(OutOfBoundsError):  # a launch that needs the version with every check
                program.run([dst, x, 1], backend="llvm")
            assert codegen.compilations[source] == before + 2
            kernel = codegen.host_kernel(program.graph, codegen.Target.host())
            assert kernel.checked is not None
            refs += [weakref.ref(o) for o in (program.graph, kernel, kernel.engine, kernel.checked.engine)]
            del program, kernel
        gc.collect()
        assert [r for r in refs if r() is not None] == [], source


def test_a_compiled_launcher_keeps_its_machine_code_alone(cache_dir, monkeypatch):
    """The engine that compiled a launcher goes at once, with its module (the optimised IR, ten
    times the machine code): the launcher keeps an engine of the object code, as a load does."""
    engines = []
    create = llvm.create_mcjit_compiler

    def spy(module, machine):
        engine = create(module, machine)
        engines.append(weakref.ref(engine))
        return engine

    monkeypatch.setattr(llvm, "create_mcjit_compiler", spy)
    program = shifted_scaled(3.0)
    program.run([np.zeros(8, np.float32), np.ones(8, np.float32), 0], backend="llvm")
    assert codegen.compilations["host"] and len(engines) == 2  # compiled, then loaded from its object
    gc.collect()
    kept = codegen.host_kernel(program.graph, codegen.Target.host()).engine
    assert [r() for r in engines if r() is not None] == [kept]
