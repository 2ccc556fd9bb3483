"""The C ABI of include/basp/basp.h, mirrored for ctypes: enums, constants and the versioned structs.

Every value here is checked against the header by python/tests/test_abi.py, which compares field offsets,
sizes, constants and the bytes of each ..._INITIALIZER with a small C program compiled from the header.
Structs may only grow at the end (the library reads min(size, sizeof)), so a new field is appended here too.
"""
from __future__ import annotations

import ctypes
import enum
from typing import Any, Dict

MAX_TENSORS = 8  # BASP_MAX_TENSORS
MAX_DIMS = 4  # BASP_MAX_DIMS: dimensions of a shape in basp_plan_info_t

COMM_CONFIG_MAGIC = 0x42434F4D  # "BCOM"
COMM_CONFIG_VERSION = 1
RANK_INFO_MAGIC = 0x4252494E  # "BRIN"
RANK_INFO_VERSION = 1
PLAN_DESC_MAGIC = 0x42504C4E  # "BPLN"
PLAN_DESC_VERSION = 1
PLAN_INFO_MAGIC = 0x42504946  # "BPIF"
PLAN_INFO_VERSION = 1
OOB_MAGIC = 0x424F4F54  # "BOOT"
OOB_VERSION = 1
OOB_SUCCESS = 0  # BASP_OOB_SUCCESS: what a basp_oob_t callback returns when done
OOB_IN_PROGRESS = 1  # BASP_OOB_IN_PROGRESS: allgather_test only, not complete yet
BATCH_MAGIC = 0x42424154  # "BBAT"
BATCH_VERSION = 1
BATCH_PROBLEM_MAGIC = 0x42505242  # "BPRB"
BATCH_PROBLEM_VERSION = 1
COST_MODEL_MAGIC = 0x42434D44  # "BCMD"
COST_MODEL_VERSION = 1


class Status(enum.IntEnum):
    """basp_status_t: values fixed forever."""
    SUCCESS = 0
    ERROR_INVALID_ARGUMENT = 1
    ERROR_NULL_POINTER = 2
    ERROR_INVALID_HANDLE = 3
    ERROR_BAD_STRUCT = 4
    ERROR_UNSUPPORTED = 5
    ERROR_OUT_OF_MEMORY = 6
    ERROR_MPI = 7
    ERROR_CUDA = 8
    ERROR_NCCL = 9
    ERROR_INTERNAL = 10
    ERROR_MISMATCH = 11
    ERROR_TIMEOUT = 12
    ERROR_COMM_BROKEN = 13
    ERROR_OOB = 14


STATUS_COUNT = 15  # BASP_STATUS_COUNT
BACKEND_COUNT = 2  # BASP_BACKEND_COUNT
PLACEMENT_COUNT = 3  # BASP_PLACEMENT_COUNT
PATH_COUNT = 7  # BASP_PATH_COUNT
LAYOUT_COUNT = 3  # BASP_LAYOUT_COUNT
# Not members of Dtype, which lists element types only: UNSET is what BASP_PLAN_DESC_INITIALIZER leaves in dtype.
DTYPE_UNSET = 9  # BASP_DTYPE_UNSET (before 0.2 this value was BASP_DTYPE_COUNT)
DTYPE_COUNT = 10  # BASP_DTYPE_COUNT: one past the last value


class Backend(enum.IntEnum):
    """basp_backend_t."""
    MPI = 0
    NCCL = 1


class Placement(enum.IntEnum):
    """basp_placement_t."""
    DEFAULT = 0
    CONTIGUOUS = 1
    TOPOLOGY = 2


class Path(enum.IntEnum):
    """basp_path_t: how a plan's exchanges move their bytes (PlanInfo.plan_path, PlanInfo.last_path)."""
    NONE = 0
    LOCAL = 1
    P2P = 2
    CMA = 3
    DIRECT = 3  # an alias of CMA (its name before 0.2), as BASP_PATH_DIRECT is in basp.h
    SHARED = 4
    NCCL = 5
    STAGED = 6


