"""The SASS a GPU would run, read without a GPU: ptxas assembles a kernel's PTX, nvdisasm
(PyPI ``nvidia-cuda-nvdisasm``, the bench extra) disassembles it, and this module finds the
kernel's main loop and counts what one trip of it issues.

A trip is counted on the path an in-bounds program takes: from the loop's head to its
back edge, through none of the blocks that report a failed check (those holding the status
word's atomic compare-and-swap), taking at each remaining fork the side of the steady
state: the one with the most tensor-core, ``ldmatrix`` and asynchronous-copy instructions
(a prefetch for a later trip is issued; a fast interior path beats an element-by-element
edge path), and of those the one with the fewest instructions.  NOPs and
never-executed ``@!PT`` instructions are padding and not counted.  The main loop is the
innermost loop with the most tensor-core instructions (else the most instructions)."""

from __future__ import annotations

import enum
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter

import attrs

from ...errors import CompileError
from .toolchain import _roots, assemble


@functools.cache
def find_nvdisasm() -> str | None:
    """Path of an ``nvdisasm`` binary, or None."""
    for root in _roots():
        candidate = os.path.join(root, "bin", "nvdisasm")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes) -> str:
    """nvdisasm's listing of ``cubin`` (no GPU needed)."""
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        raise CompileError("nvdisasm not found: pip install nvidia-cuda-nvdisasm (accy's bench extra does)")
    with tempfile.TemporaryDirectory(prefix="accy-nvdisasm-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        result = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True)
    if result.returncode != 0:
        raise CompileError(f"nvdisasm failed: {result.stderr.strip()}")
    return result.stdout


class Kind(enum.Enum):
    """What an instruction does, for the mix a trip reports."""

    TENSOR = "tensor core"  # HMMA, HGMMA, IMMA
    LDSM = "ldmatrix"
    ASYNC_COPY = "async copy"  # LDGSTS, its commit/wait (LDGDEPBAR, DEPBAR), TMA
    SHARED = "shared load/store"
    GLOBAL = "global load/store"
    BARRIER = "barrier"
    FLOAT = "fp32 arithmetic"
    CONVERT = "conversion"
    INTEGER = "integer/address"
    PREDICATE = "predicate"
    BRANCH = "branch/reconvergence"
    OTHER = "other"


_KINDS = [
    (Kind.TENSOR, ("HMMA", "HGMMA", "IMMA", "WARPGROUP")),
    (Kind.LDSM, ("LDSM",)),
    (Kind.ASYNC_COPY, ("LDGSTS", "LDGDEPBAR", "DEPBAR", "UBLKCP", "UTMALDG", "UTMASTG", "SYNCS", "ARRIVES")),
    (Kind.SHARED, ("LDS", "STS", "ATOMS")),
    (Kind.GLOBAL, ("LDG", "STG", "ATOMG", "RED", "LD", "ST")),
    (Kind.BARRIER, ("BAR", "MEMBAR", "WARPSYNC")),
    (Kind.FLOAT, ("FFMA", "FADD", "FMUL", "FMNMX", "FSEL", "FSETP", "MUFU", "FCHK", "HFMA2", "HADD2", "HMUL2",
                  "FSWZADD")),
    (Kind.CONVERT, ("F2F", "F2FP", "I2F", "F2I", "I2FP", "F2IP", "FRND")),
    (Kind.PREDICATE, ("ISETP", "PLOP3", "P2R", "R2P", "PSETP", "VOTE")),
    (Kind.BRANCH, ("BRA", "BSSY", "BSYNC", "EXIT", "RET", "CALL", "JMP", "BREAK", "WARPSYNC")),
    (Kind.INTEGER, ("IMAD", "IADD3", "LEA", "LOP3", "SHF", "SEL", "PRMT", "MOV", "IABS", "IMNMX", "CS2R", "S2R",
                    "S2UR", "UIADD3", "UMOV", "ULDC", "USHF", "ULOP3", "UIMAD", "ULEA", "USEL", "UISETP", "IMUL",
                    "FLO", "POPC", "BREV", "SGXT", "BMSK", "R2UR", "VIADD", "VIMNMX")),
]
_KIND_OF = {name: kind for kind, names in _KINDS for name in names}


# the work a steady-state trip does: at a fork the path takes the side with the most of it
_STAPLE = (Kind.TENSOR, Kind.LDSM, Kind.ASYNC_COPY)


@attrs.frozen
class Instruction:
    """One SASS instruction: its byte address, guard (``@P0``, ``@!PT``; None if none),
    opcode with modifiers (``HMMA.16816.F32.BF16``) and operands; ``target`` the label of a
    branch."""

    address: int
    guard: str | None
    opcode: str
    operands: str
    target: str | None

    @property
    def base(self) -> str:
        return self.opcode.split(".")[0]

    @property
    def kind(self) -> Kind:
        return _KIND_OF.get(self.base, Kind.OTHER)

    @property
    def padding(self) -> bool:
        """Never issued usefully: a NOP, or guarded by the always-false ``!PT``."""
        return self.base == "NOP" or self.guard == "@!PT"

    @property
    def reports(self) -> bool:
        """Writes accy's status word (a failed check): a global compare-and-swap."""
        return self.base == "ATOMG" and ".CAS" in self.opcode

    @property
    def mma_units(self) -> float:
        """Its tensor-core work in m16n8k16 products per warp: ``HMMA.16816`` 1, ``.1688`` 1/2;
        a warpgroup's ``HGMMA.64xNxK`` (its four warps each issue it) 64 N K / (2048 * 4)."""
        if self.kind is not Kind.TENSOR:
            return 0.0
        parts = self.opcode.split(".")
        if parts[0] == "HGMMA":
            m, n, k = (int(x) for x in parts[1].split("x"))
            return m * n * k / (16 * 8 * 16) / 4
        if parts[0] == "HMMA" and len(parts) > 1 and parts[1].isdigit():
            m, n, k = int(parts[1][:2]), int(parts[1][2]), int(parts[1][3:])
            return m * n * k / (16 * 8 * 16)
        return 1.0

    @property
    def ends_block(self) -> bool:
        return self.base in ("BRA", "EXIT", "RET", "JMP", "BREAK")


_LINE = re.compile(r"\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+|\.L_\w+):")
_FUNCTION = re.compile(r"^\s*\.text\.(\S+):")
_TARGET = re.compile(r"`\((\.L\w+)\)")


@attrs.frozen
class Function:
    """One kernel's SASS: its instructions in address order and its labels (name -> index
    of the instruction they stand before)."""

    name: str
    instructions: tuple[Instruction, ...]
    labels: dict[str, int]


def parse(listing: str) -> list[Function]:
    """The functions of an nvdisasm listing."""
    functions, name, instructions, labels = [], None, [], {}

    def close():
        if name is not None:
            functions.append(Function(name, tuple(instructions), dict(labels)))

    for line in listing.splitlines():
        if m := _FUNCTION.match(line):
            close()
            name, instructions, labels = m.group(1), [], {}
        elif m := _LABEL.match(line.strip()):
            labels[m.group(1)] = len(instructions)
        elif name is not None and (m := _LINE.match(line)):
            target = _TARGET.search(m.group(4))
            instructions.append(Instruction(int(m.group(1), 16), m.group(2).strip() if m.group(2) else None,
                                            m.group(3), m.group(4), target.group(1) if target else None))
    close()
    return functions


@attrs.frozen
class Trip:
    """One trip of a kernel's main loop on the in-bounds path: its instructions and, for
    comparison, the whole loop's (every path)."""

    path: tuple[Instruction, ...]
    loop_size: int  # instructions in the loop's body, every path, padding excepted
    forks: int  # blocks on the path with two hot successors (a side chosen)

    @property
    def count(self) -> int:
        return len(self.path)

    @property
    def tensor(self) -> int:
        """Tensor-core instructions on the path."""
        return sum(i.kind is Kind.TENSOR for i in self.path)

    @property
    def mma_units(self) -> float:
        """The path's tensor-core work in m16n8k16 products per warp (:attr:`Instruction.mma_units`)."""
        return sum(i.mma_units for i in self.path)

    def mix(self) -> dict[Kind, int]:
        counts = Counter(i.kind for i in self.path)
        return {kind: counts[kind] for kind in Kind if counts[kind]}


def _blocks(fn: Function) -> list[tuple[int, int]]:
    """Basic blocks as [start, end) index ranges."""
    leaders = {0, *fn.labels.values()}
    for i, ins in enumerate(fn.instructions):
        if ins.base in ("BRA", "EXIT", "RET", "JMP", "BREAK", "BSSY", "BSYNC", "CALL"):
            leaders.add(i + 1)
    starts = sorted(s for s in leaders if s < len(fn.instructions))
    return list(zip(starts, starts[1:] + [len(fn.instructions)]))


def main_loop(fn: Function) -> Trip | None:
    """The trip of ``fn``'s main loop (module docstring), or None if it has no loop."""
    ins = fn.instructions
    loops = [(fn.labels[i.target], n) for n, i in enumerate(ins)
             if i.base == "BRA" and i.target in fn.labels and fn.labels[i.target] <= n]
    if not loops:
        return None

    def weight(loop):
        head, latch = loop
        body = ins[head:latch + 1]
        return (sum(i.kind is Kind.TENSOR for i in body), -(latch - head)) if any(
            i.kind is Kind.TENSOR for i in body) else (0, latch - head)

    head, latch = max(loops, key=weight)
    blocks = [b for b in _blocks(fn) if head <= b[0] <= latch]
    start_of = {s: k for k, (s, _) in enumerate(blocks)}

    def successors(k: int) -> list[int]:
        s, e = blocks[k]
        last = ins[e - 1]
        out = []
        if last.base == "BRA" and last.target in fn.labels and e - 1 != latch:
            t = fn.labels[last.target]
            if t in start_of and t > s:  # forward within the loop (an inner loop's back edge is not followed)
                out.append(start_of[t])
        unconditional = last.base in ("EXIT", "RET", "JMP", "BREAK") or (last.base == "BRA" and last.guard is None)
        if not unconditional and e - 1 != latch and e in start_of:
            out.append(start_of[e])
        return out

    cold = {k for k, (s, e) in enumerate(blocks) if any(i.reports for i in ins[s:e])}
    # a block's cost: minus its staple work, then its instructions (module docstring)
    cost = [(-sum(i.kind in _STAPLE for i in ins[s:e]), sum(not i.padding for i in ins[s:e])) for s, e in blocks]
    goal = next(k for k, (s, e) in enumerate(blocks) if s <= latch < e)
    best, came = {0: cost[0]}, {}
    for k in range(len(blocks)):  # forward edges only: block order is topological
        if k not in best or k in cold:
            continue
        for n in successors(k):
            if n in cold:
                continue
            c = (best[k][0] + cost[n][0], best[k][1] + cost[n][1])
            if c < best.get(n, (1, 0)):
                best[n], came[n] = c, k
    if goal not in best:
        return None
    path, k = [goal], goal
    while k != 0:
        k = came[k]
        path.append(k)
    path.reverse()
    chosen = tuple(i for k in path for i in ins[blocks[k][0]:blocks[k][1]] if not i.padding)
    forks = sum(1 for k in path if len([n for n in successors(k) if n not in cold]) > 1)
    loop_size = sum(not i.padding for i in ins[head:latch + 1])
    return Trip(chosen, loop_size, forks)


@attrs.frozen
class SassReport:
    """What one kernel's SASS costs: its size and its main loop's trip."""

    arch: str
    name: str
    instructions: int  # the whole kernel, padding excepted
    trip: Trip | None


def sass_report(ptx: str, arch: str) -> SassReport:
    """Assemble ``ptx`` for ``arch``, disassemble it and count its first kernel's SASS."""
    functions = parse(disassemble(assemble(ptx, arch)))
    if not functions:
        raise CompileError("nvdisasm listed no function")
    fn = functions[0]
    return SassReport(arch, fn.name, sum(not i.padding for i in fn.instructions), main_loop(fn))
