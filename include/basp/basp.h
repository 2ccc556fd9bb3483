/*
 * libbasp: Batch-Aware Sequence Parallelism redistribution.
 *
 * The C ABI. Every language binding (the header-only C++ wrapper basp.hpp, the Python package over ctypes)
 * calls exactly these functions. The header compiles as C99 with -pedantic -Werror and needs no MPI, CUDA or
 * NCCL header: MPI communicators cross it as their Fortran handle, CUDA streams and NCCL comms as void*.
 *
 * Conventions
 *  - Every function returns a basp_status_t. On failure basp_last_error() returns a message for the calling
 *    thread naming the argument and its value; nothing was created or changed.
 *  - Config and descriptor structs begin with size, magic and version. Initialise them with their
 *    ..._INITIALIZER macro and set only the fields you need; the library reads min(size, sizeof) bytes so
 *    structs may only grow at the end.
 *  - Collective functions (marked "collective") must be called by every rank of the communicator, in the
 *    same order, with the same arguments where stated. A creation call (comm, plan, basp_mem_alloc/free) that the
 *    ranks make with different arguments fails on every rank with BASP_ERROR_MISMATCH (naming the field, its
 *    values and the ranks), on every backend; on the MPI backend so does an exchange whose plan or operation
 *    differs across the group. A call that a rank does not make fails on the others with BASP_ERROR_TIMEOUT after
 *    the comm's timeout, and the comm is broken from then on (BASP_ERROR_COMM_BROKEN). docs/reliability.md.
 *  - Thread safety is stated per function ("Threads:"); MPI calls from several threads at once need
 *    MPI_THREAD_MULTIPLE.
 */
#ifndef BASP_BASP_H
#define BASP_BASP_H

#include <stddef.h>
#include <stdint.h>

#include "basp/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------------------
 * Status codes. Values are fixed forever; new codes are only appended before BASP_STATUS_COUNT.
 * ------------------------------------------------------------------------------------------------------- */
typedef enum basp_status {
  BASP_SUCCESS = 0,
  BASP_ERROR_INVALID_ARGUMENT = 1, /* a value out of range or inconsistent with another */
  BASP_ERROR_NULL_POINTER = 2,     /* a required pointer argument was NULL */
  BASP_ERROR_INVALID_HANDLE = 3,   /* a handle that is NULL, destroyed, or not a libbasp handle */
  BASP_ERROR_BAD_STRUCT = 4,       /* a config/descriptor with a wrong size, magic or version */
  BASP_ERROR_UNSUPPORTED = 5,      /* a valid request this build or this release cannot serve */
  BASP_ERROR_OUT_OF_MEMORY = 6,
  BASP_ERROR_MPI = 7,          /* an MPI call failed; the message carries MPI's error string */
  BASP_ERROR_CUDA = 8,         /* a CUDA call failed; the message carries CUDA's error string */
  BASP_ERROR_NCCL = 9,         /* an NCCL call failed; the message carries NCCL's error string */
  BASP_ERROR_INTERNAL = 10,    /* a bug in libbasp: please report the message */
  BASP_ERROR_MISMATCH = 11,    /* the ranks of a collective call passed different arguments; the message names
                                  the field, its values and the ranks holding them. Nothing was created. */
  BASP_ERROR_TIMEOUT = 12,     /* a collective step did not finish within the comm's timeout (a rank did not
                                  join); the message names the call, the group and the ranks waited for. The
                                  comm is broken from then on. */
  BASP_ERROR_COMM_BROKEN = 13, /* the comm (or the comm of the plan) failed earlier (timeout or MPI error):
                                  every call but destroy returns this at once; the message names the cause */
  BASP_ERROR_OOB = 14,         /* a callback of the out-of-band collectives (basp_oob_t) returned an error; the
                                  message names the callback and the value it returned */
  BASP_STATUS_COUNT
} basp_status_t;

/* A static English name for a status ("BASP_ERROR_INVALID_ARGUMENT"); "unknown status" for other values.
 * Threads: any thread, any time (also basp_get_version, basp_dtype_size). */
BASP_API const char* basp_status_string(basp_status_t status);

/* The detail message of the last failed call made by this thread ("" when none). Valid until the next libbasp
 * call on this thread. Threads: per thread. */
BASP_API const char* basp_last_error(void);

/* The library's version, as built (compare with BASP_VERSION_MAJOR/MINOR/PATCH of the header you compiled
 * against). Any pointer may be NULL. */
BASP_API basp_status_t basp_get_version(int* major, int* minor, int* patch);

/* What this build of the library has, as bits of *features (since 0.4): the backends compiled in and hwloc
 * topology discovery. Says nothing of the machine (a build with NCCL loads on a machine without a GPU). */
#define BASP_FEATURE_MPI 1u   /* the MPI backend, basp_comm_create_mpi */
#define BASP_FEATURE_CUDA 2u  /* the CUDA kernels */
#define BASP_FEATURE_NCCL 4u  /* the NCCL backend, basp_comm_create_nccl / basp_comm_create_oob */
#define BASP_FEATURE_HWLOC 8u /* topology discovery through hwloc */
BASP_API basp_status_t basp_get_features(unsigned* features);

/* The NCCL this library runs with (since 0.4): *version as ncclGetVersion gives it (22809 for 2.28.9) and the
 * file it was loaded from, NUL-terminated in path[path_capacity] (cut to fit). An ncclComm_t passed to
 * basp_comm_create_nccl must come from this same file: another libnccl's communicator is another library's
 * object. Needs no GPU. BASP_ERROR_UNSUPPORTED in a build without NCCL. Either pointer may be NULL. */
BASP_API basp_status_t basp_get_nccl_library(int* version, char* path, size_t path_capacity);

/* ---------------------------------------------------------------------------------------------------------
 * Enumerations. Values are fixed forever.
 * ------------------------------------------------------------------------------------------------------- */
typedef enum basp_backend {
  BASP_BACKEND_MPI = 0,  /* host memory, MPI point-to-point */
  BASP_BACKEND_NCCL = 1, /* device memory, NCCL (builds with CUDA + NCCL only) */
  BASP_BACKEND_COUNT
} basp_backend_t;

/* How ranks are placed into groups. TOPOLOGY (the default) gathers every rank's node, NVLink domain and GPU when
 * the comm is created and keeps each group inside one NVLink domain and on as few nodes as possible, on the GPUs
 * with the strongest NVLinks between them, whatever the rank numbering (docs/topology.md; the environment
 * variable BASP_NODE_ID overrides the node identity). With node-by-node rank numbering on a symmetric machine
 * whose nodes hold a multiple or a divisor of K ranks it forms the same groups as CONTIGUOUS. */
typedef enum basp_placement {
  BASP_PLACEMENT_DEFAULT = 0,    /* the library's choice: TOPOLOGY */
  BASP_PLACEMENT_CONTIGUOUS = 1, /* the paper's rule: group g = ranks g*K .. g*K+K-1 */
  BASP_PLACEMENT_TOPOLOGY = 2,   /* groups from the machine's topology (see above) */
  BASP_PLACEMENT_COUNT
} basp_placement_t;

/* How an exchange moves its bytes (basp_plan_info_t.plan_path and last_path): for performance debugging and
 * tests. docs/design.md describes each path and the control rounds it costs. */
typedef enum basp_path {
  BASP_PATH_NONE = 0,   /* the plan has not executed yet */
  BASP_PATH_LOCAL = 1,  /* K = 1: a local copy, nothing exchanged */
  BASP_PATH_P2P = 2,    /* MPI point-to-point (packed on one side) */
  BASP_PATH_CMA = 3,    /* MPI backend, one node: cross-memory attach (process_vm_readv) */
  BASP_PATH_SHARED = 4, /* MPI backend, one node: plain copies through basp_mem_alloc memory */
  BASP_PATH_NCCL = 5,   /* NCCL backend */
  BASP_PATH_STAGED = 6, /* MPI backend, one node: two plain copies through the plan's shared staging area */
  BASP_PATH_COUNT,
  BASP_PATH_DIRECT = BASP_PATH_CMA /* BASP_PATH_CMA's name before 0.2, kept */
} basp_path_t;

