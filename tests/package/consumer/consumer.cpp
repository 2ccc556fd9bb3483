// The C++ wrapper from an installed package: RAII handles, exceptions, one Q/K/V exchange checked bit-exactly.
#include <mpi.h>

#include <basp/basp.hpp>
#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    basp::CommConfig cfg;
    cfg.micro_batch = 2 * size;  // K = 1: every rank owns two whole sequences
    basp::Comm comm = basp::Comm::from_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), cfg);
    const basp::RankInfo me = comm.query(8);
    basp::Plan plan(comm, basp::PlanDesc::qkv(BASP_LAYOUT_SBHD, BASP_DTYPE_INT32, 8, 2, 4, 2));
    const int heads[3] = {4, 2, 2};
    std::vector<int32_t> in[3], out[3];
    for (int t = 0; t < 3; ++t) {
      in[t].resize(static_cast<size_t>(8 * 2 * heads[t] * 2));
      for (size_t i = 0; i < in[t].size(); ++i)
        in[t][i] = static_cast<int32_t>((me.first_sequence * 100000) + t * 10000 + i);
      out[t].assign(in[t].size(), -1);
    }
    plan.scatter({in[0].data(), in[1].data(), in[2].data()}, {out[0].data(), out[1].data(), out[2].data()});
    for (int t = 0; t < 3; ++t) bad |= out[t] != in[t];  // K = 1: a local copy
    try {
      basp::Plan wrong(comm, basp::PlanDesc::qkv(BASP_LAYOUT_SBHD, BASP_DTYPE_INT32, 0, 2, 4, 2));
      bad = 1;
    } catch (const basp::Error& e) {
      bad |= e.status() != BASP_ERROR_INVALID_ARGUMENT || std::strstr(e.what(), "seq_len (0)") == nullptr;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) std::printf("cmake consumer: %s\n", bad ? "FAILED" : "ok");
  MPI_Finalize();
  return bad;
}
