"""Handlers for Hopper's asynchronous copy machinery: ``mbarrier``, ``cp.async.bulk`` (tensor
and plain copies, bulk groups), ``cp.async.mbarrier.arrive``, ``fence.proxy.async``,
``fence.proxy.tensormap::generic``, ``fence.mbarrier_init``, ``tensormap.replace``,
``prefetch.tensormap`` and ``setmaxnreg`` (see :mod:`.mbarrier`, :mod:`.tma` and
:mod:`.async_proxy` for the semantics and the checks)."""

from __future__ import annotations

import numpy as np

from . import ops_mem, ops_mma, tma
from .async_proxy import proxy_of
from .compiler import Mods, SyncInfo, Unsupported, handler
from .errors import PtxError
from .memory import PARAM_WINDOW, Site, thread_text
from .numerics import BOOL, I32, I64, U32, U64
from .ops_arith import Spec
from .ops_mem import address
from .parser import Addr, Imm, Reg, Sym, TensorRef
from .tensor_map import LAYOUT
from .wgmma_async import warpgroup_lanes

SHARED = ("shared", "shared::cta")
SEMS = ("release", "relaxed", "acquire")
SCOPES = ("cta", "cluster")


def _where(T, ids, mask, n):
    sel = np.arange(n) if mask is None else np.flatnonzero(np.broadcast_to(np.asarray(mask, bool), (n,)))
    return sel, (sel if ids is None else ids[sel])


def _n(T, ids):
    return T.n if ids is None else len(ids)


def _arr(x, n, dtype=U64):
    return np.broadcast_to(np.asarray(x).astype(dtype), (n,))


# -- what the generated code calls: mbarrier ----------------------------------------------------------------


def mb_init(T, ids, mask, site, addr, count, generic):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if len(sel):
        p = proxy_of(T)
        p.bars.init(T, where, site, p.bars.flat(T, where, site, _arr(addr, n)[sel], generic), _arr(count, n, I64)[sel])


def mb_inval(T, ids, mask, site, addr, generic):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if len(sel):
        p = proxy_of(T)
        p.bars.inval(T, where, site, p.bars.flat(T, where, site, _arr(addr, n)[sel], generic))


def mb_update(T, ids, mask, site, addr, op, count, tx, generic, release):
    """arrive / arrive.expect_tx / expect_tx / complete_tx for each thread in turn; returns states."""
    n = _n(T, ids)
    out = np.zeros(n, U64)
    sel, where = _where(T, ids, mask, n)
    if not len(sel):
        return out
    p = proxy_of(T)
    flat = p.bars.flat(T, where, site, _arr(addr, n)[sel], generic)
    counts = _arr(count, n, I64)[sel]
    txs = _arr(tx, n, I64)[sel]
    for j, (k, f) in enumerate(zip(where, flat)):
        b = p.bars.get(T, k, f, site)
        if op in ("expect_tx", "arrive_expect_tx"):
            _tx_range(T, k, site, int(txs[j]))
            p.bars.expect_tx(T, k, b, int(txs[j]), site)
        if op == "complete_tx":
            _tx_range(T, k, site, int(txs[j]))
            p.bars.complete_tx(T, k, b, int(txs[j]), site)
        if op in ("arrive", "arrive_expect_tx"):
            out[sel[j]] = p.bars.arrive(T, k, b, int(counts[j]), site, release)
    return out


def _tx_range(T, k, site, tx):
    if not 0 <= tx <= (1 << 20) - 1:
        raise PtxError(f"{site.text.split()[0]} with txCount {tx}: it must lie in 0 .. {(1 << 20) - 1}",
                       line=site.line, source=site.text, thread=thread_text(T, k))


