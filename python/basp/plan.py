"""basp.Plan: one exchange shape (persistent, owns its workspace) and its scatter/gather on arrays and tensors."""
from __future__ import annotations

import ctypes
import sys
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _abi, _arrays, _head_chunks, _library, _split_phase
from ._abi import Backend, Layout
from ._arrays import Array, ArrayInfo, DtypeLike
from ._handle import CommHandle, Handle
from ._head_chunks import HeadChunkChoice
from ._plan_info import PlanInfo
from ._plan_desc import HeadDimLike, LayoutLike, plan_desc
from ._split_phase import GATHER, HEAD_SIDE, SCATTER, SEQ_SIDE, Work
from .batch import Batch
from .errors import Error, invalid_argument

StreamLike = Any  # None, a torch.cuda.Stream or an int cudaStream_t
Shape = Tuple[int, ...]


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _check_info(info: PlanInfo, num_heads: List[int], head_dims: List[int]) -> None:
    """The binding takes the shapes from the library as they are. Three cheap checks: a library that does not fill
    them (older than this binding), one that made other head sizes than asked (older than per-tensor head sizes,
    which it then ignores), and shapes that contradict the element counts the library reports beside them (a library
    bug, better named here than as a wrong-shape error on every exchange)."""
    if info.ndim == 0:
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "basp.Plan: the loaded libbasp (%s) reports no tensor shapes "
                    "(basp_plan_info_t.ndim is 0): it is older than this binding" % _library.path())
    if info.num_tensors != len(num_heads) or not 1 <= info.ndim <= _abi.MAX_DIMS:
        raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan: the library reports num_tensors %d and ndim %d for a "
                    "plan of num_heads %r" % (info.num_tensors, info.ndim, num_heads))
    made = [shape[-1] for shape in info.seq_sharded_shapes]
    if made != head_dims:
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "basp.Plan: asked for head sizes %r, the loaded libbasp (%s) made "
                    "%r: it is older than per-tensor head sizes (basp_plan_desc_v1.head_dims)" % (
                        head_dims, _library.path(), made))
    for t in range(len(num_heads)):
        seq, head = info.seq_sharded_shapes[t], info.head_sharded_shapes[t]
        if _prod(seq) != info.seq_sharded_elems[t] or _prod(head) != info.head_sharded_elems[t]:
            raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan: the library reports shapes %r (%s) and %r (%s) "
                        "for tensor %d but %d and %d elements" % (seq, SEQ_SIDE, head, HEAD_SIDE, t,
                                                                 info.seq_sharded_elems[t],
                                                                 info.head_sharded_elems[t]))


