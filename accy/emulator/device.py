"""The emulated GPU: :class:`Device` (global memory and loaded modules),
:class:`Module` and :class:`Function` (a kernel entry, launched with a grid, a
block shape and arguments)."""

from __future__ import annotations

import collections
import itertools
import math
import threading

import numpy as np

from .async_copy import AsyncCopies
from .compiler import ModuleCompiler
from .errors import PtxError
from .executor import STACK_CAP, Budget, Context, Program, run_entry
from .executor import instruction_budget as _resolve_budget  # the arguments below take its name
from .memory import GlobalMemory
from .numerics import U8, U32
from .parser import imm_bits, parsed, type_size
from .races import LaunchRaces
from .wgmma_async import Warpgroups
from .async_proxy import Proxy, uses_async_proxy
from .schedule import Schedule
from .schedule import resolve as resolve_schedule

MAX_THREADS_PER_BLOCK = 1024
MAX_SHARED_PER_BLOCK = 227 * 1024  # sm_90; sm_80 allows 163 KiB (the emulator accepts the larger)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
BATCH_THREADS = 16384  # threads run together (whole blocks)
LOCAL_BUDGET = 256 << 20  # bytes of local memory (stacks) for one batch

_compile_lock = threading.Lock()
_compiled: "collections.OrderedDict[str, _Compiled]" = collections.OrderedDict()
_COMPILED_KEEP = 64


class _Compiled:
    """A module parsed and compiled (shared by every device that loads the same text)."""

    def __init__(self, text: str):
        self.ast = parsed(text)
        self.mc = ModuleCompiler(self.ast)
        self.functions = self.mc.compile()
        self.order = list(self.ast.functions)


def compiled(text: str) -> _Compiled:
    with _compile_lock:
        c = _compiled.get(text)
        if c is None:
            c = _compiled[text] = _Compiled(text)
            while len(_compiled) > _COMPILED_KEEP:
                _compiled.popitem(last=False)
        else:
            _compiled.move_to_end(text)
        return c


class Device:
    """One emulated GPU: global memory and the modules loaded on it."""

    def __init__(self, *, instruction_budget: int | None = None, step_limit: int | None = None,
                 schedule: str | Schedule | None = None):
        """``instruction_budget``: warp instructions one batch of blocks may issue before the
        launch is stopped as an endless loop (a :class:`PtxError`); None: the
        ``ACCY_EMULATOR_BUDGET`` environment variable at each launch, else 2 million.
        ``step_limit``: also stop an activation after that many basic blocks (None: no such bound).
        ``schedule``: the warp schedule of every launch (see :mod:`.schedule`: "lockstep",
        "reverse", "random" or "random:SEED"); None: ``ACCY_PTX_SCHEDULE`` at each launch, else
        lockstep."""
        if instruction_budget is not None:
            instruction_budget = _resolve_budget(instruction_budget)
        self.instruction_budget = instruction_budget
        self.step_limit = None if step_limit is None else int(step_limit)
        self.schedule = None if schedule is None else (
            schedule if isinstance(schedule, Schedule) else Schedule.parse(schedule))
        self.gmem = GlobalMemory()
        self._modules: dict[str, Module] = {}
        self._lock = threading.RLock()

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        """A new allocation of ``nbytes`` (zero-filled); its 256-byte aligned, non-zero address."""
        return self.gmem.alloc(int(nbytes)).start

    def free(self, address: int) -> None:
        self.gmem.free(int(address))

    def _bytes(self, address: int, nbytes: int, what: str):
        a = self.gmem.span(int(address), int(nbytes), what)
        off = int(address) - a.start
        return a.data[off:off + int(nbytes)]

    def copy_to_device(self, address: int, host) -> None:
        """Copy the bytes of a NumPy array (or bytes) to ``address``."""
        src = np.frombuffer(host, U8) if isinstance(host, (bytes, bytearray, memoryview)) else \
            np.ascontiguousarray(host).reshape(-1).view(U8)
        self._bytes(address, src.size, "copy to the device")[:] = src

    def copy_from_device(self, host: np.ndarray, address: int) -> None:
        """Fill the C-contiguous array ``host`` with the bytes at ``address``."""
        if not isinstance(host, np.ndarray) or not host.flags.c_contiguous or not host.flags.writeable:
            raise ValueError("copy_from_device needs a writable C-contiguous NumPy array")
        dst = host.reshape(-1).view(U8)
        dst[:] = self._bytes(address, dst.size, "copy from the device")

    def copy_device(self, dst: int, src: int, nbytes: int) -> None:
        data = self._bytes(src, nbytes, "device copy (source)").copy()
        self._bytes(dst, nbytes, "device copy (destination)")[:] = data

    def memset(self, address: int, value: int, nbytes: int) -> None:
        self._bytes(address, nbytes, "memset")[:] = int(value) & 0xFF

    def read(self, address: int, nbytes: int) -> bytes:
        return self._bytes(address, nbytes, "read").tobytes()

    # -- modules ---------------------------------------------------------------------------------------
    def load_module(self, ptx: str) -> "Module":
        """Parse and prepare ``ptx`` (once per text on this device)."""
        with self._lock:
            m = self._modules.get(ptx)
            if m is None:
                m = self._modules[ptx] = Module(self, compiled(ptx))
            return m


