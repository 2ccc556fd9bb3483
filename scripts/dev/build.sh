#!/usr/bin/env bash
# Configures and builds libbasp into ${BASP_BUILD_DIR:-build} (Release), after installing missing Debian
# packages. Extra arguments go to the CMake configure step (for example -DBASP_ENABLE_CUDA=OFF).
# BASP_BUILD_TARGETS (space-separated) builds only those targets (and what they need) instead of everything.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup-deps.sh
build=${BASP_BUILD_DIR:-build}
jobs=${BASP_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [ $# -gt 0 ]; then
  cmake -S . -B "$build" "$@"
fi
targets=()
for t in ${BASP_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
