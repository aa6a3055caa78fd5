"""The SIMT interpreter's control flow: ``if_`` regions and folds (vectorised, uniform or
divergent, as :mod:`.simt` describes), with the fold plans that choose between them.  A
:class:`SimtControl` holds the fold plans and memory cap of one launch and runs the regions
through its :class:`~.simt.Interpreter`, which owns the values and the active lanes."""

from __future__ import annotations

import math

import attrs
import numpy as np

from ...dsl.ir import Block, Op, Value
from ...dsl.ops import REDUCTIONS, IfKind
from . import numerics
from .pointwise import EVAL, WIDE
from .shared import branch_values, divergent_fold
from .roles import Roles


@attrs.frozen
class _FoldPlan:
    """How to run one fold op: ``combines`` is None unless it can be vectorised;
    then entry j says how accumulator j takes its term (the other operand)."""

    combines: tuple[tuple[object, Value], ...] | None  # (combine function for its dtype, the term value)
    combine_ops: frozenset[Op]  # the combining ops themselves: applied after, not in, the body
    local_terms: frozenset[Value]  # the terms the body itself defines (dead once folded)
    body_ops: int  # ops in the body, nested regions included (sizes chunks)
    captured: tuple[Value, ...]  # the outer values the body reads (bound its shapes)


def uses(block: Block) -> set[Value]:
    """Every value an op in ``block`` (or below) reads."""
    return {v for op in block.walk() for v in op.operands}


_COMBINES = {name: EVAL[name] for name in REDUCTIONS.values()}
# a fold whose body writes memory or cooperates runs iteration by iteration
_NOT_VECTORISED = frozenset({"store", "atomic", "barrier", "shuffle", "mbarrier_init", "mbarrier_arrive",
                             "mbarrier_wait", "tma_load"})


def fold_plan(op: Op) -> _FoldPlan:
    (region,) = op.regions
    body_ops = sum(1 for _ in region.walk())
    defined = set(region.args)
    for inner in region.walk():
        defined.update(inner.results)
        defined.update(a for nested in inner.regions for a in nested.args)
    captured = tuple(sorted(uses(region) - defined, key=id))
    plain = _FoldPlan(None, frozenset(), frozenset(), body_ops, captured)
    if any(inner.opcode in _NOT_VECTORISED for inner in region.walk()):
        return plain
    accs = set(region.args[1:])
    tainted = set(accs)  # values that depend on a loop-carried value
    for inner in region.ops:
        reads = set(inner.operands)
        for nested in inner.regions:
            reads |= uses(nested)
        if reads & tainted:
            tainted.update(inner.results)
    combines, combine_ops = [], set()
    for acc, y in zip(region.args[1:], region.terminator.operands):
        owner = y.op
        if owner is None or owner.opcode not in _COMBINES or owner.block is not region:
            return plain
        a, b = owner.operands
        term = b if a is acc else a if b is acc else None
        if term is None or term in tainted:
            return plain
        combine = _COMBINES[owner.opcode]
        if not numerics._narrow(acc.type.numpy):
            combine = WIDE.get(combine, combine)  # a ufunc then folds in place
        combines.append((combine, term))
        combine_ops.add(owner)
    local = frozenset(t for _, t in combines if t in defined)  # not from outside the body
    return _FoldPlan(tuple(combines), frozenset(combine_ops), local, body_ops, captured)


