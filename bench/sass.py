"""The SASS a GPU would run, without a GPU: the tile kernels of the examples (the matmul) and
the library (the tile attention entry), and the matmul as Triton users write it (masked loads
through index tiles), compiled by accy for sm_80, sm_90 and sm_90a (wgmma), assembled by
ptxas and disassembled by nvdisasm; per kernel its registers, spills, shared bytes, the
pipeline stages in effect, its whole SASS and its main loop's trip (accy.codegen.nvptx.sass:
the in-bounds path, one warp) per m16n8k16 tensor-core instruction, with the trip's mix.
When Triton is installed (the bench extra) it compiles the same jobs, written as Triton
users write them and specialised as Triton's JIT specialises contiguous, 16-byte-aligned
tensors, and its figures stand beside accy's.  Triton is a yardstick here, never a source.
Beside them, accy's kernel at the issue's launch (matmul 4096 cubed; attention B*H = 16, 4096
tokens) as ``accy profile`` estimates it on an H200, and Triton's sm_80 PTX for the job on the
same emulator and model (``--no-estimates``/``--quick`` skip them).

    python -m bench --sections sass        (or python -m bench.sass [--arch sm_80,sm_90])

The issue's targets (SASS per m16n8k16, registers, pipeline) are printed beside each row."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import attrs

HERE = os.path.dirname(os.path.abspath(__file__))


@attrs.frozen
class Job:
    """One kernel the section compiles: accy's program (a zero-argument factory), Triton's
    counterpart (name in :func:`triton_kernels`, its constants, warps and stages) and the
    targets of issue 32 (SASS per m16n8k16 unit, registers)."""

    name: str
    accy: object
    triton: tuple | None
    per_mma_target: float
    register_target: int
    arguments: object = None  # a factory of the launch (the variant it runs; the emulator's estimate)
    estimate_target: float | None = None  # microseconds on an H200, Triton's PTX in the same emulator
    wgmma_target: float | None = None  # issue 34's SASS per m16n8k16 at sm_90a (wgmma)


def _matmul_arguments():
    import numpy as np

    from accy import bf16
    n = 4096  # the matmul: 4096 cubed
    return [np.zeros((n, n), np.float32), np.ones((n, n), bf16.numpy), np.ones((n, n), bf16.numpy)]


def _attention_arguments(head):
    def make():
        import numpy as np

        from accy import bf16
        q = np.ones((16, 4096, head), bf16.numpy)  # the attention: B*H = 16, 4096 tokens
        return [np.zeros_like(q), q, q, q]
    return make


def _matmul(bm, bn, bk, warps, stages):
    def make():
        sys.path.insert(0, os.path.join(HERE, "..", "examples"))
        from tile_matmul import make_matmul

        from accy import bf16
        return make_matmul(bf16, bm, bn, bk, warps=warps, num_stages=stages)
    return make


def _masked_matmul(bm, bn, bk, warps, stages):
    """The matmul as Triton users write it: masked loads through index tiles (bench/triton_style.py's
    form, in bf16): the form the GPU code must also serve, not only ``load_tile``'s."""
    def make():
        from accy import axis, bf16, cdiv, f32, kernel, tensor

        @kernel(f"masked_matmul_{bm}x{bn}x{bk}", c=tensor(f32, 2), a=tensor(bf16, 2), b=tensor(bf16, 2))
        def matmul(k, p):
            M, K = p.a.shape
            N = p.b.shape[1]

            @k.for_each_tile(grid=(axis("m", cdiv(M, bm)), axis("n", cdiv(N, bn))), warps=warps, num_stages=stages)
            def program(t, pid):
                rm = pid["m"] * bm + t.arange(bm)
                rn = pid["n"] * bn + t.arange(bn)

                def step(t, k0, acc):
                    rk = k0 + t.arange(bk)
                    a = p.a.load((rm[:, None], rk[None, :]), mask=(rm[:, None] < M) & (rk[None, :] < K))
                    b = p.b.load((rk[:, None], rn[None, :]), mask=(rk[:, None] < K) & (rn[None, :] < N))
                    return t.dot(a, b, acc)

                acc = t.fold_range(0, K, bk, t.zeros((bm, bn), f32), step)
                p.c.store((rm[:, None], rn[None, :]), acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

        return matmul
    return make


def _attention(head, block_q, block_k, warps):
    def make():
        from accy import bf16
        from accy.library import AttentionTiles, ScaledDotProduct, scaled_dot_product_tile
        spec = ScaledDotProduct(16, 4096, 4096, head, head)
        return scaled_dot_product_tile(spec, bf16, AttentionTiles(block_q, block_k, warps)).program
    return make


JOBS = (
    Job("matmul 128x128x64, 8 warps, 3 stages", _matmul(128, 128, 64, 8, 3),
        ("matmul", dict(BM=128, BN=128, BK=64), 8, 3), 3.2, 201, _matmul_arguments, 276, 1.8),
    Job("matmul 128x128x64 as Triton users write it (masked loads), 8 warps, 3 stages", _masked_matmul(128, 128, 64, 8, 3),
        ("matmul", dict(BM=128, BN=128, BK=64), 8, 3), 3.2, 201, _matmul_arguments, 276, 1.8),
    Job("matmul 128x128x32, 8 warps, 3 stages", _matmul(128, 128, 32, 8, 3),
        ("matmul", dict(BM=128, BN=128, BK=32), 8, 3), 4.16, 186, _matmul_arguments, None, 2.41),
    Job("attention hd 64, 64x64, 4 warps", _attention(64, 64, 64, 4),
        ("attention", dict(BM=64, BN=64, HEAD=64), 4, 2), 5.93, 183, _attention_arguments(64), 188, 4.77),
    Job("attention hd 128, 64x64, 4 warps (Triton 128x64, 8 warps)", _attention(128, 64, 64, 4),
        ("attention", dict(BM=128, BN=64, HEAD=128), 8, 2), 4.38, 221, _attention_arguments(128), 336, 2.89),
)


@attrs.frozen
class Row:
    """One compiler's figures for one job at one arch."""

    compiler: str
    arch: str
    registers: int
    spills: int  # bytes stored + loaded
    shared: int  # bytes (static, or Triton's dynamic)
    stages: str
    instructions: int
    trip: int | None
    tensor: int | None  # tensor-core instructions per trip
    units: float | None  # their work in m16n8k16 products (an HGMMA is many)
    mix: dict
    variant: str = ""  # accy's index arithmetic at the job's launch: "32-bit indices" or "64-bit"

    @property
    def per_mma(self) -> float | None:
        """SASS per m16n8k16 unit of tensor work."""
        return self.trip / self.units if self.trip and self.units else None


def _row(compiler: str, arch: str, cubin: bytes, resources, shared: int, stages: str, variant: str = "") -> Row:
    from accy.codegen.nvptx.sass import disassemble, main_loop, parse

    fn = parse(disassemble(cubin))[0]
    trip = main_loop(fn)
    return Row(compiler, arch, resources.registers, resources.spill_stores + resources.spill_loads, shared, stages,
               sum(not i.padding for i in fn.instructions), trip.count if trip else None,
               trip.tensor if trip else None, trip.mma_units if trip else None,
               {k.name.lower(): v for k, v in trip.mix().items()} if trip else {}, variant)


def _stages(program, arch: str) -> str:
    from accy.lowering.software_pipeline import stages_in_effect

    return str(stages_in_effect(program.graph_for("cuda", arch)))


def accy_row(job: Job, arch: str) -> Row:
    from accy.codegen.abi import dynamic_shared_bytes
    from accy.codegen.nvptx.toolchain import assemble, resources

    program = job.accy()
    args = job.arguments() if job.arguments is not None else None
    ptx = program.ptx(arch, args=args)  # the launch's variant: 32-bit indices where its values fit
    res = resources(ptx, arch)
    shared = res.shared_bytes + dynamic_shared_bytes(program.graph_for("cuda", arch))
    variant = "" if args is None else "32-bit indices" if program.indices_32_bit(args, arch) else "64-bit"
    return _row("accy", arch, assemble(ptx, arch), res, shared, _stages(program, arch), variant)


def triton_row(job: Job, arch: str) -> Row | str:
    """Triton's figures, or why there are none."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton not installed (pip install '.[bench]')"
    from accy.codegen.nvptx.toolchain import resources

    from . import triton_kernels

    name, constants, warps, stages = job.triton
    compiled = triton_kernels.compile_for(name, constants, warps, stages, int(arch[3:].rstrip("a")))
    ptx = compiled.asm["ptx"]
    target = re.search(r"\.target\s+(\w+)", ptx).group(1)  # sm_90a where Triton emits wgmma
    res = resources(ptx, target, ptxas=triton_kernels.ptxas_for(int(arch[3:].rstrip("a"))))
    return _row("triton", target, compiled.asm["cubin"], res, compiled.metadata.shared, str(stages))


def run(archs=("sm_80", "sm_90", "sm_90a"), estimates: bool = True) -> list[dict]:
    from accy.codegen.nvptx.sass import find_nvdisasm

    if find_nvdisasm() is None:
        print("  skipped: nvdisasm not found (pip install nvidia-cuda-nvdisasm, in the bench extra)")
        return []
    out = []
    for job in JOBS:
        for arch in archs:
            began = time.perf_counter()
            rows = [accy_row(job, arch), triton_row(job, arch)]
            target = job.wgmma_target if arch == "sm_90a" else job.per_mma_target
            out.append({"job": job.name, "arch": arch, "seconds": time.perf_counter() - began,
                        "per_mma_target": target, "register_target": job.register_target,
                        "rows": [attrs.asdict(r) | {"per_mma": r.per_mma} if isinstance(r, Row) else {"missing": r}
                                 for r in rows]})
            print_job(out[-1])
        if job.arguments is not None and job.estimate_target is not None and estimates:
            out[-1]["estimate_us"] = estimate(job)
            theirs = triton_estimate(job)
            out[-1]["triton_estimate_us"] = theirs if isinstance(theirs, float) else None
            versus = f"Triton's sm_80 PTX on the same emulator: {theirs:.2f} us" if isinstance(theirs, float) \
                else f"Triton's: {theirs}"
            print(f"    accy's estimate on an H200 (sm_90 PTX on the emulator, 2 blocks sampled): "
                  f"{out[-1]['estimate_us']:.2f} us; {versus} (issue 32's figure for it: {job.estimate_target} us)")
            if "sm_90a" in archs:  # Hopper's own code on both sides
                out[-1]["estimate_90a_us"] = estimate(job, "sm_90a")
                theirs = triton_estimate(job, 90)
                out[-1]["triton_estimate_90a_us"] = theirs if isinstance(theirs, float) else None
                versus = f"Triton's sm_90a PTX: {theirs:.2f} us" if isinstance(theirs, float) else f"Triton's: {theirs}"
                print(f"    at sm_90a (wgmma): accy's estimate {out[-1]['estimate_90a_us']:.2f} us; {versus}")
    return out


def triton_estimate(job: Job, capability: int = 80) -> float | str:
    """Triton's PTX for the job on the emulator (bench.triton_kernels.emulated_estimate), or why none."""
    try:
        from . import triton_kernels
    except ImportError:
        return "Triton not installed (pip install '.[bench]')"
    name, constants, warps, stages = job.triton
    return triton_kernels.emulated_estimate(name, constants, warps, stages, capability)


def estimate(job: Job, arch: str = "sm_90") -> float:
    """accy's kernel at the issue's launch on an H200, microseconds (accy profile's model)."""
    profile = job.accy().profile(job.arguments(), arch=arch, gpu="h200", sample=2)
    return profile.estimated_seconds * 1e6


def print_job(entry: dict) -> None:
    print(f"  {entry['job']} at {entry['arch']} (targets: <= {entry['per_mma_target']} SASS per m16n8k16, "
          f"<= {entry['register_target']} registers, 0 spills)")
    for r in entry["rows"]:
        if "missing" in r:
            print(f"    triton: {r['missing']}")
            continue
        per = f"{r['per_mma']:.2f}" if r["per_mma"] else "-"
        mix = ", ".join(f"{k} {v}" for k, v in r["mix"].items())
        print(f"    {r['compiler']:6} {r['arch']:6} trip {r['trip']} SASS ({r['tensor']} mma, {r['units'] or 0:g} "
              f"m16n8k16): {per} per m16n8k16; whole kernel "
              f"{r['instructions']}; {r['registers']} regs, {r['spills']} B spilled, {r['shared'] / 1024:.1f} KiB "
              f"shared, {r['stages']} stage(s); mix: {mix}"
              + (f"; {r['variant']}" if r.get("variant") else ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sass", description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_80,sm_90,sm_90a")
    parser.add_argument("--no-estimates", action="store_true", help="skip the emulator's H200 estimates")
    ns = parser.parse_args(argv)
    run(tuple(a for a in ns.arch.split(",") if a), estimates=not ns.no_estimates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
