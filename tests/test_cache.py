"""The on-disk PTX cache: keyed by everything that changes the output, atomic, self-healing."""

import os
import stat

import pytest

from accy import cache
from accy.codegen import machine as codegen
from accy.targets import Target
from accy.library.attention import ScaledDotProduct, scaled_dot_product_f32
from accy.errors import CacheWarning
from spoiled_entries import SPOILS, not_blocked, spoil_entry

ENTRY = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 2))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    # the libdevice subset attention's exp needs is made once per process (and cached on disk
    # then): make it before the cache directory is set, so each test counts PTX entries alone
    monkeypatch.setenv("ACCY_CACHE", "0")
    emit()
    monkeypatch.setenv("ACCY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ACCY_CACHE", raising=False)
    return tmp_path / "cache"


def entries(directory):
    return sorted(p for p in directory.rglob("*") if p.is_file())


def emit(arch="sm_80", **options):
    return codegen.emit_ptx(ENTRY.program.graph, Target.nvptx(arch, **options), ENTRY.launch().block)


def test_miss_then_hit(cache_dir, monkeypatch):
    first = emit()
    assert len(entries(cache_dir)) == 1
    builds = []
    monkeypatch.setattr(codegen, "_build_ptx", lambda *a: builds.append(a) or "never")
    assert emit() == first and builds == []


def test_key_names_target_options_and_graph(cache_dir):
    emit("sm_80")
    emit("sm_90")
    emit("sm_80", fast_math=True)
    emit("sm_80", checks=False)
    assert len(entries(cache_dir)) == 4
    other = scaled_dot_product_f32(ScaledDotProduct(1, 2, 3, 2, 3))
    graph = other.program.graph  # a library entry's graph may be stored beside (accy.graph_store)
    stored = len(entries(cache_dir))
    codegen.emit_ptx(graph, Target.nvptx("sm_80"), other.launch().block)
    assert len(entries(cache_dir)) == stored + 1
    assert cache.cache_key("a", "b") != cache.cache_key("a", "c") and cache.cache_key("ab") != cache.cache_key("a", "b")


def test_corrupt_entry_is_detected_and_rebuilt(cache_dir):
    good = emit()
    (path,) = entries(cache_dir)
    path.write_bytes(path.read_bytes()[:-40] + b"garbage")
    with pytest.warns(RuntimeWarning, match="corrupt; rebuilding"):
        assert emit() == good
    (path,) = entries(cache_dir)
    assert cache.read(path.name) is not None  # rewritten whole


def test_truncated_header_is_corrupt_too(cache_dir):
    emit()
    (path,) = entries(cache_dir)
    path.write_bytes(b"{not json")
    with pytest.warns(RuntimeWarning, match="corrupt"):
        emit()


def test_writes_are_atomic(cache_dir, monkeypatch):
    """A crash between writing and renaming leaves no entry and no visible temp file."""
    def crash(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        emit()
    assert entries(cache_dir) == []


def test_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("ACCY_CACHE", "0")
    emit()
    assert not cache_dir.exists() and cache.cache_dir() is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory_warns_and_compiles(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("ACCY_CACHE_DIR", str(locked))
    with pytest.warns(RuntimeWarning, match="running without the cache"):
        assert ".entry" in emit()


def test_cache_dir_that_is_a_file_warns_and_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("ACCY_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match="running without the cache"):
        assert ".entry" in emit()


@SPOILS
def test_a_header_that_is_no_object_or_a_fifo_entry_is_rebuilt_without_blocking(cache_dir, spoil):
    good = emit()
    (path,) = entries(cache_dir)
    spoil_entry(path, spoil)
    with not_blocked(path), pytest.warns(CacheWarning, match="corrupt; rebuilding|not a regular file"):
        assert emit() == good
    assert path.is_file() and cache.read(path.name) is not None  # rebuilt whole