def _phases(T, where, site, flat, args, parity):
    p = proxy_of(T)
    out = []
    for k, f, a in zip(where, flat, args):
        b = p.bars.get(T, k, f, site)
        ph = p.bars.waited_phase(b, int(a), parity)
        if ph == -2:
            raise PtxError(f"{site.text.split()[0]}: the state operand 0x{int(a):x} is not a state mbarrier.arrive "
                           f"returned", line=site.line, source=site.text, thread=thread_text(T, k))
        out.append((b, ph))
    return out


def mb_ready(T, ids, guard, site, addr, arg, parity, generic):
    """Per thread ``ids``: whether its wait can return (its phase completed, or it is guarded off)."""
    n = len(ids)
    ready = np.ones(n, bool)
    on = np.ones(n, bool) if guard is None else np.broadcast_to(np.asarray(guard, bool), (n,))
    sel = np.flatnonzero(on)
    if not len(sel):
        return ready
    where = ids[sel]
    p = proxy_of(T)
    flat = p.bars.flat(T, where, site, _arr(addr, n)[sel], generic)
    for j, (b, ph) in enumerate(_phases(T, where, site, flat, _arr(arg, n)[sel], parity)):
        ready[sel[j]] = b.phase > ph
    return ready


def mb_explain(T, ids, site, addr, generic):
    p = proxy_of(T)
    n = len(ids)
    flat = p.bars.flat(T, ids, site, _arr(addr, n), generic)
    seen = []
    for k, f in zip(ids, flat):
        b = p.bars.objects.get(int(f))
        text = b.describe(T) if b is not None else "an mbarrier that is not initialised"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen[:3])


def mb_waited(T, ids, mask, site, addr, arg, parity, generic, acquire=True):
    """The wait returns true for the released threads: each acquires the clocks of its phase
    (unless the wait is .relaxed)."""
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if len(sel):
        p = proxy_of(T)
        flat = p.bars.flat(T, where, site, _arr(addr, n)[sel], generic)
        for k, (b, ph) in zip(where, _phases(T, where, site, flat, _arr(arg, n)[sel], parity)):
            got = b.done.get(ph) or (b.done[max(b.done)] if b.done else None)
            if got is not None and ph >= 0 and acquire:
                p.clocks.acquire(np.array([T.bt[k]]), *got)
        if T.prof is not None and hasattr(T.prof, "barrier_wait"):  # the waiting warps' clocks join the phase's
            T.prof.barrier_wait(T, where, np.asarray(flat, U64), line=site.line)
    return np.ones(n, bool)


def cp_mbar_arrive(T, ids, mask, site, addr, noinc, generic):
    """``cp.async.mbarrier.arrive{.noinc}``: the thread's cp.async copies complete, then an arrive-on
    (without .noinc the pending count is raised by one first, so the count is unchanged)."""
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if not len(sel):
        return
    T.copies.complete_threads(T, where)
    p = proxy_of(T)
    flat = p.bars.flat(T, where, site, _arr(addr, n)[sel], generic)
    for k, f in zip(where, flat):
        b = p.bars.get(T, k, f, site)
        if noinc:
            p.bars.arrive(T, k, b, 1, site, True)
        else:
            p.bars.release(T, k, b)


def pending_count(state):
    return (np.asarray(state, U64) & np.uint64((1 << 20) - 1)).astype(U32)


# -- what the generated code calls: copies, fences, maps -------------------------------------------------------


def bulk_tensor(T, ids, mask, site, gsite, mapaddr, coords, smem, bar, rank, load):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    maps = _arr(mapaddr, n)[sel]
    sm = _arr(smem, n)[sel].view(I64)
    bars = _arr(bar, n)[sel] if load else None
    cs = [_arr(c, n, I32)[sel] for c in coords]
    for j, k in enumerate(where):
        c = [int(x[j]) for x in cs]
        if load:
            flat = proxy_of(T).bars.flat(T, np.array([k]), site, bars[j:j + 1], False)[0]
            tma.tensor_load(T, k, site, gsite, int(maps[j]), c, int(sm[j]), int(flat), rank)
        else:
            tma.tensor_store(T, k, site, gsite, int(maps[j]), c, int(sm[j]), rank)


