// The main of the MPI tests written with Catch2: every rank runs the same session, rank 0 alone reports, and the
// process exit code is the worst rank's result, so a failure on any rank fails the CTest test.
#pragma once

#include <mpi.h>

#include <catch2/catch.hpp>

namespace basp::test {

// Call after MPI_Init (the caller may read its rank and size first); finalises MPI.
inline int run_catch_session_on_all_ranks(int argc, char** argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Catch::Session session;
  if (rank != 0) session.configData().outputFilename = "%debug";  // one report, from rank 0
  int rc = session.applyCommandLine(argc, argv);
  if (rc == 0) rc = session.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

}  // namespace basp::test
