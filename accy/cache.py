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

The cache holds host machine code that the process will run, so the store is
guarded: its directories are created private to the user (0700), and a directory or
an entry that another user owns or may write (or an entry that is not a regular
file: a symbolic link, a FIFO) is refused with a :class:`~accy.errors.CacheWarning`,
never read.  The checksum detects corruption, not tampering: a cache directory must not
be shared between users.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
import warnings
from typing import Callable

import llvmlite
import llvmlite.binding as llvm

from .errors import CacheWarning

FORMAT_VERSION = 2  # bump when the entry format changes


def files_digest(root: str, paths) -> str:
    """A digest of the files ``paths`` (relative to ``root``, in the order given): their paths
    and contents, so a rename or an edit changes it."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.encode())
        with open(os.path.join(root, path), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


# the stages after the front end: a change to any of their modules changes what is compiled
COMPILER_SOURCES = ("lowering", "codegen", "runtime", "targets.py")


@functools.cache
def _lowering_digest() -> str:
    """A digest of the code that decides what is compiled (every module of the lowering, code
    generation and runtime packages, and the targets), once a process."""
    root = os.path.dirname(os.path.abspath(__file__))
    paths = []
    for source in COMPILER_SOURCES:
        if source.endswith(".py"):
            paths.append(source)
            continue
        for folder, subfolders, names in os.walk(os.path.join(root, source)):
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("__"))
            paths += [os.path.relpath(os.path.join(folder, n), root) for n in sorted(names) if n.endswith(".py")]
    return files_digest(root, paths)


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


def warn(message: str) -> None:
    warnings.warn(f"accy cache: {message}", CacheWarning, stacklevel=4)


def _foreign(info: os.stat_result) -> str | None:
    """Why a file or directory with this status may not be trusted (None: it may): another
    user owns it, or its group or others may write it."""
    if info.st_uid != os.getuid():
        return f"owned by uid {info.st_uid}, not this user ({os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by its group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _private_folder(path: str) -> bool:
    """``path`` exists as a directory only this user may write: created so (0700) when
    missing; an existing one that is not is refused with a warning."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as e:
        warn(f"cannot create {path} ({e.strerror or e}); running without the cache")
        return False
    why = _foreign(info)
    if why is not None:
        warn(f"refusing the directory {path}: {why}; compiling without the cache")
        return False
    return True


def _entry_folder(key: str) -> str | None:
    """The private folder of ``key``'s entry (the cache's and its shard's), or None when the
    cache is off or refused."""
    directory = cache_dir()
    if directory is None or not _private_folder(directory):
        return None
    folder = os.path.join(directory, key[:2])
    return folder if _private_folder(folder) else None


def _read_trusted(path: str) -> bytes | None:
    """The bytes of the entry at ``path`` if it is a regular file of this user's that no one
    else may write (checked on the open file, which is never a symbolic link, and opened
    without blocking: a FIFO's open would wait for a writer for ever); else None, with a
    warning when the entry exists."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:  # ELOOP: a symbolic link
        warn(f"refusing the entry {path} ({e.strerror or e}); recompiling")
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        why = "not a regular file" if not stat.S_ISREG(info.st_mode) else _foreign(info)
        if why is not None:
            warn(f"refusing the entry {path}: {why}; recompiling")
            return None
        return f.read()


def read(key: str) -> bytes | None:
    folder = _entry_folder(key)
    if folder is None:
        return None
    path = os.path.join(folder, key)
    try:
        data = _read_trusted(path)
        if data is None:
            return None
        header, _, payload = data.partition(b"\n")
        meta = json.loads(header)
        if (isinstance(meta, dict)  # JSON but not an object (7, null, [1, 2]) is corrupt too
                and meta.get("key") == key and meta.get("sha256") == hashlib.sha256(payload).hexdigest()):
            return payload
    except (OSError, ValueError, RecursionError):  # RecursionError: a header of deeply nested JSON
        pass
    warn(f"entry {path} is corrupt; rebuilding it")
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


def write(key: str, payload: bytes) -> None:
    folder = _entry_folder(key)
    if folder is None:
        return
    header = json.dumps({"key": key, "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header + b"\n" + payload)
            os.replace(tmp, os.path.join(folder, key))  # atomic: readers see all or nothing
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        warn(f"cannot write to {folder} ({e.strerror or e}); running without the cache")


def cached(key: str, build: Callable[[], bytes]) -> bytes:
    """The cached payload for ``key``, building and storing it on a miss."""
    payload = read(key)
    if payload is None:
        payload = build()
        write(key, payload)
    return payload