def bulk_plain(T, ids, mask, site, gsite, dst, src, size, bar, load):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    d, s, z = _arr(dst, n)[sel].view(I64), _arr(src, n)[sel].view(I64), _arr(size, n, I64)[sel]
    for j, k in enumerate(where):
        if load:
            flat = proxy_of(T).bars.flat(T, np.array([k]), site, _arr(bar, n)[sel][j:j + 1], False)[0]
            tma.bulk_load(T, k, site, gsite, int(d[j]), int(s[j]), int(z[j]), int(flat))
        else:
            tma.bulk_store(T, k, site, gsite, int(d[j]), int(s[j]), int(z[j]))


def bulk_group(T, ids, mask, op, pending):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if len(sel):
        p = proxy_of(T)
        if op == "commit":
            p.commit(T, where)
        else:
            p.wait(T, where, pending)


def proxy_fence(T, ids, mask):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    if len(sel):
        p = proxy_of(T)
        p.clocks.fence(T.bt[where])


def replace_field(T, ids, mask, site, space, addr, field, ordinal, value):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    a = _arr(addr, n)[sel].view(I64)
    v = _arr(value, n)[sel]
    o = None if ordinal is None else _arr(ordinal, n, I64)[sel]
    for j, k in enumerate(where):
        tma.replace(T, k, site, space, int(a[j]), field, None if o is None else int(o[j]), int(v[j]))


def prefetch_map(T, ids, mask, site, addr):
    n = _n(T, ids)
    sel, where = _where(T, ids, mask, n)
    a = _arr(addr, n)[sel]
    for j, k in enumerate(where):
        tma.read_map(T, k, site, int(a[j]))


def set_maxnreg(T, ids, site, mask, count, inc):
    _, where, _ = warpgroup_lanes(T, ids, mask, site, "setmaxnreg")
    p = T.proxy
    for w in np.unique(T.wkey[where.reshape(-1)]) if where.size else ():
        old = p.registers.get(int(w))
        if old is not None and (count < old if inc else count > old):
            raise PtxError(f"setmaxnreg.{'inc' if inc else 'dec'} to {count} registers from {old}: .inc may only "
                           f"raise the count, .dec only lower it", line=site.line, source=site.text)
        p.registers[int(w)] = count
        if T.prof is not None:  # a profiled launch keeps each warp's count: (block, warp) -> registers
            slot, warp = divmod(int(w), int(T.nwarps))
            k = int(np.flatnonzero(T.cta == slot)[0])
            block = tuple(int(a[k]) for a in T.ctaid)
            T.prof.__dict__.setdefault("warp_registers", {})[(block, warp)] = count


# -- the handlers -----------------------------------------------------------------------------------------------


def _space(m: Mods, what: str):
    """(generic?) from the state-space modifier: .shared{::cta} or none (a generic address)."""
    sp = m.take(SHARED + ("shared::cluster",))
    return sp is None


def _addr(E, op, generic: bool):
    return address(E, op, "generic" if generic else "shared")


def _site(E, kind="mbarrier", width=8, space="shared"):
    ins = E.ins
    return E.const(Site(ins.line, ins.text, kind, width, space, loc=E.fc.mc.module.source_line(ins.loc)), "site")


