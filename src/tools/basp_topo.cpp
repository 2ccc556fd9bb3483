// basp-topo: what libbasp sees of the machine and which groups it would form (docs/topology.md).
//
//   basp-topo                         this machine's GPU matrix
//   mpirun -n 16 basp-topo -B 2       every rank's node and GPU (rank i of a node takes GPU i), and the groups
//   basp-topo --import dgx.xml --nodes 2 --map-by node -B 2
//                                     a recorded machine, as 2 nodes with ranks dealt round-robin
//   basp-topo --export node.xml       write this machine's topology as hwloc XML
//   mpirun -n 8 basp-topo --calibrate --save-cost-model cluster.txt
//                                     measure the batch plans' cost model on the live comm, print and save it
//   basp-topo --cost-model cluster.txt  print a saved cost model's table
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "common/error.h"
#include "plan/cost_model.h"
#include "plan/groups.h"
#include "runtime/calibrate.h"
#include "runtime/comm.h"
#include "runtime/create.h"
#include "tools/topo_report.h"
#include "topology/rank_locality.h"
#include "topology/topology.h"
#if BASP_HAVE_MPI
#include <mpi.h>

#include "transport/mpi/mpi_bootstrap.h"
#endif

namespace {

#if BASP_HAVE_MPI
// Every rank's record, by rank, over the library's own MPI bootstrap.
std::vector<basp::topology::RankLocality> allgather_locality(MPI_Comm comm, const basp::topology::RankLocality& mine) {
  auto parent = basp::transport::mpi::parent_bootstrap(MPI_Comm_c2f(comm));
  return basp::transport::allgather_records(*parent, mine, "the gather of the ranks' locations",
                                            basp::detail::Deadline(0));
}
#endif

using basp::topology::RankLocality;
using basp::topology::Topology;

constexpr int kExitUsage = 2;
constexpr int kExitError = 1;

const char* const kUsage =
    "Usage: basp-topo [options]\n"
    "  --import FILE         read the topology from a hwloc XML file instead of this machine\n"
    "  --export FILE         write the topology (this machine's or the imported one) as hwloc XML\n"
    "  -B, --micro-batch B   print the groups formed for micro-batch B\n"
    "  -G, --num-groups G    number of groups (default: gcd(N, B))\n"
    "  --placement P         topology (default) or contiguous\n"
    "  --nodes N             simulate N nodes of this topology (N * ranks-per-node ranks)\n"
    "  --ranks-per-node R    with --nodes: ranks per node (default: its GPU count, or 1 without GPUs)\n"
    "  --map-by slot|node    with --nodes: number ranks node by node (slot, default) or round-robin (node)\n"
    "  --no-mpi              do not initialise MPI even when started by mpirun/srun\n"
    "  --calibrate           under mpirun: measure the exchange cost model of batch plans on the world (a few\n"
    "                        seconds) and print its table (docs/batch.md)\n"
    "  --save-cost-model F   with --calibrate: write the model as text (basp_comm_import_cost_model reads it)\n"
    "  --cost-model F        print the table of a saved cost model\n"
    "  -h, --help            this text\n"
    "Under mpirun every rank reports its own node (BASP_NODE_ID overrides the node identity) and the i-th rank\n"
    "of a node takes GPU i. Exit status: 0 success, 1 error (e.g. a bad topology file), 2 bad usage.\n";

struct Options {
  std::string import_file;
  std::string export_file;
  int64_t micro_batch = 0;
  int32_t num_groups = -1;
  basp_placement_t placement = BASP_PLACEMENT_TOPOLOGY;
  int32_t nodes = 0;
  int32_t ranks_per_node = 0;
  bool map_by_node = false;
  bool no_mpi = false;
  bool calibrate = false;
  std::string save_model;
  std::string load_model;
};

struct UsageError {
  std::string message;
};

int64_t parse_count(const std::string& flag, const char* text, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v <= 0 || v > max) {
    throw UsageError{flag + " (" + text + ") must be an integer in 1.." + std::to_string(max)};
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw UsageError{a + " needs a value"};
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--import") {
      o.import_file = value();
    } else if (a == "--export") {
      o.export_file = value();
    } else if (a == "-B" || a == "--micro-batch") {
      o.micro_batch = parse_count(a, value(), INT64_MAX);
    } else if (a == "-G" || a == "--num-groups") {
      o.num_groups = static_cast<int32_t>(parse_count(a, value(), INT32_MAX));
    } else if (a == "--placement") {
      const std::string p = value();
      if (p == "topology") {
        o.placement = BASP_PLACEMENT_TOPOLOGY;
      } else if (p == "contiguous") {
        o.placement = BASP_PLACEMENT_CONTIGUOUS;
      } else {
        throw UsageError{"--placement (" + p + ") must be topology or contiguous"};
      }
    } else if (a == "--nodes") {
      o.nodes = static_cast<int32_t>(parse_count(a, value(), 1 << 20));
    } else if (a == "--ranks-per-node") {
      o.ranks_per_node = static_cast<int32_t>(parse_count(a, value(), 1 << 16));
    } else if (a == "--map-by") {
      const std::string m = value();
      if (m != "slot" && m != "node") throw UsageError{"--map-by (" + m + ") must be slot or node"};
      o.map_by_node = m == "node";
    } else if (a == "--no-mpi") {
      o.no_mpi = true;
    } else if (a == "--calibrate") {
      o.calibrate = true;
    } else if (a == "--save-cost-model") {
      o.save_model = value();
    } else if (a == "--cost-model") {
      o.load_model = value();
    } else {
      throw UsageError{"unknown argument \"" + a + "\""};
    }
  }
  if (o.nodes == 0 && (o.ranks_per_node != 0 || o.map_by_node)) {
    throw UsageError{"--ranks-per-node and --map-by need --nodes"};
  }
  if (o.num_groups != -1 && o.micro_batch == 0) throw UsageError{"-G needs -B"};
  if (!o.save_model.empty() && !o.calibrate) throw UsageError{"--save-cost-model needs --calibrate"};
  return o;
}