typedef enum basp_layout {
  BASP_LAYOUT_BSHD = 0, /* [batch][sequence][head][dim] */
  BASP_LAYOUT_SBHD = 1, /* [sequence][batch][head][dim] */
  BASP_LAYOUT_THD = 2,  /* packed variable-length: one stream of T tokens (whole documents) per group, [T][head][dim];
                           the plan is made for a token capacity and each execute passes its T
                           (basp_scatter_tokens) */
  BASP_LAYOUT_COUNT
} basp_layout_t;

/* The type sets the element size. The library does arithmetic only in a gather of heads that several ranks hold
 * (grouped-query attention, basp_plan_desc_t.query_heads): FP16, BF16 and FP32 are summed in FP32, FP64 in FP64; such
 * a gather of any other type returns BASP_ERROR_UNSUPPORTED. BASP_DTYPE_UNSET is what
 * BASP_PLAN_DESC_INITIALIZER leaves in desc.dtype; new types are numbered from 10, so that no caller built against
 * an older header passes one by accident. */
typedef enum basp_dtype {
  BASP_DTYPE_BYTE = 0, /* raw bytes, 1 */
  BASP_DTYPE_FP8_E4M3 = 1,
  BASP_DTYPE_FP8_E5M2 = 2,
  BASP_DTYPE_FP16 = 3,
  BASP_DTYPE_BF16 = 4,
  BASP_DTYPE_FP32 = 5,
  BASP_DTYPE_FP64 = 6,
  BASP_DTYPE_INT32 = 7,
  BASP_DTYPE_INT64 = 8,
  BASP_DTYPE_UNSET = 9, /* not a type: "not set" (before 0.2 BASP_DTYPE_COUNT, also 9, served as that) */
  BASP_DTYPE_COUNT      /* one past the last value */
} basp_dtype_t;

/* Element size in bytes of a dtype, 0 for BASP_DTYPE_UNSET and unknown values. */
BASP_API size_t basp_dtype_size(basp_dtype_t dtype);

/* ---------------------------------------------------------------------------------------------------------
 * Handles
 * ------------------------------------------------------------------------------------------------------- */
typedef struct basp_comm* basp_comm_t; /* groups of the world for one micro-batch size */
typedef struct basp_plan* basp_plan_t; /* one exchange shape: persistent, owns its workspace (except a batch
                                          plan, which borrows its comm's pool: see "Batch plans" below) */

/* An MPI communicator as its Fortran handle: MPI_Comm_c2f(comm) in C, comm.py2f() in mpi4py. */
typedef int basp_mpi_fint_t;

/* ---------------------------------------------------------------------------------------------------------
 * Communicator
 * ------------------------------------------------------------------------------------------------------- */
#define BASP_COMM_CONFIG_MAGIC 0x42434f4du /* "BCOM" */
#define BASP_COMM_CONFIG_VERSION 1u

typedef struct basp_comm_config_v1 {
  size_t size;         /* sizeof(basp_comm_config_v1) */
  uint32_t magic;      /* BASP_COMM_CONFIG_MAGIC */
  uint32_t version;    /* BASP_COMM_CONFIG_VERSION */
  int64_t micro_batch; /* B, sequences per micro-batch over the whole world; > 0, or 0 for a comm that serves
                          only batch plans (batch_capacity > 0; its groups are then N groups of 1 rank) */
  int32_t num_groups;  /* G; -1 = gcd(N, B) (BASP). 1 = DeepSpeed-Ulysses. Must divide N and B. */
  int32_t backend;     /* basp_backend_t */
  int32_t placement;   /* basp_placement_t */
  int32_t reserved0;   /* must be 0 */
  /* Appended after the first layout (40 bytes): callers built against that pass its size and get -1.
   * How long a blocking step of a collective call of this comm (creation, plan creation, basp_mem_alloc/free,
   * scatter/gather on the MPI backend) may wait for the other ranks before failing with BASP_ERROR_TIMEOUT, in
   * milliseconds. -1: the environment variable BASP_TIMEOUT_MS, else BASP_DEFAULT_TIMEOUT_MS; 0: wait forever.
   * Each rank may choose its own. See docs/reliability.md. */
  int64_t timeout_ms;
  /* Appended in 0.5 (a caller built against 0.4 passes 48 bytes and gets 0). > 0: the comm also serves batch plans
   * (basp_batch_plan_create: groups of any size per micro-batch, docs/batch.md) of at most this many sequence-side
   * tokens per rank, and creation prepares their world-level resources once (MPI: a private duplicate of the parent
   * for their control and one for their data, a workspace pool). 0: no batch plans. Must be the same on every rank. */
  int64_t batch_capacity;
} basp_comm_config_v1;
typedef basp_comm_config_v1 basp_comm_config_t;

#define BASP_DEFAULT_TIMEOUT_MS 300000 /* 5 minutes */

/* clang-format off */
#define BASP_COMM_CONFIG_INITIALIZER                                                                        \
  { sizeof(basp_comm_config_v1), BASP_COMM_CONFIG_MAGIC, BASP_COMM_CONFIG_VERSION, -1, -1,                \
    BASP_BACKEND_MPI, BASP_PLACEMENT_DEFAULT, 0, -1, 0 }
/* clang-format on */

/* Collective over `parent`: splits it into the groups once. `parent` must stay valid until basp_comm_destroy;
 * the library duplicates what it keeps. Fails with BASP_ERROR_UNSUPPORTED when built without MPI. After a
 * BASP_ERROR_TIMEOUT here `parent` holds an unfinished collective: do not use it for collectives again.
 * Threads: concurrent calls only on different parent communicators. */
BASP_API basp_status_t basp_comm_create_mpi(basp_mpi_fint_t parent, const basp_comm_config_t* config,
                                            basp_comm_t* comm);

/* Not collective. Plans created from the comm stay usable after this; their resources go with the last plan.
 * NULL is accepted and does nothing. Works on a broken comm. Threads: any thread; calls already inside the
 * handle finish safely, later ones get BASP_ERROR_INVALID_HANDLE. */
BASP_API basp_status_t basp_comm_destroy(basp_comm_t comm);

#define BASP_RANK_INFO_MAGIC 0x4252494eu /* "BRIN" */
#define BASP_RANK_INFO_VERSION 1u

/* What one rank of the world does: the paper's Algorithm 2 for data loaders. */
typedef struct basp_rank_info_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t world_size;     /* N */
  int32_t rank;           /* the rank described (world rank) */
  int32_t num_groups;     /* G */
  int32_t group_size;     /* K = N / G */
  int32_t group_index;    /* g */
  int32_t group_position; /* l, 0 <= l < K */
  int64_t micro_batch;    /* B */
  int64_t first_sequence; /* g * B / G */
  int64_t num_sequences;  /* B / G */
  int64_t seq_len;        /* S as passed to the query (0: no token range) */
  int64_t token_begin;    /* basp_split(S, K, l): the first token of each owned sequence held by the rank */
  int64_t token_end;      /* one past its last (l * S / K and (l + 1) * S / K when K divides S) */
} basp_rank_info_v1;
typedef basp_rank_info_v1 basp_rank_info_t;

