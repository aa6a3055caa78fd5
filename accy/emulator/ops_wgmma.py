"""Handlers for the warpgroup MMA family (sm_90a): ``wgmma.fence``, ``wgmma.commit_group``,
``wgmma.wait_group`` and ``wgmma.mma_async`` (see :mod:`.wgmma` for the forms, fragments,
descriptors and arithmetic, :mod:`.wgmma_async` for the asynchrony and its checks).

Each is a block of its own where the scheduler gathers the warpgroup's 128 threads (a
"group" sync, as warp collectives gather a warp)."""

from __future__ import annotations

from . import wgmma_async
from .compiler import Mods, SyncInfo, Unsupported, handler
from .numerics import BOOL, F32, I32, U32, U64
from .ops_arith import Spec, nops
from .ops_mma import register_items
from .parser import Imm, Reg, Vec
from .wgmma import wgmma_form

_OPS = ("fence", "commit_group", "wait_group", "mma_async")


def _group_prepare(fc, blk, ins, s, b):
    blk.info = SyncInfo("group", ins.line, ins.text)


def _immediate(E, op, allowed, what: str, form: str) -> int:
    if not isinstance(op, Imm) or op.kind != "int" or op.value not in allowed:
        raise E.error(f"{form}: {what} must be one of the constants {', '.join(map(str, allowed))}")
    return op.value


@handler("wgmma")
class Wgmma:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if not rest or rest[0] not in _OPS or rest[1:3] != ["sync", "aligned"]:
            raise Unsupported(f"{m.form()} (the emulator runs wgmma.fence, commit_group, wait_group and mma_async, "
                              f"each .sync.aligned; not .sp)")
        op, tail = rest[0], rest[3:]
        m.rest = []
        if op != "mma_async":
            if tail:
                raise Unsupported(f"{m.form()}")
            return Spec(op=op)
        sat = len(tail) == 5 and tail[1] == "satfinite"
        if sat:
            tail = tail[:1] + tail[2:]
        form = wgmma_form(*tail, sat) if len(tail) == 4 else None
        if form is None:
            raise Unsupported(f"{m.form()} (no such wgmma.mma_async form: m64nNk16 f16/bf16 with f32 or (f16) f16 "
                              f"accumulators, m64nNk8 tf32, m64nNk32 e4m3/e5m2 with f32 or f16, m64nNk32 s8/u8 with "
                              f"s32, N a multiple of 8 up to 256 (for s8/u8: 8, 16, 24, or a multiple of 16))")
        return Spec(op=op, form=form)

    @staticmethod
    def emit(E, ins, s):
        if s.op == "mma_async":
            _emit_mma(E, ins, s.form)
            return
        site = E.site("wgmma", 0, "")
        if s.op == "wait_group":
            (n,) = nops(E, ins, 1)
            if not isinstance(n, Imm) or n.kind != "int" or n.value < 0:
                raise E.error("wgmma.wait_group takes a constant group count")
            E.line(f"{E.const(wgmma_async.wait, 'wwait')}(T, ids, {site}, {E.mask}, {n.value})")
            return
        nops(E, ins, 0)
        fn = wgmma_async.commit if s.op == "commit_group" else wgmma_async.fence
        E.line(f"{E.const(fn, 'wg')}(T, ids, {site}, {E.mask})")

    prepare = staticmethod(_group_prepare)

    @staticmethod
    def accumulators(fc, ins) -> set:
        """The registers an instruction writes asynchronously (a wgmma.mma_async's D)."""
        if ins.mods[:1] != ("mma_async",) or not ins.operands or not isinstance(ins.operands[0], Vec):
            return set()
        return {fc.reg_index(x.name, ins) for x in ins.operands[0].items if isinstance(x, Reg)}


def _emit_mma(E, ins, form):
    ops = list(ins.operands)
    text = form.text
    registers_a = len(ops) > 1 and isinstance(ops[1], Vec)
    trans = (1 if registers_a else 2) if form.transposable else 0
    scales = 2 if form.scalable else 0
    if len(ops) != 4 + scales + trans:
        args = "d, a, b-desc, scale-d" if registers_a else "d, a-desc, b-desc, scale-d"
        extra = (", imm-scale-a, imm-scale-b" if scales else "") + (
            (", imm-trans-b" if registers_a else ", imm-trans-a, imm-trans-b") if trans else "")
        raise E.error(f"{text} takes {args}{extra} ({4 + scales + trans} operands), found {len(ops)}")
    d, a, b, scale_d = ops[:4]
    imms = ops[4:]
    scale_a, scale_b = ((_immediate(E, x, (1, -1), "imm-scale", text) for x in imms[:2]) if scales else (1, 1))
    flips = [_immediate(E, x, (0, 1), "imm-trans", text) for x in imms[scales:]]
    trans_a, trans_b = (0, flips[0]) if registers_a and flips else (tuple(flips) if flips else (0, 0))
    out = {"f32": F32, "s32": I32, "f16": U32}[form.dtype]
    dests = register_items(E, d, form.d.regs, "D", ins)
    c = [E.src(x, out) for x in dests]
    if registers_a:
        a_expr = "(" + "".join(f"{E.src(x, U32)}, " for x in register_items(E, a, form.a.regs, "A", ins)) + ")"
    else:
        a_expr = E.src(a, U64)
    fid = E.fc.mc.fn_index[E.fc.fn.name]
    regs = tuple(E.fc.reg_index(x.name, ins) for x in dests)
    sd = E.src(scale_d, BOOL)
    t = E.tmp()
    E.line(f"{t} = {E.const(wgmma_async.mma_async, 'wgmma')}(T, ids, {E.const(form, 'form')}, "
           f"{E.site('ld', 16, 'shared')}, {E.mask}, ({''.join(x + ', ' for x in c)}), {a_expr}, {E.src(b, U64)}, "
           f"{sd}, ({scale_a}, {scale_b}, {trans_a}, {trans_b}), {fid}, {regs})")
    for k, item in enumerate(dests):
        E.dst(item, out, f"{t}[{k}]", scalar=False)
