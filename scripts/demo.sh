#!/usr/bin/env bash
# One command on a fresh machine: set up, build, and run `flashgdn demo` (GPU when present, else CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/flashgdn demo "$@"