@handler("mbarrier")
class MBarrierOp:
    OPS = ("init", "inval", "arrive", "expect_tx", "complete_tx", "test_wait", "try_wait", "pending_count")

    @staticmethod
    def parse(m: Mods):
        op = m.take(MBarrierOp.OPS)
        if op is None:
            raise Unsupported(f"{m.form()} (mbarrier.init, inval, arrive{{.expect_tx}}, expect_tx, complete_tx, "
                              f"test_wait, try_wait, pending_count; not arrive_drop or .noComplete)")
        s = Spec(op=op)
        if op == "arrive" and m.take(("expect_tx",)):
            s["op"] = "arrive_expect_tx"
        s["parity"] = m.take(("parity",)) is not None
        s["sem"] = m.take(SEMS)
        m.take(SCOPES)
        s["generic"] = _space(m, op)
        m.type(("b64",))
        m.done()
        if s.parity and op not in ("test_wait", "try_wait"):
            raise Unsupported(f"{m.form()}: .parity belongs to test_wait and try_wait")
        if op in ("test_wait", "try_wait"):
            s["kind"] = "sync"
        return s

    @staticmethod
    def emit(E, ins, s):
        ops = list(ins.operands)
        site = _site(E)
        g = s.generic
        if s.op == "init":
            a, c = _ops(E, ins, ops, 2)
            E.line(f"{E.const(mb_init, 'mb')}(T, ids, {E.mask}, {site}, {_addr(E, a, g)}, {E.src(c, U32)}, {g})")
        elif s.op == "inval":
            (a,) = _ops(E, ins, ops, 1)
            E.line(f"{E.const(mb_inval, 'mb')}(T, ids, {E.mask}, {site}, {_addr(E, a, g)}, {g})")
        elif s.op == "pending_count":
            d, st = _ops(E, ins, ops, 2)
            E.dst(d, U32, f"{E.const(pending_count, 'mb')}({E.src(st, U64)})", scalar=False)
        elif s.op in ("arrive", "arrive_expect_tx"):
            if s.op == "arrive":
                if len(ops) not in (2, 3):
                    raise E.error(f"{ins.form} takes state, [addr] and an optional count")
                count = E.src(ops[2], U32) if len(ops) == 3 else "1"
                tx = "0"
            else:
                _ops(E, ins, ops, 3)
                count, tx = "1", E.src(ops[2], U32)
            t = E.tmp()
            E.line(f"{t} = {E.const(mb_update, 'mb')}(T, ids, {E.mask}, {site}, {_addr(E, ops[1], g)}, {s.op!r}, "
                   f"{count}, {tx}, {g}, {s.sem != 'relaxed'})")
            E.dst(ops[0], U64, t, scalar=False)
        elif s.op in ("expect_tx", "complete_tx"):
            a, tx = _ops(E, ins, ops, 2)
            E.line(f"{E.const(mb_update, 'mb')}(T, ids, {E.mask}, {site}, {_addr(E, a, g)}, {s.op!r}, 1, "
                   f"{E.src(tx, U32)}, {g}, False)")
        else:  # test_wait / try_wait: the released threads' result
            if len(ops) not in (3, 4) or (s.op == "test_wait" and len(ops) != 3):
                raise E.error(f"{ins.form} takes p, [addr], {'parity' if s.parity else 'state'}"
                              f"{', and an optional suspend-time hint' if s.op == 'try_wait' else ''}")
            if len(ops) == 4:
                E.src(ops[3], U32)
            arg = E.src(ops[2], U32 if s.parity else U64)
            t = E.tmp()
            E.line(f"{t} = {E.const(mb_waited, 'mb')}(T, ids, {E.mask}, {site}, {_addr(E, ops[1], g)}, {arg}, "
                   f"{s.parity}, {g}, {s.sem != 'relaxed'})")
            E.dst(ops[0], BOOL, t, scalar=False)

    @staticmethod
    def prepare(fc, blk, ins, s, b):
        ops = ins.operands
        site = None

        def ready(E):
            nonlocal site
            site = _site(E)
            guard = "None"
            if ins.guard is not None:
                guard = f"{'~' if ins.guard[1] else ''}{E.src(Reg(ins.guard[0]), BOOL)}"
            arg = E.src(ops[2], U32 if s.parity else U64, array=True)
            return (f"{E.const(mb_ready, 'mb')}(T, ids, {guard}, {site}, {_addr(E, ops[1], s.generic)}, {arg}, "
                    f"{s.parity}, {s.generic})")

        def explain(E):
            return f"{E.const(mb_explain, 'mb')}(T, ids, {_site(E)}, {_addr(E, ops[1], s.generic)}, {s.generic})"

        blk.info = SyncInfo("mbar", ins.line, ins.text, group=fc.small_function("mbready", ins, ready),
                            explain=fc.small_function("mbexplain", ins, explain))


