#!/usr/bin/env bash
# Compares build-time variants of the pack/unpack kernel (docs/gpu.md, "Tuning") on a machine with an NVIDIA GPU:
#   1. builds basp_pack_bandwidth, test_gpu_pack_kernels and test_gpu_loopback once per variant (Release,
#      BASP_GPU_CHECKS_ONLY, the variant's -D flags given to both the host and the device compiler, since the host
#      computes the tiling the kernel walks), all variants at once, and prints each kernel's registers and spills,
#   2. runs each variant's two GPU tests (a variant that fails them is reported and not timed),
#   3. runs the bandwidth benchmark of scripts/device-check.sh for every variant in two alternating passes (the
#      GPU's clocks drift: variants are compared inside a pass, never across runs), and prints last, per variant
#      and pass, the lowest and the mean % of cudaMemcpyAsync, over all rows and per size.
#
#   scripts/gpu/kernel-variants.sh [build-root]          (default: build-variants)
# Environment: VARIANTS ("name=flags;name=flags..."; default below), NCCL_ROOT and CUDA_ARCH (as device-check.sh:
# scripts/gpu/build.sh), JOBS, OUT (logs and JSON; default: the build root). Exit status: 0 when every variant built, passed its tests and was timed.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$repo/scripts/gpu/build.sh"
root=${1:-$repo/build-variants}
out=${OUT:-$root}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$root" "$out"
arch=$(gpu_arch)

# The defaults (v0) and the knobs of src/layout/row_tiles.h, row_copy.h and cuda/pack_kernels.cu: vectors in flight
# per lane, the CTAs per SM the registers must allow, the streaming cache hint.
default_variants="v0=;v1=-DBASP_COPY_MIN_BLOCKS=3;v2=-DBASP_COPY_UNROLL=2 -DBASP_COPY_MIN_BLOCKS=4;\
v3=-DBASP_COPY_MIN_BLOCKS=3 -DBASP_COPY_STREAMING=1;v4=-DBASP_COPY_UNROLL=8 -DBASP_COPY_MIN_BLOCKS=2;\
v5=-DBASP_COPY_STREAMING=1"
IFS=';' read -r -a specs <<<"${VARIANTS:-$default_variants}"
names=()
declare -A flags
for spec in "${specs[@]}"; do
  [[ -z "$spec" ]] && continue
  name=${spec%%=*}
  [[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "kernel-variants: bad variant name in '$spec'" >&2; exit 2; }
  names+=("$name")
  flags[$name]=${spec#*=}
done
[[ ${#names[@]} -gt 0 ]] || { echo "kernel-variants: no variants" >&2; exit 2; }
per_build=$(( jobs / ${#names[@]} ))
(( per_build < 1 )) && per_build=1

build_one() {
  local name=$1
  gpu_cmake_args "$repo" "$root/$name" "$arch"
  cmake "${GPU_CMAKE_ARGS[@]}" "-DCMAKE_CXX_FLAGS=${flags[$name]}" "-DCMAKE_CUDA_FLAGS=${flags[$name]} -Xptxas=-v" \
    >"$out/build_$name.log" 2>&1 &&
    cmake --build "$root/$name" -j "$per_build" --target basp_pack_bandwidth test_gpu_pack_kernels test_gpu_loopback \
      >>"$out/build_$name.log" 2>&1
}

# --- build -------------------------------------------------------------------------------------------------
declare -A status
pids=()
for name in "${names[@]}"; do
  build_one "$name" &
  pids+=($!)
done
for i in "${!names[@]}"; do
  if wait "${pids[$i]}"; then status[${names[$i]}]=built; else status[${names[$i]}]="build FAILED"; fi
done
for name in "${names[@]}"; do
  # ptxas -v of the row-copy kernel: "Used N registers" follows its "Compiling entry function" line.
  regs=$(grep -A3 "Compiling entry function.*row_copy_kernel" "$out/build_$name.log" 2>/dev/null |
         grep -oE 'Used [0-9]+ registers|[0-9]+ bytes (stack frame|spill stores)' | paste -sd',' -)
  echo "$name [${flags[$name]:-defaults}]: ${status[$name]}; row_copy_kernel: ${regs:-?}"
done

# --- correctness ---------------------------------------------------------------------------------------------
for name in "${names[@]}"; do
  [[ "${status[$name]}" == built ]] || continue
  for t in test_gpu_pack_kernels test_gpu_loopback; do
    (cd "$root/$name" && timeout 300 "tests/gpu/$t") >"$out/${t}_$name.log" 2>&1
    rc=$?
    echo "$name $t: exit $rc: $(tail -1 "$out/${t}_$name.log")"
    case $rc in
      0) ;;
      77) status[$name]="$t SKIPPED (no GPU): not timed" ;;
      *) status[$name]="$t FAILED (exit $rc): not timed" ;;
    esac
  done
done

# --- bandwidth, two alternating passes ---------------------------------------------------------------------
summary() {
  pack_bandwidth_rows "$1" |
    awk '{ p = $8 + 0; if (n == 0 || p < lo) lo = p; s += p; n++
           if ($1 < 512 * 1048576) { s1 += p; n1++ } else { s2 += p; n2++ } }
         END { if (n == 0) { print "no rows"; exit }
               printf "lowest %5.1f%%  mean %5.1f%%  (under 512 MiB: mean %5.1f%%; 512 MiB and over: mean %5.1f%%)",
                      lo, s / n, n1 ? s1 / n1 : 0, n2 ? s2 / n2 : 0 }'
}
declare -A table
for pass in 1 2; do
  for name in "${names[@]}"; do
    [[ "${status[$name]}" == built ]] || continue
    res=$out/pack_bandwidth_${name}_$pass
    "$root/$name/bench/basp_pack_bandwidth" "${PACK_BANDWIDTH_ARGS[@]}" -J "$res.json" >"$res.txt" 2>&1
    rc=$?
    if [[ $rc == 0 ]]; then table[$name,$pass]=$(summary "$res.txt"); else table[$name,$pass]="FAILED (exit $rc)"; fi
  done
done

fail=0
echo ""
echo "== kernel variants ($(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)): % of cudaMemcpyAsync D2D, 256 MiB and 1 GiB, BSHD and SBHD, K = 2 and 8 =="
for name in "${names[@]}"; do
  if [[ "${status[$name]}" != built ]]; then
    printf '%-4s %-60s %s\n' "$name" "[${flags[$name]:-defaults}]" "${status[$name]}"
    fail=1
    continue
  fi
  for pass in 1 2; do
    printf '%-4s %-60s pass %d: %s\n' "$name" "[${flags[$name]:-defaults}]" "$pass" "${table[$name,$pass]}"
    [[ "${table[$name,$pass]}" == lowest* ]] || fail=1
  done
done
exit $fail
