"""The pass pipeline: every graph-to-graph pass (and analysis) by name, run in the order a
target gives (:attr:`accy.targets.Target.passes`).

A kernel's graph goes through the front end's passes when it is traced (``Program.graph``),
then through its target's: for a tile program on NVPTX, the tile distribution and the front
end's passes again over the SIMT graph it makes; for the host, the planning of its tile
accesses (an analysis: the graph stays as it is, and ``accy ir --after`` prints what it found).
``accy ir KERNEL --passes`` lists a kernel's pipeline, ``--after PASS`` prints the graph after
a pass, and ``ACCY_DUMP_PASSES=DIR`` writes every stage of every pipeline run to ``DIR``.
"""

from __future__ import annotations

import os
import re
from typing import Callable

import attrs

from ..dsl.ir import Graph
from ..dsl.passes import (contract_multiply_adds, eliminate_common_subexpressions, eliminate_dead_code, fold_constants,
                          fold_decided_comparisons, hoist_loop_invariants, verify)
from ..errors import AccyError
from ..targets import Target
from .distribute import distribute
from .strength_reduce import strength_reduce
from .tile_access import describe_plans


@attrs.frozen
class Pass:
    """One pass: ``run(graph, target)`` returns the graph after it; an analysis returns its graph
    as it is and ``report(graph, target)`` says what it found."""

    name: str
    summary: str
    run: Callable[[Graph, Target], Graph]
    report: Callable[[Graph, Target], str] | None = None


def _analysis(graph: Graph, target: Target) -> Graph:
    return graph


def _distribute(graph: Graph, target: Target) -> Graph:
    return distribute(graph, tensor_cores=bool(target.capabilities.mma), shared_bytes=target.limits.dynamic_shared,
                      warpgroups=target.capabilities.wgmma, sms=target.capabilities.sms)


PASSES: dict[str, Pass] = {p.name: p for p in (
    Pass("fold-constants", "evaluate ops whose operands are constants; drop identities (x + 0, x * 1)",
         lambda graph, target: fold_constants(graph)),
    Pass("fold-ranges", "replace index comparisons the value ranges decide (a loop index counted up from 0 is "
         ">= 0) by constants", lambda graph, target: fold_decided_comparisons(graph)),
    Pass("cse", "one op for each set of equal pure ops", lambda graph, target: eliminate_common_subexpressions(graph)),
    Pass("hoist-loop-invariants", "move pure ops that do not depend on a loop out of it",
         lambda graph, target: hoist_loop_invariants(graph)),
    Pass("dce", "drop ops whose results nothing uses and that have no effect",
         lambda graph, target: eliminate_dead_code(graph)),
    Pass("contract", "a single-use f32/f64 product and the add or sub that uses it as one fma, rounded once "
         "(Program.with_fp_fusion(False) skips it)", lambda graph, target: contract_multiply_adds(graph)),
    Pass("verify", "check every op's types, attributes and regions", lambda graph, target: verify(graph)),
    Pass("distribute-tiles", "a tile program as a SIMT block launch of warps: a layout per tile, reductions "
         "across threads, dot on tensor cores where the target has them", _distribute),
    Pass("strength-reduce", "a loop's index products by a stride as values it carries, one add a trip",
         lambda graph, target: strength_reduce(graph)),
    Pass("plan-tile-accesses", "analysis: which tile loads and stores run row by row from an affine form, "
         "and which masks are ranges", _analysis, lambda graph, target: describe_plans(graph)),
)}


@attrs.frozen
class Stage:
    """One step of a kernel's pipeline: ``position`` counts from 1 (``trace`` is 0)."""

    position: int
    name: str
    summary: str
    at_trace: bool  # run when the program is traced (the front end), not when it is compiled


def stages(target: Target, tile: bool) -> tuple[Stage, ...]:
    """The pipeline of a kernel for ``target``: the front end's passes, then the target's (a
    SIMT kernel skips the tile passes)."""
    names = target.passes if tile else target.pipeline
    out = [Stage(0, "trace", "the body's ops as it recorded them", True)]
    for position, name in enumerate(names, 1):
        out.append(Stage(position, name, PASSES[name].summary, position <= len(target.pipeline)))
    return tuple(out)


def find_stage(target: Target, tile: bool, wanted: str) -> Stage:
    """The stage named ``wanted`` (its first, for a pass that runs twice) or at position ``wanted``."""
    all_stages = stages(target, tile)
    for stage in all_stages:
        if wanted in (stage.name, str(stage.position)):
            return stage
    listing = ", ".join(f"{s.position} {s.name}" for s in all_stages)
    raise AccyError(f"no pass {wanted!r} in the {target.name} pipeline of this kernel: {listing}")


def run_passes(graph: Graph, target: Target, names, *, first: int = 1, until: int | None = None) -> Graph:
    """``graph`` through the passes ``names`` (positions ``first`` on, up to ``until``), each
    stage written to ``ACCY_DUMP_PASSES`` when it is set."""
    dump = os.environ.get("ACCY_DUMP_PASSES")
    if dump and first == 1:
        write_stage(dump, graph, target, 0, "trace")
    for position, name in enumerate(names, first):
        if until is not None and position > until:
            break
        graph = PASSES[name].run(graph, target)
        if dump:
            write_stage(dump, graph, target, position, name)
    return graph


def stage_text(graph: Graph, target: Target, name: str) -> str:
    """The graph after pass ``name`` as text, an analysis's report after it."""
    text = graph.text().rstrip("\n") + "\n"
    report = PASSES[name].report if name in PASSES else None  # "trace" is no pass
    return text if report is None else text + report(graph, target) + "\n"


def write_stage(folder: str, graph: Graph, target: Target, position: int, name: str) -> str:
    """``graph`` after pass ``name`` as ``FOLDER/KERNEL.TARGET.NN-NAME.txt`` (an analysis's report after it)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{re.sub(r'[^A-Za-z0-9_]', '_', graph.name)}.{target.name}.{position:02d}-{name}.txt")
    with open(path, "w") as f:
        f.write(stage_text(graph, target, name))
    return path


def lower(graph: Graph, target: Target) -> Graph:
    """The front end's output ``graph`` lowered for ``target``: its tile passes, for a tile program."""
    if not graph.is_tile_launch or not target.tile_pipeline:
        return graph
    return run_passes(graph, target, target.tile_pipeline, first=len(target.pipeline) + 1)
