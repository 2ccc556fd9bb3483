// The C ABI: marshalling only. Every entry point reads the caller's structs, calls one runtime function, and
// writes the answer; guarded() maps whatever it throws to a status. Comm creation, consistency, health and every
// per-call check live in runtime/.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "basp/basp.h"
#include "capi/guard.h"
#include "capi/handles.h"
#include "common/direction.h"
#include "common/error.h"
#include "common/split.h"
#include "common/status_name.h"
#include "plan/dtype.h"
#include "runtime/create.h"
#include "runtime/plan.h"
#if BASP_HAVE_NCCL
#include "transport/nccl/nccl_util.h"
#endif

namespace {

thread_local std::string t_last_error;

constexpr basp_comm_config_v1 kCommDefaults = BASP_COMM_CONFIG_INITIALIZER;
constexpr basp_plan_desc_v1 kPlanDefaults = BASP_PLAN_DESC_INITIALIZER;
constexpr basp_oob_v1 kOobDefaults = BASP_OOB_INITIALIZER;
// The sizes of the structs' first layouts: callers built against them are served with defaults for the rest.
constexpr size_t kCommConfigFirstSize = offsetof(basp_comm_config_v1, timeout_ms);
constexpr size_t kPlanDescFirstSize = offsetof(basp_plan_desc_v1, query_heads);
constexpr size_t kPlanInfoFirstSize = offsetof(basp_plan_info_v1, last_path);
constexpr size_t kOobFirstSize = sizeof(basp_oob_v1);

// A comm creation's arguments as the runtime takes them: the config (when it reads) and what was wrong locally.
struct CreateArgs {
  basp_comm_config_v1 config = kCommDefaults;
  basp::runtime::CreateCall call;
};

void read_create_args(basp::runtime::CallKind kind, const basp_comm_config_t* config, basp_comm_t* comm,
                      CreateArgs& args) {
  args.call.kind = kind;
  if (comm != nullptr) *comm = nullptr;
  try {
    args.config = basp::capi::read_struct(config, kCommDefaults, BASP_COMM_CONFIG_MAGIC, BASP_COMM_CONFIG_VERSION,
                                          "config", kCommConfigFirstSize);
    args.call.config = &args.config;
    BASP_CHECK(comm != nullptr, BASP_ERROR_NULL_POINTER, "comm (the output handle) is NULL");
  } catch (const basp::detail::Error&) {
    args.call.local_error = std::current_exception();
  }
}

void hand_out(std::shared_ptr<basp::runtime::Comm> impl, basp_comm_t* comm) {
  auto handle = std::make_unique<basp_comm>();
  handle->impl = std::move(impl);
  basp::capi::register_comm(handle.get());
  *comm = handle.release();
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

basp_status_t basp_get_features(unsigned* features) {
  return guarded(__func__, [&] {
    BASP_CHECK_ARG(features != nullptr, "features is NULL");
    *features = (BASP_HAVE_MPI ? BASP_FEATURE_MPI : 0u) | (BASP_HAVE_CUDA ? BASP_FEATURE_CUDA : 0u) |
                (BASP_HAVE_NCCL ? BASP_FEATURE_NCCL : 0u) | (BASP_HAVE_HWLOC ? BASP_FEATURE_HWLOC : 0u);
  });
}

basp_status_t basp_get_nccl_library(int* version, char* path, size_t path_capacity) {
  return guarded(__func__, [&] {
#if BASP_HAVE_NCCL
    BASP_CHECK_ARG(path == nullptr || path_capacity > 0, "path_capacity is 0 but path is not NULL");
    if (version != nullptr) *version = basp::transport::nccl::runtime_version();
    if (path != nullptr) {
      const std::string file = basp::transport::nccl::library_path();
      const size_t n = std::min(file.size(), path_capacity - 1);
      std::memcpy(path, file.data(), n);
      path[n] = '\0';
    }
#else
    (void)version, (void)path, (void)path_capacity;
    basp::detail::fail(BASP_ERROR_UNSUPPORTED, "this libbasp was built without NCCL");
#endif
  });
}

size_t basp_dtype_size(basp_dtype_t dtype) {
  return static_cast<size_t>(basp::plan::dtype_size(static_cast<int32_t>(dtype)));
}

basp_status_t basp_comm_create_mpi(basp_mpi_fint_t parent, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    CreateArgs args;
    read_create_args(basp::runtime::CallKind::kCommCreateMpi, config, comm, args);
    hand_out(basp::runtime::comm_from_mpi(parent, args.call), comm);
  });
}

basp_status_t basp_comm_create_nccl(void* nccl_comm, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    CreateArgs args;
    read_create_args(basp::runtime::CallKind::kCommCreateNccl, config, comm, args);
    hand_out(basp::runtime::comm_from_nccl(nccl_comm, args.call), comm);
  });
}

basp_status_t basp_comm_create_oob(const basp_oob_t* oob, const basp_comm_config_t* config, basp_comm_t* comm) {
  return guarded(__func__, [&] {
    CreateArgs args;
    read_create_args(basp::runtime::CallKind::kCommCreateOob, config, comm, args);
    // The channel itself: nothing reaches the other ranks without it (the runtime says which error comes first).
    basp_oob_v1 channel = kOobDefaults;
    std::exception_ptr channel_error;
    try {
      channel = basp::capi::read_struct(oob, kOobDefaults, BASP_OOB_MAGIC, BASP_OOB_VERSION, "oob", kOobFirstSize);
    } catch (const basp::detail::Error&) {
      channel_error = std::current_exception();
    }
    hand_out(basp::runtime::comm_from_oob(channel_error ? nullptr : &channel, channel_error, args.call), comm);
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
    c->check_usable();
    basp::capi::check_out_struct(info, BASP_RANK_INFO_MAGIC, sizeof(basp_rank_info_v1), "info");
    basp::capi::write_out_struct(info, c->rank_info(rank, seq_len));
  });
}

