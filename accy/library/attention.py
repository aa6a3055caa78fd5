"""Scaled dot-product attention: ``softmax(Q K^T / sqrt(h)) V``, one logical
thread per output element ``(b, q, v)``.

A port of the seed's attention entry, kept in the seed's explicit spelling
(``inner.constantIndex``, ``foldRange`` with a context, typed loads with
``.mul(inner, ...)`` and ``.raw()``) so the two read side by side.  The
algorithm is the seed's three passes over the keys: the row maximum of the
scaled scores, the softmax denominator, then the weighted sum of values.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import attrs

from ..dsl.traced import axis
from ..dsl.ir import Axis
from ..dsl.schedule import ThreadBlocks, positive_int
from ..dsl.trace import dynamic_buffer
from ..dsl.types import INDEX_MAX, f32
from ..errors import TraceError
from ..graph_store import name_body
from ..program import Program
from .entry import (
    ATTENTION_SCALED_DOT_PRODUCT,
    BlockGrid,
    Category,
    Entry,
    Layer,
    Reduction,
    ReductionOperator,
    ReductionReuse,
    Shape,
    Specialization,
    ThreadBlocks3D,
    TileReuse,
)


Threads3D = ThreadBlocks  # the seed's name for threads per block along x, y, z


def _extent(instance, attribute, value):
    positive_int(instance, attribute, value)
    if value > INDEX_MAX:
        raise ValueError(f"attention extent {attribute.name}={value} overflows the index range")


@attrs.frozen
class ScaledDotProduct:
    batch: int = attrs.field(validator=_extent)
    queries: int = attrs.field(validator=_extent)
    keys: int = attrs.field(validator=_extent)
    qk: int = attrs.field(validator=_extent)
    value: int = attrs.field(validator=_extent)
    threads: ThreadBlocks = ThreadBlocks(32, 8, 1)
    batch_axis: str = "b"
    query_axis: str = "q"
    key_axis: str = "k"
    qk_axis: str = "h"
    value_axis: str = "v"
    causal: bool = False  # query q attends to keys k <= q only (top-left aligned, as torch's is_causal)

    def __attrs_post_init__(self):
        names = (self.batch_axis, self.query_axis, self.key_axis, self.qk_axis, self.value_axis)
        if len(set(names)) != 5 or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ValueError(f"attention axis names must be 5 distinct identifiers, got {names}")
        for lhs, rhs in ((self.queries, self.qk), (self.keys, self.qk), (self.keys, self.value),
                         (self.queries, self.value)):
            _checked_product(self.batch * lhs, rhs)

    @property
    def shape_text(self) -> str:
        return f"{self.batch}x{self.queries}x{self.keys}x{self.qk}x{self.value}"

    @property
    def threads_text(self) -> str:
        return f"{self.threads.x}x{self.threads.y}x{self.threads.z}"

    def names(self, variant: str = "") -> tuple[str, str]:
        """(program name, registry target) for this spec: ``sdpa{variant}{shape}_{threads}[_causal]_f32``."""
        stem = f"sdpa{variant}{self.shape_text}_{self.threads_text}{'_causal' if self.causal else ''}_f32"
        return f"accy_kernel_attention_{stem}", f"accy.kernel.attention.{stem}"


def _index_upper(extent: int) -> int:
    if extent > INDEX_MAX:
        raise TraceError("kernel library attention extent overflows index range")
    return extent


def _checked_product(lhs: int, rhs: int) -> int:
    product = lhs * rhs
    if product > INDEX_MAX:
        raise ValueError("kernel library attention shape product overflow")
    return product


# -- shapes ---------------------------------------------------------------------------


def query_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.query_axis, spec.queries), (spec.qk_axis, spec.qk))


def key_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.key_axis, spec.keys), (spec.qk_axis, spec.qk))


def value_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.key_axis, spec.keys), (spec.value_axis, spec.value))


def output_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.query_axis, spec.queries), (spec.value_axis, spec.value))


def query_row_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.query_axis, spec.queries))


def score_shape(spec: ScaledDotProduct) -> Shape:
    return Shape.of((spec.batch_axis, spec.batch), (spec.query_axis, spec.queries), (spec.key_axis, spec.keys))


def _specialization(spec: ScaledDotProduct, *, fused: bool = False) -> Specialization:
    keys = Shape.of((spec.key_axis, spec.keys))
    threads = (spec.threads.x, spec.threads.y, spec.threads.z)
    batch, query, value = (Axis(spec.batch_axis, spec.batch), Axis(spec.query_axis, spec.queries),
                           Axis(spec.value_axis, spec.value))
    # naive: a thread per output (v, q, b); fused: a thread per query row (q, b)
    schedule_ = ThreadBlocks3D((query, batch) if fused else (value, query, batch), threads)
    exp_sum = ReductionOperator.online_sum_exp_shifted if fused else ReductionOperator.sum_exp_shifted
    weighted = ReductionOperator.online_weighted_sum if fused else ReductionOperator.weighted_sum
    return Specialization(
        dtype=f32,
        operation=ATTENTION_SCALED_DOT_PRODUCT,
        equation="bqh,bkh,bkv->bqv",
        inputs=(query_shape(spec), key_shape(spec), value_shape(spec)),
        outputs=(output_shape(spec),),
        reductions=(
            Reduction("score_dot", ReductionOperator.dot_product, Shape.of((spec.qk_axis, spec.qk))),
            Reduction("score_max", ReductionOperator.maximum, keys, ("score_dot",)),
            Reduction("score_exp_sum", exp_sum, keys, ("score_max",)),
            Reduction("value_weighted_sum", weighted, keys, ("score_exp_sum",)),
        ),
        reduction_reuse=(
            ReductionReuse("score_dot", score_shape(spec)),
            ReductionReuse("score_max", query_row_shape(spec)),
            ReductionReuse("score_exp_sum", query_row_shape(spec)),
        ),
        launch=schedule_.launch(),
        schedule=schedule_,
        fused_reductions=(("score_max", "score_exp_sum", "value_weighted_sum"),) if fused else (),
        causal=spec.causal,
    )


# -- index math (row-major b, row, column) ----------------------------------------------


def _flat_index(inner, rows: int, columns: int, batch, row, column):
    batch_stride = inner.constantIndex(_index_upper(_checked_product(rows, columns)))
    row_stride = inner.constantIndex(_index_upper(columns))
    batch_offset = inner.mul(batch, batch_stride)
    row_offset = inner.mul(row, row_stride)
    batch_row_offset = inner.add(batch_offset, row_offset)
    return inner.add(batch_row_offset, column)


def query_index(inner, spec, batch, query, feature):
    return _flat_index(inner, spec.queries, spec.qk, batch, query, feature)


def key_index(inner, spec, batch, key, feature):
    return _flat_index(inner, spec.keys, spec.qk, batch, key, feature)


def value_index(inner, spec, batch, key, value):
    return _flat_index(inner, spec.keys, spec.value, batch, key, value)


def output_index(inner, spec, batch, query, value):
    return _flat_index(inner, spec.queries, spec.value, batch, query, value)


# -- the three passes -----------------------------------------------------------------


def _scaled_score_dot(fold_inner, feature, acc, ctx):
    q_index = query_index(fold_inner, ctx.spec, ctx.batch, ctx.query, feature)
    k_index = key_index(fold_inner, ctx.spec, ctx.batch, ctx.key, feature)
    query_value = ctx.query_buffer.load(fold_inner, q_index)
    key_value = ctx.key_buffer.load(fold_inner, k_index)
    product = query_value.mul(fold_inner, key_value)
    return fold_inner.add(acc, product.raw())


def scaled_score(inner, spec, query_buffer, key_buffer, batch, query, key):
    zero = inner.constantFloat(f32, 0.0)
    ctx = SimpleNamespace(spec=spec, query_buffer=query_buffer, key_buffer=key_buffer,
                          batch=batch, query=query, key=key)
    dot = inner.foldRange(0, _index_upper(spec.qk), 1, zero, ctx, _scaled_score_dot)
    scale = inner.constantFloat(f32, 1.0 / math.sqrt(float(spec.qk)))
    return inner.mul(dot, scale)


def _visible(inner, ctx, key, value, hidden):
    """Under a causal mask, ``value`` where key <= query, else ``hidden``."""
    if not ctx.spec.causal:
        return value
    return inner.select(inner.le(key, ctx.query), value, hidden)


def _score_max_reduce(fold_inner, key, acc, ctx):
    score = scaled_score(fold_inner, ctx.spec, ctx.query_buffer, ctx.key_buffer, ctx.batch, ctx.query, key)
    return fold_inner.max(acc, _visible(fold_inner, ctx, key, score, float("-inf")))


def score_max(inner, spec, query_buffer, key_buffer, batch, query):
    first_key = inner.constantIndex(0)
    first = scaled_score(inner, spec, query_buffer, key_buffer, batch, query, first_key)
    ctx = SimpleNamespace(spec=spec, query_buffer=query_buffer, key_buffer=key_buffer, batch=batch, query=query)
    return inner.foldRange(1, _index_upper(spec.keys), 1, first, ctx, _score_max_reduce)


def _score_denominator_reduce(fold_inner, key, acc, ctx):
    score = scaled_score(fold_inner, ctx.spec, ctx.query_buffer, ctx.key_buffer, ctx.batch, ctx.query, key)
    shifted = fold_inner.sub(score, ctx.row_max)
    exp_score = _visible(fold_inner, ctx, key, fold_inner.exp(shifted), 0.0)
    return fold_inner.add(acc, exp_score)


def score_denominator(inner, spec, query_buffer, key_buffer, batch, query, row_max):
    zero = inner.constantFloat(f32, 0.0)
    ctx = SimpleNamespace(spec=spec, query_buffer=query_buffer, key_buffer=key_buffer,
                          batch=batch, query=query, row_max=row_max)
    return inner.foldRange(0, _index_upper(spec.keys), 1, zero, ctx, _score_denominator_reduce)


def _weighted_value_sum_reduce(fold_inner, key, acc, ctx):
    score = scaled_score(fold_inner, ctx.spec, ctx.query_buffer, ctx.key_buffer, ctx.batch, ctx.query, key)
    shifted = fold_inner.sub(score, ctx.row_max)
    exp_score = fold_inner.exp(shifted)
    weight = _visible(fold_inner, ctx, key, fold_inner.div(exp_score, ctx.denominator), 0.0)
    v_index = value_index(fold_inner, ctx.spec, ctx.batch, key, ctx.value)
    value_item = ctx.value_buffer.load(fold_inner, v_index)
    weighted = fold_inner.mul(weight, value_item.raw())
    return fold_inner.add(acc, weighted)


def weighted_value_sum(inner, spec, query_buffer, key_buffer, value_buffer, batch, query, value):
    row_max = score_max(inner, spec, query_buffer, key_buffer, batch, query)
    denominator = score_denominator(inner, spec, query_buffer, key_buffer, batch, query, row_max)
    zero = inner.constantFloat(f32, 0.0)
    ctx = SimpleNamespace(spec=spec, query_buffer=query_buffer, key_buffer=key_buffer, value_buffer=value_buffer,
                          batch=batch, query=query, value=value, row_max=row_max, denominator=denominator)
    return inner.foldRange(0, _index_upper(spec.keys), 1, zero, ctx, _weighted_value_sum_reduce)


def _scaled_dot_product_each(inner, index, ctx):
    args = ctx.args
    output_value = weighted_value_sum(inner, ctx.spec, args.param("query"), args.param("key"), args.param("value"),
                                      index.z.index, index.y.index, index.x.index)
    out_index = output_index(inner, ctx.spec, index.z.index, index.y.index, index.x.index)
    args.param("dst").store(inner, output_value, out_index)


def _program(spec: ScaledDotProduct) -> Program:
    def body(k, args):
        k.forEach3D({
            "x": axis(spec.value_axis, spec.value),
            "y": axis(spec.query_axis, spec.queries),
            "z": axis(spec.batch_axis, spec.batch),
        }, SimpleNamespace(spec=spec, args=args), _scaled_dot_product_each)

    return Program(
        name=spec.names()[0],
        parameters={
            "dst": dynamic_buffer(f32),
            "query": dynamic_buffer(f32),
            "key": dynamic_buffer(f32),
            "value": dynamic_buffer(f32),
        },
        body=name_body(body, _program, spec),
    ).withSchedule(spec.threads)


@functools.lru_cache(maxsize=None)
def scaled_dot_product_f32(spec: ScaledDotProduct) -> Entry:
    """The naive three-pass attention entry for ``spec`` (memoised: one entry per spec)."""
    return Entry(
        program=_program(spec),
        target=spec.names()[1],
        layer=Layer.logical,
        category=Category.attention,
        specialization=_specialization(spec),
    )


scaledDotProductF32 = scaled_dot_product_f32

ScaledDotProductAttention2x2x3x2x2F32 = scaled_dot_product_f32(
    ScaledDotProduct(batch=2, queries=2, keys=3, qk=2, value=2, threads=Threads3D(x=2, y=2, z=1))
)


def reference(query, key, value, *, causal: bool = False):
    """Plain NumPy attention, ``softmax(Q K^T / sqrt(h)) V``, in float64, shaped (b, q, v)."""
    import numpy as np

    q, k, v = (np.asarray(a, np.float64) for a in (query, key, value))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.arange(k.shape[1])[None, :] <= np.arange(q.shape[1])[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v


# -- the fused entry: one pass with an online softmax ---------------------------------------


def _fused_program(spec: ScaledDotProduct) -> Program:
    """One logical thread per query row (b, q): each score is computed once, the
    running maximum rescales the running sum and the row's accumulators as it
    grows, and the output row is written once at the end."""
    heads, keys, values, queries = spec.qk, spec.keys, spec.value, spec.queries
    scale = 1.0 / math.sqrt(float(heads))

    def body(k, args):
        def row(inner, index):
            b, q = index[spec.batch_axis], index[spec.query_axis]
            query_row = (b * queries + q) * heads

            def step(inner, key, state):
                running_max, running_sum, *acc = state
                key_row = (b * keys + key) * heads
                dot = inner.fold_range(0, heads, 1, 0.0,
                                       lambda inner, h, d: d + args.query[query_row + h] * args.key[key_row + h])
                score = dot * scale
                new_max = inner.max(running_max, score)
                # while every score so far is -inf, shift by 0: exp(-inf - -inf) would be NaN
                shift = inner.select(new_max == float("-inf"), 0.0, new_max)
                rescale = inner.exp(running_max - shift)  # 0 on the first finite key (max was -inf)
                weight = inner.exp(score - shift)
                value_row = (b * keys + key) * values
                return (new_max, running_sum * rescale + weight,
                        *[a * rescale + weight * args.value[value_row + j] for j, a in enumerate(acc)])

            stop = inner.min(q + 1, keys) if spec.causal else keys  # causal: skip masked keys entirely
            _, total, *acc = inner.fold_range(0, stop, 1, (float("-inf"), 0.0, *[0.0] * values), step)
            out_row = (b * queries + q) * values
            for j, a in enumerate(acc):
                args.dst[out_row + j] = a / total

        k.for_each_2d(x=axis(spec.query_axis, queries), y=axis(spec.batch_axis, spec.batch), body=row)

    return Program(
        name=spec.names("_fused")[0],
        parameters={"dst": dynamic_buffer(f32), "query": dynamic_buffer(f32),
                    "key": dynamic_buffer(f32), "value": dynamic_buffer(f32)},
        body=name_body(body, _fused_program, spec),
    ).with_schedule(spec.threads)


@functools.lru_cache(maxsize=None)
def scaled_dot_product_fused_f32(spec: ScaledDotProduct) -> Entry:
    """The fused one-pass attention entry for ``spec`` (memoised: one entry per spec)."""
    name, target = spec.names("_fused")
    return Entry(
        program=_fused_program(spec),
        target=target,
        layer=Layer.logical,
        category=Category.attention,
        specialization=_specialization(spec, fused=True),
    )


# -- the flash entry: blocks of cooperating threads, K and V tiles in shared memory ----------------


@attrs.frozen
class FlashTiling:
    """How the flash entry tiles the work: ``query_tile`` queries per block, keys staged
    ``key_tile`` at a time in shared memory, ``threads`` threads per block.  The
    ``threads // query_tile`` threads of a query row (a power of two up to 32, so a row's
    threads sit in one warp) split its keys and its output columns between them."""

    query_tile: int = attrs.field(default=16, validator=positive_int)
    key_tile: int = attrs.field(default=32, validator=positive_int)
    threads: int = attrs.field(default=128, validator=positive_int)

    def __attrs_post_init__(self):
        per_row = self.threads // self.query_tile
        if self.threads % self.query_tile or per_row & (per_row - 1) or per_row > 32 or self.threads % 32:
            raise ValueError(f"flash tiling: threads ({self.threads}, a multiple of 32) must be query_tile "
                             f"({self.query_tile}) times a power of two up to 32")
        if self.key_tile % per_row:
            raise ValueError(f"flash tiling: key_tile ({self.key_tile}) must be a multiple of the {per_row} "
                             "threads of a query row")

    @property
    def per_row(self) -> int:
        return self.threads // self.query_tile

    def shared_floats(self, spec: "ScaledDotProduct") -> int:
        q, k = self.query_tile, self.key_tile
        return q * spec.qk + k * spec.qk + k * spec.value + q * k

    def fitted(self, spec: "ScaledDotProduct", limit_bytes: int = 48 * 1024) -> "FlashTiling":
        """This tiling with the key tile halved until the shared tiles fit ``limit_bytes``."""
        tiling = self
        while tiling.shared_floats(spec) * 4 > limit_bytes and tiling.key_tile > tiling.per_row:
            tiling = attrs.evolve(tiling, key_tile=tiling.key_tile // 2)
        return tiling


def _flash_program(spec: ScaledDotProduct, tiling: FlashTiling, name: str) -> Program:
    """One block per (query tile, batch).  The block stages its query tile, then for each tile
    of keys stages K and V in shared memory; each query row's threads compute its scores,
    combine their maxima and sums with warp shuffles (the online softmax, shifted by 0 while
    every score is -inf), write the weights to shared memory, and each thread updates the few
    output columns it owns.  The output is written once, at the end."""
    B, Q, K, H, V = spec.batch, spec.queries, spec.keys, spec.qk, spec.value
    bq, bk, t_count, g_count = tiling.query_tile, tiling.key_tile, tiling.threads, tiling.per_row
    columns = -(-V // g_count)  # output columns per thread
    scores = bk // g_count  # scores per thread and key tile
    scale = 1.0 / math.sqrt(float(H))
    minus_inf = float("-inf")

    def body(k, a):
        @k.for_each_block(grid=(axis("q_tile", -(-Q // bq)), axis(spec.batch_axis, B)), threads=axis("t", t_count))
        def block_body(inner, block, thread):
            q_sh = inner.shared(f32, bq * H, "query_tile")
            k_sh = inner.shared(f32, bk * H, "key_tile")
            v_sh = inner.shared(f32, bk * V, "value_tile")
            p_sh = inner.shared(f32, bq * bk, "weights")
            b, t = block[spec.batch_axis], thread["t"]
            q0 = block["q_tile"] * bq
            r, g = t // g_count, t % g_count
            q = q0 + r

            def stage(inner, tile, rows, row0, limit, width, source, base):
                def copy(inner, e):
                    row = row0 + e // width
                    tile[e] = inner.if_(row < limit, lambda inner: source[(base + row) * width + e % width],
                                        lambda inner: 0.0)

                inner.for_range(t, rows * width, t_count, copy)

            stage(inner, q_sh, bq, q0, Q, H, a.query, b * Q)
            inner.barrier()
            stop = inner.min(q0 + bq, K) if spec.causal else K
            tiles = (stop + (bk - 1)) // bk

            def group(inner, value, op):  # over the threads of this query row (a warp's lanes)
                offset = g_count // 2
                while offset:
                    value = getattr(inner, op)(value, inner.shuffle_xor(value, offset))
                    offset //= 2
                return value

            def key_tile(inner, kt, state):
                m, l, *acc = state
                k0 = kt * bk
                stage(inner, k_sh, bk, k0, K, H, a.key, b * K)
                stage(inner, v_sh, bk, k0, K, V, a.value, b * K)
                inner.barrier()
                keys = [g + g_count * s for s in range(scores)]
                dots = inner.fold_range(0, H, 1, (0.0,) * scores, lambda inner, h, d: tuple(
                    d[s] + q_sh[r * H + h] * k_sh[keys[s] * H + h] for s in range(scores)))
                tile_scores = []
                for s, j in enumerate(keys):
                    visible = k0 + j < K
                    if spec.causal:
                        visible = visible & (k0 + j <= q)
                    tile_scores.append(inner.select(visible, dots[s] * scale, minus_inf))
                tile_max = tile_scores[0]
                for s in tile_scores[1:]:
                    tile_max = inner.max(tile_max, s)
                new_m = inner.max(m, group(inner, tile_max, "max"))
                shift = inner.select(new_m == minus_inf, 0.0, new_m)  # every score so far -inf: exp(-inf) = 0
                alpha = (m - shift).exp()
                weights = [(s - shift).exp() for s in tile_scores]
                total = weights[0]
                for w in weights[1:]:
                    total = total + w
                l = l * alpha + group(inner, total, "add")
                for s, j in enumerate(keys):
                    p_sh[r * bk + j] = weights[s]
                inner.barrier()
                cols = [inner.min(g + g_count * c, V - 1) for c in range(columns)]  # past V: clamped, never stored

                def weigh(inner, j, sums):
                    p = p_sh[r * bk + j]
                    return tuple(sums[c] + p * v_sh[j * V + cols[c]] for c in range(columns))

                acc = inner.fold_range(0, bk, 1, tuple(x * alpha for x in acc), weigh)
                inner.barrier()  # every thread is done with the tiles before the next are staged
                return (new_m, l, *acc)

            m, l, *acc = inner.fold_range(0, tiles, 1, (minus_inf, 0.0, *(0.0,) * columns), key_tile)
            out_row = (b * Q + q) * V
            for c in range(columns):
                col = g + g_count * c
                inner.if_((q < Q) & (col < V), lambda inner, col=col, c=c: a.dst.__setitem__(out_row + col, acc[c] / l))

    return Program(name=name, parameters={"dst": dynamic_buffer(f32), "query": dynamic_buffer(f32),
                                          "key": dynamic_buffer(f32), "value": dynamic_buffer(f32)},
                   body=name_body(body, _flash_program, spec, tiling, name))


def _flash_specialization(spec: ScaledDotProduct, tiling: FlashTiling) -> Specialization:
    base = _specialization(spec, fused=True)
    q_tile, k_tile = (spec.query_axis, tiling.query_tile), (spec.key_axis, tiling.key_tile)
    schedule_ = BlockGrid((Axis("q_tile", -(-spec.queries // tiling.query_tile)), Axis(spec.batch_axis, spec.batch)),
                          (tiling.threads, 1, 1))
    tile_outputs = Shape.of(q_tile, (spec.value_axis, spec.value))
    return attrs.evolve(
        base,
        launch=schedule_.launch(),
        schedule=schedule_,
        tiles=(
            TileReuse("query", Shape.of(q_tile, (spec.qk_axis, spec.qk)), tile_outputs),
            TileReuse("key", Shape.of(k_tile, (spec.qk_axis, spec.qk)), tile_outputs),
            TileReuse("value", Shape.of(k_tile, (spec.value_axis, spec.value)), tile_outputs),
        ),
    )


@functools.lru_cache(maxsize=None)
def scaled_dot_product_flash_f32(spec: ScaledDotProduct, tiling: FlashTiling = FlashTiling()) -> Entry:
    """The flash attention entry for ``spec``: blocks of threads, K and V tiles in shared memory,
    an online softmax (memoised: one entry per spec and tiling).  The key tile shrinks until
    the shared tiles fit 48 KiB."""
    tiling = tiling.fitted(spec)
    stem = (f"sdpa_flash{spec.shape_text}_q{tiling.query_tile}k{tiling.key_tile}t{tiling.threads}"
            f"{'_causal' if spec.causal else ''}_f32")
    return Entry(
        program=_flash_program(spec, tiling, f"accy_kernel_attention_{stem}"),
        target=f"accy.kernel.attention.{stem}",
        layer=Layer.block,
        category=Category.attention,
        specialization=_flash_specialization(spec, tiling),
    )
