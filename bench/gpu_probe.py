"""The GPU's own counters and race checker beside the emulator's (issue 19 §5), one launch at a time.

    python -m bench.gpu_probe launch [KEY ...] [--manifest F]   # one cuda launch of each kernel
    python -m bench.gpu_probe emulator --json F [KEY ...]       # the emulator's counts and race verdicts
    python -m bench.gpu_probe ncu --out DIR [KEY ...]           # Nsight Compute's counts of those launches
    python -m bench.gpu_probe racecheck --out DIR [KEY ...]     # compute-sanitizer's racecheck on each

The kernels are :data:`bench.gpu_kernels.SMALL`: the benchmark's kernels on a few programs and
a shared-memory transpose with and without its barrier.  ``launch`` runs each exactly once
(host arrays: only accy's kernels reach the GPU), so Nsight Compute's per-launch counts line up
with the emulator's ``Program.profile`` of the same launch (the whole grid, ``sample=None``).
A missing tool is a skip with its reason, not a failure.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import attrs

from .gpu_kernels import RACY, SMALL

GPU_ARCH = "sm_90"
# Nsight Compute's names (per launch, summed over the GPU): global loads (ld; cp.async is ldgsts),
# stores, shared-memory bank conflicts and wavefronts by op (ldsm: ldmatrix), warp instructions
NCU_CORE = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smsp__inst_executed.sum",
)
NCU_MORE = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__inst_executed_pipe_tensor.sum",
    "dram__bytes_read.sum",
    "gpu__time_duration.sum",
)
TOOL_SECONDS = 60  # the default time for all of a tool's processes: the shell passes its step's


# -- the launches -------------------------------------------------------------------------------------


def launch(keys, manifest=None) -> list[dict]:
    """Run each case once on ``cuda`` with host arrays, in order; the manifest says which kernel
    each launch is (Nsight Compute numbers its rows in launch order)."""
    done = []
    for key in keys:
        case = SMALL[key]
        case.program.run(case.arguments(), backend="cuda")
        done.append({"key": key, "kernel": case.program.name})
        print(f"launched {key} ({case.program.name})", flush=True)
        if manifest:
            with open(manifest, "w") as f:
                json.dump(done, f, indent=2)
    return done


# -- the emulator's side --------------------------------------------------------------------------------


def verdict(run) -> dict:
    """How ``run()`` ended for a race checker: a RaceError is a race reported; finishing is none."""
    from accy.errors import AccyError, RaceError

    try:
        run()
    except RaceError as e:
        return {"verdict": "race reported", "message": str(e).splitlines()[0]}
    except AccyError as e:
        return {"verdict": "error", "message": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
    return {"verdict": "no race reported"}


def emulator_case(key: str, arch: str = GPU_ARCH, gpu: str = "h200") -> dict:
    """The emulator's counters for the launch ``launch`` makes (the whole grid) and the race
    verdicts of the ptx backend (the emulator's checker) and of the numpy backend's memory check."""
    from accy.errors import RaceError

    case = SMALL[key]
    start = time.perf_counter()
    keep = ("kernel", "grid", "block", "blocks", "blocks_run", "instructions", "instruction_classes", "global_traffic",
            "shared_traffic", "bank_conflicts", "shared_wavefronts", "mma_instructions", "flops", "dram_bytes",
            "estimated_seconds", "bound", "limiter")
    try:
        counts = case.program.profile(case.arguments(), arch=arch, gpu=gpu, sample=None).to_dict()
        counters = {k: counts[k] for k in keep}
    except RaceError:  # the emulator checks every launch, the profile's too: no counts for a racy kernel
        counters = None
    result = {"what": case.what, "arch": arch, "gpu": gpu, "counters": counters,
              "seconds_to_profile": time.perf_counter() - start, "planted_race": key in RACY}
    result["ptx"] = verdict(lambda: case.program.run(case.arguments(), backend="ptx", arch=arch))
    result["numpy_check_memory"] = verdict(lambda: case.program.run(case.arguments(), backend="numpy",
                                                                    check_memory=True))
    return result


def emulator(keys, path=None, arch: str = GPU_ARCH, gpu: str = "h200") -> dict:
    results = {}
    for key in keys:
        try:
            result = emulator_case(key, arch, gpu)
        except Exception as e:  # one kernel's failure leaves the others
            result = {"error": f"{type(e).__name__}: {e}"}
        results[key] = result
        if "error" in result:
            print(f"{key:28s} FAILED: {result['error']}", flush=True)
        else:
            c = result["counters"]
            counted = ("no counters (the launch races)" if c is None else
                       f"{c['instructions']:,} warp instructions, {c['bank_conflicts']:,} bank conflicts")
            print(f"{key:28s} {counted}, ptx: {result['ptx']['verdict']}, numpy check_memory: "
                  f"{result['numpy_check_memory']['verdict']} ({result['seconds_to_profile']:.1f} s)", flush=True)
        _write(path, results)
    return results


def _write(path, results) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2)


# -- Nsight Compute -------------------------------------------------------------------------------------


def _number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None  # "n/a" and the like


def parse_ncu_csv(text: str) -> list[dict]:
    """``ncu --csv`` output (lines of its own, "==PROF== ...", skipped) as one record per
    profiled launch, in ID order: {"id", "kernel", "metrics": {name: value}}."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    launches: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        try:
            ident = int(row["ID"])
        except (KeyError, TypeError, ValueError):
            continue
        record = launches.setdefault(ident, {"id": ident, "kernel": row.get("Kernel Name", ""), "metrics": {}})
        if row.get("Metric Name"):
            record["metrics"][row["Metric Name"]] = _number(row.get("Metric Value", ""))
    return [launches[i] for i in sorted(launches)]


def parse_query_metrics(text: str) -> set[str]:
    """The base metric names ``ncu --query-metrics`` lists (its first column)."""
    return {m.group(1) for m in re.finditer(r"^\s*([a-z0-9]+__[a-z0-9_]+)\b", text, re.MULTILINE)}


def choose_metrics(available: set[str] | None) -> list[str]:
    """The core metrics, and the others this ncu lists (all of them when it listed nothing)."""
    if not available:
        return list(NCU_CORE)
    return list(NCU_CORE) + [m for m in NCU_MORE if m.split(".")[0] in available]


# (what, the ncu metrics that add up to it, the emulator's count): each launch's counts side by side
def _global(kinds, field):
    return lambda c: sum(c["global_traffic"][k][field] for k in kinds)


def _conflicts(kinds):
    return lambda c: sum(c["shared_traffic"][k]["bank_conflicts"] for k in kinds)


PAIRS = (
    ("global load sectors (ld + cp.async)", ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                                            "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"),
     _global(("load", "async_copy"), "sectors")),
    ("global load requests (ld + cp.async)", ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                                             "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum"),
     _global(("load", "async_copy"), "requests")),
    ("global store sectors", ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",), _global(("store",), "sectors")),
    ("shared load bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",),
     _conflicts(("load",))),
    ("shared store bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",),
     _conflicts(("store",))),
    ("ldmatrix bank conflicts", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",),
     _conflicts(("ldmatrix",))),
    ("shared bank conflicts, every op", ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",),
     lambda c: c["bank_conflicts"]),
    ("shared wavefronts, every op", ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",),
     lambda c: c["shared_wavefronts"]),
    ("warp instructions (SASS vs PTX)", ("smsp__inst_executed.sum",), lambda c: c["instructions"]),
    ("tensor-core instructions", ("smsp__inst_executed_pipe_tensor.sum",), lambda c: c["mma_instructions"]),
    ("dram bytes read (vs all distinct sectors)", ("dram__bytes_read.sum",), lambda c: c["dram_bytes"]),
)


