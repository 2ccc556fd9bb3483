#!/usr/bin/env bash
# scripts/gpu/rank-env without a GPU or a launcher: the rank from OMPI_COMM_WORLD_RANK, PMIX_RANK, RANK (torchrun)
# or PMI_RANK, in that order; the variables it exports (read back by running `env` through it); the caller's
# NCCL_SOCKET_IFNAME and NCCL_NET kept, its NCCL_HOSTID and BASP_NODE_ID replaced; BASP_RANKS_ONE_NODE=1; the
# errors (no rank, a rank that is no number, no command); arguments and exit status passed through exec.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
wrap="$here/../../scripts/gpu/rank-env"
# shellcheck source=tests/scripts/checks.sh
source "$here/checks.sh"

# run_env DESCRIPTION VAR=VALUE...: `env` through the wrapper in an environment holding only PATH and the
# assignments given; its output in $work/out, stderr in $work/err, status in $status.
run_env() {
  local what=$1
  shift
  env -i PATH=/usr/bin:/bin "$@" "$wrap" env >"$work/out" 2>"$work/err"
  status=$?
  [[ $status == 0 ]] || fail "$what: exit status $status (stderr: $(head -c 400 "$work/err"))"
}

# expect VAR VALUE DESCRIPTION: the last run_env exported VAR=VALUE.
expect() {
  checks=$((checks + 1))
  local got
  got=$(grep -E "^$1=" "$work/out" | head -1)
  [[ "$got" == "$1=$2" ]] || fail "$3: expected $1=$2, got '${got:-nothing}'"
}

expect_all() {  # RANK NODE IFNAME NET DESCRIPTION
  expect NCCL_HOSTID "basp-rank-$1" "$5"
  expect BASP_NODE_ID "$2" "$5"
  expect NCCL_SOCKET_IFNAME "$3" "$5"
  expect NCCL_NET "$4" "$5"
  expect NCCL_IB_DISABLE 1 "$5"
  expect NCCL_MNNVL_ENABLE 0 "$5"
}

# Open MPI's rank wins over torchrun's RANK.
run_env "Open MPI" OMPI_COMM_WORLD_RANK=3 RANK=1 PMI_RANK=7
expect_all 3 basp-rank-3 lo Socket "Open MPI rank 3 (RANK=1 too)"
run_env "PMIx" PMIX_RANK=5 RANK=1 PMI_RANK=7
expect_all 5 basp-rank-5 lo Socket "PMIX_RANK=5 (RANK=1 too)"
run_env "torchrun" RANK=1 LOCAL_RANK=1 WORLD_SIZE=2
expect_all 1 basp-rank-1 lo Socket "torchrun RANK=1"
run_env "PMI" PMI_RANK=2
expect_all 2 basp-rank-2 lo Socket "PMI_RANK=2"
run_env "rank 0" RANK=0
expect_all 0 basp-rank-0 lo Socket "RANK=0"
# An empty variable is not a rank: the next one is taken.
run_env "empty OMPI_COMM_WORLD_RANK" OMPI_COMM_WORLD_RANK= RANK=4
expect_all 4 basp-rank-4 lo Socket "OMPI_COMM_WORLD_RANK empty, RANK=4"

# One node for libbasp, still one host per rank for NCCL.
run_env "one node" OMPI_COMM_WORLD_RANK=1 BASP_RANKS_ONE_NODE=1
expect_all 1 basp-one-node lo Socket "BASP_RANKS_ONE_NODE=1"
run_env "one node = 0" OMPI_COMM_WORLD_RANK=1 BASP_RANKS_ONE_NODE=0
expect_all 1 basp-rank-1 lo Socket "BASP_RANKS_ONE_NODE=0"

# The caller's interface and network are kept; its host id and node id are replaced.
run_env "caller's choice" RANK=2 NCCL_SOCKET_IFNAME=eth7 NCCL_NET=IB NCCL_HOSTID=stale BASP_NODE_ID=stale \
  NCCL_IB_DISABLE=0 NCCL_MNNVL_ENABLE=1
expect_all 2 basp-rank-2 eth7 IB "caller set NCCL_SOCKET_IFNAME=eth7 NCCL_NET=IB"
run_env "empty interface" RANK=2 NCCL_SOCKET_IFNAME=
expect NCCL_SOCKET_IFNAME lo "an empty NCCL_SOCKET_IFNAME counts as unset"

# No rank: exit 2, and the message names every variable looked at.
checks=$((checks + 1))
env -i PATH=/usr/bin:/bin "$wrap" env >"$work/out" 2>"$work/err"
status=$?
[[ $status == 2 ]] || fail "no rank: exit status $status, expected 2"
for var in OMPI_COMM_WORLD_RANK PMIX_RANK RANK PMI_RANK; do
  grep -qw "$var" "$work/err" || fail "no rank: the message does not name $var: $(cat "$work/err")"
done
[[ ! -s "$work/out" ]] || fail "no rank: the command ran anyway"

checks=$((checks + 1))
env -i PATH=/usr/bin:/bin RANK=x1 "$wrap" env >"$work/out" 2>"$work/err"
status=$?
[[ $status == 2 ]] || fail "RANK=x1: exit status $status, expected 2"
grep -q "RANK='x1'" "$work/err" || fail "RANK=x1: the message does not quote it: $(cat "$work/err")"

checks=$((checks + 1))
env -i PATH=/usr/bin:/bin RANK=0 "$wrap" >"$work/out" 2>"$work/err"
status=$?
[[ $status == 2 ]] || fail "no command: exit status $status, expected 2"
grep -q usage "$work/err" || fail "no command: no usage line: $(cat "$work/err")"

# exec: arguments arrive as given, the exit status is the command's.
checks=$((checks + 1))
got=$(env -i PATH=/usr/bin:/bin RANK=0 "$wrap" printf '%s|' "a b" "" c)
[[ "$got" == "a b||c|" ]] || fail "arguments: got '$got', expected 'a b||c|'"
checks=$((checks + 1))
env -i PATH=/usr/bin:/bin RANK=0 "$wrap" sh -c 'exit 7'
status=$?
[[ $status == 7 ]] || fail "exit status: got $status, expected 7"

finish test_gpu_rank_env
