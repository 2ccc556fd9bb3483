#include "perf_mpi.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <ctime>
#include <exception>
#include <vector>

namespace basp::bench {

bool all_succeed(MPI_Comm comm, const char* program, const std::function<void()>& body) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string message;
  int failed = 0;
  try {
    body();
  } catch (const std::exception& e) {
    message = e.what();
    failed = 1;
  }
  int first_failed = failed ? rank : INT_MAX;
  MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm);
  if (first_failed == rank) std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
  return first_failed == INT_MAX;
}

double combine_time(MPI_Comm comm, double seconds, int average) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  double out = seconds;
  switch (average) {
    case 0: MPI_Bcast(&out, 1, MPI_DOUBLE, 0, comm); break;
    case 2: MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MIN, comm); break;
    case 3: MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, comm); break;
    default: MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_SUM, comm); out /= size;
  }
  return out;
}

int local_rank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string rank_lines(MPI_Comm comm) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  constexpr int kLine = 128;
  char host[64] = {0};
  gethostname(host, sizeof host - 1);
  char line[kLine] = {0};
  std::snprintf(line, sizeof line, "#  Rank %2d Pid %6d on %s\n", rank, static_cast<int>(getpid()), host);
  std::vector<char> all(rank == 0 ? static_cast<size_t>(size) * kLine : 0);
  MPI_Gather(line, kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, comm);
  std::string out;
  for (int r = 0; rank == 0 && r < size; ++r) out += &all[static_cast<size_t>(r) * kLine];
  return out;
}

}  // namespace basp::bench
