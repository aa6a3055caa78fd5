"""Preparing a parsed PTX function for execution: once per module text.

A function's body is cut into basic blocks.  Each ordinary block becomes two
Python functions, generated as source and compiled once:

* ``full(T)`` runs the block for every thread of the context ``T`` on whole
  NumPy arrays (the converged case: no gather or scatter at all);
* ``sel(T, ids)`` runs it for the threads ``ids`` only: the registers the
  block reads are gathered once on entry, the ones it writes scattered once on
  exit.

The bodies are identical: each PTX instruction becomes one or a few lines of
NumPy over local variables (one per register).  A block returns the index of
the next block, or ``(predicate, taken, not_taken)`` for a branch that may
diverge, or an array of targets (``brx.idx``).

Barriers and warp-synchronous instructions (``bar.sync``, ``shfl.sync``,
``vote.sync`` ...) and calls are blocks of their own, so the scheduler can make
threads wait for each other there.

Registers have one NumPy storage type each (uint, int or float of their
width, or bool for predicates), chosen from how the function uses them; a
read or write with another type of the same width is a ``view``, decided here,
not at run time.  No string is handled at run time.
"""

from __future__ import annotations

import itertools
from collections import Counter

import attrs
import numpy as np

from . import memory, numerics, runtime, warp
from .errors import PtxError
from .numerics import BOOL, F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64
from .parser import (Function, Imm, Instruction, Label, Module, Not, Reg, Sink, Special, Sym, VarDecl,
                     imm_bits, type_size)

# -- types -------------------------------------------------------------------------------------

DTYPES = {
    "u8": U8, "u16": U16, "u32": U32, "u64": U64,
    "s8": I8, "s16": I16, "s32": I32, "s64": I64,
    "b8": U8, "b16": U16, "b32": U32, "b64": U64,
    "f16": F16, "f32": F32, "f64": F64, "bf16": U16, "f16x2": U32, "bf16x2": U32,
    "pred": BOOL, "tf32": U32, "e4m3x2": U16, "e5m2x2": U16, "u16x2": U32, "s16x2": U32,
}
UINT_OF = {1: U8, 2: U16, 4: U32, 8: U64}
INT_OF = {1: I8, 2: I16, 4: I32, 8: I64}
FLOAT_OF = {2: F16, 4: F32, 8: F64}

DONE = -1  # the thread returned (from a .func) or finished the kernel
EXIT = -2  # the thread executed `exit` (it leaves every function)


class Unsupported(PtxError):
    """An instruction form the emulator cannot execute."""


def dtype_of(t: str):
    try:
        return DTYPES[t]
    except KeyError:
        raise Unsupported(f"type .{t} is not supported") from None


def storage_family(dtype) -> str:
    if dtype == BOOL:
        return "p"
    return dtype.kind  # "u", "i", "f"


def storage_dtype(width: int, family: str):
    if width == 0:
        return BOOL
    if family == "f" and width in FLOAT_OF:
        return FLOAT_OF[width]
    if family == "i":
        return INT_OF[width]
    return UINT_OF[width]


# -- expressions ----------------------------------------------------------------------------------


class Expr(str):
    """Python source for a value; ``scalar`` when it is one value for every thread."""

    scalar: bool = False
    dtype = None

    def __new__(cls, text: str, scalar: bool = False, dtype=None):
        e = str.__new__(cls, text)
        e.scalar = scalar
        e.dtype = dtype
        return e


def _read_conv(expr: str, S, D) -> str:
    """Source reading a register stored as ``S`` as type ``D`` (bits are kept: a view)."""
    if S == D:
        return expr
    if S == BOOL or D == BOOL:
        raise PtxError("a predicate register used as a value (or a value as a predicate)")
    if S.itemsize == D.itemsize:
        return f"{_paren(expr)}.view({_NAME[D]})"
    # a different width: through the integer of the register's width
    src_int = _read_conv(expr, S, UINT_OF[S.itemsize] if D.kind != "i" else INT_OF[S.itemsize])
    if D.kind == "f":
        return f"{_paren(src_int)}.astype({_NAME[UINT_OF[D.itemsize]]}).view({_NAME[D]})"
    return f"{_paren(src_int)}.astype({_NAME[D]})"


def _paren(expr: str) -> str:
    return expr if expr.isidentifier() else f"({expr})"


def _write_conv(expr: str, D, S) -> str:
    """Source turning a value of type ``D`` into register storage ``S`` (bits are kept)."""
    if S == D:
        return expr
    if S == BOOL or D == BOOL:
        raise PtxError("a predicate written to a value register (or a value to a predicate)")
    if D.itemsize == S.itemsize:
        return f"{_paren(expr)}.view({_NAME[S]})"
    if D.itemsize < S.itemsize:  # extend (sign-extend signed values) to the register's width
        if D.kind == "f":
            expr = _read_conv(expr, D, UINT_OF[D.itemsize])
            D = UINT_OF[D.itemsize]
        wide = INT_OF[S.itemsize] if D.kind == "i" else UINT_OF[S.itemsize]
        return _write_conv(f"{_paren(expr)}.astype({_NAME[wide]})", wide, S)
    narrow = UINT_OF[S.itemsize]
    as_int = _read_conv(expr, D, UINT_OF[D.itemsize])
    return _write_conv(f"{_paren(as_int)}.astype({_NAME[narrow]})", narrow, S)