class Layout(enum.IntEnum):
    """basp_layout_t. THD: one packed stream of T tokens per group, [T, H, D]; the plan is made for a token
    capacity and each scatter/gather passes its T (num_tokens)."""
    BSHD = 0
    SBHD = 1
    THD = 2


class Dtype(enum.IntEnum):
    """basp_dtype_t: the element size; FP16, BF16, FP32 and FP64 can also be summed (the gather of a head several
    ranks hold)."""
    BYTE = 0
    FP8_E4M3 = 1
    FP8_E5M2 = 2
    FP16 = 3
    BF16 = 4
    FP32 = 5
    FP64 = 6
    INT32 = 7
    INT64 = 8


DTYPE_SIZE = {Dtype.BYTE: 1, Dtype.FP8_E4M3: 1, Dtype.FP8_E5M2: 1, Dtype.FP16: 2, Dtype.BF16: 2,
              Dtype.FP32: 4, Dtype.FP64: 8, Dtype.INT32: 4, Dtype.INT64: 8}


def _plain(value: Any) -> Any:
    """A field's value for as_dict: arrays (also nested ones) as lists."""
    if isinstance(value, ctypes.Array):
        return [_plain(x) for x in value]
    return value


class _Versioned(ctypes.Structure):
    """A struct that starts with size, magic, version; constructed like its C ..._INITIALIZER."""
    _magic = 0
    _version = 0
    _defaults: Dict[str, Any] = {}

    def __init__(self, **fields: Any) -> None:
        super().__init__()
        self.size = ctypes.sizeof(self)
        self.magic = self._magic
        self.version = self._version
        for name, value in self._defaults.items():
            setattr(self, name, value)
        for name, value in fields.items():
            if name not in dict(self._fields_):
                raise TypeError("%s has no field %r" % (type(self).__name__, name))
            setattr(self, name, value)

    def as_dict(self) -> Dict[str, Any]:
        return {name: _plain(getattr(self, name)) for name, _ in self._fields_}

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self.as_dict().items()))


