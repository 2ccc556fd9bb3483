// The C ABI: argument checks, handle lifetime, status mapping. Nothing else lives here.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/error.h"
#include "common/status_name.h"
#include "plan/dtype.h"
#include "runtime/comm.h"
#include "runtime/consistency.h"
#include "runtime/timeout.h"
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
// The sizes of the structs' first layouts: callers built against them are served with defaults for the rest.
constexpr size_t kCommConfigFirstSize = offsetof(basp_comm_config_v1, timeout_ms);
constexpr size_t kPlanDescFirstSize = sizeof(basp_plan_desc_v1);

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
  o.timeout_ms = basp::runtime::resolve_timeout_ms(c.timeout_ms);
  return o;
}

// A comm handle that is live and not broken (transport/health.h).
std::shared_ptr<basp::runtime::Comm> usable_comm(basp_comm_t handle) {
  auto c = basp::capi::comm_ref(handle, "comm");
  c->check_usable();
  return c;
}

std::shared_ptr<basp::runtime::Plan> usable_plan(basp_plan_t handle) {
  auto p = basp::capi::plan_ref(handle, "plan");
  p->comm().check_usable();
  return p;
}

basp_status_t status_of(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const basp::detail::Error& e) {
    return e.status();
  } catch (...) {
    return BASP_ERROR_INTERNAL;
  }
  return BASP_SUCCESS;
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

const char* basp_status_string(basp_status_t status) { return basp::detail::status_name(status); }

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

basp_status_t basp_comm_create_mpi(basp_mpi_fint_t parent, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    if (comm != nullptr) *comm = nullptr;
    // Checks that need no other rank. A rank that fails them still joins the consistency check below, so that
    // the other ranks fail at once (BASP_ERROR_MISMATCH) instead of waiting for it until their timeout.
    std::exception_ptr local_error;
    basp_comm_config_v1 cfg = kCommDefaults;
    bool readable = false;
    basp::runtime::CommOptions options;
    try {
      cfg = basp::capi::read_struct(config, kCommDefaults, BASP_COMM_CONFIG_MAGIC, BASP_COMM_CONFIG_VERSION, "config",
                                    kCommConfigFirstSize);
      readable = true;
      BASP_CHECK(comm != nullptr, BASP_ERROR_NULL_POINTER, "comm (the output handle) is NULL");
      options = to_options(cfg);
    } catch (const basp::detail::Error&) {
      local_error = std::current_exception();
    }
#if BASP_HAVE_MPI
    if (local_error) {
      // The timeout of a rank whose config is unusable: its own if it reads, else the environment's or default.
      try {
        options.timeout_ms = basp::runtime::resolve_timeout_ms(readable ? cfg.timeout_ms : -1);
      } catch (const basp::detail::Error&) {
        options.timeout_ms = BASP_DEFAULT_TIMEOUT_MS;
      }
    }
    try {
      basp::transport::mpi::agree_on_parent(
          parent, basp::runtime::describe_comm_create(readable ? &cfg : nullptr, status_of(local_error)),
          options.timeout_ms);
    } catch (const basp::detail::Error& e) {
      if (!local_error || e.status() != BASP_ERROR_MISMATCH) throw;
      try {
        std::rethrow_exception(local_error);
      } catch (const basp::detail::Error& own) {
        fail(own.status(), own.what(), " (the other ranks of the call fail with BASP_ERROR_MISMATCH: ", e.what(), ")");
      }
    }
    if (local_error) std::rethrow_exception(local_error);
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
    if (local_error) std::rethrow_exception(local_error);
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
    const auto c = usable_comm(comm);
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
    const auto c = usable_comm(comm);
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
    if (plan != nullptr) *plan = nullptr;
    const auto c = usable_comm(comm);
    // As in basp_comm_create_mpi: a rank whose own checks fail still joins the group's consistency check.
    std::exception_ptr local_error;
    basp_plan_desc_v1 d = kPlanDefaults;
    bool readable = false;
    try {
      d = basp::capi::read_struct(desc, kPlanDefaults, BASP_PLAN_DESC_MAGIC, BASP_PLAN_DESC_VERSION, "desc",
                                  kPlanDescFirstSize);
      readable = true;
      BASP_CHECK(plan != nullptr, BASP_ERROR_NULL_POINTER, "plan (the output handle) is NULL");
    } catch (const basp::detail::Error&) {
      local_error = std::current_exception();
    }
    auto handle = std::make_unique<basp_plan>();
    handle->impl = std::make_shared<basp::runtime::Plan>(c, readable ? &d : nullptr, local_error);
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
    const auto p = usable_plan(plan);
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
  return guarded(__func__, [&] { usable_plan(plan)->scatter(inputs, outputs, stream); });
}

basp_status_t basp_gather(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(__func__, [&] { usable_plan(plan)->gather(inputs, outputs, stream); });
}

basp_status_t basp_mem_alloc(basp_comm_t comm, size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    if (ptr != nullptr) *ptr = nullptr;
    const auto c = usable_comm(comm);
    std::exception_ptr local_error;
    try {
      BASP_CHECK(ptr != nullptr, BASP_ERROR_NULL_POINTER, "ptr (the output pointer) is NULL");
      BASP_CHECK_ARG(bytes > 0 && bytes <= (size_t{1} << 48), "bytes (", bytes, ") must be in 1..2^48");
    } catch (const basp::detail::Error&) {
      local_error = std::current_exception();
    }
    c->agree(basp::runtime::describe_call(basp::runtime::CallKind::kMemAlloc, status_of(local_error)), local_error);
    c->collective([&] { *ptr = c->transport().alloc_shared(bytes); });
  });
}

basp_status_t basp_mem_free(basp_comm_t comm, void* ptr) {
  return guarded(__func__, [&] {
    const auto c = usable_comm(comm);
    // NULL on every rank does nothing; NULL on some ranks only is a mismatch the check names.
    c->agree(basp::runtime::describe_mem_free(ptr == nullptr), nullptr);
    if (ptr == nullptr) return;
    c->collective([&] { c->transport().free_shared(ptr); });
  });
}

basp_status_t basp_comm_create_nccl(void* nccl_comm, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    BASP_CHECK(comm != nullptr, BASP_ERROR_NULL_POINTER, "comm (the output handle) is NULL");
    *comm = nullptr;
    const basp_comm_config_v1 cfg = basp::capi::read_struct(config, kCommDefaults, BASP_COMM_CONFIG_MAGIC,
                                                            BASP_COMM_CONFIG_VERSION, "config", kCommConfigFirstSize);
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
    // A broken comm reports what broke it (the one call that does not fail with BASP_ERROR_COMM_BROKEN then).
    basp_status_t found = c->transport().health().cause(detail);
    if (found == BASP_SUCCESS) found = c->transport().async_error(detail);
    *error = found;
    if (message != nullptr && capacity > 0) {
      const size_t n = std::min(detail.size(), capacity - 1);
      std::memcpy(message, detail.data(), n);
      message[n] = '\0';
    }
  });
}

basp_status_t basp_comm_abort(basp_comm_t comm) {
  // Not usable_comm(): a second abort of an aborted (broken) comm does nothing, as documented.
  return guarded(__func__, [&] { basp::capi::comm_ref(comm, "comm")->transport().abort(); });
}

}  // extern "C"
