"""Disk-cache entries spoiled in ways the checksum never sees: a header line that is JSON but
not an object, and an entry that is a FIFO (whose plain open() waits for a writer for ever).
Every entry kind (PTX, host code, graph, autotune record) must take each as a CacheWarning and
a rebuild (tests/test_cache.py, test_host_cache.py, test_graph_store.py, test_autotune.py)."""

import contextlib
import os
import stat
import threading

import pytest

# a header that is valid JSON, but not the object of an entry's key and checksum
HEADERS = (b"7", b"null", b"[1, 2]", b'"key"', b"[" * 100_000 + b"]" * 100_000)
SPOILS = pytest.mark.parametrize("spoil", [*HEADERS, "fifo"], ids=["7", "null", "list", "string", "deep", "fifo"])
WAIT = 30  # seconds after which a reader still blocked in open() is let go, and the test fails


def spoil_entry(path, spoil) -> None:
    """Spoil the entry at ``path``: its header line replaced, or the entry made a FIFO."""
    if spoil == "fifo":
        path.unlink()
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(spoil + b"\n" + path.read_bytes().partition(b"\n")[2])


@contextlib.contextmanager
def not_blocked(path):
    """Fails the test, instead of hanging it, if a reader blocks opening the FIFO at ``path``:
    after WAIT seconds a writer opens it (which lets the reader go) and the test fails."""
    blocked = []

    def let_go():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # only succeeds with a reader waiting
        except OSError:
            return
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            blocked.append(path)
        os.close(fd)

    timer = threading.Timer(WAIT, let_go)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
    assert not blocked, f"a cache read blocked opening the FIFO {path}"
