"""accy: write GPU compute kernels as plain Python functions.

A kernel body is traced into a typed SSA graph, which backends run or lower:
the NumPy interpreter (reference semantics, always available), LLVM (native CPU
code and PTX for NVIDIA GPUs) and PyCUDA (launching that PTX on a GPU).
"""

from . import errors, logical, math
from .autotune import autotune
from .compare import CompareReport, compare
from .dsl import (
    Graph,
    Launch,
    Limits,
    TensorHandle,
    TensorSpec,
    ThreadBlocks,
    axis,
    buffer,
    cdiv,
    constexpr,
    dynamic_buffer,
    dynamicBuffer,
    parse,
    scalar,
    schedule,
    tensor,
    thread_blocks,
)
from .dsl.types import DTYPES
from .errors import AccyError
from .program import Program, kernel
from .version import __version__

# every scalar type of the table, by its export name (accy.f32, accy.boolean)
globals().update({t.export_name: t for t in DTYPES.values()})


def __getattr__(name):  # accy.Profile without importing the emulator with accy
    if name == "Profile":
        from .emulator.profile import Profile

        return Profile
    if name == "torch":  # accy.torch.custom_op without an import of its own (torch comes when an op is made)
        import importlib

        return importlib.import_module(f"{__name__}.torch")  # not `from . import`: that asks this hook again
    raise AttributeError(f"module 'accy' has no attribute {name!r}")


__all__ = [
    "errors", "logical", "math", "Graph", "Launch", "Limits", "Program", "ThreadBlocks", "axis", "buffer", "cdiv",
    "constexpr", "dynamic_buffer", "dynamicBuffer", "kernel", "parse", "scalar", "schedule", "thread_blocks", "AccyError",
    "autotune", "compare", "CompareReport", "Profile", "tensor", "TensorSpec", "TensorHandle",
    *(t.export_name for t in DTYPES.values()),
]
