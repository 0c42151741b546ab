#!/usr/bin/env bash
# Installs what flashgdn needs to build and test on a fresh Debian/Ubuntu machine (idempotent), then configures
# and builds everything into ./build. CUDA kernels are built when nvcc is found (FLASHGDN_WITH_CUDA=AUTO).
# `setup.sh --deps-only` installs the dependencies and stops (scripts/demo.sh builds only what it runs).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in cmake ninja-build g++ pkg-config libgtest-dev libdlpack-dev libcli11-dev nlohmann-json3-dev python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Python test dependencies (numpy for the gdn_check.py cross-check and the Python package tests).
py_missing=()
for mod in numpy pytest nanobind scikit_build_core; do
  python3 -c "import $mod" >/dev/null 2>&1 || py_missing+=("$mod")
done
if ((${#py_missing[@]})); then
  pips=()
  for m in "${py_missing[@]}"; do pips+=("${m//_/-}"); done
  echo "setup: pip installing ${pips[*]}"
  python3 -m pip install -q "${pips[@]}" 2>/dev/null || python3 -m pip install -q --break-system-packages "${pips[@]}"
fi

[ "${1:-}" = "--deps-only" ] && exit 0

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FLASHGDN_CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$jobs"
