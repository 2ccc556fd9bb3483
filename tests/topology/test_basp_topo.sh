#!/usr/bin/env bash
# Tests of the basp-topo CLI. Expected groups are the machines' facts (tests/fixtures/topology/README.md).
# Usage: test_basp_topo.sh BASP_TOPO FIXTURE_DIR [MPIEXEC NP_FLAG]   (with MPIEXEC: the mpirun checks only)
set -u
topo=$1
fixtures=$2
mpiexec=${3:-}
np_flag=${4:--n}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}

# run NAME EXPECTED_RC ARGS...: runs basp-topo, keeps stdout in $tmp/NAME.out and stderr in $tmp/NAME.err.
run() {
  local name=$1 want=$2
  shift 2
  "$topo" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "$name: exit status $rc, expected $want (basp-topo $*)"
}

has() {  # has NAME FILE-SUFFIX TEXT
  grep -qF -- "$3" "$tmp/$1.$2" || fail "$1: \"$3\" not in its $2:"$'\n'"$(cat "$tmp/$1.$2")"
}

nvml_absent() { ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; }

if [ -n "$mpiexec" ]; then
  # 4 ranks as 2 nodes dealt round-robin: the groups of -B 2 are the nodes.
  $mpiexec $np_flag 4 --oversubscribe "$here/fake_nodes.sh" 2 "$topo" -B 2 >"$tmp/mpi.out" 2>"$tmp/mpi.err" ||
    fail "mpi: exit status $?"
  has mpi out "Ranks: 4 on 2 node(s)"
  has mpi out "group 0: ranks 0 2 |"
  has mpi out "group 1: ranks 1 3 |"
  has mpi out "\"fake-node-1\""
  if nvml_absent; then has mpi out "NVLink: no NVLink information"; fi
  # The cost model measured on the same 2 fake nodes: a table, and a file that prints back the same coefficients.
  $mpiexec $np_flag 4 --oversubscribe "$here/fake_nodes.sh" 2 "$topo" --calibrate --save-cost-model "$tmp/live.model" \
    >"$tmp/cal.out" 2>"$tmp/cal.err" || fail "calibrate: exit status $?"
  has cal out "Cost model (calibrated, 4 ranks on 2 node(s))"
  has cal out "Wrote $tmp/live.model"
  "$topo" --cost-model "$tmp/live.model" >"$tmp/reload.out" 2>&1 || fail "reload: exit status $?"
  diff <(grep -e 'alpha' -e 'beta' "$tmp/cal.out") <(grep -e 'alpha' -e 'beta' "$tmp/reload.out") >/dev/null ||
    fail "the saved model prints other coefficients than the calibrated one"
  [ "$failures" -eq 0 ] && echo "PASS: basp-topo under mpirun" || echo "$failures failure(s)"
  exit $((failures > 0))
fi

# This machine.
run live 0 --no-mpi
has live out "Topology: this machine"
if nvml_absent; then has live out "NVLink: no NVLink information (libnvidia-ml.so.1"; fi

# Bad input: a clear message naming the file or argument, status 1 (error) or 2 (usage).
run missing 1 --no-mpi --import "$tmp/none.xml"
has missing err "$tmp/none.xml"
has missing err "cannot be read"
printf 'not a topology\n' >"$tmp/garbage.xml"
run garbage 1 --no-mpi --import "$tmp/garbage.xml"
has garbage err "\"$tmp/garbage.xml\" is not a valid hwloc XML topology"
run unwritable 1 --no-mpi --import "$fixtures/dgx1-v100.xml" --export /nonexistent-dir/out.xml
has unwritable err "/nonexistent-dir/out.xml"
run zero_b 2 --no-mpi -B 0
has zero_b err "-B (0) must be an integer"
run unknown 2 --no-mpi --frobnicate
has unknown err "unknown argument \"--frobnicate\""
run placement 2 --no-mpi --placement random
has placement err "--placement (random)"

