"""libbasp from Python: Batch-Aware Sequence Parallelism redistribution over the C ABI (ctypes, no extension).

    from mpi4py import MPI
    import basp
    comm = basp.Comm(MPI.COMM_WORLD, micro_batch=4)         # G = gcd(N, B) groups of K = N / G ranks
    plan = comm.plan(seq_len=4096, head_dim=128, num_heads=[32, 8, 8], dtype=numpy.float32,
                     query_heads=[0, 32, 32])                 # K/V follow the split of the 32 query heads (GQA)
    q_h, k_h, v_h = plan.scatter([q, k, v])                   # sequence-sharded -> head-sharded
    (out,) = plan.gather([out_h])                             # and back (with a one-tensor plan)

Any sequence length and head counts (split as torch.tensor_split does), and packed streams (layout="thd",
token_capacity=..., then scatter/gather(..., num_tokens=T)).

Batch plans (a comm made with batch_capacity=...): groups of any size per micro-batch, from the planner or by hand:
    batch = comm.partition_batch(lengths, query_heads=32, kv_heads=8, head_dim=128, dtype=numpy.float32)
    plan = comm.batch_plan(batch, head_dim=128, num_heads=[32, 8, 8], dtype=numpy.float32, query_heads=[0, 32, 32])

Without MPI, basp.Comm.from_oob makes an NCCL-backend comm over any framework's all-gather (a basp.OobAllgather).
The library is found through $BASP_LIBRARY, next to the installed package, or the dynamic linker's search.
PyTorch integration (autograd, BaspAttention) lives in basp.torch.
"""
from ._abi import (MAX_DIMS, MAX_TENSORS, Backend, CommConfig, Dtype, Layout, OobStruct, Path, PlanDesc,
                   PlanInfoStruct, Placement, RankInfoStruct, Status)
from ._library import (features, last_error, load as load_library, nccl_library, path as library_path, status_string,
                       version)
from .batch import Batch, CostModel
from .comm import Comm, RankInfo
from .errors import Error
from ._head_chunks import HeadChunkChoice
from .oob import OobAllgather
from .plan import Plan, PlanInfo, Work
from . import data

__all__ = [
    "Backend", "Batch", "Comm", "CommConfig", "CostModel", "Dtype", "Error", "HeadChunkChoice", "Layout", "MAX_DIMS",
    "MAX_TENSORS", "OobAllgather", "OobStruct", "Path", "Placement", "Plan", "PlanDesc", "PlanInfo", "PlanInfoStruct",
    "RankInfo", "RankInfoStruct", "Status", "data", "features", "last_error", "library_path", "load_library",
    "nccl_library", "status_string", "version", "Work",
]