class CommConfig(_Versioned):
    """basp_comm_config_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("micro_batch", ctypes.c_int64),
        ("num_groups", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("placement", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("timeout_ms", ctypes.c_int64),
        # Appended in 0.5 (the 0.4 layout ends here, at 48 bytes): > 0, the comm also serves batch plans.
        ("batch_capacity", ctypes.c_int64),
    ]
    _magic = COMM_CONFIG_MAGIC
    _version = COMM_CONFIG_VERSION
    _defaults = {"micro_batch": -1, "num_groups": -1, "backend": Backend.MPI, "placement": Placement.DEFAULT,
                 "reserved0": 0, "timeout_ms": -1, "batch_capacity": 0}


class RankInfoStruct(_Versioned):
    """basp_rank_info_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("world_size", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("num_groups", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("group_index", ctypes.c_int32),
        ("group_position", ctypes.c_int32),
        ("micro_batch", ctypes.c_int64),
        ("first_sequence", ctypes.c_int64),
        ("num_sequences", ctypes.c_int64),
        ("seq_len", ctypes.c_int64),
        ("token_begin", ctypes.c_int64),
        ("token_end", ctypes.c_int64),
    ]
    _magic = RANK_INFO_MAGIC
    _version = RANK_INFO_VERSION


class PlanDesc(_Versioned):
    """basp_plan_desc_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("layout", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("seq_len", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("num_tensors", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("num_heads", ctypes.c_int64 * MAX_TENSORS),
        # Appended in 0.3 (the first layout ends here, at 112 bytes): GQA routing and THD.
        ("query_heads", ctypes.c_int64 * MAX_TENSORS),
        ("token_capacity", ctypes.c_int64),
        # Appended in 0.5 (the layout above ends at 184 bytes): a head size per tensor, 0 for head_dim.
        ("head_dims", ctypes.c_int64 * MAX_TENSORS),
    ]
    _magic = PLAN_DESC_MAGIC
    _version = PLAN_DESC_VERSION
    _defaults = {"layout": Layout.BSHD, "dtype": DTYPE_UNSET, "seq_len": -1, "head_dim": -1, "num_tensors": 0,
                 "reserved0": 0, "token_capacity": 0}


class PlanInfoStruct(_Versioned):
    """basp_plan_info_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("num_tensors", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("local_sequences", ctypes.c_int64),
        ("local_tokens", ctypes.c_int64),
        ("workspace_bytes", ctypes.c_int64),
        ("seq_sharded_elems", ctypes.c_int64 * MAX_TENSORS),
        ("head_sharded_elems", ctypes.c_int64 * MAX_TENSORS),
        ("bytes_sent_per_exchange", ctypes.c_int64),
        ("last_path", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        # Appended in 0.2 (the 0.1 layout ends here, at 192 bytes): every tensor's shapes and head range.
        ("layout", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("seq_sharded_shape", (ctypes.c_int64 * MAX_DIMS) * MAX_TENSORS),
        ("head_sharded_shape", (ctypes.c_int64 * MAX_DIMS) * MAX_TENSORS),
        ("head_begin", ctypes.c_int64 * MAX_TENSORS),
        ("head_end", ctypes.c_int64 * MAX_TENSORS),
        ("plan_path", ctypes.c_int32),
        ("reserved1", ctypes.c_int32),
        # Appended in 0.3 (the 0.2 layout ends here, at 1112 bytes): splits, token range, capacity, replication.
        ("split_begin", ctypes.c_int64 * MAX_TENSORS),
        ("split_end", ctypes.c_int64 * MAX_TENSORS),
        ("token_begin", ctypes.c_int64),
        ("token_end", ctypes.c_int64),
        ("token_capacity", ctypes.c_int64),
        ("replicated", ctypes.c_int32),
        ("max_head_chunks", ctypes.c_int32),
    ]
    _magic = PLAN_INFO_MAGIC
    _version = PLAN_INFO_VERSION


# The callbacks of basp_oob_v1, in basp.h's order. The library calls them on the thread inside
# basp_comm_create_oob; the CFUNCTYPE objects must stay referenced until that call returns (a struct holds the
# ones assigned to its fields).
#   int (*allgather_start)(void* user_data, const void* send, void* recv, size_t bytes, void** request)
OobAllgatherStart = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
#   int (*allgather_test)(void* user_data, void* request)
OobAllgatherTest = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
#   int (*allgather_free)(void* user_data, void* request)
OobAllgatherFree = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class OobStruct(_Versioned):
    """basp_oob_v1: a non-blocking all-gather lent to basp_comm_create_oob (the callbacks default to NULL)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("rank", ctypes.c_int32),
        ("num_ranks", ctypes.c_int32),
        ("user_data", ctypes.c_void_p),
        ("allgather_start", OobAllgatherStart),
        ("allgather_test", OobAllgatherTest),
        ("allgather_free", OobAllgatherFree),
    ]
    _magic = OOB_MAGIC
    _version = OOB_VERSION
    _defaults = {"rank": -1, "num_ranks": 0}


class BatchStruct(_Versioned):
    """basp_batch_v1: a membership of one micro-batch (groups of any size) for basp_batch_plan_create. The arrays
    are the caller's (basp.Batch keeps them alive while the struct is in use)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("num_groups", ctypes.c_int32),
        ("num_docs", ctypes.c_int32),
        ("group_sizes", ctypes.POINTER(ctypes.c_int32)),
        ("ranks", ctypes.POINTER(ctypes.c_int32)),
        ("group_docs", ctypes.POINTER(ctypes.c_int32)),
        ("docs", ctypes.POINTER(ctypes.c_int32)),
        ("lengths", ctypes.POINTER(ctypes.c_int64)),
    ]
    _magic = BATCH_MAGIC
    _version = BATCH_VERSION


class BatchProblemStruct(_Versioned):
    """basp_batch_problem_v1: what basp_comm_partition_batch partitions."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("num_docs", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("lengths", ctypes.POINTER(ctypes.c_int64)),
        ("query_heads", ctypes.c_int64),
        ("kv_heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
        ("v_head_dim", ctypes.c_int64),
    ]
    _magic = BATCH_PROBLEM_MAGIC
    _version = BATCH_PROBLEM_VERSION
    _defaults = {"dtype": DTYPE_UNSET}


class CostModelStruct(_Versioned):
    """basp_cost_model_v1: the comm's exchange and attention cost model (basp.CostModel is its Python face)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("a0", ctypes.c_double),
        ("a1", ctypes.c_double),
        ("beta_node", ctypes.c_double),
        ("beta_network", ctypes.c_double),
        ("c2", ctypes.c_double),
        ("c1", ctypes.c_double),
        ("calibrated", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("per_piece", ctypes.c_double),  # appended in 0.6
    ]
    _magic = COST_MODEL_MAGIC
    _version = COST_MODEL_VERSION


# Functions of 0.3 (a libbasp without them raises BASP_ERROR_UNSUPPORTED when a call needs them), as
# name -> (restype, argtypes); basp._library declares them when the library has them. test_abi.py compares each with
# the header's prototype (abi_layout.c checks that the spelling it prints is the function's type).
_c_void_pp = ctypes.POINTER(ctypes.c_void_p)
FUNCTION_PROTOTYPES = {
    # basp_status_t basp_split(int64_t items, int32_t parts, int32_t index, int64_t* begin, int64_t* end)
    "basp_split": (ctypes.c_int, [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64),
                                  ctypes.POINTER(ctypes.c_int64)]),
    # basp_status_t basp_scatter_tokens(basp_plan_t plan, int64_t num_tokens, const void* const* inputs,
    #                                   void* const* outputs, void* stream), and basp_gather_tokens alike
    "basp_scatter_tokens": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, _c_void_pp, _c_void_pp, ctypes.c_void_p]),
    "basp_gather_tokens": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, _c_void_pp, _c_void_pp, ctypes.c_void_p]),
    # basp_status_t basp_plan_set_documents(basp_plan_t plan, const int64_t* cu_seqlens, int32_t num_docs)
    "basp_plan_set_documents": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
    # 0.4: basp_status_t basp_get_features(unsigned* features)
    "basp_get_features": (ctypes.c_int, [ctypes.POINTER(ctypes.c_uint)]),
    # basp_status_t basp_get_nccl_library(int* version, char* path, size_t path_capacity)
    "basp_get_nccl_library": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]),
    # 0.5, batch plans: basp_status_t basp_batch_plan_create(basp_comm_t comm, const basp_plan_desc_t* desc,
    #                                                        const basp_batch_t* batch, basp_plan_t* plan)
    "basp_batch_plan_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(PlanDesc), ctypes.POINTER(BatchStruct),
                                              _c_void_pp]),
    # basp_status_t basp_comm_partition_batch(basp_comm_t comm, const basp_batch_problem_t* problem,
    #     int32_t* group_sizes, int32_t* ranks, int32_t* group_docs, int32_t* docs, basp_batch_t* out,
    #     double* predicted_seconds); basp_comm_plan_batch: its deprecated name, the same prototype
    "basp_comm_partition_batch": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(BatchProblemStruct),
                                                 ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                                 ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                                 ctypes.POINTER(BatchStruct), ctypes.POINTER(ctypes.c_double)]),
    "basp_comm_plan_batch": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(BatchProblemStruct),
                                            ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                            ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                            ctypes.POINTER(BatchStruct), ctypes.POINTER(ctypes.c_double)]),
    # basp_status_t basp_comm_get_cost_model(basp_comm_t comm, basp_cost_model_t* model), and set (const ...*)
    "basp_comm_get_cost_model": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(CostModelStruct)]),
    "basp_comm_set_cost_model": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(CostModelStruct)]),
    # basp_status_t basp_comm_calibrate(basp_comm_t comm, int64_t max_bytes, int32_t repeats)
    "basp_comm_calibrate": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32]),
    # basp_status_t basp_comm_export_cost_model(basp_comm_t comm, char* text, size_t capacity, size_t* needed)
    "basp_comm_export_cost_model": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_size_t)]),
    # basp_status_t basp_comm_import_cost_model(basp_comm_t comm, const char* text)
    "basp_comm_import_cost_model": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
}
# 0.6, head chunks: basp_status_t basp_scatter_start(basp_plan_t plan, int32_t chunk, int32_t num_chunks,
#     int64_t num_tokens, const void* const* inputs, void* const* outputs, void* stream), basp_scatter_test(
#     basp_plan_t plan, int32_t chunk, int32_t* done), basp_scatter_wait(basp_plan_t plan, int32_t chunk); gather alike
for _op in ("scatter", "gather"):
    FUNCTION_PROTOTYPES["basp_%s_start" % _op] = (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                                                                 ctypes.c_int64, _c_void_pp, _c_void_pp, ctypes.c_void_p])
    FUNCTION_PROTOTYPES["basp_%s_test" % _op] = (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32,
                                                                ctypes.POINTER(ctypes.c_int32)])
    FUNCTION_PROTOTYPES["basp_%s_wait" % _op] = (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32])
