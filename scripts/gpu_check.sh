#!/usr/bin/env bash
# One GPU check, one call of at most 8 minutes, on a machine with an NVIDIA GPU and no network.
# It runs on the GPU machine's image as it is (KINDS.md: python3 3.12 with numpy, llvmlite, ml-dtypes,
# attrs, pytest, pytest-xdist, hypothesis, torch and cuda.core + cuda-bindings; nvcc, ncu, compute-sanitizer):
# accy runs from this checkout, and whatever the image lacks is installed from the wheels in .wheels/
# (scripts/gather_wheels.sh, run where PyPI is reachable; carry .wheels, within the 64 MiB the working tree
# may take). Nothing is fetched.
#   1. what the machine has: the GPU, the packages, the cuda backend's driver (ACCY_CUDA_DRIVER, default
#      the one installed: cuda.core on that image) and the device's arch;
#   2. in the background, on the CPU: accy profile's estimate of each benchmark kernel (the emulator,
#      a sample of the programs of a full-size launch) and the emulator's counters and race verdicts on
#      the small launches of steps 5-6 (bench.gpu --estimates, bench.gpu_probe emulator);
#   3. the GPU benchmark (issue 19 §5): accy's bf16 tile matmul at 4096^3 against torch.matmul (cuBLAS)
#      and its tile attention (B*H = 16, 4096 tokens, head dim 64 and 128) against torch's flash SDPA,
#      and against Triton's kernels for the same jobs (bench/triton_kernels.py, where Triton is importable),
#      CUDA events on device-resident inputs, TFLOP/s and the ratios (target: 0.5x torch); and issue 35's
#      Hopper jobs (TMA, warp roles): bf16 and fp8 e4m3 matmuls at 8192^3 against cuBLAS (torch.matmul,
#      torch._scaled_mm; target 0.9x) and attention at head dim 128, B*H = 16, 8192 tokens against torch's
#      flash SDPA (target 1.0x) and FlashAttention-3 where importable (target 0.8x);
#   4. every tile kernel (matmuls in bf16, f16, tf32, i8 and f32; the tile attention entry in bf16, f16,
#      f32, causal and not) on cuda against ptx (the same PTX on the emulator) and numpy, within the dot
#      bound;
#   5. Nsight Compute on one small launch of each benchmark kernel and of a shared-memory transpose
#      (global load sectors and requests, shared bank conflicts, instructions executed), to set beside
#      the emulator's counts of the same launch (bench.gpu_probe ncu);
#   6. compute-sanitizer --tool racecheck on the same launches and on the transpose without its barrier
#      (the planted race), beside the emulator's verdicts (bench.gpu_probe racecheck);
#   7. the tests marked `cuda` (every backend-parametrised test on the GPU; tests/test_torch.py's
#      accy.torch.custom_op on CUDA tensors, eager and under torch.compile, and bf16/fp8 CUDA tensors
#      through DLPack) and the driver tests (tests/test_cuda_drivers.py);
#   8. every library entry on cuda against ptx and numpy; the f32 attention entries against torch's SDPA;
#   9. the fuzzers with cuda among their backends (ACCY_FUZZ_BACKENDS, default numpy,llvm,cuda), in
#      whatever time is left.
# Every step gets at most the time left of GPU_CHECK_SECONDS (default 450): the whole check ends inside
# 8 minutes. Writes gpu_check.log, gpu_check.json (bench/gpu_summary.py: every section side by side) and
# each step's results to $OUT when it is set (else to ./gpu_check/). DRY_RUN=1 runs the steps that need no
# GPU (2, 4 and 8 on numpy,ptx, 9 on numpy,llvm) and records the others as skipped: a check of the script.
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

# the time a step may take: CAP seconds or the time left, less a reserve for the summary
limit_for() {
  local cap=$1 limit
  limit=$(( budget - SECONDS - 20 ))
  (( limit > cap )) && limit=$cap
  echo "$limit"
}

