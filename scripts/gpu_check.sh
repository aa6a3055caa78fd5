#!/usr/bin/env bash
# One GPU check, one call of at most 8 minutes, on a machine with an NVIDIA GPU and no network.
# It runs on the GPU machine's image as it is (KINDS.md: python3 3.12 with numpy, llvmlite, ml-dtypes,
# attrs, pytest, hypothesis, torch and cuda.core + cuda-bindings; nvcc): accy runs from this checkout,
# and whatever the image lacks is installed from the wheels in .wheels/ (scripts/gather_wheels.sh, run
# where PyPI is reachable; carry .wheels, within the 64 MiB the working tree may take). Nothing is fetched.
#   1. what the machine has: the GPU, the packages, the cuda backend's driver (ACCY_CUDA_DRIVER, default
#      the one installed: cuda.core on that image);
#   2. the tests marked `cuda` (every backend-parametrised test on the GPU) and the driver tests
#      (tests/test_cuda_drivers.py);
#   3. every library entry on cuda against ptx (the same PTX on the emulator) and numpy;
#   4. the GPU benchmark: accy's attention entries against torch's SDPA;
#   5. the fuzzers with cuda among their backends (ACCY_FUZZ_BACKENDS, default numpy,llvm,cuda), in
#      whatever time is left.
# Every step gets at most the time left of GPU_CHECK_SECONDS (default 450): the whole check ends inside
# 8 minutes. Writes gpu_check.log, gpu_check.json and each step's results to $OUT when it is set (else to
# ./gpu_check/). DRY_RUN=1 runs steps 3 and 5 without cuda and skips the GPU steps: a check of the script.
# The device call: command "bash scripts/gpu_check.sh", carry [".wheels"] when .wheels/ holds anything.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out="${OUT:-$PWD/gpu_check}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
py="${PYTHON:-python3}"
dry="${DRY_RUN:-0}"
budget="${GPU_CHECK_SECONDS:-450}"
site=/tmp/accy-site
mkdir -p "$site"
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ACCY_CACHE_DIR="${ACCY_CACHE_DIR:-/tmp/accy-cache}"
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then  # libdevice and ptxas of the image's toolkit
  CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc)")")"
  export CUDA_HOME
fi

