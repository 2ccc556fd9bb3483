#include "study_mpi.h"

#include <cstdio>

namespace basp::bench {

int mpi_study_main(const char* program, int argc, char** argv, StudyOptions& options, const std::function<int()>& run,
                   int thread_level) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, thread_level, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    options.parse(argc, argv);
    if (options.help()) {
      if (rank == 0) std::fputs(options.usage().c_str(), stdout);
    } else {
      code = run();
    }
  } catch (const ArgError& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    code = 2;
  }
  MPI_Finalize();
  return code;
}

double slowest(double mine, MPI_Comm comm) {
  double worst = 0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  return worst;
}

}  // namespace basp::bench
