// Calibration's byte counts (plan/calibration.h) must be the planner's (plan::predict_batch), or the fitted betas
// would mean something else than what the planner multiplies them with. Hand-computed on 2 nodes x 4 ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "plan/batch_planner.h"
#include "plan/calibration.h"
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

namespace {

// 2 nodes x 4 GPUs on one partitioned multi-node NVLink fabric: GPUs 0 and 1 of each node in domain 0xd1, GPUs 2
// and 3 in domain 0xd2 (each domain spans both nodes).
basp::plan::PlacementInput partitioned_fabric() {
  basp::plan::PlacementInput m;
  for (int r = 0; r < 8; ++r) {
    basp::plan::RankPlace p;
    p.node = r < 4 ? 11 : 22;
    p.domain = r % 4 < 2 ? 0xd1 : 0xd2;
    p.gpu = r % 4;
    m.ranks.push_back(p);
  }
  return m;
}

// The largest node and network bytes among the samples of one membership at one size.
std::pair<double, double> largest_bytes(const std::vector<basp::plan::CostSample>& samples) {
  std::pair<double, double> out{0, 0};
  for (const auto& s : samples) {
    out.first = std::max(out.first, s.node_bytes);
    out.second = std::max(out.second, s.network_bytes);
  }
  return out;
}

// The planner's prediction of one exchange per group of `members` of the calibration tensor (every group of two or
// more ranks holding one document of `seq` tokens), with only beta_node (node) or only beta_network set to 1. With
// Hq = Hkv = 64 heads of 256 bytes the planner's scatter moves 3 times the calibration tensor's bytes (Q, K and
// V) and its gather once: 4 times calibration's bytes in all.
double planner_bytes(const basp::plan::PlacementInput& machine, const std::vector<std::vector<int32_t>>& members,
                     int64_t seq, bool node) {
  basp::plan::BatchProblem p;
  p.query_heads = basp::plan::kCalibrationHeads;
  p.kv_heads = basp::plan::kCalibrationHeads;
  p.head_dim = basp::plan::kCalibrationHeadDim;
  p.elem_size = 1;
  p.capacity = seq;
  p.machine = machine;
  std::vector<std::vector<int32_t>> docs(members.size());
  for (size_t g = 0; g < members.size(); ++g) {
    if (members[g].size() < 2) continue;
    docs[g].push_back(static_cast<int32_t>(p.lengths.size()));
    p.lengths.push_back(seq);
  }
  p.model = basp::plan::CostModel{};
  (node ? p.model.beta_node : p.model.beta_network) = 1.0;
  return basp::plan::predict_batch(p, members, docs) / 4.0;
}

}  // namespace

