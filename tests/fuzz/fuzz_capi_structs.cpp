// libFuzzer target: the versioned structs of the C ABI taken as raw bytes (size, magic, version and every field
// chosen by the fuzzer), through the real entry points, plus the descriptor validation and exchange planning
// for group sizes a single process cannot have. MPI runs as a singleton (MPI_COMM_SELF, K = 1).
//
// Input: byte 0 picks the call, the rest is the struct (zero-extended to at least the struct's size, as a C
// caller's struct would be; the library must trust `size` only within what the ABI promises).
// Expected: a status, never a crash, a leak, undefined behaviour or an exception escaping.
#include <mpi.h>
#include <sanitizer/lsan_interface.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "basp/basp.h"
#include "common/error.h"
#include "plan/exchange.h"

namespace {

basp_comm_t g_comm = nullptr;

template <typename T>
std::vector<unsigned char> as_struct(const uint8_t* data, size_t size) {
  std::vector<unsigned char> bytes(std::max(size, sizeof(T)), 0);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  return bytes;
}

void check(basp_status_t st) {
  // A status out of range, or a message missing for a failure, is a bug.
  if (st < BASP_SUCCESS || st >= BASP_STATUS_COUNT) std::abort();
  if (st != BASP_SUCCESS && basp_last_error()[0] == '\0') std::abort();
}

void run_plan(basp_plan_t plan) {
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  check(basp_plan_query(plan, &info));
  int64_t total = 0;
  for (int t = 0; t < info.num_tensors; ++t) total += info.seq_sharded_elems[t];
  // Execute only what fits comfortably: the point is the path, not the bandwidth.
  if (total <= 0 || total > (1 << 16)) return;
  std::vector<std::vector<unsigned char>> in, out;
  std::vector<const void*> pin;
  std::vector<void*> pout;
  for (int t = 0; t < info.num_tensors; ++t) {
    const size_t bytes = static_cast<size_t>(info.seq_sharded_elems[t]) * 8;  // the widest dtype
    in.emplace_back(bytes, 1);
    out.emplace_back(bytes, 2);
  }
  for (int t = 0; t < info.num_tensors; ++t) {
    pin.push_back(in[t].data());
    pout.push_back(out[t].data());
  }
  check(basp_scatter(plan, pin.data(), pout.data(), nullptr));
  check(basp_gather(plan, pin.data(), pout.data(), nullptr));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // What MPI allocates once for the process (some of it in plugins it unloads again, which no suppression can
  // name) is not a leak of the code under test.
  __lsan_disable();
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = 1;
  c.placement = BASP_PLACEMENT_CONTIGUOUS;
  if (basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_SELF), &c, &g_comm) != BASP_SUCCESS) std::abort();
  __lsan_enable();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t which = data[0] % 5;
  ++data;
  --size;
  switch (which) {
    case 0: {  // comm creation from a raw config
      auto raw = as_struct<basp_comm_config_v1>(data, size);
      basp_comm_t comm = nullptr;
      const basp_status_t st = basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_SELF),
                                                    reinterpret_cast<const basp_comm_config_t*>(raw.data()), &comm);
      check(st);
      if ((st == BASP_SUCCESS) != (comm != nullptr)) std::abort();
      if (comm) check(basp_comm_destroy(comm));
      break;
    }
    case 1: {  // plan creation from a raw descriptor, then one exchange when it is small
      auto raw = as_struct<basp_plan_desc_v1>(data, size);
      basp_plan_t plan = nullptr;
      const basp_status_t st = basp_plan_create(g_comm, reinterpret_cast<const basp_plan_desc_t*>(raw.data()), &plan);
      check(st);
      if ((st == BASP_SUCCESS) != (plan != nullptr)) std::abort();
      if (plan) {
        run_plan(plan);
        check(basp_plan_destroy(plan));
      }
      break;
    }
    case 2: {  // a raw rank-info output struct, and the rank / sequence length arguments
      if (size < 12) return 0;
      int32_t rank = 0;
      int64_t seq_len = 0;
      std::memcpy(&rank, data, 4);
      std::memcpy(&seq_len, data + 4, 8);
      auto raw = as_struct<basp_rank_info_v1>(data + 12, size - 12);
      check(basp_comm_query(g_comm, rank, seq_len, reinterpret_cast<basp_rank_info_t*>(raw.data())));
      break;
    }
    case 3: {  // a raw plan-info output struct
      basp_plan_desc_t d = BASP_PLAN_DESC_INITIALIZER;
      d.dtype = BASP_DTYPE_FP16;
      d.seq_len = 8;
      d.head_dim = 4;
      d.num_tensors = 1;
      d.num_heads[0] = 2;
      basp_plan_t plan = nullptr;
      if (basp_plan_create(g_comm, &d, &plan) != BASP_SUCCESS) std::abort();
      auto raw = as_struct<basp_plan_info_v1>(data, size);
      check(basp_plan_query(plan, reinterpret_cast<basp_plan_info_t*>(raw.data())));
      check(basp_plan_destroy(plan));
      break;
    }
    case 4: {  // validation and planning for any group size and position (internal: K > 1 needs no peers)
      if (size < sizeof(basp_plan_desc_v1) + 12) return 0;
      basp_plan_desc_v1 d;
      std::memcpy(&d, data, sizeof(d));
      int32_t k = 0, position = 0, b_loc = 0;
      std::memcpy(&k, data + sizeof(d), 4);
      std::memcpy(&position, data + sizeof(d) + 4, 4);
      std::memcpy(&b_loc, data + sizeof(d) + 8, 4);
      k = k % 4096;
      if (k <= 0) k = 1;
      try {
        const auto spec = basp::plan::validate_spec(d);
        const auto plan = basp::plan::make_exchange_plan(spec, k, position, b_loc);
        // The plan's arithmetic must be internally consistent.
        if (plan.num_tensors() != d.num_tensors) std::abort();
        for (int32_t t = 0; t < plan.num_tensors(); ++t) {
          const auto& g = plan.tensors[t];
          if (g.seq_tensor_bytes(position) < 0 || g.head_tensor_bytes(position) < 0) std::abort();
          int64_t held = 0;
          for (int32_t j = 0; j < k; ++j) {
            if (g.heads_of(j) < 0 || g.chunk_bytes(position, j) < 0) std::abort();
            held += g.heads_of(j);
          }
          if (held < g.heads) std::abort();  // every head is held somewhere
          if (plan.workspace_offset(position, t, (position + 1) % k, g.seq_len) > plan.workspace_bytes(position))
            std::abort();
        }
      } catch (const basp::detail::Error& e) {
        if (e.status() == BASP_SUCCESS) std::abort();
      }
      break;
    }
  }
  return 0;
}
