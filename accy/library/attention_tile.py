"""Flash attention as a tile program: ``softmax(Q K^T / sqrt(h)) V`` with FlashAttention-2's
algorithm, written at the tile level (``for_each_tile``), where the compiler spreads each
tile over a program's threads (the flash entry in :mod:`.attention` does that by hand).

One program per (query tile, batch): it loads its ``block_q x h`` query tile once, then for
each ``block_k`` tile of keys computes the scores with ``t.dot`` (f32), folds them into a
running row maximum ``m`` and sum ``l`` (the online softmax, in base 2 with ``log2(e)`` in the
scale), rescales its ``block_q x v`` f32 accumulator and adds ``P @ V``; it divides by ``l`` once
at the end.  Under ``causal`` the key tiles past the program's last query are never visited,
and only the tiles that cross the diagonal (or the keys' edge) pay for a mask.

Query, key, value and the output are ``tensor(dtype, 3)`` parameters: any layout (strided,
transposed views) at the spec's shapes, (b, q, h), (b, k, h), (b, k, v) and (b, q, v).
"""

from __future__ import annotations

import functools
import math

import attrs

from ..dsl.ir import Axis
from ..dsl.schedule import positive_int
from ..dsl.tensors import tensor
from ..dsl.tiles import cdiv
from ..dsl.traced import axis
from ..dsl.types import DType, as_dtype, bf16, f16, f32
from ..graph_store import name_body
from ..program import Program
from .attention import ScaledDotProduct, _specialization
from .entry import Category, Entry, Layer, TileGrid, TileReuse, Shape

DTYPES = (f32, bf16, f16)
LOG2_E = math.log2(math.e)
# the most elements a tile of the entry holds: what a GPU program keeps in registers (16384 f32 over
# 128 threads is 128 registers each)
TILE_ELEMENTS = 1 << 14
MIN_FITTED_TILE = 16  # fitting never shrinks a tile below this (the size of a tensor-core operand)
# a GPU program stages both operands of a dot in shared memory (accy/lowering/distribute.py: f32 for
# FMA, 16-bit inputs as they are for tensor cores); 32 KiB of its 48 KiB leaves room for the
# layout conversions around them
DOT_STAGING_BYTES = 32768


def _warps(instance, attribute, value):
    if value is not None and (isinstance(value, bool) or value not in (1, 2, 4, 8, 16, 32)):
        raise ValueError(f"attention tiles: warps must be 1, 2, 4, 8, 16 or 32 (or None: by the dtype), got {value!r}")


