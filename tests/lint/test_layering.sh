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
echo "test_layering: transport/ cannot include runtime/ (the violation probe fails to find runtime/comm.h)"
