"""An on-disk cache of compiled code.

Keys hash everything that changes the output: the graph's text form, the
target, the options, the code of the lowering itself, and the llvmlite and LLVM
versions.  An entry is a small
header (its key and the payload's SHA-256) and the payload, written to a
temporary file and renamed into place, so a crash never leaves a half-written
entry; an entry whose checksum does not match is deleted and rebuilt.

``ACCY_CACHE_DIR`` moves the cache (default: ``$XDG_CACHE_HOME/accy`` or
``~/.cache/accy``); ``ACCY_CACHE=0`` turns it off.  A cache directory that
cannot be written is skipped with a warning: compiling still works.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import warnings
from typing import Callable

import llvmlite
import llvmlite.binding as llvm

FORMAT_VERSION = 2  # bump when the entry format changes


@functools.cache
@functools.cache
def _lowering_digest() -> str:
    """A digest of the code that decides what is compiled (every module of accy.backends: the
    lowering is spread over several, and a change to any of them must miss), once a process."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(n for n in os.listdir(here) if n.endswith(".py")):
        digest.update(name.encode())
        with open(os.path.join(here, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def cache_dir() -> str | None:
    """The cache directory in force, or None when caching is off."""
    if os.environ.get("ACCY_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    explicit = os.environ.get("ACCY_CACHE_DIR")
    if explicit is not None:
        return explicit or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "accy")


def cache_key(*parts: str) -> str:
    versions = (f"accy-cache-{FORMAT_VERSION} lowering-{_lowering_digest()} llvmlite-{llvmlite.__version__} "
                f"llvm-{llvm.llvm_version_info}")
    digest = hashlib.sha256(versions.encode())
    for part in parts:
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def _warn(message: str) -> None:
    warnings.warn(f"accy cache: {message}", RuntimeWarning, stacklevel=3)


def read(key: str) -> bytes | None:
    directory = cache_dir()
    if directory is None:
        return None
    path = os.path.join(directory, key[:2], key)
    try:
        with open(path, "rb") as f:
            header, _, payload = f.read().partition(b"\n")
        meta = json.loads(header)
        if meta.get("key") == key and meta.get("sha256") == hashlib.sha256(payload).hexdigest():
            return payload
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        pass
    _warn(f"entry {path} is corrupt; rebuilding it")
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


def write(key: str, payload: bytes) -> None:
    directory = cache_dir()
    if directory is None:
        return
    folder = os.path.join(directory, key[:2])
    header = json.dumps({"key": key, "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header + b"\n" + payload)
            os.replace(tmp, os.path.join(folder, key))  # atomic: readers see all or nothing
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        _warn(f"cannot write to {directory} ({e.strerror or e}); running without the cache")


def cached(key: str, build: Callable[[], bytes]) -> bytes:
    """The cached payload for ``key``, building and storing it on a miss."""
    payload = read(key)
    if payload is None:
        payload = build()
        write(key, payload)
    return payload
