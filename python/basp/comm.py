"""basp.Comm: the groups of the world for one micro-batch size, created from an mpi4py communicator, an NCCL
communicator or any framework's all-gather (basp.OobAllgather)."""
from __future__ import annotations

import ctypes
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Type, Union

from . import _abi, _library
from ._abi import Backend, Layout, Placement
from ._arrays import DtypeLike
from ._batch_problem import batch_problem, check_reads_v_head_dim
from ._handle import CommHandle
from .batch import Batch, CostModel
from .errors import Error, invalid_argument
from .oob import Channel
from .plan import HeadDimLike, LayoutLike, Plan

BackendLike = Union[Backend, int, str]  # a member, its int, or its name ("nccl")
PlacementLike = Union[Placement, int, str]


class RankInfo:
    """What one rank does (the paper's Algorithm 2): its group, its sequences and its token range.

    The rank holds sequences [first_sequence, first_sequence + num_sequences) of each micro-batch and, of each
    of them, tokens [token_begin, token_end) (0, 0 when queried with seq_len 0): any S, split over the group's K
    positions as torch.tensor_split does (the first S % K positions hold one token more; a position may hold none).
    """

    _FIELDS = ("world_size", "rank", "num_groups", "group_size", "group_index", "group_position", "micro_batch",
               "first_sequence", "num_sequences", "seq_len", "token_begin", "token_end")

    world_size: int
    rank: int
    num_groups: int
    group_size: int
    group_index: int
    group_position: int
    micro_batch: int
    first_sequence: int
    num_sequences: int
    seq_len: int
    token_begin: int
    token_end: int

    def __init__(self, struct: _abi.RankInfoStruct) -> None:
        for name in self._FIELDS:
            setattr(self, name, int(getattr(struct, name)))

    @property
    def sequences(self) -> slice:
        """slice of the micro-batch's sequences this rank holds."""
        return slice(self.first_sequence, self.first_sequence + self.num_sequences)

    @property
    def tokens(self) -> slice:
        """slice of each sequence's tokens this rank holds."""
        return slice(self.token_begin, self.token_end)

    def as_dict(self) -> Dict[str, int]:
        return {name: getattr(self, name) for name in self._FIELDS}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RankInfo) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return "RankInfo(%s)" % ", ".join("%s=%d" % kv for kv in self.as_dict().items())


def _fortran_handle(mpi_comm: Any) -> int:
    """An mpi4py communicator (or its Fortran handle as an int) -> basp_mpi_fint_t."""
    if hasattr(mpi_comm, "py2f"):
        return int(mpi_comm.py2f())
    if isinstance(mpi_comm, int) and not isinstance(mpi_comm, bool):
        return mpi_comm
    raise invalid_argument("basp.Comm: mpi_comm (%r, a %s) is neither an mpi4py communicator nor a Fortran "
                           "communicator handle (int)" % (mpi_comm, type(mpi_comm).__name__))


def _enum_value(enum_type: Type[Any], value: Union[int, str], name: str) -> int:
    """An enum member, its name ("nccl") or its int -> int; unknown ints go to the library to be named there."""
    if isinstance(value, str):
        try:
            return int(enum_type[value.upper()])
        except KeyError:
            raise invalid_argument("basp.Comm: %s (%r) is not one of %s" % (
                name, value, ", ".join(m.name.lower() for m in enum_type))) from None
    return int(value)


def _config(where: str, config: Optional[_abi.CommConfig], micro_batch: Optional[int], num_groups: Optional[int],
            backend: BackendLike, placement: PlacementLike, timeout_ms: Optional[int] = None,
            batch_capacity: Optional[int] = None) -> _abi.CommConfig:
    """The creation's config: `config` as given (checked to be one), or one made from the keyword arguments."""
    if config is not None:
        if not isinstance(config, _abi.CommConfig):
            raise invalid_argument("%s: config (a %s) is not a basp.CommConfig" % (where, type(config).__name__))
        return config
    capacity = 0 if batch_capacity is None else int(batch_capacity)
    if micro_batch is None:
        if capacity <= 0:
            raise invalid_argument("%s: micro_batch is required (sequences per micro-batch, B), unless the comm "
                                   "serves batch plans only (batch_capacity > 0)" % where)
        micro_batch = 0  # a comm of batch plans only
    if capacity and not _library.has("basp_batch_plan_create"):
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "%s: batch_capacity (%d): the loaded libbasp (%s) has no batch "
                    "plans: it is older than this binding" % (where, capacity, _library.path()))
    return _abi.CommConfig(micro_batch=int(micro_batch), num_groups=-1 if num_groups is None else int(num_groups),
                           backend=_enum_value(Backend, backend, "backend"),
                           placement=_enum_value(Placement, placement, "placement"),
                           timeout_ms=-1 if timeout_ms is None else int(timeout_ms), batch_capacity=capacity)


