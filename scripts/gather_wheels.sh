#!/usr/bin/env bash
# Gather what scripts/gpu_check.sh needs to install pycuda on a GPU machine with no
# network: pycuda's source (it builds against the CUDA toolkit there) and the pure
# Python packages it needs. Run on a machine that reaches PyPI; .wheels/ is git-ignored.
#   PYVER=3.12 scripts/gather_wheels.sh     # the Python version of the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER="${PYVER:-3.12}"
mkdir -p .wheels
python3 -m pip download --quiet --no-deps --no-binary pycuda -d .wheels "pycuda>=2024.1"
for pkg in pytools platformdirs mako typing_extensions markupsafe siphash24 ml_dtypes hypothesis sortedcontainers; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .wheels "$pkg" 2>/dev/null \
  || python3 -m pip download --quiet --no-deps -d .wheels "$pkg"
done
if [ "${WITH_TORCH:-0}" = 1 ]; then  # the SDPA baseline of the GPU benchmark (several GB)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .wheels torch
fi
if [ "${WITH_LLVMLITE:-0}" = 1 ]; then  # only when the GPU machine's llvmlite is older than 0.50 (about 57 MB)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .wheels "llvmlite>=0.50"
fi
ls -l .wheels
