// The studies that run under mpirun: study.h's main with MPI around it, and the slowest rank's time.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>

#include "study.h"

namespace basp::bench {

// study_main between MPI_Init and MPI_Finalize: every rank parses the same command line, only rank 0 prints the
// usage and the errors of a bad option (exit 2 on every rank).
// `thread_level`: what MPI_Init_thread asks for (MPI_THREAD_MULTIPLE for split-phase exchanges).
int mpi_study_main(const char* program, int argc, char** argv, StudyOptions& options, const std::function<int()>& run,
                   int thread_level = MPI_THREAD_SINGLE);

// The largest of every rank's `mine` over `comm`: a step's time is its slowest rank's.
double slowest(double mine, MPI_Comm comm);

// The run of a study over MPI: checks every item bit-exactly (when `check`: check_one(item) returns its wrong
// bytes), then times them all. An exception on any rank aborts the job, since its peers would wait for it forever.
// Returns the wrong bytes counted.
template <typename Items, typename Check, typename Time>
int64_t check_then_time(const char* program, int rank, MPI_Comm world, bool check, Items& items, Check&& check_one,
                        Time&& time_all) {
  int64_t wrong = 0;
  try {
    if (check) {
      for (auto& item : items) wrong += check_one(*item);
    }
    time_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", program, rank, e.what());
    MPI_Abort(world, 3);
  }
  return wrong;
}

}  // namespace basp::bench
