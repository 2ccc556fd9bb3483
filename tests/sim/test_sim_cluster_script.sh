#!/usr/bin/env bash
# Checks of scripts/sim-cluster and its launcher stand-in that need no MPI program.
#
#   test_sim_cluster_script.sh usage     command-line errors and the stand-in launcher (no root needed)
#   test_sim_cluster_script.sh teardown  host names, link shaping, and clean-up after failure and after a signal
#                                        (root with network namespaces; exits 77, "skipped", otherwise)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
sim="$here/../../scripts/sim-cluster"
rsh="$here/../../scripts/sim/sim-cluster-rsh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}

# expect_status WANT DESCRIPTION COMMAND...: runs COMMAND, stderr to $work/err.
expect_status() {
  local want=$1 what=$2
  shift 2
  "$@" >"$work/out" 2>"$work/err"
  local got=$?
  [ "$got" = "$want" ] || fail "$what: exit status $got, expected $want (stderr: $(head -c 400 "$work/err"))"
}

expect_stderr() {  # the last command's stderr must contain the text
  grep -qF -- "$2" "$work/err" || fail "$1: stderr lacks \"$2\": $(head -c 400 "$work/err")"
}

usage_checks() {
  expect_status 2 "bad --link" "$sim" --link 4gbps -- true
  expect_stderr "bad --link" '--link ("4gbps")'
  expect_status 2 "bad --nodes" "$sim" --nodes 0 -- true
  expect_stderr "bad --nodes" '--nodes ("0")'
  expect_status 2 "too many nodes" "$sim" --nodes 27 -- true
  expect_stderr "too many nodes" '1 to 26'
  expect_status 2 "bad --ranks-per-node" "$sim" --ranks-per-node x -- true
  expect_stderr "bad --ranks-per-node" '--ranks-per-node ("x")'
  expect_status 2 "bad --map-by" "$sim" --map-by ring -- true
  expect_stderr "bad --map-by" '--map-by ("ring")'
  expect_status 2 "bad --latency" "$sim" --latency 5 -- true
  expect_stderr "bad --latency" '--latency ("5")'
  expect_status 2 "small --burst" "$sim" --link 1gbit --burst 1K -- true
  expect_stderr "small --burst" 'at least 64K'
  expect_status 2 "unknown option" "$sim" --frobnicate -- true
  expect_stderr "unknown option" '"--frobnicate"'
  expect_status 2 "missing value" "$sim" --nodes
  expect_stderr "missing value" '--nodes needs a value'
  expect_status 2 "no command" "$sim" --nodes 2
  expect_stderr "no command" 'no command'
  expect_status 0 "--help" "$sim" --help
  grep -q -- "--ranks-per-node" "$work/out" || fail "--help does not describe --ranks-per-node"

  # The stand-in: ssh options dropped, only the cluster's hosts accepted, each host with its own directories and
  # identity.
  export BASP_SIM_HOSTS="nodeA nodeB" BASP_SIM_STATE="$work/state" BASP_SIM_SHM="$work/shm" BASP_SIM_UTS=0
  export BASP_SIM_NODE_ID=1
  expect_status 255 "stand-in, unknown host" "$rsh" -o StrictHostKeyChecking=no nodeZ true
  expect_stderr "stand-in, unknown host" 'host "nodeZ" is not a fake node'
  expect_status 255 "stand-in, no command" "$rsh" nodeA
  # shellcheck disable=SC2016
  expect_status 0 "stand-in, nodeB" "$rsh" -x -p 22 -o BatchMode=yes nodeB \
    'echo $BASP_NODE_ID $OMPI_MCA_orte_tmpdir_base $OMPI_MCA_btl_vader_backing_directory'
  local want="nodeB $work/state/nodeB/tmp $work/shm/nodeB"
  [ "$(cat "$work/out")" = "$want" ] || fail "stand-in environment: \"$(cat "$work/out")\", expected \"$want\""
  [ -d "$work/state/nodeB/tmp" ] && [ -d "$work/shm/nodeB" ] || fail "stand-in did not create nodeB's directories"
  # ssh joins the words it is given into one shell command line; so does the stand-in.
  expect_status 0 "stand-in, words joined" "$rsh" nodeA echo a '&&' echo b
  [ "$(tr '\n' ' ' <"$work/out")" = "a b " ] || fail "stand-in did not run the words as one command line"
  BASP_SIM_NODE_ID=0 BASP_NODE_ID=stale expect_status 0 "stand-in, --no-node-id" "$rsh" nodeA 'echo "[${BASP_NODE_ID-}]"'
  [ "$(cat "$work/out")" = "[]" ] || fail "stand-in with BASP_SIM_NODE_ID=0 left BASP_NODE_ID set: $(cat "$work/out")"
}

