"""Prebuilt kernels with registry metadata."""

from . import attention, attention_tile
from .attention import (
    ScaledDotProduct,
    ScaledDotProductAttention2x2x3x2x2F32,
    FlashTiling,
    Threads3D,
    scaled_dot_product_f32,
    scaled_dot_product_flash_f32,
    scaled_dot_product_fused_f32,
    scaledDotProductF32,
)
from .attention_tile import AttentionTiles, scaled_dot_product_tile
from .entry import (
    ATTENTION_SCALED_DOT_PRODUCT,
    BlockGrid,
    Category,
    Entry,
    Layer,
    Operation,
    Reduction,
    ReductionOperator,
    ReductionReuse,
    ScheduleSnapshot,
    Shape,
    Specialization,
    ThreadBlocks3D,
    TileGrid,
    TileReuse,
)

__all__ = [
    "attention", "ScaledDotProduct", "ScaledDotProductAttention2x2x3x2x2F32", "Threads3D", "FlashTiling",
    "scaled_dot_product_flash_f32", "BlockGrid", "TileReuse",
    "attention_tile", "AttentionTiles", "scaled_dot_product_tile", "TileGrid",
    "scaled_dot_product_f32", "scaled_dot_product_fused_f32", "scaledDotProductF32", "ATTENTION_SCALED_DOT_PRODUCT", "Category",
    "Entry", "Layer", "Operation", "Reduction", "ReductionOperator", "ReductionReuse",
    "ScheduleSnapshot", "Shape", "Specialization", "ThreadBlocks3D",
]