def _ops(E, ins, ops, n):
    if len(ops) != n:
        raise E.error(f"{ins.form} takes {n} operands, found {len(ops)}")
    return ops


_CP = ops_mma.CpAsync  # registered first (imported above): this module takes its opcode over


@handler("cp")
class CpBulk:
    """``cp.async.bulk...`` and ``cp.async.mbarrier.arrive`` here; the rest of cp.async in :mod:`.ops_mma`."""

    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if rest[:2] == ["async", "mbarrier"]:
            m.rest = rest[2:]
            if m.take(("arrive",)) is None:
                raise Unsupported(m.form())
            s = Spec(op="mbar_arrive", noinc=m.take(("noinc",)) is not None, generic=_space(m, "arrive"))
            m.type(("b64",))
            m.done()
            return s
        if rest[:2] != ["async", "bulk"]:
            return Spec(old=_CP.parse(m))
        m.rest = rest[2:]
        if m.take(("commit_group",)):
            m.done()
            return Spec(op="commit")
        if m.take(("wait_group",)):
            m.take(("read",))
            m.done()
            return Spec(op="wait")
        tensor = m.take(("tensor",)) is not None
        rank = m.take(tuple(f"{d}d" for d in range(1, 6)))
        if tensor and rank is None:
            raise Unsupported(f"{m.form()}: a tensor copy names its rank (.1d .. .5d)")
        for bad in ("multicast::cluster", "im2col", "im2col_no_offs", "tile::gather4", "tile::scatter4"):
            if m.take((bad,)):
                raise Unsupported(f"{m.form()}: .{bad} is not emulated (a cluster of one CTA, tile mode)")
        m.take(("tile",))
        hint = m.take(("L2::cache_hint",)) is not None
        if m.rest[:2] in (["shared::cluster", "global"], ["shared::cta", "global"]):
            m.rest = m.rest[2:]
            if m.take(("mbarrier::complete_tx::bytes",)) is None:
                raise Unsupported(f"{m.form()}: a load into shared memory signals an mbarrier "
                                  f"(.mbarrier::complete_tx::bytes)")
            load = True
        elif m.rest[:2] == ["global", "shared::cta"]:
            m.rest = m.rest[2:]
            if m.take(("bulk_group",)) is None:
                raise Unsupported(f"{m.form()}: a store completes through a bulk group (.bulk_group)")
            load = False
        else:
            raise Unsupported(f"{m.form()} (the emulator runs cp.async.bulk{{.tensor}} global -> shared::cluster "
                              f"with complete_tx and shared::cta -> global with bulk_group)")
        m.done()
        return Spec(op="tensor" if tensor else "plain", rank=int(rank[0]) if rank else 0, load=load, hint=hint)

    @staticmethod
    def emit(E, ins, s):
        if s.old is not None:
            return _CP.emit(E, ins, s.old)
        ops = list(ins.operands)
        fn = E.const
        if s.op == "mbar_arrive":
            (a,) = _ops(E, ins, ops, 1)
            E.line(f"{fn(cp_mbar_arrive, 'cpb')}(T, ids, {E.mask}, {_site(E)}, {_addr(E, a, s.generic)}, {s.noinc}, "
                   f"{s.generic})")
            return
        if s.op == "commit":
            _ops(E, ins, ops, 0)
            E.line(f"{fn(bulk_group, 'cpb')}(T, ids, {E.mask}, 'commit', 0)")
            return
        if s.op == "wait":
            (k,) = _ops(E, ins, ops, 1)
            if not isinstance(k, Imm) or k.kind != "int" or k.value < 0:
                raise E.error("cp.async.bulk.wait_group takes a constant group count")
            E.line(f"{fn(bulk_group, 'cpb')}(T, ids, {E.mask}, 'wait', {k.value})")
            return
        if s.hint:
            if not ops:
                raise E.error(f"{ins.form} needs a cache-policy operand")
            E.src(ops.pop(), U64)
        site = _site(E, "cp.async.bulk", 16, "shared")
        gsite = E.const(Site(ins.line, ins.text, "ld" if s.load else "st", 16, "global",
                             loc=E.fc.mc.module.source_line(ins.loc)), "site")
        if s.op == "tensor":
            if s.load:
                smem, ref, bar = _ops(E, ins, ops, 3)
            else:
                ref, smem = _ops(E, ins, ops, 2)
                bar = None
            if not isinstance(ref, TensorRef) or len(ref.coords.items) != s.rank:
                raise E.error(f"{ins.form} takes [tensorMap, {{{s.rank} coordinates}}]")
            coords = "(" + "".join(f"{E.src(c, I32)}, " for c in ref.coords.items) + ")"
            bar_expr = address(E, bar, "shared") if bar is not None else "None"
            E.line(f"{fn(bulk_tensor, 'cpb')}(T, ids, {E.mask}, {site}, {gsite}, {_map_address(E, ref.base)}, "
                   f"{coords}, {address(E, smem, 'shared')}, {bar_expr}, {s.rank}, {s.load})")
            return
        if s.load:
            dst, src, size, bar = _ops(E, ins, ops, 4)
            E.line(f"{fn(bulk_plain, 'cpb')}(T, ids, {E.mask}, {site}, {gsite}, {address(E, dst, 'shared')}, "
                   f"{address(E, src, 'global')}, {E.src(size, U32)}, {address(E, bar, 'shared')}, True)")
        else:
            dst, src, size = _ops(E, ins, ops, 3)
            E.line(f"{fn(bulk_plain, 'cpb')}(T, ids, {E.mask}, {site}, {gsite}, {address(E, dst, 'global')}, "
                   f"{address(E, src, 'shared')}, {E.src(size, U32)}, None, False)")


