#!/usr/bin/env bash
# The lower bound of scripts/bench/batch_bench.py bound against the planner and the benchmark's configurations: on the
# emulated 2 x 4 cluster, basp_batch_layer --plan-only calibrates, plans the long-tail batches of section 12 (seeds
# 0-3, exactly full and 90 % full) and the uniform batch, and writes every configuration with its predicted time;
# `bound` then fails if any configuration within capacity (the adaptive plan, fixed K, Ulysses) is predicted faster
# than the bound, which would make the bound wrong. A file with one prediction lowered under the bound must fail.
#
#   test_batch_bound.sh SIM_CLUSTER BASP_BATCH_LAYER BATCH_BENCH_PY
# Exits 77 (skipped) where sim-cluster cannot run (no root or no network namespaces).
set -uo pipefail
sim=$1 layer=$2 bench=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for fill in 1.0 0.9; do
  "$sim" --nodes 2 --ranks-per-node 4 --map-by slot --link 1gbit --timeout 200 -- \
    "$layer" --c2 1.478e-07 --c1 3.387e-06 --scale 0.001 --seeds 0-3 --fill "$fill" --plan-only \
    --json "$work/plan_$fill.json" >"$work/out_$fill" 2>&1
  rc=$?
  [ "$rc" = 77 ] && exit 77
  if [ "$rc" != 0 ]; then
    echo "FAILED: basp_batch_layer --plan-only --fill $fill exited $rc:" >&2
    tail -20 "$work/out_$fill" >&2
    exit 1
  fi
  if ! python3 "$bench" bound "$work/plan_$fill.json" >"$work/bound_$fill" 2>&1; then
    echo "FAILED: bound on the planned configurations (fill $fill):" >&2
    cat "$work/bound_$fill" >&2
    exit 1
  fi
  grep -q 'geometric mean over 4 long-tail batches' "$work/bound_$fill" || {
    echo "FAILED: bound printed no geometric mean over the 4 batches:" >&2
    cat "$work/bound_$fill" >&2
    exit 1
  }
done
cat "$work/bound_1.0"

# The check can fail: the adaptive plan of the first batch predicted at a tenth of the time.
python3 - "$work/plan_1.0.json" "$work/low.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ad = next(x for x in d["cases"][0]["configs"] if x["name"] == "adaptive")
ad["predicted_s"] *= 0.1
json.dump(d, open(sys.argv[2], "w"))
EOF
if python3 "$bench" bound "$work/low.json" >"$work/low_out" 2>&1; then
  echo "FAILED: bound accepted a configuration predicted under it" >&2
  exit 1
fi
grep -q 'the bound is wrong' "$work/low_out" || {
  echo "FAILED: bound's refusal does not say why: $(cat "$work/low_out")" >&2
  exit 1
}
echo "batch bound: OK"
