#!/usr/bin/env bash
# transport/ is a leaf (src/CMakeLists.txt): a transport source that includes runtime/ must not compile. Builds the
# two probes of tests/lint/layering_probe.cpp in the build folder $1: the control must compile (else the check would
# pass for any broken build), the violation must fail because runtime/comm.h is not found.
set -uo pipefail
build=${1:?usage: test_layering.sh <build folder>}
if ! out=$(cmake --build "$build" --target basp_layering_control 2>&1); then
  echo "test_layering: the control probe (transport/transport.h only) does not compile:" >&2
  echo "$out" >&2
  exit 1
fi
if out=$(cmake --build "$build" --target basp_layering_violation 2>&1); then
  echo "test_layering: a transport source including runtime/comm.h compiled: transport/ is not a leaf" >&2
  exit 1
fi
if ! grep -q "runtime/comm.h" <<<"$out"; then
  echo "test_layering: the violation probe failed, but not for want of runtime/comm.h:" >&2
  echo "$out" >&2
  exit 1
fi
# The configure-time scan (cmake/BaspCheckIncludes.cmake) rejects what the roots cannot stop: '..' segments and
# absolute paths. It must pass on src/ and fail on each kind of walk-around.
src=$(cd "$(dirname "$0")/../.." && pwd)
if ! out=$(cmake -DBASP_CHECK_INCLUDES_DIR="$src/src" -P "$src/cmake/BaspCheckIncludes.cmake" 2>&1); then
  echo "test_layering: the include scan rejects src/ itself:" >&2
  echo "$out" >&2
  exit 1
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
for include in '"transport/../runtime/comm.h"' '"../runtime/comm.h"' '"mpi/../../runtime/comm.h"' '"/abs/runtime/comm.h"'; do
  printf '#include %s
' "$include" > "$probe/probe.cpp"
  if cmake -DBASP_CHECK_INCLUDES_DIR="$probe" -P "$src/cmake/BaspCheckIncludes.cmake" >/dev/null 2>&1; then
    echo "test_layering: the include scan let #include $include through" >&2
    exit 1
  fi
done
echo "test_layering: transport/ cannot include runtime/ (the violation probe fails to find runtime/comm.h), and" \
     "includes with '..' or absolute paths are refused at configuration"