del _op

# basp_get_features bits (BASP_FEATURE_*), by the names basp.features() reports.
FEATURES = {"mpi": 1, "cuda": 2, "nccl": 4, "hwloc": 8}


# struct name in basp.h -> its mirror, for the ABI test.
STRUCTS = {
    "basp_comm_config_v1": CommConfig,
    "basp_rank_info_v1": RankInfoStruct,
    "basp_plan_desc_v1": PlanDesc,
    "basp_plan_info_v1": PlanInfoStruct,
    "basp_oob_v1": OobStruct,
    "basp_batch_v1": BatchStruct,
    "basp_batch_problem_v1": BatchProblemStruct,
    "basp_cost_model_v1": CostModelStruct,
}


# -----------------------------------------------------------------------------------------------------------------
# Packed batches: documents to groups (basp.h: basp_doc_assignment_v1, basp_comm_assign_documents).
# Kept in this block of its own, and out of STRUCTS: python/tests/test_documents.py checks it against the header
# with its own probe (abi_documents.c), so test_abi.py's probe need not know it.
# -----------------------------------------------------------------------------------------------------------------
DOC_ASSIGNMENT_MAGIC = 0x42444F43  # "BDOC"
DOC_ASSIGNMENT_VERSION = 1


class DocAssignmentStruct(_Versioned):
    """basp_doc_assignment_v1."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("rank", ctypes.c_int32),
        ("group_index", ctypes.c_int32),
        ("group_position", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("num_docs", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("stream_tokens", ctypes.c_int64),
        ("token_begin", ctypes.c_int64),
        ("token_end", ctypes.c_int64),
        ("first_doc", ctypes.c_int32),
        ("reserved1", ctypes.c_int32),
        ("first_doc_offset", ctypes.c_int64),
        ("max_seqlen", ctypes.c_int64),
        ("max_group_tokens", ctypes.c_int64),
        ("imbalance", ctypes.c_double),
    ]
    _magic = DOC_ASSIGNMENT_MAGIC
    _version = DOC_ASSIGNMENT_VERSION


# The structs of this block (struct name in basp.h -> its mirror), for test_documents.py.
DOCUMENT_STRUCTS = {"basp_doc_assignment_v1": DocAssignmentStruct}

# basp_status_t basp_comm_assign_documents(basp_comm_t comm, const int64_t* lengths, int32_t num_docs,
#     int64_t capacity, int32_t rank, basp_doc_assignment_t* assignment, int32_t* docs, int64_t* cu_seqlens,
#     int32_t max_docs): (restype, argtypes), declared by basp.data when it first calls it.
ASSIGN_DOCUMENTS_PROTOTYPE = (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32,
                                             ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(DocAssignmentStruct),
                                             ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64),
                                             ctypes.c_int32])
