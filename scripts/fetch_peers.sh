#!/usr/bin/env bash
# Download the peer libraries that bench/side_by_side.py compares against, as wheels, into the git-ignored .whl/
# (for a GPU machine without network access: the wheels travel with the working tree). Prints each wheel's size and
# whether the groups fit a 64 MiB working-tree budget.
# No peer code enters the repository.
#
#   scripts/fetch_peers.sh [group ...]       groups: fla (default), flashqla, flashinfer; "all" = every group
#
# On the GPU machine, with .whl in the working tree, install them with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .gitignore 2>/dev/null || grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || \
  echo '/.whl/' >> .git/info/exclude

# Versions pinned so the benchmark compares against a known release. Dependencies already on the GPU machine
# (torch, triton, einops, numpy, cupy, ml-dtypes, ...) are not fetched.
declare -A GROUP=(
  [fla]="fla-core==0.6.0"
  [flashqla]="flash-qla==0.1.3 tilelang==0.1.15 apache-tvm-ffi>=0.1.11,<0.1.13 z3-solver>=4.13.0,<4.15.5
              torch-c-dlpack-ext"
  # FlashInfer's GDN kernels also need nvidia-cutlass-dsl, cuda-tile, nvidia-cudnn-frontend, nccl4py, ...:
  # far over the budget; fetched here only to report the size.
  [flashinfer]="flashinfer-python==0.7.2.post1"
)
groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(fla)
[ "${groups[0]}" = all ] && groups=(fla flashqla flashinfer)

PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)
BUDGET=$((64 * 1024 * 1024))
tree_bytes=$( (git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null || true) | tail -1 | cut -f1)
shared_bytes=$( (du -sb shared 2>/dev/null || echo 0) | cut -f1)
left=$((BUDGET - tree_bytes - ${shared_bytes:-0}))
echo "working tree ${tree_bytes} B; budget left for .whl: $((left / 1024 / 1024)) MiB"

mkdir -p .whl
total=0
for g in "${groups[@]}"; do
  gbytes=0
  for spec in ${GROUP[$g]}; do
    name=$(echo "$spec" | sed 's/[<>=!].*//')
    if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLAT[@]}" -d .whl "$spec" 2>/tmp/fetch_peers.err; then
      echo "  $g: $spec FAILED: $(tail -1 /tmp/fetch_peers.err)"
      continue
    fi
    f=$(ls -t .whl/"$(echo "$name" | tr - _)"-*.whl 2>/dev/null | head -1)
    [ -n "$f" ] || { echo "  $g: $spec: no wheel found in .whl/"; continue; }
    sz=$(stat -c %s "$f")
    gbytes=$((gbytes + sz))
    printf '  %-10s %-45s %8.1f MiB\n' "$g" "$(basename "$f")" "$(echo "$sz / 1048576" | bc -l)"
  done
  total=$((total + gbytes))
  fits=yes; [ $total -gt $left ] && fits=NO
  printf '%-10s group %8.1f MiB; cumulative %8.1f MiB; fits: %s\n' "$g" "$(echo "$gbytes / 1048576" | bc -l)" \
    "$(echo "$total / 1048576" | bc -l)" "$fits"
done
echo "wheels in .whl/: $(du -sh .whl | cut -f1). Keep only groups that fit (rm the others) before a GPU run."