def _check_one_nccl(where: str) -> None:
    """An ncclComm_t is an object of the libnccl that made it: refuses when the process has mapped a libnccl other
    than the one libbasp runs with (say PyTorch's nvidia-nccl wheel and a system NCCL), since the communicator of
    one means nothing to the other."""
    if not _library.has("basp_get_nccl_library"):
        return  # an older library cannot say which libnccl it uses
    _, ours = _library.nccl_library()
    ours = os.path.realpath(ours) if ours else ours
    others = [f for f in _library.mapped_nccl_files() if f != ours]
    if others:
        raise invalid_argument("%s: this process has loaded %s besides the libnccl libbasp uses (%s): an ncclComm_t "
                               "made by one libnccl means nothing to another. Load one NCCL only (with PyTorch's "
                               "nvidia-nccl wheel, build libbasp with NCCL_ROOT=site-packages/nvidia/nccl)" % (
                                   where, ", ".join(others), ours or "unknown"))


class Comm(CommHandle):
    """Collective over `mpi_comm`: splits it into G groups of K ranks for micro-batches of `micro_batch` sequences.

    num_groups: None (or -1) = gcd(N, B), the BASP rule; 1 = DeepSpeed-Ulysses; otherwise a divisor of N and B.
    backend: Backend.MPI (host memory) or Backend.NCCL (device memory; needs a libbasp built with NCCL).
    config: a ready basp.CommConfig (overrides the keyword arguments), for callers that need every field.
    batch_capacity: > 0, the comm also serves batch plans (groups of any size per micro-batch: partition_batch,
    batch_plan; docs/batch.md) of at most this many sequence-side tokens per rank; micro_batch may then be None or
    0 (a comm of batch plans only). The same on every rank. MPI backend only.

    created_by: how the comm was made, one of CREATED_BY: "mpi" (this constructor), "nccl" (from_nccl, over an
    existing NCCL communicator: also basp.torch.comm_from_process_group's NCCL route) or "oob" (from_oob, libbasp
    making its own NCCL communicators from exchanged unique ids: also comm_from_process_group's OOB route).
    """

    CREATED_BY = ("mpi", "nccl", "oob")
    created_by: str

    def __init__(self, mpi_comm: Any, micro_batch: Optional[int] = None, num_groups: Optional[int] = None,
                 backend: BackendLike = Backend.MPI, placement: PlacementLike = Placement.DEFAULT,
                 config: Optional[_abi.CommConfig] = None, batch_capacity: Optional[int] = None) -> None:
        fint = _fortran_handle(mpi_comm)
        config = _config("basp.Comm", config, micro_batch, num_groups, backend, placement,
                         batch_capacity=batch_capacity)
        lib = _library.lib()
        handle = ctypes.c_void_p()
        _library.check(lib.basp_comm_create_mpi(fint, ctypes.byref(config), ctypes.byref(handle)))
        self._adopt(handle.value, config, mpi_comm, "mpi")

    @classmethod
    def from_nccl(cls, nccl_comm: int, micro_batch: Optional[int] = None, num_groups: Optional[int] = None,
                  placement: PlacementLike = Placement.DEFAULT, config: Optional[_abi.CommConfig] = None,
                  batch_capacity: Optional[int] = None) -> "Comm":
        """Collective over an existing NCCL communicator (an ncclComm_t, given as an int address): the NCCL
        backend without MPI. The comm runs on that communicator's CUDA device; `nccl_comm` stays the caller's.
        batch_capacity: as for basp.Comm (batch plans on NCCL: docs/batch.md).
        """
        if isinstance(nccl_comm, bool) or not isinstance(nccl_comm, int):
            raise invalid_argument("basp.Comm.from_nccl: nccl_comm (%r, a %s) must be the ncclComm_t as an int" % (
                nccl_comm, type(nccl_comm).__name__))
        config = _config("basp.Comm.from_nccl", config, micro_batch, num_groups, Backend.NCCL, placement,
                         batch_capacity=batch_capacity)
        create = _library.require("basp_comm_create_nccl", "basp.Comm.from_nccl")
        _check_one_nccl("basp.Comm.from_nccl")
        handle = ctypes.c_void_p()
        _library.check(create(nccl_comm, ctypes.byref(config), ctypes.byref(handle)))
        self = cls.__new__(cls)
        self._adopt(handle.value, config, None, "nccl")
        return self

    @classmethod
    def from_oob(cls, oob: Any, micro_batch: Optional[int] = None, num_groups: Optional[int] = None,
                 placement: PlacementLike = Placement.DEFAULT, config: Optional[_abi.CommConfig] = None,
                 timeout_ms: Optional[int] = None, batch_capacity: Optional[int] = None) -> "Comm":
        """Collective over the ranks of `oob`, a basp.OobAllgather (any framework's all-gather: torch.distributed,
        JAX, a launcher's): an NCCL-backend comm on the calling thread's current CUDA device, without MPI. libbasp
        runs its all-gathers during this call only. timeout_ms: how long a step may wait for the other ranks (None:
        $BASP_TIMEOUT_MS or 5 minutes; 0: forever). `config` (backend NCCL) overrides the keyword arguments.

        Every rank fails alike when the configs differ (BASP_ERROR_MISMATCH) or a rank has no usable CUDA device
        (BASP_ERROR_CUDA); an exception in a method of `oob` fails that rank with BASP_ERROR_OOB naming it (the
        exception is the error's __cause__; a KeyboardInterrupt is raised again as it was), and a rank whose
        all-gather never completes with BASP_ERROR_TIMEOUT. batch_capacity: as for basp.Comm (batch plans on NCCL:
        docs/batch.md).
        """
        where = "basp.Comm.from_oob"
        channel = Channel(oob, where)
        config = _config(where, config, micro_batch, num_groups, Backend.NCCL, placement, timeout_ms, batch_capacity)
        create = _library.require("basp_comm_create_oob", where)
        handle = ctypes.c_void_p()
        # `channel`, a local until this method returns, keeps the struct and its callbacks alive through the call.
        status = create(ctypes.byref(channel.struct), ctypes.byref(config), ctypes.byref(handle))
        if status != _abi.Status.SUCCESS:
            channel.raise_error(status, _library.last_error())
        self = cls.__new__(cls)
        self._adopt(handle.value, config, None, "oob")
        return self

    def _adopt(self, handle: Optional[int], config: _abi.CommConfig, parent: Any, created_by: str) -> None:
        self._adopt_handle(handle)
        self._parent = parent  # kept alive: the library requires the parent to outlive the comm
        self.created_by = created_by
        self.batch_capacity = int(config.batch_capacity)
        try:
            self.backend = Backend(config.backend)
        except ValueError:
            self.backend = int(config.backend)
        try:
            self._info = self.query()
        except BaseException:
            self.close()  # now, not whenever the garbage collector gets to a half-made comm
            raise

    # The calling rank's place, from one query at creation.
    @property
    def world_size(self) -> int:
        return self._info.world_size

    @property
    def rank(self) -> int:
        return self._info.rank

    @property
    def num_groups(self) -> int:
        return self._info.num_groups

    @property
    def group_size(self) -> int:
        return self._info.group_size

    @property
    def group_index(self) -> int:
        return self._info.group_index

    @property
    def group_position(self) -> int:
        return self._info.group_position

    @property
    def micro_batch(self) -> int:
        return self._info.micro_batch

    def query(self, seq_len: int = 0, rank: int = -1) -> RankInfo:
        """RankInfo of world rank `rank` (-1: the caller) for sequences of `seq_len` tokens (0: no token range): the
        data-loader helper (Algorithm 2), the sequences and token range `rank` holds, for any seq_len (the tokens
        split as torch.tensor_split does)."""
        info = _abi.RankInfoStruct()
        _library.check(_library.lib().basp_comm_query(self._handle, int(rank), int(seq_len), ctypes.byref(info)))
        return RankInfo(info)

    def shard(self, seq_len: int, rank: int = -1) -> RankInfo:
        """Deprecated: query(seq_len, rank), under the name it had before (a DeprecationWarning)."""
        warnings.warn("basp.Comm.shard is deprecated: call basp.Comm.query(seq_len), the same answer",
                      DeprecationWarning, stacklevel=2)
        return self.query(seq_len, rank)

    def group_ranks(self, group_index: Optional[int] = None) -> List[int]:
        """World ranks of group `group_index` (default: the caller's), ordered by position."""
        g = self._info.group_index if group_index is None else int(group_index)
        capacity = self._info.group_size
        ranks = (ctypes.c_int32 * capacity)()
        _library.check(_library.lib().basp_comm_group_ranks(self._handle, g, ranks, capacity))
        return list(ranks)

    def plan(self, seq_len: Optional[int], head_dim: HeadDimLike, num_heads: Union[int, Sequence[int]],
             dtype: DtypeLike, layout: LayoutLike = Layout.BSHD, query_heads: Optional[Sequence[Optional[int]]] = None,
             token_capacity: Optional[int] = None) -> Plan:
        """A basp.Plan on this comm (collective over the caller's group); arguments as basp.Plan's."""
        return Plan(self, seq_len, head_dim, num_heads, dtype, layout, query_heads, token_capacity)

    # ---- batch plans (comms made with batch_capacity > 0; docs/batch.md) ---------------------------------------
    def partition_batch(self, lengths: Any, query_heads: int, kv_heads: int, head_dim: int, dtype: DtypeLike,
                        capacity: int = 0, v_head_dim: Optional[int] = None) -> Batch:
        """The batch planner (basp_comm_partition_batch, not collective): partitions the comm's ranks into groups
        of any size and a packed micro-batch of documents of `lengths` tokens (a list of ints, or a 1-D integer
        array or tensor) among them, on this comm's machine with its cost model, minimising the predicted step
        time. Every rank gets the same answer from the same arguments and model. Returns a basp.Batch describing
        this rank (each group's documents ascending, its predicted_seconds), for batch_plan, which makes the plan.
        head_dim: q's and k's head size. capacity: most sequence-side tokens per rank (0: batch_capacity).
        v_head_dim: v's (and the attention output's) head size, None or 0 for head_dim (multi-head latent
        attention: head_dim 192, v_head_dim 128, kv_heads = query_heads); the exchanges' bytes and the attention time
        follow it (docs/batch.md)."""
        return self._partition_batch("basp.Comm.partition_batch", "basp_comm_partition_batch", lengths, query_heads,
                                     kv_heads, head_dim, dtype, capacity, v_head_dim)

    def plan_batch(self, lengths: Any, query_heads: int, kv_heads: int, head_dim: int, dtype: DtypeLike,
                   capacity: int = 0) -> Batch:
        """Deprecated: partition_batch, under the name it had before (a DeprecationWarning)."""
        warnings.warn("basp.Comm.plan_batch is deprecated: call basp.Comm.partition_batch, the same planner (it "
                      "makes no plan: batch_plan does)", DeprecationWarning, stacklevel=2)
        return self._partition_batch("basp.Comm.plan_batch", "basp_comm_plan_batch", lengths, query_heads, kv_heads,
                                     head_dim, dtype, capacity)

    def _partition_batch(self, where: str, symbol: str, lengths: Any, query_heads: int, kv_heads: int,
                         head_dim: int, dtype: DtypeLike, capacity: int,
                         v_head_dim: Optional[int] = None) -> Batch:
        fn = _library.require(symbol, where)
        problem, values = batch_problem(where, lengths, query_heads, kv_heads, head_dim, dtype, capacity, v_head_dim)
        n, world = len(values), self.world_size
        check_reads_v_head_dim(fn, self._handle, world, problem, where)
        sizes, ranks, counts = ((ctypes.c_int32 * world)() for _ in range(3))
        docs = (ctypes.c_int32 * max(1, n))()
        out = _abi.BatchStruct()
        seconds = ctypes.c_double(0.0)
        _library.check(fn(self._handle, ctypes.byref(problem), sizes, ranks, counts, docs, ctypes.byref(out),
                          ctypes.byref(seconds)))
        groups: List[List[int]] = []
        group_docs: List[List[int]] = []
        r = d = 0
        for g in range(int(out.num_groups)):
            groups.append(list(ranks[r:r + sizes[g]]))
            group_docs.append(list(docs[d:d + counts[g]]))
            r, d = r + sizes[g], d + counts[g]
        return Batch(groups, docs=group_docs, lengths=values, rank=self.rank, predicted_seconds=seconds.value)

    def batch_plan(self, batch: Batch, head_dim: HeadDimLike, num_heads: Union[int, Sequence[int]],
                   dtype: DtypeLike, layout: LayoutLike = Layout.THD,
                   query_heads: Optional[Sequence[Optional[int]]] = None,
                   seq_len: Optional[int] = None, token_capacity: Optional[int] = None) -> Plan:
        """The plan of this rank's group in `batch` (a basp.Batch: partition_batch's answer or one written by hand), a
        basp.Plan like any other (scatter, gather, query; basp.torch's operators), made without talking to any
        rank (basp_batch_plan_create). Every rank makes every batch plan of the comm, in the same order, from the
        same batch. layout "thd" (default): each group's stream of its documents, each execute moving all of it
        (num_tokens None); "bshd"/"sbhd": group g holds batch.sequences[g] sequences of seq_len tokens. head_dim: one
        int, or one head size per tensor, as basp.Plan takes it."""
        if not isinstance(batch, Batch):
            raise invalid_argument("basp.Comm.batch_plan: batch (a %s) is not a basp.Batch" % type(batch).__name__)
        return Plan(self, seq_len, head_dim, num_heads, dtype, layout, query_heads, token_capacity, batch=batch)

    @property
    def cost_model(self) -> CostModel:
        """The comm's cost model (basp_comm_get_cost_model): a basp.CostModel. Assigning one sets it
        (basp_comm_set_cost_model; every coefficient finite and >= 0): every rank must hold the same model for
        partition_batch to agree across ranks."""
        s = _abi.CostModelStruct()
        _library.check(_library.require("basp_comm_get_cost_model", "basp.Comm.cost_model")(self._handle,
                                                                                              ctypes.byref(s)))
        return CostModel.from_struct(s)

    @cost_model.setter
    def cost_model(self, model: CostModel) -> None:
        if not isinstance(model, CostModel):
            raise invalid_argument("basp.Comm.cost_model: the model (a %s) is not a basp.CostModel" % (
                type(model).__name__))
        s = model.to_struct()
        _library.check(_library.require("basp_comm_set_cost_model", "basp.Comm.cost_model")(self._handle,
                                                                                              ctypes.byref(s)))

    def export_cost_model(self) -> str:
        """The comm's cost model as text ("basp-cost-model 1" then "key value" lines), for import_cost_model on
        another run of the same cluster."""
        fn = _library.require("basp_comm_export_cost_model", "basp.Comm.export_cost_model")
        needed = ctypes.c_size_t(0)
        _library.check(fn(self._handle, None, 0, ctypes.byref(needed)))
        buf = ctypes.create_string_buffer(max(1, needed.value))
        _library.check(fn(self._handle, buf, len(buf), ctypes.byref(needed)))
        return buf.value.decode("utf-8")

    def import_cost_model(self, text: str) -> None:
        """Replaces the comm's cost model with one export_cost_model wrote; malformed text raises basp.Error
        (INVALID_ARGUMENT) naming the line. Not collective."""
        fn = _library.require("basp_comm_import_cost_model", "basp.Comm.import_cost_model")
        if not isinstance(text, str):
            raise invalid_argument("basp.Comm.import_cost_model: text (a %s) is not a str" % type(text).__name__)
        if "\0" in text:
            raise invalid_argument("basp.Comm.import_cost_model: text holds a NUL character: not a cost model")
        _library.check(fn(self._handle, text.encode("utf-8")))

    def calibrate(self, max_bytes: int = 0, repeats: int = 0) -> CostModel:
        """Collective over the comm's world: measures its exchanges (basp_comm_calibrate: groups of K = 2, 4, ...
        concurrently, cross-node pairs, messages up to max_bytes per rank (0: 4 MiB), repeats times each (0: 5)),
        fits the model's exchange coefficients, stores them (the same on every rank) and returns the model."""
        fn = _library.require("basp_comm_calibrate", "basp.Comm.calibrate")
        _library.check(fn(self._handle, int(max_bytes), int(repeats)))
        return self.cost_model

    def async_error(self) -> Optional[Error]:
        """None while the backend is healthy, else a basp.Error describing its asynchronous failure (NCCL)."""
        fn = _library.require("basp_comm_get_async_error", "basp.Comm.async_error")
        status = ctypes.c_int(0)
        message = ctypes.create_string_buffer(1024)
        _library.check(fn(self._handle, ctypes.byref(status), message, len(message)))
        if status.value == _abi.Status.SUCCESS:
            return None
        return Error(status.value, message.value.decode("utf-8", "replace"))

    def abort(self) -> None:
        """Aborts the comm's NCCL operations (a hung or failed exchange); later exchanges fail. NCCL only."""
        _library.check(_library.require("basp_comm_abort", "basp.Comm.abort")(self._handle))

    def close(self) -> None:
        """Destroys the comm (not collective). Plans made from it stay usable. Idempotent."""
        super().close()

    def _describe(self) -> str:
        return "N=%d B=%d G=%d K=%d rank=%d group=%d position=%d, backend=%s" % (
            self.world_size, self.micro_batch, self.num_groups, self.group_size, self.rank, self.group_index,
            self.group_position, getattr(self.backend, "name", self.backend))