_CANON = {F32: "canon_f32", F16: "canon_f16"}


def _noncanonical_nan(imm: Imm, width: int) -> bool:
    """Whether an immediate written to a float register is a NaN other than the canonical one."""
    if imm.kind == "int":
        bits = imm.value & ((1 << (8 * width)) - 1)
    else:
        try:
            bits = imm_bits(imm, width, True)
        except PtxError:
            return True
    if width == 4:
        return (bits & 0x7F800000) == 0x7F800000 and (bits & 0x7FFFFF) != 0 and bits != 0x7FFFFFFF
    return (bits & 0x7C00) == 0x7C00 and (bits & 0x3FF) != 0 and bits != 0x7FFF


_NAME = {U8: "U8", U16: "U16", U32: "U32", U64: "U64", I8: "I8", I16: "I16", I32: "I32", I64: "I64",
         F16: "F16", F32: "F32", F64: "F64", BOOL: "BOOL"}

# -- the registry of instruction handlers ---------------------------------------------------------

HANDLERS: dict = {}


def handler(*opcodes):
    """Register ``cls`` (with ``parse(mods) -> spec`` and ``emit(E, ins, spec)``)."""

    def register(cls):
        for op in opcodes:
            HANDLERS[op] = cls
        return cls

    return register


class Mods:
    """Modifier parsing for handlers: ``take`` from known sets, then ``done``."""

    def __init__(self, opcode: str, mods: tuple):
        self.opcode, self.rest = opcode, list(mods)
        self.all = tuple(mods)

    def take(self, options, default=None):
        for i, m in enumerate(self.rest):
            if m in options:
                del self.rest[i]
                return m
        return default

    def take_all(self, options) -> list:
        out = [m for m in self.rest if m in options]
        self.rest = [m for m in self.rest if m not in options]
        return out

    def take_prefix(self, prefixes) -> list:
        out = [m for m in self.rest if any(m.startswith(p) for p in prefixes)]
        self.rest = [m for m in self.rest if m not in out]
        return out

    def type(self, options=None):
        if not self.rest:
            raise Unsupported(f"{self.form()}: no type")
        t = self.rest.pop()
        if options is not None and t not in options:
            raise Unsupported(f"{self.form()}: type .{t} is not supported")
        dtype_of(t)
        return t

    def done(self):
        if self.rest:
            raise Unsupported(f"{self.form()}: modifier{'s' if len(self.rest) > 1 else ''} "
                              f"{' '.join('.' + m for m in self.rest)} not supported")

    def form(self):
        return ".".join((self.opcode,) + self.all)


def block_kind(cls, spec) -> str:
    """"code", "sync" or "call": the class's kind, or the spec's where one form of an opcode
    is a sync block and the others code (``mbarrier.try_wait``)."""
    own = spec.get("kind") if isinstance(spec, dict) else None
    return own or getattr(cls, "kind", "code")


def parse_form(form: str):
    """(handler class, spec) for an instruction form such as ``fma.rn.f32``."""
    opcode, *mods = form.split(".")
    cls = HANDLERS.get(opcode)
    if cls is None:
        raise Unsupported(f"unknown instruction {form}")
    return cls, cls.parse(Mods(opcode, tuple(mods)))


# -- block emission --------------------------------------------------------------------------------


