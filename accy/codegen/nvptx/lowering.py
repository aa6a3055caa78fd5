"""The NVPTX target: a graph as a ``ptx_kernel`` for ``nvptx64-nvidia-cuda``.

Each CUDA thread computes its logical index from ``ctaid * ntid + tid`` and does
nothing past the logical extent; a block launch is one CUDA block per block.  Math
functions call libdevice (or, with ``fast_math``, the approximate instructions);
shared arrays live in ``addrspace(3)``; barriers, shuffles and 16-bit atomics are
NVVM's.  The target-neutral rest is :class:`accy.codegen.llvm.Lowering`.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...dsl.analysis import uniformity
from ...dsl.analysis.intervals import within
from ...dsl.ir import Graph, Op
from ...dsl.schedule import axes_on_x
from ...dsl.types import DType, bf16, f32
from .control_flow import NvptxControlFlow
from .debug_lines import DebugLines
from .bulk_copies import BULK_COPY_OPS, MAP_ALIGN, MAP_TYPE, BulkCopyEmitter
from .tensor_cores import TENSOR_CORE_OPS, TensorCoreEmitter
from ..arithmetic import MATH
from ..llvm import LoweredModule, Lowering
from ..abi import dynamic_shared_bytes, shared_offsets, tensor_maps
from ..llvm_types import I1, I32, I64, VOID, constant, element_type, float_bits, llvm_type, memory_type
from ...targets import NvptxTarget
from ...targets import WARP_SIZE

REGISTER_FILE = 65536  # 32-bit registers per SM, a block's most

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"

# the NVPTX approximate instruction fast_math uses for an f32 math function, if any
_APPROX = {"exp2": "llvm.nvvm.ex2.approx.ftz.f", "log2": "llvm.nvvm.lg2.approx.ftz.f",
           "sin": "llvm.nvvm.sin.approx.ftz.f", "cos": "llvm.nvvm.cos.approx.ftz.f",
           "rsqrt": "llvm.nvvm.rsqrt.approx.ftz.f", "sqrt": "llvm.nvvm.sqrt.approx.ftz.f",
           "tanh": "llvm.nvvm.tanh.approx.f32"}
LOG2E, LN2 = math.log2(math.e), math.log(2.0)


class NvptxLowering(Lowering):
    """Lowers one graph into a PTX kernel's LLVM module."""

    target: NvptxTarget
    control_class = NvptxControlFlow

    def math_function(self, name: str, t: DType, args) -> ir.Value:
        """libdevice, or the approximate instructions with ``fast_math``."""
        b = self.b
        x = args[0]
        if name == "sqrt" and not (self.target.fast_math and t == f32):
            return self.call("llvm.sqrt", args)
        if name == "sigmoid":
            return self._sigmoid(t, x)
        if self.target.fast_math and t == f32:
            approx = self._approx(name, args)
            if approx is not None:
                return approx
        if name == "rsqrt":
            return b.fdiv(constant(x, 1.0), self.call("llvm.sqrt", args))
        self.needs_libdevice = True
        return self.call(f"__nv_{MATH[name]}{t.libdevice_suffix}", args)

    def flushed(self, op) -> ir.Value | None:
        """An f32 ``exp2`` flushed: ``ex2.approx.ftz``, libdevice's exp2f (``ex2.approx``) with
        its subnormal results flushed, up to the approximation at the boundary (just below
        2**-126 the unflushed one may round up to the smallest normal; both lie within its 2
        ulp).  The flush costs nothing and the unflushed exp2's range reduction (three
        instructions) goes: an exp2 with no other use is dropped as dead."""
        source = getattr(op.operands[0], "op", None)
        if source is None or source.opcode != "exp2" or op.result.type != f32:
            return None
        return self.call(_APPROX["exp2"], [self.value(source.operands[0])])

    def _approx(self, name: str, args) -> ir.Value | None:
        b = self.b
        (x, *rest) = args
        scale = lambda v, c: b.fmul(v, ir.Constant(v.type, c))  # noqa: E731
        if name == "exp":
            return self.call(_APPROX["exp2"], [scale(x, LOG2E)])
        if name == "log":
            return scale(self.call(_APPROX["log2"], [x]), LN2)
        if name in _APPROX:
            return self.call(_APPROX[name], [x])
        return None

    def _sigmoid(self, t: DType, x: ir.Value) -> ir.Value:
        """NVPTX: 1 / (1 + e**-x), as e**x / (1 + e**x) for negative x so tiny results stay
        accurate."""
        b = self.b
        e = self.numerics.math("exp", t, [b.fneg(self.call("llvm.fabs", [x]))])
        one = constant(x, 1.0)
        positive = b.fdiv(one, b.fadd(one, e))
        negative = b.fdiv(e, b.fadd(one, e))
        return b.select(b.fcmp_ordered(">=", x, constant(x, 0.0)), positive, negative)


    def native_atomic_add(self, dtype: DType) -> bool:
        """PTX adds f16 atomically from sm_70 and bf16 from sm_90 (``atom.add.noftz``, which
        rounds as accy's f16/bf16 add does); LLVM emits PTX 6.3, which f16 needs, from sm_75."""
        return dtype.bits >= 32 or self.target.sm >= (90 if dtype == bf16 else 75)


    def compare_exchange(self, ptr: ir.Value, seen: ir.Value, new: ir.Value) -> tuple[ir.Value, ir.Value]:
        if self.target.sm >= 75 and seen.type == ir.IntType(16):  # atom.cas.b16: sm_70 and PTX 6.3
            current = self._cas16(ptr, seen, new)
            return current, self.b.icmp_unsigned("==", current, seen)
        return super().compare_exchange(ptr, seen, new)

    def narrow_natively(self, x: ir.Value, t: DType) -> ir.Value | None:
        """``cvt.rn.bf16.f32`` from sm_80: nearest even, subnormals kept, a NaN the canonical
        one (docs/ir.md's cast rule); one instruction where the integer rounding takes six,
        and ptxas pairs two into one ``F2FP.BF16.F32.PACK_AB``."""
        if t != bf16 or self.target.sm < 80 or x.type != llvm_type(f32):
            return None
        bits = self.b.call(ir.InlineAsm(ir.FunctionType(ir.IntType(16), [x.type]), "cvt.rn.bf16.f32 $0, $1;", "=h,f"),
                           [x])
        return self.b.bitcast(bits, llvm_type(t))

    def _cas16(self, ptr: ir.Value, compare: ir.Value, new: ir.Value) -> ir.Value:
        """``atom.cas.b16``: LLVM widens a 16-bit cmpxchg to the aligned 32-bit word,
        which reaches two bytes past the end of an odd-length array."""
        space = {1: ".global", 3: ".shared"}.get(ptr.type.addrspace, "")
        i16 = ir.IntType(16)
        asm = ir.InlineAsm(ir.FunctionType(i16, [I64, i16, i16]), f"atom{space}.cas.b16 $0, [$1], $2, $3;",
                           "=h,l,h,h,~{memory}", side_effect=True)
        return self.b.call(asm, [self.b.ptrtoint(ptr, I64), compare, new])


    def shift_count(self, op: Op, n: ir.Value) -> ir.Value:
        """A 64-bit count saturated to 64 (unsigned: a negative one too) by an opaque ``min.u64``.
        The NVPTX back end folds the range check around a 64-bit shift into PTX's shl/shr, which
        clamp their count, but truncates the count to 32 bits first: 5 << 2**32 came out 5.  After
        the min the truncation keeps the count, whether or not the check is folded; LLVM cannot
        see through the asm to drop the min.  Constant counts and index counts known to fit in 32
        bits (most: a shift by an arange, a constant, a masked value) keep the plain shift."""
        if n.type != I64 or isinstance(n, ir.Constant) or within(self.ranges.get(op.operands[1], (None, None)), 2**32):
            return n
        return self.b.call(ir.InlineAsm(ir.FunctionType(I64, [I64]), "min.u64 $0, $1, 64;", "=l,l"), [n])

    def float_remainder(self, a: ir.Value, b: ir.Value) -> ir.Value:
        # NVPTX's frem divides and truncates: inexact for large quotients; libdevice's fmod is exact
        self.needs_libdevice = True
        return self.call(f"__nv_fmod{'f' if element_type(a.type) == llvm_type(f32) else ''}", [a, b])

    def float_divide(self, t: DType, args) -> ir.Value:
        if self.target.fast_math and t == f32:
            return self.call("llvm.nvvm.div.approx.f", args, ty=llvm_type(f32))
        return super().float_divide(t, args)

    # -- tensor maps (kernel parameters after the status word; see accy.codegen.abi) ---------
    def _signature(self) -> list[ir.Type]:
        maps = tensor_maps(self.graph)
        return super()._signature() + [ir.PointerType(MAP_TYPE)] * len(maps) + [I32] * len(maps)

    def _bind_params(self, fn: ir.Function) -> None:
        """The ABI's parameters, then each tensor map (``byval``, 64-byte aligned, read in place
        through its parameter-space address: a grid constant) and its ready flag."""
        super()._bind_params(fn)
        maps = tensor_maps(self.graph)
        first = len(fn.args) - 2 * len(maps)
        self.maps = {}
        for k, m in enumerate(maps):
            arg, flag = fn.args[first + k], fn.args[first + len(maps) + k]
            arg.attributes.add("byval")
            arg.attributes.align = MAP_ALIGN
            arg.name, flag.name = f"{m.tensor}_map{k}", f"{m.tensor}_map{k}_ready"
            self.maps[m] = (arg, flag)
        if maps:
            self.module.add_named_metadata("nvvm.annotations", [
                fn, ir.MetaDataString(self.module, "grid_constant"),
                self.module.add_metadata([ir.Constant(I32, first + k + 1) for k in range(len(maps))])])

    def op_emitters(self):
        """The target-neutral table, with the block level's and the tensor cores' ops."""
        cores, bulk = TensorCoreEmitter(self), BulkCopyEmitter(self)
        return {**super().op_emitters(), "barrier": self.op_barrier, "shuffle": self.op_shuffle,
                **{name: getattr(cores, name) for name in TENSOR_CORE_OPS},
                **{name: getattr(bulk, name) for name in BULK_COPY_OPS}}

    # -- the block level ----------------------------------------------------------------
    def _declare_shared(self) -> None:
        """Each shared array is a module-level array in addrspace(3); past the static limit,
        all of them lie in one dynamic array (``.extern .shared``), each at its offset.  A
        shared array is known by a pointer to its first element."""
        zero = ir.Constant(I64, 0)
        if dynamic_shared_bytes(self.graph):
            dynamic = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), 0), "shared_dynamic", addrspace=3)
            dynamic.linkage = "external"
            arrays = self.graph.shared_arrays()
            dynamic.align = max(op.attrs.align for op in arrays.values())
            for name, offset in shared_offsets(self.graph)[0].items():
                first = self.b.gep(dynamic, [zero, ir.Constant(I64, offset)], inbounds=True)
                self.shared_ptrs[name] = self.b.bitcast(first, memory_type(arrays[name].attrs["dtype"]).as_pointer(3))
            return
        for name, op in self.graph.shared_arrays().items():
            ty = ir.ArrayType(memory_type(op.attrs["dtype"]), op.attrs["count"])
            var = ir.GlobalVariable(self.module, ty, f"shared_{name}", addrspace=3)
            var.linkage = "internal"
            var.align = op.attrs.align
            var.initializer = ir.Constant(ty, ir.Undefined)
            self.shared_ptrs[name] = self.b.gep(var, [zero, zero], inbounds=True)

    def op_barrier(self, op: Op) -> None:
        if op.attrs.threads:  # named barrier 1 of the block's first threads (warp roles' consumers);
            # the intrinsic is convergent: LLVM does not copy it into divergent paths, as it may inline asm
            self.b.call(self.declare("llvm.nvvm.barrier.cta.sync.aligned.count", VOID, [I32, I32]),
                        [ir.Constant(I32, 1), ir.Constant(I32, op.attrs.threads)])
            return
        self.call("llvm.nvvm.barrier0", [], ty=VOID)

    def op_shuffle(self, op: Op) -> None:
        """shfl.sync over the full warp, 32 bits at a time."""
        value, delta = (self.value(v) for v in op.operands)
        self.values[op.result] = self._shuffle(op.attrs["mode"], value, delta)

    def _shuffle(self, mode: str, value: ir.Value, delta: ir.Value) -> ir.Value:
        b = self.b
        # up/down/xor by a count outside [0, 32) give the thread's own value: clamp it to 32
        # (past every lane); idx takes the source lane modulo 32, as PTX does
        if mode != "idx":
            delta = b.select(b.icmp_unsigned("<", delta, ir.Constant(I64, WARP_SIZE)), delta, ir.Constant(I64, WARP_SIZE))
        lane = b.trunc(delta, I32)
        name = {"idx": "idx", "xor": "bfly", "down": "down", "up": "up"}[mode]
        clamp = ir.Constant(I32, 0 if mode == "up" else WARP_SIZE - 1)
        fn = self.declare(f"llvm.nvvm.shfl.sync.{name}.i32", I32, [I32, I32, I32, I32])
        full = ir.Constant(I32, -1)
        width = value.type.width if isinstance(value.type, ir.IntType) else float_bits(value.type)
        bits = b.bitcast(value, ir.IntType(width)) if not isinstance(value.type, ir.IntType) else value
        if width <= 32:
            word = b.zext(bits, I32) if width < 32 else bits
            result = b.call(fn, [full, word, lane, clamp])
            result = b.trunc(result, ir.IntType(width)) if width < 32 else result
        else:
            low = b.call(fn, [full, b.trunc(bits, I32), lane, clamp])
            high = b.call(fn, [full, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), lane, clamp])
            result = b.or_(b.zext(low, I64), b.shl(b.zext(high, I64), ir.Constant(I64, 32)))
        return result if isinstance(value.type, ir.IntType) else b.bitcast(result, value.type)

    # -- entry points ---------------------------------------------------------------
    def lower_kernel(self, block: tuple[int, int, int]) -> ir.Function:
        fn = self._entry()
        b = self.b
        self._bind_params(fn)
        self.lower_top_level()
        inside = ir.Constant(I1, 1)
        indices = []
        for dim, extent in zip("xyz", self.extents):
            sreg = lambda reg: b.zext(self.call(f"llvm.nvvm.read.ptx.sreg.{reg}.{dim}", [], ty=I32), I64)  # noqa: E731
            idx = b.add(b.mul(sreg("ctaid"), sreg("ntid")), sreg("tid"))
            inside = b.and_(inside, b.icmp_unsigned("<", idx, extent))
            indices.append(idx)
        for dim, threads in list(zip("xyz", block))[len(self.extents):]:
            if threads > 1:  # a block with more dimensions than the launch: only its first layer works
                tid = self.call(f"llvm.nvvm.read.ptx.sreg.tid.{dim}", [], ty=I32)
                inside = b.and_(inside, b.icmp_unsigned("==", tid, ir.Constant(I32, 0)))
        with b.if_then(inside):  # threads past the logical extent do nothing
            self.lower_launch_body(indices)
        b.ret_void()
        self._annotate(fn, block)
        return fn

    def lower_block_kernel(self) -> ir.Function:
        """A block launch on NVPTX: one CUDA block per block, its threads the block's threads."""
        uniformity.refuse_divergent_synchronisation(
            self.graph, "on a GPU this hangs or corrupts shared memory, so the PTX is not emitted")
        fn = self._entry()
        b = self.b
        self._bind_params(fn)
        self._declare_shared()
        self.lower_top_level()
        launch = self.graph.launch_op
        sreg = lambda reg, dim: b.zext(self.call(f"llvm.nvvm.read.ptx.sreg.{reg}.{dim}", [], ty=I32), I64)  # noqa: E731
        blocks = self._block_indices(sreg)
        threads = [sreg("tid", dim) for dim in "xyz"[:len(self.graph.block_shape)]]
        inside = ir.Constant(I1, 1)
        for idx, extent in zip(blocks, self.extents):  # a grid larger than the extents does nothing
            inside = b.and_(inside, b.icmp_unsigned("<", idx, extent))
        per_block = math.prod(self.graph.block_shape)
        self.lane_of = lambda: ir.Constant(I64, 0)  # an entry check fails for the launch, not a thread
        inside = b.and_(inside, self.memory.layouts_inside())  # a tensor outside its buffer: nothing runs

        def lane():
            block_lane, stride = ir.Constant(I64, 0), ir.Constant(I64, 1)
            for idx, extent in zip(blocks, self.extents):
                block_lane = b.add(block_lane, b.mul(idx, stride))
                stride = b.mul(stride, extent)
            return b.add(b.mul(block_lane, ir.Constant(I64, per_block)), self._linear(threads))

        self.lane_of = lane
        with b.if_then(inside):
            for arg, value in zip(launch.regions[0].args, blocks + threads):
                self.values[arg] = value
            self.lower_block(launch.regions[0])
        b.ret_void()
        # aim at 512 resident threads per SM (at most 128 registers each) unless the launch says
        # how many blocks to budget for (a tile program does): without a hint ptxas trades
        # registers for occupancy on its own and may spill
        # setmaxnreg moves registers between a block's warps: the ISA asks for the kernel's count
        # to be stated (.maxnreg), the register file's share of each thread
        moves = any(op.opcode == "setmaxnreg" for op in self.graph.body.walk())
        min_blocks = launch.attrs.min_blocks or max(1, 512 // per_block)
        self._annotate(fn, tuple(self.graph.block_shape) + (1,) * (3 - len(self.graph.block_shape)),
                       min_blocks=min_blocks,
                       max_registers=min(248, REGISTER_FILE // (per_block * min_blocks) // 8 * 8) if moves else None)
        return fn

    def _block_indices(self, sreg) -> list[ir.Value]:
        """The block's index along each grid axis: axis i is ctaid along dimension i, but a grid of
        more than three axes has its first ones folded onto x (:func:`~accy.dsl.schedule.axes_on_x`),
        the first fastest: ctaid.x's digits in their extents (no division where nothing folds)."""
        b = self.b
        on_x = axes_on_x(len(self.extents))
        indices, rest = [], sreg("ctaid", "x")
        for extent in self.extents[:on_x - 1]:
            indices.append(b.urem(rest, extent))
            rest = b.udiv(rest, extent)
        indices.append(rest)
        return indices + [sreg("ctaid", dim) for dim in "yz"[:len(self.extents) - on_x]]

    def _entry(self) -> ir.Function:
        """The kernel function, its builder at its entry, and its debug lines (each op's source
        line in the PTX as ``.loc``)."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature()), self.graph.name)
        fn.calling_convention = "ptx_kernel"
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.debug_lines = DebugLines(self.module, self.graph)
        self.debug_lines.begin(fn)
        return fn

    def _linear(self, threads: list[ir.Value]) -> ir.Value:
        """A block's thread coordinates as one number, x fastest."""
        linear, stride = ir.Constant(I64, 0), 1
        for idx, extent in zip(threads, self.graph.block_shape):
            linear = self.b.add(linear, self.b.mul(idx, ir.Constant(I64, stride)))
            stride *= extent
        return linear

    def _annotate(self, fn: ir.Function, block: tuple[int, int, int], min_blocks: int | None = None,
                  max_registers: int | None = None) -> None:
        # the calling convention marks the kernel for LLVM >= 20; the annotations keep
        # older NVVM readers informed and bound the block size the kernel is built for
        annotations = [("kernel", 1)] + [(f"maxntid{dim}", threads) for dim, threads in zip("xyz", block)]
        if min_blocks is not None:
            annotations.append(("minctasm", min_blocks))
        if max_registers is not None:
            annotations.append(("maxnreg", max_registers))
        for key, number in annotations:
            self.module.add_named_metadata(
                "nvvm.annotations", [fn, ir.MetaDataString(self.module, key), ir.Constant(I32, number)])


def lower_nvptx(graph: Graph, target: NvptxTarget, block: tuple[int, int, int] = (1, 1, 1)) -> LoweredModule:
    """Lower ``graph`` for NVPTX; ``block`` is the launch's block shape (hints to ptxas)."""
    lw = NvptxLowering(graph, target)
    lw.module.triple = NVPTX_TRIPLE
    entry = (lw.lower_block_kernel() if graph.is_block_launch else lw.lower_kernel(block)).name
    return LoweredModule(lw.module, entry, lw.needs_libdevice, tuple(graph.body.walk()))