# step NAME CAP COMMAND...: COMMAND under a timeout of CAP seconds or the time left
step() {
  local name=$1 limit
  limit=$(limit_for "$2")
  shift 2
  if (( limit < 15 )); then
    echo "== $name: skipped (out of time: ${SECONDS}s of ${budget}s used)"
    return 124
  fi
  echo "== $name (at most ${limit}s, at ${SECONDS}s)"
  timeout -k 5 "$limit" "$@"
}

# background NAME CAP LOG COMMAND...: COMMAND as step runs it, in the background, its output to $out/LOG
# (shown at the end); its process id in bg_pid (empty when there was no time to start it)
background() {
  local name=$1 limit log=$3
  limit=$(limit_for "$2")
  shift 3
  bg_pid=
  if (( limit < 15 )); then
    echo "== $name: skipped (out of time: ${SECONDS}s of ${budget}s used)"
    return
  fi
  echo "== $name: in the background (at most ${limit}s, at ${SECONDS}s; its output in $log)"
  timeout -k 5 "$limit" "$@" >"$out/$log" 2>&1 &
  bg_pid=$!
}

# finish PID NAME LOG: wait for a background step, show its output, return its status
finish() {
  local rc=124
  if [ -n "$1" ]; then
    wait "$1"
    rc=$?
  fi
  echo "== $2 (background, rc=$rc)"
  [ -f "$out/$3" ] && cat "$out/$3"
  return "$rc"
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
for tool in nvcc ncu compute-sanitizer; do
  printf '%-18s %s\n' "$tool" "$(command -v "$tool" || echo 'not on PATH (its step is skipped)')"
done
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
fuzz_cap=150  # the fuzzers one at a time
"$py" -c "import xdist" 2>/dev/null && xdist=(-n "${GPU_CHECK_WORKERS:-8}") && fuzz_cap=120
workers="${GPU_CHECK_WORKERS:-6}"  # processes for the tile comparison (each its own CUDA context)
arch=sm_90a  # the H100 and H200 this check is written for (wgmma); the device's own when it runs
gpu=
tests_rc=0 bench_rc=0 tile_bench_rc=0 ncu_rc=0 race_rc=0
if [ "$dry" = 1 ]; then
  echo "== dry run: no GPU (the cuda tests, the GPU benchmarks, ncu and racecheck are skipped)"
  backends=numpy,ptx
  fuzz_backends="${ACCY_FUZZ_BACKENDS:-numpy,llvm}"
  workers="${GPU_CHECK_WORKERS:-}"  # bench.gpu's default: half the cores
else
  echo "== the cuda backend's driver"
  if state=$("$py" -c "from accy.runtime.cuda import default_state as d; s = d(); print(s.driver.name, s.arch)"); then
    echo "$state"
    arch=${state##* }
    backends=numpy,ptx,cuda
    fuzz_backends="${ACCY_FUZZ_BACKENDS:-numpy,llvm,cuda}"
    case "${device^^}" in
      *H200*) gpu=h200 ;;
      *H100*) gpu=h100 ;;
    esac
  else  # the rest runs without the GPU, and the check fails
    echo "backend 'cuda' cannot run here (the error above says why): the steps without it only"
    dry=1 tests_rc=3 backends=numpy,ptx fuzz_backends=numpy,llvm
  fi
fi

# 2. the CPU's share, in the background: the estimates, and the emulator's side of steps 5 and 6
background "estimates: accy profile of each benchmark kernel (emulator, arch $arch)" 240 estimates.log \
  "$py" -m bench.gpu --estimates --arch "$arch" --json "$out/estimates.json"
est_pid=$bg_pid
background "the emulator's counters and race verdicts of the small launches" 240 emulator.log \
  "$py" -m bench.gpu_probe emulator --arch "$arch" --gpu "${gpu:-h200}" --json "$out/emulator.json"
emu_pid=$bg_pid

if [ "$dry" != 1 ]; then
  # 3. the GPU benchmark
  step "GPU benchmark: tile matmul vs cuBLAS and Triton, tile attention vs flash SDPA and Triton" 130 \
    "$py" -m bench.gpu --tile-bench --json "$out/tile_bench.json"
  tile_bench_rc=$?
fi

