"""Handlers for data movement: ``mov``, ``ld``/``ldu``, ``st``, ``cvta``, ``isspacep``,
``atom``, ``red`` and the cache hints (no-ops on the emulator)."""

from __future__ import annotations

import numpy as np

from . import memory
from .compiler import UINT_OF, Expr, Mods, Unsupported, _NAME, dtype_of, handler
from .numerics import (BOOL, F16, F32, F64, I32, I64, U16, U32, U64, add_bf16, add_f16, canon_f16, canon_f32,
                       fmax, fmin, ftz32)
from .ops_arith import Spec, nops
from .parser import Addr, Imm, Reg, Sink, Special, Sym, Vec
from .profile import counted_address
from .runtime import Broadcast, packed2

SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared", "shared::cluster": "shared",
          "local": "local", "const": "const", "param": "param", "param::entry": "param", "param::func": "param"}
SEMANTICS = ("weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "mmio", "sc")
SCOPES = ("cta", "gpu", "sys", "cluster")
CACHE = ("ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc")
ALL_TYPES = ("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64", "b128",
             "f16", "f16x2", "bf16", "bf16x2", "f32", "f64", "pred")
WINDOWS = {"global": 0, "const": memory.CONST_WINDOW, "shared": memory.SHARED_WINDOW, "local": memory.LOCAL_WINDOW,
           "param": memory.PARAM_WINDOW}


def mem_dtype(t: str):
    if t == "b128":
        raise Unsupported("128-bit accesses are not supported")
    return np.dtype(dtype_of(t))


def address(E, op, space: str) -> Expr:
    """A uint64 array of the addresses ``op`` (an :class:`Addr`) stands for in ``space``."""
    if not isinstance(op, Addr):
        raise E.error("expected an address [..]")
    off = op.offset & (2**64 - 1)
    base = op.base
    if isinstance(base, Reg):
        idx = E.fc.reg_index(base.name, E.ins)
        width = E.fc.reg_width[idx]
        r = E.src(base, U64 if width == 8 else U32)
        if width != 8:
            r = f"{r}.astype(U64)"
        return Expr(f"({r} + np.uint64({off}))" if off else r, False, U64)
    if base is None:
        return Expr(f"{E.const(Broadcast(np.uint64(off)), 'bc')}.get(n_)", False, U64)
    if E.typing:
        return Expr("x", False, U64)
    kind, value = E.fc.symbol(base.name, E.ins)
    if kind == "const":
        v = value + off
        if space == "generic":
            v += _generic_window(E, base.name)
        return Expr(f"{E.const(Broadcast(np.uint64(v & (2**64 - 1))), 'bc')}.get(n_)", False, U64)
    if kind == "global":
        return Expr(f"bc(np.uint64(T.sym[{value!r}] + {off}), n_)", False, U64)
    if kind == "local":
        w = memory.LOCAL_WINDOW if space == "generic" else 0
        return Expr(f"bc(np.uint64(T.frame + {value + off + w}), n_)", False, U64)
    raise E.error(f"bad address {base.name}")


def _generic_window(E, name: str) -> int:
    mc = E.fc.mc
    if name in mc.shared_offsets or name in mc.dynamic_shared:
        return memory.SHARED_WINDOW
    if name in mc.const_offsets:
        return memory.CONST_WINDOW
    return 0


def _space(m: Mods):
    space = None
    for k in list(m.rest):
        if k in SPACES:
            space = SPACES[k]
            m.rest.remove(k)
            break
    return space or "generic"


def _common(m: Mods, allow_vec=True):
    sem = m.take(SEMANTICS)
    scope = m.take(SCOPES)
    space = _space(m)
    m.take_all(CACHE + ("unified", "aligned"))
    m.take_prefix(("L1::", "L2::", "level::"))
    vec = m.take(("v2", "v4", "v8")) if allow_vec else None
    return Spec(sem=sem, scope=scope, space=space, nvec=int(vec[1:]) if vec else 1)


def _param_target(E, op: Addr):
    """("kernel", byte offset) or ("reg", register index, byte offset) of a param address."""
    if not isinstance(op, Addr) or not isinstance(op.base, Sym):
        raise E.error("parameter accesses through a register address are not supported")
    name = op.base.name
    fc = E.fc
    if name in fc.kparam_offsets:
        return ("kernel", fc.kparam_offsets[name][0] + op.offset)
    if name in fc.param_regs:
        return ("reg", fc.param_regs[name], op.offset)
    raise E.error(f"unknown parameter {name}")


@handler("ld", "ldu")
class Ld:
    @staticmethod
    def parse(m: Mods):
        s = _common(m)
        s["t"] = m.type(ALL_TYPES)
        m.done()
        mem_dtype(s.t)
        return s

    @staticmethod
    def emit(E, ins, s):
        if len(ins.operands) not in (2, 3):
            raise E.error(f"{ins.form} takes 2 operands")
        d, a = ins.operands[:2]
        dt = mem_dtype(s.t)
        dests = list(d.items) if isinstance(d, Vec) else [d]
        if len(dests) != s.nvec:
            raise E.error(f"{ins.form} needs {s.nvec} destinations")
        if s.space == "param":
            target = _param_target(E, a)
            if target[0] == "kernel":
                value = f"kparam(T, {target[1]}, {_NAME[dt]}, {s.nvec})"
            else:
                value = f"pld({E.src_param(target[1])}, {target[2]}, {_NAME[dt]}, {s.nvec})"
            scalar = target[0] == "kernel"
            if s.nvec == 1:
                _write_loaded(E, dests[0], dt, value, scalar)
            else:
                t = E.tmp()
                E.line(f"{t} = {value}")
                for k, item in enumerate(dests):
                    _write_loaded(E, item, dt, f"{t}[{k}]" if scalar else f"{t}[:, {k}]", scalar)
            return
        addr = address(E, a, s.space)
        width = dt.itemsize * s.nvec
        site = E.site("ld", width, s.space)
        fn = memory.SPACE_LOADS[s.space].__name__
        if s.nvec == 1:
            load_dt = dt
            if isinstance(d, Reg) and not E.typing:
                S = E.fc.storage[E.fc.reg_index(d.name, ins)]
                if S is not None and S != BOOL and S.itemsize == dt.itemsize and s.t[0] in "bu":
                    load_dt = S  # bits are bits: load straight into the register's type
                elif S is not None and S != BOOL and S.itemsize == dt.itemsize and s.t[0] == "f" and S.kind != "f":
                    load_dt = S
            if E.typing:
                if s.t[0] in "fs":
                    E.dst(d, dt, "x")
                elif isinstance(d, Reg):
                    E.fc.defs[E.reg(d)].append(("M", ()))  # written, whatever its type
                return
            addr = counted_address(E, "load", s.space, width, addr)
            E.dst(d, load_dt, f"{fn}(T, ids, {site}, {addr}, {_NAME[load_dt]}, 1, {E.mask})", scalar=False)
            return
        addr = counted_address(E, "load", s.space, width, addr)
        t = E.tmp()
        E.line(f"{t} = {fn}(T, ids, {site}, {addr}, {_NAME[dt]}, {s.nvec}, {E.mask})")
        for k, item in enumerate(dests):
            if isinstance(item, Sink):
                continue
            E.dst(item, dt, f"{t}[:, {k}]", scalar=False)


def _write_loaded(E, op, dt, value, scalar):
    if isinstance(op, Sink):
        return
    E.dst(op, dt, value, scalar=scalar)


def _store_value(E, op, dt, array=True):
    """A stored value: its bits, read in the register's own type when the widths match
    (NaNs of lazily canonicalised registers made canonical: a store observes the bits)."""
    if E.typing:
        if dt.kind in "fi":
            E.src(op, dt)
        return "x", dt
    if isinstance(op, Reg):
        idx = E.fc.reg_index(op.name, E.ins)
        S = E.fc.storage[idx]
        if S is not None and S != BOOL and S.itemsize == dt.itemsize:
            return E.src_observed(op, S), S
    return E.src(op, dt, array=array), dt


@handler("st")
class St:
    @staticmethod
    def parse(m: Mods):
        s = _common(m)
        s["t"] = m.type(ALL_TYPES)
        m.done()
        mem_dtype(s.t)
        return s

    @staticmethod
    def emit(E, ins, s):
        if len(ins.operands) not in (2, 3):
            raise E.error(f"{ins.form} takes 2 operands")
        a, b = ins.operands[:2]
        dt = mem_dtype(s.t)
        items = list(b.items) if isinstance(b, Vec) else [b]
        if len(items) != s.nvec:
            raise E.error(f"{ins.form} needs {s.nvec} values")
        if s.nvec == 1:
            value, vdt = _store_value(E, items[0], dt)
        else:  # every element as the instruction's type (bits: views), so they stack as one type
            parts = [E.src_observed(it, dt) if isinstance(it, Reg) else E.src(it, dt) for it in items]
            value, vdt = f"np.stack(np.broadcast_arrays({', '.join(parts)}), axis=1)", dt
            if all(isinstance(it, Imm) for it in items):
                value = f"np.broadcast_to(np.array([{', '.join(parts)}]), (n_, {s.nvec}))"
        if s.space == "param":
            target = _param_target(E, a)
            if target[0] == "kernel":
                raise E.error("stores to kernel parameters are not supported")
            idx, off = target[1], target[2]
            E.dst_param(idx, f"pst({E.src_param(idx)}, {off}, {value}, {_NAME[vdt]}, {s.nvec})")
            return
        if E.typing:
            return
        addr = address(E, a, s.space)
        site = E.site("st", dt.itemsize * s.nvec, s.space)
        fn = memory.SPACE_STORES[s.space].__name__
        if s.nvec == 1 and not isinstance(items[0], Reg):
            value = f"bc({value}, n_)"
        addr = counted_address(E, "store", s.space, dt.itemsize * s.nvec, addr)
        E.line(f"{fn}(T, ids, {site}, {addr}, {value}, {_NAME[vdt]}, {s.nvec}, {E.mask})")


@handler("mov")
class Mov:
    @staticmethod
    def parse(m: Mods):
        s = Spec(t=m.type(ALL_TYPES))
        m.done()
        if s.t == "b128":
            raise Unsupported("mov.b128")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        t = s.t
        dt = np.dtype(dtype_of(t))
        if isinstance(d, Vec):  # unpack
            parts = [x for x in d.items]
            w = dt.itemsize // len(parts)
            pdt = UINT_OF[w]
            x = E.src(a, UINT_OF[dt.itemsize])
            for k, p in enumerate(parts):
                if isinstance(p, Sink):
                    continue
                E.dst(p, pdt, f"(({x} >> {_NAME[UINT_OF[dt.itemsize]]}.type({8 * w * k})).astype({_NAME[pdt]}))")
            return
        if isinstance(a, Vec):  # pack
            parts = list(a.items)
            w = dt.itemsize // len(parts)
            pdt = UINT_OF[w]
            wide = _NAME[UINT_OF[dt.itemsize]]
            terms = [f"(np.asarray({E.src(p, pdt)}).astype({wide}) << {wide}.type({8 * w * k}))"
                     for k, p in enumerate(parts)]
            E.dst(d, UINT_OF[dt.itemsize], " | ".join(terms))
            return
        if dt == BOOL:
            E.dst(d, BOOL, E.src(a, BOOL))
            return
        if isinstance(a, (Special, Sym)):
            E.dst(d, dt, E.src(a, dt))
            return
        # a plain move: use the destination's storage type, so only the source may need a view
        if E.typing:
            E.src(a, dt) if t[0] in "fs" else None
            if t[0] in "fs":
                E.dst(d, dt, "x", kind="C", sources=(a,))
            else:
                E.fc.defs[E.reg(d)].append(("C", (a,)))
            return
        S = E.fc.storage[E.reg(d)]
        use = S if (S is not None and S != BOOL and S.itemsize == dt.itemsize) else dt
        E.dst(d, use, E.src_copy(a, use, d), kind="C", sources=(a,))


@handler("cvta")
class Cvta:
    @staticmethod
    def parse(m: Mods):
        to = m.take(("to",)) is not None
        space = _space(m)
        s = Spec(to=to, space=space, t=m.type(("u32", "u64")))
        m.done()
        if space == "generic":
            raise Unsupported(f"cvta of the {space} space")
        return s

    @staticmethod
    def emit(E, ins, s):
        d, a = nops(E, ins, 2)
        dt = U64 if s.t == "u64" else U32
        if isinstance(a, Sym):
            x = E.symbol_value(a.name, dt)
        else:
            x = E.src(a, dt)
        w = WINDOWS[s.space]
        if w == 0:
            E.dst(d, dt, x)
            return
        w &= (2**64 - 1) if dt == U64 else 0xFFFFFFFF
        op = "np.subtract" if s.to else "np.add"
        E.dst(d, dt, f"{op}({x}, {_NAME[dt]}.type({w}), dtype={_NAME[dt]})")


@handler("isspacep")
class Isspacep:
    @staticmethod
    def parse(m: Mods):
        s = Spec(space=_space(m))
        m.done()
        return s

    @staticmethod
    def emit(E, ins, s):
        p, a = nops(E, ins, 2)
        x = E.src(a, U64)
        code = {"global": 0, "const": 1, "shared": 2, "local": 3, "param": 4}[s.space]
        E.dst(p, BOOL, f"(({x} >> np.uint64({memory.WINDOW_SHIFT})) == {code})")


@handler("prefetch", "prefetchu", "discard", "applypriority", "membar", "fence", "nanosleep", "griddepcontrol",
         "pmevent")
class NoOp:
    """Cache hints, fences and sleeps: no effect on an emulator that runs threads in lockstep
    and makes every store visible at once."""

    @staticmethod
    def parse(m: Mods):
        m.rest.clear()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        pass


@handler("createpolicy")
class CreatePolicy:
    @staticmethod
    def parse(m: Mods):
        m.rest.clear()
        return Spec()

    @staticmethod
    def emit(E, ins, s):
        E.dst(ins.operands[0], U64, "np.uint64(0)")


# -- atomics --------------------------------------------------------------------------------------------

ATOM_OPS = ("and", "or", "xor", "cas", "exch", "add", "inc", "dec", "min", "max")


def atom_dtype(t: str):
    return {"b16": U16, "b32": U32, "u32": U32, "s32": I32, "f32": F32, "b64": U64, "u64": U64, "s64": I64,
            "f64": F64, "f16": F16, "bf16": U16, "f16x2": U32, "bf16x2": U32}[t]


def _apply(op: str, t: str, space: str):
    """The read-modify-write function (old, b, c) -> new for an atomic."""
    if op == "exch":
        return lambda o, b, c: b
    if op == "cas":
        return lambda o, b, c: np.where(o == b, c, o)
    if op == "and":
        return lambda o, b, c: o & b
    if op == "or":
        return lambda o, b, c: o | b
    if op == "xor":
        return lambda o, b, c: o ^ b
    if op == "inc":
        return lambda o, b, c: np.where(o >= b, o.dtype.type(0), o + o.dtype.type(1))
    if op == "dec":
        return lambda o, b, c: np.where((o == 0) | (o > b), b, o - o.dtype.type(1))
    if op == "add":
        if t == "f32":
            if space == "global":  # global f32 atomics flush subnormals (the ISA says so)
                return lambda o, b, c: canon_f32(ftz32(ftz32(o) + ftz32(b)))
            return lambda o, b, c: canon_f32(o + b)
        if t == "f64":
            return lambda o, b, c: o + b
        if t == "f16":
            return lambda o, b, c: canon_f16(add_f16(o, b))
        if t == "bf16":
            return lambda o, b, c: add_bf16(o, b)
        if t == "f16x2":
            from .runtime import as_f16
            from .numerics import f16_bits
            return lambda o, b, c: packed2(lambda p, q: f16_bits(add_f16(as_f16(p), as_f16(q))), o, b)
        if t == "bf16x2":
            return lambda o, b, c: packed2(lambda p, q: add_bf16(p, q), o, b)
        return lambda o, b, c: o + b
    if op in ("min", "max"):
        if t in ("f32", "f64", "f16"):
            f = fmin if op == "min" else fmax
            return lambda o, b, c: f(o, b)
        if t == "bf16":
            from .numerics import bf16_to_f32, f32_to_bf16_bits
            f = fmin if op == "min" else fmax
            return lambda o, b, c: f32_to_bf16_bits(f(bf16_to_f32(o), bf16_to_f32(b)))
        return (lambda o, b, c: np.minimum(o, b)) if op == "min" else (lambda o, b, c: np.maximum(o, b))
    raise ValueError(op)


class _Applies:
    """Read-modify-write functions for the global and the shared space (they differ for f32 add)."""

    def __init__(self, op, t):
        self.g = _apply(op, t, "global")
        self.s = _apply(op, t, "shared")

    def __call__(self, o, b, c):
        return self.g(o, b, c)


@handler("atom", "red")
class Atom:
    @staticmethod
    def parse(m: Mods):
        s = _common(m, allow_vec=True)
        if s.nvec != 1:
            raise Unsupported("vector atomics")
        s["op"] = m.take(ATOM_OPS)
        s["noftz"] = m.take(("noftz",)) is not None
        m.take_prefix(("L2::",))
        s["t"] = m.type(("b16", "b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64", "f16", "f16x2", "bf16",
                         "bf16x2"))
        m.done()
        if not s.op:
            raise Unsupported("atomic without an operation")
        if s.space not in ("global", "shared", "generic"):
            raise Unsupported(f"atomics on the {s.space} space")
        if m.opcode == "red" and s.op in ("cas", "exch"):
            raise Unsupported(f"red.{s.op}")
        return s

    @staticmethod
    def emit(E, ins, s):
        ops = ins.operands
        red = ins.opcode == "red"
        want = (2 if red else 3) + (1 if s.op == "cas" else 0)
        if len(ops) not in (want, want + 1):
            raise E.error(f"{ins.form} takes {want} operands")
        if red:
            d, a, b = None, ops[0], ops[1]
            c = ops[2] if s.op == "cas" else None
        else:
            d, a, b = ops[0], ops[1], ops[2]
            c = ops[3] if s.op == "cas" else None
        dt = atom_dtype(s.t)
        x = E.src(b, dt, array=True)
        z = E.src(c, dt, array=True) if c is not None else "None"
        if E.typing:
            if d is not None:
                E.dst(d, dt, "x")
            return
        addr = address(E, a, s.space)
        site = E.site("red" if red else "atom", dt.itemsize, s.space)
        addr = counted_address(E, "atomic", s.space, dt.itemsize, addr)
        apply = E.const(_Applies(s.op, s.t), "rmw")
        call = f"atomic(T, ids, {site}, {s.space!r}, {s.op!r}, {addr}, {x}, {z}, {_NAME[dt]}, {apply}, {E.mask})"
        if d is None:
            E.line(call)
        else:
            E.dst(d, dt, call, scalar=False)
