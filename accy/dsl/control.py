"""Loops and branches in the tracing builder: ``fold_range``, ``for_range`` and ``if_``
record regions with their loop-carried values and results (a mixin of
:class:`accy.dsl.builder.Builder`)."""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np

from . import context
from .ir import Block, Value
from .ops import OPS, FoldAttrs, IfAttrs, IfKind
from .traced import BuilderBase, Traced, _LaunchInfo, _NO_CTX, _describe, _error
from .types import INDEX_MAX, boolean, index


class ControlFlow:
    """Regions: loops with accumulators, branches with results."""

    # -- regions -------------------------------------------------------------------
    def _run_body(self, block: Block, body: Callable, args: tuple, *, launch: "_LaunchInfo | None" = None,
                  int_literals: dict | None = None, guard=None, builder: type | None = None):
        # the Builder (or ``builder``, a tile program's): a nested one records into this region
        outer = self._active()
        inner = (builder or type(outer))(block, parent=outer)
        inner.launch_info = launch
        inner.int_literal_accumulators = int_literals or {}
        inner.guard = guard
        if launch is not None:
            launch.body = inner
        try:
            with inner:
                return inner, body(inner, *args)
        finally:
            inner._open = False

    def _yield(self, inner: "BuilderBase", values) -> None:
        inner._open = True
        inner._record("yield", values)
        inner._open = False

    def fold_range(self, start, stop, step, init, ctx: Any = _NO_CTX, body: Callable | None = None):
        """Loop ``i`` from ``start`` while ``i < stop`` (``i > stop`` for a negative
        step), threading ``acc`` through ``body(inner, i, acc[, ctx]) -> new acc``.

        ``init`` is one value or a tuple of values (several loop-carried values);
        the result has the same shape.  ``step`` is a non-zero Python int.
        """
        if body is None:
            body, ctx = ctx, _NO_CTX
        if not callable(body):
            raise _error(f"fold_range: body must be a function (inner, i, acc[, ctx]), got {body!r}")
        if isinstance(init, (tuple, list)) and not init:
            raise _error("fold_range: init must hold at least one value (for a loop without one, use for_range)")
        return self._loop(start, stop, step, init, ctx, body)

    foldRange = fold_range

    def for_range(self, start, stop, step, body: Callable, ctx: Any = _NO_CTX) -> None:
        """Loop ``i`` as ``fold_range`` does, calling ``body(inner, i[, ctx])`` for what it does
        (stores, atomics); nothing is carried from one iteration to the next."""
        if not callable(body):
            raise _error(f"for_range: body must be a function (inner, i[, ctx]), got {body!r}")

        def each(inner, i, accs, *extra):
            result = body(inner, i, *extra)
            done_for_effect = isinstance(result, Traced) and result.value.op is not None \
                and not OPS[result.value.op.opcode].pure
            if result is not None and not done_for_effect:
                raise _error(f"for_range: the body returned {_describe(result)}; it carries nothing from one "
                             "iteration to the next (use fold_range to compute a value)")
            return ()

        self._loop(start, stop, step, (), ctx, each)

    def _loop(self, start, stop, step, init, ctx, body):
        step = self._static_step(step)
        # init first, then bounds: the order the seed's spelling records them in
        multiple = isinstance(init, (tuple, list))
        raw_inits = list(init) if multiple else [init]
        inits = [self._lift(v, None, "fold_range") for v in raw_inits]
        bounds = [self._lift(b, index, "fold_range") for b in (start, stop)]
        for v in bounds + inits:
            self._check_visible("fold_range", v)
        block = Block([index] + [v.type for v in inits])
        accs = [Traced(a) for a in block.args[1:]]
        args = (Traced(block.args[0]), tuple(accs) if multiple else accs[0])
        if ctx is not _NO_CTX:
            args += (ctx,)
        literals = {a: int(raw) for a, raw in zip(block.args[1:], raw_inits)
                    if isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_))}
        guard = ("a fold_range whose bounds depend", tuple(bounds), context.user_location())
        info = self._launch_info()
        if info is not None:  # where the loop's values come from, for the uniformity analysis
            info.sources[block.args[0]] = tuple(bounds)
            for arg, init in zip(block.args[1:], inits):
                info.sources[arg] = (init,)
                info.open_accumulators.add(arg)
        try:
            inner, result = self._run_body(block, body, args, int_literals=literals, guard=guard)
        finally:
            if info is not None:
                info.open_accumulators.difference_update(block.args[1:])
        results = self._check_fold_result(body, result, inits, raw_inits, multiple)
        if info is not None:
            for arg, value in zip(block.args[1:], results):
                info.sources[arg] += (value,)
        self._yield(inner, results)
        op = self._record("fold", (*bounds, *inits), FoldAttrs(step=step), regions=(block,))
        results = tuple(Traced(r) for r in op.results)
        return results if multiple else results[0]

    def _static_step(self, step) -> int:
        if isinstance(step, Traced) and step.value.op is not None and step.value.op.opcode == "const":
            step = step.value.op.attrs.value
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, numbers.Integral):
            raise _error(f"fold_range: step must be a non-zero Python int, got {step!r}")
        step = int(step)
        if step == 0:
            raise _error("fold_range: step must be non-zero")
        if not -INDEX_MAX - 1 <= step <= INDEX_MAX:
            raise _error(f"fold_range: step {step} is outside the index range")
        return step

    def _check_fold_result(self, body, result, inits, raw_inits, multiple) -> list[Value]:
        code = getattr(body, "__code__", None)
        where = f" (body {body.__name__} at line {code.co_firstlineno})" if code else ""
        if multiple and not isinstance(result, (tuple, list)):
            raise _error(f"fold_range{where}: body returned {_describe(result)}, expected a tuple of {len(inits)}")
        results = list(result) if multiple else [result]
        if len(results) != len(inits):
            raise _error(f"fold_range{where}: body returned {len(results)} values, expected {len(inits)}")
        checked = []
        for i, (r, init, raw) in enumerate(zip(results, inits, raw_inits)):
            if not isinstance(r, Traced) and isinstance(r, numbers.Real) and not isinstance(r, (bool, np.bool_)):
                r = Traced(self._lift(r, init.type, "fold_range"))
            if not isinstance(r, Traced) or r.type != init.type:
                got = _describe(r) if r is not None else "None (did the body forget to return?)"
                hint = ""
                if isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_)) \
                        and isinstance(r, Traced) and r.type.is_float:
                    hint = (f": init={raw!r} is a Python int, so the accumulator is index; "
                            f"write init={float(raw)!r} for a float accumulator")
                elif isinstance(raw, numbers.Integral) and not isinstance(raw, (bool, np.bool_)) \
                        and isinstance(r, Traced) and r.type.is_int:
                    hint = (f": init={raw!r} is a Python int, so the accumulator is index; write "
                            f"init=inner.constant({raw!r}, {r.type}) (or a NumPy scalar of that type)")
                raise _error(
                    f"fold_range{where}: body returned {got} for accumulator {i}, "
                    f"expected {init.type} (the type of init){hint}"
                )
            checked.append(r.value)
        return checked

    def if_(self, cond, then: Callable, otherwise: Callable | None = None, *, roles: bool = False):
        """Run ``then(inner)`` where ``cond`` holds, else ``otherwise(inner)``.

        Branches may load, store, loop and nest.  With ``otherwise``, both return
        values of equal types (one value or a tuple), which ``if_`` returns;
        without it, ``then`` returns nothing.  ``roles``: the sides are warps of different
        roles that wait for each other (mbarriers), run concurrently; they return nothing.
        """
        cond = self._lift(cond, boolean, "if_")
        cond = self._check_visible("if_", cond)
        if not cond.type.is_bool:
            raise _error(f"if_: condition is {cond.type}; if_ needs a bool condition (use a comparison)")
        for name, fn in (("then", then), ("otherwise", otherwise)):
            if fn is not None and not callable(fn):
                raise _error(f"if_: {name} must be a function (inner) -> values, got {fn!r}")
        # a roles if_ splits whole warps (its sides' barriers name the threads they wait for)
        guard = ("an if_ whose condition depends", () if roles else (cond,), context.user_location())
        then_block = Block()
        then_inner, then_result = self._run_body(then_block, then, (), guard=guard)
        regions, results = [then_block], []
        if otherwise is None:
            # what an atomic returns is often left over from a lambda: it was done for its effect
            done_for_effect = isinstance(then_result, Traced) and then_result.value.op is not None \
                and not OPS[then_result.value.op.opcode].pure
            if then_result is not None and not done_for_effect:
                raise _error("if_: then returned a value but there is no otherwise; give otherwise=... "
                             "returning values of the same types")
            self._yield(then_inner, ())
        else:
            else_block = Block()
            else_inner, else_result = self._run_body(else_block, otherwise, (), guard=guard)
            results = self._branch_results(then_inner, then_result, else_inner, else_result)
            regions.append(else_block)
        types = tuple(v.type for v in results[0]) if results else ()
        op = self._record("if", (cond,), IfAttrs(results=types, kind=IfKind.ROLES if roles else IfKind.BRANCH),
                          regions=regions)
        out = tuple(Traced(r) for r in op.results)
        if not out:
            return None
        return out if isinstance(then_result, (tuple, list)) else out[0]

    def _branch_results(self, then_inner, then_result, else_inner, else_result):
        def values(result):
            if result is None:
                return []
            return list(result) if isinstance(result, (tuple, list)) else [result]

        then_values, else_values = values(then_result), values(else_result)
        if len(then_values) != len(else_values) or isinstance(then_result, (tuple, list)) != isinstance(
                else_result, (tuple, list)):
            raise _error(f"if_: then returned {len(then_values)} value(s) and otherwise {len(else_values)}; "
                         "both branches must return the same number of values")
        like = [v.type if isinstance(v, Traced) else w.type if isinstance(w, Traced) else None
                for v, w in zip(then_values, else_values)]
        lifted = []
        for inner, vals in ((then_inner, then_values), (else_inner, else_values)):
            inner._open = True
            try:
                lifted.append([inner._check_visible("if_", inner._lift(v, t, "if_")) for v, t in zip(vals, like)])
            finally:
                inner._open = False
        for i, (a, b) in enumerate(zip(*lifted)):
            if a.type != b.type:
                raise _error(f"if_: value {i} is {a.type} in then and {b.type} in otherwise; they must match")
        self._yield(then_inner, lifted[0])
        self._yield(else_inner, lifted[1])
        return lifted
