// MPI helpers shared by the perf binaries: agreeing on failures, combining per-rank times, describing the run.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace basp::bench {

// Runs `body` on every rank and agrees on the outcome: false (after the lowest failing rank printed
// "<program>: error: <message>" to stderr) when any rank threw. Only for steps whose failures are the same on
// every rank or happen before any communication (argument checks, plan validation): a rank that fails inside a
// collective the others completed would leave them waiting.
bool all_succeed(MPI_Comm comm, const char* program, const std::function<void()>& body);

// One time for the whole communicator, from each rank's own: 0 rank 0's, 1 mean, 2 min, 3 max (nccl-tests -a).
double combine_time(MPI_Comm comm, double seconds, int average);

// The rank on this node (MPI_COMM_TYPE_SHARED), for picking a GPU.
int local_rank(MPI_Comm comm);

// "2025-01-31 12:34 UTC".
std::string utc_date();

// Comment lines "#  Rank  r Pid p on host" for every rank (collective; the text is only meaningful on rank 0).
std::string rank_lines(MPI_Comm comm);

}  // namespace basp::bench
