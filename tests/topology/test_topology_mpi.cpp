// Topology placement across processes: every rank pretends to be on node (rank % NODES) through BASP_NODE_ID,
// the way several real nodes would number their ranks round-robin. Checks, through the C ABI, that TOPOLOGY
// (and DEFAULT) comms keep groups on one node wherever sizes allow, that CONTIGUOUS keeps the paper's rule, and
// that the live discovery of this GPU-less machine reports no NVLink information and still places by node.
//
// Usage: mpirun -n N test_topology_mpi NODES
#include <dlfcn.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "topology/rank_locality.h"
#include "topology/topology.h"
#include "transport/mpi/mpi_bootstrap.h"

namespace {

// Every rank's record, by rank, over the library's own MPI bootstrap.
std::vector<basp::topology::RankLocality> allgather_locality(MPI_Comm comm, const basp::topology::RankLocality& mine) {
  auto parent = basp::transport::mpi::parent_bootstrap(MPI_Comm_c2f(comm));
  return basp::transport::allgather_records(*parent, mine, "the gather of the ranks' locations",
                                            basp::detail::Deadline(0));
}

int g_rank = 0;
int g_failures = 0;

#define EXPECT(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "rank %d: FAILED %s: ", g_rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                           \
      std::fprintf(stderr, "\n");                                  \
      ++g_failures;                                                \
    }                                                              \
  } while (0)

std::vector<std::vector<int32_t>> comm_groups(int64_t micro_batch, int32_t placement) {
  basp_comm_config_t c = BASP_COMM_CONFIG_INITIALIZER;
  c.micro_batch = micro_batch;
  c.placement = placement;
  basp_comm_t comm = nullptr;
  std::vector<std::vector<int32_t>> out;
  if (basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &c, &comm) != BASP_SUCCESS) {
    EXPECT(false, "basp_comm_create_mpi(B=%lld, placement=%d): %s", static_cast<long long>(micro_batch), placement,
           basp_last_error());
    return out;
  }
  basp_rank_info_t info = BASP_RANK_INFO_INITIALIZER;
  basp_comm_query(comm, -1, 0, &info);
  for (int32_t g = 0; g < info.num_groups; ++g) {
    std::vector<int32_t> ranks(static_cast<size_t>(info.group_size));
    EXPECT(basp_comm_group_ranks(comm, g, ranks.data(), info.group_size) == BASP_SUCCESS, "%s", basp_last_error());
    out.push_back(ranks);
  }
  basp_comm_destroy(comm);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 2;
  if (nodes < 1) {
    std::fprintf(stderr, "usage: test_topology_mpi NODES (got \"%s\")\n", argv[1]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::string me = "fake-node-" + std::to_string(g_rank % nodes);
  setenv("BASP_NODE_ID", me.c_str(), 1);
  auto node_of = [nodes](int32_t r) { return r % nodes; };

  // The live path: this machine's discovery, gathered like a communicator factory does.
  const basp::topology::Topology& topo = basp::topology::local_topology();
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    EXPECT(!topo.has_nvlink_info() && topo.link_status().rfind("no NVLink information", 0) == 0, "status \"%s\"",
           topo.link_status().c_str());
  } else {
    dlclose(nvml);
    if (g_rank == 0) std::printf("NOTE: libnvidia-ml.so.1 present: the no-driver path is not exercised here\n");
  }
  EXPECT(topo.node().name == me, "node \"%s\", expected \"%s\"", topo.node().name.c_str(), me.c_str());
  const auto records = allgather_locality(MPI_COMM_WORLD, basp::topology::make_rank_locality(topo, -1));
  for (int32_t r = 0; r < size; ++r) {
    for (int32_t s = 0; s < size; ++s) {
      EXPECT((records[static_cast<size_t>(r)].node_key == records[static_cast<size_t>(s)].node_key) ==
                 (node_of(r) == node_of(s)),
             "ranks %d and %d", r, s);
    }
  }

  std::map<int, int> per_node;
  for (int32_t r = 0; r < size; ++r) per_node[node_of(r)]++;
  for (int64_t b = 1; b <= size; ++b) {
    if (size % b != 0) continue;
    const int32_t k = static_cast<int32_t>(size / b);
    const auto topology = comm_groups(b, BASP_PLACEMENT_TOPOLOGY);
    const auto by_default = comm_groups(b, BASP_PLACEMENT_DEFAULT);
    const auto contiguous = comm_groups(b, BASP_PLACEMENT_CONTIGUOUS);
    EXPECT(topology == by_default, "B=%lld: DEFAULT differs from TOPOLOGY", static_cast<long long>(b));
    // Every node holds floor(c / K) of the groups entirely; with K dividing every node's count, all of them.
    int whole = 0;
    int required = 0;
    for (const auto& [node, c] : per_node) required += c / k;
    for (const auto& m : topology) {
      std::set<int> ns;
      for (int32_t r : m) ns.insert(node_of(r));
      whole += ns.size() == 1 ? 1 : 0;
    }
    EXPECT(whole >= required, "B=%lld K=%d: %d groups on one node, at least %d expected", static_cast<long long>(b), k,
           whole, required);
    for (size_t g = 0; g < contiguous.size(); ++g) {
      for (int32_t p = 0; p < k; ++p) {
        EXPECT(contiguous[g][static_cast<size_t>(p)] == static_cast<int32_t>(g) * k + p, "CONTIGUOUS B=%lld",
               static_cast<long long>(b));
      }
    }
  }

  int total = 0;
  MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf("%s: %d ranks on %d pretended nodes, %d failure(s)\n", total ? "FAIL" : "PASS", size, nodes, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
