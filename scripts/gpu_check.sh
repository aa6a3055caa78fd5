#!/usr/bin/env bash
# One GPU check, one call, for a machine with an NVIDIA GPU and no network (about 5 minutes):
#   1. install pycuda (and llvmlite, torch when carried) from .wheels/ if missing
#      (gather them with scripts/gather_wheels.sh on a machine that reaches PyPI);
#   2. the tests marked `cuda`: every backend-parametrised test on the GPU;
#   3. every library entry and the fuzz corpus on cuda, against ptx (the same PTX on the
#      emulator) and numpy;
#   4. the GPU benchmark: accy's attention entries against torch's SDPA when torch is there.
# Writes gpu_check.log and gpu_check.json to $OUT when it is set (else to ./gpu_check/).
# DRY_RUN=1 runs steps 3 without cuda and skips the GPU-only steps: a check of the script itself.
# Uses the machine's python3 with its numpy/llvmlite/attrs/pytest; accy runs from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu_check}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
py="${PYTHON:-python3}"
dry="${DRY_RUN:-0}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ACCY_CACHE_DIR="${ACCY_CACHE_DIR:-/tmp/accy-cache}"
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" --version
site=/tmp/accy-site
mkdir -p "$site"

for pkg in ml_dtypes hypothesis; do  # what accy and its tests need beyond numpy, llvmlite, attrs, pytest
  if ! "$py" -c "import $pkg" 2>/dev/null; then
    echo "== installing $pkg from .wheels/"
    "$py" -m pip install -q --no-index --no-deps --find-links .wheels --target "$site" "$pkg" \
      || { echo "no $pkg wheel in .wheels/: run scripts/gather_wheels.sh"; exit 2; }
    export PYTHONPATH="$site:$PYTHONPATH"
  fi
done
if ! "$py" -c "import llvmlite, sys; sys.exit(tuple(map(int, llvmlite.__version__.split('.')[:2])) < (0, 50))" 2>/dev/null; then
  echo "== llvmlite missing or older than 0.50: installing it from .wheels/"
  "$py" -m pip install -q --no-index --no-deps --find-links .wheels --target "$site" "llvmlite>=0.50" \
    || { echo "no llvmlite>=0.50 wheel in .wheels/: WITH_LLVMLITE=1 scripts/gather_wheels.sh"; exit 2; }
  export PYTHONPATH="$site:$PYTHONPATH"
fi
if [ "$dry" != 1 ] && ! "$py" -c "import pycuda.driver" 2>/dev/null; then
  echo "== installing pycuda from .wheels/"
  if ! ls .wheels/pycuda-* >/dev/null 2>&1; then
    echo "no pycuda in .wheels/: run scripts/gather_wheels.sh where PyPI is reachable, and carry .wheels"; exit 2
  fi
  export CUDA_ROOT="${CUDA_ROOT:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}"
  # --no-deps: with --target pip would otherwise want every dependency (numpy too) from .wheels
  "$py" -m pip install -q --no-index --no-deps --no-build-isolation --find-links .wheels --target "$site" \
    pycuda pytools platformdirs mako siphash24 || { echo "pycuda build failed"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:$site"
fi
if ! "$py" -c "import torch" 2>/dev/null && ls .wheels/torch-* >/dev/null 2>&1; then
  echo "== installing torch from .wheels/ (for the SDPA baseline)"
  "$py" -m pip install -q --no-index --find-links .wheels --target "$site" torch || echo "torch: not installed"
fi

tests_rc=0 bench_rc=0
if [ "$dry" = 1 ]; then
  echo "== DRY_RUN: no GPU steps"; backends=numpy,ptx
else
  "$py" -c "import pycuda.driver as d; d.init(); print('pycuda', __import__('pycuda').VERSION_TEXT, 'devices', d.Device.count())"
  backends=numpy,ptx,cuda
  echo "== cuda tests"
  timeout 240 "$py" -m pytest -q -m cuda -p no:cacheprovider tests/ --junitxml="$out/cuda_tests.xml"
  tests_rc=$?
fi

echo "== library entries on $backends"
timeout 120 "$py" -m bench.gpu --compare --backends "$backends" --json "$out/entries.json"
entries_rc=$?

echo "== fuzz corpus on $backends"
ACCY_FUZZ_BACKENDS="$backends" timeout 240 "$py" -m pytest -q -p no:cacheprovider tests/test_fuzz.py \
  tests/test_fuzz_cooperative.py tests/test_fuzz_regressions.py \
  --junitxml="$out/fuzz.xml"
fuzz_rc=$?

if [ "$dry" != 1 ]; then
  echo "== GPU benchmark"
  timeout 120 "$py" -m bench.gpu --json "$out/gpu_bench.json"
  bench_rc=$?
fi

"$py" - "$out" "$tests_rc" "$entries_rc" "$fuzz_rc" "$bench_rc" "$dry" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
out, tests_rc, entries_rc, fuzz_rc, bench_rc, dry = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6] == "1"

def junit(name):
    path = f"{out}/{name}"
    if not os.path.exists(path):
        return None
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}

def load(name):
    try:
        return json.load(open(f"{out}/{name}"))
    except (OSError, ValueError):
        return None

entries = load("entries.json")
summary = {"dry_run": dry, "cuda_tests": junit("cuda_tests.xml"), "fuzz": junit("fuzz.xml"),
           "entries_agree": None if entries is None else sum(c["agree"] for c in entries.values()),
           "entries": None if entries is None else len(entries),
           "rc": {"tests": tests_rc, "entries": entries_rc, "fuzz": fuzz_rc, "bench": bench_rc},
           "bench": load("gpu_bench.json")}
json.dump(summary, open(f"{out}/gpu_check.json", "w"), indent=2)
print(json.dumps({k: summary[k] for k in ("cuda_tests", "fuzz", "entries_agree", "entries", "rc")}))
PY
echo "== done: tests rc=$tests_rc entries rc=$entries_rc fuzz rc=$fuzz_rc bench rc=$bench_rc"
exit $(( tests_rc || entries_rc || fuzz_rc || bench_rc ))
