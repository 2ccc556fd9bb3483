#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the demo (Ulysses vs BASP, MPI
# backend, 8 ranks). Arguments go to the demo (see examples/basp_demo.cpp), e.g. --batches 2,4 --iters 3.
# It builds the library and the demo only (not the tests, benchmarks or fuzzers); scripts/test.sh builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
BASP_BUILD_TARGETS=basp_demo bash scripts/dev/build.sh
build=${BASP_BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "${BASP_DEMO_RANKS:-8}" --oversubscribe --bind-to none "$build/examples/basp_demo" "$@"
