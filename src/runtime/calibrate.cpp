#include "runtime/calibrate.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/split.h"
#include "plan/batch_planner.h"
#include "runtime/batch.h"
#include "runtime/plan.h"

namespace basp::runtime {
namespace {

constexpr int64_t kDefaultMaxBytes = int64_t{4} << 20;
constexpr int32_t kDefaultRepeats = 5;
constexpr int64_t kHeads = 64;     // heads of the calibration tensor: split evenly for K dividing 64
constexpr int64_t kHeadDim = 256;  // bytes per head and token (BASP_DTYPE_BYTE)

bool same_link_domain(const plan::RankPlace& a, const plan::RankPlace& b) {
  return a.node == b.node || (a.domain != 0 && a.domain == b.domain);
}

}  // namespace

std::vector<std::vector<std::vector<int32_t>>> calibration_memberships(const plan::PlacementInput& machine) {
  const auto n = static_cast<int32_t>(machine.ranks.size());
  std::vector<std::vector<std::vector<int32_t>>> out;
  std::vector<int32_t> ks;
  for (int32_t k = 2; k <= n; k *= 2) ks.push_back(k);
  if (n > 2 && (n & (n - 1)) != 0) ks.push_back(n);
  for (int32_t k : ks) {
    std::vector<int32_t> sizes(static_cast<size_t>(n / k), k);
    sizes.insert(sizes.end(), static_cast<size_t>(n % k), 1);
    out.push_back(plan::place_mixed_groups(machine, sizes));
  }
  // Pairs across nodes: the ranks ordered by node, rank i with rank i + N/2 when their nodes differ.
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) order[static_cast<size_t>(r)] = r;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return machine.ranks[static_cast<size_t>(a)].node < machine.ranks[static_cast<size_t>(b)].node;
  });
  std::vector<std::vector<int32_t>> pairs;
  std::vector<bool> used(static_cast<size_t>(n), false);
  for (int32_t i = 0; i < n / 2; ++i) {
    const int32_t a = order[static_cast<size_t>(i)];
    const int32_t b = order[static_cast<size_t>(i + n / 2)];
    if (same_link_domain(machine.ranks[static_cast<size_t>(a)], machine.ranks[static_cast<size_t>(b)])) continue;
    pairs.push_back({std::min(a, b), std::max(a, b)});
    used[static_cast<size_t>(a)] = used[static_cast<size_t>(b)] = true;
  }
  if (!pairs.empty()) {
    for (int32_t r = 0; r < n; ++r) {
      if (!used[static_cast<size_t>(r)]) pairs.push_back({r});
    }
    std::sort(pairs.begin(), pairs.end());
    out.push_back(std::move(pairs));
  }
  return out;
}

std::vector<GroupTraffic> membership_traffic(const plan::PlacementInput& machine,
                                             const std::vector<std::vector<int32_t>>& members,
                                             const std::vector<std::vector<std::vector<double>>>& chunk) {
  std::map<uint64_t, double> network;  // per node: bytes its ranks send off the node, over all groups
  std::vector<GroupTraffic> out(members.size());
  for (size_t g = 0; g < members.size(); ++g) {
    const auto& m = members[g];
    for (size_t r = 0; r < m.size(); ++r) {
      const plan::RankPlace& pr = machine.ranks[static_cast<size_t>(m[r])];
      double local = 0;
      for (size_t j = 0; j < m.size(); ++j) {
        if (j == r) continue;
        if (same_link_domain(pr, machine.ranks[static_cast<size_t>(m[j])])) {
          local += chunk[g][r][j];
        } else {
          network[pr.node] += chunk[g][r][j];
        }
      }
      out[g].node_bytes = std::max(out[g].node_bytes, local);
    }
  }
  // A group pays the busiest link among the nodes where it sends off the node itself (as plan::predict_batch).
  for (size_t g = 0; g < members.size(); ++g) {
    const auto& m = members[g];
    for (size_t r = 0; r < m.size(); ++r) {
      const plan::RankPlace& pr = machine.ranks[static_cast<size_t>(m[r])];
      bool crosses = false;
      for (size_t j = 0; j < m.size() && !crosses; ++j) {
        crosses = j != r && chunk[g][r][j] > 0 && !same_link_domain(pr, machine.ranks[static_cast<size_t>(m[j])]);
      }
      if (crosses) out[g].network_bytes = std::max(out[g].network_bytes, network[pr.node]);
    }
  }
  return out;
}

