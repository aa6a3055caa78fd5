"""accy: write GPU compute kernels as plain Python functions.

A kernel body is traced into a typed SSA graph, which backends run or lower:
the NumPy interpreter (reference semantics, always available), LLVM (native CPU
code and PTX for NVIDIA GPUs) and PyCUDA (launching that PTX on a GPU).
"""

from . import errors, logical
from .compare import CompareReport, compare
from .dsl import (
    Graph,
    Launch,
    Limits,
    Program,
    axis,
    boolean,
    buffer,
    dynamic_buffer,
    dynamicBuffer,
    f32,
    index,
    schedule,
    thread_blocks,
)
from .errors import AccyError

__version__ = "0.1.0"

__all__ = [
    "errors", "logical", "Graph", "Launch", "Limits", "Program", "axis", "boolean", "buffer",
    "dynamic_buffer", "dynamicBuffer", "f32", "index", "schedule", "thread_blocks", "AccyError",
    "compare", "CompareReport",
]
