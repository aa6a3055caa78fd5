"""Handlers for control flow and synchronisation: ``bra``, ``brx.idx``, ``ret``, ``exit``,
``trap``, ``call``, barriers (``bar``/``barrier``), and the warp-synchronous
instructions (``shfl.sync``, ``vote``, ``redux.sync``, ``match.sync``,
``bar.warp.sync``, ``elect.sync``, ``activemask``)."""

from __future__ import annotations

import numpy as np

from .async_copy import barrier_reached
from .wgmma_async import barrier_reached as wgmma_barrier
from .async_proxy import barrier_reached as proxy_barrier
from .compiler import DONE, EXIT, CallInfo, Mods, SyncInfo, Unsupported, handler
from .errors import PtxError
from .numerics import BOOL, U32, U64
from .ops_arith import Spec, nops
from .parser import Imm, Pair, Paren, Reg, Sym


def _cond(E, ins, taken: int, fallthrough: int) -> list[str]:
    """Lines ending a block on a (possibly guarded) jump to ``taken``."""
    if ins.guard is None:
        return [f"return {taken}"]
    p = E.src(Reg(ins.guard[0]), BOOL)
    lines = []
    if ins.guard[1]:
        lines.append(f"p_ = ~{p}")
        p = "p_"
    lines += [f"c_ = count_nonzero({p})",
              f"if c_ == n_: return {taken}",
              f"if c_ == 0: return {fallthrough}",
              f"return ({p}, {taken}, {fallthrough})"]
    return lines


@handler("bra")
class Bra:
    terminator = True

    @staticmethod
    def parse(m: Mods):
        m.take(("uni",))
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):  # typing pass only
        if ins.guard:
            E.src(Reg(ins.guard[0]), BOOL)

    @staticmethod
    def terminate(E, ins, s, fc, b):
        (target,) = nops(E, ins, 1)
        return _cond(E, ins, fc.target(target, ins), b + 1)


@handler("brx")
class Brx:
    terminator = True

    @staticmethod
    def parse(m: Mods):
        if m.take(("idx",)) is None:
            raise Unsupported("brx needs .idx")
        m.take(("uni",))
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        E.src(ins.operands[0], U32)

    @staticmethod
    def terminate(E, ins, s, fc, b):
        index, table = nops(E, ins, 2)
        if ins.guard is not None:
            raise E.error("a guarded brx.idx is not supported")
        if not isinstance(table, Sym) or table.name not in fc.fn.branch_targets:
            raise E.error("brx.idx needs a .branchtargets label")
        targets = np.array([fc.target(Sym(t), ins) for t in fc.fn.branch_targets[table.name]], np.int64)
        tbl = E.const(targets, "tbl")
        site = E.site("brx", 0, "")
        return [f"return branch_index(T, ids, {site}, {tbl}, {E.src(index, U32, array=True)})"]


@handler("ret", "exit")
class Ret:
    terminator = True

    @staticmethod
    def parse(m: Mods):
        m.take(("uni",))
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        if ins.guard:
            E.src(Reg(ins.guard[0]), BOOL)

    @staticmethod
    def terminate(E, ins, s, fc, b):
        nops(E, ins, 0)
        return _cond(E, ins, DONE if ins.opcode == "ret" else EXIT, b + 1)


@handler("trap", "brkpt")
class Trap:
    terminator = True

    @staticmethod
    def parse(m: Mods):
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        if ins.guard:
            E.src(Reg(ins.guard[0]), BOOL)

    @staticmethod
    def terminate(E, ins, s, fc, b):
        site = E.site("trap", 0, "")
        mask = "None"
        lines = []
        if ins.guard is not None:
            p = E.src(Reg(ins.guard[0]), BOOL)
            lines.append(f"g_ = {'~' if ins.guard[1] else ''}{p}")
            mask = "g_"
        lines.append(f"trap(T, ids, {mask}, {site}, {ins.opcode!r})")
        lines.append(f"return {b + 1}")
        return lines


# -- calls --------------------------------------------------------------------------------------------