class SimtControl:
    """Branches and folds of one launch: runs their regions on ``interpreter`` under the active
    lanes that take them (``plans``: per fold op, how it may run; none: every fold loops)."""

    def __init__(self, interpreter, plans: dict[Op, _FoldPlan], memory_cap: int):
        self.interpreter = interpreter
        self.plans = plans
        self.memory_cap = memory_cap  # bytes of temporaries a vectorised fold may hold
        self.leading = 0  # iteration axes of enclosing vectorised folds, in front of the grid's

    # -- branches ------------------------------------------------------------------
    def _region_values(self, region: Block):
        self.interpreter.run_block(region)
        return [self.interpreter.env[v] for v in region.terminator.operands]

    def op_if(self, op: Op) -> None:
        run = self.interpreter
        then, otherwise = op.regions[0], (op.regions[1] if len(op.regions) > 1 else None)
        if op.attrs.kind is IfKind.ROLES:
            self._roles(op, run.env[op.operands[0]], then, otherwise)
            return
        values = branch_values(run, run.env[op.operands[0]], then, otherwise, self._region_values, np.where)
        for r, value in zip(op.results, values):
            run.env[r] = value

    def _roles(self, op: Op, cond, then: Block, otherwise: Block | None) -> None:
        """The sides of a roles ``if``, each under its lanes, as coroutines (:mod:`.roles`)."""
        run = self.interpreter
        outer = run.active
        cond = np.broadcast_to(cond, run.grid) if np.ndim(cond) == 0 else cond
        sides = [(then, cond if outer is None else cond & outer)]
        if otherwise is not None:
            sides.append((otherwise, ~cond if outer is None else ~cond & outer))

        def side(region, mask):
            def go():
                if np.any(mask):
                    run.active = mask
                    run.run_block(region)
            return go

        run.roles = Roles()
        try:
            run.roles.run([side(region, mask) for region, mask in sides])
        finally:
            run.roles = None
            run.active = outer

    # -- folds -------------------------------------------------------------------
    def op_fold(self, op: Op) -> None:
        env = self.interpreter.env
        start, stop, *inits = (env[v] for v in op.operands)
        step = op.attrs["step"]
        (region,) = op.regions
        uniform = np.ndim(start) == 0 and np.ndim(stop) == 0
        plan = self.plans.get(op)
        if uniform and plan is not None and plan.combines is not None:
            results = self._vectorised_fold(range(int(start), int(stop), step), region, plan, inits)
        elif uniform:
            results = self._uniform_fold(range(int(start), int(stop), step), region, inits)
        else:
            results = self._divergent_fold(start, stop, step, region, inits)
        for r, value in zip(op.results, results):
            env[r] = value

    def _iterate(self, region: Block, i, accs_values, skip: frozenset[Op] = frozenset()):
        run = self.interpreter
        env, observer = run.env, run.observer
        env[region.args[0]] = i
        for a, v in zip(region.args[1:], accs_values):
            env[a] = v
        if observer is not None and np.ndim(i) == 0:
            observer.enter(region.parent, int(i))
        try:
            run.run_block(region, skip)
        finally:
            if observer is not None and np.ndim(i) == 0:
                observer.leave()
        return None if skip else [env[y] for y in region.terminator.operands]

    def _uniform_fold(self, trips: range, region: Block, accs):
        for i in trips:
            accs = self._iterate(region, np.int64(i), accs)
        return accs

    def _vectorised_fold(self, trips: range, region: Block, plan: _FoldPlan, accs):
        if not trips:
            return accs
        env = self.interpreter.env
        rank = self.leading + len(self.interpreter.grid)  # the iteration axis goes in front of all current ones
        # every value in the body broadcasts to at most the shape of what it reads from outside
        bound = np.broadcast_shapes(*(np.shape(env[c]) for c in plan.captured), *(np.shape(a) for a in accs))
        per_iteration = 8 * max(plan.body_ops, 1) * max(math.prod(bound), 1)
        chunk = max(1, min(len(trips), self.memory_cap // per_iteration))
        accs = list(accs)
        self.leading += 1
        try:
            for first in range(0, len(trips), chunk):
                part = trips[first:first + chunk]
                i = np.arange(part.start, part.stop, part.step, dtype=np.int64).reshape((len(part),) + (1,) * rank)
                self._iterate(region, i, accs, plan.combine_ops)
                for j, ((combine, term), acc) in enumerate(zip(plan.combines, accs)):
                    terms = env[term]
                    shape = np.broadcast_shapes((len(part),) + (1,) * rank, np.shape(terms), np.shape(acc))
                    total = np.array(np.broadcast_to(acc, shape[1:]))
                    in_place = isinstance(combine, np.ufunc)  # no fresh array (and pages) per iteration
                    for t in np.broadcast_to(terms, shape):  # in iteration order: rounds as a loop does
                        if in_place:
                            combine(total, t, out=total)
                        else:
                            total = np.asarray(combine(total, t)).astype(total.dtype, copy=False)
                    accs[j] = total
                for t in plan.local_terms:  # dead once folded: free them before the next chunk
                    del env[t]
        finally:
            self.leading -= 1
        return accs

    def _divergent_fold(self, start, stop, step, region: Block, accs):
        return divergent_fold(self.interpreter, start, stop, step, lambda i, a: self._iterate(region, i, a), accs,
                              np.where)
