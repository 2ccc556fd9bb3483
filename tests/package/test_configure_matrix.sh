#!/usr/bin/env bash
# Configuring never fails for want of an optional dependency, and the library builds without MPI and hwloc
# (the GPU machine's configuration), and builds and installs where none of Catch2, Google Benchmark, MPI, hwloc or
# CUDA is found. usage: test_configure_matrix.sh <source-dir>
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
common=(-DBASP_BUILD_TESTS=OFF -DBASP_BUILD_BENCH=OFF -DBASP_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release)

echo "== CUDA off"
cmake -S "$src" -B "$tmp/nocuda" "${gen[@]}" "${common[@]}" -DBASP_ENABLE_CUDA=OFF > "$tmp/nocuda.log"
grep -q "CUDA=0" "$tmp/nocuda.log" || { cat "$tmp/nocuda.log"; echo "CUDA was not disabled" >&2; exit 1; }

echo "== no nvcc anywhere the build looks (PATH without CUDA, no CUDACXX)"
env -u CUDACXX -u CUDA_PATH PATH=/usr/bin:/bin cmake -S "$src" -B "$tmp/nonvcc" "${gen[@]}" "${common[@]}" \
  > "$tmp/nonvcc.log" 2>&1 || {
  cat "$tmp/nonvcc.log"; echo "configure failed without nvcc" >&2; exit 1; }
grep -q "CUDA=0" "$tmp/nonvcc.log" || { cat "$tmp/nonvcc.log"; echo "CUDA should be off without nvcc" >&2; exit 1; }

echo "== no MPI, no hwloc, no CUDA: configure and build the library"
cmake -S "$src" -B "$tmp/bare" "${gen[@]}" "${common[@]}" -DBASP_ENABLE_MPI=OFF -DBASP_ENABLE_HWLOC=OFF \
  -DBASP_ENABLE_CUDA=OFF > "$tmp/bare.log"
grep -q "MPI=0" "$tmp/bare.log" || { cat "$tmp/bare.log"; echo "MPI was not disabled" >&2; exit 1; }
# Built below: once for this and the next configuration where both run the same build commands.

# A machine without Catch2, Google Benchmark, MPI, hwloc or CUDA, as CMAKE_DISABLE_FIND_PACKAGE_<name> makes one (the
# names of the find_package calls; hwloc comes from pkg-config and CUDA from check_language + CUDAToolkit, and the top
# CMakeLists.txt honours CMAKE_DISABLE_FIND_PACKAGE_hwloc and _CUDAToolkit for them): a plain configure, with no
# BASP_BUILD_* given, succeeds, defaults the tests and benchmarks to OFF, prints what it skipped, and the library
# builds and installs.
deps=(Catch2 benchmark MPI hwloc CUDAToolkit)
# expect <log> <text> <what>: the configure log says <text>.
expect() {
  tr -s ' \n' ' ' < "$1" | grep -qF -- "$2" || { cat "$1"; echo "configure did not say '$2' ($3)" >&2; exit 1; }
}
cached() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt"; }
echo "== none of ${deps[*]} found: configure with the defaults, build, install"
none=()
for dep in "${deps[@]}"; do none+=(-DCMAKE_DISABLE_FIND_PACKAGE_"$dep"=ON); done
cmake -S "$src" -B "$tmp/none" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${none[@]}" > "$tmp/none.log" 2>&1 || {
  cat "$tmp/none.log"; echo "configure failed without the optional dependencies" >&2; exit 1; }
expect "$tmp/none.log" "MPI=0 CUDA=0 NCCL=0 hwloc=0" "no backend dependency used"
expect "$tmp/none.log" "libbasp: skipped:" "a list of what was skipped"
expect "$tmp/none.log" "tests (Catch2 not found" "tests skipped for want of Catch2"
expect "$tmp/none.log" "benchmarks (Google Benchmark not found" "benchmarks skipped for want of Google Benchmark"
expect "$tmp/none.log" "MPI backend" "the MPI backend skipped"
expect "$tmp/none.log" "CUDA kernels" "the CUDA kernels skipped"
expect "$tmp/none.log" "hwloc topology discovery" "hwloc skipped"
[[ "$(cached "$tmp/none" BASP_BUILD_TESTS)" == OFF && "$(cached "$tmp/none" BASP_BUILD_BENCH)" == OFF ]] || {
  echo "tests and benchmarks should default to OFF without Catch2 and Google Benchmark" >&2; exit 1; }