TEST_CASE("calibration and the planner agree on a multi-node NVLink domain", "[calibrate]") {
  const auto machine = partitioned_fabric();
  // The memberships calibration measures: groups of 2, 4 and 8, then pairs across the two domains (ordered by
  // their unit, rank i with rank i + 4), which share a node but not a domain.
  std::vector<std::vector<std::vector<int32_t>>> memberships = basp::plan::calibration_memberships(machine);
  REQUIRE(memberships.size() == 4);
  CHECK(memberships.back() == std::vector<std::vector<int32_t>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  // And one group per node, two domains in each: the planner counts the peers in the other domain as network
  // bytes (the old calibration counted them on the node).
  const std::vector<std::vector<int32_t>> per_node{{0, 1, 2, 3}, {4, 5, 6, 7}};
  memberships.push_back(per_node);
  const std::vector<int64_t> tokens{4, 64};
  for (const auto& members : memberships) {
    const std::vector<std::vector<std::vector<int32_t>>> one{members};
    // Per rank: the two sizes whole, then the largest one chunked.
    const std::vector<double> medians(8 * (tokens.size() + 1), 1e-3);
    const auto samples =
        basp::plan::calibration_samples(machine, one, tokens, BASP_BACKEND_MPI, tokens.size() + 1, medians);
    const int32_t kmax = basp::plan::largest_group(members);
    size_t exchanging = 0;  // samples per size: the groups of two ranks or more
    for (const auto& g : members) exchanging += g.size() >= 2 ? 1 : 0;
    REQUIRE(samples.size() == exchanging * (tokens.size() + 1));
    for (size_t s = 0; s <= tokens.size(); ++s) {
      const auto first = samples.begin() + static_cast<std::ptrdiff_t>(s * exchanging);
      const std::vector<basp::plan::CostSample> at(first, first + static_cast<std::ptrdiff_t>(exchanging));
      const auto largest = largest_bytes(at);
      const int64_t seq = tokens[std::min(s, tokens.size() - 1)] * kmax;
      for (const auto& x : at) CHECK(x.chunks == (s == tokens.size() ? 2 : 1));
      CHECK(largest.first == planner_bytes(machine, members, seq, true));
      CHECK(largest.second == planner_bytes(machine, members, seq, false));
    }
  }
  // Per node at 4 tokens per rank (16 in all): each rank sends 4 tokens of 16 heads of 256 bytes to each peer, to
  // one peer in its domain and to two outside it; each node's link carries 4 ranks x 2 peers.
  // The chunked measurement (each rank's second median) moves the same bytes as 2 chunks; these groups cross the
  // network (two domains), so no sample has pieces (cost_model.h: the link bounds them).
  const std::vector<std::vector<std::vector<int32_t>>> one{per_node};
  std::vector<double> medians(16, 1e-3);
  for (size_t r = 0; r < 8; ++r) medians[2 * r + 1] = 5e-3 + 1e-4 * static_cast<double>(r);  // slowest: 3 and 7
  const auto samples = basp::plan::calibration_samples(machine, one, {4}, BASP_BACKEND_MPI, 2, medians);
  REQUIRE(samples.size() == 4);
  CHECK(samples[0].node_bytes == 4.0 * 16 * 256);
  CHECK(samples[0].network_bytes == 8.0 * 4 * 16 * 256);
  for (size_t i = 0; i < 4; ++i) {
    INFO("sample " << i);
    CHECK(samples[i].node_bytes == samples[i % 2].node_bytes);
    CHECK(samples[i].network_bytes == samples[i % 2].network_bytes);
    CHECK(samples[i].pieces == 0.0);
    CHECK(samples[i].chunks == (i < 2 ? 1 : 2));
    CHECK(samples[i].seconds == (i < 2 ? 1e-3 : 5e-3 + 1e-4 * (i == 2 ? 3 : 7)));
  }
  // On NCCL (its batch plans take no head chunks) there is no chunked measurement: one median per rank and size, one
  // sample per group; a group whose busiest rank holds one head (64 ranks) cannot be cut either.
  const std::vector<double> whole_only(8, 1e-3);
  const auto nccl = basp::plan::calibration_samples(machine, one, {4}, BASP_BACKEND_NCCL, 1, whole_only);
  REQUIRE(nccl.size() == 2);
  for (const auto& x : nccl) CHECK(x.chunks == 1);
  CHECK(basp::plan::calibration_medians_per_membership({4}, per_node, BASP_BACKEND_NCCL) == 1);
  CHECK(basp::plan::calibration_medians_per_membership({4, 64}, per_node, BASP_BACKEND_MPI) == 3);
  CHECK(basp::plan::calibration_chunks(per_node, BASP_BACKEND_MPI) == 2);
  CHECK(basp::plan::calibration_chunks(per_node, BASP_BACKEND_NCCL) == 1);
  std::vector<int32_t> all64(64);
  for (int32_t r = 0; r < 64; ++r) all64[static_cast<size_t>(r)] = r;
  CHECK(basp::plan::calibration_chunks({all64}, BASP_BACKEND_MPI) == 1);
  CHECK(basp::plan::calibration_medians_per_membership({4, 64}, {all64}, BASP_BACKEND_MPI) == 2);
  CHECK(basp::plan::calibration_chunks({std::vector<int32_t>(all64.begin(), all64.begin() + 32)}, BASP_BACKEND_MPI) ==
        2);
  CHECK(basp::plan::calibration_pieces(3, 10) == 4.0 * 2);  // ceil(10 / 3) rows to each of 2 peers
  // A group inside one node (2 nodes x 4 ranks, no domains): each rank's 4 rows times its 3 peers, whole and chunked;
  // the pairs across the nodes none.
  const auto nodes = two_nodes();
  const std::vector<std::vector<std::vector<int32_t>>> inside{{{0, 1, 2, 3}, {4, 5, 6, 7}}};
  const auto local = basp::plan::calibration_samples(nodes, inside, {4}, BASP_BACKEND_MPI, 2, medians);
  REQUIRE(local.size() == 4);
  for (const auto& x : local) {
    CHECK(x.network_bytes == 0.0);
    CHECK(x.pieces == 4.0 * 3);
  }
  const std::vector<std::vector<std::vector<int32_t>>> across{{{0, 4}, {1, 5}, {2, 6}, {3, 7}}};
  const auto pairs = basp::plan::calibration_samples(nodes, across, {4}, BASP_BACKEND_MPI, 2, medians);
  REQUIRE(pairs.size() == 8);
  for (const auto& x : pairs) {
    CHECK(x.network_bytes > 0.0);
    CHECK(x.pieces == 0.0);
  }
}