class Emitter:
    """Turns instructions into lines of Python for one block (or, with ``typing``, records
    how registers are used so their storage types can be chosen)."""

    def __init__(self, fc: "FunctionCompiler", typing: bool = False):
        self.fc = fc
        self.typing = typing
        self.lines: list[str] = []
        self.reads: list[int] = []  # live-in registers in first-use order
        self.written: dict[int, None] = {}
        self.specials: dict[str, None] = {}
        self.mask = "None"
        self.guard = None
        self.ins: Instruction | None = None
        self.all_scalar = True
        self._tmp = itertools.count()

    # bookkeeping
    def _use(self, idx: int) -> None:
        if idx not in self.written and idx not in self.reads:
            self.reads.append(idx)

    def tmp(self, stem: str = "t") -> str:
        return f"{stem}_{next(self._tmp)}"

    def line(self, text: str) -> None:
        self.lines.append(text)

    def const(self, value, stem: str = "k") -> str:
        return self.fc.const(value, stem)

    def error(self, message: str) -> PtxError:
        ins = self.ins
        return PtxError(message, line=ins.line if ins else None, source=ins.text if ins else None)

    # operands
    def reg(self, op) -> int:
        if isinstance(op, Reg):
            return self.fc.reg_index(op.name, self.ins)
        raise self.error(f"expected a register, found {_describe(op)}")

    def src(self, op, dtype, array: bool = False) -> Expr:
        dtype = np.dtype(dtype)
        if isinstance(op, Reg):
            idx = self.fc.reg_index(op.name, self.ins)
            if self.typing:
                self.fc.vote(idx, dtype)
                return Expr("x", False, dtype)
            S = self.fc.storage[idx]
            self._use(idx)
            self.all_scalar = False
            if S == BOOL and dtype != BOOL:
                raise self.error(f"predicate {op.name} used as a .{dtype} value")
            if self.fc.lazy[idx] and dtype.kind != "f":  # its bits are observed: NaNs canonical first
                return Expr(_read_conv(f"{_CANON[S]}(r{idx})", S, dtype), False, dtype)
            return Expr(_read_conv(f"r{idx}", S, dtype), False, dtype)
        if isinstance(op, Not):
            inner = self.src(op.operand, dtype)
            if dtype != BOOL:
                raise self.error("'!' applies to predicates only")
            return Expr(f"(~{inner})", inner.scalar, dtype)
        if isinstance(op, Imm):
            if dtype == BOOL:
                value = np.bool_(bool(op.value))
            else:
                bits = imm_bits(op, dtype.itemsize, dtype.kind == "f")
                value = np.array(bits, UINT_OF[dtype.itemsize]).view(dtype)[()]
            name = self.const(value)
            if array:
                cache = self.const(runtime.Broadcast(value), "bc")
                self.all_scalar = False
                return Expr(f"{cache}.get(n_)", False, dtype)
            return Expr(name, True, dtype)
        if isinstance(op, Special):
            return self.special(op.name, dtype, array)
        if isinstance(op, Sym):
            return self.symbol_value(op.name, dtype, array)
        raise self.error(f"unexpected operand {_describe(op)}")

    def src_observed(self, op, dtype, array: bool = False) -> Expr:
        """A read whose bits matter (a store, a conversion): lazy NaNs are made canonical."""
        e = self.src(op, dtype, array)
        if isinstance(op, Reg) and not self.typing:
            idx = self.fc.reg_index(op.name, self.ins)
            if self.fc.lazy[idx] and np.dtype(dtype).kind == "f":
                return Expr(f"{_CANON[self.fc.storage[idx]]}({e})", False, e.dtype)
        return e

    def src_copy(self, op, dtype, dest, array: bool = False) -> Expr:
        """A value moved into ``dest`` unchanged: canonical unless ``dest`` is lazy too."""
        e = self.src(op, dtype, array)
        if isinstance(op, Reg) and not self.typing and np.dtype(dtype).kind == "f":
            idx = self.fc.reg_index(op.name, self.ins)
            dest_lazy = isinstance(dest, Reg) and self.fc.lazy[self.fc.reg_index(dest.name, self.ins)]
            if self.fc.lazy[idx] and not dest_lazy:
                return Expr(f"{_CANON[self.fc.storage[idx]]}({e})", False, e.dtype)
        return e

    def arith(self, op, dtype, t: str, expr: str) -> None:
        """Write an arithmetic result of PTX type ``t``: f32/f16 NaNs must be canonical, now or
        (for a lazy register, written only by arithmetic) when its bits are observed."""
        if t not in ("f32", "f16"):
            self.dst(op, dtype, expr)
            return
        if isinstance(op, Reg) and not self.typing and self.fc.lazy[self.fc.reg_index(op.name, self.ins)]:
            self.dst(op, dtype, expr, kind="A")
            return
        self.dst(op, dtype, expr if self.typing else f"canon_{t}({expr})", kind="A")

    def special(self, name: str, dtype, array: bool = False) -> Expr:
        base, _, dim = name.partition(".")
        if self.typing:
            return Expr("x", False, dtype)
        arrays = {"%tid": "tid", "%ctaid": "ctaid"}
        if base in arrays:
            k = "xyz".index(dim or "x")
            local = f"s_{arrays[base]}_{k}"
            self.specials[local] = None
            expr, is_scalar = local, False
        elif base in ("%laneid", "%warpid"):
            local = "s_lane" if base == "%laneid" else "s_warp"
            self.specials[local] = None
            expr, is_scalar = local, False
        elif base.startswith("%lanemask_"):
            self.specials["s_lane"] = None
            kind = base[len("%lanemask_"):]
            expr, is_scalar = f"lanemask(s_lane, '{kind}')", False
        elif base in ("%ntid", "%nctaid"):
            k = "xyz".index(dim or "x")
            expr, is_scalar = f"T.{base[1:]}_u32[{k}]", True
        elif base == "%nwarpid":
            expr, is_scalar = "T.nwarpid_u32", True
        elif base in ("%clock64", "%globaltimer"):
            expr, is_scalar = "T.clock64()", True
        elif base in ("%clock", "%globaltimer_lo", "%globaltimer_hi"):
            expr, is_scalar = "np.uint32(T.clock64() & np.uint64(0xFFFFFFFF))", True
        elif base in ("%smid", "%gridid", "%cluster_ctarank", "%is_explicit_cluster") or base.startswith("%envreg") \
                or base.startswith("%pm"):
            expr, is_scalar = "np.uint32(0)", True
        elif base in ("%nsmid", "%cluster_nctarank"):
            expr, is_scalar = "np.uint32(1)", True
        elif base == "%cluster_ctaid":
            expr, is_scalar = "np.uint32(0)", True
        elif base == "%cluster_nctaid":
            expr, is_scalar = "np.uint32(1)", True
        elif base == "%clusterid":
            k = "xyz".index(dim or "x")
            local = f"s_ctaid_{k}"
            self.specials[local] = None
            expr, is_scalar = local, False
        elif base == "%nclusterid":
            k = "xyz".index(dim or "x")
            expr, is_scalar = f"T.nctaid_u32[{k}]", True
        elif base in ("%dynamic_smem_size", "%total_smem_size"):
            expr, is_scalar = ("T.dynamic_smem_u32" if base == "%dynamic_smem_size" else "T.total_smem_u32"), True
        else:
            raise self.error(f"special register {name} is not supported")
        width = 8 if base in ("%clock64", "%globaltimer") else 4
        have = UINT_OF[width]
        if dtype != have:
            if dtype.itemsize == have.itemsize:
                expr = f"{expr}.view({_NAME[dtype]})"
            else:
                expr = f"np.asarray({expr}).astype({_NAME[dtype]})" if not is_scalar else f"{_NAME[dtype]}.type({expr})"
        if not is_scalar:
            self.all_scalar = False
        if array and is_scalar:
            return Expr(f"bc({expr}, n_)", False, dtype)
        return Expr(expr, is_scalar, dtype)

    def symbol_value(self, name: str, dtype, array: bool = False) -> Expr:
        """The address of a variable or function used as a value (``mov.u64 %rd1, name``)."""
        if self.typing:
            return Expr("x", False, dtype)
        kind, value = self.fc.symbol(name, self.ins)
        if kind == "const":
            expr = self.const(np.array(value & (2**64 - 1), U64).astype(dtype) if dtype.kind != "f" else
                              np.array(value, U64).view(dtype)[()])
        elif kind == "global":
            expr = f"{_NAME[dtype]}.type(T.sym[{value!r}])"
        elif kind == "local":
            expr = f"{_NAME[dtype]}.type(T.frame + {value})"
        else:
            raise self.error(f"{name} cannot be used as a value here")
        if array:
            return Expr(f"bc({expr}, n_)", False, dtype)
        return Expr(expr, True, dtype)

    def dst(self, op, dtype, expr: str, scalar: bool | None = None, kind: str = "M", sources=()) -> None:
        """Write ``expr`` (of ``dtype``) to the register ``op``.  ``kind`` says what produced it,
        for the NaN analysis: "A" arithmetic, "C" a copy of ``sources``, "M" anything else."""
        dtype = np.dtype(dtype)
        if isinstance(op, Sink):
            return
        if isinstance(op, Reg):
            idx = self.fc.reg_index(op.name, self.ins)
            if self.typing:
                self.fc.vote(idx, dtype)
                self.fc.defs[idx].append((kind, tuple(sources)))
                return
            S = self.fc.storage[idx]
            if S == BOOL and dtype != BOOL:
                raise self.error(f"a .{dtype} value written to predicate {op.name}")
            if S != BOOL and dtype == BOOL:
                raise self.error(f"a predicate written to register {op.name}")
            value = _write_conv(expr, dtype, S)
            is_scalar = self.all_scalar if scalar is None else scalar
            const = self.fc.ns.get(expr) if isinstance(expr, str) and expr.isidentifier() else None
            if isinstance(const, np.generic) and self.guard is None:
                # a constant: convert it now, and hand out one cached array of it
                converted = eval(_write_conv("v", dtype, S), self.fc.ns, {"v": const})
                value = f"{self.const(runtime.Broadcast(converted), 'bc')}.get(n_)"
            elif self.guard is not None:
                self._use(idx)
                value = f"np.where({self.guard}, {value}, r{idx})"
            elif is_scalar:
                value = f"bc({value}, n_)"
            self.line(f"r{idx} = {value}")
            self.written[idx] = None
            return
        raise self.error(f"cannot write to {_describe(op)}")

    def dst_param(self, idx: int, expr: str) -> None:
        """Write a whole parameter register (2-D bytes)."""
        if self.typing:
            return
        if self.guard is not None:
            self._use(idx)
            expr = f"np.where({self.guard}[:, None], {expr}, r{idx})"
        self.line(f"r{idx} = {expr}")
        self.written[idx] = None

    def src_param(self, idx: int) -> str:
        if self.typing:
            return "x"
        self._use(idx)
        return f"r{idx}"

    def site(self, kind: str, width: int, space: str) -> str:
        ins = self.ins
        fc = self.fc
        access = memory.ATOMIC if id(ins) in fc.cas_seeds else None
        return self.const(memory.Site(ins.line, ins.text, kind, width, space,
                                      loc=fc.mc.module.source_line(ins.loc), access=access), "site")


