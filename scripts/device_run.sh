#!/usr/bin/env bash
# The one script for the GPU machine: build, GPU tests, sanitizers, demo, benchmarks, Python package + tests +
# side-by-side peer benchmark. Logs and tables go to $OUT (the logs bundled in $OUT/logs.tar.gz, the summary tables
# as separate files).
# usage: scripts/device_run.sh [stage...]   stages: build gputest sanitize demo bench python mixer train side
# (default: all); `pyinstall` installs the package without running pytest; `ab` (bench/ab.sh over AB_TREES) and `ncu`
# (a kernel profile) run only when named. The build puts the Python extension in
# the tree too, and the mixer / train / side stages import that one, so they need no pip install.
# The header-only build dependencies the image lacks travel as .deb in the git-ignored .deps/ (on this machine:
# `mkdir .deps && cd .deps && apt-get download libcli11-dev nlohmann-json3-dev libdlpack-dev googletest libgtest-dev`),
# the peers in .peers/ (`bash ../shared/tools/pack_peers.sh .peers`); a run names both in `carry`.
# Peers: the packs of the git-ignored .peers/ (FLA 0.6.0 wheels, FlashQLA 0.1.3 site) are unpacked to /tmp/fla and
# /tmp/qla. FLA 0.6 routes its chunk ops to FlashQLA whenever flash_qla is importable, so each peer runs in its own
# process (PYTHONPATH=/tmp/fla or /tmp/qla), flashgdn beside it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgdn-out}
LOG=$OUT/logs
mkdir -p "$LOG"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build gputest sanitize demo bench python mixer train side)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
summary=$OUT/summary.md
{
  echo "# flashgdn device run"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  commit: ${FLASHGDN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null)"
  echo "command: scripts/device_run.sh ${stages[*]}"
} >"$summary"
step() { echo; echo "=== $* ($(date +%T))"; }

