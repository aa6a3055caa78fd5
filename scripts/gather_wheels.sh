#!/usr/bin/env bash
# Gather into .wheels/ (git-ignored) what scripts/gpu_check.sh installs on a GPU machine with no network
# when its image lacks it. Run where PyPI is reachable; then carry .wheels with the check's call. The image
# KINDS.md describes has everything already (numpy, llvmlite, ml-dtypes, attrs, pytest, hypothesis, torch,
# cuda-core, cuda-bindings), so gather only what the check's first lines reported missing:
#   scripts/gather_wheels.sh                   # the small ones: ml_dtypes hypothesis sortedcontainers attrs
#   scripts/gather_wheels.sh cuda-core         # cuda-core, cuda-bindings, cuda-pathfinder (about 15 MB)
#   scripts/gather_wheels.sh llvmlite          # llvmlite>=0.50, when the image's is older (about 57 MB)
#   scripts/gather_wheels.sh pycuda            # pycuda's source (it builds there) and its pure-Python needs
#   PYVER=3.12 scripts/gather_wheels.sh ...    # the GPU machine's Python (default 3.12)
# Wheels only, except pycuda; one version of each. It warns when the working tree and .wheels together pass
# the 64 MiB a device call may carry.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER="${PYVER:-3.12}"
mkdir -p .wheels
wheel() {
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .wheels "$@"
}
(( $# )) || set -- ml_dtypes hypothesis sortedcontainers attrs
for name in "$@"; do
  case "$name" in
    cuda-core) wheel cuda-core cuda-bindings cuda-pathfinder ;;
    llvmlite) wheel "llvmlite>=0.50" ;;
    pycuda)
      python3 -m pip download --quiet --no-deps --no-binary pycuda -d .wheels "pycuda>=2024.1"
      wheel pytools platformdirs mako markupsafe siphash24 typing_extensions ;;
    *) wheel "$name" ;;
  esac
done
ls -l .wheels
tree_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
wheel_bytes=$(du -cb .wheels | tail -1 | cut -f1)
echo "working tree $((tree_bytes >> 20)) MiB + .wheels $((wheel_bytes >> 20)) MiB"
if (( tree_bytes + wheel_bytes > 64 << 20 )); then
  echo "warning: over the 64 MiB a device call carries: remove from .wheels what the machine already has"
fi