# 4. every tile kernel on every backend
step "tile kernels on $backends" 150 "$py" -m bench.gpu --tiles --backends "$backends" --arch "$arch" \
  ${workers:+--workers "$workers"} --json "$out/tiles.json"
tiles_rc=$?

# 5-6. Nsight Compute and racecheck on the small launches (a skip, with its reason, in a dry run or
# where the tool is missing)
probe_dry=()
[ "$dry" = 1 ] && probe_dry=(--dry-run)
# (the tools' processes get the step's time less a margin: a timeout would leave them running on the GPU)
step "Nsight Compute on the small launches" 75 "$py" -m bench.gpu_probe ncu --out "$out" "${probe_dry[@]}" \
  --seconds $(( $(limit_for 75) - 10 ))
ncu_rc=$?
step "compute-sanitizer racecheck on the small launches" 75 \
  "$py" -m bench.gpu_probe racecheck --out "$out" "${probe_dry[@]}" --seconds $(( $(limit_for 75) - 10 ))
race_rc=$?

# 7. the tests
if [ "$dry" != 1 ]; then
  step "cuda tests" 150 "$py" -m pytest -q -m cuda -p no:cacheprovider "${xdist[@]}" tests/ \
    --junitxml="$out/cuda_tests.xml"
  tests_rc=$?
fi
step "driver tests (no GPU needed)" 30 "$py" -m pytest -q -p no:cacheprovider tests/test_cuda_drivers.py \
  --junitxml="$out/drivers.xml"
drivers_rc=$?

# 8. the library entries
step "library entries on $backends" 60 "$py" -m bench.gpu --compare --backends "$backends" --json "$out/entries.json"
entries_rc=$?
if [ "$dry" != 1 ]; then
  step "GPU benchmark: f32 attention entries vs SDPA" 45 "$py" -m bench.gpu --json "$out/gpu_bench.json"
  bench_rc=$?
fi

# 9. the fuzzers, in what is left (-m "": every test of these files, the fuzz-marked ones too)
export ACCY_FUZZ_BACKENDS="$fuzz_backends"
step "fuzzers on $fuzz_backends" "$fuzz_cap" "$py" -m pytest -q -m "" -p no:cacheprovider \
  "${xdist[@]}" tests/test_fuzz.py tests/test_fuzz_cooperative.py tests/test_fuzz_regressions.py \
  --junitxml="$out/fuzz.xml"
fuzz_rc=$?

finish "$est_pid" "estimates" estimates.log
est_rc=$?
finish "$emu_pid" "emulator counters and race verdicts" emulator.log
emu_rc=$?

dry_flag=()
[ "$dry" = 1 ] && dry_flag=(--dry-run)
echo "== summary ($out/gpu_check.json)"
"$py" -m bench.gpu_summary "$out" --seconds "$SECONDS" "${dry_flag[@]}" --arch "$arch" ${gpu:+--gpu "$gpu"} \
  ${device:+--device "$device"} --rc tests="$tests_rc" --rc drivers="$drivers_rc" --rc tiles="$tiles_rc" \
  --rc entries="$entries_rc" --rc fuzz="$fuzz_rc" --rc tile_bench="$tile_bench_rc" --rc bench="$bench_rc" \
  --rc ncu="$ncu_rc" --rc racecheck="$race_rc" --rc estimates="$est_rc" --rc emulator="$emu_rc"
[ "$dry" = 1 ] && echo "== dry run: no GPU: nothing here ran on one"
echo "== done in ${SECONDS}s: tests rc=$tests_rc drivers rc=$drivers_rc tiles rc=$tiles_rc entries rc=$entries_rc" \
  "fuzz rc=$fuzz_rc tile bench rc=$tile_bench_rc bench rc=$bench_rc ncu rc=$ncu_rc racecheck rc=$race_rc" \
  "estimates rc=$est_rc emulator rc=$emu_rc"
exit $(( tests_rc || drivers_rc || tiles_rc || entries_rc || fuzz_rc || tile_bench_rc || bench_rc || ncu_rc \
  || race_rc || est_rc || emu_rc ))
