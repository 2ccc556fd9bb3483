/* Prints, as JSON, what python/basp/_abi.py mirrors from basp.h: struct sizes, field offsets and sizes, the
 * bytes of each ..._INITIALIZER, enum values and constants. test_abi.py compares the ctypes mirror with it. */
#include <stddef.h>
#include <stdio.h>

#include "basp/basp.h"

#define FIELD(T, f, sep) \
  printf("      {\"name\": \"%s\", \"offset\": %zu, \"size\": %zu}%s\n", #f, offsetof(T, f), sizeof(((T*)0)->f), sep)
#define CONST(name, sep) printf("    \"%s\": %lld%s\n", #name, (long long)(name), sep)

static void print_bytes(const void* p, size_t n) {
  const unsigned char* b = (const unsigned char*)p;
  size_t i;
  printf("\"");
  for (i = 0; i < n; ++i) printf("%02x", b[i]);
  printf("\"");
}

#define STRUCT_BEGIN(T, init_value, first)                                                                   \
  do {                                                                                                       \
    T init_ = init_value;                                                                                    \
    printf("%s  \"%s\": {\n    \"sizeof\": %zu,\n    \"initializer\": ", first ? "" : ",\n", #T, sizeof(T)); \
    print_bytes(&init_, sizeof(T));                                                                          \
    printf(",\n    \"fields\": [\n");                                                                        \
  } while (0)
#define STRUCT_END() printf("    ]\n  }")

/* A callback field's prototype, printed as text for test_abi.py after the compiler has checked that the field has
 * exactly that type (GCC and Clang; other compilers print it unchecked). */
#if defined(__GNUC__) || defined(__clang__)
#define SAME_TYPE(a, b) ((void)sizeof(char[__builtin_types_compatible_p(a, b) ? 1 : -1]))
#else
#define SAME_TYPE(a, b) ((void)0)
#endif
/* A function's prototype, likewise checked against its declaration in basp.h. */
#define FUNCTION(f, ret, args, sep)                            \
  do {                                                         \
    typedef ret(*proto_t) args;                                \
    SAME_TYPE(__typeof__(&f), proto_t);                        \
    printf("    \"%s\": \"%s %s\"%s\n", #f, #ret, #args, sep); \
  } while (0)
#define PROTOTYPE(T, f, ret, args, sep)                               \
  do {                                                                \
    typedef ret(*proto_t) args;                                       \
    SAME_TYPE(__typeof__(((T*)0)->f), proto_t);                       \
    printf("    \"%s.%s\": \"%s %s\"%s\n", #T, #f, #ret, #args, sep); \
  } while (0)

int main(void) {
  printf("{\n\"structs\": {\n");
  STRUCT_BEGIN(basp_comm_config_v1, BASP_COMM_CONFIG_INITIALIZER, 1);
  FIELD(basp_comm_config_v1, size, ",");
  FIELD(basp_comm_config_v1, magic, ",");
  FIELD(basp_comm_config_v1, version, ",");
  FIELD(basp_comm_config_v1, micro_batch, ",");
  FIELD(basp_comm_config_v1, num_groups, ",");
  FIELD(basp_comm_config_v1, backend, ",");
  FIELD(basp_comm_config_v1, placement, ",");
  FIELD(basp_comm_config_v1, reserved0, ",");
  FIELD(basp_comm_config_v1, timeout_ms, ",");
  FIELD(basp_comm_config_v1, batch_capacity, "");
  STRUCT_END();

  STRUCT_BEGIN(basp_rank_info_v1, BASP_RANK_INFO_INITIALIZER, 0);
  FIELD(basp_rank_info_v1, size, ",");
  FIELD(basp_rank_info_v1, magic, ",");
  FIELD(basp_rank_info_v1, version, ",");
  FIELD(basp_rank_info_v1, world_size, ",");
  FIELD(basp_rank_info_v1, rank, ",");
  FIELD(basp_rank_info_v1, num_groups, ",");
  FIELD(basp_rank_info_v1, group_size, ",");
  FIELD(basp_rank_info_v1, group_index, ",");
  FIELD(basp_rank_info_v1, group_position, ",");
  FIELD(basp_rank_info_v1, micro_batch, ",");
  FIELD(basp_rank_info_v1, first_sequence, ",");
  FIELD(basp_rank_info_v1, num_sequences, ",");
  FIELD(basp_rank_info_v1, seq_len, ",");
  FIELD(basp_rank_info_v1, token_begin, ",");
  FIELD(basp_rank_info_v1, token_end, "");
  STRUCT_END();

  STRUCT_BEGIN(basp_plan_desc_v1, BASP_PLAN_DESC_INITIALIZER, 0);
  FIELD(basp_plan_desc_v1, size, ",");
  FIELD(basp_plan_desc_v1, magic, ",");
  FIELD(basp_plan_desc_v1, version, ",");
  FIELD(basp_plan_desc_v1, layout, ",");
  FIELD(basp_plan_desc_v1, dtype, ",");
  FIELD(basp_plan_desc_v1, seq_len, ",");
  FIELD(basp_plan_desc_v1, head_dim, ",");
  FIELD(basp_plan_desc_v1, num_tensors, ",");
  FIELD(basp_plan_desc_v1, reserved0, ",");
  FIELD(basp_plan_desc_v1, num_heads, ",");
  FIELD(basp_plan_desc_v1, query_heads, ",");
  FIELD(basp_plan_desc_v1, token_capacity, ",");
  FIELD(basp_plan_desc_v1, head_dims, "");
  STRUCT_END();

  STRUCT_BEGIN(basp_plan_info_v1, BASP_PLAN_INFO_INITIALIZER, 0);
  FIELD(basp_plan_info_v1, size, ",");
  FIELD(basp_plan_info_v1, magic, ",");
  FIELD(basp_plan_info_v1, version, ",");
  FIELD(basp_plan_info_v1, num_tensors, ",");
  FIELD(basp_plan_info_v1, group_size, ",");
  FIELD(basp_plan_info_v1, local_sequences, ",");
  FIELD(basp_plan_info_v1, local_tokens, ",");
  FIELD(basp_plan_info_v1, workspace_bytes, ",");
  FIELD(basp_plan_info_v1, seq_sharded_elems, ",");
  FIELD(basp_plan_info_v1, head_sharded_elems, ",");
  FIELD(basp_plan_info_v1, bytes_sent_per_exchange, ",");
  FIELD(basp_plan_info_v1, last_path, ",");
  FIELD(basp_plan_info_v1, reserved0, ",");
  FIELD(basp_plan_info_v1, layout, ",");
  FIELD(basp_plan_info_v1, ndim, ",");
  FIELD(basp_plan_info_v1, seq_sharded_shape, ",");
  FIELD(basp_plan_info_v1, head_sharded_shape, ",");
  FIELD(basp_plan_info_v1, head_begin, ",");
  FIELD(basp_plan_info_v1, head_end, ",");
  FIELD(basp_plan_info_v1, plan_path, ",");
  FIELD(basp_plan_info_v1, reserved1, ",");
  FIELD(basp_plan_info_v1, split_begin, ",");
  FIELD(basp_plan_info_v1, split_end, ",");
  FIELD(basp_plan_info_v1, token_begin, ",");
  FIELD(basp_plan_info_v1, token_end, ",");
  FIELD(basp_plan_info_v1, token_capacity, ",");
  FIELD(basp_plan_info_v1, replicated, ",");
  FIELD(basp_plan_info_v1, max_head_chunks, "");
  STRUCT_END();

  /* Function pointers: offset and size here, NULL in the initializer's bytes, prototypes below. */
  STRUCT_BEGIN(basp_oob_v1, BASP_OOB_INITIALIZER, 0);
  FIELD(basp_oob_v1, size, ",");
  FIELD(basp_oob_v1, magic, ",");
  FIELD(basp_oob_v1, version, ",");
  FIELD(basp_oob_v1, rank, ",");
  FIELD(basp_oob_v1, num_ranks, ",");
  FIELD(basp_oob_v1, user_data, ",");
  FIELD(basp_oob_v1, allgather_start, ",");
  FIELD(basp_oob_v1, allgather_test, ",");
  FIELD(basp_oob_v1, allgather_free, "");
  STRUCT_END();

  /* Batch plans (0.5): the membership, the planner's problem and the cost model. */
  STRUCT_BEGIN(basp_batch_v1, BASP_BATCH_INITIALIZER, 0);
  FIELD(basp_batch_v1, size, ",");
  FIELD(basp_batch_v1, magic, ",");
  FIELD(basp_batch_v1, version, ",");
  FIELD(basp_batch_v1, num_groups, ",");
  FIELD(basp_batch_v1, num_docs, ",");
  FIELD(basp_batch_v1, group_sizes, ",");
  FIELD(basp_batch_v1, ranks, ",");
  FIELD(basp_batch_v1, group_docs, ",");
  FIELD(basp_batch_v1, docs, ",");
  FIELD(basp_batch_v1, lengths, "");
  STRUCT_END();

  STRUCT_BEGIN(basp_batch_problem_v1, BASP_BATCH_PROBLEM_INITIALIZER, 0);
  FIELD(basp_batch_problem_v1, size, ",");
  FIELD(basp_batch_problem_v1, magic, ",");
  FIELD(basp_batch_problem_v1, version, ",");
  FIELD(basp_batch_problem_v1, num_docs, ",");
  FIELD(basp_batch_problem_v1, dtype, ",");
  FIELD(basp_batch_problem_v1, lengths, ",");
  FIELD(basp_batch_problem_v1, query_heads, ",");
  FIELD(basp_batch_problem_v1, kv_heads, ",");
  FIELD(basp_batch_problem_v1, head_dim, ",");
  FIELD(basp_batch_problem_v1, capacity, ",");
  FIELD(basp_batch_problem_v1, v_head_dim, "");
  STRUCT_END();

  STRUCT_BEGIN(basp_cost_model_v1, BASP_COST_MODEL_INITIALIZER, 0);
  FIELD(basp_cost_model_v1, size, ",");
  FIELD(basp_cost_model_v1, magic, ",");
  FIELD(basp_cost_model_v1, version, ",");
  FIELD(basp_cost_model_v1, a0, ",");
  FIELD(basp_cost_model_v1, a1, ",");
  FIELD(basp_cost_model_v1, beta_node, ",");
  FIELD(basp_cost_model_v1, beta_network, ",");
  FIELD(basp_cost_model_v1, c2, ",");
  FIELD(basp_cost_model_v1, c1, ",");
  FIELD(basp_cost_model_v1, calibrated, ",");
  FIELD(basp_cost_model_v1, reserved0, ",");
  FIELD(basp_cost_model_v1, per_piece, "");
  STRUCT_END();
  printf("\n},\n");

  printf("\"prototypes\": {\n");
  PROTOTYPE(basp_oob_v1, allgather_start, int, (void*, const void*, void*, size_t, void**), ",");
  PROTOTYPE(basp_oob_v1, allgather_test, int, (void*, void*), ",");
  PROTOTYPE(basp_oob_v1, allgather_free, int, (void*, void*), "");
  printf("},\n");

  /* The functions of 0.3 to 0.6 that python/basp/_abi.py declares (FUNCTION_PROTOTYPES). */
  printf("\"functions\": {\n");
  FUNCTION(basp_split, basp_status_t, (int64_t, int32_t, int32_t, int64_t*, int64_t*), ",");
  FUNCTION(basp_scatter_tokens, basp_status_t, (basp_plan_t, int64_t, const void* const*, void* const*, void*), ",");
  FUNCTION(basp_gather_tokens, basp_status_t, (basp_plan_t, int64_t, const void* const*, void* const*, void*), ",");
  FUNCTION(basp_plan_set_documents, basp_status_t, (basp_plan_t, const int64_t*, int32_t), ",");
  FUNCTION(basp_get_features, basp_status_t, (unsigned*), ",");
  FUNCTION(basp_get_nccl_library, basp_status_t, (int*, char*, size_t), ",");
  FUNCTION(basp_batch_plan_create, basp_status_t,
           (basp_comm_t, const basp_plan_desc_t*, const basp_batch_t*, basp_plan_t*), ",");
  FUNCTION(basp_comm_plan_batch, basp_status_t,
           (basp_comm_t, const basp_batch_problem_t*, int32_t*, int32_t*, int32_t*, int32_t*, basp_batch_t*, double*),
           ",");
  FUNCTION(basp_comm_partition_batch, basp_status_t,
           (basp_comm_t, const basp_batch_problem_t*, int32_t*, int32_t*, int32_t*, int32_t*, basp_batch_t*, double*),
           ",");
  FUNCTION(basp_comm_get_cost_model, basp_status_t, (basp_comm_t, basp_cost_model_t*), ",");
  FUNCTION(basp_comm_set_cost_model, basp_status_t, (basp_comm_t, const basp_cost_model_t*), ",");
  FUNCTION(basp_comm_calibrate, basp_status_t, (basp_comm_t, int64_t, int32_t), ",");
  FUNCTION(basp_comm_export_cost_model, basp_status_t, (basp_comm_t, char*, size_t, size_t*), ",");
  FUNCTION(basp_comm_import_cost_model, basp_status_t, (basp_comm_t, const char*), ",");
  FUNCTION(basp_scatter_start, basp_status_t,
           (basp_plan_t, int32_t, int32_t, int64_t, const void* const*, void* const*, void*), ",");
  FUNCTION(basp_gather_start, basp_status_t,
           (basp_plan_t, int32_t, int32_t, int64_t, const void* const*, void* const*, void*), ",");
  FUNCTION(basp_scatter_test, basp_status_t, (basp_plan_t, int32_t, int32_t*), ",");
  FUNCTION(basp_gather_test, basp_status_t, (basp_plan_t, int32_t, int32_t*), ",");
  FUNCTION(basp_scatter_wait, basp_status_t, (basp_plan_t, int32_t), ",");
  FUNCTION(basp_gather_wait, basp_status_t, (basp_plan_t, int32_t), "");
  printf("},\n");

  printf("\"constants\": {\n");
  CONST(BASP_FEATURE_MPI, ",");
  CONST(BASP_FEATURE_CUDA, ",");
  CONST(BASP_FEATURE_NCCL, ",");
  CONST(BASP_FEATURE_HWLOC, ",");
  CONST(BASP_VERSION_MAJOR, ",");
  CONST(BASP_VERSION_MINOR, ",");
  CONST(BASP_VERSION_PATCH, ",");
  CONST(BASP_MAX_TENSORS, ",");
  CONST(BASP_MAX_DIMS, ",");
  CONST(BASP_COMM_CONFIG_MAGIC, ",");
  CONST(BASP_COMM_CONFIG_VERSION, ",");
  CONST(BASP_RANK_INFO_MAGIC, ",");
  CONST(BASP_RANK_INFO_VERSION, ",");
  CONST(BASP_PLAN_DESC_MAGIC, ",");
  CONST(BASP_PLAN_DESC_VERSION, ",");
  CONST(BASP_PLAN_INFO_MAGIC, ",");
  CONST(BASP_PLAN_INFO_VERSION, ",");
  CONST(BASP_OOB_MAGIC, ",");
  CONST(BASP_OOB_VERSION, ",");
  CONST(BASP_OOB_SUCCESS, ",");
  CONST(BASP_OOB_IN_PROGRESS, ",");
  CONST(BASP_BATCH_MAGIC, ",");
  CONST(BASP_BATCH_VERSION, ",");
  CONST(BASP_BATCH_PROBLEM_MAGIC, ",");
  CONST(BASP_BATCH_PROBLEM_VERSION, ",");
  CONST(BASP_COST_MODEL_MAGIC, ",");
  CONST(BASP_COST_MODEL_VERSION, ",");
  CONST(sizeof(basp_mpi_fint_t), ",");
  CONST(sizeof(basp_status_t), ",");
  CONST(BASP_SUCCESS, ",");
  CONST(BASP_ERROR_INVALID_ARGUMENT, ",");
  CONST(BASP_ERROR_NULL_POINTER, ",");
  CONST(BASP_ERROR_INVALID_HANDLE, ",");
  CONST(BASP_ERROR_BAD_STRUCT, ",");
  CONST(BASP_ERROR_UNSUPPORTED, ",");
  CONST(BASP_ERROR_OUT_OF_MEMORY, ",");
  CONST(BASP_ERROR_MPI, ",");
  CONST(BASP_ERROR_CUDA, ",");
  CONST(BASP_ERROR_NCCL, ",");
  CONST(BASP_ERROR_INTERNAL, ",");
  CONST(BASP_ERROR_MISMATCH, ",");
  CONST(BASP_ERROR_TIMEOUT, ",");
  CONST(BASP_ERROR_COMM_BROKEN, ",");
  CONST(BASP_ERROR_OOB, ",");
  CONST(BASP_STATUS_COUNT, ",");
  CONST(BASP_BACKEND_MPI, ",");
  CONST(BASP_BACKEND_NCCL, ",");
  CONST(BASP_BACKEND_COUNT, ",");
  CONST(BASP_PLACEMENT_DEFAULT, ",");
  CONST(BASP_PLACEMENT_CONTIGUOUS, ",");
  CONST(BASP_PLACEMENT_TOPOLOGY, ",");
  CONST(BASP_PLACEMENT_COUNT, ",");
  CONST(BASP_PATH_NONE, ",");
  CONST(BASP_PATH_LOCAL, ",");
  CONST(BASP_PATH_P2P, ",");
  CONST(BASP_PATH_CMA, ",");
  CONST(BASP_PATH_DIRECT, ",");
  CONST(BASP_PATH_SHARED, ",");
  CONST(BASP_PATH_NCCL, ",");
  CONST(BASP_PATH_STAGED, ",");
  CONST(BASP_PATH_COUNT, ",");
  CONST(BASP_LAYOUT_BSHD, ",");
  CONST(BASP_LAYOUT_SBHD, ",");
  CONST(BASP_LAYOUT_THD, ",");
  CONST(BASP_LAYOUT_COUNT, ",");
  CONST(BASP_DTYPE_BYTE, ",");
  CONST(BASP_DTYPE_FP8_E4M3, ",");
  CONST(BASP_DTYPE_FP8_E5M2, ",");
  CONST(BASP_DTYPE_FP16, ",");
  CONST(BASP_DTYPE_BF16, ",");
  CONST(BASP_DTYPE_FP32, ",");
  CONST(BASP_DTYPE_FP64, ",");
  CONST(BASP_DTYPE_INT32, ",");
  CONST(BASP_DTYPE_INT64, ",");
  CONST(BASP_DTYPE_UNSET, ",");
  CONST(BASP_DTYPE_COUNT, "");
  printf("}\n}\n");
  return 0;
}
