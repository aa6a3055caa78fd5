"""Lowering the typed SSA graph to LLVM IR with ``llvmlite.ir``.

One lowering serves two targets.  The kernel body becomes an internal,
always-inlined function of the logical thread indices; two thin wrappers call it:

* NVPTX (``nvptx64-nvidia-cuda``): a ``ptx_kernel`` computing each logical index
  from ``ctaid * ntid + tid`` and returning early past the logical extent;
* host: a function looping over a range of logical threads (an odometer over
  x, y, z), so the CPU runs the whole grid, or a slice of it, in one native call.

Both have the same parameters: one pointer per buffer, one ``i64`` element count
per buffer, and a pointer to a 4 x i64 *status* word.  Every buffer pointer must
point at 8 readable bytes even when its count is 0 (a checked load that fails
reads element 0 and discards it).  With checks on (the
default), every load and store is bounds-checked and index division checks for
zero; the first failure is recorded in the status with a compare-and-swap
(``kind, op ordinal, index, lane``), the access is skipped, and the host turns
the status into the same error the interpreter raises.
"""

from __future__ import annotations

import math

import attrs
from llvmlite import ir

from ..dsl.ir import Block, Graph, Op, Value
from ..errors import CompileError
from .diagnostics import division_by_zero, out_of_bounds, thread_text

I1, I32, I64, F32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
VOID = ir.VoidType()

# status kinds (status[0]); 0 means the launch succeeded
STATUS_OK, STATUS_LOAD_OOB, STATUS_STORE_OOB, STATUS_DIV_ZERO = 0, 1, 2, 3
STATUS_WORDS = 4

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"


@attrs.frozen
class Target:
    """What to lower for: ``Target.host()`` or ``Target.nvptx("sm_90")``.

    ``fast_exp`` selects ``ex2.approx``-based exp on NVPTX instead of libdevice's
    ``__nv_expf``; ``checks`` turns bounds and division checks on (default).
    """

    kind: str  # "host" or "nvptx"
    arch: str = ""
    fast_exp: bool = False
    checks: bool = True

    @classmethod
    def host(cls, *, checks: bool = True) -> "Target":
        return cls("host", checks=checks)

    @classmethod
    def nvptx(cls, arch: str = "sm_80", *, fast_exp: bool = False, checks: bool = True) -> "Target":
        if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
            raise CompileError(f"arch must look like sm_80 or sm_90, got {arch!r}")
        return cls("nvptx", arch, fast_exp, checks)

    @property
    def is_nvptx(self) -> bool:
        return self.kind == "nvptx"

    @property
    def pointer(self) -> ir.PointerType:
        return ir.PointerType(addrspace=1) if self.is_nvptx else ir.PointerType()


_LLVM_TYPES = {"index": I64, "f32": F32, "bool": I1}


def llvm_type(dtype) -> ir.Type:
    return _LLVM_TYPES[dtype.name]


def host_entry_name(graph: Graph) -> str:
    return f"{graph.name}_host"


# -- one table entry per op -------------------------------------------------------------
# Each takes (lowering, op, operands) and returns the op's LLVM value.


def _arith(int_method: str, float_method: str):
    def lower(lw, op, args):
        method = float_method if op.result.type.is_float else int_method
        return getattr(lw.b, method)(*args)

    return lower


def _intrinsic(int_name: str | None, float_name: str):
    def lower(lw, op, args):
        is_float = op.result.type.is_float
        name, ty = (float_name, F32) if is_float else (int_name, I64)
        return lw.b.call(lw.intrinsic(f"llvm.{name}.{'f32' if is_float else 'i64'}", ty, [ty] * len(args)), args)

    return lower


_ICMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# ordered comparisons are false with a NaN operand; `ne` is the unordered one (true)
_FCMP_ORDERED = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}


def _compare(op_name: str):
    def lower(lw, op, args):
        operand_type = op.operands[0].type
        if operand_type.is_float:
            if op_name == "ne":
                return lw.b.fcmp_unordered("!=", *args)
            return lw.b.fcmp_ordered(_FCMP_ORDERED[op_name], *args)
        if operand_type.is_bool:
            return lw.b.icmp_unsigned(_ICMP[op_name], *args)
        return lw.b.icmp_signed(_ICMP[op_name], *args)

    return lower


