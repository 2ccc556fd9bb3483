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
    : c_(context), heads_(static_cast<size_t>(context.plan->group_size), nullptr) {}

bool SharedPath::mine_usable(const Exchange& x) const {
  const plan::ExchangePlan& p = *c_.plan;
  for (int32_t t = 0; t < p.num_tensors(); ++t) {
    const auto address = reinterpret_cast<uint64_t>(x.head(t));
    if (c_.memory->translate(p.position, address, static_cast<uint64_t>(p.tensors[t].tensor_bytes())) == nullptr) {
      return false;
    }
  }
  return true;
}

bool SharedPath::usable(const Exchange& x) {
  const plan::ExchangePlan& p = *c_.plan;
  const int32_t n = p.num_tensors();
  // Every rank holds the same table of regions and the same addresses: every rank reaches the same verdict.
  for (int32_t j = 0; j < p.group_size; ++j) {
    const ControlMessage& m = c_.control->peer(j);
    for (int32_t t = 0; t < n; ++t) {
      const uint64_t head = m.address[x.scatter() ? n + t : t];
      if (c_.memory->translate(j, head, static_cast<uint64_t>(p.tensors[t].tensor_bytes())) == nullptr) return false;
    }
  }
  return true;
}

void SharedPath::copy(const Exchange& x) {
  const plan::ExchangePlan& p = *c_.plan;
  const int32_t n = p.num_tensors();
  for (int32_t t = 0; t < n; ++t) {
    const layout::Geometry& g = p.tensors[t];
    for (int32_t j = 0; j < p.group_size; ++j) {
      heads_[static_cast<size_t>(j)] =
          j == p.position ? static_cast<std::byte*>(const_cast<void*>(x.head(t)))
                          : c_.memory->translate(j, c_.control->peer(j).address[x.scatter() ? n + t : t],
                                                 static_cast<uint64_t>(g.tensor_bytes()));
    }
    const bool streaming = g.tensor_bytes() >= kStreamingMinBytes;
    if (x.scatter()) {
      layout::scatter_rows_group(g, static_cast<const std::byte*>(x.inputs[t]), heads_.data(), p.position, streaming);
    } else {
      layout::gather_rows_group(g, heads_.data(), static_cast<std::byte*>(x.outputs[t]), p.position, streaming);
    }
  }
}

}  // namespace basp::transport::mpi