/* clang-format off */
#define BASP_RANK_INFO_INITIALIZER                                                                          \
  { sizeof(basp_rank_info_v1), BASP_RANK_INFO_MAGIC, BASP_RANK_INFO_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
/* clang-format on */

/* Describes world rank `rank` (pass -1 for the calling rank). seq_len (S) is any positive length, or 0 to leave
 * the token range at 0; the tokens of a sequence are split as basp_split does (the first S mod K positions hold one
 * more). Threads: any thread, any time (also basp_comm_group_ranks). */
BASP_API basp_status_t basp_comm_query(basp_comm_t comm, int32_t rank, int64_t seq_len, basp_rank_info_t* info);

/* The world ranks of group `group_index`, ordered by position. `capacity` is the length of `ranks`; it must be
 * at least K. */
BASP_API basp_status_t basp_comm_group_ranks(basp_comm_t comm, int32_t group_index, int32_t* ranks, int32_t capacity);

/* ---------------------------------------------------------------------------------------------------------
 * Packed batches: documents to groups (the paper's Algorithm 2 for THD)
 * ------------------------------------------------------------------------------------------------------- */
#define BASP_DOC_ASSIGNMENT_MAGIC 0x42444f43u /* "BDOC" */
#define BASP_DOC_ASSIGNMENT_VERSION 1u

/* What one rank does with a packed micro-batch of documents (basp_comm_assign_documents). */
typedef struct basp_doc_assignment_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t rank;           /* the rank described (world rank) */
  int32_t group_index;    /* g */
  int32_t group_position; /* l */
  int32_t group_size;     /* K */
  int32_t num_docs;       /* documents of group g (its stream holds them in ascending document index) */
  int32_t reserved0;
  int64_t stream_tokens; /* T: tokens of group g's stream, the sum of its documents' lengths (0: no document) */
  int64_t token_begin;   /* this rank's tokens of the stream: basp_split(T, K, l) */
  int64_t token_end;
  int32_t first_doc; /* the document (index into the group's list) holding token_begin; -1 when none */
  int32_t reserved1;
  int64_t first_doc_offset; /* the position of token_begin inside that document (RoPE); 0 when none */
  int64_t max_seqlen;       /* the longest document of group g (flash-attn's max_seqlen) */
  int64_t max_group_tokens; /* the largest stream of all groups */
  double imbalance;         /* max_group_tokens over the mean tokens per group (1.0 = perfectly balanced) */
} basp_doc_assignment_v1;
typedef basp_doc_assignment_v1 basp_doc_assignment_t;

/* clang-format off */
#define BASP_DOC_ASSIGNMENT_INITIALIZER                                                                    \
  { sizeof(basp_doc_assignment_v1), BASP_DOC_ASSIGNMENT_MAGIC, BASP_DOC_ASSIGNMENT_VERSION, 0, 0, 0, 0, 0, 0, \
    0, 0, 0, 0, 0, 0, 0, 0, 0.0 }
/* clang-format on */

/* Assigns the `num_docs` documents of a micro-batch (lengths[i] > 0 tokens each) to the comm's G groups and
 * describes world rank `rank` (-1: the calling rank). Balances the tokens per group first and the sum of squared
 * lengths (attention work) second: documents in decreasing length (ties: lower index first) each go to the group
 * with the fewest tokens so far, then the smallest sum of squares, then the lowest index. Deterministic: every rank
 * computes the same answer from the same lengths. `capacity` (> 0, or 0 for none) is the most tokens a group's
 * stream may hold (a THD plan's token_capacity); when that greedy overflows it (a batch packed to within a document
 * of G * capacity), the documents are packed exactly instead (docs/packed.md): a document longer than the capacity,
 * or a batch that no packing found fits, is BASP_ERROR_INVALID_ARGUMENT naming the document or the group. When `docs`
 * is not NULL it receives the group's document indices in stream order, and `cu_seqlens` (when not NULL) the group's
 * num_docs + 1 cumulative lengths (cu_seqlens[0] = 0), both up to `max_docs` entries (max_docs + 1 for cu_seqlens):
 * fewer than needed is BASP_ERROR_INVALID_ARGUMENT naming the count needed. Not collective. Threads: any thread, any
 * time. */
BASP_API basp_status_t basp_comm_assign_documents(basp_comm_t comm, const int64_t* lengths, int32_t num_docs,
                                                  int64_t capacity, int32_t rank, basp_doc_assignment_t* assignment,
                                                  int32_t* docs, int64_t* cu_seqlens, int32_t max_docs);

/* ---------------------------------------------------------------------------------------------------------
 * Plans
 * ------------------------------------------------------------------------------------------------------- */
#define BASP_MAX_TENSORS 8
#define BASP_PLAN_DESC_MAGIC 0x42504c4eu /* "BPLN" */
#define BASP_PLAN_DESC_VERSION 1u

/* How X items (tokens of a sequence, heads) are split over K positions, as torch.tensor_split and
 * numpy.array_split do: position j gets [j * (X / K) + min(j, X % K), ...), the first X mod K positions one item more.
 * A position may get none (X < K). Writes *begin and *end (either may be NULL). Threads: any thread, any time. */
BASP_API basp_status_t basp_split(int64_t items, int32_t parts, int32_t index, int64_t* begin, int64_t* end);

/* One exchange: up to BASP_MAX_TENSORS tensors of the same layout, dtype and sequence length, each with its own
 * head count (Q, K, V: {Hq, Hkv, Hkv}; the attention output: {Hq}) and head size (head_dims[t], or head_dim for
 * all: multi-head latent attention's q and k of 192 and v of 128 are one exchange). All of them move in one
 * exchange.
 *
 * Any shape is accepted (docs/design.md, "Uneven shapes"): the tokens of each sequence are split over the group's
 * positions by basp_split, and so are the heads of a query-like tensor (query_heads[t] = 0). A key/value tensor of
 * Hkv = num_heads[t] heads serving Hq = query_heads[t] query heads (Hq % Hkv == 0, r = Hq / Hkv) follows the query
 * split instead: the position holding query heads [a, b) holds KV heads [a / r, (b - 1) / r] (none when a == b), so a
 * KV head may be held by several positions (it is sent to each from its owner's memory, never copied in memory
 * beforehand) and a position may hold two. basp_gather then sums the contributions of every holder of such a head,
 * in ascending position (see basp_dtype_t). */
typedef struct basp_plan_desc_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t layout;                      /* basp_layout_t */
  int32_t dtype;                       /* basp_dtype_t */
  int64_t seq_len;                     /* S: full tokens per sequence (> 0); THD: -1 or the token capacity */
  int64_t head_dim;                    /* D > 0: the head size of every tensor whose head_dims[t] is 0 */
  int32_t num_tensors;                 /* 1 .. BASP_MAX_TENSORS */
  int32_t reserved0;                   /* must be 0 */
  int64_t num_heads[BASP_MAX_TENSORS]; /* heads of tensor t (> 0); unused entries 0 */
  /* Appended in 0.3: a caller built against the layout above passes its size (112 bytes) and gets 0 for these. */
  int64_t query_heads[BASP_MAX_TENSORS]; /* 0: tensor t is query-like (its heads follow their own split); else the
                                            query head count Hq whose split its heads follow (a multiple of
                                            num_heads[t]) */
  int64_t token_capacity;                /* THD: the most tokens T of a group's stream in one execute (> 0);
                                            0 for BSHD and SBHD */
  /* Appended in 0.5: a caller built against the layout above passes its size (184 bytes) and gets 0 for these. */
  int64_t head_dims[BASP_MAX_TENSORS]; /* head size of tensor t (> 0), 0: head_dim; unused entries 0. head_dim may
                                          stay unset (-1) only if every tensor sets its own */
} basp_plan_desc_v1;
typedef basp_plan_desc_v1 basp_plan_desc_t;

