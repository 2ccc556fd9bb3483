#!/usr/bin/env bash
# The README's second command (and CI's): installs what is missing, builds, and runs every test, then the unit
# and MPI tests once more under ASan + UBSan (BASP_ASAN=0 skips that second pass).
#
# The Python tests run in the torch venv of scripts/python/env.sh (current PyTorch, made under ~/.cache once per
# machine), against the basp wheel installed there from this build tree; Debian's PyTorch runs the python_legacy_*
# tests. BASP_PYTHON_VENV=0 skips the venv (the Python tests then run with /usr/bin/python3 from the source tree).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BASP_BUILD_DIR:-build}
# The tests are the point here: a missing Catch2 is a configure error, not tests silently left out.
configure=(-DBASP_BUILD_TESTS=ON)
if [ "${BASP_PYTHON_VENV:-1}" = 1 ]; then
  bash scripts/setup-deps.sh  # scripts/python/env.sh builds mpi4py against the system Open MPI
  python=$(bash scripts/python/env.sh | tail -1)
  configure+=(-DBASP_PYTHON_EXECUTABLE="$python" -DBASP_PYTHON_WHEEL=ON)
  # Link the NCCL that this PyTorch loads (its nvidia-nccl wheel), as a wheel build does.
  nccl=$("$python" -c \
    "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0])" \
    2>/dev/null || true)
  [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ] && configure+=(-DNCCL_ROOT="$nccl")
fi
bash scripts/dev/build.sh "${configure[@]}"
if [ "${BASP_PYTHON_VENV:-1}" = 1 ]; then
  bash scripts/python/env.sh --install "$build" >/dev/null
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "$build" && ctest --output-on-failure -j "${BASP_TEST_JOBS:-2}" "$@")

# Once more under AddressSanitizer + UndefinedBehaviorSanitizer: the unit and MPI tests, in a second build
# without CUDA (nvcc has no sanitizers), benchmarks or demo. The whole script took 26 minutes from a fresh clone on
# the 2-core CI machine, both builds included (docs/reliability.md).
if [ "${BASP_ASAN:-1}" = 1 ]; then
  asan=${BASP_ASAN_BUILD_DIR:-build-asan}
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  if [ ! -f "$asan/CMakeCache.txt" ]; then
    cmake -S . -B "$asan" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBASP_SANITIZE=address \
      -DBASP_ENABLE_CUDA=OFF -DBASP_BUILD_BENCH=OFF -DBASP_BUILD_EXAMPLES=OFF
  fi
  cmake --build "$asan" -j "${BASP_JOBS:-$(nproc)}"
  # Leaks are reported, except Open MPI's own (tests/sanitizers/lsan.supp). Full stacks (fast_unwind_on_malloc=0)
  # reach a frame in libmpi for allocations made by plugins that MPI_Finalize unloads.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0:strict_string_checks=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  (cd "$asan" && ctest --output-on-failure -j "${BASP_TEST_JOBS:-2}" -L "unit|mpi" -LE "package|python|sim|fuzz")
fi
