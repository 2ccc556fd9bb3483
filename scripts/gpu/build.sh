# shellcheck shell=bash
# Sourced by scripts/device-check.sh and scripts/gpu/kernel-variants.sh: what both build and run on a GPU machine.
#   gpu_arch                        CUDA_ARCH, else the first GPU's compute capability, else "80;90"
#   gpu_nccl_root                   NCCL_ROOT, else the NCCL of the Python environment's nvidia-nccl wheel (the one
#                                   PyTorch loads), else nothing (the CMake search then takes the CUDA toolkit's)
#   gpu_cmake_args SRC BUILD ARCH [MPI]
#                                   sets the array GPU_CMAKE_ARGS: the Release build of the library, the GPU tests
#                                   and the GPU benchmarks alone (BASP_GPU_CHECKS_ONLY: no hwloc, Catch2 or Google
#                                   Benchmark needed), against gpu_nccl_root's NCCL when there is one. MPI: empty
#                                   (default) builds without MPI; a folder (the prefix of an Open MPI, e.g. the
#                                   unpacked wheel of scripts/gpu/procs.sh) builds with that MPI, named to CMake's
#                                   FindMPI by its compiler wrappers and mpiexec so that no other MPI on the machine
#                                   is taken; "system" builds with whatever MPI FindMPI finds (mpicc on PATH), and
#                                   without MPI when it finds none
#   PACK_BANDWIDTH_ARGS             the bandwidth benchmark's sizes and repetitions (docs/benchmarks.md, section 8)
#   pack_bandwidth_rows FILE        the result rows of basp_pack_bandwidth's text output

gpu_arch() {
  local arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}
  echo "${arch:-80;90}"
}

# PyTorch's wheel: site-packages/nvidia/nccl/{include,lib} (with only libnccl.so.2).
gpu_nccl_root() {
  if [[ -n "${NCCL_ROOT:-}" ]]; then
    echo "$NCCL_ROOT"
    return
  fi
  python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
roots += [p for p in sys.path if p]
for root in roots:
    for header in sorted(glob.glob(os.path.join(root, "nvidia", "**", "nccl.h"), recursive=True)):
        if os.path.basename(os.path.dirname(header)) == "include":
            print(os.path.dirname(os.path.dirname(header)))
            sys.exit(0)
PY
}

gpu_cmake_args() {
  local nccl_root mpi=${4:-}
  nccl_root=$(gpu_nccl_root)
  GPU_CMAKE_ARGS=(-S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBASP_GPU_CHECKS_ONLY=ON
                  -DBASP_ENABLE_CUDA=ON -DBASP_ENABLE_HWLOC=OFF -DBASP_BUILD_TESTS=ON
                  -DBASP_BUILD_BENCH=ON -DBASP_BUILD_EXAMPLES=OFF "-DCMAKE_CUDA_ARCHITECTURES=$3")
  [[ -n "$nccl_root" ]] && GPU_CMAKE_ARGS+=("-DNCCL_ROOT=$nccl_root")
  # FindMPI (top-level CMakeLists.txt: find_package(MPI COMPONENTS C)) asks MPI_C_COMPILER for its flags; the
  # perf binaries and CTest's MPI tests launch through MPIEXEC_EXECUTABLE. FindMPI keeps what it found in the cache
  # and does not ask again when MPI_C_COMPILER changes: a build folder made with another MPI forgets it first.
  case $mpi in
    "") GPU_CMAKE_ARGS+=(-DBASP_ENABLE_MPI=OFF) ;;
    system) GPU_CMAKE_ARGS+=(-DBASP_ENABLE_MPI=AUTO) ;;
    *)
      local cached
      cached=$(grep -s '^MPI_C_COMPILER:' "$2/CMakeCache.txt" | cut -d= -f2-)
      [[ -n "$cached" && "$cached" != "$mpi/bin/mpicc" ]] && GPU_CMAKE_ARGS+=(-U 'MPI_*')
      GPU_CMAKE_ARGS+=(-DBASP_ENABLE_MPI=ON "-DMPI_C_COMPILER=$mpi/bin/mpicc" "-DMPI_CXX_COMPILER=$mpi/bin/mpicxx"
                       "-DMPIEXEC_EXECUTABLE=$mpi/bin/mpiexec") ;;
  esac
  return 0
}

# shellcheck disable=SC2034,SC2054  # used by the scripts that source this file; "2,8" is one argument
PACK_BANDWIDTH_ARGS=(-b 256M -e 1G -f 4 -n 20 -w 5 -k 2,8)

pack_bandwidth_rows() { grep -E '^ +[0-9]+ +(BSHD|SBHD)' "$1" 2>/dev/null; }