cmake --build "$tmp/none" -j 2 > "$tmp/none-build.log" 2>&1 || { tail -50 "$tmp/none-build.log"; exit 1; }
# The bare configuration's build: the same commands (paths aside) as this one's, or built on its own.
commands() { [ ${#gen[@]} -gt 0 ] && (cd "$1" && ninja -t commands all | sed "s|$1|@|g") || true; }
bare_commands=$(commands "$tmp/bare")
if [ -n "$bare_commands" ] && [ "$bare_commands" = "$(commands "$tmp/none")" ]; then
  echo "   (the bare configuration's build is the same: built once)"
else
  cmake --build "$tmp/bare" -j 2 > "$tmp/bare-build.log" 2>&1 || { tail -50 "$tmp/bare-build.log"; exit 1; }
fi
cmake --install "$tmp/none" --prefix "$tmp/prefix" > "$tmp/none-install.log" 2>&1 || {
  cat "$tmp/none-install.log"; exit 1; }
libso=$(find "$tmp/prefix" -name 'libbasp.so' | head -1)
for f in include/basp/basp.h include/basp/basp.hpp include/basp/config.h; do
  [ -f "$tmp/prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
[[ -n "$libso" && -n "$(find "$tmp/prefix" -name baspConfig.cmake)" && -n "$(find "$tmp/prefix" -name basp.pc)" ]] || {
  find "$tmp/prefix" >&2; echo "libbasp.so, baspConfig.cmake or basp.pc not installed" >&2; exit 1; }
# The installed library links and loads: a C program calls it.
printf '#include <basp/basp.h>\nint main(void) { int a, b, c; return basp_get_version(&a, &b, &c) != BASP_SUCCESS; }\n' \
  > "$tmp/version.c"
cc -std=c99 -I"$tmp/prefix/include" "$tmp/version.c" -L"$(dirname "$libso")" -lbasp -Wl,-rpath,"$(dirname "$libso")" \
  -o "$tmp/version" && "$tmp/version" || { echo "the installed library does not link or run" >&2; exit 1; }

# Each alone: configured only (a build each would cost as much as the one above), and with what the check does not
# depend on left out (CUDA, and the tests and benchmarks where they are not the dependency's) to keep it fast.
echo "== each of ${deps[*]} alone not found: configure succeeds and says what it skipped"
for dep in "${deps[@]}"; do
  log=$tmp/no-$dep.log
  only=()
  [ "$dep" = CUDAToolkit ] || only+=(-DBASP_ENABLE_CUDA=OFF)
  [ "$dep" = Catch2 ] || only+=(-DBASP_BUILD_TESTS=OFF)
  [ "$dep" = benchmark ] || only+=(-DBASP_BUILD_BENCH=OFF)
  cmake -S "$src" -B "$tmp/no-$dep" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBASP_BUILD_EXAMPLES=OFF "${only[@]}" \
    -DCMAKE_DISABLE_FIND_PACKAGE_"$dep"=ON > "$log" 2>&1 || { cat "$log"; echo "configure failed without $dep" >&2; exit 1; }
  case $dep in
    Catch2) expect "$log" "tests (Catch2 not found" "$dep"
            [ "$(cached "$tmp/no-$dep" BASP_BUILD_TESTS)" = OFF ] || { echo "tests not OFF without Catch2" >&2; exit 1; } ;;
    benchmark) expect "$log" "benchmarks (Google Benchmark not found" "$dep"
               [ "$(cached "$tmp/no-$dep" BASP_BUILD_BENCH)" = OFF ] || { echo "bench not OFF without it" >&2; exit 1; } ;;
    MPI) expect "$log" "MPI=0" "$dep"; expect "$log" "MPI backend, demo" "$dep" ;;
    hwloc) expect "$log" "hwloc=0" "$dep"; expect "$log" "hwloc topology discovery (hwloc not found)" "$dep" ;;
    CUDAToolkit) expect "$log" "CUDA=0" "$dep"; expect "$log" "CUDA kernels" "$dep" ;;
  esac
