#include "transport/mpi/mpi_util.h"

namespace basp::transport::mpi {

std::string error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

bool mpi_alive() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

OwnedComm dup_with_errors_return(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  BASP_MPI_CHECK(MPI_Comm_dup(comm, &out));
  OwnedComm owned(out);
  BASP_MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return owned;
}

}  // namespace basp::transport::mpi