namespace_gone() {  # $1: namespace name
  local ns=$1
  [ -n "$ns" ] || { fail "$2: the command did not report its namespace"; return; }
  ip netns list | awk '{print $1}' | grep -qx "$ns" && fail "$2: namespace $ns still exists"
  [ -e "/etc/netns/$ns" ] && fail "$2: /etc/netns/$ns still exists"
  compgen -G "/tmp/$ns.*" >/dev/null && fail "$2: /tmp/$ns.* still exists"
  compgen -G "/dev/shm/$ns.*" >/dev/null && fail "$2: /dev/shm/$ns.* still exists"
  return 0
}

teardown_checks() {
  "$sim" --check >"$work/out" 2>"$work/err"
  local st=$?
  if [ "$st" = 77 ]; then
    echo "SKIPPED: $(cat "$work/err")"
    exit 77
  fi
  [ "$st" = 0 ] || fail "--check: exit status $st: $(cat "$work/err")"

  # Inside: the fake host names resolve to their loopback addresses, the link is shaped, only lo exists.
  # shellcheck disable=SC2016
  expect_status 0 "inside the namespace" "$sim" --nodes 3 --link 2gbit --shell -- sh -c \
    'getent hosts nodeA nodeB nodeC; tc qdisc show dev lo; ip -o link show | wc -l; echo "np=$BASP_SIM_NODES"'
  grep -q '^127\.0\.1\.1 *nodeA' "$work/out" || fail "nodeA does not resolve to 127.0.1.1: $(cat "$work/out")"
  grep -q '^127\.0\.1\.3 *nodeC' "$work/out" || fail "nodeC does not resolve to 127.0.1.3: $(cat "$work/out")"
  grep -q 'tbf .*rate 2Gbit' "$work/out" || fail "no 2gbit tbf qdisc on lo: $(cat "$work/out")"
  grep -qx '1' "$work/out" || fail "the namespace has interfaces besides lo: $(cat "$work/out")"

  # A failing command: its status comes back and nothing is left behind.
  expect_status 3 "failing command" "$sim" --link 1gbit --shell -- sh -c "ip netns identify > $work/ns1; exit 3"
  namespace_gone "$(cat "$work/ns1" 2>/dev/null)" "after a failing command"

  # A signal while the command runs: it is killed and everything removed, promptly.
  "$sim" --shell -- sh -c "ip netns identify > $work/ns2; echo \$\$ > $work/pid2; exec sleep 120" \
    >/dev/null 2>"$work/err" &
  local sim_pid=$!
  for _ in $(seq 100); do
    [ -s "$work/pid2" ] && break
    sleep 0.1
  done
  kill -TERM "$sim_pid"
  local start=$SECONDS
  wait "$sim_pid"
  local st2=$?
  [ "$st2" = 143 ] || fail "after SIGTERM: exit status $st2, expected 143"
  [ $((SECONDS - start)) -le 10 ] || fail "after SIGTERM: teardown took $((SECONDS - start)) s"
  local pid2
  pid2=$(cat "$work/pid2" 2>/dev/null)
  [ -n "$pid2" ] && kill -0 "$pid2" 2>/dev/null && fail "after SIGTERM: the command (pid $pid2) still runs"
  namespace_gone "$(cat "$work/ns2" 2>/dev/null)" "after SIGTERM"
}

case "${1:-}" in
  usage) usage_checks ;;
  teardown) teardown_checks ;;
  *) echo "usage: $0 usage|teardown" >&2; exit 2 ;;
esac
[ "$failures" = 0 ] || { echo "$failures check(s) failed" >&2; exit 1; }
echo "all checks passed"
