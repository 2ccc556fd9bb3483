#!/usr/bin/env bash
# The NVTX ranges of an execute (src/common/trace.h), seen by an NVTX tool: runs test_redistribution (MPI backend,
# every call a scatter and a gather) on 2 ranks with the counting injection library, then checks, in every rank's
# counts, that "basp:scatter" and "basp:gather" were pushed at least once each, every push popped, and nothing left
# open. Fails when the library pushes no range, pops one it did not push, or leaves one open.
#   test_nvtx.sh <mpiexec> <injection library> <test_redistribution>
set -euo pipefail
mpiexec=$1 injection=$2 program=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpiexec" -np 2 --oversubscribe --bind-to none -x NVTX_INJECTION64_PATH="$injection" \
  -x BASP_NVTX_COUNTS="$dir/counts" "$program" 2 >"$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
files=("$dir"/counts.*)
[[ ${#files[@]} == 2 && -f "${files[0]}" ]] || { echo "FAILED: expected 2 count files, found: ${files[*]}"; exit 1; }
fail=0
for f in "${files[@]}"; do
  echo "== $f"; cat "$f"
  for name in basp:scatter basp:gather; do
    read -r pushes pops < <(awk -v n="$name" '$1 == n { print $2, $3 }' "$f")
    if [[ -z "${pushes:-}" || "$pushes" -lt 1 || "$pushes" != "$pops" ]]; then
      echo "FAILED: $name: pushes ${pushes:-0}, pops ${pops:-0} in $f"
      fail=1
    fi
  done
  left=$(awk '$1 == "unbalanced" { print $2 }' "$f")
  [[ "$left" == 0 ]] || { echo "FAILED: $left ranges left open in $f"; fail=1; }
done
[[ $fail == 0 ]] && echo "nvtx: every rank pushed and popped basp:scatter and basp:gather, none left open"
exit $fail
