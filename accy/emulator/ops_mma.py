"""Handlers for the tensor-core data path: ``mma.sync`` (see :mod:`.mma` for the forms,
fragments and arithmetic), ``ldmatrix``/``stmatrix``, and ``cp.async`` with
``cp.async.commit_group``/``wait_group``/``wait_all`` (see :mod:`.async_copy`).

``mma``, ``ldmatrix`` and ``stmatrix`` are warp-collective: each is a block of its own
where the scheduler gathers the warp's lanes (as for ``shfl.sync``); the ``cp.async``
family is per thread."""

from __future__ import annotations

from . import memory
from .compiler import Mods, Unsupported, handler
from .mma import execute_mma, matrix_load, matrix_store, mma_form
from .numerics import BOOL, F32, I32, U32, U64
from .ops_arith import Spec, nops
from .ops_control import _warp_prepare
from .ops_mem import address
from .parser import Imm, Not, Reg, Vec

_SPACES = {"shared": "shared", "shared::cta": "shared"}


def register_items(E, op, count: int, what: str, ins) -> list:
    items = list(op.items) if isinstance(op, Vec) else [op]
    if len(items) != count:
        raise E.error(f"{ins.form}: {what} needs {count} register{'s' if count > 1 else ''}, found {len(items)}")
    return items


@handler("mma")
class Mma:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if rest[:2] != ["sync", "aligned"] or len(rest) < 5:
            raise Unsupported("mma needs .sync.aligned, a shape and the layouts")
        shape, layouts, tail = rest[2], rest[3:5], rest[5:]
        if layouts != ["row", "col"]:
            raise Unsupported(f"mma layouts .{'.'.join(layouts)} (only .row.col)")
        sat = bool(tail) and tail[0] == "satfinite"
        tail = tail[1:] if sat else tail
        form = mma_form(shape, *tail, sat) if len(tail) == 4 else None
        if form is None:
            raise Unsupported(f"{m.form()} (the emulator runs m16n8k16 and m16n8k8 with f16/bf16 and f32 "
                              f"accumulators, m16n8k8 tf32, and m16n8k16/m16n8k32 s8/u8)")
        m.rest = []
        return Spec(form=form)

    @staticmethod
    def emit(E, ins, s):
        d, a, b, c = nops(E, ins, 4)
        form = s.form
        out = F32 if form.is_float else I32
        dests = register_items(E, d, form.c.regs, "D", ins)
        regs = [[E.src(x, U32) for x in register_items(E, a, form.a.regs, "A", ins)],
                [E.src(x, U32) for x in register_items(E, b, form.b.regs, "B", ins)],
                [E.src(x, out) for x in register_items(E, c, form.c.regs, "C", ins)]]
        t = E.tmp()
        tuples = ", ".join(f"({', '.join(r)},)" for r in regs)
        E.line(f"{t} = {E.const(execute_mma, 'mma')}(T, ids, {E.const(form, 'form')}, {E.site('mma', 0, '')}, "
               f"{E.mask}, {tuples})")
        for k, item in enumerate(dests):
            E.dst(item, out, f"{t}[{k}]", scalar=False)

    prepare = _warp_prepare(lambda ins, s: None)


def _matrix_spec(m: Mods):
    rest = list(m.rest)
    if rest[:3] != ["sync", "aligned", "m8n8"] or len(rest) < 5:
        raise Unsupported(f"{m.opcode} needs .sync.aligned.m8n8")
    num = rest[3]
    if num not in ("x1", "x2", "x4"):
        raise Unsupported(f"{m.opcode} .{num}")
    tail = rest[4:]
    trans = bool(tail) and tail[0] == "trans"
    tail = tail[1:] if trans else tail
    space = "generic"
    if tail and tail[0] in _SPACES:
        space, tail = _SPACES[tail[0]], tail[1:]
    if tail != ["b16"]:
        raise Unsupported(f"{m.form()} (only .b16 elements)")
    m.rest = []
    return Spec(num=int(num[1]), trans=trans, space=space)


