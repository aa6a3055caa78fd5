"""What a graph is lowered for: one attrs class per target, owning the target's facts.

``Target.reference()`` (the NumPy interpreter), ``Target.host()`` and ``Target.nvptx("sm_90")``
build them.  A target says what the stages after the front end ask of it: its warp size, its
per-block limits and capabilities (for an NVPTX target, by architecture), the passes that
lower a graph for it (:attr:`Target.pipeline`, names from :data:`accy.lowering.pipeline.PASSES`)
and the code generator that emits it (:attr:`Target.emitter`, a key of
:data:`accy.codegen.machine.EMITTERS`; None: the graph is interpreted).
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
WARP_SIZE = 32  # lanes of a warp: NVIDIA's, and the language's warp operations' on every target

# the front end's passes, run when a program is traced (every target's pipeline starts with them)
FRONT_END = ("fold-constants", "cse", "hoist-loop-invariants", "cse", "dce", "contract", "verify")
# a tile program as one SIMT block launch of warps, optimised again
DISTRIBUTE = ("distribute-tiles", "verify", "fold-ranges", "fold-constants", "cse", "hoist-loop-invariants", "cse",
              "strength-reduce", "dce", "verify")


@attrs.frozen
class BlockLimits:
    """What one block (one tile program) of a target may use."""

    threads: int  # threads per block
    registers: int  # 32-bit registers per block
    registers_per_thread: int
    static_shared: int  # bytes of statically sized shared memory
    dynamic_shared: int  # bytes of shared memory a kernel may opt in to (static and dynamic together)


@attrs.frozen
class Capabilities:
    """The instructions a target offers the lowering (an NVPTX target's, by architecture)."""

    mma: tuple[str, ...] = ()  # mma.sync input types (accy.dsl.ops.MmaKind values): tensor cores
    ldmatrix: bool = False  # ldmatrix: warp-wide 8x8 matrix loads from shared memory (sm_75)
    cp_async: bool = False  # cp.async: global -> shared copies in flight (sm_80)
    tma: bool = False  # the tensor memory accelerator's bulk tensor copies (sm_90)
    wgmma: bool = False  # warpgroup mma from shared memory (sm_90a only)
    sms: int = 0  # the SMs of the architecture's data-centre part (H100/H200 SXM, A100), which a
    #             persistent tile launch sizes its grid by (0: it launches a block per program)


# the CPU: a block's threads run as vector lanes, with memory as it comes
HOST_LIMITS = BlockLimits(threads=1024, registers=2**31 - 1, registers_per_thread=2**31 - 1,
                          static_shared=2**31 - 1, dynamic_shared=2**31 - 1)


# the most static shared memory a CUDA block may declare; past it, dynamic (opted into per kernel)
STATIC_SHARED_BYTES = 48 * 1024


def nvptx_limits(sm: int) -> BlockLimits:
    """CUDA's per-block limits for compute capability ``sm`` (the programming guide's table)."""
    dynamic = {70: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227}.get(sm, 227 if sm > 90 else 48)
    return BlockLimits(threads=1024, registers=65536, registers_per_thread=255, static_shared=STATIC_SHARED_BYTES,
                       dynamic_shared=dynamic * 1024)


def device_arch(major: int, minor: int) -> str:
    """The PTX target for a GPU of compute capability ``major.minor``: its architecture-specific
    ``sm_90a`` on 9.0 (wgmma; such code runs on 9.0 alone), ``sm_NN`` elsewhere."""
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def nvptx_capabilities(arch: str) -> Capabilities:
    """What ``sm_NN`` (``sm_NNa``: with its architecture-specific features) offers."""
    sm = int(arch[3:].rstrip("a"))
    return Capabilities(mma=("f16", "bf16", "tf32", "s8") if sm >= 80 else (), ldmatrix=sm >= 75,
                        cp_async=sm >= 80, tma=sm >= 90, wgmma=arch == "sm_90a", sms=PERSISTENT_SMS.get(sm, 0))


# NVIDIA's datasheets: A100 108 SMs, H100 and H200 SXM 132 (H100 PCIe has 114: a persistent launch
# sized for 132 runs its last 18 blocks as a second wave there)
PERSISTENT_SMS = {80: 108, 90: 132}


@attrs.frozen(kw_only=True)
class Target:
    """A lowering target; ``checks`` turns bounds and division checks on."""

    name: ClassVar[str]
    warp_size: ClassVar[int] = WARP_SIZE
    pipeline: ClassVar[tuple[str, ...]] = FRONT_END  # the passes that lower a traced graph for it
    tile_pipeline: ClassVar[tuple[str, ...]] = ()  # and then, for a tile program, these
    emitter: ClassVar[str | None] = None  # its code generator (accy.codegen.machine.EMITTERS), None: interpreted
    checks: bool = True

    @staticmethod
    def reference() -> "ReferenceTarget":
        return ReferenceTarget()

    @staticmethod
    def host(*, checks: bool = True, vector_width: int = 0) -> "HostTarget":
        return HostTarget(checks=checks, vector_width=vector_width)

    @staticmethod
    def nvptx(arch: str = "sm_80", *, fast_math: bool = False, checks: bool = True) -> "NvptxTarget":
        return NvptxTarget(arch=arch, fast_math=fast_math, checks=checks)

    @property
    def limits(self) -> BlockLimits:
        return HOST_LIMITS

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    @property
    def passes(self) -> tuple[str, ...]:
        """Every pass a tile program goes through for this target, in order (a SIMT kernel
        skips :attr:`tile_pipeline`)."""
        return self.pipeline + self.tile_pipeline

    @property
    def pointer(self) -> ir.PointerType:
        """The type of a pointer to a global buffer."""
        raise NotImplementedError


@attrs.frozen(kw_only=True)
class ReferenceTarget(Target):
    """The NumPy interpreter: it runs the graph as traced and optimised, tile programs too."""

    name: ClassVar[str] = "reference"


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
    tile_pipeline: ClassVar[tuple[str, ...]] = ("plan-tile-accesses",)  # then lowered whole (accy.codegen.host.tiles)
    emitter: ClassVar[str] = "host"
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
    tile_pipeline: ClassVar[tuple[str, ...]] = DISTRIBUTE
    emitter: ClassVar[str] = "nvptx"
    arch: str = attrs.field(default="sm_80", validator=_arch)
    fast_math: bool = False

    @property
    def sm(self) -> int:
        """The compute capability as a number (80 for sm_80)."""
        return int(self.arch[3:].rstrip("a"))

    @property
    def limits(self) -> BlockLimits:
        return nvptx_limits(self.sm)

    @property
    def capabilities(self) -> Capabilities:
        return nvptx_capabilities(self.arch)

    @property
    def pointer(self) -> ir.PointerType:
        return ir.PointerType(addrspace=1)  # global memory
