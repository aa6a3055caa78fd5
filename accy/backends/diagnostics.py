"""Run-time error messages, worded once for every backend."""

from __future__ import annotations

from ..dsl.ir import Axis, Op
from ..errors import ExecutionError, OutOfBoundsError


def thread_text(axes: tuple[Axis, ...], lane: int) -> str:
    """``b=1 q=0 v=2`` for linear lane ``lane`` (x fastest)."""
    coords, rest = [], lane
    for axis in axes:
        extent = max(axis.extent, 1)
        coords.append(f"{axis.name}={rest % extent}")
        rest //= extent
    return " ".join(coords)


def at(op: Op) -> str:
    """`` at <the user's line>`` for a message about ``op``, or nothing."""
    return f" at {op.location}" if op.location is not None else ""


def out_of_bounds(op: Op, index: int, size: int, thread: str) -> OutOfBoundsError:
    verb = {"store": "store to", "atomic": f"atomic_{op.attrs.get('op')} on"}.get(op.opcode, "load from")
    what = "shared array " if op.attrs.get("space", "global") == "shared" else ""
    return OutOfBoundsError(
        f"{verb} {what}'{op.attrs['buffer']}': index {index} is out of bounds for {size} elements "
        f"(thread {thread}){at(op)}; nothing was written"
    )


def division_by_zero(op: Op, thread: str) -> ExecutionError:
    what = "remainder" if op.opcode == "mod" else "division"
    return ExecutionError(f"{op.opcode}: {op.operands[0].type} {what} by zero in thread {thread}{at(op)}")