@attrs.frozen
class AttentionTiles:
    """The tile program's tile sizes: ``block_q`` queries per program, keys visited ``block_k`` at
    a time, the head dimensions ``h`` and ``v`` whole (static from the spec); ``warps`` is the
    GPU's threads per program / 32 (a hint on the CPU).  By default (None) 4 warps for bf16 and
    f16, FA2's: on tensor cores (sm_80 and later) each warp owns 16 of the 64 query rows, its
    scores and accumulator in mma fragments; 8 for f32, whose dots are FMAs: at 64 x 64 tiles
    and head dim 64, 4 warps hold too many tile elements per thread and spill at sm_90."""

    block_q: int = attrs.field(default=64, validator=positive_int)
    block_k: int = attrs.field(default=64, validator=positive_int)
    warps: int | None = attrs.field(default=None, validator=_warps)

    def tile_shapes(self, spec: ScaledDotProduct) -> dict[str, tuple[int, int]]:
        """The largest tiles a program holds, by what they are."""
        return {"query": (self.block_q, spec.qk), "key": (self.block_k, spec.qk),
                "value": (self.block_k, spec.value), "scores": (self.block_q, self.block_k),
                "accumulator": (self.block_q, spec.value)}

    def dot_operands(self, spec: ScaledDotProduct) -> dict[str, int]:
        """The elements of both operands of each dot: Q K^T and P V."""
        bq, bk = self.block_q, self.block_k
        return {"scores": bq * spec.qk + spec.qk * bk, "values": bq * bk + bk * spec.value}

    def fits(self, spec: ScaledDotProduct, dtype: DType = f32) -> bool:
        staged = DOT_STAGING_BYTES // _staged_itemsize(dtype)
        return (all(r * c <= TILE_ELEMENTS for r, c in self.tile_shapes(spec).values())
                and all(n <= staged for n in self.dot_operands(spec).values()))

    def fitted(self, spec: ScaledDotProduct, dtype: DType = f32) -> "AttentionTiles":
        """These tiles for ``spec`` and ``dtype`` inputs: a tile no taller than the power of two
        covering its extent (but not below 16), then the larger of the two halved (keys on a tie)
        until every tile holds at most ``TILE_ELEMENTS`` and each dot's operands fit
        ``DOT_STAGING_BYTES`` (what a GPU program stages in shared memory: 16-bit inputs as
        they are, f32 as f32).  Warps left None become 8 for f32 and, for 16-bit inputs, one
        per 16 query rows up to 4 (each warp a whole tensor-core tile of rows)."""
        def cover(block, extent):
            return min(block, max(MIN_FITTED_TILE, 1 << (extent - 1).bit_length()))

        tiles = attrs.evolve(self, block_q=cover(self.block_q, spec.queries), block_k=cover(self.block_k, spec.keys))
        while not tiles.fits(spec, dtype):
            if tiles.block_k > 1 and tiles.block_k >= tiles.block_q:
                tiles = attrs.evolve(tiles, block_k=tiles.block_k // 2)
            elif tiles.block_q > 1:
                tiles = attrs.evolve(tiles, block_q=tiles.block_q // 2)
            else:
                raise ValueError(f"attention tiles: head dimensions h={spec.qk}, v={spec.value} do not fit even "
                                 f"1 x 1 query and key tiles (at most {TILE_ELEMENTS} elements a tile and "
                                 f"{DOT_STAGING_BYTES} bytes for a dot's operands)")
        if tiles.warps is None:
            warps = min(4, max(1, tiles.block_q // 16)) if _staged_itemsize(dtype) == 2 else 8
            tiles = attrs.evolve(tiles, warps=warps)
        return tiles


def _staged_itemsize(dtype: DType) -> int:
    return 2 if dtype in (bf16, f16) else 4


def names(spec: ScaledDotProduct, tiles: AttentionTiles, dtype: DType) -> tuple[str, str]:
    """(program name, registry target): ``sdpa_tile{B}x{Q}x{K}x{H}x{V}_q{bq}k{bk}w{warps}[_causal]_{dtype}``."""
    stem = (f"sdpa_tile{spec.shape_text}_q{tiles.block_q}k{tiles.block_k}w{tiles.warps}"
            f"{'_causal' if spec.causal else ''}_{dtype.name}")
    return f"accy_kernel_attention_{stem}", f"accy.kernel.attention.{stem}"


def _tile_program(spec: ScaledDotProduct, tiles: AttentionTiles, dtype: DType, name: str) -> Program:
    B, Q, K, H, V = spec.batch, spec.queries, spec.keys, spec.qk, spec.value
    bq, bk = tiles.block_q, tiles.block_k
    scale = LOG2_E / math.sqrt(float(H))  # scores in base 2: exp(x) = exp2(x * log2(e))
    minus_inf = float("-inf")

    def body(k, p):
        @k.for_each_tile(grid=(axis("q_tile", cdiv(Q, bq)), axis(spec.batch_axis, B)), warps=tiles.warps)
        def program(t, pid):
            b, q0 = pid[spec.batch_axis], pid["q_tile"] * bq
            query = p.query.load_tile((b, q0, 0), (1, bq, H)).reshape((bq, H))  # zeros past the last query
            rows = q0 + t.arange(bq)

            def key_tile(masked: bool):
                def step(t, k0, state):
                    m, l, acc = state
                    key = p.key.load_tile((b, k0, 0), (1, bk, H)).reshape((bk, H))
                    value = p.value.load_tile((b, k0, 0), (1, bk, V)).reshape((bk, V))
                    scores = t.dot(query, key.T)  # f32, whatever the inputs; not yet scaled
                    if masked:  # keys past the edge, and under causal past each row's query, weigh 0
                        cols = k0 + t.arange(bk)
                        visible = cols[None, :] < K
                        if spec.causal:
                            visible = visible & (cols[None, :] <= rows[:, None])
                        scores = t.where(visible, scores, minus_inf)
                    # scale > 0 and rounding is monotonic: the row's largest scaled score is its
                    # largest score scaled, so the scale folds into the exponent's FMA below
                    m_new = t.maximum(m, t.max(scores, axis=1) * scale)
                    # a row with no visible key yet has m_new = -inf: shift by 0 so exp2 gives 0, not NaN
                    shift = t.where(m_new == minus_inf, 0.0, m_new)
                    # weights below 2**-126 flush to 0 (one ex2.approx.ftz on NVPTX): a row's sum is
                    # about 1 or more (its largest score weighs about 1), so each flushed weight
                    # moves an output by under 2**-126 (max|v| + |output|), far below its rounding
                    alpha = t.flush_subnormal(t.exp2(m - shift))
                    weights = t.flush_subnormal(t.exp2(t.fma(scores, scale, -shift[:, None])))
                    l = l * alpha + t.sum(weights, axis=1)
                    # FA2: P in the inputs' type for P @ V (f32 accumulation either way)
                    pv = weights if dtype == f32 else weights.cast(dtype)
                    return m_new, l, t.dot(pv, value, acc * alpha[:, None])

                return step

            state = (t.full((bq,), minus_inf, f32), t.zeros((bq,), f32), t.zeros((bq, V), f32))
            # key tiles [0, full) need no mask: inside the keys and, under causal, at or below every
            # row's diagonal; [full, stop) are the tiles on the diagonal or at the keys' edge
            if spec.causal:
                stop = t.min(q0 + bq, K)
                full = t.min((q0 + 1) // bk, K // bk) * bk
            else:
                stop, full = K, K // bk * bk
            if not isinstance(full, int) or full > 0:
                state = t.fold_range(0, full, bk, state, key_tile(masked=False))
            if not isinstance(full, int) or full < stop:
                state = t.fold_range(full, stop, bk, state, key_tile(masked=True))
            m, l, acc = state
            # one division a row, then a multiply an element (a division is a dozen instructions
            # on a GPU, with a slow path): within an ulp of acc / l more, far below the output's
            # rounding to the inputs' type and the entry's bound; a row that saw no key: 0, not 0/0
            out = acc * (1.0 / t.where(l == 0.0, 1.0, l))[:, None]
            p.dst.store_tile((b, q0, 0), (out if dtype == f32 else out.cast(dtype)).reshape((1, bq, V)))

    return Program(name=name, parameters={"dst": tensor(dtype, 3), "query": tensor(dtype, 3),
                                          "key": tensor(dtype, 3), "value": tensor(dtype, 3)},
                   body=name_body(body, _tile_program, spec, tiles, dtype, name))


def _tile_specialization(spec: ScaledDotProduct, tiles: AttentionTiles, dtype: DType):
    base = _specialization(spec, fused=True)
    q_tile, k_tile = (spec.query_axis, tiles.block_q), (spec.key_axis, tiles.block_k)
    schedule_ = TileGrid((Axis("q_tile", cdiv(spec.queries, tiles.block_q)), Axis(spec.batch_axis, spec.batch)),
                         tiles.warps)
    tile_outputs = Shape.of(q_tile, (spec.value_axis, spec.value))
    return attrs.evolve(
        base,
        dtype=dtype,
        launch=schedule_.launch(),
        schedule=schedule_,
        tiles=(
            TileReuse("query", Shape.of(q_tile, (spec.qk_axis, spec.qk)), tile_outputs),
            TileReuse("key", Shape.of(k_tile, (spec.qk_axis, spec.qk)), tile_outputs),
            TileReuse("value", Shape.of(k_tile, (spec.value_axis, spec.value)), tile_outputs),
        ),
    )


def _dtype(dtype) -> DType:
    try:
        dtype = as_dtype(dtype)
    except TypeError as e:
        raise ValueError(f"scaled_dot_product_tile: dtype: {e}") from None
    if dtype not in DTYPES:
        raise ValueError(f"scaled_dot_product_tile: dtype must be f32, bf16 or f16, got {dtype}")
    return dtype


def scaled_dot_product_tile(spec: ScaledDotProduct, dtype=f32, tiles: AttentionTiles = AttentionTiles()) -> Entry:
    """The flash attention tile entry for ``spec`` with ``dtype`` inputs and output (f32, bf16 or
    f16; f32 scores and accumulation), FA2's algorithm (memoised: one entry per spec, dtype and
    fitted tiles).  ``tiles`` is fitted to the spec first (:meth:`AttentionTiles.fitted`)."""
    if not isinstance(spec, ScaledDotProduct):
        raise ValueError(f"scaled_dot_product_tile: spec must be a ScaledDotProduct, got {spec!r}")
    if not isinstance(tiles, AttentionTiles):
        raise ValueError(f"scaled_dot_product_tile: tiles must be an AttentionTiles, got {tiles!r}")
    dtype = _dtype(dtype)
    return _entry(spec, dtype, tiles.fitted(spec, dtype))


@functools.lru_cache(maxsize=None)
def _entry(spec: ScaledDotProduct, dtype: DType, tiles: AttentionTiles) -> Entry:
    name, target = names(spec, tiles, dtype)
    return Entry(
        program=_tile_program(spec, tiles, dtype, name),
        target=target,
        layer=Layer.tile,
        category=Category.attention,
        specialization=_tile_specialization(spec, tiles, dtype),
    )


__all__ = ["AttentionTiles", "DTYPES", "names", "scaled_dot_product_tile"]
