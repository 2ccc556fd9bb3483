#!/usr/bin/env bash
# The torch test environment: a virtual environment with the pinned packages of python/requirements/test.txt
# (current PyTorch, NumPy 2, mpi4py built against the system Open MPI, the test-only packages), kept outside the
# clone under ${XDG_CACHE_HOME:-~/.cache}/basp so that repeated runs on one machine reuse it. A new one is made when
# the requirements change (the directory is named by their hash); an install that fails (a download, a build) fails
# this script, and a half-made venv is never reused. Prints the venv's python on its last line.
#
#   scripts/python/env.sh                 create or reuse the venv
#   scripts/python/env.sh --install BUILD also install the basp wheel from the CMake build tree BUILD (no rebuild)
set -euo pipefail
cd "$(dirname "$0")/../.."
req=python/requirements/test.txt
key=$( (cat "$req"; /usr/bin/python3 --version 2>&1) | sha256sum | cut -c1-12)
venv=${BASP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/basp/venv-$key}
if [ ! -f "$venv/.complete" ]; then
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  # Debian's interpreter: its python3-venv is in setup-deps.sh, and its headers build mpi4py.
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  MPICC=${MPICC:-mpicc} DS_BUILD_OPS=0 "$venv/bin/python" -m pip install --no-binary mpi4py -r "$req" >&2
  touch "$venv/.complete"
  echo "python-env: $venv made in $(( $(date +%s) - start )) s" >&2
fi
if [ "${1:-}" = --install ]; then
  build=$(cd "${2:?--install needs the CMake build directory}" && pwd)
  # The wheel from the existing build tree (scikit-build-core's build-dir): CMake reconfigures it in place and
  # builds only the library, which is up to date, then installs libbasp and the package into site-packages. The
  # tree's own choices are passed back, so that the configure changes nothing the tree's other targets see: its
  # options (pyproject.toml turns tests, benchmarks and examples off for a plain `pip install .`) and its build
  # tool (scikit-build-core would pick the venv's ninja, whose other version rebuilds everything).
  defines=()
  for var in BASP_BUILD_TESTS BASP_BUILD_BENCH BASP_BUILD_EXAMPLES CMAKE_MAKE_PROGRAM; do
    value=$(sed -n "s/^$var:[A-Z]*=//p" "$build/CMakeCache.txt")
    [ -n "$value" ] && defines+=(-C "cmake.define.$var=$value")
  done
  "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall \
    -C build-dir="$build" "${defines[@]}" . >&2
fi
echo "$venv/bin/python"
