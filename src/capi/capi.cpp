// The C ABI: argument checks, handle lifetime, status mapping. Nothing else lives here.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "plan/dtype.h"
#include "runtime/comm.h"
#if BASP_HAVE_MPI
#include "transport/mpi/mpi_transport.h"
#endif
#if BASP_HAVE_NCCL
#include "transport/nccl/nccl_transport.h"
#endif
#if BASP_HAVE_NCCL && BASP_HAVE_MPI
#include "transport/nccl/nccl_bootstrap_mpi.h"
#endif

namespace {

thread_local std::string t_last_error;

using basp::detail::fail;

constexpr basp_comm_config_v1 kCommDefaults = BASP_COMM_CONFIG_INITIALIZER;
constexpr basp_plan_desc_v1 kPlanDefaults = BASP_PLAN_DESC_INITIALIZER;

basp::runtime::CommOptions to_options(const basp_comm_config_v1& c) {
  BASP_CHECK_ARG(c.micro_batch > 0, "config->micro_batch (", c.micro_batch, ") must be positive");
  BASP_CHECK_ARG(c.num_groups == -1 || c.num_groups > 0, "config->num_groups (", c.num_groups,
                 ") must be positive or -1 (gcd rule)");
  BASP_CHECK_ARG(c.backend >= 0 && c.backend < BASP_BACKEND_COUNT, "config->backend (", c.backend,
                 ") is not a basp_backend_t value (0..", BASP_BACKEND_COUNT - 1, ")");
  BASP_CHECK_ARG(c.placement >= 0 && c.placement < BASP_PLACEMENT_COUNT, "config->placement (", c.placement,
                 ") is not a basp_placement_t value (0..", BASP_PLACEMENT_COUNT - 1, ")");
  BASP_CHECK_ARG(c.reserved0 == 0, "config->reserved0 (", c.reserved0, ") must be 0");
  basp::runtime::CommOptions o;
  o.micro_batch = c.micro_batch;
  o.num_groups = c.num_groups;
  o.backend = static_cast<basp_backend_t>(c.backend);
  o.placement = static_cast<basp_placement_t>(c.placement);
  return o;
}

}  // namespace

namespace basp::capi {

void set_last_error(const char* function, const std::string& message) {
  t_last_error = std::string(function) + ": " + message;
}

void clear_last_error() { t_last_error.clear(); }

}  // namespace basp::capi

using basp::capi::guarded;