def side_by_side(metrics: dict, counters: dict) -> dict:
    """Per :data:`PAIRS` row: the GPU's count (the metrics it measured, summed; None when it
    measured none), the emulator's, and their ratio."""
    rows = {}
    for what, names, ours in PAIRS:
        measured = [metrics[n] for n in names if metrics.get(n) is not None]
        gpu = sum(measured) if measured else None
        emulated = ours(counters)
        ratio = None if gpu is None else (gpu / emulated if emulated else (1.0 if gpu == 0 else None))
        rows[what] = {"gpu": gpu, "emulator": emulated, "gpu_over_emulator": ratio}
    return rows


def _left(deadline: float) -> float:
    return max(5.0, deadline - time.monotonic())


def _run(command, timeout: float) -> tuple[int | str, str]:
    """(return code or "timed out", stdout and stderr) of ``command``, in a process group of its
    own: on a timeout the whole group goes (a profiler's target process with it), not just the tool."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return "timed out", output


def ncu(keys, out: str, seconds: float = TOOL_SECONDS) -> dict:
    """Nsight Compute's metrics of one launch of each case (one ncu process, launches in order),
    all within ``seconds``; :func:`side_by_side` sets them beside the emulator's counters of the
    same launch."""
    tool = shutil.which("ncu")
    if tool is None:
        return {"skipped": "ncu is not on PATH"}
    deadline = time.monotonic() + seconds
    try:
        query = subprocess.run([tool, "--query-metrics"], capture_output=True, text=True, timeout=min(30, seconds / 4))
        available = parse_query_metrics(query.stdout) if query.returncode == 0 else None
    except subprocess.TimeoutExpired:
        available = None
    metrics = choose_metrics(available)
    manifest = os.path.join(out, "ncu_manifest.json")
    result = {"tool": tool, "metrics": metrics}
    for attempt in ("chosen", "core"):
        log = os.path.join(out, "ncu.csv")
        command = [tool, "--csv", "--print-units", "base", "--clock-control", "none", "--log-file", log,
                   "--metrics", ",".join(metrics), sys.executable, "-m", "bench.gpu_probe", "launch",
                   "--manifest", manifest, *keys]
        returncode, output = _run(command, _left(deadline))  # timed out: what it profiled still counts
        text = open(log).read() if os.path.exists(log) else ""
        result.update({"command": " ".join(command), "returncode": returncode, "output_tail": output[-2000:]})
        if returncode in (0, "timed out") or attempt == "core" or "metric" not in (output + text).lower():
            break
        metrics = list(NCU_CORE)  # a name this ncu does not know fails the whole run: once more with the core
        result["metrics"] = metrics
    launches = parse_ncu_csv(text)
    order = json.load(open(manifest)) if os.path.exists(manifest) else []
    cases = {}
    for launched, measured in zip(order, launches):
        cases[launched["key"]] = {"kernel": measured["kernel"], "metrics": measured["metrics"],
                                  "named_as_launched": launched["kernel"] in measured["kernel"]}
    result["cases"] = cases
    if len(launches) != len(order):
        result["warning"] = f"{len(launches)} profiled launches for {len(order)} launched kernels"
    return result


# -- compute-sanitizer's racecheck --------------------------------------------------------------------------

_SUMMARY = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


@attrs.frozen
class RacecheckReport:
    hazards: int | None  # None: no summary line (the tool did not finish)
    errors: int | None
    warnings: int | None
    first: tuple[str, ...]  # the first reported hazards' lines

    @property
    def verdict(self) -> str:
        if self.hazards is None:
            return "no summary"
        if self.errors:
            return "race reported"
        return "warnings only" if self.hazards else "no race reported"


def parse_racecheck(text: str) -> RacecheckReport:
    """compute-sanitizer --tool racecheck's output: its summary line and the first hazards."""
    first = tuple(line.strip("= ").strip() for line in text.splitlines()
                  if "hazard" in line.lower() and "SUMMARY" not in line or "Race reported" in line)[:6]
    m = _SUMMARY.search(text)
    if m is None:
        return RacecheckReport(None, None, None, first)
    return RacecheckReport(int(m.group(1)), int(m.group(2)), int(m.group(3)), first)


