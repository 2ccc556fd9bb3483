# shellcheck shell=bash
# Sourced by the shell tests of tests/scripts: a scratch folder ($work, removed at exit), the count of checks and
# failures, and their report.
#   fail MESSAGE...          records a failure and prints it
#   same DESCRIPTION GOT WANT  one check: GOT must equal WANT
#   finish NAME              prints the tally; exits 1 when a check failed
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
checks=0

fail() {
  echo "FAILED: $*" >&2
  failures=$((failures + 1))
}

same() {
  checks=$((checks + 1))
  [[ "$2" == "$3" ]] || fail "$1: got '$2', expected '$3'"
}

finish() {
  if ((failures > 0)); then
    echo "$1: $failures of $checks checks failed" >&2
    exit 1
  fi
  echo "$1: $checks checks passed"
}