extern "C" {

const char* basp_status_string(basp_status_t status) {
  switch (status) {
    case BASP_SUCCESS: return "BASP_SUCCESS";
    case BASP_ERROR_INVALID_ARGUMENT: return "BASP_ERROR_INVALID_ARGUMENT";
    case BASP_ERROR_NULL_POINTER: return "BASP_ERROR_NULL_POINTER";
    case BASP_ERROR_INVALID_HANDLE: return "BASP_ERROR_INVALID_HANDLE";
    case BASP_ERROR_BAD_STRUCT: return "BASP_ERROR_BAD_STRUCT";
    case BASP_ERROR_UNSUPPORTED: return "BASP_ERROR_UNSUPPORTED";
    case BASP_ERROR_OUT_OF_MEMORY: return "BASP_ERROR_OUT_OF_MEMORY";
    case BASP_ERROR_MPI: return "BASP_ERROR_MPI";
    case BASP_ERROR_CUDA: return "BASP_ERROR_CUDA";
    case BASP_ERROR_NCCL: return "BASP_ERROR_NCCL";
    case BASP_ERROR_INTERNAL: return "BASP_ERROR_INTERNAL";
    case BASP_STATUS_COUNT: break;
  }
  return "unknown status";
}

const char* basp_last_error(void) { return t_last_error.c_str(); }

basp_status_t basp_get_version(int* major, int* minor, int* patch) {
  return guarded(__func__, [&] {
    if (major) *major = BASP_VERSION_MAJOR;
    if (minor) *minor = BASP_VERSION_MINOR;
    if (patch) *patch = BASP_VERSION_PATCH;
  });
}

size_t basp_dtype_size(basp_dtype_t dtype) {
  return static_cast<size_t>(basp::plan::dtype_size(static_cast<int32_t>(dtype)));
}

basp_status_t basp_comm_create_mpi(basp_mpi_fint_t parent, const basp_comm_config_t* config,
                                   basp_comm_t* comm) {
  return guarded(__func__, [&] {
    BASP_CHECK(comm != nullptr, BASP_ERROR_NULL_POINTER, "comm (the output handle) is NULL");
    *comm = nullptr;
    const basp_comm_config_v1 cfg =
        basp::capi::read_struct(config, kCommDefaults, BASP_COMM_CONFIG_MAGIC, BASP_COMM_CONFIG_VERSION, "config");
    const basp::runtime::CommOptions options = to_options(cfg);
#if BASP_HAVE_MPI
    auto handle = std::make_unique<basp_comm>();
    if (options.backend == BASP_BACKEND_NCCL) {
#if BASP_HAVE_NCCL
      handle->impl = basp::transport::nccl::create_comm_mpi(parent, options);
#else
      fail(BASP_ERROR_UNSUPPORTED, "config->backend (", static_cast<int>(options.backend),
           ") is BASP_BACKEND_NCCL but this libbasp was built without CUDA + NCCL (BASP_ENABLE_CUDA, NCCL_ROOT)");
#endif
    } else {
      handle->impl = basp::transport::mpi::create_comm(parent, options);
    }
    basp::capi::register_comm(handle.get());
    *comm = handle.release();
#else
    (void)parent;
    fail(BASP_ERROR_UNSUPPORTED, "this libbasp was built without MPI (BASP_ENABLE_MPI)");
#endif
  });
}

basp_status_t basp_comm_destroy(basp_comm_t comm) {
  return guarded(__func__, [&] {
    if (comm == nullptr) return;
    basp::capi::unregister_comm(comm, "comm");
    delete comm;
  });
}

basp_status_t basp_comm_query(basp_comm_t comm, int32_t rank, int64_t seq_len, basp_rank_info_t* info) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    basp::capi::check_out_struct(info, BASP_RANK_INFO_MAGIC, sizeof(basp_rank_info_v1), "info");
    const auto& layout = c->layout();
    const int32_t who = rank == -1 ? c->rank() : rank;
    BASP_CHECK_ARG(who >= 0 && who < layout.world_size, "rank (", rank, ") is outside 0..", layout.world_size - 1,
                   " (or -1 for the calling rank)");
    const basp::plan::RankInfo r = basp::plan::describe_rank(layout, who, seq_len);
    basp_rank_info_v1 out = BASP_RANK_INFO_INITIALIZER;
    out.world_size = layout.world_size;
    out.rank = who;
    out.num_groups = layout.num_groups;
    out.group_size = layout.group_size;
    out.group_index = r.group_index;
    out.group_position = r.group_position;
    out.micro_batch = layout.micro_batch;
    out.first_sequence = r.first_sequence;
    out.num_sequences = r.num_sequences;
    out.seq_len = seq_len;
    out.token_begin = r.token_begin;
    out.token_end = r.token_end;
    basp::capi::write_out_struct(info, out);
  });
}

basp_status_t basp_comm_group_ranks(basp_comm_t comm, int32_t group_index, int32_t* ranks, int32_t capacity) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    const auto& layout = c->layout();
    BASP_CHECK_ARG(group_index >= 0 && group_index < layout.num_groups, "group_index (", group_index,
                   ") is outside 0..", layout.num_groups - 1);
    BASP_CHECK(ranks != nullptr, BASP_ERROR_NULL_POINTER, "ranks is NULL");
    BASP_CHECK_ARG(capacity >= layout.group_size, "capacity (", capacity, ") is smaller than the group size (",
                   layout.group_size, ")");
    const auto& members = layout.members[static_cast<size_t>(group_index)];
    std::memcpy(ranks, members.data(), members.size() * sizeof(int32_t));
  });
}

basp_status_t basp_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, basp_plan_t* plan) {
  return guarded(__func__, [&] {
    BASP_CHECK(plan != nullptr, BASP_ERROR_NULL_POINTER, "plan (the output handle) is NULL");
    *plan = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    const basp_plan_desc_v1 d =
        basp::capi::read_struct(desc, kPlanDefaults, BASP_PLAN_DESC_MAGIC, BASP_PLAN_DESC_VERSION, "desc");
    auto handle = std::make_unique<basp_plan>();
    handle->impl = std::make_shared<basp::runtime::Plan>(c, d);
    basp::capi::register_plan(handle.get());
    *plan = handle.release();
  });
}

