"""Finding NVIDIA's tools without a GPU: ``ptxas`` and libdevice.

Looked for, in order: ``$CUDA_HOME``/``$CUDA_PATH``, the PyPI wheels
``nvidia-cuda-nvcc`` / ``nvidia-nvvm`` (installed by accy's ``test`` and
``cuda`` extras), ``$PATH``, and ``/usr/local/cuda``.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import attrs

from ...errors import CompileError


def _roots() -> list[str]:
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    for site in sys.path:
        roots.extend(sorted(glob.glob(os.path.join(site, "nvidia", "cu*"))))
        roots.extend(glob.glob(os.path.join(site, "nvidia", "cuda_nvcc")))
        roots.extend(glob.glob(os.path.join(site, "nvidia", "nvvm")))
    roots.append("/usr/local/cuda")
    return [r for r in roots if r and os.path.isdir(r)]


def _find(tool: str) -> str | None:
    """Path of the CUDA tool ``tool`` (in a pip wheel's, CUDA_HOME's or the PATH's bin), or None."""
    for root in _roots():
        candidate = os.path.join(root, "bin", tool)
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(tool)


@functools.cache
def find_ptxas() -> str | None:
    """Path of a ``ptxas`` binary, or None."""
    return _find("ptxas")


@functools.cache
def find_nvdisasm() -> str | None:
    """Path of an ``nvdisasm`` binary (PyPI ``nvidia-cuda-nvdisasm``), or None."""
    return _find("nvdisasm")


@functools.cache
def find_libdevice() -> str | None:
    """Path of ``libdevice.10.bc``, or None."""
    for root in _roots():
        for pattern in ("nvvm/libdevice/libdevice*.bc", "libdevice/libdevice*.bc"):
            found = sorted(glob.glob(os.path.join(root, pattern)))
            if found:
                return found[-1]
    return None


@attrs.frozen
class Resources:
    """What one kernel takes of a GPU, as ``ptxas -v`` reports it."""

    arch: str
    registers: int  # per thread
    spill_stores: int  # bytes
    spill_loads: int
    shared_bytes: int  # static shared memory per block
    stack_bytes: int
    barriers: int


def _run_ptxas(ptx: str, arch: str, verbose: bool = False, ptxas: str | None = None):
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise CompileError("ptxas not found: pip install nvidia-cuda-nvcc (accy's test extra does), or set CUDA_HOME")
    with tempfile.TemporaryDirectory(prefix="accy-ptxas-") as tmp:
        src, out = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        flags = ["-v"] if verbose else []
        result = subprocess.run([ptxas, f"-arch={arch}", *flags, src, "-o", out], capture_output=True, text=True)
        if result.returncode != 0:
            keep = tempfile.NamedTemporaryFile("w", suffix=".ptx", prefix="accy-failed-", delete=False)
            with keep:
                keep.write(ptx)
            raise CompileError(
                f"ptxas rejected the PTX for {arch}:\n{result.stderr.strip()}\n"
                f"reproduce with: {ptxas} -arch={arch} {keep.name} -o /dev/null"
            )
        with open(out, "rb") as f:
            return f.read(), result.stderr + result.stdout


def assemble(ptx: str, arch: str) -> bytes:
    """Assemble PTX with ptxas for ``arch``; a CompileError carries ptxas's message
    and a command to reproduce it."""
    return _run_ptxas(ptx, arch)[0]


def resources(ptx: str, arch: str, ptxas: str | None = None) -> Resources:
    """Registers, spills and shared memory of the (first) kernel in ``ptx``, from ``ptxas -v``
    (``ptxas``: that binary instead of the one found, e.g. one that reads a newer PTX)."""
    _, report = _run_ptxas(ptx, arch, verbose=True, ptxas=ptxas)

    def number(pattern: str) -> int:
        m = re.search(pattern, report)
        return int(m.group(1)) if m else 0

    return Resources(arch, number(r"Used (\d+) registers"), number(r"(\d+) bytes spill stores"),
                     number(r"(\d+) bytes spill loads"), number(r"(\d+) bytes smem"),
                     number(r"(\d+) bytes stack frame"), number(r"used (\d+) barriers"))