# step NAME CAP COMMAND...: COMMAND under a timeout of CAP seconds or the time left, less a reserve
step() {
  local name=$1 cap=$2 limit
  shift 2
  limit=$(( budget - SECONDS - 20 ))
  (( limit > cap )) && limit=$cap
  if (( limit < 15 )); then
    echo "== $name: skipped (out of time: ${SECONDS}s of ${budget}s used)"
    return 124
  fi
  echo "== $name (at most ${limit}s, at ${SECONDS}s)"
  timeout -k 5 "$limit" "$@"
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" --version
"$py" - <<'PY'
import importlib
for name in ("numpy", "llvmlite", "ml_dtypes", "attrs", "pytest", "hypothesis", "xdist", "torch", "cuda.core",
             "cuda.bindings", "pycuda"):
    try:
        module = importlib.import_module(name)
        print(f"{name:14s} {getattr(module, '__version__', '?')}")
    except Exception as e:
        print(f"{name:14s} missing ({type(e).__name__}: {e})")
PY

# install WHEEL-NAMES from .wheels/ (no index, no dependencies: each one is named)
install() {
  echo "== installing $* from .wheels/"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --find-links .wheels --target "$site" "$@"
}
for pkg in numpy pytest; do
  "$py" -c "import $pkg" 2>/dev/null || { echo "this python has no $pkg: PYTHON=... names another"; exit 2; }
done
missing=()
for pkg in ml_dtypes hypothesis sortedcontainers attrs; do  # accy and its tests, beyond numpy and pytest
  "$py" -c "import $pkg" 2>/dev/null || missing+=("$pkg")
done
if ! "$py" -c "import llvmlite, sys; sys.exit(tuple(map(int, llvmlite.__version__.split('.')[:2])) < (0, 50))" \
    2>/dev/null; then
  missing+=("llvmlite>=0.50")
fi
if [ "$dry" != 1 ] && ! "$py" -c "import cuda.core" 2>/dev/null && ! "$py" -c "import pycuda.driver" 2>/dev/null; then
  if ls .wheels/cuda_core-* >/dev/null 2>&1; then
    missing+=(cuda-core cuda-bindings cuda-pathfinder)
  elif ls .wheels/pycuda-* >/dev/null 2>&1; then  # a source package: it builds against the toolkit here
    echo "== building pycuda from .wheels/ (CUDA_ROOT=${CUDA_HOME:-unset})"
    CUDA_ROOT="${CUDA_HOME:-/usr/local/cuda}" "$py" -m pip install -q --no-index --no-deps --no-build-isolation \
      --find-links .wheels --target "$site" pycuda pytools platformdirs mako siphash24 \
      || { echo "pycuda did not build"; exit 2; }
  else
    echo "neither cuda.core nor pycuda is here, and .wheels/ holds neither:"
    echo "run scripts/gather_wheels.sh cuda-core where PyPI is reachable and carry .wheels"
    exit 2
  fi
fi
if (( ${#missing[@]} )); then
  install "${missing[@]}" || { echo "missing from .wheels/: ${missing[*]} (scripts/gather_wheels.sh gathers them)"; exit 2; }
fi

xdist=()  # the image has pytest-xdist: its 16 cores compile and interpret in parallel
"$py" -c "import xdist" 2>/dev/null && xdist=(-n "${GPU_CHECK_WORKERS:-8}")
tests_rc=0 drivers_rc=0 bench_rc=0
if [ "$dry" = 1 ]; then
  echo "== DRY_RUN: no GPU steps"
  backends=numpy,ptx
  fuzz_backends="${ACCY_FUZZ_BACKENDS:-numpy,llvm}"
else
  echo "== the cuda backend's driver"
  if "$py" -c "from accy.backends.cuda import default_state as d; s = d(); print(s.driver.name, s.arch)"; then
    backends=numpy,ptx,cuda
    fuzz_backends="${ACCY_FUZZ_BACKENDS:-numpy,llvm,cuda}"
    step "cuda tests" 180 "$py" -m pytest -q -m cuda -p no:cacheprovider "${xdist[@]}" tests/ \
      --junitxml="$out/cuda_tests.xml"
    tests_rc=$?
  else  # the rest runs without the GPU, and the check fails
    echo "backend 'cuda' cannot run here (the error above says why): the steps without it only"
    dry=1 tests_rc=3 backends=numpy,ptx fuzz_backends=numpy,llvm
  fi
fi
step "driver tests (no GPU needed)" 60 "$py" -m pytest -q -p no:cacheprovider tests/test_cuda_drivers.py \
  --junitxml="$out/drivers.xml"
drivers_rc=$?

step "library entries on $backends" 100 "$py" -m bench.gpu --compare --backends "$backends" --json "$out/entries.json"
entries_rc=$?

if [ "$dry" != 1 ]; then
  step "GPU benchmark" 90 "$py" -m bench.gpu --json "$out/gpu_bench.json"
  bench_rc=$?
fi

export ACCY_FUZZ_BACKENDS="$fuzz_backends"
step "fuzzers on $fuzz_backends" 150 "$py" -m pytest -q -p no:cacheprovider \
  "${xdist[@]}" tests/test_fuzz.py tests/test_fuzz_cooperative.py tests/test_fuzz_regressions.py \
  --junitxml="$out/fuzz.xml"
fuzz_rc=$?

"$py" - "$out" "$tests_rc" "$drivers_rc" "$entries_rc" "$fuzz_rc" "$bench_rc" "$dry" "$SECONDS" <<'PY'
import json, os, sys, xml.etree.ElementTree as ET
out, *rcs, dry, seconds = sys.argv[1:]
tests_rc, drivers_rc, entries_rc, fuzz_rc, bench_rc = map(int, rcs)

def junit(name):
    path = f"{out}/{name}"
    if not os.path.exists(path):
        return None
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}

def load(name):
    try:
        with open(f"{out}/{name}") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

entries = load("entries.json")
summary = {"dry_run": dry == "1", "seconds": int(seconds), "cuda_tests": junit("cuda_tests.xml"),
           "driver_tests": junit("drivers.xml"), "fuzz": junit("fuzz.xml"),
           "entries_agree": None if entries is None else sum(c["agree"] for c in entries.values()),
           "entries": None if entries is None else len(entries),
           "rc": {"tests": tests_rc, "drivers": drivers_rc, "entries": entries_rc, "fuzz": fuzz_rc, "bench": bench_rc},
           "bench": load("gpu_bench.json")}
with open(f"{out}/gpu_check.json", "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps({k: summary[k] for k in ("seconds", "cuda_tests", "driver_tests", "fuzz", "entries_agree", "entries",
                                          "rc")}))
PY
echo "== done in ${SECONDS}s: tests rc=$tests_rc drivers rc=$drivers_rc entries rc=$entries_rc fuzz rc=$fuzz_rc bench rc=$bench_rc"
exit $(( tests_rc || drivers_rc || entries_rc || fuzz_rc || bench_rc ))
