#include "runtime/create.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "common/status_name.h"
#include "runtime/timeout.h"
#include "transport/oob/oob_bootstrap.h"
#if BASP_HAVE_NCCL
#include "transport/nccl/nccl_backend.h"
#endif

namespace basp::runtime {
namespace {

// The planner's machine (batch comms): every rank's node, NVLink domain and GPU from the gathered records; without
// records, one node.
plan::PlacementInput machine_of(const std::vector<topology::RankLocality>& locality, int32_t world_size) {
  if (!locality.empty()) return topology::placement_input(locality);
  plan::PlacementInput machine;
  machine.ranks.resize(static_cast<size_t>(world_size));
  return machine;
}

// What every rank contributes to step 3: whether it can take part, and where it is.
struct Readiness {
  int32_t status = BASP_SUCCESS;  // the rank's failure, or BASP_SUCCESS
  char reason[220] = {};          // its message, truncated
  topology::RankLocality locality;
};
static_assert(std::is_trivially_copyable_v<Readiness>, "Readiness travels as bytes");

// This rank's part of step 3, found before the agreement (discovery may take a while: hwloc, NVML) so that the
// step itself starts together on every rank. A failure is not thrown: it travels in the record.
Readiness readiness_of(transport::Connector& connector, std::exception_ptr& own) {
  Readiness mine;
  try {
    mine.locality = connector.locality();
  } catch (const detail::Error& e) {
    own = std::current_exception();
    mine.status = e.status();
    std::strncpy(mine.reason, e.what(), sizeof(mine.reason) - 1);
  }
  return mine;
}

std::vector<topology::RankLocality> gather_locality(transport::Bootstrap& parent, const Readiness& mine,
                                                    const std::exception_ptr& own, const char* call,
                                                    const detail::Deadline& deadline) {
  std::vector<Readiness> all = transport::allgather_records(
      parent, mine, std::string("the gather of the ranks' locations (") + call + ")", deadline);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].status == BASP_SUCCESS) continue;
    if (own) {
      try {
        std::rethrow_exception(own);
      } catch (const detail::Error& e) {
        detail::fail(e.status(), e.what(), " (every rank of ", parent.where(), " fails with it)");
      }
    }
    all[r].reason[sizeof(all[r].reason) - 1] = '\0';
    detail::fail(static_cast<basp_status_t>(all[r].status), "rank ", parent.members()[r], " of ", parent.where(),
                 " cannot take part (", detail::status_name(all[r].status), ": ", all[r].reason, ")");
  }
  std::vector<topology::RankLocality> out;
  out.reserve(all.size());
  for (const Readiness& r : all) out.push_back(r.locality);
  return out;
}

const char* placement_name(basp_placement_t placement) {
  switch (placement) {
    case BASP_PLACEMENT_CONTIGUOUS: return "contiguous";
    case BASP_PLACEMENT_TOPOLOGY: return "topology";
    default: return "default (topology)";
  }
}

// "[0 1] [2 3]": the groups' world ranks, the first 16 groups.
std::string groups_text(const plan::GroupLayout& layout) {
  std::string out;
  const size_t shown = std::min<size_t>(layout.members.size(), 16);
  for (size_t g = 0; g < shown; ++g) {
    out += g > 0 ? " [" : "[";
    for (size_t i = 0; i < layout.members[g].size(); ++i) {
      out += (i > 0 ? " " : "") + std::to_string(layout.members[g][i]);
    }
    out += "]";
  }
  if (shown < layout.members.size()) out += " ...";
  return out;
}

// BASP_DEBUG=INFO: what comm creation decided (docs/debugging.md).
void log_comm(const Comm& comm, const CommOptions& options, const std::vector<topology::RankLocality>& locality,
              const char* call) {
  if (!log::enabled(log::Level::kINFO)) return;
  const plan::GroupLayout& l = comm.layout();
  const auto r = static_cast<size_t>(comm.rank());
  BASP_LOG(INFO, call, ": comm of ", l.world_size, " ranks, backend ",
           comm.backend() == BASP_BACKEND_NCCL ? "NCCL" : "MPI", ", ", l.num_groups, " groups of ", l.group_size,
           " (micro_batch ", l.micro_batch, "), placement ", placement_name(options.placement), ", timeout ",
           options.timeout_ms, " ms, batch capacity ", options.batch_capacity);
  BASP_LOG(INFO, "groups (world ranks): ", groups_text(l));
  BASP_LOG(INFO, "this rank: group ", l.group_of[r], " position ", l.position_of[r]);
  if (locality.size() <= r) return;
  std::set<uint64_t> nodes, domains;
  for (const topology::RankLocality& x : locality) {
    nodes.insert(x.node_key);
    if (x.domain_key != 0) domains.insert(x.domain_key);
  }
  const topology::RankLocality& me = locality[r];
  BASP_LOG(INFO, "locality: ", nodes.size(), " node(s), ", domains.size(),
           " multi-node NVLink domain(s); this rank on ", topology::node_name_of(me), " (key ",
           topology::key_to_hex(me.node_key), "), GPU ", me.gpu, " of ", me.node_gpus, ", NVLink domain ",
           me.domain_key != 0 ? topology::key_to_hex(me.domain_key) : "none");
}

}  // namespace