class Plan(Handle):
    """Collective over the caller's group of `comm`: `len(num_heads)` tensors of `seq_len` tokens (S, full
    sequence), `head_dim` (D) and `dtype`, tensor t having num_heads[t] heads (Q, K, V: [Hq, Hkv, Hkv]).

    head_dim is one int for every tensor, or a list of one head size per tensor, as num_heads lists head counts
    (multi-head latent attention: Q and K of 192, V of 128 in one exchange: head_dim [192, 192, 128]). plan.head_dims
    lists each tensor's size; plan.head_dim is the size they share, None where they differ.

    Any S and head counts: tokens of each sequence and the heads of a query-like tensor are split over the K
    positions of the group as torch.tensor_split does (the first X % K positions get one more; a position may get
    none). query_heads[t] (default all 0) makes tensor t a key/value tensor serving that many query heads (a multiple
    of num_heads[t]): its heads follow the query heads' split, so that each rank receives exactly the KV heads its
    query heads read (Q, K, V of GQA: num_heads [Hq, Hkv, Hkv], query_heads [0, Hq, Hq]). A KV head may then be held
    by several ranks (info.replicated), and the gather sums their contributions.

    layout "thd": one packed stream of T tokens per group ([T, H, D]); seq_len is None (or token_capacity), the plan
    is made for `token_capacity` tokens, and each scatter/gather passes its T as num_tokens (0 <= T <= capacity).

    scatter: sequence-sharded [b_loc, S_l, H_t, D] -> head-sharded [b_loc, S, H_l, D]   (BSHD; SBHD swaps b and s;
    gather:  its adjoint (summing replicated heads), the exact inverse when none is.     THD [T_l, H_t, D] and
                                                                                         [T, H_l, D])

    batch (a basp.Batch, on a comm made with batch_capacity): a batch plan (basp_batch_plan_create), not
    collective: the plan of this rank's group in that membership of any group sizes. THD: token_capacity None (or
    at least every group's stream), and each scatter/gather moves the group's stream (num_tokens None or its T);
    BSHD/SBHD: group g holds batch.sequences[g] sequences of seq_len tokens. `self.batch` is the batch, describing
    this rank.
    """

    _destroy_name = "basp_plan_destroy"
    _close_order = 0  # before the comms
    batch: Optional[Batch] = None  # a batch plan's basp.Batch (describing this rank), else None
    _batch_tokens: Optional[int] = None  # a THD batch plan's stream: what every execute moves

    def __init__(self, comm: CommHandle, seq_len: Optional[int], head_dim: HeadDimLike,
                 num_heads: Union[int, Sequence[int]], dtype: DtypeLike, layout: LayoutLike = Layout.BSHD,
                 query_heads: Optional[Sequence[Optional[int]]] = None,
                 token_capacity: Optional[int] = None, batch: Optional[Batch] = None) -> None:
        if not isinstance(comm, CommHandle):
            raise invalid_argument("basp.Plan: comm (a %s) is not a basp.Comm" % type(comm).__name__)
        if batch is not None and not isinstance(batch, Batch):
            raise invalid_argument("basp.Plan: batch (a %s) is not a basp.Batch" % type(batch).__name__)
        desc, heads, queries, sizes = plan_desc(seq_len, head_dim, num_heads, dtype, layout, query_heads,
                                                token_capacity)
        handle = ctypes.c_void_p()
        if batch is None:
            _library.check(_library.lib().basp_plan_create(comm.handle, ctypes.byref(desc), ctypes.byref(handle)))
        else:
            create = _library.require("basp_batch_plan_create", "basp.Plan (batch)")
            struct, keep = batch._struct()
            _library.check(create(comm.handle, ctypes.byref(desc), ctypes.byref(struct), ctypes.byref(handle)))
            del keep  # the library copied what it needs
        self._adopt_handle(handle.value)
        try:
            self._init_fields(comm, desc, heads, queries, sizes, batch)
        except BaseException:
            self.close()  # now, not whenever the garbage collector gets to a half-made plan
            raise

    def _init_fields(self, comm: CommHandle, desc: _abi.PlanDesc, heads: List[int], queries: List[int],
                     sizes: Optional[List[int]], batch: Optional[Batch] = None) -> None:
        self.comm = comm
        self.backend: Union[Backend, int] = comm.backend
        self.layout = Layout(desc.layout)  # the library accepted them: known values
        self.dtype = _abi.Dtype(desc.dtype)
        self.head_dims = [int(desc.head_dim)] * len(heads) if sizes is None else sizes
        # The one size of every tensor, None where they differ (then head_dims says each).
        self.head_dim: Optional[int] = self.head_dims[0] if len(set(self.head_dims)) == 1 else None
        self.num_heads = heads
        self.query_heads = queries
        self.info = self.query()
        _check_info(self.info, heads, self.head_dims)
        self.token_capacity = self.info.token_capacity  # 0 unless THD
        self.seq_len = self.token_capacity if self.layout == Layout.THD else int(desc.seq_len)
        self._seq_shapes = self.info.seq_sharded_shapes
        self._head_shapes = self.info.head_sharded_shapes
        rank = _abi.RankInfoStruct()
        _library.check(_library.lib().basp_comm_query(comm.handle, -1, 0, ctypes.byref(rank)))
        self._position = int(rank.group_position)
        if batch is not None:
            self.batch = batch.for_rank(int(rank.rank))
            self._position = self.batch.group_position
            self._check_batch(self.batch)

    def _check_batch(self, batch: Batch) -> None:
        """The library's batch plan against the binding's reading of the same Batch (group, tokens), so that the
        shapes the binding computes for a call are the library's."""
        info = self.info
        expect = (batch.group_size, 1 if batch.thd else batch.num_sequences)
        begin_end = batch.token_range(None if batch.thd else self.seq_len)
        if (info.group_size, info.local_sequences) != expect or (info.token_begin, info.token_end) != begin_end:
            raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan (batch): the library reports K %d, b_loc %d and "
                        "tokens %d..%d for rank %d of %r; the binding expects K %d, b_loc %d and tokens %d..%d" % (
                            info.group_size, info.local_sequences, info.token_begin, info.token_end, batch.rank,
                            batch, expect[0], expect[1], begin_end[0], begin_end[1]))
        if batch.thd:
            self._batch_tokens = batch.stream_tokens

    @property
    def num_tensors(self) -> int:
        return len(self.num_heads)

    def seq_sharded_shape(self, t: int = 0, num_tokens: Optional[int] = None) -> Shape:
        """Shape of tensor t on the sequence-sharded side (scatter input, gather output); for a THD plan in a call
        of `num_tokens` tokens (None: at the capacity, as the plan info reports it)."""
        return self._call_shapes("basp.Plan.seq_sharded_shape", num_tokens, SEQ_SIDE)[t]

    def head_sharded_shape(self, t: int = 0, num_tokens: Optional[int] = None) -> Shape:
        """Shape of tensor t on the head-sharded side (scatter output, gather input); num_tokens as above."""
        return self._call_shapes("basp.Plan.head_sharded_shape", num_tokens, HEAD_SIDE)[t]

    def choose_head_chunks(self, attention_seconds: float, gather: Optional["Plan"] = None,
                           num_tokens: Optional[int] = -1, collective: bool = False) -> HeadChunkChoice:
        """basp_choose_head_chunks: the head chunk count for a layer of a scatter on this plan, attention taking
        `attention_seconds` for the whole layer on this rank, and a gather on `gather` (None: this plan), of
        num_tokens tokens (-1 or None: the plan's seq_len; THD: the stream's T), as a basp.HeadChunkChoice
        (num_chunks, max_head_chunks, attention_seconds, predicted). The same on every rank of the group for the
        same arguments. collective: every rank of the group (a batch plan: of the comm) calls it, and the maximum
        of their attention_seconds is used."""
        return _head_chunks.choose_head_chunks(self, attention_seconds, gather, num_tokens, collective)

    def query(self) -> PlanInfo:
        """A fresh basp.PlanInfo (plan.info is the one taken at creation; last_path changes as the plan runs)."""
        info = _abi.PlanInfoStruct()
        _library.check(_library.lib().basp_plan_query(self._handle, ctypes.byref(info)))
        return PlanInfo(info)

    def scatter(self, inputs: Union[Array, Sequence[Optional[Array]]],
                outputs: Optional[Sequence[Optional[Array]]] = None, stream: StreamLike = None,
                num_tokens: Optional[int] = None) -> List[Array]:
        """Head scatter: `inputs` sequence-sharded, `outputs` (allocated when None) head-sharded. Returns the
        outputs as a list. `stream`: on the NCCL backend a torch.cuda.Stream, an int cudaStream_t or None (the
        current stream of the tensors' device); on the MPI backend it must be None. `num_tokens`: a THD plan's T
        for this call (required); BSHD/SBHD plans take None, -1 or seq_len. An entry of inputs or outputs may be None
        where that tensor has no element on this rank (no tokens or no heads here)."""
        return self._execute("scatter", SEQ_SIDE, HEAD_SIDE, inputs, outputs, stream, num_tokens)

    def gather(self, inputs: Union[Array, Sequence[Optional[Array]]],
               outputs: Optional[Sequence[Optional[Array]]] = None, stream: StreamLike = None,
               num_tokens: Optional[int] = None) -> List[Array]:
        """Head gather, the adjoint of scatter: `inputs` head-sharded, `outputs` sequence-sharded. A head that
        several ranks hold (info.replicated) is the sum of their inputs, in ascending position (FP16, BF16 and FP32
        summed in FP32, FP64 in FP64; other dtypes: BASP_ERROR_UNSUPPORTED); without such heads it is the exact
        inverse of scatter. Arguments as for scatter."""
        return self._execute("gather", HEAD_SIDE, SEQ_SIDE, inputs, outputs, stream, num_tokens)

    def scatter_start(self, inputs: Sequence[Optional[Array]], outputs: Sequence[Optional[Array]], chunk: int,
                      num_chunks: int, num_tokens: Optional[int] = None, stream: StreamLike = None) -> "Work":
        """Starts head chunk `chunk` of `num_chunks` of a scatter into `outputs` (the whole head-sharded tensors
        every chunk writes its heads' rows into) and returns its basp.Work; the buffers are the library's until
        work.wait(). Rules: docs/python.md, "Split-phase exchanges". Arguments as for scatter."""
        return _split_phase.start(self, SCATTER, inputs, outputs, chunk, num_chunks, num_tokens, stream)

    def gather_start(self, inputs: Sequence[Optional[Array]], outputs: Sequence[Optional[Array]], chunk: int,
                     num_chunks: int, num_tokens: Optional[int] = None, stream: StreamLike = None) -> "Work":
        """Starts head chunk `chunk` of `num_chunks` of a gather (as scatter_start; a K/V head comes back with the
        last chunk whose query heads read it)."""
        return _split_phase.start(self, GATHER, inputs, outputs, chunk, num_chunks, num_tokens, stream)

    @property
    def max_head_chunks(self) -> int:
        """The most head chunks this plan's exchanges take (plan info; 0 from a libbasp without them)."""
        return self.info.max_head_chunks

    def set_documents(self, cu_seqlens: Optional[Sequence[int]]) -> None:
        """THD plans: the document boundaries (the group's cu_seqlens, num_docs + 1 ints from 0) of the executes that
        follow (basp_plan_set_documents). Each later scatter/gather checks its num_tokens against the last entry, and
        on the MPI backend a rank whose boundaries differ from its group's gets BASP_ERROR_MISMATCH. None forgets
        them."""
        _library.require("basp_plan_set_documents", "basp.Plan.set_documents")
        if cu_seqlens is None:
            _library.check(_library.lib().basp_plan_set_documents(self._handle, None, 0))
            return
        values = [int(x) for x in cu_seqlens]
        if not values:
            raise invalid_argument("basp.Plan.set_documents: cu_seqlens is empty; it holds num_docs + 1 entries")
        array = (ctypes.c_int64 * len(values))(*values)
        _library.check(_library.lib().basp_plan_set_documents(self._handle, array, len(values) - 1))

    def _call_shapes(self, where: str, num_tokens: Optional[int], side: str) -> List[Shape]:
        """Every tensor's shapes on `side` in a call of num_tokens tokens (THD), else the plan info's."""
        if self.layout != Layout.THD or num_tokens is None:
            return self._seq_shapes if side == SEQ_SIDE else self._head_shapes
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int):
            raise invalid_argument("%s: num_tokens (%r, a %s) is not an int" % (
                where, num_tokens, type(num_tokens).__name__))
        if not 0 <= num_tokens <= self.token_capacity:
            raise invalid_argument("%s: num_tokens (%d) is outside 0..token_capacity (%d)" % (
                where, num_tokens, self.token_capacity))
        if side == HEAD_SIDE:  # [T, H_l, D]: the heads as the plan info reports them
            return [(num_tokens,) + tuple(shape[1:]) for shape in self._head_shapes]
        begin, end = _library.split(num_tokens, self.info.group_size, self._position, where)
        return [(end - begin,) + tuple(shape[1:]) for shape in self._seq_shapes]

    def _tokens_argument(self, where: str, num_tokens: Optional[int]) -> Optional[int]:
        """What the *_tokens function gets: None for a plain basp_scatter/basp_gather call."""
        if self.layout == Layout.THD and num_tokens is None and self._batch_tokens is not None:
            return self._batch_tokens  # a THD batch plan moves its group's stream
        if self.layout == Layout.THD and num_tokens is None:
            raise invalid_argument("%s: num_tokens is required for a THD plan: the T tokens of the group's stream in "
                                   "this call (0..%d)" % (where, self.token_capacity))
        if num_tokens is not None and (isinstance(num_tokens, bool) or not isinstance(num_tokens, int)):
            raise invalid_argument("%s: num_tokens (%r, a %s) is not an int" % (
                where, num_tokens, type(num_tokens).__name__))
        return num_tokens

    def _execute(self, op: str, in_side: str, out_side: str, inputs: Any, outputs: Any,
                 stream: StreamLike, num_tokens: Optional[int]) -> List[Array]:
        where = "basp.Plan.%s" % op
        tokens = self._tokens_argument(where, num_tokens)
        outputs, in_arr, out_arr, stream_ptr = self._arguments(where, tokens, in_side, out_side, inputs, outputs,
                                                               stream)
        lib = _library.lib()
        if tokens is None:
            fn = lib.basp_scatter if op == "scatter" else lib.basp_gather
            _library.check(fn(self._handle, in_arr, out_arr, stream_ptr))
        else:
            fn = _library.require("basp_%s_tokens" % op, where)
            _library.check(fn(self._handle, tokens, in_arr, out_arr, stream_ptr))
        return outputs

    def _arguments(self, where: str, tokens: Optional[int], in_side: str, out_side: str, inputs: Any, outputs: Any,
                   stream: StreamLike) -> Tuple[List[Array], ctypes.Array, ctypes.Array, Optional[int]]:
        """A call's arrays checked against the plan (outputs allocated when None) -> (outputs, the C arrays of input
        and output pointers, the stream for the library)."""
        in_shapes = self._call_shapes(where, tokens, in_side)
        out_shapes = self._call_shapes(where, tokens, out_side)
        inputs = self._as_list(where, "inputs", inputs)
        ins = [_info_or_none(x, "%s: inputs[%d]" % (where, t)) for t, x in enumerate(inputs)]
        self._check_arrays(where, "inputs", ins, in_shapes, in_side, writeable=False)
        template = _first(ins)
        if outputs is None:
            if template is None:
                raise invalid_argument("%s: every input is None (no element on this rank): pass outputs, whose "
                                       "kind, dtype and device the binding cannot guess" % where)
            outputs = [_arrays.empty_like_kind(template, shape) for shape in out_shapes]
        else:
            outputs = self._as_list(where, "outputs", outputs)
        outs = [_info_or_none(x, "%s: outputs[%d]" % (where, t)) for t, x in enumerate(outputs)]
        self._check_arrays(where, "outputs", outs, out_shapes, out_side, writeable=True)
        out_template = _first(outs)
        if template is not None and out_template is not None and (
                template.kind != out_template.kind or template.device != out_template.device):
            raise invalid_argument("%s: inputs are %s tensors on %s but outputs are %s tensors on %s" % (
                where, template.kind, template.device, out_template.kind, out_template.device))
        stream_ptr, side_stream = self._stream(where, stream, template or out_template)
        # A tensor without elements on this rank goes as NULL, which the library accepts for 0 bytes.
        in_arr = _library.pointer_array([None if a is None or a.empty else a.pointer for a in ins])
        out_arr = _library.pointer_array([None if a is None or a.empty else a.pointer for a in outs])
        if side_stream is not None:
            # The exchange runs on a stream other than the one PyTorch allocated on: keep the caching allocator
            # from reusing these tensors' memory before that stream is done with it.
            for a in ins + outs:
                if a is not None:
                    a.obj.record_stream(side_stream)
        return outputs, in_arr, out_arr, stream_ptr

    def _as_list(self, where: str, name: str, arrays: Any) -> List[Array]:
        if _arrays.is_numpy(arrays) or _arrays.is_torch(arrays):
            arrays = [arrays]
        if not isinstance(arrays, (list, tuple)):
            raise invalid_argument("%s: %s (a %s) must be a list of arrays/tensors" % (
                where, name, type(arrays).__name__))
        if len(arrays) != self.num_tensors:
            raise invalid_argument("%s: %s has %d entries but the plan has %d tensors (num_heads %r)" % (
                where, name, len(arrays), self.num_tensors, self.num_heads))
        return list(arrays)

    def _check_arrays(self, where: str, name: str, infos: List[Optional[ArrayInfo]], shapes: List[Shape], side: str,
                      writeable: bool) -> None:
        first = _first(infos)
        lead = next((t for t, a in enumerate(infos) if a is not None), 0)
        for t, a in enumerate(infos):
            if a is None:
                if _prod(shapes[t]) != 0:
                    raise invalid_argument("%s: %s[%d] is None but the plan expects shape %s (%s, %s side) on this "
                                           "rank: only a tensor without elements may be None" % (
                                               where, name, t, tuple(shapes[t]), self.layout.name, side))
                continue
            if a.kind != first.kind or a.device != first.device:
                raise invalid_argument("%s: %s[%d] is a %s tensor on %s but %s[%d] is a %s tensor on %s" % (
                    where, name, t, a.kind, a.device, name, lead, first.kind, first.device))
            self._check_array(where, "%s[%d]" % (name, t), a, shapes[t], side, writeable)

    def _check_array(self, where: str, name: str, a: ArrayInfo, shape: Shape, side: str, writeable: bool) -> None:
        if not a.accepts(self.dtype):
            raise invalid_argument("%s: %s has dtype %s but the plan's dtype is %s (accepts %s)" % (
                where, name, a.dtype, self.dtype.name, a.accepted_names(self.dtype)))
        if a.shape != tuple(shape):
            raise invalid_argument("%s: %s has shape %s but the plan expects %s (%s, %s side)" % (
                where, name, a.shape, tuple(shape), self.layout.name, side))
        if not a.contiguous:
            raise invalid_argument("%s: %s (shape %s) is not C-contiguous: pass .contiguous() / "
                                   "numpy.ascontiguousarray() of it" % (where, name, a.shape))
        if writeable and not a.writeable:
            raise invalid_argument("%s: %s is read-only" % (where, name))
        self._check_device(where, name, a)

    def _check_device(self, where: str, name: str, a: ArrayInfo) -> None:
        if self.backend == Backend.MPI and a.device != "cpu":
            raise invalid_argument("%s: %s is on %s but the MPI backend moves host memory: use a comm "
                                   "created with backend=basp.Backend.NCCL" % (where, name, a.device))
        if self.backend == Backend.NCCL and not a.is_cuda:
            raise invalid_argument("%s: %s is in host memory (a %s array on %s) but the NCCL backend "
                                   "moves device memory: pass CUDA torch tensors" % (where, name, a.kind, a.device))

    def _stream(self, where: str, stream: StreamLike, template: Optional[ArrayInfo]) -> Tuple[Optional[int], Any]:
        """The stream argument -> (void* for the library, torch stream to record tensors on, or None)."""
        torch = sys.modules.get("torch")
        if template is None:  # every tensor is None: nothing to take a device or stream from
            if stream is None or (isinstance(stream, int) and not isinstance(stream, bool)):
                return stream, None
            if torch is not None and isinstance(stream, torch.cuda.Stream):
                return stream.cuda_stream, None
        if stream is None:
            if self.backend == Backend.NCCL and template.kind == "torch":
                return torch.cuda.current_stream(template.obj.device).cuda_stream, None
            return None, None
        if torch is not None and isinstance(stream, torch.cuda.Stream):
            return stream.cuda_stream, stream
        if isinstance(stream, int) and not isinstance(stream, bool):
            # The library rejects a stream on the MPI backend with its own message.
            external = getattr(torch.cuda, "ExternalStream", None) if torch is not None else None
            use = (external(stream, device=template.obj.device)
                   if external is not None and stream and template.kind == "torch" and template.is_cuda else None)
            return stream, use
        raise invalid_argument("%s: stream (%r, a %s) is not a torch.cuda.Stream, an int cudaStream_t or None"
                               % (where, stream, type(stream).__name__))

    def _describe(self) -> str:
        tokens = "capacity=%d" % self.token_capacity if self.layout == Layout.THD else "S=%d" % self.seq_len
        queries = ", query_heads=%r" % self.query_heads if any(self.query_heads) else ""
        batch = ""
        if getattr(self, "batch", None) is not None:
            batch = ", batch group %d of %d" % (self.batch.group_index, self.batch.num_groups)
            if self._batch_tokens is not None:
                batch += ", T=%d" % self._batch_tokens
        return "%s, %s, %s, D=%r, heads=%r%s, K=%d, b_loc=%d%s" % (
            self.layout.name, self.dtype.name, tokens, self.head_dim or self.head_dims, self.num_heads, queries,
            self.info.group_size, self.info.local_sequences, batch)


def _info_or_none(x: Any, name: str) -> Optional[ArrayInfo]:
    return None if x is None else ArrayInfo(x, name)


def _first(infos: List[Optional[ArrayInfo]]) -> Optional[ArrayInfo]:
    """The first array given (the template for kind, dtype and device), or None when every entry is None."""
    return next((a for a in infos if a is not None), None)