def _map_address(E, base: Addr):
    """The generic address of a tensor map operand (a register, or a kernel parameter's name)."""
    if isinstance(base.base, Sym) and base.base.name in E.fc.kparam_offsets:
        off = E.fc.kparam_offsets[base.base.name][0] + base.offset
        return E.const(np.uint64(PARAM_WINDOW + off), "k")
    return address(E, base, "generic")


_FENCE = _PREFETCH = ops_mem.NoOp


@handler("fence")
class Fence:
    """``fence.proxy.async{.space}`` orders the thread's generic-proxy accesses before its later
    asynchronous-proxy ones (:mod:`.async_proxy`); ``fence.proxy.tensormap::generic`` and
    ``fence.mbarrier_init`` have no effect on the emulator (its map writes and inits are
    visible at once); other fences as before."""

    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if rest[:2] == ["proxy", "async"]:
            m.rest = rest[2:]
            m.take(("shared::cta", "shared::cluster", "global", "shared"))
            m.done()
            return Spec(op="async")
        if rest[:2] == ["proxy", "tensormap::generic"]:
            m.rest = rest[2:]
            if m.take(("release", "acquire")) is None or m.take(("cta", "gpu", "sys", "cluster")) is None:
                raise Unsupported(f"{m.form()}: .release or .acquire, and a scope")
            m.done()
            return Spec(op="tensormap")
        if rest[:1] == ["mbarrier_init"]:
            m.rest = rest[1:]
            m.take(("release",))
            m.take(("cluster",))
            m.done()
            return Spec(op="none")
        return Spec(old=_FENCE.parse(m))

    @staticmethod
    def emit(E, ins, s):
        if s.old is not None:
            return _FENCE.emit(E, ins, s.old)
        if s.op == "async":
            E.line(f"{E.const(proxy_fence, 'fp')}(T, ids, {E.mask})")
        for op in ins.operands:  # the acquire form's [addr], size
            if isinstance(op, Addr):
                address(E, op, "generic")
            else:
                E.src(op, U32)