done

echo "== tests asked for without Catch2: a configure error naming it"
if cmake -S "$src" -B "$tmp/tests-no-catch2" "${gen[@]}" "${none[@]}" -DBASP_BUILD_TESTS=ON \
  > "$tmp/tests-no-catch2.log" 2>&1; then
  cat "$tmp/tests-no-catch2.log"; echo "BASP_BUILD_TESTS=ON configured without Catch2" >&2; exit 1
fi
expect "$tmp/tests-no-catch2.log" "BASP_BUILD_TESTS=ON but Catch2 was not found" "the error names Catch2"
echo "== NCCL_ROOT laid out like PyTorch's wheel (only libnccl.so.2) is used whole, over any other NCCL"
nccl_h=$(ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>/dev/null | head -1 || true)
nccl_so=$(ls /usr/local/cuda/lib*/libnccl.so.2 /usr/lib/*/libnccl.so.2 2>/dev/null | head -1 || true)
if command -v nvcc >/dev/null 2>&1 && [[ -n "$nccl_h" && -n "$nccl_so" ]]; then
  wheel=$tmp/site-packages/nvidia/nccl
  mkdir -p "$wheel/include" "$wheel/lib"
  cp "$nccl_h" "$wheel/include/"
  ln -s "$(readlink -f "$nccl_so")" "$wheel/lib/libnccl.so.2"
  cmake -S "$src" -B "$tmp/wheel" "${gen[@]}" "${common[@]}" -DBASP_ENABLE_MPI=OFF -DBASP_ENABLE_HWLOC=OFF \
    -DBASP_ENABLE_CUDA=ON -DNCCL_ROOT="$wheel" > "$tmp/wheel.log" 2>&1 || { cat "$tmp/wheel.log"; exit 1; }
  lib=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$tmp/wheel/CMakeCache.txt")
  inc=$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$tmp/wheel/CMakeCache.txt")
  [[ "$lib" == "$wheel/lib/libnccl.so.2" && "$inc" == "$wheel/include" ]] || {
    grep NCCL "$tmp/wheel.log"; echo "NCCL_ROOT=$wheel not used whole: library '$lib', headers '$inc'" >&2; exit 1; }
  echo "== the same build folder configured again with another NCCL_ROOT searches again"
  other=$(dirname "$(dirname "$nccl_h")")
  cmake "$tmp/wheel" -DNCCL_ROOT="$other" > "$tmp/wheel2.log" 2>&1 || { cat "$tmp/wheel2.log"; exit 1; }
  lib=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$tmp/wheel/CMakeCache.txt")
  [[ "$lib" == "$other"/* ]] || { echo "NCCL_ROOT=$other ignored in a configured folder: library '$lib'" >&2; exit 1; }
  echo "== an NCCL_ROOT with only the header: warned, and not paired with another NCCL's library"
  mkdir -p "$tmp/half/include" && cp "$nccl_h" "$tmp/half/include/"
  cmake "$tmp/wheel" -DNCCL_ROOT="$tmp/half" > "$tmp/half.log" 2>&1 || { cat "$tmp/half.log"; exit 1; }
  tr -d ' \n' < "$tmp/half.log" | grep -q "lacksinclude/nccl.horlib/libnccl.so" || {
    cat "$tmp/half.log"; echo "no warning" >&2; exit 1; }
  inc=$(sed -n 's/^NCCL_INCLUDE_DIR:PATH=//p' "$tmp/wheel/CMakeCache.txt")
  [[ "$inc" != "$tmp/half/include" ]] || { echo "the half NCCL_ROOT's header was kept: '$inc'" >&2; exit 1; }
else
  echo "   (not checked: no nvcc or no NCCL on this machine)"
fi
echo "configure matrix: ok"
