"""The accy DSL: types, the op table, the tracing builder and the graph it records."""

from . import schedule
from .builder import Builder
from .constexpr import ConstexprSpec, constexpr
from .traced import AxisIndex, BufferHandle, LaunchIndex, RuntimeAxis, Traced, axis
from .ir import Axis, Block, Graph, Op, Param, ParamKind, SourceLocation, Value
from .ops import OPS, OpDef
from .parse import parse
from .passes import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    hoist_loop_invariants,
    optimize,
    verify,
)
from .schedule import Launch, Limits, ThreadBlocks, thread_blocks
from .tiles import cdiv
from .tensors import TensorHandle, TensorSpec, tensor
from .trace import BufferSpec, KernelArgs, ScalarSpec, buffer, dynamic_buffer, dynamicBuffer, scalar, trace
from .types import DTYPES, DType

__all__ = [
    "schedule", "AxisIndex", "Builder", "BufferHandle", "LaunchIndex", "RuntimeAxis", "Traced", "axis", "Axis",
    "Block", "Graph", "Op", "Param", "ParamKind", "SourceLocation", "Value", "OPS", "OpDef", "parse",
    "eliminate_common_subexpressions", "eliminate_dead_code", "fold_constants", "hoist_loop_invariants",
    "optimize", "verify", "Launch", "Limits", "ThreadBlocks", "thread_blocks", "BufferSpec", "KernelArgs",
    "ScalarSpec", "buffer", "cdiv", "dynamic_buffer", "dynamicBuffer", "scalar", "trace", "DTYPES", "DType",
    "TensorHandle", "TensorSpec", "tensor", "ConstexprSpec", "constexpr",
]

# every scalar type of the table, by its export name (accy.dsl.f32, accy.dsl.boolean)
globals().update({t.export_name: t for t in DTYPES.values()})
__all__ += [t.export_name for t in DTYPES.values()]
