"""The tensor cores' ops in NVPTX: ``mma.sync`` and ``ldmatrix`` through NVVM's intrinsics,
``cp.async``, and (sm_90a) the warpgroup's ``wgmma`` with its fences, groups and waits, as
inline PTX: each op's emitter, for :class:`~.lowering.NvptxLowering`'s table.

A ``wgmma``'s shared operands reach the hardware as matrix descriptors: 64 bits holding the
operand's shared address (bits 0-13, in 16-byte units), the leading and stride byte offsets
(16-29, 32-45, likewise) and the swizzle mode (62-63).  accy stages every operand as
:mod:`accy.dsl.warpgroups` says: rows of one swizzle span, 8 rows ``8 * swizzle`` bytes
apart (the stride offset), and for a B whose rows run along K the chunks along N ``chunk``
elements apart (the leading offset; a K-major operand's k-steps stay inside one row's span,
where the ISA ignores it).
"""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op, constant_of
from ...dsl.ops import MatrixOrder, Major, MmaKind
from ...errors import CompileError
from ..abi import STATUS_LOAD_OOB
from ..llvm_types import I32, I64, VOID, memory_type


def _peel(value) -> tuple:
    """``value`` as (a value, a constant added to it): its constant addends taken off."""
    extra = 0
    while value.op is not None and value.op.opcode == "add":
        constants = [constant_of(v) for v in value.op.operands]
        if constants[1] is not None:
            value, extra = value.op.operands[0], extra + constants[1]
        elif constants[0] is not None:
            value, extra = value.op.operands[1], extra + constants[0]
        else:
            break
    return value, extra


TENSOR_CORE_OPS = ("mma", "ldmatrix", "async_copy", "async_commit", "async_wait", "wgmma", "wgmma_fence",
                   "wgmma_commit", "wgmma_wait", "fence_proxy_async")
SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}  # a descriptor's bits 62-63
# a wgmma's element types in its PTX name, by kind
WGMMA_TYPES = {MmaKind.F16: "f16", MmaKind.BF16: "bf16", MmaKind.TF32: "tf32", MmaKind.S8: "s8",
               MmaKind.E4M3: "e4m3", MmaKind.E5M2: "e5m2"}


