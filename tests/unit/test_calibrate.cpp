// Calibration's byte counts (plan/calibration.h) must be the planner's (plan::predict_batch), or the fitted betas
// would mean something else than what the planner multiplies them with. Hand-computed on 2 nodes x 4 ranks.
#include <catch2/catch.hpp>

#include <vector>

#include "plan/batch_planner.h"
#include "plan/traffic.h"

namespace {

basp::plan::PlacementInput two_nodes() {
  basp::plan::PlacementInput m;
  for (int r = 0; r < 8; ++r) {
    basp::plan::RankPlace p;
    p.node = r < 4 ? 11 : 22;
    m.ranks.push_back(p);
  }
  return m;
}

}  // namespace

TEST_CASE("calibration counts bytes as the planner does", "[calibrate]") {
  const auto machine = two_nodes();
  // Group 0 = {0, 1, 4, 5} crosses the nodes, group 1 = {2, 3} stays on node A, 6 and 7 alone.
  const std::vector<std::vector<int32_t>> members{{0, 1, 4, 5}, {2, 3}, {6}, {7}};
  // Per-peer scatter bytes: group 0 T = 400 over K = 4 (t = 100), Hq = Hkv = 4 (1 + 2 heads per rank), D = 1, one
  // byte: 300; group 1 T = 200 over 2 (t = 100, 2 + 4 heads): 600.
  const std::vector<double> per_peer{300, 600, 0, 0};
  const auto traffic = basp::plan::membership_traffic(basp::plan::make_unit_map(machine), members, per_peer);
  REQUIRE(traffic.size() == 4);
  CHECK(traffic[0].node_bytes == 300);      // rank 0's one peer on its node
  CHECK(traffic[0].network_bytes == 1200);  // node A: ranks 0 and 1 each send 300 to 4 and 5
  CHECK(traffic[1].node_bytes == 600);
  CHECK(traffic[1].network_bytes == 0);  // node A's link is busy, but group 1 does not use it
  CHECK(traffic[2].node_bytes == 0);
  CHECK(traffic[2].network_bytes == 0);

  // The planner's prediction of the same batch with only one beta set: scatter + gather, the gather moving the
  // output's heads only (1 of 3 per rank in group 0, 2 of 6 in group 1).
  basp::plan::BatchProblem p;
  p.lengths = {400, 200};
  p.query_heads = 4;
  p.kv_heads = 4;
  p.head_dim = 1;
  p.elem_size = 1;
  p.capacity = 1000;
  p.machine = machine;
  const std::vector<std::vector<int32_t>> docs{{0}, {1}, {}, {}};
  p.model = basp::plan::CostModel{};
  p.model.beta_network = 1.0;
  CHECK(basp::plan::predict_batch(p, members, docs) == 1200.0 * (1.0 + 1.0 / 3.0));
  p.model.beta_network = 0.0;
  p.model.beta_node = 1.0;
  CHECK(basp::plan::predict_batch(p, members, docs) == 600.0 * (1.0 + 1.0 / 3.0));
}
