"""Backend comparison as an API: run one kernel on every backend and say where they differ.

``accy.compare(kernel, args)`` runs a program or library entry on each available
backend, each on its own copies of the arguments, and returns a
:class:`CompareReport`: per output and backend pair, the largest absolute and
relative error, how many elements disagree and the first few of them as named
logical coordinates (``b=1 q=3 v=0``), plus the backends that were skipped and why.
"""

from __future__ import annotations

import itertools
import json
from typing import Mapping, Sequence

import attrs
import numpy as np

from .runtime import BACKENDS
from .codegen.nvptx import toolchain
from .runtime.arguments import as_host_array
from .dsl.ops import OPS
from .errors import AccyError, ArgumentError, BackendUnavailableError, CompileError

FIRST = 5  # disagreeing elements listed per output and pair
# computed to within documented ulps, not bit for bit, so backends may differ in the last bits:
# the op table's inexact ops
MATH_FUNCTIONS = frozenset(name for name, d in OPS.items() if d.inexact)


@attrs.frozen
class PairComparison:
    output: str
    backends: tuple[str, str]
    max_abs: float
    max_rel: float
    disagreeing: int
    elements: int
    first: tuple[str, ...]  # named coordinates of the first disagreeing elements

    @property
    def agree(self) -> bool:
        return self.disagreeing == 0


@attrs.frozen
class CompareReport:
    kernel: str
    ran: tuple[str, ...]
    skipped: dict[str, str]  # backend -> why
    failed: dict[str, str]  # backend -> the error it raised
    pairs: tuple[PairComparison, ...]
    rtol: float
    atol: float
    inexact_ops: tuple[str, ...] = ()  # math functions the kernel uses: not bit-identical across backends

    @property
    def agree(self) -> bool:
        return not self.failed and all(p.agree for p in self.pairs)

    def __bool__(self) -> bool:
        return self.agree

    def to_dict(self) -> dict:
        return attrs.asdict(self, recurse=True) | {"agree": self.agree}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        verdict = "agree" if self.agree else "DISAGREE"
        lines = [f"compare {self.kernel}: backends {', '.join(self.ran) or 'none'} {verdict} "
                 f"(rtol={self.rtol:g}, atol={self.atol:g})"]
        header = f"  {'output':10} {'pair':14} {'max abs':>10} {'max rel':>10} {'disagree':>12}  first"
        lines.append(header)
        for p in self.pairs:
            pair = " vs ".join(p.backends)
            count = f"{p.disagreeing}/{p.elements}"
            lines.append(f"  {p.output:10} {pair:14} {p.max_abs:10.3g} {p.max_rel:10.3g} {count:>12}  "
                         + "; ".join(p.first))
        for backend, why in self.failed.items():
            lines.append(f"  {backend}: FAILED: {why}")
        for backend, why in self.skipped.items():
            lines.append(f"  {backend}: skipped: {why}")
        if not self.agree and self.inexact_ops and not self.failed:
            lines.append(f"  note: the kernel uses {', '.join(self.inexact_ops)}, which backends compute to within a few "
                         "ulps, not bit for bit (docs/ir.md); a looser rtol may be what you want")
        return "\n".join(lines)


def unavailable(error: AccyError) -> str | None:
    """Why a backend cannot run here, when ``error`` says that it cannot, else None: a missing
    package or device, or the libdevice that math functions need on NVPTX (``ptx``, ``cuda``)."""
    if isinstance(error, BackendUnavailableError):
        return str(error).split(":")[0]  # the reason; the full message says how to fix it
    if isinstance(error, CompileError) and "libdevice" in str(error) and toolchain.find_libdevice() is None:
        return "its math functions need libdevice, which is not installed (pip install nvidia-cuda-nvcc)"
    return None