// One rank per GPU of `topo` on each of `nodes` simulated nodes (copies of topo with their own node keys).
std::vector<RankLocality> simulated_ranks(const Topology& topo, const Options& o) {
  const int32_t per_node = o.ranks_per_node > 0 ? o.ranks_per_node : std::max(topo.num_gpus(), 1);
  const int32_t nodes = std::max(o.nodes, 1);
  const int64_t total = static_cast<int64_t>(per_node) * nodes;
  BASP_CHECK_ARG(total <= INT32_MAX, "--nodes * ranks per node (", total, ") is too many ranks");
  std::vector<RankLocality> ranks(static_cast<size_t>(total));
  for (int32_t node = 0; node < nodes; ++node) {
    basp::topology::NodeIdentity id = topo.node();
    if (nodes > 1) {
      id.name += "#" + std::to_string(node);
      id.key = basp::topology::fnv1a64(id.name + "\n" + basp::topology::key_to_hex(topo.node().key));
    }
    for (int32_t local = 0; local < per_node; ++local) {
      const int64_t rank =
          o.map_by_node ? static_cast<int64_t>(local) * nodes + node : static_cast<int64_t>(node) * per_node + local;
      RankLocality r = basp::topology::make_rank_locality(topo, local < topo.num_gpus() ? local : -1);
      const basp::topology::RankLocality named = basp::topology::make_rank_locality(id);
      r.node_key = named.node_key;
      std::memcpy(r.node_name, named.node_name, sizeof(r.node_name));
      ranks[static_cast<size_t>(rank)] = r;
    }
  }
  return ranks;
}

#if BASP_HAVE_MPI
bool started_by_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}
#endif

void print_groups(const Options& o, const std::vector<RankLocality>& ranks) {
  if (o.micro_batch == 0) return;
  basp::runtime::CommOptions options;
  options.micro_batch = o.micro_batch;
  options.num_groups = o.num_groups;
  options.placement = o.placement;
  const auto n = static_cast<int32_t>(ranks.size());
  const basp::plan::GroupLayout layout = basp::runtime::plan_groups(n, options, ranks);
  std::cout << "\n"
            << basp::tools::groups_report(layout, ranks,
                                          o.placement == BASP_PLACEMENT_CONTIGUOUS ? "contiguous" : "topology");
}

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  BASP_CHECK_ARG(f != nullptr, "--cost-model (", path, ") cannot be opened: ", std::strerror(errno));
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (size_t{1} << 20)) text.append(buf, n);
  std::fclose(f);
  return text;
}