deps=${DEPS_DIR:-.deps}
if (has build || has ab) && ls "$deps"/*.deb >/dev/null 2>&1; then  # header-only build deps the image lacks
  for f in "$deps"/*.deb; do dpkg -x "$f" /; done                 # (dlpack, CLI11, json, gtest)
fi

if has build; then
  step build
  t0=$(date +%s)
  # The Python extension too, in tree (python/flashgdn/_C*.so): the Python stages use it without a pip install.
  cmake -S . -B "${BUILD_DIR:-build-dev}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHGDN_WITH_CUDA=ON \
    -DFLASHGDN_BUILD_PYTHON=ON >"$LOG/configure.log" 2>&1 &&
    cmake --build "${BUILD_DIR:-build-dev}" -j 16 >"$LOG/build.log" 2>&1
  rc=$?
  echo "build rc=$rc in $(( $(date +%s) - t0 )) s" | tee -a "$summary"
  grep -E "error|spill|lmem|Used [0-9]+ registers" "$LOG/build.log" | grep -E "error|bytes spill|lmem" | grep -v " 0 bytes spill" | head -20 | tee -a "$summary"
  [ $rc -ne 0 ] && { tail -50 "$LOG/build.log"; tar czf "$OUT/logs.tar.gz" -C "$OUT" logs; exit 1; }
fi
B=${BUILD_DIR:-build-dev}
# The package the Python stages import: the in-tree build when there is one (ahead of a pip-installed copy).
PYP=""
ls python/flashgdn/_C*.so >/dev/null 2>&1 && PYP="$PWD/python:"

if has gputest; then
  step gpu tests
  # GPU_TEST_SHARDS gtest shards at once (default 6): the suite's time is mostly its host-side fp64 references and
  # input generation (410 s in one process on an H100), which the shards spread over the machine's cores.
  shards=${GPU_TEST_SHARDS:-6} t0=$(date +%s)
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i $B/flashgdn_gpu_tests >"$LOG/gpu_tests.$i.log" 2>&1 &
  done
  rc=0
  for job in $(jobs -p); do wait "$job" || rc=1; done
  cat "$LOG"/gpu_tests.*.log >"$LOG/gpu_tests.log"
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$LOG/gpu_tests.log" | awk '{s += $1} END {print s + 0}')
  echo "gpu tests rc=$rc : ${passed:-0} passed in $shards shards, $(( $(date +%s) - t0 )) s" | tee -a "$summary"
  grep -E "^\[  FAILED|Failure|error" "$LOG/gpu_tests.log" | head -30 | tee -a "$summary"
  echo "slowest: $(sed -nE 's/^\[       OK \] ([^ ]+) \(([0-9]+) ms\)$/\2 \1/p' "$LOG/gpu_tests.log" | sort -rn | head -6 |
    awk '{printf "%s%s %.1f s", (NR > 1 ? ", " : ""), $2, $1 / 1000}')" | tee -a "$summary"
  $B/flashgdn_cpu_tests --gtest_brief=1 >"$LOG/cpu_tests.log" 2>&1
  echo "cpu tests rc=$?" | tee -a "$summary"
  $B/flashgdn_api_tests --gtest_brief=1 >"$LOG/api_tests.log" 2>&1
  echo "api tests (C ABI, validation, CUDA dispatch) rc=$? : $(grep -E '^\[  (PASSED|FAILED)' "$LOG/api_tests.log" | tr '\n' ' ')" | tee -a "$summary"
fi

if has sanitize; then
  # compute-sanitizer over the whole GPU suite (the device-index fuzz CudaIndexFuzz.* included), one process per
  # test so that a test past its time limit costs only its own slot and the table names it.
  #   SANITIZE_TOOLS   (default "memcheck racecheck"); one tool per device command keeps each under 10 minutes
  #   SANITIZE_FILTER  gtest filter (default: every test)
  #   SANITIZE_BUDGET  seconds for all tools together (default 540): a test gets what is left, at most
  #   SANITIZE_SUITE_TIMEOUT (default 400)
  #   SANITIZE_JOBS    tests under the tool at once (default 1)
  #   SANITIZE_KERNEL  only kernels whose name contains this (compute-sanitizer --kernel-name kns=...; default all)
  # $OUT/sanitize.md: per tool and suite the status, the sanitizer summary and the slowest tests.
  step compute-sanitizer
  san=$OUT/sanitize.md
  echo "| tool | suite | tests not clean | summary | slowest tests (ms under the tool) |" >"$san"
  echo "|---|---|---|---|---|" >>"$san"
  $B/flashgdn_gpu_tests --gtest_list_tests --gtest_filter="${SANITIZE_FILTER:-*}" |
    awk '/^[^ ]/{s=$1} /^  /{print s $1}' >"$LOG/sanitize_tests.txt"
  suites=$(sed 's/\..*//' "$LOG/sanitize_tests.txt" | uniq)
  t_start=$(date +%s)
  # One test per process, SANITIZE_JOBS at a time (the tools are slow per test, not per GPU: racecheck of the
  # whole suite takes longer than one device command in series), each under the time that is left of the budget.
  run_one() {  # tool test -> its log; the exit status and wall time go in the log's last line
    local left lim t0 rc
    left=$(( ${SANITIZE_BUDGET:-540} - ($(date +%s) - t_start) ))
    lim=$(( left < ${SANITIZE_SUITE_TIMEOUT:-400} ? left : ${SANITIZE_SUITE_TIMEOUT:-400} ))
    if [ "$lim" -le 10 ]; then echo "@@ rc=notrun s=0" >"$LOG/san_$1_$2.log"; return; fi
    t0=$(date +%s)
    timeout "$lim" compute-sanitizer --tool "$1" --error-exitcode 9 ${SANITIZE_KERNEL:+--kernel-name kns=$SANITIZE_KERNEL} \
      $B/flashgdn_gpu_tests --gtest_filter="$2" \
      >"$LOG/san_$1_$2.log" 2>&1
    rc=$?
    echo "@@ rc=$rc s=$(( $(date +%s) - t0 )) lim=$lim" >>"$LOG/san_$1_$2.log"
  }
  export -f run_one
  export B LOG t_start SANITIZE_BUDGET SANITIZE_SUITE_TIMEOUT SANITIZE_KERNEL
  export FLASHGDN_TEST_REPEATS=${FLASHGDN_TEST_REPEATS:-3}  # determinism loops: 3 launches under the tool
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    sed "s/^/$tool /" "$LOG/sanitize_tests.txt"
  done | xargs -P "${SANITIZE_JOBS:-1}" -L 1 bash -c 'run_one "$0" "$1"'
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
    for suite in $suites; do
      tests=$(grep "^${suite}\." "$LOG/sanitize_tests.txt")
      n=0 bad=0 notrun=0 timedout="" hazards=0 errors=0 fails=0 skips=0 secs=0 slow=""
      for t in $tests; do
        f="$LOG/san_${tool}_$t.log"
        n=$((n + 1))
        rc=$(sed -n 's/^@@ rc=\([^ ]*\).*/\1/p' "$f")
        s=$(sed -n 's/^@@ rc=[^ ]* s=\([0-9]*\).*/\1/p' "$f")
        secs=$((secs + ${s:-0}))
        case "$rc" in
          0) ;;
          notrun) notrun=$((notrun + 1)) ;;
          124) timedout="$timedout $t" ;;
          *) bad=$((bad + 1)) ;;
        esac
        e=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$f" | tail -1)
        h=$(sed -n 's/.*RACECHECK SUMMARY: \([0-9]*\) hazard.*/\1/p' "$f" | tail -1)
        errors=$((errors + ${e:-0})) hazards=$((hazards + ${h:-0}))
        fails=$((fails + $(grep -cE '^\[  FAILED  \] [A-Za-z].* \([0-9]+ ms\)$' "$f")))
        skips=$((skips + $(grep -cE '^\[  SKIPPED \] [A-Za-z].* \([0-9]+ ms\)$' "$f")))
        slow="$slow$(grep -E '^\[       OK \]' "$f" | sed -E 's/.*OK \] ([^ ]+) \(([0-9]+) ms\)/\2 \1/')"$'\n'
      done
      summ="$n tests, $((n - notrun)) run; $tool: $errors errors, $hazards hazards; $fails failed, $skips skipped"
      [ -n "$timedout" ] && summ="$summ; timed out:$timedout"
      slow=$(echo "$slow" | grep . | sort -rn | head -3 | awk '{printf "%s%s %s", (NR>1?", ":""), $2, $1}')
      echo "| $tool | $suite | $bad | $summ; ${secs} s of test time | $slow |" >>"$san"
    done
  done
  cat "$san" | tee -a "$summary"