def _neg(lw, op, args):
    (a,) = args
    return lw.b.fneg(a) if op.result.type.is_float else lw.b.sub(ir.Constant(I64, 0), a)


def _exp(lw, op, args):
    (a,) = args
    if not lw.target.is_nvptx:
        return lw.b.call(lw.intrinsic("llvm.exp.f32", F32, [F32]), [a])
    if lw.target.fast_exp:
        # exp(x) = 2^(x log2 e), with the hardware's approximate base-2 exponential
        scaled = lw.b.fmul(a, ir.Constant(F32, math.log2(math.e)))
        return lw.b.call(lw.intrinsic("llvm.nvvm.ex2.approx.ftz.f", F32, [F32]), [scaled])
    lw.needs_libdevice = True
    return lw.b.call(lw.declare("__nv_expf", F32, [F32]), [a])


def _sqrt(lw, op, args):
    return lw.b.call(lw.intrinsic("llvm.sqrt.f32", F32, [F32]), args)


def _select(lw, op, args):
    return lw.b.select(*args)


def _cast(lw, op, args):
    (a,) = args
    src, dst = op.operands[0].type, op.result.type
    if src == dst:
        return a
    if src.is_bool:
        return lw.b.uitofp(a, F32) if dst.is_float else lw.b.zext(a, I64)
    if src.is_int and dst.is_float:
        return lw.b.sitofp(a, F32)
    if src.is_float and dst.is_int:
        # truncate toward zero, saturating, NaN -> 0: exactly the interpreter's rule
        return lw.b.call(lw.intrinsic("llvm.fptosi.sat.i64.f32", I64, [F32]), [a])
    raise CompileError(f"cast from {src} to {dst} has no lowering")


def _div(lw, op, args):
    a, b = args
    if op.result.type.is_float:
        return lw.b.fdiv(a, b)
    bld = lw.b
    zero, one, minus_one = (ir.Constant(I64, v) for v in (0, 1, -1))
    is_zero = bld.icmp_signed("==", b, zero)
    if lw.target.checks:
        lw.check(op, bld.not_(is_zero), STATUS_DIV_ZERO, a)
    # sdiv traps on x / 0 and INDEX_MIN / -1: divide by 1 there and fix up after
    is_minus_one = bld.icmp_signed("==", b, minus_one)
    safe = bld.select(bld.or_(is_zero, is_minus_one), one, b)
    quotient, remainder = bld.sdiv(a, safe), bld.srem(a, safe)
    # floor division: round toward -inf when the remainder's sign differs from b's
    adjust = bld.and_(bld.icmp_signed("!=", remainder, zero),
                      bld.icmp_signed("<", bld.xor(remainder, safe), zero))
    floor = bld.sub(quotient, bld.zext(adjust, I64))
    wrapped_neg = bld.sub(zero, a)
    return bld.select(is_zero, zero, bld.select(is_minus_one, wrapped_neg, floor))


LOWER = {
    "add": _arith("add", "fadd"),
    "sub": _arith("sub", "fsub"),
    "mul": _arith("mul", "fmul"),
    "div": _div,
    "max": _intrinsic("smax", "maximum"),  # llvm.maximum propagates NaN
    "min": _intrinsic("smin", "minimum"),
    "neg": _neg,
    "exp": _exp,
    "sqrt": _sqrt,
    **{name: _compare(name) for name in _ICMP},
    "and": lambda lw, op, args: lw.b.and_(*args),
    "or": lambda lw, op, args: lw.b.or_(*args),
    "not": lambda lw, op, args: lw.b.not_(*args),
    "select": _select,
    "cast": _cast,
}
# const, load, store, fold, for_each and yield need the lowering's state: see _Lowering