// --calibrate: a comm of batch plans only over the world, calibrated (collective), its table on rank 0.
void calibrate(const Options& o, int rank, int size, void* mpi_comm) {
#if BASP_HAVE_MPI
  BASP_CHECK_ARG(mpi_comm != nullptr && size >= 2, "--calibrate needs at least 2 ranks under mpirun (", size, ")");
  basp_comm_config_v1 config = BASP_COMM_CONFIG_INITIALIZER;
  config.micro_batch = 0;
  config.batch_capacity = 1 << 20;
  basp::runtime::CreateCall call;
  call.config = &config;
  const auto comm = basp::runtime::comm_from_mpi(MPI_Comm_c2f(*static_cast<MPI_Comm*>(mpi_comm)), call);
  basp::runtime::calibrate(comm, 0, 0);
  if (rank != 0) return;
  const basp::plan::CostModel model = comm->cost_model();
  std::cout << "\n" << basp::tools::cost_model_report(model, size);
  if (!o.save_model.empty()) {
    std::FILE* f = std::fopen(o.save_model.c_str(), "wb");
    BASP_CHECK_ARG(f != nullptr, "--save-cost-model (", o.save_model, ") cannot be written: ", std::strerror(errno));
    const std::string text = basp::plan::export_cost_model(model);
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    BASP_CHECK_ARG(std::fclose(f) == 0 && ok, "--save-cost-model (", o.save_model, "): the write failed");
    std::cout << "Wrote " << o.save_model << "\n";
  }
#else
  (void)o;
  (void)rank;
  (void)size;
  (void)mpi_comm;
  basp::detail::fail(BASP_ERROR_UNSUPPORTED, "--calibrate needs a build with MPI");
#endif
}

int run(const Options& o, int rank, int size, void* mpi_comm) {
  if (!o.load_model.empty()) {
    if (rank == 0) {
      const basp::plan::CostModel model = basp::plan::import_cost_model(read_file(o.load_model));
      std::cout << basp::tools::cost_model_report(model, std::max(model.world_size, 8));
    }
    if (!o.calibrate) return 0;
  }
  const bool simulated = !o.import_file.empty() || o.nodes > 0;
  const Topology topo = o.import_file.empty() ? Topology::discover() : Topology::load_xml(o.import_file);
  std::vector<RankLocality> ranks;
  if (simulated || size == 1) {
    ranks = simulated_ranks(topo, o);
  } else {
#if BASP_HAVE_MPI
    // First the nodes, to number the ranks of each node; then the full records with each rank's GPU.
    MPI_Comm comm = *static_cast<MPI_Comm*>(mpi_comm);
    const auto nodes = allgather_locality(comm, basp::topology::make_rank_locality(topo.node()));
    int32_t local = 0;
    for (int r = 0; r < rank; ++r) local += nodes[static_cast<size_t>(r)].node_key == topo.node().key ? 1 : 0;
    ranks = allgather_locality(comm, basp::topology::make_rank_locality(topo, local < topo.num_gpus() ? local : -1));
#else
    (void)mpi_comm;
#endif
  }
  BASP_CHECK_ARG(!o.calibrate || !simulated, "--calibrate measures the live ranks: it takes no --import or --nodes");
  if (rank != 0) {
    if (o.calibrate) calibrate(o, rank, size, mpi_comm);
    return 0;
  }
  std::cout << "basp-topo (libbasp " << BASP_VERSION_STRING << ")\n" << basp::tools::topology_report(topo);
  if (topo.num_gpus() > 0) std::cout << "\n" << basp::tools::matrix_legend();
  if (!o.export_file.empty()) {
    topo.export_xml(o.export_file);
    std::cout << "\nWrote " << o.export_file << "\n";
  }
  std::cout << "\n" << basp::tools::ranks_report(ranks);
  print_groups(o, ranks);
  if (o.calibrate) calibrate(o, rank, size, mpi_comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "basp-topo: " << e.message << "\n" << kUsage;
    return kExitUsage;
  }
  int rank = 0;
  int size = 1;
  void* comm_ptr = nullptr;
#if BASP_HAVE_MPI
  const bool use_mpi = !o.no_mpi && started_by_launcher();
  MPI_Comm comm = MPI_COMM_WORLD;
  if (use_mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    comm_ptr = &comm;
  }
#endif
  int status = 0;
  try {
    status = run(o, rank, size, comm_ptr);
  } catch (const std::exception& e) {
    std::cerr << "basp-topo: error: " << e.what() << "\n";
    status = kExitError;
  }
#if BASP_HAVE_MPI
  if (use_mpi) {
    // A failure on one rank must not leave the others waiting in a collective.
    if (status != 0 && size > 1) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
  }
#endif
  return status;
}
