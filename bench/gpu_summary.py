"""The GPU check's summary (scripts/gpu_check.sh's last step): every step's results in $OUT
gathered into gpu_check.json, the measured and the estimated side by side.

    python -m bench.gpu_summary OUT --seconds S [--dry-run] [--device NAME] [--gpu h100|h200]
                                    [--rc NAME=CODE ...]

Each step's file may be missing (the step was skipped, ran out of time or failed): its section
is then None, and the rest is filled all the same.
"""

from __future__ import annotations

import argparse
import json
import os
import xml.etree.ElementTree as ET

from .gpu_probe import side_by_side

GPUS = ("h100", "h200")
# the emulator's counters the calibration keeps beside the GPU's
COUNTERS = ("instructions", "mma_instructions", "bank_conflicts", "shared_wavefronts", "dram_bytes",
            "estimated_seconds", "bound")


def junit(out: str, name: str):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    try:
        suite = ET.parse(path).getroot()
    except ET.ParseError:
        return None
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def load(out: str, name: str):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gpu_key(device: str | None) -> str | None:
    """"h100" or "h200" from the device's name (nvidia-smi's), else None."""
    name = (device or "").upper()
    return next((g for g in GPUS if g.upper() in name), None)


def tiles_section(tiles: dict | None):
    if tiles is None:
        return None
    disagree = [name for name, c in tiles.items() if not (c["agree"] and c["numpy_within_bound"])]
    return {"cases": len(tiles), "agree": len(tiles) - len(disagree), "disagree": disagree,
            "backends": sorted({b for c in tiles.values() for b in c["ran"]}),
            "failed": {name: c["failed"] for name, c in tiles.items() if c["failed"]}}


def bench_section(bench: dict | None, estimates: dict | None, gpu: str | None) -> dict | None:
    """Per benchmark kernel: its measured time and TFLOP/s, torch's and Triton's, the fractions of
    their throughput (torch's against the target), and accy profile's estimate (for the device's GPU, else an
    H200's) with the measured time over it."""
    keys = list(dict.fromkeys([*(estimates or {}), *(bench or {})]))
    if not keys:
        return None
    section = {}
    for key in keys:
        measured, estimate = (bench or {}).get(key), (estimates or {}).get(key)
        row = {"what": (measured or estimate or {}).get("what"), "flops": (measured or estimate or {}).get("flops")}
        if measured is None:
            row["measured"] = None
        elif "error" in measured:
            row["measured"] = {"error": measured["error"]}
        else:
            row["measured"] = {"kernel_ms": measured["kernel_ms_median"], "tflops": measured["tflops"],
                               "accuracy_ok": measured["accuracy"]["ok"]}
            row["torch"] = measured.get("torch")
            row["triton"] = measured.get("triton")
            for k in ("fraction_of_torch", "fraction_of_triton", "target", "meets_target"):
                row[k] = measured.get(k)
        if estimate is not None and "error" in estimate:
            row["estimate"] = {"error": estimate["error"]}
        elif estimate is not None:
            on = gpu or "h200"
            row["estimate"] = {"gpu": on, **estimate["gpus"][on], "sampled": estimate["sampled"]}
            row["estimates_by_gpu"] = estimate["gpus"]
            ms = (row["measured"] or {}).get("kernel_ms")
            if ms is not None:
                row["measured_over_estimate"] = ms * 1e-3 / row["estimate"]["estimated_seconds"]
        section[key] = row
    return section


def calibration_section(emulated: dict | None, ncu: dict | None) -> dict | None:
    """Per small launch: the emulator's counters, and Nsight Compute's beside them (or why not)."""
    if emulated is None and ncu is None:
        return None
    section = {"ncu": None if ncu is None else ncu.get("skipped") or ncu.get("warning") or "ran", "cases": {}}
    measured = (ncu or {}).get("cases", {})
    for key in dict.fromkeys([*(emulated or {}), *measured]):
        counters = (emulated or {}).get(key, {}).get("counters")
        row = {"emulator": None if counters is None else {k: counters[k] for k in COUNTERS}}
        if key in measured:
            row["ncu_kernel"] = measured[key]["kernel"]
            if counters is not None:
                row["side_by_side"] = side_by_side(measured[key]["metrics"], counters)
        section["cases"][key] = row
    return section