basp_status_t basp_comm_group_ranks(basp_comm_t comm, int32_t group_index, int32_t* ranks, int32_t capacity) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    c->check_usable();
    c->group_ranks(group_index, ranks, capacity);
  });
}

basp_status_t basp_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, basp_plan_t* plan) {
  return guarded(__func__, [&] {
    if (plan != nullptr) *plan = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    // As in comm creation: a rank whose own arguments are bad still joins the group's consistency check.
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
    const auto impl = basp::capi::plan_ref(plan, "plan");
    basp::capi::unregister_plan(plan, "plan");
    delete plan;
    impl->drain();  // chunks in flight keep the plan alive until they have run
  });
}

basp_status_t basp_plan_query(basp_plan_t plan, basp_plan_info_t* info) {
  return guarded(__func__, [&] {
    const auto p = basp::capi::plan_ref(plan, "plan");
    p->check_usable();
    basp::capi::check_out_struct(info, BASP_PLAN_INFO_MAGIC, kPlanInfoFirstSize, "info");
    basp::capi::write_out_struct(info, p->info());
  });
}

basp_status_t basp_scatter(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(__func__, [&] {
    basp::capi::plan_ref(plan, "plan")
        ->execute(basp::Direction::kScatter, basp::runtime::Plan::kPlanTokens, inputs, outputs, stream);
  });
}

basp_status_t basp_gather(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream) {
  return guarded(__func__, [&] {
    basp::capi::plan_ref(plan, "plan")
        ->execute(basp::Direction::kGather, basp::runtime::Plan::kPlanTokens, inputs, outputs, stream);
  });
}

basp_status_t basp_scatter_tokens(basp_plan_t plan, int64_t num_tokens, const void* const* inputs, void* const* outputs,
                                  void* stream) {
  return guarded(__func__, [&] {
    basp::capi::plan_ref(plan, "plan")->execute(basp::Direction::kScatter, num_tokens, inputs, outputs, stream);
  });
}

basp_status_t basp_gather_tokens(basp_plan_t plan, int64_t num_tokens, const void* const* inputs, void* const* outputs,
                                 void* stream) {
  return guarded(__func__, [&] {
    basp::capi::plan_ref(plan, "plan")->execute(basp::Direction::kGather, num_tokens, inputs, outputs, stream);
  });
}

basp_status_t basp_plan_set_documents(basp_plan_t plan, const int64_t* cu_seqlens, int32_t num_docs) {
  return guarded(__func__, [&] { basp::capi::plan_ref(plan, "plan")->set_documents(cu_seqlens, num_docs); });
}

basp_status_t basp_split(int64_t items, int32_t parts, int32_t index, int64_t* begin, int64_t* end) {
  return guarded(__func__, [&] {
    BASP_CHECK_ARG(items >= 0, "items (", items, ") must not be negative");
    BASP_CHECK_ARG(parts > 0, "parts (", parts, ") must be positive");
    BASP_CHECK_ARG(index >= 0 && index < parts, "index (", index, ") is outside 0..", parts - 1);
    if (begin != nullptr) *begin = basp::detail::split_begin(items, parts, index);
    if (end != nullptr) *end = basp::detail::split_begin(items, parts, index + 1);
  });
}

basp_status_t basp_mem_alloc(basp_comm_t comm, size_t bytes, void** ptr) {
  return guarded(__func__, [&] {
    if (ptr != nullptr) *ptr = nullptr;
    const auto c = basp::capi::comm_ref(comm, "comm");
    std::exception_ptr local_error;
    if (ptr == nullptr) {
      local_error =
          std::make_exception_ptr(basp::detail::Error(BASP_ERROR_NULL_POINTER, "ptr (the output pointer) is NULL"));
    }
    void* memory = c->mem_alloc(bytes, local_error);
    *ptr = memory;
  });
}

basp_status_t basp_mem_free(basp_comm_t comm, void* ptr) {
  return guarded(__func__, [&] { basp::capi::comm_ref(comm, "comm")->mem_free(ptr); });
}

basp_status_t basp_comm_get_async_error(basp_comm_t comm, basp_status_t* error, char* message, size_t capacity) {
  return guarded(__func__, [&] {
    const auto c = basp::capi::comm_ref(comm, "comm");
    BASP_CHECK(error != nullptr, BASP_ERROR_NULL_POINTER, "error is NULL");
    std::string detail;
    *error = c->async_error(detail);
    if (message != nullptr && capacity > 0) {
      const size_t n = std::min(detail.size(), capacity - 1);
      std::memcpy(message, detail.data(), n);
      message[n] = '\0';
    }
  });
}

basp_status_t basp_comm_abort(basp_comm_t comm) {
  // Works on a broken comm: a second abort of an aborted comm does nothing, as documented.
  return guarded(__func__, [&] { basp::capi::comm_ref(comm, "comm")->abort(); });
}

}  // extern "C"
