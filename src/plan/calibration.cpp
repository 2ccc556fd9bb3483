#include "plan/calibration.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "plan/batch_model.h"
#include "plan/batch_planner.h"

namespace basp::plan {

namespace {

using batch_internal::ceil_div;

// Pairs across locality units: the ranks ordered by their unit (domains after lone nodes, each by key), rank i with
// rank i + N/2 when their units differ, the ranks left alone; empty when no pair crosses.
Membership pairs_across_units(const PlacementInput& machine, const UnitMap& m) {
  const int32_t n = m.n;
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) order[static_cast<size_t>(r)] = r;
  auto unit_key = [&](int32_t r) {
    const RankPlace& p = machine.ranks[static_cast<size_t>(r)];
    return std::make_pair(p.domain != 0, p.domain != 0 ? p.domain : p.node);
  };
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return unit_key(a) < unit_key(b); });
  Membership pairs;
  std::vector<bool> used(static_cast<size_t>(n), false);
  for (int32_t i = 0; i < n / 2; ++i) {
    const int32_t a = order[static_cast<size_t>(i)];
    const int32_t b = order[static_cast<size_t>(i + n / 2)];
    if (m.same_unit(a, b)) continue;
    pairs.push_back({std::min(a, b), std::max(a, b)});
    used[static_cast<size_t>(a)] = used[static_cast<size_t>(b)] = true;
  }
  if (pairs.empty()) return pairs;
  for (int32_t r = 0; r < n; ++r) {
    if (!used[static_cast<size_t>(r)]) pairs.push_back({r});
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

}  // namespace

std::vector<Membership> calibration_memberships(const PlacementInput& machine) {
  const auto n = static_cast<int32_t>(machine.ranks.size());
  std::vector<Membership> out;
  std::vector<int32_t> ks;
  for (int32_t k = 2; k <= n; k *= 2) ks.push_back(k);
  if (n > 2 && (n & (n - 1)) != 0) ks.push_back(n);
  for (int32_t k : ks) {
    std::vector<int32_t> sizes(static_cast<size_t>(n / k), k);
    sizes.insert(sizes.end(), static_cast<size_t>(n % k), 1);
    out.push_back(place_mixed_groups(machine, sizes));
  }
  Membership pairs = pairs_across_units(machine, make_unit_map(machine));
  if (!pairs.empty()) out.push_back(std::move(pairs));
  return out;
}

std::vector<int64_t> calibration_tokens(int64_t max_bytes) {
  const int64_t row = kCalibrationHeads * kCalibrationHeadDim;  // bytes per token
  std::vector<int64_t> tokens;
  for (int64_t bytes : {max_bytes / 64, max_bytes / 8, max_bytes}) tokens.push_back(std::max<int64_t>(bytes / row, 1));
  return tokens;
}

int32_t largest_group(const Membership& members) {
  int32_t kmax = 1;
  for (const auto& m : members) kmax = std::max(kmax, static_cast<int32_t>(m.size()));
  return kmax;
}

std::vector<GroupTraffic> calibration_traffic(const UnitMap& m, const Membership& members, int64_t seq) {
  std::vector<double> per_peer(members.size(), 0.0);
  for (size_t g = 0; g < members.size(); ++g) {
    const auto k = static_cast<int64_t>(members[g].size());
    per_peer[g] = static_cast<double>(ceil_div(seq, k) * ceil_div(kCalibrationHeads, k) * kCalibrationHeadDim);
  }
  return membership_traffic(m, members, per_peer);
}

int32_t calibration_chunks(const Membership& members, basp_backend_t backend) {
  if (backend == BASP_BACKEND_NCCL) return 1;
  const int64_t heads = ceil_div(kCalibrationHeads, static_cast<int64_t>(largest_group(members)));
  return heads >= 2 ? 2 : 1;
}

double calibration_pieces(int32_t k, int64_t seq) {
  return static_cast<double>(ceil_div(seq, static_cast<int64_t>(k))) * (k - 1);
}

size_t calibration_medians_per_membership(const std::vector<int64_t>& tokens, const Membership& members,
                                          basp_backend_t backend) {
  return tokens.size() + (calibration_chunks(members, backend) >= 2 ? 1 : 0);
}

std::vector<CostSample> calibration_samples(const PlacementInput& machine, const std::vector<Membership>& memberships,
                                            const std::vector<int64_t>& tokens, basp_backend_t backend, size_t per_rank,
                                            const std::vector<double>& medians) {
  const UnitMap m = make_unit_map(machine);
  std::vector<CostSample> samples;
  size_t at = 0;
  for (const Membership& members : memberships) {
    const int32_t kmax = largest_group(members);
    for (size_t i = 0; i < calibration_medians_per_membership(tokens, members, backend); ++i) {
      const bool chunked = i == tokens.size();  // the last: the largest size in chunks
      const int64_t seq = (chunked ? tokens.back() : tokens[i]) * kmax;
      const std::vector<GroupTraffic> traffic = calibration_traffic(m, members, seq);
      for (size_t g = 0; g < members.size(); ++g) {
        if (members[g].size() < 2) continue;
        double slowest = 0;
        for (int32_t r : members[g]) slowest = std::max(slowest, medians[static_cast<size_t>(r) * per_rank + at]);
        CostSample s;
        s.k = static_cast<int32_t>(members[g].size());
        s.node_bytes = traffic[g].node_bytes;
        s.network_bytes = traffic[g].network_bytes;
        s.seconds = slowest;
        s.chunks = chunked ? calibration_chunks(members, backend) : 1;
        s.pieces = s.network_bytes > 0.0 ? 0.0 : calibration_pieces(s.k, seq);
        samples.push_back(s);
      }
      ++at;
    }
  }
  return samples;
}

CostModel calibrated_model(const PlacementInput& machine, const std::vector<CostSample>& samples, const CostModel& base,
                           int32_t repeats, int64_t max_bytes) {
  CostModel model = fit_exchange(samples, base);
  model.source = "calibrated";
  model.world_size = static_cast<int32_t>(machine.ranks.size());
  std::set<uint64_t> nodes;
  for (const RankPlace& r : machine.ranks) nodes.insert(r.node);
  model.num_nodes = static_cast<int32_t>(nodes.size());
  model.note = std::to_string(samples.size()) + " samples, " + std::to_string(repeats) + " repeats, up to " +
               std::to_string(max_bytes) + " bytes per rank";
  return model;
}

}  // namespace basp::plan
