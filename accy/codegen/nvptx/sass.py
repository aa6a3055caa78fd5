"""The SASS a GPU would run, read without a GPU: ptxas assembles a kernel's PTX, nvdisasm
(PyPI ``nvidia-cuda-nvdisasm``, the bench extra) disassembles it, and this module finds the
kernel's main loop and counts what one trip of it issues.

A trip is counted on the path an in-bounds program takes: from the loop's head to its
back edge, through none of the blocks that report a failed check (those holding the status
word's atomic compare-and-swap), taking at each remaining fork the side of the steady
state: the one with the most tensor-core, ``ldmatrix`` and asynchronous-copy instructions
(a prefetch for a later trip is issued; a fast interior path beats an element-by-element
edge path), then the one that moves the most bytes through global and shared memory (a
prefetch by plain loads and stores, as a Triton-style masked load's, is not skipped),
then the one with the fewest instructions (vector loads beat element loads of the same
bytes).  NOPs and
never-executed ``@!PT`` and ``@!UPT`` instructions are padding and not counted.  The main loop is the
innermost loop with the most tensor-core instructions (else the most instructions)."""

from __future__ import annotations

import enum
import os
import re
import subprocess
import tempfile
from collections import Counter

import attrs

from ...errors import CompileError
from .toolchain import assemble, find_nvdisasm


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
# PTX's opcodes (lower case; a load or store by its state space, below)
_PTX_KINDS = {"mma": Kind.TENSOR, "wgmma": Kind.TENSOR, "ldmatrix": Kind.LDSM, "cp": Kind.ASYNC_COPY,
              "bar": Kind.BARRIER, "barrier": Kind.BARRIER, "membar": Kind.BARRIER, "fence": Kind.BARRIER,
              "cvt": Kind.CONVERT, "setp": Kind.PREDICATE, "selp": Kind.INTEGER, "bra": Kind.BRANCH,
              "ret": Kind.BRANCH, "exit": Kind.BRANCH, "call": Kind.BRANCH}