def _racecheck_one(tool: str, key: str, out: str, deadline: float) -> dict:
    command = [tool, "--tool", "racecheck", "--print-limit", "20", sys.executable, "-m", "bench.gpu_probe", "launch",
               key]
    returncode, text = _run(command, _left(deadline))
    with open(os.path.join(out, f"racecheck-{key}.log"), "w") as f:
        f.write(text)
    report = parse_racecheck(text)
    if returncode == "timed out":
        return {"verdict": "timed out", "returncode": returncode}
    return {"verdict": report.verdict, "hazards": report.hazards, "errors": report.errors,
            "warnings": report.warnings, "first": list(report.first), "returncode": returncode}


def racecheck(keys, out: str, workers: int = 4, seconds: float = TOOL_SECONDS) -> dict:
    """compute-sanitizer's racecheck on one launch of each case, a process each (``workers`` at
    once), all within ``seconds``."""
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return {"skipped": "compute-sanitizer is not on PATH"}
    deadline = time.monotonic() + seconds
    with ThreadPoolExecutor(max(1, workers)) as pool:
        futures = {key: pool.submit(_racecheck_one, tool, key, out, deadline) for key in keys}
        cases = {key: future.result() for key, future in futures.items()}
    for key, case in cases.items():
        print(f"{key:28s} racecheck: {case['verdict']}" + (f" ({case['first'][0]})" if case.get("first") else ""),
              flush=True)
    return {"tool": tool, "cases": cases}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_probe")
    parser.add_argument("what", choices=("launch", "emulator", "ncu", "racecheck"))
    parser.add_argument("keys", nargs="*", help=f"cases (default all: {', '.join(SMALL)})")
    parser.add_argument("--json", help="write the results here (default for ncu/racecheck: OUT/<what>.json)")
    parser.add_argument("--out", default=".", help="ncu, racecheck: the folder for the tools' logs")
    parser.add_argument("--manifest", help="launch: write the launches made here")
    parser.add_argument("--arch", default=GPU_ARCH, help=f"emulator: the PTX to count (default {GPU_ARCH})")
    parser.add_argument("--gpu", default="h200", help="emulator: the GPU of the roofline (default h200)")
    parser.add_argument("--dry-run", action="store_true", help="ncu, racecheck: record a skip (no GPU here)")
    parser.add_argument("--workers", type=int, default=4, help="racecheck: processes at once (default 4)")
    parser.add_argument("--seconds", type=float, default=TOOL_SECONDS,
                        help=f"ncu, racecheck: the time all of the tool's processes may take (default {TOOL_SECONDS})")
    ns = parser.parse_args(argv)
    unknown = [k for k in ns.keys if k not in SMALL]
    if unknown:
        parser.error(f"unknown cases {unknown}: the cases are {', '.join(SMALL)}")
    keys = ns.keys or list(SMALL)
    if ns.what == "launch":
        launch(keys, ns.manifest)
        return 0
    if ns.what == "emulator":
        results = emulator(keys, ns.json, ns.arch, ns.gpu)
        return 0 if all("error" not in r for r in results.values()) else 1
    os.makedirs(ns.out, exist_ok=True)
    path = ns.json or os.path.join(ns.out, f"{ns.what}.json")
    if ns.dry_run:
        results = {"skipped": "dry run: no GPU"}
    elif ns.what == "ncu":
        results = ncu(keys, ns.out, ns.seconds)
    else:
        results = racecheck(keys, ns.out, ns.workers, ns.seconds)
    _write(path, results)
    if "skipped" in results:
        print(f"{ns.what}: skipped: {results['skipped']}")
        return 0
    ok = results.get("returncode", 0) == 0 if ns.what == "ncu" else all(
        c["verdict"] in ("race reported", "no race reported", "warnings only") for c in results["cases"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
