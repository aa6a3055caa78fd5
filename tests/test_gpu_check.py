"""The GPU check's pieces that need no GPU (scripts/gpu_check.sh, bench/gpu*.py): the tile
comparison on numpy and ptx at tiny sizes, the estimate, the emulator's side of the calibration
and race verdicts, the parsers of Nsight Compute's and compute-sanitizer's output, and the
summary's JSON, on canned tool output where the tools need a GPU."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from accy import bf16, f16, i8

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # bench/ is the checkout's, not installed; appended: accy stays the one imported
    sys.path.append(str(ROOT))

from bench import gpu, gpu_probe, gpu_summary  # noqa: E402
from bench.gpu_kernels import SMALL, matmul_case, round_to_tf32  # noqa: E402


def test_tf32_rounding_is_to_nearest_ties_away_and_keeps_ten_bits():
    one = np.float32(1.0)
    ulp = 2.0 ** -10
    x = np.array([1 + ulp / 2, 1 + ulp / 2 + 2 ** -14, -(1 + 1.5 * ulp), 1 + ulp / 2 - 2 ** -14, 3.0], np.float32)
    got = round_to_tf32(x)
    np.testing.assert_array_equal(got, np.array([1 + ulp, 1 + ulp, -(1 + 2 * ulp), one, 3.0], np.float32))
    np.testing.assert_array_equal(round_to_tf32(got), got)
    assert not (got.view(np.uint32) & 0x1FFF).any()


def test_every_tile_kernel_kind_agrees_on_numpy_and_ptx_at_tiny_sizes():
    jobs = gpu.tile_jobs(["numpy", "ptx"], "sm_90",
                         matmuls=[(bf16, (16, 16, 16, 1), "ieee"), (i8, (16, 16, 32, 1), "ieee")],
                         attention=[((1, 5, 7, 16, 8), f16, True)])
    results = gpu.compare_tiles(["numpy", "ptx"], jobs=jobs, workers=1)
    assert list(results) == list(jobs)
    for name, case in results.items():
        assert case["agree"] and case["numpy_within_bound"] and case["ran"] == ["numpy", "ptx"], (name, case)
    bf16_case = results["matmul bf16 16x16x16w1"]
    assert 0 < bf16_case["numpy_vs_float64"] <= 1 and bf16_case["atol"] > 0  # a bound that measures something
    assert results["matmul i8 16x16x32w1"]["atol"] == 0.0  # integers: exact
    summary = gpu_summary.tiles_section(results)
    assert summary == {"cases": 3, "agree": 3, "disagree": [], "backends": ["numpy", "ptx"], "failed": {}}


def test_a_case_that_raises_is_a_disagreement_not_a_crash():
    jobs = {"broken": ("matmul", (bf16, (16, 16, 16, 3), "ieee"), ("numpy",), "sm_90")}  # 3 warps: no such tile
    result = gpu.compare_tiles(["numpy"], jobs=jobs, workers=1)["broken"]
    assert not result["agree"] and "case" in result["failed"]
    assert gpu_summary.tiles_section({"broken": result})["disagree"] == ["broken"]


def test_the_estimate_gives_each_hopper_gpu_its_roofline():
    case = matmul_case(64, 64, 32, 4, 128, 128, 64)
    result = gpu.estimate(case, sample=1)
    assert result["blocks"] == 4 and result["blocks_run"] == 1
    # scaled up from the one program, at sm_90a (an H100's or H200's code): each program's 4
    # k-steps one m64n64k16 wgmma, which each of the warpgroup's 4 warps issues
    assert result["mma_instructions"] == 4 * 4 * 4
    for name in ("h100", "h200"):
        g = result["gpus"][name]
        assert g["estimated_seconds"] > 0 and g["bound"] in ("compute", "memory", "latency")
        assert g["tflops"] == pytest.approx(case.flops / g["estimated_seconds"] / 1e12)


def test_the_emulator_side_counts_the_transposes_and_the_memory_check_finds_the_planted_race():
    results = gpu_probe.emulator(["transpose-w33", "transpose-w32", "transpose-w32-no-barrier"])
    padded, unpadded, racy = (results[k] for k in ("transpose-w33", "transpose-w32", "transpose-w32-no-barrier"))
    # 2 blocks of 32 warps, each reading a column: 31 conflicts a request unpadded, none padded
    assert padded["counters"]["bank_conflicts"] == 0 and unpadded["counters"]["bank_conflicts"] == 2 * 32 * 31
    assert padded["ptx"]["verdict"] == unpadded["ptx"]["verdict"] == "no race reported"
    assert padded["numpy_check_memory"]["verdict"] == "no race reported"
    assert racy["planted_race"] and racy["numpy_check_memory"]["verdict"] == "race reported"
    assert racy["ptx"]["verdict"] == "race reported" and racy["counters"] is None  # the emulator's race checker


NCU_CSV = """==PROF== Connected to process 123 (/usr/bin/python3.12)
==PROF== Profiling "tile_matmul_bf16_64x64x32w4": 0%....50%....100% - 3 passes
==PROF== Disconnected from process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","python3.12","127.0.0.1","tile_matmul_bf16_64x64x32w4","1","7","(128, 1, 1)","(2, 2, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","0"
"0","123","python3.12","127.0.0.1","tile_matmul_bf16_64x64x32w4","1","7","(128, 1, 1)","(2, 2, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum","sector","4,096"
"0","123","python3.12","127.0.0.1","tile_matmul_bf16_64x64x32w4","1","7","(128, 1, 1)","(2, 2, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed.sum","inst","20,000"
"1","123","python3.12","127.0.0.1","shared_transpose_w32","1","7","(32, 32, 1)","(2, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum","","1,984"
"1","123","python3.12","127.0.0.1","shared_transpose_w32","1","7","(32, 32, 1)","(2, 1, 1)","0","9.0","Command line profiler metrics","smsp__inst_executed.sum","inst","n/a"
"""


def test_ncu_csv_parses_to_one_record_per_launch_and_sits_beside_the_emulator():
    launches = gpu_probe.parse_ncu_csv(NCU_CSV)
    assert [(r["id"], r["kernel"]) for r in launches] == [(0, "tile_matmul_bf16_64x64x32w4"), (1, "shared_transpose_w32")]
    assert launches[0]["metrics"]["l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"] == 4096
    assert launches[1]["metrics"]["smsp__inst_executed.sum"] is None
    counters = {"global_traffic": {k: {"requests": 0, "sectors": 0} for k in ("load", "store", "atomic", "async_copy")},
                "shared_traffic": {k: {"bank_conflicts": 0} for k in ("load", "store", "ldmatrix")},
                "bank_conflicts": 0, "shared_wavefronts": 0, "instructions": 16_000, "mma_instructions": 0,
                "dram_bytes": 0}
    counters["global_traffic"]["async_copy"]["sectors"] = 2048
    rows = gpu_probe.side_by_side(launches[0]["metrics"], counters)
    assert rows["global load sectors (ld + cp.async)"] == {"gpu": 4096, "emulator": 2048, "gpu_over_emulator": 2.0}
    assert rows["warp instructions (SASS vs PTX)"]["gpu_over_emulator"] == 1.25
    assert rows["ldmatrix bank conflicts"]["gpu"] is None  # not measured: no ratio


def test_the_metric_query_keeps_the_core_and_what_this_ncu_knows():
    listing = ("Device NVIDIA H100 80GB HBM3 (GH100)\n-----\nMetric Name     Metric Description\n"
               "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts   # of sectors\n"
               "smsp__inst_executed     # of warp instructions\n")
    known = gpu_probe.parse_query_metrics(listing)
    assert known == {"l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts", "smsp__inst_executed"}
    chosen = gpu_probe.choose_metrics(known)
    assert chosen[:len(gpu_probe.NCU_CORE)] == list(gpu_probe.NCU_CORE)
    assert chosen[len(gpu_probe.NCU_CORE):] == ["l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"]
    assert gpu_probe.choose_metrics(None) == list(gpu_probe.NCU_CORE)


RACY = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at shared_transpose_w32_no_barrier+0x1f0
=========     and Read access at shared_transpose_w32_no_barrier+0x230 [1984 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


@pytest.mark.parametrize("text, verdict, counts", [
    (RACY, "race reported", (1, 1, 0)),
    ("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", "no race reported", (0, 0, 0)),
    ("========= RACECHECK SUMMARY: 2 hazards displayed (0 errors, 2 warnings)\n", "warnings only", (2, 0, 2)),
    ("========= Error: process didn't terminate successfully\n", "no summary", (None, None, None)),
])
def test_racecheck_output_parses_to_a_verdict(text, verdict, counts):
    report = gpu_probe.parse_racecheck(text)
    assert report.verdict == verdict and (report.hazards, report.errors, report.warnings) == counts
    if verdict == "race reported":
        assert report.first and "Race reported between Write access" in report.first[0]


def test_the_tools_are_a_skip_with_a_reason_when_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert gpu_probe.ncu(["transpose-w32"], str(tmp_path)) == {"skipped": "ncu is not on PATH"}
    assert gpu_probe.racecheck(["transpose-w32"], str(tmp_path)) == {"skipped": "compute-sanitizer is not on PATH"}
    assert gpu_probe.main(["ncu", "--out", str(tmp_path), "--dry-run"]) == 0
    assert json.loads((tmp_path / "ncu.json").read_text()) == {"skipped": "dry run: no GPU"}


def _write(path, name, data):
    (path / name).write_text(json.dumps(data))


def test_the_summary_sets_measured_estimated_and_both_race_checkers_side_by_side(tmp_path):
    key = "matmul-bf16-64x64x32w4"
    estimate = {"what": "w", "flops": 2 * 4096 ** 3, "sampled": 0.01,
                "gpus": {g: {"estimated_seconds": 4e-4, "bound": "compute", "limiter": "shared memory", "tflops": 343.6}
                         for g in ("h100", "h200")}}
    _write(tmp_path, "estimates.json", {key: estimate, "attention-bf16-h64": {"what": "a", "error": "boom"}})
    _write(tmp_path, "tile_bench.json", {key: {
        "what": "w", "flops": 2 * 4096 ** 3, "kernel_ms_median": 0.8, "tflops": 171.8, "accuracy": {"ok": True},
        "torch": {"baseline": "cuBLAS", "kernel_ms_median": 0.2, "tflops": 687.2}, "fraction_of_torch": 0.25,
        "target": 0.5, "meets_target": False}})
    counters = {k: 1 for k in gpu_summary.COUNTERS}
    _write(tmp_path, "emulator.json", {
        "transpose-w32-no-barrier": {"counters": counters, "planted_race": True, "ptx": {"verdict": "no race reported"},
                                     "numpy_check_memory": {"verdict": "race reported"}},
        "transpose-w32": {"counters": counters, "planted_race": False, "ptx": {"verdict": "no race reported"},
                          "numpy_check_memory": {"verdict": "no race reported"}}})
    _write(tmp_path, "racecheck.json", {"tool": "cs", "cases": {"transpose-w32-no-barrier": {"verdict": "race reported"},
                                                                 "transpose-w32": {"verdict": "no race reported"}}})
    _write(tmp_path, "ncu.json", {"skipped": "ncu is not on PATH"})
    s = gpu_summary.summary(str(tmp_path), seconds=12, dry_run=False, rcs={"tests": 0}, device="NVIDIA H100 80GB HBM3")
    assert s["gpu"] == "h100" and s["note"] is None and s["tiles"] is None and s["cuda_tests"] is None
    row = s["bench"][key]
    assert row["measured"] == {"kernel_ms": 0.8, "tflops": 171.8, "accuracy_ok": True}
    assert row["estimate"]["gpu"] == "h100" and row["measured_over_estimate"] == pytest.approx(2.0)
    assert row["fraction_of_torch"] == 0.25 and row["meets_target"] is False
    assert s["bench"]["attention-bf16-h64"] == {"what": "a", "flops": None, "measured": None,
                                                "estimate": {"error": "boom"}}
    race = s["racecheck"]["cases"]
    assert race["transpose-w32-no-barrier"] == {"planted_race": True, "compute_sanitizer": "race reported",
                                                "emulator_ptx": "no race reported",
                                                "numpy_check_memory": "race reported", "agree": False}
    assert race["transpose-w32"]["agree"] is True
    assert s["calibration"]["ncu"] == "ncu is not on PATH" and s["calibration"]["cases"]["transpose-w32"]["emulator"]
    assert "dry run" not in gpu_summary.headline(s)
    json.dumps(s)  # plain JSON
    dry = gpu_summary.summary(str(tmp_path / "nothing"), seconds=1, dry_run=True, rcs={})
    assert dry["note"].startswith("dry run: no GPU") and dry["bench"] is None and dry["racecheck"] is None
    assert gpu_summary.headline(dry).startswith("dry run: no GPU")


def test_the_small_launches_are_the_benchmark_kernels_and_the_transposes():
    transposes = {"transpose-w33", "transpose-w32", "transpose-w32-no-barrier"}
    assert set(SMALL) - transposes == set(gpu.BENCH)  # the same kernels, on a few programs
    for key in gpu.BENCH:
        assert SMALL[key].program is gpu.BENCH[key].program or key.startswith("attention")
        assert 0 < SMALL[key].flops < gpu.BENCH[key].flops
    assert gpu_probe.RACY <= transposes


def test_the_script_parses_and_passes_shellcheck():
    script = ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("no shellcheck here")
    result = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


FAKE_NCU = """#!{python}
# a stand-in for ncu: lists one metric, or writes what the launches' manifest and ncu's CSV would hold
import json, sys
args = sys.argv[1:]
if args == ["--query-metrics"]:
    print("smsp__inst_executed   # of warp instructions")
    sys.exit(0)
log, manifest = args[args.index("--log-file") + 1], args[args.index("--manifest") + 1]
keys = args[args.index("--manifest") + 2:]
json.dump([{{"key": k, "kernel": "kernel_" + k}} for k in keys], open(manifest, "w"))
with open(log, "w") as f:
    f.write("==PROF== Connected\\n" + '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\\n')
    for i, k in enumerate(keys):
        f.write(f'"{{i}}","kernel_{{k}}","smsp__inst_executed.sum","inst","{{1000 * (i + 1):,}}"\\n')
"""


def _fake_tool(folder, name, text):
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)


def test_the_tools_run_on_the_launches_and_their_output_maps_back_to_the_cases(monkeypatch, tmp_path):
    """Stand-ins for ncu and compute-sanitizer on PATH: the arguments reach them, and their
    output comes back to the cases it belongs to."""
    tools = tmp_path / "bin"
    tools.mkdir()
    _fake_tool(tools, "ncu", FAKE_NCU.format(python=sys.executable))
    racy = ("========= Error: Race reported between Write access at k+0x10\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)")
    clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    _fake_tool(tools, "compute-sanitizer", "#!{}\nimport sys\nprint({!r} if any('no-barrier' in a for a in sys.argv) "
               "else {!r})\n".format(sys.executable, racy, clean))
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    keys = ["transpose-w32", "transpose-w32-no-barrier"]
    result = gpu_probe.ncu(keys, str(tmp_path), seconds=30)
    assert result["returncode"] == 0 and result["metrics"] == list(gpu_probe.NCU_CORE)  # only a core name listed
    assert {k: (c["kernel"], c["named_as_launched"], c["metrics"]) for k, c in result["cases"].items()} == {
        "transpose-w32": ("kernel_transpose-w32", True, {"smsp__inst_executed.sum": 1000.0}),
        "transpose-w32-no-barrier": ("kernel_transpose-w32-no-barrier", True, {"smsp__inst_executed.sum": 2000.0})}
    checked = gpu_probe.racecheck(keys, str(tmp_path), workers=2, seconds=30)["cases"]
    assert checked["transpose-w32"]["verdict"] == "no race reported"
    assert checked["transpose-w32-no-barrier"]["verdict"] == "race reported"
    assert (tmp_path / "racecheck-transpose-w32-no-barrier.log").exists()


def test_a_tool_past_its_time_is_stopped_with_its_process_group():
    start = time.monotonic()
    code, _ = gpu_probe._run(["bash", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert code == "timed out" and time.monotonic() - start < 10


TRITON_LAUNCHES = """
import math, os, sys
os.environ["TRITON_INTERPRET"] = "1"  # Triton's interpreter: its kernels on the CPU, on torch CPU tensors
sys.path.insert(0, sys.argv[1])
import torch
from bench import triton_kernels as T
g = torch.Generator().manual_seed(0)
# f16: the interpreter computes in NumPy, which has no bf16 (the GPU check launches bf16)
a, b = torch.randn(130, 70, generator=g).half(), torch.randn(70, 150, generator=g).half()
c = torch.zeros(130, 150)
T.launch_matmul(a, b, c)
assert (c - a.float() @ b.float()).abs().max() < 1e-3, "matmul"
for head in (64, 128):
    q, k, v = (torch.randn(2, 128, head, generator=g).half() for _ in range(3))
    o = torch.zeros_like(q)
    T.launch_attention(q, k, v, o)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert (o.float() - want).abs().max() < 2e-3, head
print("ok")
"""


def test_the_triton_baselines_launch_and_compute_the_jobs():
    """The GPU check's Triton kernels (bench.triton_kernels), launched as the benchmark launches
    them, on Triton's CPU interpreter: the grid and the arguments are right (a matmul with edges
    and both attention tilings)."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    run = subprocess.run([sys.executable, "-c", TRITON_LAUNCHES, str(ROOT)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_a_job_triton_has_no_kernel_for_is_a_reason_not_a_crash():
    torch = pytest.importorskip("torch")
    case = matmul_case(64, 64, 32, 4, 64, 64, 64, dtype=f16)
    assert gpu.bench_triton(torch, None, case, []) == {"error": "Triton's kernels here are the bf16 jobs only"}
