"""basp.Plan: one exchange shape (persistent, owns its workspace) and its scatter/gather on arrays and tensors."""
from __future__ import annotations

import ctypes
import sys
from typing import Any, List, Optional, Sequence, Tuple, Type, Union

from . import _abi, _arrays, _library
from ._abi import Backend, Layout, Path
from ._arrays import Array, ArrayInfo, DtypeLike
from ._handle import CommHandle, Handle
from .errors import Error, invalid_argument

LayoutLike = Union[Layout, int, str]  # a member, its int, or "bshd" / "sbhd"
StreamLike = Any  # None, a torch.cuda.Stream or an int cudaStream_t
Shape = Tuple[int, ...]

SEQ_SIDE = "sequence-sharded"  # scatter input, gather output
HEAD_SIDE = "head-sharded"  # scatter output, gather input


def _enum_or_int(enum_type: Type[Any], value: int) -> Any:
    """The enum member of a value the library reported, or the int when this binding does not know it."""
    try:
        return enum_type(value)
    except ValueError:
        return int(value)


def _shapes(rows: Any, num_tensors: int, ndim: int) -> List[Shape]:
    """The first ndim dims of the first num_tensors rows of a basp_plan_info_t shape array."""
    dims = max(0, min(ndim, _abi.MAX_DIMS))  # a bad ndim is reported by Plan, not turned into an IndexError
    return [tuple(int(x) for x in row[:dims]) for row in rows[:num_tensors]]


class PlanInfo:
    """basp_plan_query's answer: K, b_loc, S/K, workspace and traffic; per tensor its element counts, its shapes
    on both sides (in the layout's own dimension order) and the heads this rank holds; the plan's path and the one
    its last exchange took."""

    def __init__(self, struct: _abi.PlanInfoStruct) -> None:
        n = int(struct.num_tensors)
        self.num_tensors = n
        self.group_size = int(struct.group_size)
        self.local_sequences = int(struct.local_sequences)
        self.local_tokens = int(struct.local_tokens)
        self.workspace_bytes = int(struct.workspace_bytes)
        self.seq_sharded_elems = [int(x) for x in struct.seq_sharded_elems[:n]]
        self.head_sharded_elems = [int(x) for x in struct.head_sharded_elems[:n]]
        self.bytes_sent_per_exchange = int(struct.bytes_sent_per_exchange)
        self.last_path: Union[Path, int] = _enum_or_int(Path, struct.last_path)
        self.layout: Union[Layout, int] = _enum_or_int(Layout, struct.layout)
        self.ndim = int(struct.ndim)
        self.seq_sharded_shapes = _shapes(struct.seq_sharded_shape, n, self.ndim)
        self.head_sharded_shapes = _shapes(struct.head_sharded_shape, n, self.ndim)
        self.head_begin = [int(x) for x in struct.head_begin[:n]]
        self.head_end = [int(x) for x in struct.head_end[:n]]
        self.plan_path: Union[Path, int] = _enum_or_int(Path, struct.plan_path)

    @property
    def head_ranges(self) -> List[range]:
        """Per tensor, the global heads this rank holds on the head-sharded side."""
        return [range(b, e) for b, e in zip(self.head_begin, self.head_end)]

    def __repr__(self) -> str:
        return "PlanInfo(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())


def _prod(xs: Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _check_info(info: PlanInfo, num_heads: List[int]) -> None:
    """The binding takes the shapes from the library as they are. Two cheap checks: a library that does not fill
    them (older than this binding), and shapes that contradict the element counts the library reports beside them
    (a library bug, better named here than as a wrong-shape error on every exchange)."""
    if info.ndim == 0:
        raise Error(_abi.Status.ERROR_UNSUPPORTED, "basp.Plan: the loaded libbasp (%s) reports no tensor shapes "
                    "(basp_plan_info_t.ndim is 0): it is older than this binding" % _library.path())
    if info.num_tensors != len(num_heads) or not 1 <= info.ndim <= _abi.MAX_DIMS:
        raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan: the library reports num_tensors %d and ndim %d for a "
                    "plan of num_heads %r" % (info.num_tensors, info.ndim, num_heads))
    for t in range(len(num_heads)):
        seq, head = info.seq_sharded_shapes[t], info.head_sharded_shapes[t]
        if _prod(seq) != info.seq_sharded_elems[t] or _prod(head) != info.head_sharded_elems[t]:
            raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan: the library reports shapes %r (%s) and %r (%s) "
                        "for tensor %d but %d and %d elements" % (seq, SEQ_SIDE, head, HEAD_SIDE, t,
                                                                 info.seq_sharded_elems[t],
                                                                 info.head_sharded_elems[t]))