def _register_names(operands) -> set:
    """The register names the operands mention (in vectors, addresses, pairs ...)."""
    out = set()
    for op in operands:
        if isinstance(op, Reg):
            out.add(op.name)
        elif hasattr(op, "__attrs_attrs__"):
            out |= _register_names(x for a in op.__attrs_attrs__ for v in [getattr(op, a.name)]
                                   for x in (v if isinstance(v, tuple) else (v,)))
    return out


def _describe(op) -> str:
    if isinstance(op, Reg):
        return op.name
    if isinstance(op, Imm):
        return f"immediate {op.value}"
    if isinstance(op, Sym):
        return op.name
    return type(op).__name__.lower()


# -- functions -------------------------------------------------------------------------------------


@attrs.define(eq=False)
class Block:
    kind: str  # "code", "sync", "call"
    first: int  # index of its first instruction in the function's instruction list
    instructions: list
    full: object = None  # code: full(T) -> next; sync: run(T, ids) for released threads
    sel: object = None
    next: int = 0  # fallthrough block
    info: object = None  # sync / call details
    exits: int = 0  # DONE / EXIT when its first instruction is an unguarded ret / exit


@attrs.define(eq=False)
class SyncInfo:
    kind: str  # "bar", "warp", "group" (a warpgroup collective: wgmma) or "mbar" (an mbarrier wait)
    line: int
    text: str
    group: object = None  # for bar: fn(T, ids) -> barrier ids; for warp: fn(T, ids) -> membermask
    count: object = None  # bar: fn(T, ids) -> expected thread count (or None)
    arrive: bool = False  # bar.arrive: do not wait
    full_mask: bool = False  # warp: the member mask is the constant 0xffffffff
    explain: object = None  # mbar: fn(T, ids) -> why the waits cannot complete (a deadlock's message)


