"""What a graph is lowered for: one attrs class per target.

``Target.host()`` and ``Target.nvptx("sm_90")`` build them; which lowering and which
LLVM target machine serve each is :data:`accy.codegen.machine.TARGETS`' business,
and what differs in the lowering is the target's :class:`~accy.codegen.llvm.Lowering`
subclass (:mod:`accy.codegen.host.spmd` for the host, :mod:`accy.codegen.nvptx.lowering`).
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
from typing import ClassVar

import attrs
import llvmlite.binding as llvm
from llvmlite import ir

from .errors import CompileError

VECTOR_WIDTHS = (0, 2, 4, 8, 16, 32, 64)  # host threads per vector (LLVM mislowers <1 x bfloat>)


@attrs.frozen(kw_only=True)
class Target:
    """A lowering target; ``checks`` turns bounds and division checks on."""

    name: ClassVar[str]
    checks: bool = True

    @staticmethod
    def host(*, checks: bool = True, vector_width: int = 0) -> "HostTarget":
        return HostTarget(checks=checks, vector_width=vector_width)

    @staticmethod
    def nvptx(arch: str = "sm_80", *, fast_math: bool = False, checks: bool = True) -> "NvptxTarget":
        return NvptxTarget(arch=arch, fast_math=fast_math, checks=checks)

    @property
    def pointer(self) -> ir.PointerType:
        """The type of a pointer to a global buffer."""
        raise NotImplementedError


def is_vector_width(value) -> bool:
    """``value`` is a host vector width the lowering takes (0: the CPU's own)."""
    return value in VECTOR_WIDTHS


def _vector_width(instance, attribute, value) -> None:
    if not is_vector_width(value):
        raise CompileError(f"vector_width must be one of {', '.join(map(str, VECTOR_WIDTHS))} "
                           f"(0: the CPU's own), got {value!r}")


@functools.cache
def init_llvm() -> None:
    """Every target LLVM has (NVPTX among them)."""
    _initialise("initialize_all_targets", "initialize_all_asmprinters")
    init_native()


@functools.cache
def init_native() -> None:
    """This machine's target alone: the host's code needs no other (and the others take
    milliseconds to set up)."""
    _initialise("initialize_native_target", "initialize_native_asmprinter")


def _initialise(*names: str) -> None:
    # LLVM >= 20 initialises itself; older llvmlite needs this (and it is idempotent)
    for name in names:
        try:
            getattr(llvm, name)()
        except (AttributeError, RuntimeError):
            pass


_stderr_lock = threading.Lock()


@functools.cache
def nvptx_processors() -> tuple[str, ...]:
    """The NVPTX processors this LLVM knows, in its ``sm_NN``/``sm_NNa`` forms (LLVM only
    warns about a processor it does not know, and compiles for its default instead)."""
    init_llvm()
    # LLVM lists a target's processors on stderr for the processor "help": read it once
    with _stderr_lock, tempfile.TemporaryFile() as listing:
        saved = os.dup(2)
        try:
            os.dup2(listing.fileno(), 2)
            llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu="help")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        listing.seek(0)
        text = listing.read().decode(errors="replace")
    names = set(re.findall(r"^\s*(sm_\d+a?)\s", text, re.M))
    return tuple(sorted(names, key=lambda name: (int(name[3:].rstrip("a")), name)))


def is_known_arch(value) -> bool:
    """``value`` is an ``sm_NN``/``sm_NNa`` processor this LLVM lists (the form alone where
    LLVM gives no listing this code can read)."""
    known = nvptx_processors()
    return isinstance(value, str) and re.fullmatch(r"sm_\d+a?", value) is not None and (not known or value in known)


def _arch(instance, attribute, value) -> None:
    if not is_known_arch(value):
        known = nvptx_processors()
        raise CompileError(f"arch must be an NVPTX processor LLVM knows ({', '.join(known) or 'sm_NN or sm_NNa'}), "
                           f"got {value!r}")


@attrs.frozen(kw_only=True)
class HostTarget(Target):
    """This CPU: a launch's threads run as the lanes of vectors, ``vector_width`` at a
    time (0: the CPU's widest, see :func:`accy.codegen.host.chunking.host_vector_width`)."""

    name: ClassVar[str] = "host"
    vector_width: int = attrs.field(default=0, validator=_vector_width)

    @property
    def pointer(self) -> ir.PointerType:
        return ir.PointerType()


@attrs.frozen(kw_only=True)
class NvptxTarget(Target):
    """``nvptx64-nvidia-cuda`` for ``arch``.  ``fast_math`` selects NVPTX's approximate
    instructions (``ex2.approx``, ``lg2.approx``, ``sin/cos.approx``, ``tanh.approx``,
    ``rsqrt.approx``) for f32 math instead of libdevice."""

    name: ClassVar[str] = "nvptx"
    arch: str = attrs.field(default="sm_80", validator=_arch)
    fast_math: bool = False

    @property
    def sm(self) -> int:
        """The compute capability as a number (80 for sm_80)."""
        return int(self.arch[3:].rstrip("a"))

    @property
    def pointer(self) -> ir.PointerType:
        return ir.PointerType(addrspace=1)  # global memory