def _program_and_shapes(kernel):
    """(program, run function, output axis names per parameter or None)."""
    from .autotune import Autotuned
    from .library.entry import Entry
    from .program import Program

    if isinstance(kernel, Autotuned):  # each backend runs its best config; every config has the same outputs
        return kernel.programs[0], kernel.run, {}
    if isinstance(kernel, Entry):
        return kernel.program, kernel.run, {n: s for n, s in kernel.argument_shapes.items()}
    if isinstance(kernel, Program):
        return kernel, kernel.run, {}
    raise ArgumentError(f"compare: expected a Program, an autotuned kernel or a library Entry, got {type(kernel).__name__}")


def _named(args, params) -> dict[str, np.ndarray]:
    if isinstance(args, Mapping):
        return dict(args)
    if not isinstance(args, Sequence) or len(args) != len(params):
        raise ArgumentError(f"compare: expected {len(params)} arguments ({', '.join(p.name for p in params)})")
    return {p.name: a for p, a in zip(params, args)}


def _coordinates(flat_index: int, name: str, shape, axis_names) -> str:
    if axis_names is not None:
        coords = np.unravel_index(flat_index, axis_names.extents)
        return " ".join(f"{a}={int(c)}" for a, c in zip(axis_names.names, coords))
    if len(shape) > 1:
        return f"{name}[{', '.join(str(int(c)) for c in np.unravel_index(flat_index, shape))}]"
    return f"{name}[{flat_index}]"


def _compare_arrays(name, a, b, pair, rtol, atol, axis_names) -> PairComparison:
    x, y = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    both_nan = np.isnan(x) & np.isnan(y)
    same = (x == y) | both_nan
    with np.errstate(all="ignore"):
        diff = np.where(same, 0.0, np.abs(x - y))
        rel = np.where(same, 0.0, diff / np.maximum(np.abs(y), np.finfo(np.float32).tiny))
    bad = ~same & ~(diff <= atol + rtol * np.abs(y))
    where = np.flatnonzero(bad)
    first = tuple(_coordinates(int(i), name, a.shape, axis_names) + f" ({x[i]:.6g} vs {y[i]:.6g})"
                  for i in where[:FIRST])
    finite = np.isfinite(diff)
    return PairComparison(name, pair, float(diff[finite].max(initial=0.0)), float(rel[finite].max(initial=0.0)),
                          int(where.size), int(x.size), first)


def _copy(name: str, a):
    """A host copy of an argument for one backend to write: a tensor of another library (torch,
    JAX, a DLPack producer; bf16 and fp8 too) through the CPU backends' own view of it (a CUDA
    tensor is an error naming its device: the copies are compared on the host)."""
    if hasattr(a, "__dlpack__") or hasattr(a, "__cuda_array_interface__"):
        return as_host_array(name, a).copy()
    return np.array(a, copy=True)


def compare(kernel, args, backends: Sequence[str] = BACKENDS, *, rtol: float = 1e-5, atol: float = 1e-6,
            options: Mapping[str, dict] | None = None) -> CompareReport:
    """Run ``kernel`` on each of ``backends`` (on copies of ``args``) and compare the outputs.

    ``options`` gives per-backend run options, e.g. ``{"llvm": {"checks": False}}``.
    """
    program, run, shapes = _program_and_shapes(kernel)
    named = _named(args, program.call_order)  # a tensor is one argument
    program, arrays = program.specialized_for(named)  # the graph of the constexpr values passed
    outputs = sorted(program.graph.stored_buffers())
    results, skipped, failed = {}, {}, {}
    for backend in backends:
        copies = {n: _copy(n, a) if n in arrays else a for n, a in named.items()}  # a constexpr as it was
        try:
            run(copies, backend=backend, **(options or {}).get(backend, {}))
        except AccyError as e:
            why = unavailable(e)
            if why is not None:
                skipped[backend] = why
            else:
                failed[backend] = f"{type(e).__name__}: {e}"
            continue
        results[backend] = copies
    pairs = tuple(
        _compare_arrays(out, results[a][out], results[b][out], (a, b), rtol, atol, shapes.get(out))
        for out in outputs for a, b in itertools.combinations(results, 2)
    )
    inexact = tuple(sorted({op.opcode for op in program.graph.body.walk() if op.opdef.inexact}))
    return CompareReport(program.name, tuple(results), skipped, failed, pairs, rtol, atol, inexact)
