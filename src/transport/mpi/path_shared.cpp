// The shared-memory path: every rank's head-sharded tensors lie in basp_mem_alloc memory, which every rank of the
// group maps, so each rank moves its rows with plain copies straight into (scatter) or out of (gather) its peers'
// tensors: one user-space copy per byte, one row-major pass over the whole group.
#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"

namespace basp::transport::mpi {
namespace {

// Tensors at least this large are written with non-temporal stores (they do not fit in the cache anyway, and
// streaming saves reading every destination line first).
constexpr int64_t kStreamingMinBytes = int64_t{4} << 20;

}  // namespace

int32_t tensor_addresses(const Exchange& x, int32_t num_tensors, uint64_t* out) {
  for (int32_t t = 0; t < num_tensors; ++t) {
    out[t] = reinterpret_cast<uint64_t>(x.inputs[t]);
    out[num_tensors + t] = reinterpret_cast<uint64_t>(x.outputs[t]);
  }
  return 2 * num_tensors;
}

SharedPath::SharedPath(const PathContext& context)
    : c_(context), places_(static_cast<size_t>(context.plan->group_size)) {}

bool SharedPath::mine_usable(const Exchange& x) const {
  if (!c_.memory) return false;  // a batch plan: no basp_mem_alloc memory of a group
  const plan::ExchangePlan& p = *c_.plan;
  for (int32_t t = 0; t < p.num_tensors(); ++t) {
    const auto bytes = static_cast<uint64_t>(x.geom[t].head_tensor_bytes(p.position));
    if (bytes == 0) continue;
    if (c_.memory->translate(p.position, reinterpret_cast<uint64_t>(x.head(t)), bytes) == nullptr) return false;
  }
  return true;
}

bool SharedPath::usable(const Exchange& x) {
  if (!c_.memory) return false;  // a batch plan: no basp_mem_alloc memory of a group
  const plan::ExchangePlan& p = *c_.plan;
  const int32_t n = p.num_tensors();
  // Every rank holds the same table of regions and the same addresses: every rank reaches the same verdict.
  for (int32_t j = 0; j < p.group_size; ++j) {
    const ControlMessage& m = c_.control->peer(j);
    for (int32_t t = 0; t < n; ++t) {
      const auto bytes = static_cast<uint64_t>(x.geom[t].head_tensor_bytes(j));
      if (bytes == 0) continue;
      if (c_.memory->translate(j, m.address[x.scatter() ? n + t : t], bytes) == nullptr) return false;
    }
  }
  return true;
}

void SharedPath::copy(const Exchange& x) {
  const plan::ExchangePlan& p = *c_.plan;
  const int32_t n = p.num_tensors();
  for (int32_t t = 0; t < n; ++t) {
    const layout::Geometry& g = x.geom[t];
    for (int32_t j = 0; j < p.group_size; ++j) {
      const auto bytes = static_cast<uint64_t>(g.head_tensor_bytes(j));
      std::byte* head = j == p.position ? static_cast<std::byte*>(const_cast<void*>(x.head(t)))
                        : bytes == 0
                            ? nullptr
                            : c_.memory->translate(j, c_.control->peer(j).address[x.scatter() ? n + t : t], bytes);
      places_[static_cast<size_t>(j)] = {head, true};
    }
    const bool streaming = g.head_tensor_bytes(p.position) >= kStreamingMinBytes;
    if (x.scatter()) {
      layout::scatter_rows(g, static_cast<const std::byte*>(x.inputs[t]), places_.data(), streaming);
    } else {
      layout::gather_rows(g, places_.data(), static_cast<std::byte*>(x.outputs[t]), p.spec.dtype, streaming);
    }
  }
}

}  // namespace basp::transport::mpi