class _Lowering:
    """Lowers one graph into one LLVM module."""

    def __init__(self, graph: Graph, target: Target):
        self.graph = graph
        self.target = target
        self.module = ir.Module(name=graph.name)
        self.values: dict[int, ir.Value] = {}
        self.ordinals = {id(op): n for n, op in enumerate(graph.body.walk())}
        self.needs_libdevice = False
        self.proven: dict[int, ir.Value] = {}  # load op id -> "all its loop's indices are in bounds"
        self.params = graph.params
        self.axes = graph.axes
        self.b: ir.IRBuilder | None = None

    # -- declarations ------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    intrinsic = declare

    def _signature(self) -> list[ir.Type]:
        n = len(self.params)
        return [self.target.pointer] * n + [I64] * n + [self.target.pointer]

    def _mark_buffers(self, fn: ir.Function) -> None:
        for param, arg in zip(self.params, fn.args):
            arg.name = param.name
            # outputs alias nothing (checked at binding); inputs that alias are only read
            arg.add_attribute("noalias")
        for param, arg in zip(self.params, fn.args[len(self.params):]):
            arg.name = f"{param.name}_count"
        status = fn.args[2 * len(self.params)]
        status.name = "status"
        status.add_attribute("noalias")  # its own allocation: writing it never changes a buffer

    # -- the body ------------------------------------------------------------------
    def lower_body(self) -> ir.Function:
        index_types = [I64] * len(self.axes)
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + index_types), f"{self.graph.name}_body")
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        self._mark_buffers(fn)
        n = len(self.params)
        self.buffers = {p.name: fn.args[i] for i, p in enumerate(self.params)}
        self.counts = {p.name: fn.args[n + i] for i, p in enumerate(self.params)}
        self.status = fn.args[2 * n]
        self.thread = fn.args[2 * n + 1:]
        for a, axis in zip(self.thread, self.axes):
            a.name = axis.name
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        launch = self.graph.launch_op
        for op in self.graph.body.ops:  # top-level ops (constants) and the launch
            if op is not launch:
                self.lower_op(op)
        for arg, value in zip(launch.regions[0].args, self.thread):
            self.values[id(arg)] = value
        self.lower_block(launch.regions[0])
        self.b.ret_void()
        return fn

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            if op.opcode != "yield":
                self.lower_op(op)

    def value(self, v: Value) -> ir.Value:
        return self.values[id(v)]

    def lower_op(self, op: Op) -> None:
        special = getattr(self, f"_op_{op.opcode}", None)
        if special is not None:
            special(op)
            return
        rule = LOWER.get(op.opcode)
        if rule is None:
            raise CompileError(f"op {op.opcode} has no LLVM lowering")
        self.values[id(op.result)] = rule(self, op, [self.value(v) for v in op.operands])

    def _op_const(self, op: Op) -> None:
        value = op.attrs["value"]
        self.values[id(op.result)] = ir.Constant(llvm_type(op.result.type), int(value) if not op.result.type.is_float else value)

    # -- run-time checks -------------------------------------------------------------
    def lane(self) -> ir.Value:
        """This thread's linear lane number (x fastest), for error reports."""
        lane, stride = ir.Constant(I64, 0), 1
        for value, axis in zip(self.thread, self.axes):
            lane = self.b.add(lane, self.b.mul(value, ir.Constant(I64, stride)))
            stride *= max(axis.extent, 1)
        return lane

    def check(self, op: Op, ok: ir.Value, kind: int, detail: ir.Value) -> None:
        """Where ``ok`` is false, record the first failure of the launch in the status."""
        fail = self.b.append_basic_block(f"check_fail_{self.ordinals[id(op)]}")
        cont = self.b.append_basic_block(f"check_ok_{self.ordinals[id(op)]}")
        self.b.cbranch(ok, cont, fail).set_weights([1 << 20, 1])  # failures are cold
        self.b.position_at_end(fail)
        word = lambda i: self.b.gep(self.status, [ir.Constant(I64, i)], source_etype=I64, inbounds=True)  # noqa: E731
        result = self.b.cmpxchg(word(0), ir.Constant(I64, 0), ir.Constant(I64, kind), "monotonic", "monotonic")
        won = self.b.extract_value(result, 1)
        with self.b.if_then(won):
            self.b.store(ir.Constant(I64, self.ordinals[id(op)]), word(1))
            self.b.store(detail, word(2))
            self.b.store(self.lane(), word(3))
        self.b.branch(cont)
        self.b.position_at_end(cont)

    def _op_load(self, op: Op) -> None:
        name, ty = op.attrs["buffer"], llvm_type(op.attrs["dtype"])
        idx = self.value(op.operands[0])
        align = 4 if ty is F32 else 8
        if not self.target.checks:
            ptr = self.b.gep(self.buffers[name], [idx], source_etype=ty, inbounds=True)
            self.values[id(op.result)] = self.b.load(ptr, typ=ty, align=align)
            return
        ok = self.b.icmp_unsigned("<", idx, self.counts[name])  # unsigned: negatives fail too
        proven = self.proven.get(id(op))
        if proven is not None:  # the whole loop's range was checked before it: LLVM unswitches on this
            ok = self.b.or_(proven, ok)
        self.check(op, ok, STATUS_LOAD_OOB, idx)
        # a failed thread reads element 0 instead (every buffer has one: see the ABI)
        # and goes on with a zero; no branch, so the loop around stays simple
        safe = self.b.select(ok, idx, ir.Constant(I64, 0))
        ptr = self.b.gep(self.buffers[name], [safe], source_etype=ty, inbounds=True)
        loaded = self.b.load(ptr, typ=ty, align=align)
        self.values[id(op.result)] = self.b.select(ok, loaded, ir.Constant(ty, 0))

    def _op_store(self, op: Op) -> None:
        name, ty = op.attrs["buffer"], llvm_type(op.attrs["dtype"])
        idx, value = (self.value(v) for v in op.operands)
        align = 4 if ty is F32 else 8
        if not self.target.checks:
            ptr = self.b.gep(self.buffers[name], [idx], source_etype=ty, inbounds=True)
            self.b.store(value, ptr, align=align)
            return
        ok = self.b.icmp_unsigned("<", idx, self.counts[name])
        self.check(op, ok, STATUS_STORE_OOB, idx)
        with self.b.if_then(ok):
            ptr = self.b.gep(self.buffers[name], [idx], source_etype=ty, inbounds=True)
            self.b.store(value, ptr, align=align)

    # -- loops ------------------------------------------------------------------------
    def _affine(self, v: Value, iv: Value, inside: set[int]):
        """``v`` as ``coef * iv + sum(multiplier * outer value)``, or None."""
        if v is iv:
            return 1, []
        if id(v) not in inside:
            return 0, [(1, v)]
        op = v.owner
        if not isinstance(op, Op) or op.opcode not in ("add", "sub", "mul"):
            return None  # a region argument (an accumulator) or another op: not affine in i
        parts = [self._affine(x, iv, inside) for x in op.operands]
        if None in parts:
            return None
        (ca, ta), (cb, tb) = parts
        if op.opcode == "add":
            return ca + cb, ta + tb
        if op.opcode == "sub":
            return ca - cb, ta + [(-m, t) for m, t in tb]
        for (c, terms), (other_coef, other) in ((parts[0], parts[1]), (parts[1], parts[0])):
            constant = _constant_term(other) if other_coef == 0 else None
            if constant is not None:  # scaled by a constant: stays affine
                return c * constant, [(m * constant, t) for m, t in terms]
        return None

    def _prove_loads(self, region: Block, start: ir.Value, trips: ir.Value, step: int) -> None:
        """For each load of the loop body whose index is ``base + c * i``, check the first
        and last index of the whole loop once, before it: where both are in bounds
        (and the index cannot wrap between them) every iteration's check is true."""
        b = self.b
        iv = region.args[0]
        inside = {id(a) for a in region.args} | {id(r) for o in region.walk() for r in o.results}
        last = b.add(start, b.mul(b.sub(trips, ir.Constant(I64, 1)), ir.Constant(I64, step)))
        for op in region.ops:
            if op.opcode != "load":
                continue
            form = self._affine(op.operands[0], iv, inside)
            if form is None or abs(form[0]) * abs(step) >= 2**31:
                continue
            coef, terms = form
            base = ir.Constant(I64, 0)
            for m, t in terms:
                base = b.add(base, b.mul(self.value(t), ir.Constant(I64, m)))
            at = lambda i: b.add(base, b.mul(i, ir.Constant(I64, coef)))  # noqa: E731
            first, final = at(start), at(last)
            count = self.counts[op.attrs["buffer"]]
            span = b.sub(final, first) if coef >= 0 else b.sub(first, final)
            # few enough trips that coef * (last - start) cannot wrap (|coef * step| < 2**31)
            short = b.icmp_unsigned("<", trips, ir.Constant(I64, 2**31))
            fits = b.and_(b.and_(b.icmp_unsigned("<", first, count), b.icmp_unsigned("<", final, count)),
                          b.and_(b.icmp_unsigned("<", span, count), short))
            self.proven[id(op)] = b.or_(b.icmp_signed("==", trips, ir.Constant(I64, 0)), fits)

    def _trip_count(self, start: ir.Value, stop: ir.Value, step: int) -> ir.Value:
        """Iterations of ``for (i = start; step > 0 ? i < stop : i > stop; i += step)``,
        computed without overflow (the difference is taken as unsigned)."""
        b = self.b
        lo, hi = (start, stop) if step > 0 else (stop, start)
        nonempty = b.icmp_signed("<", lo, hi)
        span = b.sub(hi, lo)  # fits in u64 whenever lo < hi
        count = b.add(b.udiv(b.sub(span, ir.Constant(I64, 1)), ir.Constant(I64, abs(step))), ir.Constant(I64, 1))
        return b.select(nonempty, count, ir.Constant(I64, 0))

    def _op_fold(self, op: Op) -> None:
        b = self.b
        start, stop, *inits = (self.value(v) for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        trips = self._trip_count(start, stop, step)
        tag = self.ordinals[id(op)]
        if self.target.checks:
            self._prove_loads(region, start, trips, step)
        preheader = b.block
        header = b.append_basic_block(f"fold_{tag}_header")
        body = b.append_basic_block(f"fold_{tag}_body")
        exit_ = b.append_basic_block(f"fold_{tag}_exit")
        b.branch(header)
        b.position_at_end(header)
        counter = b.phi(I64, name=f"trip_{tag}")
        iv = b.phi(I64, name=f"i_{tag}")
        accs = [b.phi(llvm_type(a.type)) for a in region.args[1:]]
        counter.add_incoming(ir.Constant(I64, 0), preheader)
        iv.add_incoming(start, preheader)
        for phi, init in zip(accs, inits):
            phi.add_incoming(init, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, trips), body, exit_)
        b.position_at_end(body)
        self.values[id(region.args[0])] = iv
        for arg, phi in zip(region.args[1:], accs):
            self.values[id(arg)] = phi
        self.lower_block(region)
        latch = b.block
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1)), latch)
        iv.add_incoming(b.add(iv, ir.Constant(I64, step)), latch)  # wraps harmlessly after the last trip
        for phi, v in zip(accs, region.terminator.operands):
            phi.add_incoming(self.value(v), latch)
        b.branch(header)
        b.position_at_end(exit_)
        for result, phi in zip(op.results, accs):
            self.values[id(result)] = phi

    # -- entry points -------------------------------------------------------------------
    def _body_args(self, fn: ir.Function) -> list[ir.Value]:
        return list(fn.args[: 2 * len(self.params) + 1])

    def lower_nvptx_kernel(self, body: ir.Function, block: tuple[int, int, int]) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature()), self.graph.name)
        fn.calling_convention = "ptx_kernel"
        self._mark_buffers(fn)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        inside = ir.Constant(I1, 1)
        indices = []
        for dim, axis in zip("xyz", self.axes):
            sreg = lambda reg: b.zext(b.call(self.declare(f"llvm.nvvm.read.ptx.sreg.{reg}.{dim}", I32, []), []), I64)  # noqa: E731
            idx = b.add(b.mul(sreg("ctaid"), sreg("ntid")), sreg("tid"))
            inside = b.and_(inside, b.icmp_unsigned("<", idx, ir.Constant(I64, axis.extent)))
            indices.append(idx)
        with b.if_then(inside):  # threads past the logical extent do nothing
            b.call(body, self._body_args(fn) + indices)
        b.ret_void()
        # the calling convention marks the kernel for LLVM >= 20; the annotations keep
        # older NVVM readers informed and bound the block size the kernel is built for
        annotations = [("kernel", 1)] + [(f"maxntid{dim}", threads) for dim, threads in zip("xyz", block)]
        for key, number in annotations:
            self.module.add_named_metadata(
                "nvvm.annotations", [fn, ir.MetaDataString(self.module, key), ir.Constant(I32, number)])
        return fn

    def lower_host_launcher(self, body: ir.Function) -> ir.Function:
        """``void name_host(buffers..., counts..., status, lane_begin, lane_end)``."""
        fn = ir.Function(self.module, ir.FunctionType(VOID, self._signature() + [I64, I64]), host_entry_name(self.graph))
        self._mark_buffers(fn)
        begin, end = fn.args[-2:]
        begin.name, end.name = "lane_begin", "lane_end"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        extents = [ir.Constant(I64, max(a.extent, 1)) for a in self.axes]
        # decode the first lane once, then step an odometer (x fastest)
        start, rest = [], begin
        for extent in extents:
            start.append(b.srem(rest, extent))
            rest = b.sdiv(rest, extent)
        entry = b.block
        loop = b.append_basic_block("lanes")
        work = b.append_basic_block("lane")
        done = b.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        lane = b.phi(I64, name="lane")
        coords = [b.phi(I64, name=a.name) for a in self.axes]
        lane.add_incoming(begin, entry)
        for phi, value in zip(coords, start):
            phi.add_incoming(value, entry)
        b.cbranch(b.icmp_signed("<", lane, end), work, done)
        b.position_at_end(work)
        b.call(body, self._body_args(fn) + coords)
        carry = ir.Constant(I1, 1)
        for phi, extent in zip(coords, extents):
            bumped = b.add(phi, b.zext(carry, I64))
            wraps = b.icmp_signed("==", bumped, extent)
            phi.add_incoming(b.select(wraps, ir.Constant(I64, 0), bumped), work)
            carry = b.and_(carry, wraps)
        lane.add_incoming(b.add(lane, ir.Constant(I64, 1)), work)
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn


@attrs.frozen
class LoweredModule:
    """An LLVM module and what the backends need to know about it."""

    module: ir.Module
    entry_name: str
    needs_libdevice: bool
    ordinals: tuple[Op, ...]  # op ordinal (as in the status word) -> op


def lower(graph: Graph, target: Target, block: tuple[int, int, int] = (1, 1, 1)) -> LoweredModule:
    """Lower ``graph`` for ``target``; ``block`` is the launch's block shape (NVPTX hints)."""
    lw = _Lowering(graph, target)
    body = lw.lower_body()
    if target.is_nvptx:
        lw.module.triple = NVPTX_TRIPLE
        entry = lw.lower_nvptx_kernel(body, block).name
    else:
        entry = lw.lower_host_launcher(body).name
    return LoweredModule(lw.module, entry, lw.needs_libdevice, tuple(graph.body.walk()))


def total_lanes(graph: Graph) -> int:
    return math.prod(a.extent for a in graph.axes)


def _constant_term(form) -> int | None:
    """The constant an affine form stands for, if it is exactly one index constant."""
    if len(form) == 1 and form[0][0] == 1:
        owner = form[0][1].owner
        if isinstance(owner, Op) and owner.opcode == "const" and owner.result.type.is_int:
            return owner.attrs["value"]
    return None


def status_error(graph: Graph, ordinals: tuple[Op, ...], status, counts: dict[str, int]) -> Exception | None:
    """The error a non-zero status word stands for, worded as the interpreter words it."""
    kind, ordinal, detail, lane = (int(w) for w in status[:STATUS_WORDS])
    if kind == STATUS_OK:
        return None
    op = ordinals[ordinal]
    thread = thread_text(graph.axes, lane)
    if kind == STATUS_DIV_ZERO:
        return division_by_zero(op, thread)
    return out_of_bounds(op, detail, counts[op.attrs["buffer"]], thread)