fi

if has demo; then
  step demo
  $B/flashgdn demo >"$LOG/demo.log" 2>&1
  echo "demo rc=$?" | tee -a "$summary"
  cat "$LOG/demo.log" >>"$summary"
fi

if has bench; then
  step bench
  $B/flashgdn bench ${BENCH_CASES:-all} --json "$OUT/bench.json" >"$LOG/bench.log" 2>&1
  echo "bench rc=$?" | tee -a "$summary"
  sed -n '/^copy /p;/^| case/,$p' "$LOG/bench.log" | tee "$OUT/bench.md" >>"$summary"
fi

if has ab; then
  # Source trees against each other (bench/ab.sh): AB_TREES "NAME=DIR ..." (the first the baseline; `.` this tree),
  # AB_ROUNDS (2), AB_REPS (5), AB_CASES, AB_GATES ("u1 flashqla").
  step A/B
  bash bench/ab.sh -r "${AB_ROUNDS:-2}" -n "${AB_REPS:-5}" -g "${AB_GATES:-u1 flashqla}" -o "$LOG/ab" \
    ${AB_CASES:+-c "$AB_CASES"} ${AB_TREES:-base=.} >"$LOG/ab.log" 2>&1
  echo "ab rc=$?" | tee -a "$summary"
  [ -f "$LOG/ab/ab.md" ] && cat "$LOG/ab/ab.md" | tee "$OUT/ab.md" >>"$summary"
fi

if has ncu; then
  # One launch of each kernel of NCU_KERNELS (names or parts of them; default the backward's fused pass and chains)
  # in `flashgdn bench NCU_CASE` under ncu's full set. The logs keep its details page and its per-instruction source
  # export (gzipped; `tools/sass_profile.py --stalls` reads it), not the report itself, which could push the logs'
  # archive past what comes back from the machine.
  step ncu
  for kn in ${NCU_KERNELS:-chunk_bwd_fused chunk_bwd_chains}; do
    timeout "${NCU_TIMEOUT:-150}" ncu -k "regex:$kn" -c 1 --set full -f -o "$LOG/ncu-$kn" \
      $B/flashgdn bench "${NCU_CASE:-train_bwd_t32k_h16_32}" --reps 3 --gates "${NCU_GATES:-u1}" >"$LOG/ncu-$kn.log" 2>&1
    echo "ncu $kn rc=$?" | tee -a "$summary"
    ncu --import "$LOG/ncu-$kn.ncu-rep" --page details >"$LOG/ncu-$kn.txt" 2>&1
    ncu --import "$LOG/ncu-$kn.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip >"$LOG/ncu-$kn.csv.gz"
    rm -f "$LOG/ncu-$kn.ncu-rep"
    grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Issued Ipc|Eligible Warps|Warp Cycles Per Issued|Registers Per Thread" \
      "$LOG/ncu-$kn.txt" | head -16 | tee -a "$summary"
  done
fi

