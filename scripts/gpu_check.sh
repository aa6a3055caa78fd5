#!/usr/bin/env bash
# One short GPU check for a machine with an NVIDIA GPU and no network:
#   1. install pycuda from files carried in .wheels/ if it is missing
#      (gather them with scripts/gather_wheels.sh on a machine that reaches PyPI);
#   2. run the tests marked `cuda` (the backend-comparison suite on the GPU);
#   3. run the GPU benchmark.
# Writes gpu_check.log and gpu_check.json to $OUT when it is set (else to ./gpu_check/).
# Uses the machine's python3 with its numpy/llvmlite/attrs/pytest; accy runs from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu_check}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
py="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export ACCY_CACHE_DIR="${ACCY_CACHE_DIR:-/tmp/accy-cache}"
echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" --version

site=/tmp/accy-site
if ! "$py" -c "import llvmlite, sys; sys.exit(tuple(map(int, llvmlite.__version__.split('.')[:2])) < (0, 50))" 2>/dev/null; then
  echo "== llvmlite missing or older than 0.50: installing it from .wheels/"
  "$py" -m pip install -q --no-index --no-deps --find-links .wheels --target "$site" "llvmlite>=0.50" \
    || { echo "no llvmlite>=0.50 wheel in .wheels/: WITH_LLVMLITE=1 scripts/gather_wheels.sh"; exit 2; }
  export PYTHONPATH="$site:$PYTHONPATH"
fi

if ! "$py" -c "import pycuda.driver" 2>/dev/null; then
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
"$py" -c "import pycuda.driver as d; d.init(); print('pycuda', __import__('pycuda').VERSION_TEXT, 'devices', d.Device.count())"

echo "== cuda tests"
timeout 300 "$py" -m pytest -q -m cuda -p no:cacheprovider tests/ --junitxml="$out/cuda_tests.xml"
tests_rc=$?

echo "== GPU benchmark"
timeout 180 "$py" -m bench.gpu --json "$out/gpu_bench.json"
bench_rc=$?

"$py" - "$out" "$tests_rc" "$bench_rc" <<'PY'
import json, sys, xml.etree.ElementTree as ET
out, tests_rc, bench_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
suite = ET.parse(f"{out}/cuda_tests.xml").getroot()
suite = suite if suite.tag == "testsuite" else suite[0]
counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
try:
    bench = json.load(open(f"{out}/gpu_bench.json"))
except (OSError, ValueError):
    bench = None
json.dump({"tests": counts, "tests_rc": tests_rc, "bench_rc": bench_rc, "bench": bench},
          open(f"{out}/gpu_check.json", "w"), indent=2)
print(json.dumps(counts))
PY
echo "== done: tests rc=$tests_rc bench rc=$bench_rc"
exit $(( tests_rc || bench_rc ))
