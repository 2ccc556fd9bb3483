#include "perf_op.h"

namespace basp::bench {

std::string describe_exchanges(const std::vector<Exchange>& exchanges) {
  std::string out;
  for (const Exchange& e : exchanges) {
    out += out.empty() ? "" : "; ";
    out += e.direction == Direction::kScatter ? "scatter" : "gather";
    for (const Tensor& t : e.tensors) {
      out += " " + t.name + "(" + std::to_string(t.heads);
      if (t.head_dim > 0) out += " x " + std::to_string(t.head_dim);
      if (t.query_heads != 0) out += ", follows " + std::to_string(t.query_heads) + " query heads";
      out += ")";
    }
  }
  return out;
}

std::string size_meaning(const std::vector<Exchange>& exchanges) {
  std::vector<std::string> names;
  for (const Exchange& e : exchanges) {
    for (const Tensor& t : e.tensors) names.push_back(t.name);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return out + " (sequence-sharded)";
}

}  // namespace basp::bench
