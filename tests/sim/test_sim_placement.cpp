// Group placement against real MPI locality, on the fake nodes of scripts/sim-cluster.
//
// Runs under sim-cluster (X nodes of Y ranks, block or cyclic numbering) and checks, in order:
//   1. the emulation itself: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) yields X nodes of Y ranks laid out as the
//      numbering says, and the node name (BASP_NODE_ID, or the host name when sim-cluster runs with --no-node-id)
//      is the same exactly for ranks MPI puts on the same node;
//   2. placement, with B = X (so G = X groups of K = Y): TOPOLOGY forms node-local groups whatever the numbering;
//      CONTIGUOUS forms ranks g*K .. g*K+K-1, node-local under block numbering and spanning nodes under cyclic;
//      the lists from basp_comm_group_ranks agree with every rank's own basp_comm_query;
//   3. an exchange (scatter of Q, K, V, then gather) on each comm is bit-exact, takes the point-to-point path when
//      its group spans nodes, and sends exactly where the groups say: the namespace's loopback (the shaped link,
//      which only inter-node traffic crosses) carries at least the inter-node payload the groups imply, and next
//      to nothing for node-local groups.
//
// usage: test_sim_placement <nodes> <ranks_per_node> block|cyclic
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "pattern.h"

using basp::test::kPoison;
using basp::test::pattern_byte;

namespace {

int g_rank = 0;
int g_failures = 0;

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "rank %d: FAILED %s: %s\n", g_rank, what, detail.c_str());
  ++g_failures;
}