/* clang-format off */
#define BASP_PLAN_DESC_INITIALIZER                                                                          \
  { sizeof(basp_plan_desc_v1), BASP_PLAN_DESC_MAGIC, BASP_PLAN_DESC_VERSION, BASP_LAYOUT_BSHD,              \
    BASP_DTYPE_UNSET, -1, -1, 0, 0, { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 }, 0,             \
    { 0, 0, 0, 0, 0, 0, 0, 0 } }
/* clang-format on */

/* Collective over the rank's group. Allocates the plan's workspace (and, on the MPI backend, its derived
 * datatypes) once; executing it allocates nothing. Threads: one collective call (plan creation,
 * basp_mem_alloc/free) per comm at a time. */
BASP_API basp_status_t basp_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, basp_plan_t* plan);

/* NULL is accepted and does nothing. Works on a plan of a broken comm. Threads: as basp_comm_destroy. */
BASP_API basp_status_t basp_plan_destroy(basp_plan_t plan);

#define BASP_PLAN_INFO_MAGIC 0x42504946u /* "BPIF" */
#define BASP_PLAN_INFO_VERSION 1u
#define BASP_MAX_DIMS 4 /* dimensions of a shape in basp_plan_info_t */

typedef struct basp_plan_info_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t num_tensors;
  int32_t group_size;      /* K */
  int64_t local_sequences; /* b_loc = B / G */
  int64_t local_tokens;    /* S / K */
  int64_t workspace_bytes; /* host or device memory the plan owns; a batch plan's: what it takes of its comm's
                              workspace pool, which it does not own */
  /* Elements of tensor t on this rank: sequence-sharded [b_loc, S/K, H_t, D_t] (scatter input, gather output)
   * and head-sharded [b_loc, S, H_t/K, D_t] (scatter output, gather input), D_t its head size; dims in BSHD order
   * whatever the layout. */
  int64_t seq_sharded_elems[BASP_MAX_TENSORS];
  int64_t head_sharded_elems[BASP_MAX_TENSORS];
  int64_t bytes_sent_per_exchange; /* bytes this rank sends to other ranks in one scatter (same for gather) */
  int32_t last_path;               /* basp_path_t: how the plan's last scatter/gather moved its bytes */
  int32_t reserved0;
  /* Appended in 0.2: a caller built against the layout above passes its size (192 bytes) and gets only those
   * fields. Every tensor's shapes, so that bindings need not derive them: */
  int32_t layout; /* basp_layout_t of the plan */
  int32_t ndim;   /* dimensions used in the shapes below: 4 for BSHD and SBHD */
  /* Tensor t on this rank, in the layout's own dimension order; unused dimensions and tensors are 0.
   *   sequence-sharded (scatter input, gather output):  BSHD [b_loc, S/K, H_t, D]   SBHD [S/K, b_loc, H_t, D]
   *   head-sharded (scatter output, gather input):      BSHD [b_loc, S, H_t/K, D]   SBHD [S, b_loc, H_t/K, D] */
  int64_t seq_sharded_shape[BASP_MAX_TENSORS][BASP_MAX_DIMS];
  int64_t head_sharded_shape[BASP_MAX_TENSORS][BASP_MAX_DIMS];
  /* The heads of tensor t this rank holds on the head-sharded side: global heads [head_begin, head_end). */
  int64_t head_begin[BASP_MAX_TENSORS];
  int64_t head_end[BASP_MAX_TENSORS];
  int32_t plan_path; /* basp_path_t the plan's exchanges take, fixed at plan creation; SHARED replaces STAGED or
                        CMA in an exchange whose head-sharded tensors lie in basp_mem_alloc memory on every rank */
  int32_t reserved1;
  /* Appended in 0.3 (a caller built against 0.2 passes 1112 bytes and gets the fields above). */
  /* The query heads whose split tensor t follows that this rank holds, [split_begin, split_end): head_begin/end
   * for a query-like tensor; for a key/value tensor serving Hq query heads, local query head i of this rank uses
   * local KV head floor((split_begin + i) / r) - floor(split_begin / r), r = Hq / num_heads[t]. */
  int64_t split_begin[BASP_MAX_TENSORS];
  int64_t split_end[BASP_MAX_TENSORS];
  int64_t token_begin; /* the tokens of each sequence this rank holds on the sequence side (THD: at capacity) */
  int64_t token_end;
  int64_t token_capacity;  /* THD: the plan's capacity; 0 otherwise */
  int32_t replicated;      /* 1 when some head is held by several ranks of the group: basp_gather sums it */
  int32_t max_head_chunks; /* since 0.6 (0 before): the most head chunks its exchanges take (basp_scatter_start) */
} basp_plan_info_v1;
typedef basp_plan_info_v1 basp_plan_info_t;

/* clang-format off */
#define BASP_PLAN_INFO_INITIALIZER                                                                          \
  { sizeof(basp_plan_info_v1), BASP_PLAN_INFO_MAGIC, BASP_PLAN_INFO_VERSION, 0, 0, 0, 0, 0,                  \
    { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 }, 0, 0, 0, 0, 0, { { 0 } }, { { 0 } },           \
    { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 }, 0, 0,                                          \
    { 0, 0, 0, 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0, 0, 0, 0 }, 0, 0, 0, 0, 0 }
/* clang-format on */

/* Threads: any thread, any time, also while the plan executes. */
BASP_API basp_status_t basp_plan_query(basp_plan_t plan, basp_plan_info_t* info);

/* Head chunks (docs/design.md, "Head chunks"): how many pieces C, cut along the query heads, a layer's exchanges
 * should take so that attention on one piece overlaps the exchange of its neighbours, from the comm's cost model. */
#define BASP_HEAD_CHUNK_CHOICE_MAGIC 0x42484343u /* "BHCC" */
#define BASP_HEAD_CHUNK_CHOICE_VERSION 1u

typedef struct basp_head_chunk_choice_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t num_chunks;       /* the chosen C, 1..max_head_chunks */
  int32_t max_head_chunks;  /* the most chunks the plans take: ceil(Hq / K), the busiest position's query heads */
  double attention_seconds; /* the attention seconds the choice used (collective: the maximum over the ranks) */
  double seconds_one;       /* the predicted layer without chunks, T(1) */
  double seconds_chosen;    /* the predicted layer in num_chunks chunks, T(num_chunks) */
} basp_head_chunk_choice_v1;
typedef basp_head_chunk_choice_v1 basp_head_chunk_choice_t;

/* clang-format off */
#define BASP_HEAD_CHUNK_CHOICE_INITIALIZER { sizeof(basp_head_chunk_choice_v1), BASP_HEAD_CHUNK_CHOICE_MAGIC, \
                                             BASP_HEAD_CHUNK_CHOICE_VERSION, 0, 0, 0.0, 0.0, 0.0 }
/* clang-format on */

/* The head chunk count for a layer made of a scatter on plan `scatter`, attention, and a gather on plan `gather`
 * (NULL: the scatter plan), two plans of one group of one comm, of `num_tokens` tokens per sequence (-1: the plans'
 * seq_len; THD: the stream's T, which a THD batch plan knows: -1 or its T), where attention for the whole layer on
 * one rank takes `attention_seconds` (all the query heads this rank holds; >= 0). The model predicts the layer's
 * time T(C) for C = 1..max_head_chunks with the comm's cost model and the group's traffic (plan/head_chunk_choice.h)
 * and chooses the C of the least T(C), or 1 where that gains less than 5% over T(1). `predicted_seconds` (NULL when
 * `capacity` is 0) receives T(1), T(2), ..., min(capacity, max_head_chunks) of them. Deterministic: every rank of the
 * group that passes the same arguments gets the same answer, the comm's cost model being the same everywhere (the
 * default, or one calibrated or imported on every rank).
 * `collective` 0: not collective (any thread), the caller makes the inputs equal across the group. `collective` 1:
 * collective over the plans' group (a plain plan) or over the comm's world (a batch plan): attention_seconds is
 * first replaced by its maximum over those ranks, so that a per-rank timed estimate gives one choice everywhere;
 * a rank whose own checks fail still takes part and the others fail with BASP_ERROR_INVALID_ARGUMENT naming it, and
 * num_tokens that differ across the ranks are BASP_ERROR_MISMATCH. Threads (collective): as basp_plan_create.
 * Errors: BASP_ERROR_INVALID_ARGUMENT naming the value for attention_seconds negative or not finite, plans of
 * different comms, a plain plan with a batch plan, plans whose group sizes or max_head_chunks differ, num_tokens a
 * plan does not take, capacity negative; BASP_ERROR_NULL_POINTER for choice NULL or predicted_seconds NULL with
 * capacity > 0; BASP_ERROR_BAD_STRUCT for a wrong size or magic of *choice. */