@handler("ldmatrix")
class Ldmatrix:
    kind = "sync"
    parse = staticmethod(_matrix_spec)

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dests = register_items(E, d, s.num, "the destination", ins)
        addr = address(E, a, s.space)
        t = E.tmp()
        E.line(f"{t} = {E.const(matrix_load, 'ldm')}(T, ids, {E.site('ld', 16, 'shared')}, {E.mask}, {addr}, "
               f"{s.num}, {s.trans}, {s.space == 'generic'})")
        for k, item in enumerate(dests):
            E.dst(item, U32, f"{t}[{k}]", scalar=False)

    prepare = _warp_prepare(lambda ins, s: None)


@handler("stmatrix")
class Stmatrix:
    kind = "sync"
    parse = staticmethod(_matrix_spec)

    @staticmethod
    def emit(E, ins, s):
        a, r = nops(E, ins, 2)
        values = [E.src(x, U32) for x in register_items(E, r, s.num, "the source", ins)]
        addr = address(E, a, s.space)
        E.line(f"{E.const(matrix_store, 'stm')}(T, ids, {E.site('st', 16, 'shared')}, {E.mask}, {addr}, "
               f"({', '.join(values)},), {s.trans}, {s.space == 'generic'})")

    prepare = _warp_prepare(lambda ins, s: None)


@handler("cp")
class CpAsync:
    """``cp.async.{ca,cg}.shared{::cta}.global`` and its group instructions."""

    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if len(rest) < 2 or rest[0] != "async" or rest[1] in ("bulk", "mbarrier"):
            raise Unsupported(f"{m.form()} (of the cp family the emulator runs cp.async to shared memory "
                              f"and its groups)")
        if rest[1] in ("commit_group", "wait_group", "wait_all") and len(rest) == 2:
            m.rest = []
            return Spec(op=rest[1])
        if rest[1] not in ("ca", "cg") or len(rest) < 4 or rest[2] not in _SPACES or rest[3] != "global":
            raise Unsupported(f"{m.form()}")
        hints = rest[4:]
        for h in hints:
            if h != "L2::cache_hint" and h not in ("L2::64B", "L2::128B", "L2::256B"):
                raise Unsupported(f"{m.form()}: .{h}")
        m.rest = []
        return Spec(op="copy", cache=rest[1], policy="L2::cache_hint" in hints)

    @staticmethod
    def emit(E, ins, s):
        if s.op == "commit_group":
            nops(E, ins, 0)
            E.line(f"T.copies.commit(T, ids, {E.mask})")
            return
        if s.op in ("wait_group", "wait_all"):
            pending = "None"
            if s.op == "wait_group":
                (n,) = nops(E, ins, 1)
                if not isinstance(n, Imm) or n.kind != "int" or n.value < 0:
                    raise E.error("cp.async.wait_group takes a constant group count")
                pending = str(n.value)
            else:
                nops(E, ins, 0)
            E.line(f"T.copies.wait(T, ids, {E.mask}, {pending})")
            return
        ops = list(ins.operands)
        if s.policy:
            if len(ops) < 4:
                raise E.error(f"{ins.form} needs a cache-policy operand")
            E.src(ops.pop(), U64)  # a hint: read, then ignored
        if len(ops) not in (3, 4):
            raise E.error(f"{ins.form} takes [dst], [src], cp-size and an optional src-size or ignore-src")
        dst, src, size = ops[:3]
        if not isinstance(size, Imm) or size.kind != "int" or size.value not in (4, 8, 16):
            raise E.error(f"{ins.form}: cp-size must be the constant 4, 8 or 16")
        cp_size = size.value
        if s.cache == "cg" and cp_size != 16:
            raise E.error("cp.async.cg copies 16 bytes (cp-size 16)")
        src_size = ignore = "None"
        if len(ops) == 4:
            x = ops[3]
            if isinstance(x, Not) or (isinstance(x, Reg) and E.fc.reg_width[E.reg(x)] == 0):
                ignore = E.src(x, BOOL, array=True)
            else:
                src_size = E.src(x, U32, array=True)
        d_addr = address(E, dst, "shared")
        s_addr = address(E, src, "global")
        dsite = E.const(memory.Site(ins.line, ins.text, "cp.async", cp_size, "shared"), "site")
        ssite = E.const(memory.Site(ins.line, ins.text, "ld", cp_size, "global"), "site")
        E.line(f"T.copies.issue(T, ids, {E.mask}, {dsite}, {ssite}, {d_addr}, {s_addr}, {cp_size}, "
               f"{src_size}, {ignore})")