@handler("call")
class Call:
    kind = "call"

    @staticmethod
    def parse(m: Mods):
        m.take(("uni",))
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):  # typing pass: the call reads and writes its parameter registers as bytes
        pass

    @staticmethod
    def prepare(fc, blk, ins, s, b):
        ops = list(ins.operands)
        rets: list = []
        if ops and isinstance(ops[0], Paren):
            rets = list(ops.pop(0).items)
        if not ops:
            raise PtxError("call without a function", line=ins.line, source=ins.text)
        callee = ops.pop(0)
        args: list = []
        if ops and isinstance(ops[0], Paren):
            args = list(ops.pop(0).items)

        def param_reg(op):
            if isinstance(op, Sym) and op.name in fc.param_regs:
                return fc.param_regs[op.name]
            raise PtxError(f"call arguments must be .param variables, found {op}", line=ins.line, source=ins.text)

        info = CallInfo(ins.line, ins.text, None, None, [param_reg(a) for a in args],
                         [param_reg(r) for r in rets], None)
        if isinstance(callee, Sym):
            if callee.name not in fc.mc.fn_index:
                raise PtxError(f"call of an unknown function {callee.name}", line=ins.line, source=ins.text)
            info.callee = callee.name
        elif isinstance(callee, Reg):
            info.target = fc.small_function("calltarget", ins, lambda E: E.src(callee, U64, array=True))
        else:
            raise PtxError("bad call target", line=ins.line, source=ins.text)
        if ins.guard is not None:
            g, neg = ins.guard
            info.guard = fc.small_function("callguard", ins,
                                           lambda E: f"{'~' if neg else ''}{E.src(Reg(g), BOOL, array=True)}")
        blk.info = info
        blk.full = blk.sel = "call"


# -- barriers -------------------------------------------------------------------------------------------


@handler("bar", "barrier")
class Bar:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        m.take(("cta",))
        what = m.take(("sync", "arrive", "red", "warp"))
        s = Spec(what=what)
        m.take(("aligned",))
        if what == "red":
            s["op"] = m.take(("popc", "and", "or"))
            s["t"] = m.type(("u32", "pred"))
        elif what == "warp":
            if m.take(("sync",)) is None:
                raise Unsupported("bar.warp needs .sync")
        m.done()
        if what is None:
            if m.opcode == "bar" and not m.all:
                raise Unsupported("bar needs .sync, .arrive or .red")
            raise Unsupported(f"{m.form()}")
        return s

    @staticmethod
    def emit(E, ins, s):
        if s.what == "red":
            ops = ins.operands
            d = ops[0]
            c = ops[-1]
            pred = E.src(c, BOOL, array=True)
            value = f"bar_red(T, ids, {s.op!r}, {pred})"
            E.dst(d, U32 if s.op == "popc" else BOOL, value, scalar=False)
        elif s.what == "warp":
            E.src(ins.operands[0], U32)
        else:
            for op in ins.operands:
                E.src(op, U32)
        if s.what in ("sync", "red"):  # the released threads' landed cp.async copies become visible to all
            E.line(f"{E.const(barrier_reached, 'abar')}(T, ids)")
            E.line(f"{E.const(wgmma_barrier, 'wbar')}(T, ids)")  # in-flight wgmmas' reads last into the next phase
            E.line(f"{E.const(proxy_barrier, 'pbar')}(T, ids)")  # the asynchronous proxy's clocks join

    @staticmethod
    def prepare(fc, blk, ins, s, b):
        if s.what == "warp":
            (mask,) = ins.operands
            blk.info = SyncInfo("warp", ins.line, ins.text,
                                group=fc.small_function("mask", ins, lambda E: E.src(mask, U32, array=True)),
                                full_mask=_full(mask))
            return
        ops = ins.operands
        if s.what == "red":
            ops = ops[1:-1]
        if not ops or len(ops) > 2:
            raise PtxError(f"{ins.form} takes a barrier number and an optional thread count",
                           line=ins.line, source=ins.text)
        info = SyncInfo("bar", ins.line, ins.text, arrive=s.what == "arrive")
        info.group = fc.small_function("barid", ins, lambda E: E.src(ops[0], U32, array=True))
        if len(ops) == 2:
            info.count = fc.small_function("barcount", ins, lambda E: E.src(ops[1], U32, array=True))
        blk.info = info


def _full(op) -> bool:
    """Whether a member-mask operand is the constant naming every lane (or absent)."""
    return op is None or (isinstance(op, Imm) and op.kind == "int" and op.value & 0xFFFFFFFF == 0xFFFFFFFF)


def _warp_prepare(mask_op):
    def prepare(fc, blk, ins, s, b):
        op = mask_op(ins, s)
        if op is None:
            group = fc.small_function("mask", ins, lambda E: "bc(np.uint32(0xFFFFFFFF), n_)")
        else:
            group = fc.small_function("mask", ins, lambda E: E.src(op, U32, array=True))
        blk.info = SyncInfo("warp", ins.line, ins.text, group=group, full_mask=_full(op))

    return staticmethod(prepare)