def racecheck_section(emulated: dict | None, sanitizer: dict | None) -> dict | None:
    """Per small launch: compute-sanitizer's racecheck verdict beside the emulator's (ptx) and the
    numpy backend's memory check, and whether the GPU's tool and the emulator agree."""
    if emulated is None and sanitizer is None:
        return None
    checked = (sanitizer or {}).get("cases", {})
    section = {"compute_sanitizer": None if sanitizer is None else sanitizer.get("skipped") or "ran", "cases": {}}
    for key in dict.fromkeys([*(emulated or {}), *checked]):
        ours = (emulated or {}).get(key, {})
        row = {"planted_race": ours.get("planted_race"),
               "compute_sanitizer": checked.get(key, {}).get("verdict"),
               "emulator_ptx": ours.get("ptx", {}).get("verdict"),
               "numpy_check_memory": ours.get("numpy_check_memory", {}).get("verdict")}
        both = row["compute_sanitizer"], row["emulator_ptx"]
        row["agree"] = None if None in both else both[0] == both[1]
        section["cases"][key] = row
    return section


def summary(out: str, *, seconds: int, dry_run: bool, rcs: dict, device: str | None = None,
            gpu: str | None = None, arch: str | None = None) -> dict:
    gpu = gpu or gpu_key(device)
    entries = load(out, "entries.json")
    return {
        "dry_run": dry_run,
        "note": "dry run: no GPU (the cuda steps, the GPU benchmark, ncu and racecheck were skipped)" if dry_run
        else None,
        "device": device, "gpu": gpu, "arch": arch, "seconds": seconds,
        "cuda_tests": junit(out, "cuda_tests.xml"), "driver_tests": junit(out, "drivers.xml"),
        "fuzz": junit(out, "fuzz.xml"),
        "entries_agree": None if entries is None else sum(c["agree"] for c in entries.values()),
        "entries": None if entries is None else len(entries),
        "tiles": tiles_section(load(out, "tiles.json")),
        "bench": bench_section(load(out, "tile_bench.json"), load(out, "estimates.json"), gpu),
        "entries_bench": load(out, "gpu_bench.json"),
        "calibration": calibration_section(load(out, "emulator.json"), load(out, "ncu.json")),
        "racecheck": racecheck_section(load(out, "emulator.json"), load(out, "racecheck.json")),
        "rc": rcs,
    }


def headline(s: dict) -> str:
    """A few lines for the log."""
    lines = []
    if s["dry_run"]:
        lines.append("dry run: no GPU")
    lines.append(f"tests: cuda {s['cuda_tests']}, drivers {s['driver_tests']}, fuzz {s['fuzz']}")
    lines.append(f"library entries: {s['entries_agree']} of {s['entries']} agree")
    t = s["tiles"]
    if t:
        lines.append(f"tile kernels on {','.join(t['backends'])}: {t['agree']} of {t['cases']} agree"
                     + (f"; DISAGREE: {', '.join(t['disagree'])}" if t["disagree"] else ""))
    for key, row in (s["bench"] or {}).items():
        m, e = row.get("measured"), row.get("estimate")
        text = f"bench {key}: "
        if m and "kernel_ms" in m:
            text += f"{m['kernel_ms']:.3f} ms, {m['tflops']:.1f} TFLOP/s"
            if row.get("fraction_of_torch") is not None:
                text += f", {row['fraction_of_torch']:.2f}x torch (target {row['target']})"
            if row.get("fraction_of_triton") is not None:
                text += f", {row['fraction_of_triton']:.2f}x Triton"
        else:
            text += "not measured" + (f" ({m['error']})" if m else "")
        if e and "error" in e:
            text += f"; estimate FAILED: {e['error']}"
        elif e:
            text += (f"; estimate {e['estimated_seconds'] * 1e3:.3f} ms on {e['gpu']} ({e['bound']}-bound, "
                     f"{e['limiter']})")
        lines.append(text)
    r = s["racecheck"]
    if r:
        lines.append(f"racecheck: compute-sanitizer {r['compute_sanitizer']}; " + "; ".join(
            f"{k}: {c['compute_sanitizer'] or '-'} / ptx {c['emulator_ptx']}" for k, c in r["cases"].items()
            if c["planted_race"] or c["compute_sanitizer"] not in (None, "no race reported")
            or c["emulator_ptx"] != "no race reported"))
    c = s["calibration"]
    if c:
        lines.append(f"calibration: ncu {c['ncu']}, {len(c['cases'])} launches counted on the emulator")
    lines.append(f"rc: {s['rc']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_summary")
    parser.add_argument("out")
    parser.add_argument("--seconds", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--device")
    parser.add_argument("--gpu", choices=GPUS)
    parser.add_argument("--arch")
    parser.add_argument("--rc", action="append", default=[], metavar="NAME=CODE")
    ns = parser.parse_args(argv)
    rcs = {name: int(code) for name, code in (item.split("=", 1) for item in ns.rc)}
    s = summary(ns.out, seconds=ns.seconds, dry_run=ns.dry_run, rcs=rcs, device=ns.device, gpu=ns.gpu, arch=ns.arch)
    with open(os.path.join(ns.out, "gpu_check.json"), "w") as f:
        json.dump(s, f, indent=2)
    print(headline(s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