_PTX_FLOAT = (".f32", ".f64", ".f16", ".bf16", ".f16x2", ".bf16x2")
_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")
_SASS_WIDTHS = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}  # a load's or store's width
_PTX_TYPE = re.compile(r"(?:b|s|u|f|bf)(8|16|32|64)")  # .b16, .u32, .f64, .bf16: a load's or store's type


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
    def ptx(self) -> bool:
        """A PTX instruction (lower-case opcodes), not SASS."""
        return self.base.islower()

    @property
    def kind(self) -> Kind:
        if not self.ptx:
            return _KIND_OF.get(self.base, Kind.OTHER)
        if self.base in _PTX_KINDS:
            return _PTX_KINDS[self.base]
        if self.base in ("ld", "st", "atom", "red"):
            return Kind.SHARED if ".shared" in self.opcode else Kind.GLOBAL
        return Kind.FLOAT if self.opcode.endswith(_PTX_FLOAT) else Kind.INTEGER

    @property
    def padding(self) -> bool:
        """Never issued usefully: a NOP, or guarded by the always-false ``!PT`` (or its uniform
        datapath's ``!UPT``: ptxas's ``@!UPT UIADD3 URZ, ...`` filler)."""
        return self.base == "NOP" or self.guard in ("@!PT", "@!UPT")

    @property
    def reports(self) -> bool:
        """Writes accy's status word (a failed check): a global compare-and-swap."""
        if self.ptx:
            return self.base == "atom" and ".global" in self.opcode and ".cas" in self.opcode
        return self.base == "ATOMG" and ".CAS" in self.opcode

    @property
    def mma_units(self) -> float:
        """Its tensor-core work in m16n8k16 products per warp: ``HMMA.16816`` 1, ``.1688`` 1/2;
        a warpgroup's ``HGMMA.64xNxK`` (its four warps each issue it) 64 N K / (2048 * 4)."""
        if self.kind is not Kind.TENSOR:
            return 0.0
        if self.ptx:  # mma.sync.aligned.m16n8k16..., wgmma.mma_async...m64n128k16 (a warpgroup's)
            shape = _SHAPE.search(self.opcode)
            if shape is None:  # wgmma.fence, commit_group, wait_group: no products
                return 0.0
            m, n, k = (int(x) for x in shape.groups())
            return m * n * k / (16 * 8 * 16) / (4 if self.base == "wgmma" else 1)
        parts = self.opcode.split(".")
        if parts[0] == "HGMMA":
            m, n, k = (int(x) for x in parts[1].split("x"))
            return m * n * k / (16 * 8 * 16) / 4
        if parts[0] == "HMMA" and len(parts) > 1 and parts[1].isdigit():
            m, n, k = int(parts[1][:2]), int(parts[1][2]), int(parts[1][3:])
            return m * n * k / (16 * 8 * 16)
        return 1.0

    @property
    def bytes(self) -> int:
        """Bytes one lane moves through global or shared memory (0 for other instructions):
        the width its modifiers give (SASS ``.128``, ``.U16``; PTX ``.v4``, ``.b16``), else 4."""
        if self.kind not in (Kind.GLOBAL, Kind.SHARED):
            return 0
        parts = self.opcode.split(".")
        if self.ptx:
            lanes = next((int(p[1:]) for p in parts if p in ("v2", "v4", "v8")), 1)
            width = next((int(m.group(1)) // 8 for p in reversed(parts) if (m := _PTX_TYPE.fullmatch(p))), 4)
            return lanes * width
        return next((_SASS_WIDTHS[p] for p in parts if p in _SASS_WIDTHS), 4)

    @property
    def branch(self) -> bool:
        return self.base in ("BRA", "bra")

    @property
    def unconditional_end(self) -> bool:
        """Nothing runs after it in its block: a return, an exit or a branch without a guard."""
        ends = self.base in ("EXIT", "RET", "JMP", "BREAK", "ret", "exit", "trap") or self.branch
        return ends and self.guard in (None, "@PT")


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


_PTX_LABEL = re.compile(r"^(\$?[A-Za-z_][\w$]*):$")
_PTX_STATEMENT = re.compile(r"^(@!?%\w+\s+)?([a-z][\w.]*)\s*(.*)$", re.S)
_PTX_TARGET = re.compile(r"^(\$?[A-Za-z_][\w$]*)$")


def parse_ptx(ptx: str) -> list[Function]:
    """The entry functions of a PTX module as :class:`Function` s (addresses: statement
    numbers), for the same loop and trip analysis as SASS (:func:`main_loop`)."""
    functions, name, statements, labels, depth = [], None, [], {}, 0
    pending = ""
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if not line:
            continue
        entry = re.match(r"^\.(?:visible\s+)?\.?entry\s+(\w+)|^\.visible\s+\.entry\s+(\w+)", line)
        if entry and depth == 0:
            name, statements, labels = entry.group(1) or entry.group(2), [], {}
            continue
        if name is None:
            continue
        if line == "{":  # a scope (an operand list's braces share a line with its registers)
            depth += 1
            pending = "" if depth == 1 else pending  # the parameter list's ")" ends there
            continue
        if line == "}":
            depth -= 1
            if depth == 0:
                functions.append(Function(name, tuple(statements), dict(labels)))
                name = None
            continue
        if m := _PTX_LABEL.match(line):
            labels[m.group(1)] = len(statements)
            continue
        if line.startswith(".") and not pending:  # .reg, .loc, .pragma and other directives
            continue
        pending = f"{pending} {line}".strip()
        if not pending.endswith(";"):
            continue
        m = _PTX_STATEMENT.match(pending[:-1].strip())
        pending = ""
        if m is None:
            continue
        guard, opcode, operands = m.group(1), m.group(2), m.group(3).strip()
        target = _PTX_TARGET.match(operands) if opcode.startswith("bra") else None
        statements.append(Instruction(len(statements), guard.strip() if guard else None, opcode, operands,
                                      target.group(1) if target else None))
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
        if ins.branch or ins.unconditional_end or ins.base in ("BSSY", "BSYNC", "CALL"):
            leaders.add(i + 1)
    starts = sorted(s for s in leaders if s < len(fn.instructions))
    return list(zip(starts, starts[1:] + [len(fn.instructions)]))


def _cfg(fn: Function) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks as [start, end) index ranges, and each one's successors."""
    blocks = _blocks(fn)
    start_of = {s: k for k, (s, _) in enumerate(blocks)}
    succ = []
    for k, (s, e) in enumerate(blocks):
        last, out = fn.instructions[e - 1], []
        if last.branch and last.target in fn.labels and fn.labels[last.target] in start_of:
            out.append(start_of[fn.labels[last.target]])
        if not last.unconditional_end and e in start_of:
            out.append(start_of[e])
        succ.append(out)
    return blocks, succ


def _natural_loop(succ: list[list[int]], head: int, latch: int) -> set[int]:
    """The blocks of the loop whose back edge goes from ``latch`` to ``head``: those that reach
    the latch without passing the head."""
    preds: dict[int, list[int]] = {}
    for k, out in enumerate(succ):
        for n in out:
            preds.setdefault(n, []).append(k)
    body, stack = {head}, [latch]
    while stack:
        k = stack.pop()
        if k not in body:
            body.add(k)
            stack.extend(preds.get(k, ()))
    return body


def _depth_first(succ: list[list[int]], root: int, inside=lambda k: True, skip=()) -> tuple[list[int], list]:
    """Blocks reached from ``root`` (through ``inside`` blocks, never entering ``skip``) in
    reverse postorder (a topological order once back edges are left out), and the back edges
    (to a block still on the search's stack)."""
    post, back, state = [], [], {root: 1}  # 1: on the stack, 2: done
    stack = [(root, iter(succ[root]))]
    while stack:
        k, it = stack[-1]
        n = next(it, None)
        if n is None:
            stack.pop()
            state[k] = 2
            post.append(k)
        elif n in skip or not inside(n):
            continue
        elif state.get(n) == 1:
            back.append((k, n))
        elif n not in state:
            state[n] = 1
            stack.append((n, iter(succ[n])))
    return post[::-1], back


def main_loop(fn: Function) -> Trip | None:
    """The trip of ``fn``'s main loop (module docstring), or None if it has no loop.  A loop is
    a head and the natural loops of its back edges, wherever their blocks were placed (LLVM
    may place a latch before its head, ptxas a cold block after the loop), walked as a DAG
    from the head to the best of its latches."""
    ins = fn.instructions
    blocks, succ = _cfg(fn)
    _, back = _depth_first(succ, 0)
    heads: dict[int, tuple[set, set]] = {}
    for latch, head in back:
        body, latches = heads.setdefault(head, (set(), set()))
        body |= _natural_loop(succ, head, latch)
        latches.add(latch)
    if not heads:
        return None

    def weight(head):
        body = heads[head][0]
        tensor = sum(i.kind is Kind.TENSOR for b in body for i in ins[blocks[b][0]:blocks[b][1]])
        size = sum(blocks[b][1] - blocks[b][0] for b in body)
        return (tensor, -size) if tensor else (0, size)  # the innermost with the most tensor work

    head = max(heads, key=weight)
    body, latches = heads[head]
    cold = {k for k in body if any(i.reports for i in ins[blocks[k][0]:blocks[k][1]])}
    order, _ = _depth_first(succ, head, lambda n: n in body, skip={head})
    rank = {k: r for r, k in enumerate(order)}
    forward = {k: [n for n in succ[k] if n in rank and rank[n] > rank[k] and n not in cold] for k in order}
    # a block's cost: minus its staple work, minus the bytes it moves, then its instructions
    # (module docstring)
    cost = {k: (-sum(i.kind in _STAPLE for i in ins[blocks[k][0]:blocks[k][1]]),
                -sum(i.bytes for i in ins[blocks[k][0]:blocks[k][1]]),
                sum(not i.padding for i in ins[blocks[k][0]:blocks[k][1]])) for k in order}
    best, came = {head: cost[head]}, {}
    for k in order:
        if k not in best or k in cold:
            continue
        for n in forward[k]:
            c = tuple(a + b for a, b in zip(best[k], cost[n]))
            if n not in best or c < best[n]:
                best[n], came[n] = c, k
    ends = [k for k in latches if k in best]
    if not ends:
        return None
    k = min(ends, key=lambda e: best[e])
    path = [k]
    while k != head:
        k = came[k]
        path.append(k)
    path.reverse()
    chosen = tuple(i for k in path for i in ins[blocks[k][0]:blocks[k][1]] if not i.padding)
    forks = sum(1 for k in path if k not in latches and len(forward[k]) > 1)
    loop_size = sum(not i.padding for k in body for i in ins[blocks[k][0]:blocks[k][1]])
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


@attrs.frozen
class LoopTrip:
    """A kernel's main loop, one trip of one warp on the in-bounds path (:func:`main_loop`), in
    its PTX and, where nvdisasm is installed, in the SASS ptxas makes of it: the SASS can be
    far longer than the PTX suggests (64-bit address arithmetic, conversions)."""

    ptx: int
    sass: int | None  # None: ``missing`` says why
    mma_units: float  # m16n8k16 products per trip
    missing: str = ""

    def describe(self) -> str:
        per = lambda n: f" ({n / self.mma_units:.3g} per m16n8k16)" if self.mma_units else ""  # noqa: E731
        sass = (f"SASS {self.sass:,}{per(self.sass)}, {self.sass / self.ptx:.2g}x the PTX" if self.sass is not None
                else f"SASS not counted: {self.missing}")
        return f"PTX {self.ptx:,}{per(self.ptx)}; {sass}"

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def loop_trip(ptx: str, arch: str) -> LoopTrip | None:
    """The main loop's trip in ``ptx`` and in its SASS for ``arch``; None where it has no loop."""
    functions = parse_ptx(ptx)
    trip = main_loop(functions[0]) if functions else None
    if trip is None:
        return None
    if find_nvdisasm() is None:
        return LoopTrip(trip.count, None, trip.mma_units, "nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    sass = sass_report(ptx, arch).trip
    return LoopTrip(trip.count, sass.count if sass else None, trip.mma_units, "" if sass else "no loop in the SASS")