# Export and import: the same matrix, node and groups.
for f in dgx1-v100 pcie-nvlink-bridge dgx-a100 hgx-h100 gb200-nvl72-tray; do
  run "$f-a" 0 --no-mpi --import "$fixtures/$f.xml" --export "$tmp/$f.xml" -B 2
  run "$f-b" 0 --no-mpi --import "$tmp/$f.xml" -B 2
  diff <(grep -v -e '^Topology:' -e '^NVLink:' -e '^Wrote' -e '^$' "$tmp/$f-a.out") \
       <(grep -v -e '^Topology:' -e '^NVLink:' -e '^$' "$tmp/$f-b.out") >"$tmp/$f.diff" ||
    fail "$f: import of the export differs:"$'\n'"$(cat "$tmp/$f.diff")"
done
run live_export 0 --no-mpi --export "$tmp/live.xml"
run live_import 0 --no-mpi --import "$tmp/live.xml"
diff <(grep -e '^Node:' -e '^GPUs:' "$tmp/live_export.out") <(grep -e '^Node:' -e '^GPUs:' "$tmp/live_import.out") \
  >/dev/null || fail "live: import of the export shows another node or GPU count"
if nvml_absent; then has live_import out "NVLink: no NVLink information (libnvidia-ml.so.1"; fi

# Groups: DGX-1 K=4 is the two fully connected quads; 2 HGX nodes numbered round-robin, K=8 is the nodes.
run dgx1 0 --no-mpi --import "$fixtures/dgx1-v100.xml" -B 2
has dgx1 out "group 0: ranks 0 1 2 3 |"
has dgx1 out "group 1: ranks 4 5 6 7 |"
has dgx1 out "NV50G"
run cyclic 0 --no-mpi --import "$fixtures/hgx-h100.xml" --nodes 2 --map-by node -B 2
has cyclic out "Ranks: 16 on 2 node(s)"
has cyclic out "group 0: ranks 0 2 4 6 8 10 12 14 | 1 node(s)"
has cyclic out "group 1: ranks 1 3 5 7 9 11 13 15 | 1 node(s)"
run cyclic_contiguous 0 --no-mpi --import "$fixtures/hgx-h100.xml" --nodes 2 --map-by node -B 2 --placement contiguous
has cyclic_contiguous out "group 0: ranks 0 1 2 3 4 5 6 7 | 2 node(s)"
run nvl72 0 --no-mpi --import "$fixtures/gb200-nvl72-tray.xml" --nodes 18 -B 9
has nvl72 out "NVLink domains spanning nodes: 1"
has nvl72 out "group 0: ranks 0 1 2 3 4 5 6 7 | 2 node(s)"

# A saved cost model's table: alpha and the predicted exchange from the file's coefficients (2 us + 1 us per extra
# peer, 1 ns/byte in a node: K = 2 moving 64 KiB takes 2 + 1 + 65.536 = 68.5 us); malformed files named by line.
printf 'basp-cost-model 1\na0 2e-6\na1 1e-6\nbeta_node 1e-9\nbeta_network 4e-9\nc2 0\nc1 0\nsource calibrated\n' \
  >"$tmp/model.txt"
run cost_model 0 --cost-model "$tmp/model.txt"
has cost_model out "alpha(K) = 2e-06 s + 1e-06 s * (K - 1)"
has cost_model out "(1.00 GB/s)"
has cost_model out "68.5"
printf 'basp-cost-model 1\na0 2e-6\na1 zz\n' >"$tmp/bad_model.txt"
run bad_cost_model 1 --cost-model "$tmp/bad_model.txt"
has bad_cost_model err "line 3"
run save_without_calibrate 2 --save-cost-model "$tmp/x.txt"

[ "$failures" -eq 0 ] && echo "PASS: basp-topo" || echo "$failures failure(s)"
exit $((failures > 0))