@handler("shfl")
class Shfl:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        sync = m.take(("sync",))
        if sync is None:
            raise Unsupported("shfl without .sync (removed for sm_70 and later)")
        s = Spec(mode=m.take(("up", "down", "bfly", "idx")), t=m.type(("b32",)))
        m.done()
        if not s.mode:
            raise Unsupported("shfl needs a mode")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c, _mask = nops(E, ins, 5)
        dst, p = (d.first, d.second) if isinstance(d, Pair) else (d, None)
        t = E.tmp()
        E.line(f"{t} = shfl(T, ids, {s.mode!r}, {E.src(a, U32)}, {E.src(b, U32)}, {E.src(c, U32)})")
        E.dst(dst, U32, f"{t}[0]", scalar=False)
        if p is not None:
            E.dst(p, BOOL, f"{t}[1]", scalar=False)

    prepare = _warp_prepare(lambda ins, s: ins.operands[4])


@handler("vote")
class Vote:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        sync = m.take(("sync",)) is not None
        s = Spec(sync=sync, mode=m.take(("all", "any", "uni", "ballot")))
        s["t"] = m.type(("pred", "b32"))
        m.done()
        if not s.mode or (s.mode == "ballot") != (s.t == "b32"):
            raise Unsupported("vote mode and type do not match")
        return s

    @staticmethod
    def emit(E, ins, s):
        ops = ins.operands
        n = 3 if s.sync else 2
        nops(E, ins, n)
        d, a = ops[0], ops[1]
        mask = E.src(ops[2], U32) if s.sync else "np.uint32(0xFFFFFFFF)"
        value = f"vote(T, ids, {s.mode!r}, {E.src(a, BOOL)}, {mask})"
        E.dst(d, U32 if s.mode == "ballot" else BOOL, value, scalar=False)

    prepare = _warp_prepare(lambda ins, s: ins.operands[2] if s.sync else None)


@handler("redux")
class Redux:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        if m.take(("sync",)) is None:
            raise Unsupported("redux needs .sync")
        s = Spec(op=m.take(("add", "min", "max", "and", "or", "xor")), t=m.type(("u32", "s32", "b32")))
        m.done()
        if not s.op or (s.op in ("and", "or", "xor")) != (s.t == "b32"):
            raise Unsupported("redux operation and type do not match")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, mask = nops(E, ins, 3)
        E.dst(d, U32, f"redux(T, ids, {s.op!r}, {E.src(a, U32)}, {E.src(mask, U32)}, {s.t == 's32'})",
              scalar=False)

    prepare = _warp_prepare(lambda ins, s: ins.operands[2])


@handler("match")
class Match:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        s = Spec(mode=m.take(("any", "all")))
        if m.take(("sync",)) is None or not s.mode:
            raise Unsupported("match needs .any/.all and .sync")
        s["t"] = m.type(("b32", "b64"))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a, mask = nops(E, ins, 3)
        dst, p = (d.first, d.second) if isinstance(d, Pair) else (d, None)
        t = E.tmp()
        E.line(f"{t} = match(T, ids, {s.mode!r}, {E.src(a, U32 if s.t == 'b32' else U64)}, {E.src(mask, U32)})")
        E.dst(dst, U32, f"{t}[0]", scalar=False)
        if p is not None:
            E.dst(p, BOOL, f"{t}[1]", scalar=False)

    prepare = _warp_prepare(lambda ins, s: ins.operands[2])


@handler("elect")
class Elect:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        if m.take(("sync",)) is None:
            raise Unsupported("elect needs .sync")
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        d, mask = nops(E, ins, 2)
        dst, p = (d.first, d.second) if isinstance(d, Pair) else (d, None)
        t = E.tmp()
        E.line(f"{t} = elect(T, ids, {E.src(mask, U32)})")
        E.dst(dst, U32, f"{t}[0]", scalar=False)
        if p is not None:
            E.dst(p, BOOL, f"{t}[1]", scalar=False)

    prepare = _warp_prepare(lambda ins, s: ins.operands[1])


@handler("activemask")
class ActiveMask:
    @staticmethod
    def parse(m: Mods):
        m.type(("b32",))
        m.done()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        (d,) = nops(E, ins, 1)
        # the threads executing this block are the active ones
        E.dst(d, U32, "activemask(T, ids)", scalar=False)