class Module:
    """A PTX module loaded on a device: its global variables allocated, its constants laid out."""

    def __init__(self, device: Device, c: _Compiled):
        self.device = device
        self._c = c
        self.sym: dict[str, int] = {}
        self._allocations = []
        for name, v in c.mc.globals.items():
            if v.extern and not v.init and not v.count and v.count is not None:
                continue
            a = device.gmem.alloc(max(v.size, 1), name=name)
            self._allocations.append(a)
            self.sym[name] = a.start
        for name, v in c.mc.globals.items():
            if v.init and name in self.sym:
                raw = self._initial_bytes(v)
                a = device.gmem.find(self.sym[name])
                a.data[:len(raw)] = raw
        self.cbank = np.zeros(max(c.mc.const_size, 16), U8)
        for v in c.ast.variables:
            if v.space == "const" and v.init:
                raw = self._initial_bytes(v)
                off = c.mc.const_offsets[v.name]
                self.cbank[off:off + len(raw)] = raw
        self.program = Program(c.functions, c.order)

    def _initial_bytes(self, v) -> np.ndarray:
        size = type_size(v.type)
        is_float = v.type.startswith(("f", "bf"))
        out = bytearray()
        for item in v.init:
            if isinstance(item, tuple):  # ("sym", name, offset): an address
                _, name, off = item
                if name in self.sym:
                    value = self.sym[name] + off
                elif name in self._c.mc.fn_index:
                    from .compiler import FUNCTION_BASE

                    value = FUNCTION_BASE + 16 * self._c.mc.fn_index[name] + off
                else:
                    raise PtxError(f"initializer of {v.name} refers to {name}, which has no address here",
                                   line=v.line)
                bits = value & ((1 << (8 * size)) - 1)
            else:
                bits = imm_bits(item, size, is_float)
            out += int(bits).to_bytes(size, "little")
        return np.frombuffer(bytes(out[:v.size]), U8)

    @property
    def entries(self) -> list[str]:
        return [n for n, f in self._c.ast.functions.items() if f.kind == "entry" and f.defined]

    def function(self, name: str) -> "Function":
        fn = self._c.ast.functions.get(name)
        if fn is None or fn.kind != "entry" or not fn.defined:
            raise PtxError(f"the module has no kernel entry {name!r}; its entries are {', '.join(self.entries) or 'none'}")
        return Function(self, name)

    @property
    def source(self) -> str:
        """The generated Python of every function (for debugging the emulator)."""
        return "\n\n".join(cf.fc.source for cf in self._c.functions.values())


def _dim3(value, what: str, limits) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    value = tuple(int(v) for v in value)
    if not 1 <= len(value) <= 3:
        raise PtxError(f"{what} must have 1 to 3 dimensions, got {value}")
    value = value + (1,) * (3 - len(value))
    for v, lim in zip(value, limits):
        if not 1 <= v <= lim:
            raise PtxError(f"{what} {value} is outside the device's limits {limits}")
    return value