// Step 1, which needs no other rank. `world_size` -1: unknown (no parent), G is then not checked against N.
std::exception_ptr local_checks(const CreateCall& call, int32_t world_size, const EntryCheck& check,
                                CommOptions& options) {
  if (call.local_error) return call.local_error;
  try {
    log::configure();  // BASP_DEBUG, BASP_DEBUG_FILE
    options = comm_options(*call.config);
    if (world_size > 0) {
      plan::resolve_num_groups(world_size, options.layout_micro_batch(world_size), options.num_groups);
    }
    check(options);
  } catch (const detail::Error&) {
    return std::current_exception();
  }
  return nullptr;
}

std::shared_ptr<Comm> create_comm(transport::Bootstrap& parent, const CreateCall& call, const EntryCheck& check,
                                  const ConnectorFor& connector_for) {
  // 1. Local checks; a rank that fails them still takes part in step 2. Its readiness is found now too.
  log::set_rank(parent.rank());
  CommOptions options;
  std::exception_ptr error = local_checks(call, parent.size(), check, options);
  std::unique_ptr<transport::Connector> connector;
  Readiness mine;
  std::exception_ptr unready;
  if (!error) {
    try {
      connector = connector_for(options);
      mine = readiness_of(*connector, unready);
    } catch (const detail::Error&) {
      error = std::current_exception();
    }
  }
  if (error) options.timeout_ms = fallback_timeout_ms(call.config);
  // 2. Agree.
  agree(parent, describe_comm_create(call.kind, call.config, status_of(error)), error,
        detail::Deadline(options.timeout_ms));
  // 3. Locality, 4. groups, 5. connect. Every rank is inside the call now, and each step gets the whole timeout:
  // with one deadline from the start of the call, a rank that came late would find the others given up on a step
  // it then completes from their abandoned contributions, and go on alone into a step that cannot time out.
  const std::vector<topology::RankLocality> locality =
      gather_locality(parent, mine, unready, call_name(call.kind), detail::Deadline(options.timeout_ms));
  plan::GroupLayout layout = plan_groups(parent.size(), options, locality);
  transport::GroupSpec spec = group_spec(layout, parent.rank(), options.timeout_ms);
  spec.batch_capacity = options.batch_capacity;
  if (options.batch_capacity > 0) {
    for (const topology::RankLocality& r : locality) spec.world_nodes.push_back(r.node_key);
  }
  auto transport = connector->connect(spec, detail::Deadline(options.timeout_ms));
  auto comm = std::make_shared<Comm>(std::move(layout), parent.rank(), options, std::move(transport));
  comm->set_machine(machine_of(locality, parent.size()));
  log_comm(*comm, options, locality, call_name(call.kind));
  return comm;
}

void fail_without_parent(const CreateCall& call, const EntryCheck& check, const std::exception_ptr& parent_error) {
  CommOptions options;
  const std::exception_ptr own = local_checks(call, -1, check, options);
  // An argument error first; what this build cannot do (UNSUPPORTED) is no argument error, and the parent's own
  // failure comes before it.
  const bool argument = own && status_of(own) != BASP_ERROR_UNSUPPORTED;
  std::rethrow_exception(argument ? own : parent_error);
}

void require_nccl_build(const char* entry) {
  BASP_CHECK(BASP_HAVE_NCCL, BASP_ERROR_UNSUPPORTED,
             "config->backend is BASP_BACKEND_NCCL but this libbasp was "
             "built without CUDA + NCCL (BASP_ENABLE_CUDA, NCCL_ROOT), so ",
             entry, " cannot make NCCL comms");
}

std::unique_ptr<transport::Connector> nccl_init_connector(transport::Bootstrap& parent) {
#if BASP_HAVE_NCCL
  return transport::nccl::make_init_connector(parent);
#else
  (void)parent;
  detail::fail(BASP_ERROR_INTERNAL, "nccl_init_connector in a build without NCCL");
#endif
}

std::shared_ptr<Comm> comm_from_oob(const basp_oob_v1* oob, const std::exception_ptr& oob_error,
                                    const CreateCall& call) {
  const EntryCheck check = [](const CommOptions& options) {
    BASP_CHECK_ARG(options.backend == BASP_BACKEND_NCCL, "config->backend (", static_cast<int>(options.backend),
                   ") is not BASP_BACKEND_NCCL: basp_comm_create_oob builds NCCL comms");
    require_nccl_build("basp_comm_create_oob");
  };
  std::unique_ptr<transport::oob::OobBootstrap> parent;
  if (oob_error) fail_without_parent(call, check, oob_error);
  try {
    parent = std::make_unique<transport::oob::OobBootstrap>(*oob);
  } catch (const detail::Error&) {
    fail_without_parent(call, check, std::current_exception());
  }
  return create_comm(*parent, call, check, [&](const CommOptions&) { return nccl_init_connector(*parent); });
}

}  // namespace basp::runtime
