"""A tile program's ``fold`` and ``if`` in the tile distribution (:mod:`accy.lowering.distribute`):
the tiles they carry flattened to registers in one layout, so no iteration converts them."""

from __future__ import annotations

from ..dsl.ir import Op
from ..dsl.traced import Traced
from ..dsl.types import TileType
from .rebuild import Part, Rebuild
from .registers import Lazy, Registers, Regs
from .scratch import Scratch
from .software_pipeline import SoftwarePipeline
from .tensor_cores import TensorCoreDot


class Regions(Part):
    """``fold`` (software-pipelined where its tensor-core dots allow, see ``pipeline``) and ``if``;
    ``walker`` rewrites their bodies' ops (the distributor)."""

    def __init__(self, core: Rebuild, walker, registers: Registers, scratch: Scratch, dots: TensorCoreDot,
                 pipeline: SoftwarePipeline):
        super().__init__(core)
        self.walker = walker
        self.registers = registers
        self.scratch = scratch
        self.dots = dots
        self.pipeline = pipeline

    def fold(self, op: Op) -> None:
        core, registers, dots = self.core, self.registers, self.dots
        start, stop, *inits = (self.env[v] for v in op.operands)
        region = op.regions[0]
        # a fold whose dots may be pipelined is walked once first, to see how they stage
        candidate = dots.enabled and self.pipeline.num_stages > 1 and any(
            o.opcode == "dot" and dots.mma_kind(o) for o in region.ops)
        if dots.enabled:
            dots.hoist_fragments(region)
        outer, dots.collecting = dots.collecting, ([] if candidate else None)
        try:
            natural = (self.natural_layouts(op, start, inits)
                       if candidate or any(isinstance(x, Lazy) for x in inits) else {})
            collected = dots.collecting
        finally:
            dots.collecting = outer
        layouts = [None if isinstance(x, Traced) else natural.get(i) or registers.regs(x).layout
                   for i, x in enumerate(inits)]
        plan = self.pipeline.plan(op, collected) if candidate else None
        if plan is not None:
            return self.pipeline.fold(op, start, stop, inits, layouts, plan)

        def body(inner, i, accs):
            with core.region(inner):
                self.scratch.dirty = True  # the iteration before may have read the scratch
                self.env[region.args[0]] = i
                registers.unflatten(region.args[1:], accs, layouts)
                results = self.walker.walk(region)
                return tuple(registers.flatten(results, layouts))

        flat = self.b.loop(start, stop, op.attrs.step, tuple(registers.flatten(inits, layouts)), body)
        self.scratch.dirty = True
        registers.unflatten(op.results, flat, layouts)

    def natural_layouts(self, op: Op, start, inits) -> dict:
        """The layouts a fold's body leaves its results in when its carries are its initial
        values (a lazy one, such as a dot's zero accumulator, takes whatever layout its first
        use gives it): carrying each result in that layout, no iteration converts it.  Found by
        walking the body once, then dropping what that recorded."""
        core, scratch = self.core, self.scratch
        ops = self.b.block.ops
        before = {id(o) for o in ops}
        saved, dirty = dict(core.scopes[-1]), scratch.dirty
        sizes = scratch.checkpoint()
        hoisted = self.dots.checkpoint()  # (an inner fold's A read or staged before it: the trial's is dropped)
        region = op.regions[0]
        self.env[region.args[0]] = start
        for arg, x in zip(region.args[1:], inits):
            self.env[arg] = x
        core.scopes.append({})
        try:
            results = self.walker.walk(region)
        finally:
            core.scopes.pop()
        ops[:] = [o for o in ops if id(o) in before or o.opdef.declares_shared]
        scratch.roll_back(sizes)  # the scratch the trial needed is not the loop's
        self.dots.roll_back(hoisted)
        core.scopes[-1].clear()
        core.scopes[-1].update(saved)
        scratch.dirty = dirty
        return {i: r.layout for i, r in enumerate(results) if isinstance(r, Regs)}

    def if_(self, op: Op) -> None:
        core, registers = self.core, self.registers
        cond = self.env[op.operands[0]]
        layouts = [registers.canonical(v.type.shape) if isinstance(v.type, TileType) else None for v in op.results]
        dirty = self.scratch.dirty

        def branch(region):
            def run(inner):
                with core.region(inner):
                    self.scratch.dirty = dirty
                    results = self.walker.walk(region)
                    flat = registers.flatten(results, layouts)
                return tuple(flat) if op.results else None

            return run

        otherwise = branch(op.regions[1]) if len(op.regions) > 1 else None
        out = self.b.if_(cond, branch(op.regions[0]), otherwise)
        self.scratch.dirty = True
        if op.results:
            registers.unflatten(op.results, out, layouts)