namespace {

// The tokens per rank of each measured size: max_bytes / 64, / 8 and max_bytes, at least one token.
std::vector<int64_t> tokens_per_size(int64_t max_bytes) {
  const int64_t row = kHeads * kHeadDim;  // bytes per token
  std::vector<int64_t> sizes;             // tokens per rank
  for (int64_t bytes : {max_bytes / 64, max_bytes / 8, max_bytes}) sizes.push_back(std::max<int64_t>(bytes / row, 1));
  return sizes;
}

// The size of the membership's largest group (1 at least).
int32_t largest_group(const std::vector<std::vector<int32_t>>& members) {
  int32_t kmax = 1;
  for (const auto& m : members) kmax = std::max(kmax, static_cast<int32_t>(m.size()));
  return kmax;
}

// An all-gather of one byte over the world: no rank starts a timed execute before every rank is ready.
void synchronise(transport::Bootstrap& world, int32_t n, const detail::Deadline& deadline) {
  const char one = 1;
  std::vector<char> all(static_cast<size_t>(n));
  world.allgather(&one, 1, all.data(), "the synchronisation of basp_comm_calibrate", deadline);
}

// The batch plan of the membership, one calibration tensor of `rows` tokens per rank (all of them on a rank alone).
std::shared_ptr<Plan> membership_plan(const std::shared_ptr<Comm>& comm,
                                      const std::vector<std::vector<int32_t>>& members, int64_t rows) {
  std::vector<int32_t> group_sizes;
  std::vector<int32_t> ranks;
  std::vector<int32_t> counts(members.size(), 1);
  for (const auto& m : members) {
    group_sizes.push_back(static_cast<int32_t>(m.size()));
    ranks.insert(ranks.end(), m.begin(), m.end());
  }
  basp_batch_v1 b = BASP_BATCH_INITIALIZER;
  b.num_groups = static_cast<int32_t>(members.size());
  b.num_docs = b.num_groups;
  b.group_sizes = group_sizes.data();
  b.ranks = ranks.data();
  b.group_docs = counts.data();
  basp_plan_desc_v1 d = BASP_PLAN_DESC_INITIALIZER;
  d.layout = BASP_LAYOUT_BSHD;
  d.dtype = BASP_DTYPE_BYTE;
  d.seq_len = rows * largest_group(members);  // every group's rank holds about `rows` tokens; a rank alone all
  d.head_dim = kHeadDim;
  d.num_tensors = 1;
  d.num_heads[0] = kHeads;
  return make_batch_plan(comm, d, b, /*check_capacity=*/false);
}

// This rank's median time of the plan's execute over `repeats` synchronised runs, after one warm-up.
double median_execute(transport::BatchTransport& transport, void* stream, Plan& plan, int32_t repeats, int32_t n,
                      const detail::Deadline& deadline) {
  const basp_plan_info_v1 info = plan.info();
  // The backend's memory (device memory on NCCL); an execute is timed to its end on the device.
  const auto in = transport.buffer(info.seq_sharded_elems[0]);
  const auto out = transport.buffer(info.head_sharded_elems[0]);
  const void* ins[1] = {in->get()};
  void* outs[1] = {out->get()};
  plan.execute(Direction::kScatter, Plan::kPlanTokens, ins, outs, stream);  // warm-up
  transport.finish(stream);
  std::vector<double> times;
  for (int32_t i = 0; i < repeats; ++i) {
    synchronise(transport.world(), n, deadline);
    const auto t0 = std::chrono::steady_clock::now();
    plan.execute(Direction::kScatter, Plan::kPlanTokens, ins, outs, stream);
    transport.finish(stream);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// This rank's median per (membership, size), memberships outer.
std::vector<double> measure_medians(const std::shared_ptr<Comm>& comm, transport::BatchTransport& transport,
                                    const std::vector<std::vector<std::vector<int32_t>>>& memberships,
                                    const std::vector<int64_t>& sizes, int32_t repeats,
                                    const detail::Deadline& deadline) {
  const int32_t n = comm->layout().world_size;
  std::vector<double> mine;
  void* const stream = transport.stream();
  for (const auto& members : memberships) {
    for (int64_t rows : sizes) {
      auto plan = membership_plan(comm, members, rows);
      mine.push_back(median_execute(transport, stream, *plan, repeats, n, deadline));
    }
  }
  return mine;
}

// The bytes each rank of each group sends each other rank of its group for a tensor of seq tokens.
std::vector<std::vector<std::vector<double>>> exchange_chunks(const std::vector<std::vector<int32_t>>& members,
                                                              int64_t seq) {
  std::vector<std::vector<std::vector<double>>> chunk(members.size());
  for (size_t g = 0; g < members.size(); ++g) {
    const auto k = static_cast<int64_t>(members[g].size());
    chunk[g].assign(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(k), 0.0));
    for (int64_t r = 0; r < k; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        chunk[g][static_cast<size_t>(r)][static_cast<size_t>(j)] =
            static_cast<double>(detail::split_count(seq, k, r) * detail::split_count(kHeads, k, j) * kHeadDim);
      }
    }
  }
  return chunk;
}

// One sample per group of two ranks or more and (membership, size): its traffic and its slowest rank's median;
// `all` holds every rank's `per_rank` medians.
std::vector<plan::CostSample> cost_samples(const plan::PlacementInput& machine,
                                           const std::vector<std::vector<std::vector<int32_t>>>& memberships,
                                           const std::vector<int64_t>& sizes, size_t per_rank,
                                           const std::vector<double>& all) {
  std::vector<plan::CostSample> samples;
  size_t at = 0;
  for (const auto& members : memberships) {
    const int32_t kmax = largest_group(members);
    for (int64_t rows : sizes) {
      const std::vector<GroupTraffic> traffic =
          membership_traffic(machine, members, exchange_chunks(members, rows * kmax));
      for (size_t g = 0; g < members.size(); ++g) {
        if (members[g].size() < 2) continue;
        double slowest = 0;
        for (int32_t r : members[g]) slowest = std::max(slowest, all[static_cast<size_t>(r) * per_rank + at]);
        plan::CostSample s;
        s.k = static_cast<int32_t>(members[g].size());
        s.node_bytes = traffic[g].node_bytes;
        s.network_bytes = traffic[g].network_bytes;
        s.seconds = slowest;
        samples.push_back(s);
      }
      ++at;
    }
  }
  return samples;
}

}  // namespace

