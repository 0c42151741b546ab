#!/usr/bin/env bash
# A/B timing of source trees on one GPU: builds the flashgdn CLI of each tree (in parallel), then runs every
# (case, gates) pair on each tree in turn, round after round, so that clock and thermal drift fall on all trees alike.
#
# usage: bash bench/ab.sh [-r ROUNDS] [-n REPS] [-c "CASE..."] [-g "GATES..."] [-o DIR] NAME=SOURCE...
#   SOURCE  a source tree (its CLI built in SOURCE/build-ab; CMakeLists.txt, cmake, include, src, tests and tools
#           suffice, the CLI's bench including tests/test_util.hpp: `git archive REV CMakeLists.txt cmake include src
#           tests tools | tar -x -C DIR`); the first NAME is the baseline of the ratios
#   -r 2  -n 5  -c "train_bwd_t8k_h16_32 train_bwd_t32k_h16_32 train_bwd_varlen_4x8k"  -g "u1 flashqla"  -o ab-out
# Writes DIR/ab.tsv (round, case, gates, name, ms: `flashgdn bench`'s CUDA-graph median) and DIR/ab.md (per pair
# the milliseconds of each round and each tree's median over the rounds against the first tree's).
set -uo pipefail
rounds=2 reps=5 out=ab-out
cases="train_bwd_t8k_h16_32 train_bwd_t32k_h16_32 train_bwd_varlen_4x8k"
gates="u1 flashqla"
while getopts "r:n:c:g:o:" opt; do
  case $opt in
    r) rounds=$OPTARG ;; n) reps=$OPTARG ;; c) cases=$OPTARG ;; g) gates=$OPTARG ;; o) out=$OPTARG ;;
    *) echo "usage: bash bench/ab.sh [-r ROUNDS] [-n REPS] [-c CASES] [-g GATES] [-o DIR] NAME=SOURCE..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "bench/ab.sh: expected at least one NAME=SOURCE" >&2; exit 2; }
mkdir -p "$out"
names=() dirs=()
for spec in "$@"; do
  name=${spec%%=*} src=${spec#*=}
  [[ "$name" =~ ^[A-Za-z0-9_.-]+$ && "$spec" == *=* ]] || { echo "bench/ab.sh: bad NAME=SOURCE '$spec'" >&2; exit 2; }
  dir=$(cd "$src" && pwd) || exit 1
  names+=("$name") dirs+=("$dir")
done

# The CLIs, built side by side (the cores split among them).
jobs=$(( $(nproc) / ${#dirs[@]} )); [ "$jobs" -ge 1 ] || jobs=1
for k in "${!dirs[@]}"; do
  (cmake -S "${dirs[$k]}" -B "${dirs[$k]}/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHGDN_WITH_CUDA=ON \
    -DFLASHGDN_BUILD_TESTS=OFF -DFLASHGDN_BUILD_EXAMPLES=OFF >"$out/build-${names[$k]}.log" 2>&1 &&
    cmake --build "${dirs[$k]}/build-ab" -j "$jobs" --target flashgdn_cli >>"$out/build-${names[$k]}.log" 2>&1) &
done
rc=0
for job in $(jobs -p); do wait "$job" || rc=1; done
[ $rc -eq 0 ] || { echo "bench/ab.sh: a build failed (logs in $out)" >&2; exit 1; }

printf "round\tcase\tgates\tname\tms\n" >"$out/ab.tsv"
for ((r = 1; r <= rounds; ++r)); do
  for c in $cases; do
    for gt in $gates; do
      for k in "${!dirs[@]}"; do
        j="$out/r$r-$c-$gt-${names[$k]}.json"
        "${dirs[$k]}/build-ab/flashgdn" bench "$c" --reps "$reps" --gates "$gt" --json "$j" >>"$out/bench.log" 2>&1
        ms=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'][0]['ms'])" "$j" 2>/dev/null)
        printf "%s\t%s\t%s\t%s\t%s\n" "$r" "$c" "$gt" "${names[$k]}" "${ms:-failed}" | tee -a "$out/ab.tsv"
      done
    done
  done
done

python3 - "$out/ab.tsv" "${names[@]}" >"$out/ab.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
names = sys.argv[2:]
pairs = list(dict.fromkeys((r["case"], r["gates"]) for r in rows))
print("| case | gates | " + " | ".join(f"{n} ms (rounds)" for n in names) + " | " +
      " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
print("|---|---|" + "---|" * (2 * len(names) - 1))
for c, g in pairs:
    ms = {n: [float(r["ms"]) for r in rows if (r["case"], r["gates"], r["name"]) == (c, g, n) and r["ms"] != "failed"]
          for n in names}
    med = {n: statistics.median(v) if v else float("nan") for n, v in ms.items()}
    cells = [" / ".join(f"{x:.4f}" for x in ms[n]) or "failed" for n in names]
    ratios = [f"{100 * (med[n] / med[names[0]] - 1):+.1f}%" for n in names[1:]]
    print(f"| {c} | {g} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
EOF
cat "$out/ab.md"
