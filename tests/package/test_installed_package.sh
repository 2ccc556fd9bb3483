#!/usr/bin/env bash
# Installs the build tree to a temporary prefix, then builds and runs, against that installation only:
# a C99 program (pkg-config, -std=c99 -pedantic -Werror) and a CMake consumer project (find_package(basp)).
# usage: test_installed_package.sh <build-dir> <source-dir> <np>
set -euo pipefail
build=$1
src=$2
np=${3:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(dirname "$(find "$tmp/prefix" -name 'libbasp.so' | head -n 1)")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
echo "installed to $tmp/prefix; pkg-config says basp $(pkg-config --modversion basp)"

# C99 against pkg-config. The header is checked on its own first, without MPI in the way.
printf '#include <basp/basp.h>\nint main(void) { return basp_dtype_size(BASP_DTYPE_FP16) == 2 ? 0 : 1; }\n' > "$tmp/header_only.c"
cc -std=c99 -pedantic -Wall -Wextra -Werror $(pkg-config --cflags basp) "$tmp/header_only.c" \
  $(pkg-config --libs basp) -Wl,-rpath,"$libdir" -o "$tmp/header_only"
"$tmp/header_only"
mpicc -std=c99 -pedantic -Wall -Werror $(pkg-config --cflags basp) "$src/tests/package/c99_consumer.c" \
  $(pkg-config --libs basp) -Wl,-rpath,"$libdir" -o "$tmp/c99_consumer"
mpirun -np "$np" --oversubscribe "$tmp/c99_consumer"

# CMake consumer.
cmake -S "$src/tests/package/consumer" -B "$tmp/consumer-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_RPATH="$libdir" >/dev/null
cmake --build "$tmp/consumer-build" >/dev/null
mpirun -np "$np" --oversubscribe "$tmp/consumer-build/consumer"
echo "installed package: ok"