// A failed library call ends the test: later checks would only repeat it.
void check_status(basp_status_t s, const char* call) {
  if (s == BASP_SUCCESS) return;
  std::fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, call, basp_status_string(s), basp_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

std::string list(const std::vector<int32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "}";
}

// Bytes the namespace's loopback has sent: every byte between fake nodes, and nothing else of the ranks'.
int64_t link_tx_bytes() {
  std::ifstream in("/sys/class/net/lo/statistics/tx_bytes");
  long long v = -1;
  in >> v;
  return in ? v : -1;
}

const char* placement_name(int32_t p) { return p == BASP_PLACEMENT_TOPOLOGY ? "TOPOLOGY" : "CONTIGUOUS"; }

struct Shape {
  int64_t seq_len, head_dim;
  std::vector<int64_t> heads;  // Q, K, V
};

// One comm of the given placement: its groups, then one checked exchange with the link bytes it cost.
void check_placement(int32_t placement, int64_t micro_batch, const std::vector<int>& node_of, bool expect_local,
                     const Shape& shape) {
  const int n = static_cast<int>(node_of.size());
  const char* name = placement_name(placement);
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = micro_batch;
  cfg.placement = placement;
  basp_comm_t comm = nullptr;
  check_status(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm), "basp_comm_create_mpi");
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  check_status(basp_comm_query(comm, -1, shape.seq_len, &me), "basp_comm_query");
  const int32_t G = me.num_groups, K = me.group_size;

  // The groups, as the C ABI lists them.
  std::vector<std::vector<int32_t>> groups(G, std::vector<int32_t>(K));
  std::vector<int> seen(n, 0);
  for (int32_t g = 0; g < G; ++g) {
    check_status(basp_comm_group_ranks(comm, g, groups[g].data(), K), "basp_comm_group_ranks");
    for (int32_t l = 0; l < K; ++l) {
      const int32_t r = groups[g][l];
      if (r < 0 || r >= n) {
        fail(name, "group " + std::to_string(g) + " lists rank " + std::to_string(r));
        continue;
      }
      ++seen[r];
      if (r == g_rank && (me.group_index != g || me.group_position != l)) {
        fail(name, "basp_comm_group_ranks puts me in group " + std::to_string(g) + " at " + std::to_string(l) +
                       ", basp_comm_query in group " + std::to_string(me.group_index) + " at " +
                       std::to_string(me.group_position));
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    if (seen[r] != 1) fail(name, "rank " + std::to_string(r) + " is in " + std::to_string(seen[r]) + " groups");
  }
  for (int32_t g = 0; g < G; ++g) {
    std::set<int> nodes;
    for (int32_t r : groups[g]) nodes.insert(node_of[r]);
    const bool local = nodes.size() == 1;
    if (local != expect_local) {
      fail(name, "group " + std::to_string(g) + " " + list(groups[g]) + " spans " + std::to_string(nodes.size()) +
                     " node(s), expected " + (expect_local ? "one" : "several"));
    }
    if (placement == BASP_PLACEMENT_CONTIGUOUS) {
      for (int32_t l = 0; l < K; ++l) {
        if (groups[g][l] != g * K + l) fail(name, "group " + std::to_string(g) + " is " + list(groups[g]));
      }
    }
  }
  if (g_rank == 0) {
    std::string all;
    for (const auto& grp : groups) all += list(grp);
    std::printf("%s: G=%d K=%d groups %s\n", name, G, K, all.c_str());
  }

  // The exchange: Q, K, V sequence-sharded [b_loc, S/K, H, D] (BSHD, bf16), filled with a function of global
  // coordinates; outputs poisoned.
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  desc.layout = BASP_LAYOUT_BSHD;
  desc.dtype = BASP_DTYPE_BF16;
  desc.seq_len = shape.seq_len;
  desc.head_dim = shape.head_dim;
  desc.num_tensors = static_cast<int32_t>(shape.heads.size());
  for (size_t t = 0; t < shape.heads.size(); ++t) desc.num_heads[t] = shape.heads[t];
  basp_plan_t plan = nullptr;
  check_status(basp_plan_create(comm, &desc, &plan), "basp_plan_create");
  const int64_t elem = 2, b_loc = me.num_sequences, s_loc = shape.seq_len / K, D = shape.head_dim;
  const size_t nt = shape.heads.size();
  const uint64_t seed = 0x51ce + static_cast<uint64_t>(placement);
  std::vector<std::vector<uint8_t>> in(nt), mid(nt), back(nt);
  std::vector<const void*> in_p(nt), mid_cp(nt);
  std::vector<void*> mid_p(nt), back_p(nt);
  int64_t payload_per_peer = 0;  // bytes a rank sends each group peer in one exchange, all tensors
  for (size_t t = 0; t < nt; ++t) {
    const int64_t H = shape.heads[t];
    const int64_t bytes = b_loc * s_loc * H * D * elem;
    payload_per_peer += bytes / K;
    in[t].resize(bytes);
    for (int64_t b = 0; b < b_loc; ++b)
      for (int64_t s = 0; s < s_loc; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t e = 0; e < elem; ++e)
              in[t][(((b * s_loc + s) * H + h) * D + d) * elem + e] =
                  pattern_byte(seed, t, me.first_sequence + b, me.token_begin + s, h, d, e);
    mid[t].assign(bytes, kPoison);
    back[t].assign(bytes, kPoison);
    in_p[t] = in[t].data();
    mid_p[t] = mid[t].data();
    mid_cp[t] = mid[t].data();
    back_p[t] = back[t].data();
  }

  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t tx_before = link_tx_bytes();
  MPI_Barrier(MPI_COMM_WORLD);
  check_status(basp_scatter(plan, in_p.data(), mid_p.data(), nullptr), "basp_scatter");
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  check_status(basp_plan_query(plan, &info), "basp_plan_query");
  const int32_t scatter_path = info.last_path;
  check_status(basp_gather(plan, mid_cp.data(), back_p.data(), nullptr), "basp_gather");
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t tx_after = link_tx_bytes();

  int64_t wrong = 0, wrong_back = 0;
  for (size_t t = 0; t < nt; ++t) {
    const int64_t hk = shape.heads[t] / K;
    for (int64_t b = 0; b < b_loc; ++b)
      for (int64_t s = 0; s < shape.seq_len; ++s)
        for (int64_t h = 0; h < hk; ++h)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t e = 0; e < elem; ++e) {
              const uint8_t want = pattern_byte(seed, t, me.first_sequence + b, s, me.group_position * hk + h, d, e);
              wrong += mid[t][(((b * shape.seq_len + s) * hk + h) * D + d) * elem + e] != want;
            }
    wrong_back += static_cast<int64_t>(in[t].size()) -
                  std::inner_product(in[t].begin(), in[t].end(), back[t].begin(), int64_t{0}, std::plus<>(),
                                     [](uint8_t a, uint8_t b) { return int64_t{a == b}; });
  }
  if (wrong || wrong_back) {
    fail(name, std::to_string(wrong) + " wrong bytes after scatter, " + std::to_string(wrong_back) + " after gather");
  }
  // A group spanning nodes cannot use the one-node paths (cross-memory attach, shared memory); a node-local one
  // must take the direct path when BASP_MPI_TRANSPORT=direct forces it (a spanning one would fail to plan).
  if (!expect_local && scatter_path != BASP_PATH_P2P) {
    fail(name, "a group spanning nodes took path " + std::to_string(scatter_path) + ", expected P2P (" +
                   std::to_string(BASP_PATH_P2P) + ")");
  }
  const char* forced = std::getenv("BASP_MPI_TRANSPORT");
  if (expect_local && forced != nullptr && std::strcmp(forced, "direct") == 0 && scatter_path != BASP_PATH_DIRECT) {
    fail(name, "BASP_MPI_TRANSPORT=direct, node-local group, yet path " + std::to_string(scatter_path));
  }

  // What the link must have carried: every ordered pair of group peers on different nodes, both directions.
  int64_t cross_pairs = 0;
  for (const auto& grp : groups)
    for (int32_t a : grp)
      for (int32_t b : grp) cross_pairs += a != b && node_of[a] != node_of[b];
  const int64_t expected = 2 * cross_pairs * payload_per_peer;                     // scatter + gather
  const int64_t moved = 2 * static_cast<int64_t>(n) * (K - 1) * payload_per_peer;  // all peers, both ways
  if (g_rank == 0) {
    const int64_t delta = tx_after - tx_before;
    std::printf("%s: path %d, link carried %lld bytes, inter-node payload %lld of %lld bytes exchanged\n", name,
                scatter_path, static_cast<long long>(delta), static_cast<long long>(expected),
                static_cast<long long>(moved));
    if (tx_before < 0 || tx_after < 0) {
      fail(name, "cannot read /sys/class/net/lo/statistics/tx_bytes");
    } else if (expected > 0 && delta < expected) {
      fail(name, "the link carried " + std::to_string(delta) + " bytes, less than the inter-node payload " +
                     std::to_string(expected) + ": inter-node bytes did not cross it");
    } else if (expected == 0 && delta * 20 > moved) {
      fail(name, "node-local groups, yet the link carried " + std::to_string(delta) + " bytes (" +
                     std::to_string(moved) + " exchanged in all)");
    }
  }
  check_status(basp_plan_destroy(plan), "basp_plan_destroy");
  check_status(basp_comm_destroy(comm), "basp_comm_destroy");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 4 || (std::strcmp(argv[3], "block") != 0 && std::strcmp(argv[3], "cyclic") != 0)) {
    if (g_rank == 0) std::fprintf(stderr, "usage: test_sim_placement <nodes> <ranks_per_node> block|cyclic\n");
    MPI_Finalize();
    return 2;
  }
  const int nodes = std::atoi(argv[1]), per_node = std::atoi(argv[2]);
  const bool cyclic = std::strcmp(argv[3], "cyclic") == 0;
  if (nodes < 2 || per_node < 2 || nodes * per_node != n) {
    if (g_rank == 0) {
      std::fprintf(stderr,
                   "test_sim_placement: needs nodes x ranks_per_node >= 2 x 2 ranks (got %d) under "
                   "scripts/sim-cluster\n",
                   n);
    }
    MPI_Finalize();
    return 1;
  }
  // The name the library's node identity starts from: BASP_NODE_ID when sim-cluster exports it, else the host
  // name (sim-cluster --no-node-id: each fake node then has its own host name, in its own UTS namespace).
  char id[64] = {};
  const char* node_id = std::getenv("BASP_NODE_ID");
  if (node_id != nullptr && node_id[0] != '\0') {
    std::snprintf(id, sizeof(id), "%s", node_id);
  } else {
    gethostname(id, sizeof(id) - 1);
  }
  const char* id_source = node_id != nullptr && node_id[0] != '\0' ? "BASP_NODE_ID" : "host name";

  // 1. MPI's nodes: a node is named by the world rank of its first rank.
  MPI_Comm shared = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
  int leader = g_rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, shared);
  MPI_Comm_free(&shared);
  std::vector<int> node_of(n);
  MPI_Allgather(&leader, 1, MPI_INT, node_of.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<char> ids(64 * static_cast<size_t>(n));
  MPI_Allgather(id, 64, MPI_CHAR, ids.data(), 64, MPI_CHAR, MPI_COMM_WORLD);
  if (g_rank == 0) {
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        const bool mpi_same = node_of[a] == node_of[b];
        const bool want_same = cyclic ? a % nodes == b % nodes : a / per_node == b / per_node;
        const bool id_same = std::strncmp(&ids[64 * a], &ids[64 * b], 64) == 0;
        if (mpi_same != want_same) {
          fail("MPI_COMM_TYPE_SHARED", "ranks " + std::to_string(a) + " and " + std::to_string(b) +
                                           (mpi_same ? " share" : " do not share") + " a node, " + argv[3] +
                                           " numbering over " + argv[1] + " nodes says otherwise");
        }
        if (id_same != mpi_same) {
          fail(id_source, "ranks " + std::to_string(a) + " (" + &ids[64 * a] + ") and " + std::to_string(b) + " (" +
                              &ids[64 * b] + ") disagree with MPI_COMM_TYPE_SHARED");
        }
      }
    }
    std::string map;
    for (int r = 0; r < n; ++r) map += std::string(r ? " " : "") + std::to_string(r) + ":" + &ids[64 * r];
    std::printf("test_sim_placement: %d nodes x %d ranks, %s numbering, nodes by %s: %s\n", nodes, per_node, argv[3],
                id_source, map.c_str());
  }

  // 2 and 3. B = nodes: G = nodes groups of K = ranks_per_node, exactly one node's worth each.
  const int64_t K = per_node;
  const Shape shape{1024 * K, 64, {4 * K, K, K}};
  check_placement(BASP_PLACEMENT_TOPOLOGY, nodes, node_of, true, shape);
  check_placement(BASP_PLACEMENT_CONTIGUOUS, nodes, node_of, !cyclic, shape);

  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("test_sim_placement: %s (%d failure(s))\n", failures ? "FAILED" : "passed", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
