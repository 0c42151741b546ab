#!/usr/bin/env bash
# One command on a fresh machine: set up, build the CLI only, and run `flashgdn demo` (GPU when present, else
# CPU). Without a visible GPU the CUDA kernels are not built (the demo would run on the CPU anyway): the build
# goes to ./build-cpu with -DFLASHGDN_WITH_CUDA=OFF (about 2 minutes on 2 cores instead of about 10).
# FLASHGDN_CMAKE_ARGS overrides the choice, e.g. FLASHGDN_CMAKE_ARGS=-DFLASHGDN_WITH_CUDA=ON bash scripts/demo.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --deps-only

build=build
cuda_args=()
if [ -z "${FLASHGDN_CMAKE_ARGS:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  build=build-cpu
  cuda_args=(-DFLASHGDN_WITH_CUDA=OFF)
  echo "demo: no GPU visible: building the CPU backend only into $build" \
    "(FLASHGDN_CMAKE_ARGS=-DFLASHGDN_WITH_CUDA=ON builds the kernels too)"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLASHGDN_CMAKE_ARGS:-} "${cuda_args[@]}" >/dev/null
cmake --build "$build" --target flashgdn_cli -j "$(nproc)"
exec "./$build/flashgdn" demo "$@"