@handler("prefetch")
class Prefetch:
    @staticmethod
    def parse(m: Mods):
        if "tensormap" in m.rest:
            m.rest = [x for x in m.rest if x not in ("tensormap", "param", "const", "global")]
            m.done()
            return Spec(op="tensormap")
        return Spec(old=_PREFETCH.parse(m))

    @staticmethod
    def emit(E, ins, s):
        if s.old is not None:
            return _PREFETCH.emit(E, ins, s.old)
        (a,) = _ops(E, ins, list(ins.operands), 1)
        if not isinstance(a, Addr):
            raise E.error("prefetch.tensormap takes [addr]")
        E.line(f"{E.const(prefetch_map, 'pf')}(T, ids, {E.mask}, {_site(E, 'prefetch', 1, 'global')}, "
               f"{_map_address(E, a)})")


@handler("tensormap")
class TensormapReplace:
    @staticmethod
    def parse(m: Mods):
        rest = list(m.rest)
        if rest[:2] != ["replace", "tile"] or len(rest) != 6 or rest[4] != "b1024":
            raise Unsupported(f"{m.form()} (tensormap.replace.tile.<field>.<space>.b1024.<type>)")
        field, space, t = rest[2], rest[3], rest[5]
        if field not in LAYOUT:
            raise Unsupported(f"{m.form()}: the field .{field} is not in the emulated driver's map ({', '.join(LAYOUT)})")
        if space not in ("global", "shared::cta"):
            raise Unsupported(f"{m.form()}: the map is in .global or .shared::cta")
        if t not in ("b32", "b64"):
            raise Unsupported(f"{m.form()}: type .{t}")
        m.rest = []
        return Spec(field=field, space="shared" if space == "shared::cta" else "global", t=t,
                    ordinal=LAYOUT[field][2] > 1)

    @staticmethod
    def emit(E, ins, s):
        ops = list(ins.operands)
        _ops(E, ins, ops, 3 if s.ordinal else 2)
        ordinal = "None"
        if s.ordinal:
            if not isinstance(ops[1], Imm) or ops[1].kind != "int":
                raise E.error(f"{ins.form}: the ordinal is a constant")
            ordinal = str(ops[1].value)
        value = E.src(ops[-1], U64 if s.t == "b64" else U32)
        E.line(f"{E.const(replace_field, 'tm')}(T, ids, {E.mask}, {_site(E, 'tensormap', 8, s.space)}, "
               f"{s.space!r}, {address(E, ops[0], s.space)}, {s.field!r}, {ordinal}, {value})")


@handler("setmaxnreg")
class SetMaxNReg:
    kind = "sync"

    @staticmethod
    def parse(m: Mods):
        inc = m.take(("inc", "dec"))
        if inc is None or m.take(("sync",)) is None or m.take(("aligned",)) is None:
            raise Unsupported(f"{m.form()} (setmaxnreg.{{inc,dec}}.sync.aligned.u32)")
        m.type(("u32",))
        m.done()
        return Spec(inc=inc == "inc")

    @staticmethod
    def emit(E, ins, s):
        (n,) = _ops(E, ins, list(ins.operands), 1)
        if not isinstance(n, Imm) or n.kind != "int" or not (24 <= n.value <= 256 and n.value % 8 == 0):
            raise E.error(f"{ins.form}: the register count must be a constant multiple of 8 in 24 .. 256")
        E.line(f"{E.const(set_maxnreg, 'mr')}(T, ids, {_site(E, 'setmaxnreg', 0, '')}, {E.mask}, {n.value}, {s.inc})")

    @staticmethod
    def prepare(fc, blk, ins, s, b):
        blk.info = SyncInfo("group", ins.line, ins.text)

