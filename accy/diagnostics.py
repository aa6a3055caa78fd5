"""Run-time error messages, worded once for every backend."""

from __future__ import annotations

from .dsl.ir import Axis, Op
from .dsl.tensors import out_of_shape_dimensions
from .errors import ExecutionError, OutOfBoundsError


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


def out_of_bounds(op: Op, index: int, size: int, thread: str, who: str = "thread") -> OutOfBoundsError:
    """``who`` names the unit that made the access: a thread, or a tile launch's program."""
    verb = {"store": "store to", "atomic": f"atomic_{op.attrs.get('op')} on", "tile_store": "store to",
            "tile_atomic": f"atomic_{op.attrs.get('op')} on"}.get(op.opcode, "load from")
    what = "shared array " if op.attrs.get("space", "global") == "shared" else ""
    dimensions = out_of_shape_dimensions(index)
    if dimensions:  # the marker a tensor access puts in place of an element outside its shape
        which = (f"the index in dimension {dimensions[0]} is" if len(dimensions) == 1 else
                 f"the indices in dimensions {', '.join(map(str, dimensions[:-1]))} and {dimensions[-1]} are")
        return OutOfBoundsError(
            f"{verb} tensor '{op.attrs['buffer']}': {which} outside its shape ({who} {thread}){at(op)}; "
            "nothing was written"
        )
    return OutOfBoundsError(
        f"{verb} {what}'{op.attrs['buffer']}': index {index} is out of bounds for {size} elements "
        f"({who} {thread}){at(op)}; nothing was written"
    )


def division_by_zero(op: Op, thread: str, who: str = "thread") -> ExecutionError:
    what = "remainder" if op.opcode == "mod" else "division"
    return ExecutionError(f"{op.opcode}: {op.operands[0].type} {what} by zero in {who} {thread}{at(op)}")
