#!/usr/bin/env bash
# Python package tests against an in-tree build of the extension (CPU backend; GPU tests skip visibly without
# a GPU), then the transformers example. `pip install .` builds the same extension through scikit-build-core.
set -euo pipefail
cd "$(dirname "$0")/.."

# torch and transformers for the torch tests (autograd, opcheck, torch.compile, the Qwen3-Next end-to-end test).
# PyPI has no CPU-only torch for Linux x86_64: its default wheel (~540 MB) needs the NVIDIA CUDA libraries
# (~2.5 GB more, every one a DT_NEEDED of libtorch_cuda.so, so none can be left out); it runs on the CPU without a
# GPU. About 6 minutes on a fresh 2-core machine, nothing when already installed.
py_missing=()
for mod in torch transformers; do
  python3 -c "import $mod" >/dev/null 2>&1 || py_missing+=("$mod")
done
if ((${#py_missing[@]})); then
  echo "python_tests: pip installing ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_missing[@]}"
fi
# A torch test that skips for want of torch tests nothing: fail instead.
python3 -c "import torch, transformers" || { echo "python_tests: torch / transformers missing" >&2; exit 1; }

cmake -S . -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHGDN_BUILD_PYTHON=ON -DFLASHGDN_BUILD_TESTS=OFF \
  -DFLASHGDN_BUILD_CLI=OFF -DFLASHGDN_BUILD_EXAMPLES=OFF -DFLASHGDN_WITH_CUDA=OFF \
  -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
cmake --build build-py --target _C -j "$(nproc)"
PYTHONPATH=python python3 -m pytest tests/python -q -rs
PYTHONPATH=python python3 examples/qwen3_next_transformers.py 2>&1 | grep -v "^\[transformers\]"
