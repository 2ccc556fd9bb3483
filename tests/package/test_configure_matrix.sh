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
echo "configure matrix: ok"