class TensorCoreEmitter:
    """The tensor-core ops of one kernel, emitted through ``lowering`` (its builder, values,
    declarations and checks)."""

    def __init__(self, lowering):
        self.lw = lowering

    def mma(self, op: Op) -> None:
        """``mma.sync.aligned.m16n8kK.row.col`` through NVVM's intrinsic: the lane's elements
        packed into 32-bit registers, lowest element in the low bits."""
        kind = op.attrs.kind
        if self.lw.target.sm < 80:
            raise CompileError(f"mma {kind}: tensor-core dot needs sm_80 or later, compiling for {self.lw.target.arch}")
        b = self.lw.b
        values = [self.lw.value(v) for v in op.operands]
        a_n = kind.a_count
        a, bb, c = values[:a_n], values[a_n:a_n + a_n // 2], values[a_n + a_n // 2:]
        if kind is MmaKind.F16:
            words = lambda vs: [self._pack(vs[k:k + 2], ir.VectorType(vs[0].type, 2)) for k in range(0, len(vs), 2)]  # noqa: E731
            name = "llvm.nvvm.mma.m16n8k16.row.col.f32.f32"
        else:
            words = lambda vs: self._words(vs, op.operands[0].type.itemsize)  # noqa: E731
            name = {MmaKind.BF16: "llvm.nvvm.mma.m16n8k16.row.col.bf16", MmaKind.TF32: "llvm.nvvm.mma.m16n8k8.row.col.tf32",
                    MmaKind.S8: "llvm.nvvm.mma.m16n8k32.row.col.s8"}[kind]
        args = words(a) + words(bb) + c
        result = ir.LiteralStructType([c[0].type] * 4)
        out = b.call(self.lw.declare(name, result, [v.type for v in args]), args)
        for k, r in enumerate(op.results):
            self.lw.values[r] = b.extract_value(out, k)

    def _pack(self, values, ty: ir.VectorType) -> ir.Value:
        vector = ir.Constant(ty, None)
        for k, v in enumerate(values):
            vector = self.lw.b.insert_element(vector, v, ir.Constant(I32, k))
        return vector

    def ldmatrix(self, op: Op) -> None:
        """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16`` through NVVM's intrinsic;
        an offset whose 16-byte row leaves the array reads row 0 instead, checked (every lane
        must execute it, so there is no branch around it)."""
        b = self.lw.b
        count, dtype = op.attrs.count, op.attrs.dtype
        idx = self.lw.value(op.operands[0])
        if self.lw.memory.checked(op):
            last = b.add(idx, ir.Constant(I64, 16 // dtype.itemsize - 1))
            size = ir.Constant(I64, self.lw.graph.shared_arrays()[op.attrs.buffer].attrs.count)
            ok = b.and_(b.icmp_unsigned("<", idx, size), b.icmp_unsigned("<", last, size))
            self.lw.check(op, ok, STATUS_LOAD_OOB, b.select(b.icmp_unsigned("<", idx, size), last, idx))
            idx = b.select(ok, idx, ir.Constant(I64, 0))
        trans = ".trans" if op.attrs.order is MatrixOrder.TRANS else ""
        name = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{trans}.b16"
        pointer = self.lw.memory.element(op, idx)
        result = I32 if count == 1 else ir.LiteralStructType([I32] * count)
        out = b.call(self.lw.declare(name, result, [pointer.type]), [pointer])
        words = [out] if count == 1 else [b.extract_value(out, k) for k in range(count)]
        per = 4 // dtype.itemsize
        element = memory_type(dtype)
        values = []
        for word in words:
            if per == 1:
                values.append(b.bitcast(word, element))
                continue
            vector = b.bitcast(word, ir.VectorType(element, per))
            values.extend(b.extract_element(vector, ir.Constant(I32, k)) for k in range(per))
        for r, v in zip(op.results, values):
            self.lw.values[r] = v

    def async_copy(self, op: Op) -> None:
        """``cp.async.{cg,ca}.shared.global`` with a source size (the rest zero-filled) through
        NVVM's intrinsic; checked, a copy whose read leaves the buffer reads nothing."""
        b = self.lw.b
        dst, src, valid = (self.lw.value(v) for v in op.operands)
        nbytes, dtype = op.attrs.bytes, op.attrs.dtype
        if self.lw.memory.checked(op):
            elements = b.udiv(valid, ir.Constant(I64, dtype.itemsize))
            last = b.sub(b.add(src, elements), ir.Constant(I64, 1))
            inside = b.and_(b.icmp_unsigned("<", src, self.lw.memory.count(op)), b.icmp_unsigned("<", last, self.lw.memory.count(op)))
            ok = b.or_(b.icmp_unsigned("==", valid, ir.Constant(I64, 0)), inside)
            self.lw.check(op, ok, STATUS_LOAD_OOB, b.select(b.icmp_unsigned("<", src, self.lw.memory.count(op)), last, src))
            valid = b.select(ok, valid, ir.Constant(I64, 0))
            src = b.select(ok, src, ir.Constant(I64, 0))
        target = b.gep(self.lw.shared_ptrs[op.attrs.shared], [dst], inbounds=True)
        source = b.gep(self.lw.pointers[op.attrs.buffer], [src], source_etype=memory_type(dtype), inbounds=True)
        cache = "cg" if nbytes == 16 else "ca"  # .cg (L2 only) takes 16 bytes alone
        fn = self.lw.declare(f"llvm.nvvm.cp.async.{cache}.shared.global.{nbytes}.s", VOID,
                          [target.type, source.type, I32])
        b.call(fn, [target, source, b.trunc(valid, I32)])

    def async_commit(self, op: Op) -> None:
        self.lw.call("llvm.nvvm.cp.async.commit.group", [], ty=VOID)

    def async_wait(self, op: Op) -> None:
        b = self.lw.b
        b.call(self.lw.declare("llvm.nvvm.cp.async.wait.group", VOID, [I32]), [ir.Constant(I32, op.attrs.pending)])

    # -- warpgroups (sm_90a) ------------------------------------------------------------
    def _asm(self, text: str, result, args: list, constraints: str) -> ir.Value:
        ty = ir.FunctionType(result, [a.type for a in args])
        return self.lw.b.call(ir.InlineAsm(ty, text, constraints, side_effect=True), args)

    def _descriptor(self, name: str, at, swizzle: int, major: Major, chunk: int) -> ir.Value:
        """The matrix descriptor of the operand staged from element ``at`` (a graph value) of the
        array ``name``.  Shared addresses are under 2**18, so the start is 32-bit arithmetic,
        and a constant added to ``at`` (a k-step's, a block's) is added to the descriptor's
        start field: the ops of one dot share the rest."""
        b = self.lw.b
        itemsize = self.lw.graph.shared_arrays()[name].attrs.dtype.itemsize
        base, extra = _peel(at)
        if extra * itemsize % 16:  # (a start is 16-byte aligned; so are its parts where the lowering split it)
            base, extra = at, 0
        address = b.add(b.trunc(b.ptrtoint(self.lw.shared_ptrs[name], I64), I32),
                        b.mul(b.trunc(self.lw.value(base), I32), ir.Constant(I32, itemsize)))
        leading = chunk * itemsize if major is Major.MN else 16
        low = (leading >> 4) << 16 | extra * itemsize >> 4
        start = b.add(b.lshr(address, ir.Constant(I32, 4)), ir.Constant(I32, low))
        high = (8 * swizzle >> 4) | SWIZZLE_MODE[swizzle] << 30
        return b.or_(b.zext(start, I64), ir.Constant(I64, high << 32))

    def _words(self, values: list, itemsize: int) -> list:
        """Fragment elements of ``itemsize`` bytes packed into 32-bit registers, the lowest
        element in the low bits."""
        per = 4 // itemsize
        if per == 1:
            return [self.lw.b.bitcast(v, I32) for v in values]
        return [self.lw.b.bitcast(self._pack(values[k:k + per], ir.VectorType(values[0].type, per)), I32)
                for k in range(0, len(values), per)]

    def wgmma(self, op: Op) -> None:
        """``wgmma.mma_async.sync.aligned.m64nNkK`` as inline PTX: the accumulators tied in and
        out (the registers the hardware updates in place)."""
        lw, attrs_ = self.lw, op.attrs
        kind, n = attrs_.kind, attrs_.n
        if not lw.target.capabilities.wgmma:
            raise CompileError(f"wgmma {kind}: warpgroup tensor cores need sm_90a, compiling for {lw.target.arch}")
        values = [lw.value(v) for v in op.operands]
        count = n // 2
        accs = values[-count:]
        if attrs_.a_swizzle:
            a_args = [self._descriptor(attrs_.a_shared, op.operands[0], attrs_.a_swizzle, Major.K, attrs_.a_chunk)]
        else:
            a_args = self._words(values[:kind.a_count], op.operands[0].type.itemsize)
        b_at = op.operands[-count - 1]  # (B's offset comes just before the accumulators)
        b_desc = self._descriptor(attrs_.b_shared, b_at, attrs_.b_swizzle, attrs_.b_major, attrs_.b_chunk)
        reg = "r" if kind is MmaKind.S8 else "f"
        args = a_args + [b_desc, ir.Constant(I32, 1)] + accs
        first = count
        a_text = f"${first}" if attrs_.a_swizzle else "{" + ", ".join(f"${first + i}" for i in range(len(a_args))) + "}"
        after = first + len(a_args)
        if kind.transposes:
            trans_a = ", 0" if attrs_.a_swizzle else ""
            scales = f", 1, 1{trans_a}, {int(attrs_.b_major is Major.MN)}"
        elif kind is MmaKind.S8:
            scales = ""
        else:
            scales = ", 1, 1"
        t = WGMMA_TYPES[kind]
        name = f"wgmma.mma_async.sync.aligned.m64n{n}k{kind.k}.{kind.accumulator.replace('i32', 's32')}.{t}.{t}"
        d_text = "{" + ", ".join(f"${i}" for i in range(count)) + "}"
        text = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${after + 1}, 0;\n"
                f"{name} {d_text}, {a_text}, ${after}, p{scales};\n}}")
        a_constraint = "l" if attrs_.a_swizzle else ",".join("r" * len(a_args))
        constraints = ",".join([f"={reg}"] * count + [a_constraint, "l", "r"] + [str(i) for i in range(count)])
        out = self._asm(text, ir.LiteralStructType([accs[0].type] * count), args, constraints)
        for k, r in enumerate(op.results):
            lw.values[r] = lw.b.extract_value(out, k)

    def wgmma_wait(self, op: Op) -> None:
        """``wgmma.wait_group``, the accumulators tied through it (nothing reads them before)."""
        lw = self.lw
        values = [lw.value(v) for v in op.operands]
        text = f"wgmma.wait_group.sync.aligned {op.attrs.pending};"
        if not values:
            self._asm(text, VOID, [], "")
            return
        reg = "r" if isinstance(values[0].type, ir.IntType) else "f"
        count = len(values)
        out = self._asm(text, ir.LiteralStructType([values[0].type] * count), values,
                        ",".join([f"={reg}"] * count + [str(i) for i in range(count)]))
        for k, r in enumerate(op.results):
            lw.values[r] = lw.b.extract_value(out, k)

    def wgmma_fence(self, op: Op) -> None:
        self._asm("wgmma.fence.sync.aligned;", VOID, [], "~{memory}")

    def wgmma_commit(self, op: Op) -> None:
        self._asm("wgmma.commit_group.sync.aligned;", VOID, [], "~{memory}")

    def fence_proxy_async(self, op: Op) -> None:
        self._asm("fence.proxy.async.shared::cta;", VOID, [], "~{memory}")