void calibrate(const std::shared_ptr<Comm>& comm, int64_t max_bytes, int32_t repeats) {
  transport::BatchTransport& transport = comm->batch_transport("basp_comm_calibrate");
  BASP_CHECK_ARG(max_bytes == 0 || (max_bytes >= 4096 && max_bytes <= (int64_t{1} << 30)), "max_bytes (", max_bytes,
                 ") must be 0 (4 MiB) or in 4096..1 GiB");
  BASP_CHECK_ARG(repeats >= 0 && repeats <= 1000, "repeats (", repeats, ") must be in 0..1000 (0: ", kDefaultRepeats,
                 ")");
  if (max_bytes == 0) max_bytes = kDefaultMaxBytes;
  if (repeats == 0) repeats = kDefaultRepeats;
  const plan::PlacementInput& machine = comm->machine();
  const int32_t n = comm->layout().world_size;
  BASP_CHECK(n >= 2, BASP_ERROR_UNSUPPORTED, "basp_comm_calibrate: a comm of one rank has no exchange to measure");
  const auto memberships = calibration_memberships(machine);
  const std::vector<int64_t> sizes = tokens_per_size(max_bytes);
  transport::Bootstrap& world = transport.world();
  const detail::Deadline deadline(comm->options().timeout_ms);
  const std::vector<double> mine = measure_medians(comm, transport, memberships, sizes, repeats, deadline);
  std::vector<double> all(mine.size() * static_cast<size_t>(n));
  world.allgather(mine.data(), mine.size() * sizeof(double), all.data(), "the timings of basp_comm_calibrate",
                  deadline);
  const std::vector<plan::CostSample> samples = cost_samples(machine, memberships, sizes, mine.size(), all);
  plan::CostModel model = plan::fit_exchange(samples, comm->cost_model());
  model.source = "calibrated";
  model.world_size = n;
  std::map<uint64_t, int> nodes;
  for (const auto& r : machine.ranks) nodes[r.node] = 1;
  model.num_nodes = static_cast<int32_t>(nodes.size());
  model.note = std::to_string(samples.size()) + " samples, " + std::to_string(repeats) + " repeats, up to " +
               std::to_string(max_bytes) + " bytes per rank";
  comm->set_cost_model(model);
}

}  // namespace basp::runtime
