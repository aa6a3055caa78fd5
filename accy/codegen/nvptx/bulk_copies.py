"""The tensor memory accelerator's ops (sm_90a) as inline PTX: ``mbarrier`` objects in shared
memory, ``cp.async.bulk.tensor`` copies that complete on them, and the ready flag of a tensor
map (the maps and flags are kernel parameters, :meth:`NvptxLowering._bind_params`)."""

from __future__ import annotations

from llvmlite import ir

from ...dsl.ir import Op
from ..llvm_types import I32, I64, VOID

BULK_COPY_OPS = ("mbarrier_init", "mbarrier_arrive", "mbarrier_wait", "tma_load", "tma_ready", "setmaxnreg")
MAP_TYPE = ir.ArrayType(ir.IntType(8), 128)  # a CUtensorMap: 128 opaque bytes
MAP_ALIGN = 64


class BulkCopyEmitter:
    """The bulk-copy ops of one kernel, emitted through ``lowering``."""

    def __init__(self, lowering):
        self.lw = lowering

    def _asm(self, text: str, args: list, constraints: str) -> None:
        ty = ir.FunctionType(VOID, [a.type for a in args])
        self.lw.b.call(ir.InlineAsm(ty, text, constraints, side_effect=True), args)

    def _shared(self, name: str, at) -> ir.Value:
        """The 32-bit shared-window address of element ``at`` (a graph value) of array ``name``."""
        b = self.lw.b
        itemsize = self.lw.graph.shared_arrays()[name].attrs.dtype.itemsize
        base = b.trunc(b.ptrtoint(self.lw.shared_ptrs[name], I64), I32)
        return b.add(base, b.mul(b.trunc(self.lw.value(at), I32), ir.Constant(I32, itemsize)))

    def mbarrier_init(self, op: Op) -> None:
        # the init is a generic-proxy write; the fence makes it visible to the copies' completion
        self._asm("mbarrier.init.shared::cta.b64 [$0], $1;\n\tfence.mbarrier_init.release.cluster;",
                  [self._shared(op.attrs.shared, op.operands[0]), ir.Constant(I32, op.attrs.count)],
                  "r,r,~{memory}")

    def mbarrier_arrive(self, op: Op) -> None:
        tx = self.lw.b.trunc(self.lw.value(op.operands[1]), I32)
        self._asm("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [$0], $1;\n\t}",
                  [self._shared(op.attrs.shared, op.operands[0]), tx], "r,r,~{memory}")

    def mbarrier_wait(self, op: Op) -> None:
        """``try_wait.parity`` until the phase of that parity has completed."""
        parity = self.lw.b.trunc(self.lw.value(op.operands[1]), I32)
        self._asm("{\n\t.reg .pred done;\n\twait_${:uid}:\n\t"
                  "mbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n\t"
                  "@!done bra wait_${:uid};\n\t}",
                  [self._shared(op.attrs.shared, op.operands[0]), parity], "r,r,~{memory}")

    def tma_load(self, op: Op) -> None:
        """``cp.async.bulk.tensor``: the box at the coordinates (innermost first in PTX, signed
        32-bit) from the map, completing its bytes on the mbarrier."""
        b, a = self.lw.b, op.attrs
        dst = self._shared(a.shared, op.operands[0])
        bar = self._shared(a.barrier, op.operands[1])
        coords = [b.trunc(self.lw.value(v), I32) for v in reversed(op.operands[2:])]
        tensor_map = b.ptrtoint(self.lw.maps[a.map][0], I64)
        n = len(coords)
        places = ", ".join(f"${2 + k}" for k in range(n))
        text = (f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                f"[$0], [$1, {{{places}}}], [${2 + n}];")
        self._asm(text, [dst, tensor_map, *coords, bar], ",".join(["r", "l"] + ["r"] * n + ["r", "~{memory}"]))

    def tma_ready(self, op: Op) -> None:
        flag = self.lw.maps[op.attrs][1]
        self.lw.values[op.result] = self.lw.b.icmp_unsigned("!=", flag, ir.Constant(I32, 0))

    def setmaxnreg(self, op: Op) -> None:
        """The instruction, with the thread's index tied through it: what is computed from the
        index after it stays after it (LLVM would hoist it into the registers before)."""
        value = self.lw.value(op.operands[0])
        ty = ir.FunctionType(value.type, [value.type])
        self.lw.values[op.result] = self.lw.b.call(ir.InlineAsm(
            ty, f"setmaxnreg.{op.attrs.action.value}.sync.aligned.u32 {op.attrs.count};", "=l,0,~{memory}",
            side_effect=True), [value])
