// The studies that run under mpirun: study.h's main with MPI around it, and the slowest rank's time.
#pragma once

#include <mpi.h>

#include "study.h"

namespace basp::bench {

// study_main between MPI_Init and MPI_Finalize: every rank parses the same command line, only rank 0 prints the
// usage and the errors of a bad option (exit 2 on every rank).
int mpi_study_main(const char* program, int argc, char** argv, StudyOptions& options, const std::function<int()>& run);

// The largest of every rank's `mine` over `comm`: a step's time is its slowest rank's.
double slowest(double mine, MPI_Comm comm);

}  // namespace basp::bench
