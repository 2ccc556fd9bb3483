#!/usr/bin/env bash
# Configuring never fails for want of an optional dependency, and the library builds without MPI and hwloc
# (the GPU machine's configuration). usage: test_configure_matrix.sh <source-dir>
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
cmake --build "$tmp/bare" -j 2 > "$tmp/bare-build.log" 2>&1 || { tail -50 "$tmp/bare-build.log"; exit 1; }
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
