#!/usr/bin/env bash
# One fuzz target's CTest run (docs/reliability.md): replays every input of its regression corpus
# (tests/fuzz/regressions/<target>/: crashes found before, each must now pass), then a short campaign from the
# seeds, bounded by a number of runs and by time. A crash, leak, timeout or sanitizer report fails the test and
# leaves the input in the build directory.
#
# usage: run_fuzz.sh <fuzzer binary> <tests/fuzz directory> <runs> [extra libFuzzer flags...]
set -euo pipefail
fuzzer=$1
src=$2
runs=$3
shift 3
name=$(basename "$fuzzer")
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/../sanitizers/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Crash inputs land where CTest runs the test (the build's tests/ folder), named after the target.
flags=(-timeout=20 -rss_limit_mb=2048 -seed=1 -print_final_stats=1 -artifact_prefix="$(pwd)/$name-")
seeds=()
case "$name" in
  fuzz_topo_import)
    # hwloc hangs on some files; load_xml's reader gives up after 10 s (topology/xml_sandbox.h): wait longer.
    flags+=(-dict="$src/hwloc_xml.dict" -max_len=32768 -timeout=40)
    seeds+=("$src/../fixtures/topology")
    ;;
  fuzz_perf_args) flags+=(-max_len=512) ;;
  fuzz_capi_structs) flags+=(-max_len=256) ;;
  fuzz_cost_model) flags+=(-dict="$src/cost_model.dict" -max_len=4096) ;;
esac
[ -d "$src/seeds/$name" ] && seeds+=("$src/seeds/$name")

regressions="$src/regressions/$name"
if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
  echo "== $name: replaying $(ls "$regressions" | wc -l) regression inputs"
  "$fuzzer" "${flags[@]}" "$regressions"/*
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/basp-fuzz-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
echo "== $name: $runs runs from ${#seeds[@]} seed folder(s)"
cd "$work"
# Stops after <runs> executions or BASP_FUZZ_SECONDS (default 20), whichever comes first.
"$fuzzer" "${flags[@]}" -runs="$runs" -max_total_time="${BASP_FUZZ_SECONDS:-20}" "$@" corpus "${seeds[@]}"
