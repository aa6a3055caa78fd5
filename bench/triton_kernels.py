"""Triton's side of the SASS comparison (bench/sass.py): the same jobs written as Triton users
write them, compiled with no GPU for a given compute capability.  Imported only where Triton
is installed.

The pointers, sizes and leading strides are specialised as Triton's JIT specialises the
arguments of contiguous, 16-byte-aligned tensors whose sizes are multiples of 16
(``tt.divisibility`` 16), and unit strides become the constant 1."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default (it warns when unset)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402


def ptxas_for(capability: int) -> str:
    """The ptxas Triton assembles its cubins with for ``capability`` (its PTX may name a newer
    ISA than accy's ptxas reads)."""
    return get_ptxas(capability).path


@triton.jit
def matmul(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + ks
        x = tl.load(a + rows[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def attention(q, k, v, o, N, scale, stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn,
              stride_ob, stride_on, BM: tl.constexpr, BN: tl.constexpr, HEAD: tl.constexpr):
    """FlashAttention-2's forward pass over (batch*heads, tokens, HEAD) tensors, no mask
    (the token count a multiple of BN), scores in base 2."""
    start = tl.program_id(0) * BM
    bh = tl.program_id(1)
    rows = start + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dims = tl.arange(0, HEAD)
    query = tl.load(q + bh * stride_qb + rows[:, None] * stride_qn + dims[None, :])
    m = tl.full((BM,), float("-inf"), tl.float32)
    l = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, HEAD), tl.float32)
    for k0 in range(0, N, BN):
        key = tl.load(k + bh * stride_kb + (k0 + cols)[None, :] * stride_kn + dims[:, None])
        scores = tl.dot(query, key) * scale
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.math.exp2(m - m_new)
        weights = tl.math.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(weights, 1)
        value = tl.load(v + bh * stride_vb + (k0 + cols)[:, None] * stride_vn + dims[None, :])
        acc = tl.dot(weights.to(value.dtype), value, acc * alpha[:, None])
        m = m_new
    tl.store(o + bh * stride_ob + rows[:, None] * stride_on + dims[None, :], (acc / l[:, None]).to(o.dtype.element_ty))


_SIGNATURES = {
    "matmul": ({"a": "*bf16", "b": "*bf16", "c": "*fp32", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
                "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"},
               {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}),
    "attention": ({"q": "*bf16", "k": "*bf16", "v": "*bf16", "o": "*bf16", "N": "i32", "scale": "fp32",
                   "stride_qb": "i32", "stride_qn": "i32", "stride_kb": "i32", "stride_kn": "i32", "stride_vb": "i32",
                   "stride_vn": "i32", "stride_ob": "i32", "stride_on": "i32"}, {}),
}


# Triton's tilings of the issue's jobs (issue 32's table), as the GPU check launches them:
# (constants, warps, stages); the attention's by head dimension
MATMUL_TILES = (dict(BM=128, BN=128, BK=64), 8, 3)
ATTENTION_TILES = {64: (dict(BM=64, BN=64, HEAD=64), 4, 2), 128: (dict(BM=128, BN=64, HEAD=128), 8, 2)}


def launch_matmul(a, b, c) -> None:
    """``c = a @ b`` by :func:`matmul` at :data:`MATMUL_TILES` (torch tensors on one GPU; on the
    CPU under ``TRITON_INTERPRET=1``): bf16 ``a`` (M, K) and ``b`` (K, N), f32 ``c``."""
    constants, warps, stages = MATMUL_TILES
    (m, k), n = a.shape, b.shape[1]
    grid = (triton.cdiv(m, constants["BM"]), triton.cdiv(n, constants["BN"]))
    matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 **constants, num_warps=warps, num_stages=stages)


def launch_attention(q, k, v, o) -> None:
    """``o = softmax(q k^T / sqrt(d)) v`` by :func:`attention` at :data:`ATTENTION_TILES`, over
    (batch*heads, tokens, d) bf16 tensors with as many keys as queries, a multiple of the tile."""
    constants, warps, stages = ATTENTION_TILES[q.shape[-1]]
    batch, tokens = q.shape[0], q.shape[1]
    if k.shape[1] != tokens or v.shape[1] != tokens or tokens % constants["BM"] or tokens % constants["BN"]:
        raise ValueError(f"Triton's attention here takes as many keys and values as queries, a multiple of "
                         f"{constants['BM']} and {constants['BN']}: got {tokens} queries, {k.shape[1]} keys, "
                         f"{v.shape[1]} values")
    if any(t.stride(-1) != 1 for t in (q, k, v, o)):
        raise ValueError("Triton's attention here takes tensors contiguous along the head dimension")
    scale = math.log2(math.e) / math.sqrt(q.shape[-1])  # its scores are in base 2
    grid = (tokens // constants["BM"], batch)
    attention[grid](q, k, v, o, tokens, scale, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                    v.stride(1), o.stride(0), o.stride(1), **constants, num_warps=warps, num_stages=stages)


def compile_for(name: str, constants: dict, warps: int, stages: int, capability: int):
    """Triton's compiled kernel ``name`` (its ``asm["ptx"]``, ``asm["cubin"]``, ``metadata``)."""
    fn = {"matmul": matmul, "attention": attention}[name]
    signature, unit = _SIGNATURES[name]
    names = list(signature)
    params = fn.arg_names
    sig = {p: ("constexpr" if p in unit or p in constants else signature[p]) for p in params}
    divisible = [p for p in names if p not in unit and (signature[p] == "i32" or signature[p].startswith("*"))]
    specialised = {(params.index(p),): [["tt.divisibility", 16]] for p in divisible}
    source = ASTSource(fn, sig, {**unit, **constants}, specialised)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": warps, "num_stages": stages})


def emulated_estimate(name: str, constants: dict, warps: int, stages: int, capability: int = 80) -> float:
    """Triton's PTX for ``capability`` (80: mma.sync; 90: its sm_90a wgmma) for the job ``name`` at
    issue 32's launch (matmul 4096 cubed; attention B*H = 16, 4096 tokens) on accy's emulator, 2
    blocks sampled, through the H200 roofline: microseconds, the figure ``bench.sass`` sets beside
    accy's.  Its inputs are zeros: the counts do not depend on them."""
    from accy.emulator import Device
    from accy.emulator.profile import build_profile, gpu_named, run_counted

    compiled = compile_for(name, constants, warps, stages, capability)
    device = Device()
    function = device.load_module(compiled.asm["ptx"]).function(compiled.metadata.name)

    def zeros(nbytes):
        address = device.alloc(nbytes)
        device.memset(address, 0, nbytes)
        return address

    if name == "matmul":
        m = n = k = 4096
        values = [zeros(m * k * 2), zeros(k * n * 2), zeros(m * n * 4), m, n, k, k, n, n]
        grid = (m // constants["BM"], n // constants["BN"], 1)
    else:
        batch, tokens, head = 16, 4096, constants["HEAD"]
        size = batch * tokens * head
        values = [zeros(size * 2) for _ in range(4)] + [tokens, math.log2(math.e) / math.sqrt(head)]
        values += [tokens * head, head] * 4
        grid = (tokens // constants["BM"], batch, 1)
    values += [0] * (len(function.param_types) - len(values))  # Triton's scratch pointers: none needed
    block = (warps * 32, 1, 1)
    counters, chosen = run_counted(function, grid, block, values, compiled.metadata.shared, 2)
    arch = "sm_80" if capability == 80 else "sm_90a"
    profile = build_profile(function, counters, chosen, kernel=compiled.metadata.name, arch=arch,
                            gpu=gpu_named("h200"), grid=grid, block=block, gmem=device.gmem)
    return profile.estimated_seconds * 1e6
