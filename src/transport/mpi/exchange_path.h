// The MPI backend's exchange paths (docs/design.md): small classes behind one interface, one of which every plan
// takes, fixed collectively at plan creation (mpi_executor.cpp). Each documents the control rounds
// (control.h) one exchange costs; tests read them from PlanExecutor::last_control_rounds().
//
//   local   K = 1: a local copy.                                                            0 rounds
//   p2p     anywhere: point-to-point messages, packed on one side.                          1 round
//   cma     one node: cross-memory attach, each rank reads its rows out of its peers.        2 rounds
//   staged  one node: two plain copies through staging regions in shared memory.           2 rounds
//   shared  one node, per exchange instead of cma or staged: plain copies straight between the tensors, when
//           every rank's head-sharded tensors lie in basp_mem_alloc memory.                 2 rounds
// A staged exchange whose head-sharded tensors lie in basp_mem_alloc memory on some ranks but not all costs a
// third round (kReady): those ranks fill their staging regions only once round 1 showed the others do not share.
// Every path executes one head chunk (plan/head_chunks.h) like a whole exchange over the chunk's heads: the
// geometry carries them (layout::Geometry::moved), the host copies and the workspace offsets follow it. A gather
// chunk sums a head several positions hold when its last contribution arrives, reading the earlier ones where they
// landed in earlier chunks (their pieces of the workspace or staging regions, or the holders' tensors).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "basp/basp.h"
#include "common/deadline.h"
#include "layout/host_copy.h"
#include "plan/exchange.h"
#include "transport/mpi/control.h"
#include "transport/mpi/mpi_util.h"
#include "transport/mpi/shared_memory.h"
#include "transport/mpi/workspace.h"

namespace basp::transport::mpi {

// One scatter or gather as the executor hands it to the path.
struct Exchange {
  Direction direction;
  const plan::CallGeometry& call;  // its tokens, head chunk and geometry, derived once
  const layout::Geometry* geom;    // call.tensors
  const void* const* inputs;
  void* const* outputs;
  const detail::Deadline& deadline;

  bool scatter() const { return direction == Direction::kScatter; }
  // The head-sharded side of tensor t: the scatter's output, the gather's input; and the sequence-sharded side.
  const void* head(int32_t t) const { return scatter() ? outputs[t] : inputs[t]; }
  const void* seq(int32_t t) const { return scatter() ? inputs[t] : outputs[t]; }
};

// What the paths of one plan share.
struct PathContext {
  const plan::ExchangePlan* plan = nullptr;
  PlanControl* control = nullptr;
  const GroupSpec* group = nullptr;
  std::shared_ptr<SharedMemory> memory;  // the comm's basp_mem_alloc memory
  // Position -> rank on the communicators the plan's messages travel on: the group's own (position j is rank j), or
  // the comm's world communicators for a batch plan (the world ranks of its group's members).
  std::vector<int32_t> ranks;
  // The p2p and cma paths' workspaces: the plan's own for both directions, or the comm's pool for its batch plans
  // (one per direction).
  DirectionWorkspaces workspaces;
  int peer_rank(int32_t j) const { return ranks[static_cast<size_t>(j)]; }
};

class ExchangePath {
 public:
  virtual ~ExchangePath() = default;
  virtual basp_path_t id() const = 0;
  // Memory the path owns (host workspace or staging region).
  virtual int64_t workspace_bytes() const { return 0; }
  // One exchange, its control rounds included; returns the path that moved the bytes (BASP_PATH_SHARED may stand
  // in for cma or staged).
  virtual basp_path_t run(const Exchange& x) = 0;
};

// The shared-memory path, used per exchange by the cma and staged paths: round 1 carried every rank's tensor
// addresses (inputs, then outputs), so every rank reaches the same verdict without another round.
class SharedPath {
 public:
  explicit SharedPath(const PathContext& context);
  // Whether every rank's head-sharded tensors lie in basp_mem_alloc memory (from the addresses of round 1).
  bool usable(const Exchange& x);
  // The copies, one row-major pass over the whole group; usable() must have said yes.
  void copy(const Exchange& x);
  // Whether this rank's own head-sharded tensors lie in basp_mem_alloc memory (before round 1).
  bool mine_usable(const Exchange& x) const;

 private:
  PathContext c_;
  std::vector<layout::RowPlace> places_;  // per position: its head-sharded tensor, mapped here
};

// The addresses every path publishes in round 1: inputs, then outputs; 2 * num_tensors of them.
int32_t tensor_addresses(const Exchange& x, int32_t num_tensors, uint64_t* out);

std::unique_ptr<ExchangePath> make_local_path(const PathContext& context);
// The communicator a p2p path sends its data on: a plan's own duplicate of its group (its data tags never meet
// another plan's), or the comm's world communicator for batch data (batch executes run one at a time).
struct DataComm {
  OwnedComm owned;  // when the path owns it
  MPI_Comm comm = MPI_COMM_NULL;
  static DataComm duplicate(MPI_Comm group) {  // collective over `group`
    DataComm d;
    d.owned = dup_with_errors_return(group);
    d.comm = d.owned.get();
    return d;
  }
  static DataComm shared(MPI_Comm comm) {
    DataComm d;
    d.comm = comm;
    return d;
  }
};
std::unique_ptr<ExchangePath> make_p2p_path(const PathContext& context, DataComm data);
// `pids`: the process of each position.
std::unique_ptr<ExchangePath> make_cma_path(const PathContext& context, std::vector<pid_t> pids);
// Collective over `group`: the staging regions; nullptr (on every rank alike) when the ranks cannot map each
// other's memory.
std::unique_ptr<ExchangePath> make_staged_path(const PathContext& context, const CollectiveScope& group,
                                               const detail::Deadline& deadline);
class NodeStaging;
// Not collective: a batch plan's staged path (a group on one node with staging) over the comm's node staging.
std::unique_ptr<ExchangePath> make_batch_staged_path(const PathContext& context, NodeStaging& staging);

}  // namespace basp::transport::mpi
