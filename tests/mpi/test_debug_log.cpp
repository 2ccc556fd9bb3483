// BASP_DEBUG=INFO with BASP_DEBUG_FILE (docs/debugging.md): each rank sets both before creating a comm and a plan,
// then reads its own file (host and pid substituted in the pattern) and checks that it holds the comm-creation and
// plan-creation lines, each prefixed "host:pid:rank BASP INFO" with this rank's world rank. Exit 0 on success.
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "basp/basp.h"
#include "exchange_check.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const std::string pattern = dir + "/basp_debug.%h.%p.log";
  char host[HOST_NAME_MAX + 1] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string me =
      std::string(host[0] ? host : "localhost") + ":" + std::to_string(getpid()) + ":" + std::to_string(rank);
  const std::string path =
      dir + "/basp_debug." + (host[0] ? host : "localhost") + "." + std::to_string(getpid()) + ".log";
  std::remove(path.c_str());
  setenv("BASP_DEBUG", "INFO", 1);
  setenv("BASP_DEBUG_FILE", pattern.c_str(), 1);

  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  cfg.micro_batch = 1;  // one group of every rank
  cfg.placement = BASP_PLACEMENT_CONTIGUOUS;
  basp_comm_t comm = nullptr;
  expect(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm) == BASP_SUCCESS, "comm create", rank);
  const basp_plan_desc_t d = basp::test::byte_bshd_desc(4 * size, 64, 2, size);
  basp_plan_t plan = nullptr;
  expect(basp_plan_create(comm, &d, &plan) == BASP_SUCCESS, "plan create", rank);
  basp_plan_destroy(plan);
  basp_comm_destroy(comm);

  std::ifstream in(path);
  expect(in.good(), "no log file " + path, rank);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  bool comm_line = false, groups_line = false, plan_line = false;
  for (const std::string& line : lines) {
    expect(line.rfind(me + " BASP INFO ", 0) == 0, "line without the prefix \"" + me + " BASP INFO\": " + line, rank);
    comm_line =
        comm_line || line.find("basp_comm_create_mpi: comm of " + std::to_string(size) + " ranks") != std::string::npos;
    groups_line = groups_line || line.find("this rank: group 0 position " + std::to_string(rank)) != std::string::npos;
    plan_line = plan_line || (line.find("basp_plan_create: plan") != std::string::npos &&
                              line.find("path") != std::string::npos && line.find("workspace") != std::string::npos);
  }
  expect(comm_line, "no comm-creation line", rank);
  expect(groups_line, "no line with this rank's group and position", rank);
  expect(plan_line, "no plan-creation line (path, workspace)", rank);
  if (failures == 0) std::remove(path.c_str());
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s: %d failure(s) over %d ranks\n", all ? "FAILED" : "passed", all, size);
  MPI_Finalize();
  return all == 0 ? 0 : 1;
}
