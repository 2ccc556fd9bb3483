// The local path (K = 1): the sequence-sharded and head-sharded tensors hold the same bytes; no control round.
#include "layout/host_copy.h"
#include "transport/mpi/exchange_path.h"

namespace basp::transport::mpi {
namespace {

class LocalPath final : public ExchangePath {
 public:
  explicit LocalPath(const PathContext& context) : c_(context) {}
  basp_path_t id() const override { return BASP_PATH_LOCAL; }

  basp_path_t run(const Exchange& x) override {
    const plan::ExchangePlan& p = *c_.plan;
    for (int32_t t = 0; t < p.num_tensors(); ++t) {
      const auto* in = static_cast<const std::byte*>(x.inputs[t]);
      auto* out = static_cast<std::byte*>(x.outputs[t]);
      if (x.scatter()) {
        layout::copy_seq_to_head(p.tensors[t], in, out, 0);
      } else {
        layout::copy_head_to_seq(p.tensors[t], in, out, 0);
      }
    }
    return BASP_PATH_LOCAL;
  }

 private:
  PathContext c_;
};

}  // namespace

std::unique_ptr<ExchangePath> make_local_path(const PathContext& context) {
  return std::make_unique<LocalPath>(context);
}

}  // namespace basp::transport::mpi