basp_status_t basp_plan_destroy(basp_plan_t plan) {
  return guarded(__func__, [&] {
    if (plan == nullptr) return;
    basp::capi::unregister_plan(plan, "plan");
    delete plan;
  });
}

basp_status_t basp_plan_query(basp_plan_t plan, basp_plan_info_t* info) {
  return guarded(__func__, [&] {
    const auto p = basp::capi::plan_ref(plan, "plan");
    basp::capi::check_out_struct(info, BASP_PLAN_INFO_MAGIC, offsetof(basp_plan_info_v1, last_path), "info");
    const auto& x = p->exchange();
    basp_plan_info_v1 out = BASP_PLAN_INFO_INITIALIZER;
    out.num_tensors = x.num_tensors();
    out.group_size = x.group_size;
    out.local_sequences = x.local_sequences;
    out.local_tokens = x.spec.seq_len / x.group_size;
    out.workspace_bytes = p->workspace_bytes();
    for (int32_t t = 0; t < BASP_MAX_TENSORS; ++t) {
      const bool used = t < x.num_tensors();
      const int64_t elems = used ? x.tensors[t].tensor_bytes() / x.spec.elem_size : 0;
      out.seq_sharded_elems[t] = elems;
      out.head_sharded_elems[t] = elems;
    }
    out.bytes_sent_per_exchange = x.bytes_sent;
    out.last_path = p->last_path();
    basp::capi::write_out_struct(info, out);
  });
}

basp_status_t basp_scatter(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(__func__, [&] { basp::capi::plan_ref(plan, "plan")->scatter(inputs, outputs, stream); });
}

basp_status_t basp_gather(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(__func__, [&] { basp::capi::plan_ref(plan, "plan")->gather(inputs, outputs, stream); });
}

basp_status_t basp_mem_alloc(basp_comm_t comm, size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    BASP_CHECK(ptr != nullptr, BASP_ERROR_NULL_POINTER, "ptr (the output pointer) is NULL");
    *ptr = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    BASP_CHECK_ARG(bytes > 0 && bytes <= (size_t{1} << 48), "bytes (", bytes, ") must be in 1..2^48");
    *ptr = c->transport().alloc_shared(bytes);
  });
}

basp_status_t basp_mem_free(basp_comm_t comm, void* ptr) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    if (ptr == nullptr) return;
    c->transport().free_shared(ptr);
  });
}

basp_status_t basp_comm_create_nccl(void* nccl_comm, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    BASP_CHECK(comm != nullptr, BASP_ERROR_NULL_POINTER, "comm (the output handle) is NULL");
    *comm = nullptr;
    const basp_comm_config_v1 cfg =
        basp::capi::read_struct(config, kCommDefaults, BASP_COMM_CONFIG_MAGIC, BASP_COMM_CONFIG_VERSION, "config");
    const basp::runtime::CommOptions options = to_options(cfg);
    BASP_CHECK_ARG(options.backend == BASP_BACKEND_NCCL, "config->backend (", static_cast<int>(options.backend),
                   ") is not BASP_BACKEND_NCCL: basp_comm_create_nccl builds NCCL comms");
    BASP_CHECK(nccl_comm != nullptr, BASP_ERROR_NULL_POINTER, "nccl_comm is NULL");
#if BASP_HAVE_NCCL
    auto handle = std::make_unique<basp_comm>();
    handle->impl = basp::transport::nccl::create_comm(static_cast<ncclComm_t>(nccl_comm), options);
    basp::capi::register_comm(handle.get());
    *comm = handle.release();
#else
    fail(BASP_ERROR_UNSUPPORTED, "this libbasp was built without CUDA + NCCL (BASP_ENABLE_CUDA, NCCL_ROOT)");
#endif
  });
}

basp_status_t basp_comm_get_async_error(basp_comm_t comm, basp_status_t* error, char* message, size_t capacity) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    BASP_CHECK(error != nullptr, BASP_ERROR_NULL_POINTER, "error is NULL");
    std::string detail;
    const basp_status_t found = c->transport().async_error(detail);
    *error = found;
    if (message != nullptr && capacity > 0) {
      const size_t n = std::min(detail.size(), capacity - 1);
      std::memcpy(message, detail.data(), n);
      message[n] = '\0';
    }
  });
}

basp_status_t basp_comm_abort(basp_comm_t comm) {
  return guarded(__func__, [&] { basp::capi::comm_ref(comm, "comm")->transport().abort(); });
}

}  // extern "C"