# The peers, unpacked once per machine (FLA's wheels to /tmp/fla, FlashQLA's site to /tmp/qla).
if has python || has mixer || has train || has side; then
  if ls .peers/fla/*.whl >/dev/null 2>&1 && [ ! -d /tmp/fla/fla ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fla .peers/fla/*.whl >"$LOG/peers.log" 2>&1
  fi
  if [ -f .peers/flashqla-site.tar.xz ] && [ ! -d /tmp/qla/flash_qla ]; then
    mkdir -p /tmp/qla && tar -C /tmp/qla -xJf .peers/flashqla-site.tar.xz
  fi
fi

if has python || has pyinstall; then
  step python package
  t0=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps -v . >"$LOG/pip_install.log" 2>&1
  echo "pip install rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$summary"
fi

if has python; then
  (cd /tmp && PYTHONUNBUFFERED=1 timeout 300 python3 -X faulthandler -m pytest "$OLDPWD/tests/python" -v -rs \
    -p no:cacheprovider >"$LOG/pytest.log" 2>&1)
  rc=$?
  echo "pytest rc=$rc : $(grep -E '(passed|failed|error)' "$LOG/pytest.log" | tail -1)" | tee -a "$summary"
  if [ $rc -ge 128 ]; then  # a crash: name the test, get a native backtrace, run the rest without it
    bad=$(grep -E '::' "$LOG/pytest.log" | tail -1 | awk '{print $1}')
    bad="$OLDPWD/tests/python/${bad#*tests/python/}"
    echo "crashed in: $bad" | tee -a "$summary"
    (cd /tmp && timeout 120 cuda-gdb -batch -ex run -ex bt --args python3 -m pytest "$bad" -q -p no:cacheprovider \
      >"$LOG/crash_bt.log" 2>&1)
    grep -E "^#[0-9]+" "$LOG/crash_bt.log" | head -25 | tee -a "$summary"
    (cd /tmp && PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest "$OLDPWD/tests/python" -q -rs -p no:cacheprovider \
      --deselect "$bad" >"$LOG/pytest_rest.log" 2>&1)
    echo "pytest without it rc=$? : $(tail -1 "$LOG/pytest_rest.log")" | tee -a "$summary"
  fi
fi

if has mixer; then
  # the plan's V split, then each split forced (MIXER_SPLITS= for the plan's alone)
  step mixer decode benchmark
  (cd /tmp && PYTHONPATH=$PYP/tmp/fla PYTHONUNBUFFERED=1 timeout ${MIXER_TIMEOUT:-360} python3 "$OLDPWD/bench/mixer_decode.py" \
    --splits "${MIXER_SPLITS-1,2,4}" --out "$LOG/mixer.json" >"$LOG/mixer.log" 2>&1)
  echo "mixer rc=$?" | tee -a "$summary"
  grep -E "^copy|^\|" "$LOG/mixer.log" >>"$summary"
fi

if has train; then
  step training step benchmark
  (cd /tmp && PYTHONPATH=$PYP/tmp/qla PYTHONUNBUFFERED=1 timeout ${TRAIN_TIMEOUT:-500} python3 "$OLDPWD/bench/train_step.py" \
    --shapes ${TRAIN_SHAPES:-8k,32k,4x8k} --out "$LOG/train.json" >"$LOG/train.log" 2>&1)
  echo "train rc=$?" | tee -a "$summary"
  grep -E "^\||not available" "$LOG/train.log" >>"$summary"
fi

if has side; then
  step side-by-side benchmark
  # SIDE_GATES: one run per gate distribution and peer (default logsigmoid; "logsigmoid flashqla" for both, as
  # issue 17 measures); the runs after a peer's first pass --peers-compiled, its JIT being warm by then (otherwise the
  # budget keeps ~60 s per new FlashQLA shape family in reserve and skips shapes).
  for peer in ${SIDE_PEERS:-flashqla fla}; do
    site=/tmp/qla; [ "$peer" = fla ] && site=/tmp/fla
    warm=""
    for gates in ${SIDE_GATES:-logsigmoid}; do
      tag=$peer-$gates
      (cd /tmp && PYTHONPATH=$PYP$site PYTHONUNBUFFERED=1 timeout ${SIDE_TIMEOUT:-400} python3 "$OLDPWD/bench/side_by_side.py" \
        --peers "$peer" --gates "$gates" $warm --out "$LOG/side-$tag" ${SIDE_ARGS:-} >"$LOG/side_by_side-$tag.log" 2>&1)
      echo "side_by_side ($peer, $gates gates) rc=$?" | tee -a "$summary"
      [ -f "$LOG/side-$tag/results.md" ] && cat "$LOG/side-$tag/results.md" >>"$summary"
      warm=--peers-compiled
    done
  done
fi

# What comes back: this summary and one archive (logs, JSON, tables, plots).
for f in "$OUT"/*; do [ "$f" != "$summary" ] && [ "$f" != "$LOG" ] && mv "$f" "$LOG/"; done
tar czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOG"
echo; cat "$summary"