class Function:
    """A kernel entry of a loaded module."""

    def __init__(self, module: Module, name: str):
        self.module = module
        self.name = name
        c = module._c
        self._cf = c.functions[name]
        self._async_proxy = uses_async_proxy(c.mc.module)  # mbarriers or TMA: the proxy's clocks run
        self._fn = c.ast.functions[name]
        fc = self._cf.fc
        self.param_types = tuple(p.type if p.count is None else f"{p.type}[{p.count}]" for p in self._fn.params)
        self._offsets = [fc.kparam_offsets[p.name][0] for p in self._fn.params]
        self._kparam_size = fc.kparam_size

    def _pack(self, args) -> np.ndarray:
        params = self._fn.params
        if len(args) != len(params):
            raise PtxError(f"kernel {self.name} takes {len(params)} arguments ({', '.join(self.param_types)}), "
                           f"got {len(args)}")
        buf = np.zeros(max(self._kparam_size, 8), U8)
        for i, (p, off, arg) in enumerate(zip(params, self._offsets, args)):
            size = type_size(p.type)
            if p.count is not None:
                raw = bytes(arg) if isinstance(arg, (bytes, bytearray, memoryview, np.void)) else \
                    np.ascontiguousarray(arg).view(U8).tobytes()
                if len(raw) != p.size:
                    raise PtxError(f"argument {i} of {self.name} must be {p.size} bytes, got {len(raw)}")
                buf[off:off + p.size] = np.frombuffer(raw, U8)
                continue
            if p.type.startswith(("f", "bf")):
                if isinstance(arg, np.generic) and arg.dtype.itemsize == size and arg.dtype.kind == "f":
                    bits = int(np.asarray(arg).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[size]))
                else:
                    try:
                        value = float(arg)
                    except (TypeError, ValueError):
                        raise PtxError(f"argument {i} of {self.name} (.{p.type}) must be a number, "
                                       f"got {type(arg).__name__}") from None
                    if p.type == "bf16":
                        from .numerics import f64_to_bf16_bits

                        bits = int(f64_to_bf16_bits(np.array([value]))[0])
                    else:
                        bits = int(np.array(value, {2: np.float16, 4: np.float32, 8: np.float64}[size])
                                   .view({2: np.uint16, 4: np.uint32, 8: np.uint64}[size]))
            else:
                if isinstance(arg, float) or (isinstance(arg, np.generic) and arg.dtype.kind == "f"):
                    raise PtxError(f"argument {i} of {self.name} (.{p.type}) must be an integer, got {arg!r}")
                try:
                    bits = int(arg) & ((1 << (8 * size)) - 1)
                except (TypeError, ValueError):
                    raise PtxError(f"argument {i} of {self.name} (.{p.type}) must be an integer, "
                                   f"got {type(arg).__name__}") from None
            buf[off:off + size] = np.frombuffer(bits.to_bytes(size, "little"), U8)
        return buf

    def launch(self, grid, block, args, shared_bytes: int = 0, *, instruction_budget: int | None = None,
               profile=None, blocks=None, schedule: str | Schedule | None = None) -> None:
        """Run the kernel on ``grid`` x ``block`` threads with ``args`` (one per .param).
        ``instruction_budget`` and ``schedule`` override the device's (see :class:`Device`) for
        this launch.  Every launch is race-checked (:mod:`.races`): a race raises
        :class:`~accy.emulator.RaceError` after the batch of blocks it happened in has run.
        ``profile``: a :class:`~.profile.LaunchCounters` to count into (see :mod:`.profile`);
        ``blocks``: run only these blocks (linear indices, x fastest), as a profile's sample does."""
        device = self.module.device
        budget = _resolve_budget(device.instruction_budget if instruction_budget is None
                                 else instruction_budget)
        schedule = resolve_schedule(schedule if schedule is not None else device.schedule)
        grid = _dim3(grid, "grid", MAX_GRID)
        block = _dim3(block, "block", MAX_BLOCK)
        tpb = math.prod(block)
        if tpb > MAX_THREADS_PER_BLOCK:
            raise PtxError(f"block {block} has {tpb} threads, over {MAX_THREADS_PER_BLOCK}")
        d = self._fn.directives
        if "reqntid" in d and tuple(d["reqntid"]) + (1,) * (3 - len(d["reqntid"])) != block:
            raise PtxError(f"kernel {self.name} requires a block of {d['reqntid']} threads (.reqntid), got {block}")
        if "maxntid" in d and tpb > math.prod(d["maxntid"]):
            raise PtxError(f"kernel {self.name} allows at most {math.prod(d['maxntid'])} threads per block "
                           f"(.maxntid {', '.join(map(str, d['maxntid']))}), got {block}")
        kparams = self._pack(list(args))
        mc = self.module._c.mc
        shared_bytes = int(shared_bytes)
        if shared_bytes < 0:
            raise PtxError("shared_bytes must not be negative")
        static = -(-mc.shared_size // 16) * 16
        S = max(16, -(-(static + shared_bytes) // 16) * 16)
        if static + shared_bytes > MAX_SHARED_PER_BLOCK:
            raise PtxError(f"{static + shared_bytes} bytes of shared memory per block, over {MAX_SHARED_PER_BLOCK}")
        need = self.module.program.stack.get(self.name)
        L = -(-(need if need is not None else STACK_CAP // 4) // 16) * 16
        L = max(L, 16)
        ncta = math.prod(grid)
        order = np.arange(ncta) if blocks is None else np.asarray(blocks, np.int64)
        if len(order) and (order.min() < 0 or order.max() >= ncta):
            raise PtxError(f"blocks to run must lie in 0..{ncta - 1} (the grid {grid} has {ncta})")
        per_batch = max(1, min(ncta, BATCH_THREADS // tpb, max(1, LOCAL_BUDGET // max(1, L * tpb))))
        gx, gy, _ = grid
        bx, by, _ = block
        lin = np.arange(tpb)
        tx, ty, tz = (lin % bx).astype(U32), ((lin // bx) % by).astype(U32), (lin // (bx * by)).astype(U32)
        nwarps = -(-tpb // 32)
        counter = itertools.count()
        races = LaunchRaces(grid, block, str(schedule))
        if profile is not None:
            profile.bind(self)  # the latency model reads the blocks' instructions
        with np.errstate(all="ignore"):
            for c0 in range(0, len(order), per_batch):
                cids = order[c0:c0 + per_batch]
                nb = len(cids)
                n = nb * tpb
                T = Context()
                T.n = n
                T.tid = (np.tile(tx, nb), np.tile(ty, nb), np.tile(tz, nb))
                T.ctaid = tuple(np.repeat(x.astype(U32), tpb) for x in (cids % gx, (cids // gx) % gy, cids // (gx * gy)))
                T.lane = np.tile((lin % 32).astype(U32), nb)
                T.warp = np.tile((lin // 32).astype(U32), nb)
                slot = np.repeat(np.arange(nb, dtype=np.int64), tpb)
                T.cta = slot
                T.wkey = slot * nwarps + np.tile(lin // 32, nb)
                T.nwkeys = nb * nwarps
                T.sbase = slot * S
                T.lbase = np.arange(n, dtype=np.int64) * L
                T.orig = np.arange(n)
                T.smem = np.zeros(nb * S, U8)
                T.shared_size = S
                T.lmem = np.zeros(n * L, U8)
                T.lstride = L
                T.gmem = self.module.device.gmem
                T.sym = self.module.sym
                T.cbank = self.module.cbank
                T.kparams = kparams
                T.ntid_u32 = tuple(np.uint32(v) for v in block)
                T.nctaid_u32 = tuple(np.uint32(v) for v in grid)
                T.nwarpid_u32 = np.uint32(nwarps)
                T.nwarps = nwarps
                T.dynamic_smem_u32 = np.uint32(shared_bytes)
                T.total_smem_u32 = np.uint32(S)
                T.clock64 = lambda: np.uint64(next(counter))
                T.step_limit = self.module.device.step_limit
                T.budget = Budget(budget)  # each batch its own: a bound on what one warp runs
                T.copies = AsyncCopies(n, len(T.smem))  # the batch's cp.async copies in flight
                T.wgmma = Warpgroups()  # the batch's wgmma groups and wgmmas in flight
                T.proxy = Proxy(n, tpb, len(T.smem), self._async_proxy)  # mbarriers, TMA and the asynchronous proxy's clocks
                T.prof = profile  # the counters of a profiled launch (None: no counting)
                T.bt = np.arange(n)
                T.races = races
                first = int(cids[0])
                races.begin_batch(first, n, S)
                races.hb = T.proxy if T.proxy.active else None  # mbarriers order threads the phases do not
                try:
                    run_entry(self.module.program, self._cf, T, schedule, first)
                except Exception as failure:
                    # a race is the likelier cause of whatever went wrong after it
                    race = races.check(end_of_batch=True, last=True)
                    if race is not None:
                        raise race from failure
                    raise
                race = races.check(end_of_batch=True, last=c0 + per_batch >= len(order))
                if race is not None:
                    raise race
