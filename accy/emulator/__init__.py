"""A PTX emulator: runs PTX text on the CPU, vectorised over threads with NumPy.

    from accy.emulator import Device
    dev = Device()
    x = dev.alloc(4 * n)
    dev.copy_to_device(x, host)
    fn = dev.load_module(ptx_text).function("kernel")
    fn.launch(grid=(gx, gy, gz), block=(bx, by, bz), args=[x, n, ...])
    dev.copy_from_device(host, x)

What it executes is what LLVM's NVPTX backend emits (sm_80 / sm_90, PTX ISA 7.x
and 8.x), libdevice included, with results bit for bit what the ISA defines
(see :mod:`.numerics`); every memory access is checked (see :mod:`.memory`), and
every launch is checked for races (see :mod:`.races`: a :class:`RaceError` names both
instructions, both threads and, from the PTX's ``.loc`` lines, both source lines);
divergence, reconvergence, barriers and warp-synchronous instructions are
scheduled as in :mod:`.executor`, the warps of a block in lockstep or one at a time in
the order a schedule gives (see :mod:`.schedule`: ``ACCY_PTX_SCHEDULE``,
``Device(schedule=...)``, ``launch(..., schedule=...)``).  The modules:

* :mod:`.parser` -- PTX text to a syntax tree;
* :mod:`.compiler` -- functions to basic blocks of generated NumPy code;
* ``ops_*`` -- one handler per instruction (arithmetic, conversions, memory,
  control, the tensor-core data path); :mod:`.warp` -- warp-level operations;
* :mod:`.mma` -- ``mma.sync``, ``ldmatrix`` and ``stmatrix`` for whole warps, with
  the ISA's fragment layouts; :mod:`.async_copy` -- ``cp.async`` and its groups;
* :mod:`.numerics` -- exact rounding, fma, f16/bf16; :mod:`.runtime` -- helpers;
* :mod:`.memory` -- the address spaces and their checks;
* :mod:`.races` -- the race checker; an instruction that moves shared or global
  memory other than through :mod:`.memory` reports each access with :func:`record`;
* :mod:`.executor` -- the scheduler; :mod:`.schedule` -- warp orders;
  :mod:`.device` -- the public objects;
* :mod:`.profile` -- per-launch GPU cost counters (``Function.launch(..., profile=)``)
  and the roofline model behind :meth:`accy.Program.profile`.

Tensor cores (sm_80 forms): ``mma.sync.aligned`` m16n8k16 and m16n8k8 with f16 or
bf16 inputs and f32 accumulators, m16n8k8 tf32, m16n8k16 and m16n8k32 s8/u8 (with
``.satfinite``); products exact and each output summed exactly and rounded once to
f32 (real tensor cores may differ in the last bits; see :mod:`.mma`).  ``ldmatrix``
(x1/x2/x4, ``.trans``) and sm_90's ``stmatrix``.  ``cp.async`` (``.ca``/``.cg``, 4,
8 or 16 bytes, src-size or ignore-src) with ``commit_group``/``wait_group``/
``wait_all``: the bytes land at the issuing thread's wait, and touching them
earlier, or from another thread before a barrier, is a :class:`PtxAsyncCopyError`.
These warp-collective instructions need the whole warp: a partial or diverged warp
is an error naming the instruction.

Hopper's asynchronous copies (sm_90a): ``mbarrier`` objects with phases, arrival and
transaction counts (:mod:`.mbarrier`; ``try_wait``/``test_wait`` suspend the warp until the
phase completes, and a block whose threads all wait with nothing left to complete a phase is a
deadlock error), TMA tensor loads and stores and plain bulk copies from the emulated driver's
tensor maps (:mod:`.tma`, :mod:`.tensor_map`), bulk groups, ``tensormap.replace``,
``fence.proxy.async``, ``setmaxnreg``; the asynchronous proxy's race checks go by
happens-before over mbarrier phases, barriers, warp syncs and proxy fences (:mod:`.async_proxy`).
"""

from __future__ import annotations

from . import ops_arith, ops_control, ops_convert, ops_mem, ops_mma, ops_tma, ops_wgmma  # noqa: F401  (registers the handlers)
from .compiler import HANDLERS, Unsupported, parse_form
from .device import Device, Function, Module
from .errors import PtxAsyncCopyError, PtxBarrierError, PtxError, PtxMemoryError, RaceError
from .races import Access, record
from .schedule import Schedule
from .parser import Instruction, parse, parsed


def instruction_forms(ptx: str) -> set[str]:
    """Every instruction form (opcode with its modifiers, e.g. ``fma.rn.f32``,
    ``ld.global.nc.v4.f32``) the PTX text uses."""
    module = parsed(ptx)
    return {s.form for fn in module.functions.values() for s in fn.body if isinstance(s, Instruction)}


def unsupported(forms) -> set[str]:
    """The forms (as :func:`instruction_forms` spells them) the emulator cannot execute."""
    out = set()
    for form in forms:
        try:
            parse_form(form)
        except Unsupported:
            out.add(form)
    return out


def supported_opcodes() -> list[str]:
    """The opcodes the emulator has a handler for (each accepts a set of modifiers)."""
    return sorted(HANDLERS)


__all__ = ["Device", "Module", "Function", "PtxError", "PtxMemoryError", "PtxAsyncCopyError", "PtxBarrierError",
           "RaceError", "Schedule", "Access", "record", "instruction_forms", "unsupported", "supported_opcodes"]
