#!/usr/bin/env bash
# Python package tests against an in-tree build of the extension (CPU backend; GPU tests skip visibly without
# a GPU). `pip install .` builds the same extension through scikit-build-core.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHGDN_BUILD_PYTHON=ON -DFLASHGDN_BUILD_TESTS=OFF \
  -DFLASHGDN_BUILD_CLI=OFF -DFLASHGDN_BUILD_EXAMPLES=OFF -DFLASHGDN_WITH_CUDA=OFF \
  -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build build-py --target _C -j "$(nproc)"
PYTHONPATH=python python3 -m pytest tests/python -q -rs