def _head_counts(num_heads: Union[int, Sequence[int]]) -> List[int]:
    if isinstance(num_heads, int):
        num_heads = [num_heads]
    counts = [int(h) for h in num_heads]
    if len(counts) > _abi.MAX_TENSORS:
        raise invalid_argument("basp.Plan: num_heads (%r) lists %d tensors, more than BASP_MAX_TENSORS (%d)"
                               % (counts, len(counts), _abi.MAX_TENSORS))
    return counts


def _layout_value(layout: LayoutLike) -> int:
    """A Layout, its int or its name -> int; unknown ints go to the library to be named there."""
    if isinstance(layout, str):
        if layout.upper() not in Layout.__members__:
            raise invalid_argument("basp.Plan: layout (%r) is not 'bshd' or 'sbhd'" % layout)
        return int(Layout[layout.upper()])
    return int(layout)


class Plan(Handle):
    """Collective over the caller's group of `comm`: `len(num_heads)` tensors of `seq_len` tokens (S, full
    sequence), `head_dim` (D) and `dtype`, tensor t having num_heads[t] heads (Q, K, V: [Hq, Hkv, Hkv]).

    scatter: sequence-sharded [b_loc, S/K, H_t, D] -> head-sharded [b_loc, S, H_t/K, D]   (BSHD;
    gather:  the exact inverse.                                                            SBHD swaps b and s)
    """

    _destroy_name = "basp_plan_destroy"
    _close_order = 0  # before the comms

    def __init__(self, comm: CommHandle, seq_len: int, head_dim: int, num_heads: Union[int, Sequence[int]],
                 dtype: DtypeLike, layout: LayoutLike = Layout.BSHD) -> None:
        if not isinstance(comm, CommHandle):
            raise invalid_argument("basp.Plan: comm (a %s) is not a basp.Comm" % type(comm).__name__)
        heads = _head_counts(num_heads)
        desc = _abi.PlanDesc(layout=_layout_value(layout), dtype=_arrays.basp_dtype(dtype, "basp.Plan: dtype"),
                             seq_len=int(seq_len), head_dim=int(head_dim), num_tensors=len(heads))
        for t, h in enumerate(heads):
            desc.num_heads[t] = h
        handle = ctypes.c_void_p()
        _library.check(_library.lib().basp_plan_create(comm.handle, ctypes.byref(desc), ctypes.byref(handle)))
        self._adopt_handle(handle.value)
        try:
            self._init_fields(comm, desc, heads)
        except BaseException:
            self.close()  # now, not whenever the garbage collector gets to a half-made plan
            raise

    def _init_fields(self, comm: CommHandle, desc: _abi.PlanDesc, heads: List[int]) -> None:
        self.comm = comm
        self.backend: Union[Backend, int] = comm.backend
        self.layout = Layout(desc.layout)  # the library accepted them: known values
        self.dtype = _abi.Dtype(desc.dtype)
        self.seq_len = int(desc.seq_len)
        self.head_dim = int(desc.head_dim)
        self.num_heads = heads
        self.info = self.query()
        _check_info(self.info, heads)
        self._seq_shapes = self.info.seq_sharded_shapes
        self._head_shapes = self.info.head_sharded_shapes

    @property
    def num_tensors(self) -> int:
        return len(self.num_heads)

    def seq_sharded_shape(self, t: int = 0) -> Shape:
        """Shape of tensor t on the sequence-sharded side (scatter input, gather output)."""
        return self._seq_shapes[t]

    def head_sharded_shape(self, t: int = 0) -> Shape:
        """Shape of tensor t on the head-sharded side (scatter output, gather input)."""
        return self._head_shapes[t]

    def query(self) -> PlanInfo:
        """A fresh basp.PlanInfo (plan.info is the one taken at creation; last_path changes as the plan runs)."""
        info = _abi.PlanInfoStruct()
        _library.check(_library.lib().basp_plan_query(self._handle, ctypes.byref(info)))
        return PlanInfo(info)

    def scatter(self, inputs: Union[Array, Sequence[Array]], outputs: Optional[Sequence[Array]] = None,
                stream: StreamLike = None) -> List[Array]:
        """Head scatter: `inputs` sequence-sharded, `outputs` (allocated when None) head-sharded. Returns the
        outputs as a list. `stream`: on the NCCL backend a torch.cuda.Stream, an int cudaStream_t or None (the
        current stream of the tensors' device); on the MPI backend it must be None."""
        return self._execute("scatter", SEQ_SIDE, HEAD_SIDE, inputs, outputs, stream)

    def gather(self, inputs: Union[Array, Sequence[Array]], outputs: Optional[Sequence[Array]] = None,
               stream: StreamLike = None) -> List[Array]:
        """Head gather, the exact inverse of scatter: `inputs` head-sharded, `outputs` sequence-sharded."""
        return self._execute("gather", HEAD_SIDE, SEQ_SIDE, inputs, outputs, stream)

    def _side_shapes(self, side: str) -> List[Shape]:
        return self._seq_shapes if side == SEQ_SIDE else self._head_shapes

    def _execute(self, op: str, in_side: str, out_side: str, inputs: Any, outputs: Any,
                 stream: StreamLike) -> List[Array]:
        where = "basp.Plan.%s" % op
        inputs = self._as_list(where, "inputs", inputs)
        ins = [ArrayInfo(x, "%s: inputs[%d]" % (where, t)) for t, x in enumerate(inputs)]
        self._check_arrays(where, "inputs", ins, in_side, writeable=False)
        if outputs is None:
            outputs = [_arrays.empty_like_kind(ins[0], shape) for shape in self._side_shapes(out_side)]
        else:
            outputs = self._as_list(where, "outputs", outputs)
        outs = [ArrayInfo(x, "%s: outputs[%d]" % (where, t)) for t, x in enumerate(outputs)]
        self._check_arrays(where, "outputs", outs, out_side, writeable=True)
        if ins[0].kind != outs[0].kind or ins[0].device != outs[0].device:
            raise invalid_argument("%s: inputs are %s tensors on %s but outputs are %s tensors on %s" % (
                where, ins[0].kind, ins[0].device, outs[0].kind, outs[0].device))
        stream_ptr, side_stream = self._stream(where, stream, ins[0])
        in_arr = _library.pointer_array([a.pointer for a in ins])
        out_arr = _library.pointer_array([a.pointer for a in outs])
        fn = _library.lib().basp_scatter if op == "scatter" else _library.lib().basp_gather
        _library.check(fn(self._handle, in_arr, out_arr, stream_ptr))
        if side_stream is not None:
            # The exchange runs on a stream other than the one PyTorch allocated on: keep the caching allocator
            # from reusing these tensors' memory before that stream is done with it.
            for a in ins + outs:
                a.obj.record_stream(side_stream)
        return outputs

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

    def _check_arrays(self, where: str, name: str, infos: List[ArrayInfo], side: str, writeable: bool) -> None:
        shapes = self._side_shapes(side)
        first = infos[0]
        for t, a in enumerate(infos):
            if a.kind != first.kind or a.device != first.device:
                raise invalid_argument("%s: %s[%d] is a %s tensor on %s but %s[0] is a %s tensor on %s" % (
                    where, name, t, a.kind, a.device, name, first.kind, first.device))
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

    def _stream(self, where: str, stream: StreamLike, template: ArrayInfo) -> Tuple[Optional[int], Any]:
        """The stream argument -> (void* for the library, torch stream to record tensors on, or None)."""
        torch = sys.modules.get("torch")
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
        return "%s, %s, S=%d, D=%d, heads=%r, K=%d, b_loc=%d" % (
            self.layout.name, self.dtype.name, self.seq_len, self.head_dim, self.num_heads, self.info.group_size,
            self.info.local_sequences)
