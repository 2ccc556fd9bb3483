"""basp.Plan: one exchange shape (persistent, owns its workspace) and its scatter/gather on arrays and tensors."""
import ctypes
import sys

from . import _abi, _arrays, _library, _lifetime
from ._abi import Backend, Layout
from .errors import Error, invalid_argument


class PlanInfo:
    """basp_plan_query's answer: K, b_loc, S/K, workspace and traffic, element counts per tensor."""

    def __init__(self, struct):
        n = int(struct.num_tensors)
        self.num_tensors = n
        self.group_size = int(struct.group_size)
        self.local_sequences = int(struct.local_sequences)
        self.local_tokens = int(struct.local_tokens)
        self.workspace_bytes = int(struct.workspace_bytes)
        self.seq_sharded_elems = [int(x) for x in struct.seq_sharded_elems[:n]]
        self.head_sharded_elems = [int(x) for x in struct.head_sharded_elems[:n]]
        self.bytes_sent_per_exchange = int(struct.bytes_sent_per_exchange)
        try:
            self.last_path = _abi.Path(struct.last_path)
        except ValueError:
            self.last_path = int(struct.last_path)

    def __repr__(self):
        return "PlanInfo(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


class Plan:
    """Collective over the caller's group of `comm`: `len(num_heads)` tensors of `seq_len` tokens (S, full
    sequence), `head_dim` (D) and `dtype`, tensor t having num_heads[t] heads (Q, K, V: [Hq, Hkv, Hkv]).

    scatter: sequence-sharded [b_loc, S/K, H_t, D] -> head-sharded [b_loc, S, H_t/K, D]   (BSHD;
    gather:  the exact inverse.                                                            SBHD swaps b and s)
    """

    def __init__(self, comm, seq_len, head_dim, num_heads, dtype, layout=Layout.BSHD):
        from .comm import Comm
        if not isinstance(comm, Comm):
            raise invalid_argument("basp.Plan: comm (a %s) is not a basp.Comm" % type(comm).__name__)
        if isinstance(num_heads, int):
            num_heads = [num_heads]
        num_heads = [int(h) for h in num_heads]
        if len(num_heads) > _abi.MAX_TENSORS:
            raise invalid_argument("basp.Plan: num_heads (%r) lists %d tensors, more than BASP_MAX_TENSORS (%d)"
                                   % (num_heads, len(num_heads), _abi.MAX_TENSORS))
        if isinstance(layout, str):
            if layout.upper() not in Layout.__members__:
                raise invalid_argument("basp.Plan: layout (%r) is not 'bshd' or 'sbhd'" % layout)
            layout = Layout[layout.upper()]
        desc = _abi.PlanDesc(layout=int(layout), dtype=_arrays.basp_dtype(dtype, "basp.Plan: dtype"),
                             seq_len=int(seq_len), head_dim=int(head_dim), num_tensors=len(num_heads))
        for t, h in enumerate(num_heads):
            desc.num_heads[t] = h
        lib = _library.lib()
        handle = ctypes.c_void_p()
        _library.check(lib.basp_plan_create(comm.handle, ctypes.byref(desc), ctypes.byref(handle)))
        self._handle = handle.value
        _lifetime.track(self)
        self.comm = comm
        self.backend = comm.backend
        self.layout = Layout(desc.layout)
        self.dtype = _abi.Dtype(desc.dtype)
        self.seq_len = int(seq_len)
        self.head_dim = int(head_dim)
        self.num_heads = num_heads
        self.info = self.query()
        k, b, s = self.info.group_size, self.info.local_sequences, self.info.local_tokens
        d = self.head_dim
        if self.layout == Layout.BSHD:
            self._seq_shapes = [(b, s, h, d) for h in num_heads]
            self._head_shapes = [(b, s * k, h // k, d) for h in num_heads]
        else:
            self._seq_shapes = [(s, b, h, d) for h in num_heads]
            self._head_shapes = [(s * k, b, h // k, d) for h in num_heads]
        for t in range(len(num_heads)):
            if (_prod(self._seq_shapes[t]) != self.info.seq_sharded_elems[t]
                    or _prod(self._head_shapes[t]) != self.info.head_sharded_elems[t]):
                raise Error(_abi.Status.ERROR_INTERNAL, "basp.Plan: the library reports %r elements for tensor %d "
                            "but the binding computes shapes %r and %r" % (self.info, t, self._seq_shapes[t],
                                                                          self._head_shapes[t]))

    @property
    def handle(self):
        """The basp_plan_t as an int (None once closed)."""
        return self._handle

    @property
    def num_tensors(self):
        return len(self.num_heads)

    def seq_sharded_shape(self, t=0):
        """Shape of tensor t on the sequence-sharded side (scatter input, gather output)."""
        return self._seq_shapes[t]

    def head_sharded_shape(self, t=0):
        """Shape of tensor t on the head-sharded side (scatter output, gather input)."""
        return self._head_shapes[t]

    def query(self):
        """A fresh basp.PlanInfo (plan.info is the one taken at creation; last_path changes as the plan runs)."""
        info = _abi.PlanInfoStruct()
        _library.check(_library.lib().basp_plan_query(self._handle, ctypes.byref(info)))
        return PlanInfo(info)

    def scatter(self, inputs, outputs=None, stream=None):
        """Head scatter: `inputs` sequence-sharded, `outputs` (allocated when None) head-sharded. Returns the
        outputs as a list. `stream`: on the NCCL backend a torch.cuda.Stream, an int cudaStream_t or None (the
        current stream of the tensors' device); on the MPI backend it must be None."""
        return self._execute("scatter", self._seq_shapes, self._head_shapes, inputs, outputs, stream)

    def gather(self, inputs, outputs=None, stream=None):
        """Head gather, the exact inverse of scatter: `inputs` head-sharded, `outputs` sequence-sharded."""
        return self._execute("gather", self._head_shapes, self._seq_shapes, inputs, outputs, stream)

    def _execute(self, op, in_shapes, out_shapes, inputs, outputs, stream):
        where = "basp.Plan.%s" % op
        inputs = self._as_list(where, "inputs", inputs)
        ins = [_arrays.ArrayInfo(x, "%s: inputs[%d]" % (where, t)) for t, x in enumerate(inputs)]
        self._check_arrays(where, "inputs", ins, in_shapes, writeable=False)
        if outputs is None:
            outputs = [_arrays.empty_like_kind(ins[0], shape) for shape in out_shapes]
        else:
            outputs = self._as_list(where, "outputs", outputs)
        outs = [_arrays.ArrayInfo(x, "%s: outputs[%d]" % (where, t)) for t, x in enumerate(outputs)]
        self._check_arrays(where, "outputs", outs, out_shapes, writeable=True)
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

    def _as_list(self, where, name, arrays):
        if _arrays.is_numpy(arrays) or _arrays.is_torch(arrays):
            arrays = [arrays]
        if not isinstance(arrays, (list, tuple)):
            raise invalid_argument("%s: %s (a %s) must be a list of arrays/tensors" % (
                where, name, type(arrays).__name__))
        if len(arrays) != self.num_tensors:
            raise invalid_argument("%s: %s has %d entries but the plan has %d tensors (num_heads %r)" % (
                where, name, len(arrays), self.num_tensors, self.num_heads))
        return list(arrays)

    def _check_arrays(self, where, name, infos, shapes, writeable):
        first = infos[0]
        for t, a in enumerate(infos):
            if a.kind != first.kind or a.device != first.device:
                raise invalid_argument("%s: %s[%d] is a %s tensor on %s but %s[0] is a %s tensor on %s" % (
                    where, name, t, a.kind, a.device, name, first.kind, first.device))
            if not a.accepts(self.dtype):
                raise invalid_argument("%s: %s[%d] has dtype %s but the plan's dtype is %s (accepts %s)" % (
                    where, name, t, a.dtype, self.dtype.name, a.accepted_names(self.dtype)))
            if a.shape != tuple(shapes[t]):
                raise invalid_argument("%s: %s[%d] has shape %s but the plan expects %s (%s, %s side)" % (
                    where, name, t, a.shape, tuple(shapes[t]), self.layout.name,
                    "sequence-sharded" if shapes is self._seq_shapes else "head-sharded"))
            if not a.contiguous:
                raise invalid_argument("%s: %s[%d] (shape %s) is not C-contiguous: pass .contiguous() / "
                                       "numpy.ascontiguousarray() of it" % (where, name, t, a.shape))
            if writeable and not a.writeable:
                raise invalid_argument("%s: %s[%d] is read-only" % (where, name, t))
            if self.backend == Backend.MPI and a.device != "cpu":
                raise invalid_argument("%s: %s[%d] is on %s but the MPI backend moves host memory: use a comm "
                                       "created with backend=basp.Backend.NCCL" % (where, name, t, a.device))
            if self.backend == Backend.NCCL and not a.is_cuda:
                raise invalid_argument("%s: %s[%d] is in host memory (a %s array on %s) but the NCCL backend "
                                       "moves device memory: pass CUDA torch tensors" % (
                                           where, name, t, a.kind, a.device))

    def _stream(self, where, stream, template):
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

    def close(self):
        """Destroys the plan (not collective). Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _library.check(_library.lib().basp_plan_destroy(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- a destructor must not raise
            pass

    def __repr__(self):
        return "basp.Plan(%s, %s, S=%d, D=%d, heads=%r, K=%d, b_loc=%d%s)" % (
            self.layout.name, self.dtype.name, self.seq_len, self.head_dim, self.num_heads, self.info.group_size,
            self.info.local_sequences, ", closed" if self._handle is None else "")