BASP_API basp_status_t basp_choose_head_chunks(basp_plan_t scatter, basp_plan_t gather, int64_t num_tokens,
                                               double attention_seconds, int32_t collective,
                                               basp_head_chunk_choice_t* choice, double* predicted_seconds,
                                               int32_t capacity);

/* Head scatter (before attention), collective over the group: inputs[t] is sequence-sharded
 * [b_loc, S_l, H_t, D] (or SBHD; THD [T_l, H_t, D]), outputs[t] is head-sharded [b_loc, S, H_l, D] (THD [T, H_l, D])
 * holding heads [head_begin, head_end) of basp_plan_info_t: with K dividing S and H_t, S_l = S/K and heads
 * [l*H_t/K, (l+1)*H_t/K). A tensor of 0 bytes on this rank (no heads, no tokens) may be passed as NULL.
 * A THD plan takes basp_scatter_tokens instead. `stream` is a cudaStream_t on the NCCL backend and must be NULL on MPI.
 * Inputs and outputs must not overlap. A build with CUDA checks that every pointer is memory the backend can reach
 * (host memory on MPI, device memory on NCCL) with cudaPointerGetAttributes, once per new set of pointers (a plan
 * remembers the last set that passed); BASP_CHECK_POINTERS=0 in the environment at plan creation turns the check
 * off for that plan. On the MPI backend an exchange that the group's ranks make on different plans of the comm, or
 * as scatter on some ranks and gather on others, fails on every rank with BASP_ERROR_MISMATCH naming both sides,
 * and so does one whose buffers fail these checks on some rank (that rank reports its own error): at once, the comm
 * staying usable (docs/reliability.md). An exchange that fails leaves its outputs undefined (the rank's own slice
 * may already be in them) and never writes its inputs; on BASP_ERROR_TIMEOUT
 * see docs/reliability.md for what MPI may still do with them. Threads: concurrently on different plans (also of
 * one comm), never twice at once on the same plan. */
BASP_API basp_status_t basp_scatter(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream);

/* Head gather (after attention): the adjoint of basp_scatter, its exact inverse when no head is held by several
 * ranks (basp_plan_info_t.replicated == 0). A head several ranks hold is summed over them, in ascending position, in
 * FP32 (FP16, BF16, FP32) or FP64, identically on every path and backend; a gather that would have to sum another
 * dtype returns BASP_ERROR_UNSUPPORTED. Threads: as basp_scatter. */
BASP_API basp_status_t basp_gather(basp_plan_t plan, const void* const* inputs, void* const* outputs, void* stream);

/* basp_scatter / basp_gather with the token count of this call: for a THD plan, the T tokens of the group's stream
 * (0 <= T <= token_capacity; the rank at position l passes [T_l, H_t, D] with T_l = basp_split(T, K, l)'s count and
 * receives [T, H_l, D]). Every rank of a group passes the same T: on the MPI backend a rank passing another T gets
 * BASP_ERROR_MISMATCH from the first control round; on the NCCL backend a mismatch is undefined unless
 * BASP_CHECK_TOKENS=1 was set at plan creation (an extra host-side agreement per execute, for debugging). For BSHD
 * and SBHD plans num_tokens is -1 or the plan's seq_len. */
BASP_API basp_status_t basp_scatter_tokens(basp_plan_t plan, int64_t num_tokens, const void* const* inputs,
                                           void* const* outputs, void* stream);
BASP_API basp_status_t basp_gather_tokens(basp_plan_t plan, int64_t num_tokens, const void* const* inputs,
                                          void* const* outputs, void* stream);

/* THD plans: the document boundaries of the executes that follow (the group's cu_seqlens: num_docs + 1 entries in
 * host memory, cu_seqlens[0] == 0, non-decreasing; the last is their T). Not collective; the library keeps only a
 * fingerprint, and each later execute checks that its num_tokens equals the last entry. On the MPI backend the
 * fingerprint travels in the first control round, so a rank whose boundaries differ from its group's gets
 * BASP_ERROR_MISMATCH naming the fingerprints; on the NCCL backend it is compared only with BASP_CHECK_TOKENS=1 (see
 * basp_scatter_tokens). NULL with num_docs == 0 forgets them. Threads: as basp_scatter. */
BASP_API basp_status_t basp_plan_set_documents(basp_plan_t plan, const int64_t* cu_seqlens, int32_t num_docs);

/* ---------------------------------------------------------------------------------------------------------
 * Split-phase exchanges by head chunks (since 0.6, docs/overlap.md)
 *
 * A scatter or gather cut into `num_chunks` pieces along each rank's query heads (docs/design.md, "Head chunks"),
 * each started, tested and waited for on its own, so that attention on one chunk runs while the neighbouring
 * chunks move: scatter chunk c + 1 and gather chunk c - 1 beside attention on chunk c. Chunk c of C holds query
 * heads [split_begin + basp_split(n, C, c).begin, ...) of each rank's n = split_end - split_begin (basp_plan_info_t);
 * a key/value head moves with the first chunk whose query heads read it (scatter) and comes back, summed over its
 * holders, with the last (gather). Over the C chunks the outputs are bit-identical to the one-call exchange.
 *  - 1 <= num_chunks <= basp_plan_info_t.max_head_chunks, 0 <= chunk < num_chunks; a rank with fewer query heads
 *    than C has empty chunks, which still take part. num_tokens as basp_scatter_tokens (-1: the plan's).
 *  - Every rank of the group starts the same chunks of the same plans in the same order (the exchanges run in that
 *    order); on the MPI backend a rank that starts another chunk, plan or direction than its peers gets
 *    BASP_ERROR_MISMATCH naming both sides. Chunks of one plan and direction in flight together take the same
 *    num_chunks (a round); each started chunk is waited for (basp_scatter_wait) before it is started again.
 *  - The buffers of a started chunk are the library's until its wait returns: the chunk reads its inputs' and
 *    writes its outputs' rows of its heads only, so attention may read the heads of chunks already waited for
 *    and write the gather inputs of chunks not yet started.
 *  - Refused with BASP_ERROR_INVALID_ARGUMENT naming the value: a chunk or count out of range, a count other than
 *    the round's, a start of a chunk started and not waited for (in flight or done; it can still be waited for),
 *    a one-call basp_scatter/basp_gather of a plan with a chunk not waited for or a round not fully started; a
 *    gather chunk of a plan whose gather sums held heads (replicated == 1) out of order (0, 1, ..., C - 1: its
 *    earlier contributions wait in the plan's workspace until its last chunk); a scatter chunk of such a plan
 *    between the chunks of its gather, unless it is a batch plan (a plan's own workspace serves both directions:
 *    take two plans); a batch plan's gather (chunk or one-call) while another batch plan of the comm is part way
 *    through such a gather (the comm's pool has one workspace per direction, which all batch gathers share: see
 *    "Batch plans"; the message names the open plan and how many of its chunks are started). A batch plan's
 *    scatter may run at any time.
 *  - MPI backend: start returns at once; the comm's progress thread (started at the first start) runs the
 *    exchanges in start order while the caller computes, so the comm needs MPI_THREAD_MULTIPLE (else the first
 *    start returns BASP_ERROR_UNSUPPORTED naming the level MPI provides). Once chunks are in flight, a one-call
 *    execute of another plan of the comm runs on that thread too, after them, and returns when it is done.
 *  - NCCL backend: stream-ordered, never blocking the host. start enqueues the chunk's pack, exchange and unpack
 *    on a stream of the plan (made with the plan), ordered after the work enqueued on `stream` so far, and records
 *    an event after them; test queries that event; wait makes `stream` (the start's) wait on it and returns at
 *    once: work enqueued on `stream` after the wait sees the chunk's outputs, and the buffers are the library's
 *    until `stream` reaches the wait. A round can be captured in a CUDA graph (start and wait inside the capture;
 *    each chunk must be waited for before the capture ends; test then says 1 without querying). All plans of a
 *    comm share one NCCL communicator, which runs its exchanges one at a time in the order they were enqueued: a
 *    scatter chunk and a gather chunk in flight serialise with each other (and with one-call executes of the comm),
 *    and overlap only with the caller's compute. Batch plans: BASP_ERROR_UNSUPPORTED.
 * basp_*_test sets *done to 1 once the chunk is complete (its error, if any, is then returned by its wait), else
 * 0; basp_*_wait blocks until it is complete and returns its status (the chunk is then free to start again; on
 * NCCL it does not block, as above: test returns a device error its event reports, wait only orders the stream, and
 * a chunk that has not ended within the timeout is reported as a one-call execute's is, by
 * basp_comm_get_async_error and the comm's next execute). basp_plan_destroy with chunks not waited for waits for
 * them up to the comm's timeout and returns the first error among them; past the timeout it returns BASP_ERROR_TIMEOUT
 * (MPI: the plan's memory is released once they end; NCCL: the communicator is aborted, which ends them, and the comm
 * is broken). Threads: as basp_scatter (one thread at a time per plan; start, test and wait of one plan from that
 * thread). */
