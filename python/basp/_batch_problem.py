"""basp.Comm.partition_batch's arguments read into a basp_batch_problem_v1, each checked where ctypes would take it
silently (an int beyond int64 keeps its low 64 bits there)."""
from __future__ import annotations

import ctypes
import operator
from typing import Any, List, Optional, Tuple

from . import _abi, _arrays, _library
from ._arrays import DtypeLike
from .errors import Error, int64_arg, invalid_argument


def length_list(lengths: Any, where: str) -> List[int]:
    """Document lengths (a sequence of ints, a 1-D integer NumPy array or tensor) -> ints."""
    if hasattr(lengths, "detach"):  # a torch tensor
        lengths = lengths.detach().cpu()
    if hasattr(lengths, "ndim") and lengths.ndim != 1:
        raise invalid_argument("%s: lengths has shape %s; expected one length per document (1-D)" % (
            where, tuple(lengths.shape)))
    if hasattr(lengths, "tolist"):
        lengths = lengths.tolist()
    try:
        values = [operator.index(x) for x in lengths]
    except TypeError:
        raise invalid_argument("%s: lengths (%r) is not a sequence of integers" % (where, lengths)) from None
    if len(values) >= 2 ** 31:
        raise invalid_argument("%s: %d documents; at most 2^31 - 1" % (where, len(values)))
    for i, x in enumerate(values):
        int64_arg(x, "lengths[%d]" % i, where)
    return values


def v_head_dim_value(v_head_dim: Optional[int], where: str) -> int:
    """partition_batch's v_head_dim -> the problem's field: None -> 0 (head_dim), else an int in 0..2^63 - 1."""
    if v_head_dim is None:
        return 0
    try:
        if isinstance(v_head_dim, bool):
            raise TypeError
        value = operator.index(v_head_dim)
    except TypeError:
        raise invalid_argument("%s: v_head_dim (%r) must be None or an int (None or 0: head_dim)" % (
            where, v_head_dim)) from None
    if not 0 <= value < 2 ** 63:
        raise invalid_argument("%s: v_head_dim (%d) must be None or in 0..2^63 - 1 (None or 0: head_dim)" % (
            where, value))
    return value


def batch_problem(where: str, lengths: Any, query_heads: int, kv_heads: int, head_dim: int, dtype: DtypeLike,
                  capacity: int, v_head_dim: Optional[int]) -> Tuple[_abi.BatchProblemStruct, List[int]]:
    """(the problem, the lengths as ints). The problem keeps its lengths array alive (ctypes holds an array
    assigned to a pointer field)."""
    v_dim = v_head_dim_value(v_head_dim, where)
    values = length_list(lengths, where)
    c_lengths = (ctypes.c_int64 * max(1, len(values)))(*values)
    problem = _abi.BatchProblemStruct(num_docs=len(values), dtype=_arrays.basp_dtype(dtype, where + ": dtype"),
                                      lengths=c_lengths, query_heads=int64_arg(query_heads, "query_heads", where),
                                      kv_heads=int64_arg(kv_heads, "kv_heads", where),
                                      head_dim=int64_arg(head_dim, "head_dim", where),
                                      capacity=int64_arg(capacity, "capacity", where), v_head_dim=v_dim)
    return problem, values


def check_reads_v_head_dim(fn: Any, comm: Any, world: int, problem: _abi.BatchProblemStruct, where: str) -> None:
    """A libbasp built before v_head_dim was appended to basp_batch_problem_v1 copies the problem through capacity
    only and plans as if v had head_dim's size. For a v_head_dim other than 0 and head_dim, asks the loaded one
    (`fn`, its basp_comm_partition_batch, on `comm`) to plan v_head_dim -1: one that reads the field refuses it, an
    older one plans; then UNSUPPORTED naming the library, its version and the field."""
    if problem.v_head_dim in (0, problem.head_dim):
        return
    one = (ctypes.c_int64 * 1)(1)
    probe = _abi.BatchProblemStruct(num_docs=1, dtype=int(_abi.Dtype.FP32), lengths=one, query_heads=1, kv_heads=1,
                                    head_dim=1, capacity=0, v_head_dim=-1)
    arrays = [(ctypes.c_int32 * max(1, world))() for _ in range(4)]
    if fn(comm, ctypes.byref(probe), *arrays, ctypes.byref(_abi.BatchStruct()), None) == _abi.Status.SUCCESS:
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "%s: v_head_dim (%d, head_dim %d): the loaded libbasp %s (%s) "
                    "does not read basp_batch_problem_v1.v_head_dim (it was built before the field) and would plan "
                    "as if v had head_dim's size" % (where, problem.v_head_dim, problem.head_dim,
                                                      "%d.%d.%d" % _library.version(), _library.path()))