@attrs.define(eq=False)
class CallInfo:
    line: int
    text: str
    callee: str | None  # direct call
    target: object  # indirect: fn(T, ids) -> function addresses
    args: list  # caller registers holding argument parameters
    rets: list
    guard: object  # fn(T, ids) -> bool array, or None


class FunctionCompiler:
    """Compiles one PTX function into blocks (see the module docstring)."""

    def __init__(self, mc: "ModuleCompiler", fn: Function):
        self.mc, self.fn = mc, fn
        self.ns = mc.ns  # the module's namespace (helpers and constants)
        self.regs: dict[str, int] = {}
        self.reg_width: list[int] = []
        self.reg_names: list[str] = []
        self.votes: list[Counter] = []
        self.storage: list = []
        self.param_sizes: dict[int, int] = {}
        self.local_offsets: dict[str, int] = {}
        self.cas_seeds: set[int] = set()
        self.depot = 0
        for name, decl in fn.regs.items():
            self._add_reg(name, 0 if decl.type == "pred" else type_size(decl.type), decl.type)
        self.cc = self._add_reg("%cc", 4, "u32")
        self.defs: list[list] = [[] for _ in self.reg_names]
        self.lazy: list[bool] = [False] * len(self.reg_names)
        # parameters (of .func definitions and call sequences) live in registers as bytes
        self.param_regs: dict[str, int] = {}
        params = [] if fn.kind == "entry" else fn.params + fn.rets
        for p in params + [v for v in fn.variables if v.space == "param"]:
            idx = self._add_reg(p.name, -1, "param")
            self.param_regs[p.name] = idx
            self.param_sizes[idx] = max(p.size, 1)
        for v in fn.variables:
            if v.space == "local":
                off = -(-self.depot // max(v.align, 1)) * max(v.align, 1)
                self.local_offsets[v.name] = off
                self.depot = off + v.size
            elif v.space == "shared":
                mc.add_shared(v)
        self.depot = -(-self.depot // 16) * 16
        self.kparam_offsets: dict[str, tuple] = {}
        if fn.kind == "entry":
            off = 0
            for p in fn.params:
                off = -(-off // p.align) * p.align
                self.kparam_offsets[p.name] = (off, p)
                off += p.size
            self.kparam_size = off

    def _add_reg(self, name: str, width: int, declared: str) -> int:
        idx = len(self.reg_names)
        self.regs[name] = idx
        self.reg_names.append(name)
        self.reg_width.append(width)
        c = Counter()
        if declared.startswith("f"):
            c[declared] += 0.5  # a declared float register leans float
        self.votes.append(c)
        return idx

    def reg_index(self, name: str, ins) -> int:
        idx = self.regs.get(name)
        if idx is None:
            raise PtxError(f"undeclared register {name}", line=ins.line if ins else None,
                           source=ins.text if ins else None)
        return idx

    def vote(self, idx: int, dtype) -> None:
        w = self.reg_width[idx]
        if w > 0 and dtype.itemsize == w:
            self.votes[idx][storage_family(dtype)] += 1

    def const(self, value, stem="k") -> str:
        return self.mc.const(value, stem)

    def symbol(self, name: str, ins):
        return self.mc.symbol(name, self, ins)

    # -- compile ---------------------------------------------------------------------------------
    def compile(self) -> "CompiledFunction":
        fn = self.fn
        instructions = [s for s in fn.body if isinstance(s, Instruction)]
        labels: dict[str, int] = {}
        pos = 0
        for s in fn.body:
            if isinstance(s, Label):
                labels[s.name] = pos
            else:
                pos += 1
        self.labels_at = labels
        self.cas_seeds = _cas_seeds(instructions)
        # validate every form first (a clear error for the first unsupported one)
        specs = []
        for ins in instructions:
            try:
                cls, spec = parse_form(ins.form)
            except Unsupported as e:
                raise Unsupported(f"unsupported instruction {ins.form}: {e.args[0].splitlines()[0]}",
                                  line=ins.line, source=ins.text) from None
            specs.append((cls, spec))
        # registers written asynchronously (wgmma accumulators): other instructions naming them are checked
        self.accumulators = frozenset().union(*(cls.accumulators(self, ins) for ins, (cls, _) in zip(instructions, specs)
                                                if hasattr(cls, "accumulators")))
        # storage types from how registers are used
        typing = Emitter(self, typing=True)
        for ins, (cls, spec) in zip(instructions, specs):
            typing.ins = ins
            if ins.guard:
                typing.src(Reg(ins.guard[0]), BOOL)
            cls.emit(typing, ins, spec)
        self.storage = []
        for idx, w in enumerate(self.reg_width):
            if w == 0:
                self.storage.append(BOOL)
            elif w < 0:
                self.storage.append(None)  # parameter bytes
            else:
                votes = self.votes[idx]
                fam = max(("u", "i", "f"), key=lambda f: (votes.get(f, 0), f == "u"))
                if fam == "i" and votes.get("u", 0) >= votes.get("i", 0):
                    fam = "u"
                self.storage.append(storage_dtype(w, fam))
        self.lazy = self._lazy_registers()
        # blocks
        leaders = {0}
        for name, at in labels.items():
            leaders.add(at)
        for i, (ins, (cls, spec)) in enumerate(zip(instructions, specs)):
            kind = block_kind(cls, spec)
            if kind in ("sync", "call"):
                leaders.add(i)
                leaders.add(i + 1)
            elif getattr(cls, "terminator", False):
                leaders.add(i + 1)
        leaders = sorted(x for x in leaders if x <= len(instructions))
        if not instructions or leaders[-1] != len(instructions):
            leaders.append(len(instructions))
        starts = [x for x in leaders if x < len(instructions)]
        self.block_of = {s: b for b, s in enumerate(starts)}
        self.block_of[len(instructions)] = len(starts)  # falling off the end: an implicit return
        self.label_block = {name: self.block_of[at] for name, at in labels.items()}
        blocks = []
        sources = []
        for b, s in enumerate(starts):
            e = leaders[leaders.index(s) + 1]
            body = list(zip(instructions[s:e], specs[s:e]))
            kind = block_kind(*body[0][1])
            blk = Block(kind, s, [i for i, _ in body], next=b + 1)
            first = body[0][0]
            if first.opcode in ("ret", "exit") and first.guard is None:
                blk.exits = DONE if first.opcode == "ret" else EXIT
            if kind == "code":
                sources.append(self._emit_code_block(b, blk, body))
            else:
                cls, spec = body[0][1]
                cls.prepare(self, blk, body[0][0], spec, b)
                if blk.full is None:
                    src = self._emit_sync_block(b, blk, body[0])
                    if src:
                        sources.append(src)
            blocks.append(blk)
        # the implicit end (falling off the last block)
        end = Block("code", len(instructions), [], next=len(starts))
        end.exits = DONE
        end.full = _return_done
        end.sel = _return_done_sel
        blocks.append(end)
        code = "\n\n".join(sources)
        if code:
            namespace = self.ns
            try:
                exec(compile(code, f"<ptx {fn.name}>", "exec"), namespace)
            except SyntaxError as e:  # a bug in a handler: show the generated line
                raise PtxError(f"internal error compiling {fn.name}: {e}\n{e.text}") from None
            for b, blk in enumerate(blocks[:-1]):
                if blk.kind == "code":
                    blk.full = namespace[f"{self.prefix}B{b}_f"]
                    blk.sel = namespace[f"{self.prefix}B{b}_s"]
                elif blk.kind == "sync" and blk.full is None:
                    blk.full = namespace[f"{self.prefix}B{b}_f"]
                    blk.sel = namespace[f"{self.prefix}B{b}_s"]
        self.source = code
        return CompiledFunction(self, blocks)

    def _lazy_registers(self) -> list[bool]:
        """Registers (f32/f16 storage) written only by arithmetic or by copies of such registers:
        their NaNs are made canonical when their bits are observed, not at every operation."""
        only = [w in (2, 4) and S is not None and S.kind == "f" and all(k != "M" for k, _ in d)
                for w, S, d in zip(self.reg_width, self.storage, self.defs)]
        changed = True
        while changed:
            changed = False
            for idx, defs in enumerate(self.defs):
                if not only[idx]:
                    continue
                for kind, sources in defs:
                    for src in sources:
                        ok = (isinstance(src, Reg) and only[self.regs[src.name]]) or (
                            isinstance(src, Imm) and not _noncanonical_nan(src, self.reg_width[idx]))
                        if not ok:
                            only[idx] = False
                            changed = True
                            break
                    if not only[idx]:
                        break
        return only

    @property
    def prefix(self) -> str:
        return f"F{self.mc.fn_index[self.fn.name]}_"

    def target(self, op, ins) -> int:
        if not isinstance(op, Sym) or op.name not in self.label_block:
            raise PtxError(f"branch to an unknown label {_describe(op)}", line=ins.line, source=ins.text)
        return self.label_block[op.name]

    def _prologue(self, E: Emitter, sel: bool) -> list[str]:
        out = ["R = T.R"]
        out.append("n_ = len(ids)" if sel else "n_ = T.n; ids = None")
        for idx in E.reads:
            out.append(f"r{idx} = R[{idx}][ids]" if sel else f"r{idx} = R[{idx}]")
        for local in E.specials:
            src = {"s_lane": "T.lane", "s_warp": "T.warp"}.get(local)
            if src is None:
                _, what, k = local.split("_")
                src = f"T.{what}[{k}]"
            out.append(f"{local} = {src}[ids]" if sel else f"{local} = {src}")
        return out

    def _epilogue(self, E: Emitter, sel: bool) -> list[str]:
        out = []
        for idx in E.written:
            out.append(f"R[{idx}] = put(R[{idx}], ids, r{idx})" if sel else f"R[{idx}] = r{idx}")
        return out

    def _counting(self, b: int) -> str:
        """The profiling hook of block ``b`` (see :mod:`.profile`): one test when not profiling."""
        return f"if T.prof is not None: T.prof.block({(self.mc.fn_index[self.fn.name] << 20) | b}, T, ids)"

    def _emit_code_block(self, b: int, blk: Block, body) -> str:
        E = Emitter(self)
        term_lines: list[str] = []
        for ins, (cls, spec) in body:
            E.ins = ins
            E.all_scalar = True
            if getattr(cls, "terminator", False):
                term_lines = cls.terminate(E, ins, spec, self, b)
                continue
            if ins.guard is not None:
                g = E.src(Reg(ins.guard[0]), BOOL)
                gname = E.tmp("g")
                E.line(f"{gname} = {'~' if ins.guard[1] else ''}{g}")
                E.guard, E.mask = gname, gname
            else:
                E.guard, E.mask = None, "None"
            E.all_scalar = True
            self._accumulator_check(E, ins, cls)
            cls.emit(E, ins, spec)
            E.guard, E.mask = None, "None"
        if not term_lines:
            term_lines = [f"return {b + 1}"]
        out = []
        for sel in (False, True):
            name = f"{self.prefix}B{b}_{'s' if sel else 'f'}"
            head = f"def {name}(T, ids):" if sel else f"def {name}(T):"
            lines = self._prologue(E, sel) + [self._counting(b)] + E.lines + self._epilogue(E, sel) + term_lines
            out.append(head + "\n" + "\n".join("    " + x for x in lines))
        return "\n\n".join(out)

    def _accumulator_check(self, E: Emitter, ins, cls) -> None:
        """Before an instruction naming a wgmma accumulator (other than a wgmma): a check that no
        wgmma writing it is in flight (:mod:`.wgmma_async`)."""
        if not self.accumulators or hasattr(cls, "accumulators"):
            return
        regs = frozenset(self.regs[x] for x in _register_names(ins.operands) if x in self.regs) & self.accumulators
        if regs:
            E.line(f"if T.wgmma.live: T.wgmma.check_registers(T, ids, {E.mask}, {E.site('reg', 0, '')}, "
                   f"{self.mc.fn_index[self.fn.name]}, {E.const(regs, 'regs')})")

    def _emit_sync_block(self, b: int, blk: Block, item) -> str:
        """A sync instruction's semantics as a code function (run for the released threads)."""
        ins, (cls, spec) = item
        E = Emitter(self)
        E.ins = ins
        if ins.guard is not None:
            g = E.src(Reg(ins.guard[0]), BOOL)
            E.line(f"g_ = {'~' if ins.guard[1] else ''}{g}")
            E.guard, E.mask = "g_", "g_"
        self._accumulator_check(E, ins, cls)
        cls.emit(E, ins, spec)
        E.guard, E.mask = None, "None"
        out = []
        for sel in (False, True):
            name = f"{self.prefix}B{b}_{'s' if sel else 'f'}"
            lines = [*self._prologue(E, sel), self._counting(b), *E.lines, *self._epilogue(E, sel), f"return {b + 1}"]
            out.append(f"def {name}(T, ids):\n" + "\n".join("    " + x for x in lines))
        return "\n\n".join(out)

    def small_function(self, name_hint: str, ins, build) -> object:
        """Compile a helper ``f(T, ids)`` whose body ``build(E)`` emits lines ending with a
        ``return`` (used for barrier ids, member masks, call guards)."""
        E = Emitter(self)
        E.ins = ins
        ret = build(E)
        name = f"{self.prefix}{name_hint}_{next(self.mc.counter)}"
        lines = self._prologue(E, True) + E.lines + [f"return {ret}"]
        code = f"def {name}(T, ids):\n" + "\n".join("    " + x for x in lines)
        exec(compile(code, f"<ptx {self.fn.name}>", "exec"), self.ns)
        return self.ns[name]


def _cas_seeds(instructions) -> set[int]:
    """The loads that start a compare-and-swap loop (``ld r, [a]`` whose value an
    ``atom.cas _, [a], r, _`` compares against; LLVM expands the atomics a target lacks so):
    their value is only a guess the cas checks, so the race checker counts them as atomic."""
    compared = set()
    for ins in instructions:
        if ins.opcode == "atom" and "cas" in ins.mods and len(ins.operands) >= 4 and isinstance(ins.operands[2], Reg):
            compared.add((ins.operands[1], ins.operands[2].name))
    return {id(ins) for ins in instructions
            if ins.opcode == "ld" and len(ins.operands) >= 2 and isinstance(ins.operands[0], Reg)
            and (ins.operands[1], ins.operands[0].name) in compared}


def _return_done(T):
    return DONE


def _return_done_sel(T, ids):
    return DONE


@attrs.define(eq=False)
class CompiledFunction:
    fc: FunctionCompiler
    blocks: list
    exit_code: object = None  # the executor's per-block tables, made on first use
    costs: object = None

    @property
    def name(self):
        return self.fc.fn.name


# -- modules ----------------------------------------------------------------------------------------


class ModuleCompiler:
    """Compiles every defined function of a module; lays out shared and const variables."""

    def __init__(self, module: Module):
        self.module = module
        self.ns: dict = _base_namespace()
        self.counter = itertools.count()
        self.consts: dict = {}
        self.fn_index = {name: i for i, name in enumerate(module.functions)}
        self.shared_offsets: dict[str, int] = {}
        self.shared_size = 0
        self.shared_align = 16
        self.dynamic_shared: set[str] = set()
        self.const_offsets: dict[str, int] = {}
        self.const_size = 0
        self.globals: dict[str, VarDecl] = {}
        for v in module.variables:
            if v.space == "shared":
                self.add_shared(v)
            elif v.space == "const":
                off = -(-self.const_size // max(v.align, 1)) * max(v.align, 1)
                self.const_offsets[v.name] = off
                self.const_size = off + v.size
            elif v.space == "global":
                self.globals[v.name] = v
            elif v.space == "local":
                raise PtxError("module-scope .local variables are not supported", line=v.line)
        self.functions: dict[str, CompiledFunction] = {}

    def add_shared(self, v: VarDecl) -> None:
        if v.name in self.shared_offsets or v.name in self.dynamic_shared:
            return
        self.shared_align = max(self.shared_align, v.align)
        if v.extern and not v.count:
            self.dynamic_shared.add(v.name)
            return
        off = -(-self.shared_size // max(v.align, 1)) * max(v.align, 1)
        self.shared_offsets[v.name] = off
        self.shared_size = off + v.size

    def const(self, value, stem="k") -> str:
        name = f"{stem}{next(self.counter)}"
        self.ns[name] = value
        return name

    def symbol(self, name: str, fc: FunctionCompiler | None, ins):
        """(kind, value) of a name used as an address: "const" (known now), "global" (per device),
        "local" (frame offset)."""
        if fc is not None and name in fc.local_offsets:
            return "local", fc.local_offsets[name]
        if name in self.shared_offsets:
            return "const", self.shared_offsets[name]
        if name in self.dynamic_shared:
            return "const", self.dynamic_offset
        if name in self.const_offsets:
            return "const", self.const_offsets[name]
        if name in self.globals:
            return "global", name
        if name in self.fn_index:
            return "const", FUNCTION_BASE + 16 * self.fn_index[name]
        if fc is not None and name in fc.kparam_offsets:  # a kernel parameter's .param address
            return "const", fc.kparam_offsets[name][0]
        if fc is not None and name in fc.param_regs:
            raise PtxError(f"taking the address of the parameter {name} is not supported",
                           line=ins.line if ins else None, source=ins.text if ins else None)
        raise PtxError(f"unknown symbol {name}", line=ins.line if ins else None, source=ins.text if ins else None)

    @property
    def dynamic_offset(self) -> int:
        return -(-self.shared_size // 16) * 16

    def compile(self) -> dict:
        for name, fn in self.module.functions.items():
            if fn.kind == "func" and not fn.defined:
                continue
            if not fn.defined:
                continue
            self.functions[name] = FunctionCompiler(self, fn).compile()
        return self.functions


FUNCTION_BASE = 5 << memory.WINDOW_SHIFT  # fake addresses of functions (for indirect calls)


def _base_namespace() -> dict:
    ns: dict = {"np": np, "__builtins__": __builtins__}
    for mod in (numerics, memory, runtime, warp):
        for k, v in vars(mod).items():
            if not k.startswith("_"):
                ns[k] = v
    ns.update(U8=U8, U16=U16, U32=U32, U64=U64, I8=I8, I16=I16, I32=I32, I64=I64, F16=F16, F32=F32,
              F64=F64, BOOL=BOOL)
    return ns