BASP_API basp_status_t basp_scatter_start(basp_plan_t plan, int32_t chunk, int32_t num_chunks, int64_t num_tokens,
                                          const void* const* inputs, void* const* outputs, void* stream);
BASP_API basp_status_t basp_gather_start(basp_plan_t plan, int32_t chunk, int32_t num_chunks, int64_t num_tokens,
                                         const void* const* inputs, void* const* outputs, void* stream);
BASP_API basp_status_t basp_scatter_test(basp_plan_t plan, int32_t chunk, int32_t* done);
BASP_API basp_status_t basp_gather_test(basp_plan_t plan, int32_t chunk, int32_t* done);
BASP_API basp_status_t basp_scatter_wait(basp_plan_t plan, int32_t chunk);
BASP_API basp_status_t basp_gather_wait(basp_plan_t plan, int32_t chunk);

/* ---------------------------------------------------------------------------------------------------------
 * Batch plans: groups of any size per micro-batch over one comm (since 0.5, docs/batch.md)
 *
 * A comm made with config->batch_capacity > 0 also serves batch plans: for one micro-batch, a membership (groups of
 * any sizes, 1..N, partitioning the world, each with its documents or sequences) becomes an exchange plan without
 * creating any communicator and without talking to any rank: host work only. Every rank makes every batch plan of
 * the comm, in the same order, from the same description (typically basp_comm_partition_batch's answer to the same
 * lengths). The description's fingerprint and the comm's count of batch plans travel with the first message of each
 * exchange, so a rank whose description (or count) differs from its group's gets BASP_ERROR_MISMATCH; a rank that
 * believes itself in another group than its peers do makes them wait, and they fail with BASP_ERROR_TIMEOUT naming
 * it. Never wrong data. Batch plans are the one exception to "a plan owns its workspace": they borrow their comm's
 * workspace pool (MPI: the pool and per-node staging regions; NCCL: a device pool), grown at batch plan creation,
 * never at execute, and held by the comm. Sharing that pool and one message tag, the executes of one comm's batch
 * plans run one at a time (a second one on another thread gets BASP_ERROR_INVALID_ARGUMENT). On the MPI backend the
 * pool has two disjoint parts, one per direction: every batch plan's scatters use one workspace (and one staging
 * region per rank), its gathers the other, each grown to the largest need of the comm's batch plans (a batch plan's
 * workspace_bytes, or its staging on one node, is taken in each part), so the pool holds twice what one direction
 * needs. So a layer's scatter chunks may be in flight while a batch gather that sums held heads has chunks open;
 * the one split-phase rule among batch plans is that no other batch plan gathers until that gather's last chunk has
 * started (see "Split-phase exchanges"). A batch plan is made behind the exchanges in flight, and a growing pool
 * keeps its bytes. The NCCL backend runs whole exchanges only, each ordered after the previous batch exchange on
 * the device, so its pool is one region. On the NCCL backend an execute only enqueues: the fingerprint travels as a
 * tag ahead of the data, a mismatch keeps the unpacks from writing and is reported by basp_comm_get_async_error and
 * the comm's next batch execute (BASP_ERROR_MISMATCH), as is an exchange that has not ended within the timeout
 * (BASP_ERROR_TIMEOUT); see docs/batch.md.
 * ------------------------------------------------------------------------------------------------------- */
#define BASP_BATCH_MAGIC 0x42424154u /* "BBAT" */
#define BASP_BATCH_VERSION 1u

typedef struct basp_batch_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t num_groups;         /* G >= 1 */
  int32_t num_docs;           /* THD: documents of the micro-batch; BSHD/SBHD: its sequences (of the plan's seq_len) */
  const int32_t* group_sizes; /* [G]: K_g >= 1, summing to N */
  const int32_t* ranks;       /* [N]: the world ranks of group 0 by position, then group 1's, ...: each rank once */
  const int32_t* group_docs;  /* [G]: documents (THD) or sequences (BSHD/SBHD) of each group, summing to num_docs;
                                 a THD group may have none (T = 0), a BSHD/SBHD group has at least one */
  const int32_t* docs;        /* THD: [num_docs] document indices, group by group, each group's in stream order;
                                 NULL: 0 .. num_docs-1 in order. BSHD/SBHD: NULL */
  const int64_t* lengths;     /* THD: [num_docs] tokens of document i (> 0), by index; BSHD/SBHD: NULL */
} basp_batch_v1;
typedef basp_batch_v1 basp_batch_t;

/* clang-format off */
#define BASP_BATCH_INITIALIZER { sizeof(basp_batch_v1), BASP_BATCH_MAGIC, BASP_BATCH_VERSION, 0, 0, NULL, NULL, NULL, \
                                 NULL, NULL }
/* clang-format on */

/* Not collective: the plan of this rank's group in `batch` for tensors `desc` (as basp_plan_create; THD:
 * token_capacity 0, or at least the group's stream, which each execute then moves: basp_scatter and basp_gather take
 * it, as do the _tokens forms with num_tokens -1 or T). BSHD/SBHD: group g holds group_docs[g] sequences of seq_len
 * tokens. Every rank's sequence-side tokens must fit the comm's batch_capacity. The plan is a basp_plan_t: query,
 * execute and destroy it as any other; it allocates only when it needs more workspace than the comm's pool holds.
 * While split-phase chunks of the comm's plans are queued or running, it is made behind them (it waits for them),
 * so that a growing pool never moves under them. Threads: as basp_scatter (one batch plan of the comm executes at
 * a time), and not beside a batch execute of the same comm on another thread (a growing pool moves). */
BASP_API basp_status_t basp_batch_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc, const basp_batch_t* batch,
                                              basp_plan_t* plan);

