/* A C99 program against the installed package: the header must compile with -std=c99 -pedantic -Werror, and
 * the library must redistribute correctly when called from C. Run under mpirun. */
#include <basp/basp.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    basp_status_t st_ = (call);                                                                  \
    if (st_ != BASP_SUCCESS) {                                                                   \
      fprintf(stderr, "%s failed: %s: %s\n", #call, basp_status_string(st_), basp_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

int main(int argc, char** argv) {
  basp_comm_config_t cfg = BASP_COMM_CONFIG_INITIALIZER;
  basp_plan_desc_t desc = BASP_PLAN_DESC_INITIALIZER;
  basp_rank_info_t me = BASP_RANK_INFO_INITIALIZER;
  basp_plan_info_t info = BASP_PLAN_INFO_INITIALIZER;
  basp_comm_t comm = NULL;
  basp_plan_t plan = NULL;
  int rank = 0, size = 0, major = 0, minor = 0, patch = 0, bad = 0;
  int64_t i, n, s, h;
  float *in, *mid, *back;
  const void* ins[1];
  void* outs[1];
  basp_status_t st;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(basp_get_version(&major, &minor, &patch));
  if (major != BASP_VERSION_MAJOR || minor != BASP_VERSION_MINOR) {
    fprintf(stderr, "header %d.%d vs library %d.%d\n", BASP_VERSION_MAJOR, BASP_VERSION_MINOR, major, minor);
    return 1;
  }
  /* An error from C: a clear status and message. */
  st = basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm);
  if (st != BASP_ERROR_INVALID_ARGUMENT || strstr(basp_last_error(), "micro_batch (-1)") == NULL) {
    fprintf(stderr, "expected an invalid micro_batch error, got %s: %s\n", basp_status_string(st), basp_last_error());
    return 1;
  }
  cfg.micro_batch = 1; /* one sequence: one group of all ranks */
  CHECK(basp_comm_create_mpi(MPI_Comm_c2f(MPI_COMM_WORLD), &cfg, &comm));
  CHECK(basp_comm_query(comm, -1, 4 * size, &me));
  desc.layout = BASP_LAYOUT_BSHD;
  desc.dtype = BASP_DTYPE_FP32;
  desc.seq_len = 4 * size;
  desc.head_dim = 3;
  desc.num_tensors = 1;
  desc.num_heads[0] = 2 * size;
  CHECK(basp_plan_create(comm, &desc, &plan));
  CHECK(basp_plan_query(plan, &info));
  n = info.seq_sharded_elems[0];
  in = (float*)malloc((size_t)n * sizeof(float));
  mid = (float*)malloc((size_t)n * sizeof(float));
  back = (float*)malloc((size_t)n * sizeof(float));
  /* value = global (token, head, dim) */
  for (s = 0; s < 4; ++s)
    for (h = 0; h < 2 * size; ++h)
      for (i = 0; i < 3; ++i) in[(s * 2 * size + h) * 3 + i] = (float)(((me.token_begin + s) * 1000 + h) * 10 + i);
  for (i = 0; i < n; ++i) mid[i] = back[i] = -1.0f;
  ins[0] = in;
  outs[0] = mid;
  CHECK(basp_scatter(plan, ins, outs, NULL));
  for (s = 0; s < 4 * size; ++s) /* full sequence, my two heads */
    for (h = 0; h < 2; ++h)
      for (i = 0; i < 3; ++i)
        if (mid[(s * 2 + h) * 3 + i] != (float)((s * 1000 + (me.group_position * 2 + h)) * 10 + i)) bad = 1;
  ins[0] = mid;
  outs[0] = back;
  CHECK(basp_gather(plan, ins, outs, NULL));
  if (memcmp(in, back, (size_t)n * sizeof(float)) != 0) bad = 1;
  CHECK(basp_plan_destroy(plan));
  CHECK(basp_comm_destroy(comm));
  free(in);
  free(mid);
  free(back);
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("c99 consumer: %s\n", bad ? "FAILED" : "ok");
  MPI_Finalize();
  return bad;
}
