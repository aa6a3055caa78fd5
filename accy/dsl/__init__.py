"""The accy DSL: types, the tracing builder, programs and the graph they record."""

from . import schedule
from .builder import AxisIndex, Builder, BufferHandle, LaunchIndex, axis
from .ir import Axis, Block, Graph, Op, Param, SourceLocation, Value
from .passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    optimize,
    verify,
)
from .program import BufferSpec, KernelArgs, Program, buffer, dynamic_buffer, dynamicBuffer
from .schedule import Launch, Limits, ThreadBlocks, thread_blocks
from .types import DType, boolean, f32, index

__all__ = [
    "schedule", "AxisIndex", "Builder", "BufferHandle", "LaunchIndex", "axis", "Axis", "Block",
    "Graph", "Op", "Param", "SourceLocation", "Value", "eliminate_common_subexpressions",
    "eliminate_dead_code", "fold_constants", "optimize", "verify", "BufferSpec", "KernelArgs",
    "Program", "buffer", "dynamic_buffer", "dynamicBuffer", "Launch", "Limits", "ThreadBlocks",
    "thread_blocks", "DType", "boolean", "f32", "index",
]