/* The batch planner: groups of any size for a packed micro-batch, from the comm's cost model (docs/batch.md). */
#define BASP_BATCH_PROBLEM_MAGIC 0x42505242u /* "BPRB" */
#define BASP_BATCH_PROBLEM_VERSION 1u

typedef struct basp_batch_problem_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  int32_t num_docs;       /* documents of the global micro-batch, >= 1 */
  int32_t dtype;          /* basp_dtype_t of the exchanged tensors */
  const int64_t* lengths; /* [num_docs] tokens of each document, > 0 */
  int64_t query_heads;    /* Hq > 0 */
  int64_t kv_heads;       /* Hkv > 0, dividing Hq */
  int64_t head_dim;       /* D > 0: the query and key head size */
  int64_t capacity;       /* most sequence-side tokens per rank: 0 = the comm's batch_capacity */
  /* Appended in 0.5 after capacity: a caller built against the layout above passes its size (64 bytes on LP64) and
   * gets v_head_dim 0. */
  int64_t v_head_dim; /* Dv >= 0: the value (and attention output) head size, 0 = head_dim. Multi-head latent
                         attention: D = 192 (128 + 64 rotary), Dv = 128, kv_heads = query_heads */
} basp_batch_problem_v1;
typedef basp_batch_problem_v1 basp_batch_problem_t;

/* clang-format off */
#define BASP_BATCH_PROBLEM_INITIALIZER { sizeof(basp_batch_problem_v1), BASP_BATCH_PROBLEM_MAGIC,                \
                                         BASP_BATCH_PROBLEM_VERSION, 0, BASP_DTYPE_UNSET, NULL, 0, 0, 0, 0, 0 }
/* clang-format on */

/* Not collective: partitions the comm's ranks into groups and the micro-batch's documents among them (the batch
 * planner) on this comm's machine (every rank's node, NVLink domain and GPU, gathered at creation) with the comm's
 * cost model, minimising the predicted step time (max over groups of scatter + attention + gather). The scatter
 * moves Q and K at head_dim and V at Dv (v_head_dim, or head_dim when 0), the gather the output at Dv, and a
 * group's attention is the model's (given for Dv = head_dim) times (head_dim + Dv) / (2 * head_dim); see
 * docs/batch.md. A negative v_head_dim, or bytes per token beyond int64, is BASP_ERROR_INVALID_ARGUMENT naming
 * the fields. Deterministic: every rank computes the same answer from the same problem and model. Writes a batch
 * description for basp_batch_plan_create into `out` (num_groups, num_docs, and its arrays pointing into the caller's
 * arrays): group_sizes[N], ranks[N], group_docs[N] and docs[num_docs] (each group's documents ascending).
 * *predicted_seconds (may be NULL) receives the model's step time. A document longer than N * capacity, or a batch
 * of more than N * capacity tokens, is BASP_ERROR_INVALID_ARGUMENT naming it. It makes no plan:
 * basp_batch_plan_create makes one from its answer. */
BASP_API basp_status_t basp_comm_partition_batch(basp_comm_t comm, const basp_batch_problem_t* problem,
                                                 int32_t* group_sizes, int32_t* ranks, int32_t* group_docs,
                                                 int32_t* docs, basp_batch_t* out, double* predicted_seconds);

/* Deprecated: the former name of basp_comm_partition_batch, the same function (kept exported for callers built
 * against 0.5; new code calls basp_comm_partition_batch). */
BASP_API basp_status_t basp_comm_plan_batch(basp_comm_t comm, const basp_batch_problem_t* problem, int32_t* group_sizes,
                                            int32_t* ranks, int32_t* group_docs, int32_t* docs, basp_batch_t* out,
                                            double* predicted_seconds);

/* The comm's cost model (docs/batch.md): one exchange of a group of K ranks costs a0 + a1 * (K - 1) + beta_node *
 * node_bytes + beta_network * network_bytes; a group's attention (c2 * sum L^2 + c1 * sum L) times the share of the
 * query heads its busiest rank holds (and times (D + Dv) / (2 D) for a problem whose value head size Dv differs from
 * its head_dim D). An exchange cut into C head chunks (docs/overlap.md) pays per_piece * pieces * (C - 1) more over
 * its chunks, pieces being the row pieces the busiest rank copies to its peers in the whole exchange (its rows
 * times K - 1) when the group crosses no network link (0 when it does: the link bounds it): each row's heads move
 * as C shorter pieces, which cost more per byte where the exchange is host copies. A comm starts with rough
 * defaults, zero attention coefficients and per_piece 0. */
#define BASP_COST_MODEL_MAGIC 0x42434d44u /* "BCMD" */
#define BASP_COST_MODEL_VERSION 1u

typedef struct basp_cost_model_v1 {
  size_t size;
  uint32_t magic;
  uint32_t version;
  double a0;           /* seconds per exchange */
  double a1;           /* seconds per exchange and peer beyond the first */
  double beta_node;    /* seconds per byte inside a node (NVLink domain) */
  double beta_network; /* seconds per byte over a node's network link, shared by the groups that cross it */
  double c2;           /* attention seconds per squared token, all query heads on one rank, value head size D */
  double c1;           /* attention seconds per token */
  int32_t calibrated;  /* 1 after basp_comm_calibrate (or an import of a calibrated model) */
  int32_t reserved0;
  /* Appended in 0.6 after reserved0: a caller built against the layout above passes its size (72 bytes on LP64);
   * get writes it that many bytes, set leaves the comm's per_piece as it is (the caller does not know it). */
  double per_piece; /* seconds per extra row piece of an exchange cut into head chunks (above) */
} basp_cost_model_v1;
typedef basp_cost_model_v1 basp_cost_model_t;

/* clang-format off */
#define BASP_COST_MODEL_INITIALIZER { sizeof(basp_cost_model_v1), BASP_COST_MODEL_MAGIC, BASP_COST_MODEL_VERSION, \
                                      0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0.0 }
/* clang-format on */

/* Not collective (any thread): the comm's model, and a new one (every coefficient finite and >= 0). Every rank must
 * hold the same model for basp_comm_partition_batch to agree across ranks. */
BASP_API basp_status_t basp_comm_get_cost_model(basp_comm_t comm, basp_cost_model_t* model);
BASP_API basp_status_t basp_comm_set_cost_model(basp_comm_t comm, const basp_cost_model_t* model);

/* Collective over the comm's world (a batch comm): measures the exchange on the live comm, groups of K = 2, 4, 8,
 * ... up to N running concurrently, placed as the planner places them, and at K = 2 across nodes where there are
 * several, for message sizes up to `max_bytes` per rank (0: 4 MiB), `repeats` times each (0: 5), and the largest
 * size again as 2 head chunks one after another (MPI), takes the slowest rank's median, fits a0, a1, beta_node and
 * beta_network to the whole exchanges and per_piece to the chunked ones, and stores them in the comm (identical on
 * every rank: the fit runs on gathered timings). A few seconds. */
BASP_API basp_status_t basp_comm_calibrate(basp_comm_t comm, int64_t max_bytes, int32_t repeats);

/* The comm's model as text ("basp-cost-model 1" then "key value" lines), NUL-terminated in text[capacity];
 * *needed (may be NULL) receives the bytes the text needs with its NUL. capacity too small: BASP_ERROR_INVALID_ARGUMENT
 * naming the size needed. Import replaces the comm's model with a text export wrote (a cluster measured once is not
 * measured again); malformed text is BASP_ERROR_INVALID_ARGUMENT naming the line. Not collective. */
BASP_API basp_status_t basp_comm_export_cost_model(basp_comm_t comm, char* text, size_t capacity, size_t* needed);
BASP_API basp_status_t basp_comm_import_cost_model(basp_comm_t comm, const char* text);

