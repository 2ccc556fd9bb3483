// The local path (K = 1): the sequence-sharded and head-sharded tensors hold the same bytes; no control round. A
// head chunk copies its heads of each row.
#include <cstring>

#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"

namespace basp::transport::mpi {
namespace {

constexpr size_t kStreamingMinBytes = size_t{4} << 20;  // as the shared and staged paths

class LocalPath final : public ExchangePath {
 public:
  explicit LocalPath(const PathContext& context) : c_(context) {}
  basp_path_t id() const override { return BASP_PATH_LOCAL; }

  // With K = 1 both layouts of a tensor are the same bytes: one copy, with non-temporal stores for tensors much
  // larger than the cache (the output is not read back before attention, by which time it would be evicted).
  basp_path_t run(const Exchange& x) override {
    const plan::ExchangePlan& p = *c_.plan;
    if (!x.call.chunk.whole()) {
      run_chunk(x);
      return BASP_PATH_LOCAL;
    }
    bool streamed = false;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const auto bytes = static_cast<size_t>(x.geom[t].seq_tensor_bytes(0));
      if (bytes == 0) continue;
      const auto* in = static_cast<const std::byte*>(x.inputs[t]);
      auto* out = static_cast<std::byte*>(x.outputs[t]);
      if (bytes >= kStreamingMinBytes) {
        layout::copy_streaming(out, in, bytes);
        streamed = true;
      } else {
        std::memcpy(out, in, bytes);
      }
    }
    if (streamed) layout::stream_fence();
    return BASP_PATH_LOCAL;
  }

 private:
  // A head chunk: its heads of every row, the rest of each row left as it is.
  void run_chunk(const Exchange& x) {
    for (int32_t t = 0; t < c_.plan->num_tensors(); ++t) {
      const layout::Geometry& g = x.geom[t];
      if (x.scatter()) {
        layout::seq_to_place(g, static_cast<const std::byte*>(x.inputs[t]),
                             {static_cast<std::byte*>(x.outputs[t]), true}, 0);
      } else {
        layout::place_to_seq(g, {static_cast<std::byte*>(const_cast<void*>(x.inputs[t])), true},
                             static_cast<std::byte*>(x.outputs[t]), 0);
      }
    }
  }

  PathContext c_;
};

}  // namespace

std::unique_ptr<ExchangePath> make_local_path(const PathContext& context) {
  return std::make_unique<LocalPath>(context);
}

}  // namespace basp::transport::mpi