/* ---------------------------------------------------------------------------------------------------------
 * Shared host memory (MPI backend)
 * ------------------------------------------------------------------------------------------------------- */

/* Collective over the calling rank's group: `bytes` of zeroed host memory that the group's ranks map into each
 * other's address space when they share a node. Exchanges whose head-sharded tensors (scatter outputs, gather
 * inputs) all live in such memory move their rows with one user-space copy, no packing and no system call per
 * row: the fastest path of the MPI backend. On a group spanning nodes the memory is ordinary private memory.
 * NCCL comms return BASP_ERROR_UNSUPPORTED. */
BASP_API basp_status_t basp_mem_alloc(basp_comm_t comm, size_t bytes, void** ptr);

/* Collective over the group: every rank passes the pointer the same basp_mem_alloc gave it. Must not run while
 * another thread executes a plan of the comm. NULL is accepted (on every rank) and does nothing. Memory not
 * freed goes with the comm and the last of its plans. Threads: as basp_plan_create. */
BASP_API basp_status_t basp_mem_free(basp_comm_t comm, void* ptr);

/* ---------------------------------------------------------------------------------------------------------
 * NCCL backend (device memory). Builds without CUDA + NCCL return BASP_ERROR_UNSUPPORTED.
 *
 * A comm of the NCCL backend comes from basp_comm_create_nccl (an existing ncclComm_t) or from
 * basp_comm_create_mpi with config->backend = BASP_BACKEND_NCCL. Its plans take device pointers (host pointers
 * are rejected with BASP_ERROR_INVALID_ARGUMENT) and a cudaStream_t as `stream` (NULL: the default stream):
 * basp_scatter/basp_gather only enqueue work on that stream, never wait for it and allocate nothing, so they
 * can be captured in a CUDA graph. On the MPI backend of a library built with CUDA, device pointers are rejected
 * the same way.
 * ------------------------------------------------------------------------------------------------------- */

/* Collective over `nccl_comm` (an ncclComm_t; no operation may be outstanding on it): splits it into one NCCL
 * communicator per group with ncclCommSplit (color = group, key = position). config->backend must be
 * BASP_BACKEND_NCCL. The comm uses the communicator's CUDA device; `nccl_comm` stays the caller's. As in
 * basp_comm_create_mpi, a rank whose config is bad still takes part, so that every rank fails at once; a NULL or
 * invalid `nccl_comm` fails on that rank only, and the others time out. */
BASP_API basp_status_t basp_comm_create_nccl(void* nccl_comm, const basp_comm_config_t* config, basp_comm_t* comm);

/* ---------------------------------------------------------------------------------------------------------
 * Out-of-band creation: an NCCL-backend comm from any framework's collectives (torch.distributed with gloo or
 * NCCL, JAX, a custom launcher), without MPI. The caller lends the library a non-blocking all-gather for the
 * duration of basp_comm_create_oob; the library polls it against the comm's timeout.
 * ------------------------------------------------------------------------------------------------------- */
#define BASP_OOB_MAGIC 0x424f4f54u /* "BOOT" */
#define BASP_OOB_VERSION 1u

/* What the callbacks return; any other value is an error (BASP_ERROR_OOB names the callback and the value). */
#define BASP_OOB_SUCCESS 0     /* done; for allgather_test: the all-gather is complete */
#define BASP_OOB_IN_PROGRESS 1 /* allgather_test only: not complete yet */

typedef struct basp_oob_v1 {
  size_t size;       /* sizeof(basp_oob_v1) */
  uint32_t magic;    /* BASP_OOB_MAGIC */
  uint32_t version;  /* BASP_OOB_VERSION */
  int32_t rank;      /* this process's rank among the out-of-band ranks, 0 .. num_ranks-1 */
  int32_t num_ranks; /* N, the world of the comm */
  void* user_data;   /* passed to every callback */
  /* Starts an all-gather of `bytes` bytes from every rank: `send` of each rank, in rank order, into `recv`
   * (num_ranks * bytes). Stores a handle of the operation in *request. The library keeps `send` and `recv` valid and
   * untouched until allgather_free(request) returns. A start that returns an error must have started nothing: the
   * library then frees both buffers and never calls test or free for it. */
  int (*allgather_start)(void* user_data, const void* send, void* recv, size_t bytes, void** request);
  /* BASP_OOB_SUCCESS once `recv` holds every rank's bytes, BASP_OOB_IN_PROGRESS before. */
  int (*allgather_test)(void* user_data, void* request);
  /* Releases a started request: after it completed, after its test failed, or when the library gave up on it (the
   * comm's timeout); in the last two cases the library keeps `send` and `recv` allocated for the life of the
   * process, since the operation may still complete, and ignores what free returns. */
  int (*allgather_free)(void* user_data, void* request);
} basp_oob_v1;
typedef basp_oob_v1 basp_oob_t;

/* clang-format off */
#define BASP_OOB_INITIALIZER                                                                                \
  { sizeof(basp_oob_v1), BASP_OOB_MAGIC, BASP_OOB_VERSION, -1, 0, NULL, NULL, NULL, NULL }
/* clang-format on */

/* Collective over the ranks of `oob`: an NCCL-backend comm (config->backend must be BASP_BACKEND_NCCL) on the
 * calling thread's current CUDA device. The callbacks run on the calling thread, during this call only. As in
 * basp_comm_create_mpi, a rank whose config is bad still takes part, so that every rank fails at once, and a rank
 * without a usable CUDA device fails with BASP_ERROR_CUDA and makes every rank fail with it. When the bad argument
 * is the channel itself (a NULL or malformed `oob`, a NULL callback, a rank outside 0..num_ranks-1), only that rank
 * fails at once and its peers time out. A start or test that returns an error fails the call with BASP_ERROR_OOB on
 * the ranks where it did (their peers time out, unless theirs fail too); a test that never completes gives
 * BASP_ERROR_TIMEOUT after the comm's timeout. Each group's NCCL communicator is made with ncclCommInitRank (the
 * group's first rank makes the ncclUniqueId, the all-gather carries it). Threads: concurrent calls only with
 * different channels. */
BASP_API basp_status_t basp_comm_create_oob(const basp_oob_t* oob, const basp_comm_config_t* config, basp_comm_t* comm);

/* Not collective. Whether the comm's backend failed asynchronously (ncclCommGetAsyncError on its group
 * communicator): *error is BASP_SUCCESS when nothing failed, else the failure's status (BASP_ERROR_NCCL), and
 * `message` (when not NULL and capacity > 0) receives its description, truncated and NUL-terminated. A comm found
 * failed is broken from then on: later calls on it and its plans return BASP_ERROR_COMM_BROKEN. MPI comms never
 * fail asynchronously, but a broken comm of either backend (BASP_ERROR_TIMEOUT, ...) reports what broke it here:
 * this query still succeeds on a broken comm. Threads: any thread, any time. */
BASP_API basp_status_t basp_comm_get_async_error(basp_comm_t comm, basp_status_t* error, char* message,
                                                 size_t capacity);

/* Not collective. Aborts the comm's NCCL operations, including those enqueued and not yet finished, and frees
 * its NCCL communicators (ncclCommAbort): meant for a rank that found an exchange hung or failed. The comm is
 * broken from then on: every later call on it or its plans (basp_scatter, basp_gather, basp_plan_create) returns
 * BASP_ERROR_COMM_BROKEN naming the abort, a second abort does nothing; the comm and its plans must still be
 * destroyed. Do not call it while another thread is inside basp_scatter/basp_gather of the comm's plans. MPI
 * comms return BASP_ERROR_UNSUPPORTED (their calls time out by themselves). Threads: any thread, see above. */
BASP_API basp_status_t basp_comm_abort(basp_comm_t comm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BASP_BASP_H */
