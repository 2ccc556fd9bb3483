"""PyTorch on libbasp: head scatter/gather as autograd functions and a BASP attention module.

    q, k, v  sequence-sharded  [b_loc, S_l, H, D]   (each rank: B/G sequences, its S_l tokens of each)
      | head scatter (one exchange for Q, K and V; backward: head gather, which sums replicated K/V heads)
    q, k, v  head-sharded      [b_loc, S, H_l, D]   (each rank: whole sequences, its H_l heads)
      | any local attention (each rank's K/V heads expanded here to its query heads for GQA)
    out      head-sharded      [b_loc, S, Hq_l, D]
      | head gather (backward: head scatter)
    out      sequence-sharded  [b_loc, S_l, Hq, D]

Shapes are shown for the BSHD layout; SBHD puts the token dimension first; THD is one packed stream of T tokens
(whole documents, cu_seqlens) per group: [T_l, H, D] -> [T, H_l, D]. Tokens and query heads are split over the K
ranks of a group as torch.tensor_split does (S_l, Hq_l need not be equal); a rank's K/V heads are those its query
heads read. Plans are created on first use for each (S, dtype, device) (THD: for the layer's token capacity, any T)
and kept: every rank of a group must run the same forward/backward sequence.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from . import _abi, _arrays
from ._abi import Layout, Placement
from .comm import Comm, PlacementLike
from .errors import Error, invalid_argument
from .oob import OobAllgather
from .plan import LayoutLike, Plan

# fn(q, k, v, causal) -> out, on head-sharded [b, h, S, D] tensors.
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]
# fn(q, k, v, cu_seqlens, max_seqlen, causal) -> out, on a head-sharded packed stream [T, h, D] (flash-attn's
# flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=causal) fits).
VarlenAttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor]
CuSeqlens = Any  # a 1-D torch.Tensor, numpy array or sequence of ints: [0, end of document 0, ..., T]

SCATTER = "scatter"
GATHER = "gather"
_ADJOINT = {SCATTER: GATHER, GATHER: SCATTER}


class Exchange(torch.autograd.Function):
    """plan.scatter or plan.gather of all of a plan's tensors (num_tokens: a THD plan's T); its backward is the
    adjoint exchange of the gradients: the gather (summing a head several ranks hold) for a scatter, the scatter for
    a gather. It is itself an Exchange, so higher-order gradients work too."""

    @staticmethod
    def forward(ctx: Any, plan: Plan, direction: str, num_tokens: Optional[int],
                *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.plan = plan
        ctx.direction = direction
        ctx.num_tokens = num_tokens
        run = plan.scatter if direction == SCATTER else plan.gather
        return tuple(run([t.contiguous() for t in tensors], num_tokens=num_tokens))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        # Undefined gradients arrive as zeros (materialised by autograd); the exchange needs dense inputs.
        adjoint = Exchange.apply(ctx.plan, _ADJOINT[ctx.direction], ctx.num_tokens, *[g.contiguous() for g in grads])
        return (None, None, None) + tuple(adjoint)


def head_scatter(plan: Plan, *tensors: torch.Tensor, num_tokens: Optional[int] = None) -> Tuple[torch.Tensor, ...]:
    """Sequence-sharded tensors -> head-sharded tensors (a tuple), differentiable (backward: the summing gather)."""
    return Exchange.apply(plan, SCATTER, num_tokens, *tensors)


def head_gather(plan: Plan, *tensors: torch.Tensor, num_tokens: Optional[int] = None) -> Tuple[torch.Tensor, ...]:
    """Head-sharded tensors -> sequence-sharded tensors (a tuple), differentiable (backward: the scatter)."""
    return Exchange.apply(plan, GATHER, num_tokens, *tensors)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D)) V on [b, h, S, D] tensors, masking j > i when causal."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s_q, s_k = scores.shape[-2], scores.shape[-1]
        future = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def default_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention where this PyTorch has it (2.0+), else explicit_attention."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=causal)
    return explicit_attention(q, k, v, causal)


def kv_head_map(plan: Plan, num_heads: int, num_kv_heads: int) -> List[int]:
    """For a Q, K, V plan (tensors 0, 1, 2) of num_heads query and num_kv_heads key/value heads: the local K/V head
    that each of this rank's query heads reads, kv(i) = floor((a + i) / r) - c, with a this rank's first query head,
    r = num_heads / num_kv_heads and c its first K/V head (floor(a / r)), all from the plan info. Not uniform in
    general: with uneven splits a rank's query heads need not start on a group boundary, and a K/V head may serve
    query heads of several ranks."""
    info = plan.info
    r = num_heads // num_kv_heads
    a, local_q = info.head_begin[0], info.head_end[0] - info.head_begin[0]
    c, local_kv = info.head_begin[1], info.head_end[1] - info.head_begin[1]
    kv = [(a + i) // r - c for i in range(local_q)]
    if any(not 0 <= j < local_kv for j in kv) or (info.head_begin[2], info.head_end[2]) != (info.head_begin[1],
                                                                                           info.head_end[1]):
        raise Error(_abi.Status.ERROR_INTERNAL, "basp.torch: the plan gives this rank query heads %r and K/V heads %r "
                    "and %r, which do not cover each other (num_heads %d, num_kv_heads %d)" % (
                        info.head_ranges[0], info.head_ranges[1], info.head_ranges[2], num_heads, num_kv_heads))
    return kv


def _cu_list(cu_seqlens: CuSeqlens, where: str) -> List[int]:
    """cu_seqlens as Python ints, checked: starts at 0, never decreases."""
    if isinstance(cu_seqlens, torch.Tensor) or _arrays.is_numpy(cu_seqlens):
        if cu_seqlens.ndim != 1:
            raise invalid_argument("%s: cu_seqlens has shape %s; expected 1-D [num_docs + 1]" % (
                where, tuple(cu_seqlens.shape)))
        cu_seqlens = cu_seqlens.tolist()
    try:
        cu = [int(x) for x in cu_seqlens]
    except (TypeError, ValueError):
        raise invalid_argument("%s: cu_seqlens (%r) is not a sequence of ints" % (where, cu_seqlens)) from None
    if not cu or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise invalid_argument("%s: cu_seqlens (%r) must start at 0 and never decrease (document boundaries of the "
                               "group's stream)" % (where, cu if len(cu) <= 16 else cu[:16] + ["..."]))
    return cu


class BaspAttention(torch.nn.Module):
    """Attention over sequence-sharded Q, K, V with BASP redistribution around a local attention function.

    comm            a basp.Comm (any group size K: heads and tokens are split as torch.tensor_split does)
    num_heads       Hq, query heads of the whole model layer
    head_dim        D
    num_kv_heads    Hkv (default Hq), dividing Hq (GQA; 1: MQA). The K/V tensors follow the query heads' split: each
                    rank receives the K/V heads its query heads read (only those travel) and expands them locally
                    (kv_head_map); a K/V head read by several ranks is sent to each, and the backward's gather sums
                    their gradients. When K divides Hkv this is the independent split, and the plan stays uniform.
    causal          mask future tokens (token order is the global order: the exchange restores whole sequences; THD:
                    causal within each document)
    attention       fn(q, k, v, causal) -> out on head-sharded [b, h, S, D] tensors (default: default_attention);
                    for THD it is called once per document, with b = 1
    layout          "bshd", "sbhd" or "thd" (basp.Layout), the layout of q, k, v and of the output
    token_capacity  THD only: the most tokens of a group's stream in one forward (the plans are made for it)
    varlen_attention  THD only: fn(q, k, v, cu_seqlens, max_seqlen, causal) -> out on the packed head-sharded stream
                    [T, h, D] (cu_seqlens an int32 tensor on q's device), replacing the per-document loop
    """

    def __init__(self, comm: Comm, num_heads: int, head_dim: int, num_kv_heads: Optional[int] = None,
                 causal: bool = False, attention: Optional[AttentionFn] = None,
                 layout: LayoutLike = Layout.BSHD, token_capacity: Optional[int] = None,
                 varlen_attention: Optional[VarlenAttentionFn] = None) -> None:
        super().__init__()
        where = "basp.torch.BaspAttention"
        if not isinstance(comm, Comm):
            raise invalid_argument("%s: comm (a %s) is not a basp.Comm" % (where, type(comm).__name__))
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise invalid_argument("%s: num_heads (%d) must be a positive multiple of num_kv_heads (%d)" % (
                where, num_heads, num_kv_heads))
        if head_dim <= 0:
            raise invalid_argument("%s: head_dim (%d) must be positive" % (where, head_dim))
        self.comm = comm
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.causal = bool(causal)
        self.attention = attention if attention is not None else default_attention
        self.varlen_attention = varlen_attention
        self.layout = Layout[layout.upper()] if isinstance(layout, str) else Layout(layout)
        if self.layout == Layout.THD:
            if token_capacity is None or int(token_capacity) <= 0:
                raise invalid_argument("%s: token_capacity (%r) must be positive for layout THD: the most tokens of "
                                       "a group's stream in one forward" % (where, token_capacity))
        elif token_capacity is not None or varlen_attention is not None:
            raise invalid_argument("%s: token_capacity and varlen_attention are for layout THD, not %s" % (
                where, self.layout.name))
        self.token_capacity = None if token_capacity is None else int(token_capacity)
        self._plans: Dict[Tuple[int, Any, str], Tuple[Plan, Plan]] = {}
        self._kv_maps: Dict[Tuple[int, Any, str], Optional[torch.Tensor]] = {}

    def _key(self, seq_len: Optional[int], dtype: Any, device: Union[torch.device, str]) -> Tuple[int, Any, str]:
        tokens = self.token_capacity if self.layout == Layout.THD else int(seq_len)
        return (tokens, dtype, str(device))

    def plans(self, seq_len: Optional[int], dtype: Any, device: Union[torch.device, str]) -> Tuple[Plan, Plan]:
        """(qkv plan, output plan) for full sequences of seq_len tokens (THD: seq_len is ignored, the plans are made
        for the layer's token capacity); created on first use (collective over the group)."""
        key = self._key(seq_len, dtype, device)
        if key not in self._plans:
            basp_dtype = _arrays.basp_dtype(dtype, "basp.torch.BaspAttention: dtype")
            thd = self.layout == Layout.THD
            tokens = None if thd else key[0]
            # K/V follow the query heads' split; when K divides Hkv that is their own split, planned query-like
            # (the same routing, and the uniform shape every backend takes).
            kv_query = 0 if self.num_kv_heads % self.comm.group_size == 0 else self.num_heads
            qkv = Plan(self.comm, tokens, self.head_dim, [self.num_heads, self.num_kv_heads, self.num_kv_heads],
                       basp_dtype, self.layout, query_heads=[0, kv_query, kv_query], token_capacity=self.token_capacity)
            try:
                out = Plan(self.comm, tokens, self.head_dim, [self.num_heads], basp_dtype, self.layout,
                           token_capacity=self.token_capacity)
                kv = kv_head_map(qkv, self.num_heads, self.num_kv_heads)
            except BaseException:
                qkv.close()
                raise
            identity = kv == list(range(qkv.info.head_end[1] - qkv.info.head_begin[1]))
            self._kv_maps[key] = None if identity else torch.tensor(kv, dtype=torch.long, device=device)
            self._plans[key] = (qkv, out)
        return self._plans[key]

    def _check(self, name: str, x: Any, heads: int) -> None:
        ndim = 3 if self.layout == Layout.THD else 4
        if not isinstance(x, torch.Tensor) or x.dim() != ndim:
            raise invalid_argument("basp.torch.BaspAttention: %s must be a %d-d torch.Tensor (%s), got %s" % (
                name, ndim, self.layout.name, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        if x.shape[-2] != heads or x.shape[-1] != self.head_dim:
            raise invalid_argument("basp.torch.BaspAttention: %s has shape %s: expected %d heads of dim %d in "
                                   "its last two dims (%s)" % (name, tuple(x.shape), heads, self.head_dim,
                                                               self.layout.name))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_len: Optional[int] = None,
                cu_seqlens: Optional[CuSeqlens] = None, max_seqlen: Optional[int] = None) -> torch.Tensor:
        """q [b_loc, S_l, Hq, D], k and v [b_loc, S_l, Hkv, D] (BSHD; SBHD swaps the first two; THD [T_l, H, D])
        -> the attention output, sequence-sharded like q.

        seq_len: S, the full sequence length; needed when the group size K does not divide it (default: S_l * K).
        cu_seqlens (THD, required): the document boundaries of the group's stream, [0, ..., T], the same on every
        rank of the group (basp.data.assign_documents(...).cu_seqlens); this rank's q holds tokens
        basp_split(T, K, l) of it. max_seqlen (THD): the longest document, for varlen_attention (default: computed).
        """
        where = "basp.torch.BaspAttention"
        self._check("q", q, self.num_heads)
        self._check("k", k, self.num_kv_heads)
        self._check("v", v, self.num_kv_heads)
        for name, x in (("k", k), ("v", v)):
            if x.shape[:-2] != q.shape[:-2] or x.dtype != q.dtype or x.device != q.device:
                raise invalid_argument("%s: %s (%s, %s, %s) does not match q (%s, %s, %s) in the token dims, dtype "
                                       "and device" % (where, name, tuple(x.shape), x.dtype, x.device, tuple(q.shape),
                                                       q.dtype, q.device))
        if self.layout == Layout.THD:
            if cu_seqlens is None:
                raise invalid_argument("%s: cu_seqlens is required for layout THD" % where)
            if seq_len is not None:
                raise invalid_argument("%s: seq_len is not for layout THD (cu_seqlens[-1] is the stream's T)" % where)
            return self._forward_thd(q, k, v, cu_seqlens, max_seqlen)
        if cu_seqlens is not None or max_seqlen is not None:
            raise invalid_argument("%s: cu_seqlens and max_seqlen are for layout THD, not %s" % (
                where, self.layout.name))
        s_dim = 1 if self.layout == Layout.BSHD else 0
        if seq_len is None:
            seq_len = q.shape[s_dim] * self.comm.group_size
        qkv_plan, out_plan = self.plans(seq_len, q.dtype, q.device)
        kv_map = self._kv_maps[self._key(seq_len, q.dtype, q.device)]
        qh, kh, vh = head_scatter(qkv_plan, q, k, v)
        # -> [b, h, S, D] for the attention function.
        to_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (1, 2, 0, 3)
        qh, kh, vh = (x.permute(*to_bhsd) for x in (qh, kh, vh))
        if kv_map is not None:
            kh, vh = kh.index_select(1, kv_map), vh.index_select(1, kv_map)
        # A rank without query heads (Hq < K) has nothing to compute: its output [b, 0, S, D] is qh's shape.
        out = self.attention(qh, kh, vh, self.causal) if qh.shape[1] else qh
        from_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (2, 0, 1, 3)
        (out,) = head_gather(out_plan, out.permute(*from_bhsd).contiguous())
        return out

    def _forward_thd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: CuSeqlens,
                     max_seqlen: Optional[int]) -> torch.Tensor:
        cu = _cu_list(cu_seqlens, "basp.torch.BaspAttention")
        tokens = cu[-1]
        qkv_plan, out_plan = self.plans(None, q.dtype, q.device)
        kv_map = self._kv_maps[self._key(None, q.dtype, q.device)]
        # The boundaries travel with the exchanges (MPI): a rank that packed other documents fails loudly.
        for plan in (qkv_plan, out_plan):
            plan.set_documents(cu)
        qh, kh, vh = head_scatter(qkv_plan, q, k, v, num_tokens=tokens)  # [T, h, D]: the group's whole stream
        if kv_map is not None:
            kh, vh = kh.index_select(1, kv_map), vh.index_select(1, kv_map)
        if not qh.shape[1] or not tokens:
            out = qh  # no query heads or no token here: nothing to compute
        elif self.varlen_attention is not None:
            cu_t = cu_seqlens if isinstance(cu_seqlens, torch.Tensor) else torch.tensor(cu, dtype=torch.int32)
            cu_t = cu_t.to(device=q.device, dtype=torch.int32)
            longest = max_seqlen if max_seqlen is not None else max(b - a for a, b in zip(cu, cu[1:]))
            out = self.varlen_attention(qh, kh, vh, cu_t, int(longest), self.causal)
        else:
            pieces = []
            for begin, end in zip(cu, cu[1:]):
                if end > begin:  # [L, h, D] -> [1, h, L, D] -> attention -> [L, h, D]
                    doc = [x[begin:end].transpose(0, 1).unsqueeze(0) for x in (qh, kh, vh)]
                    pieces.append(self.attention(doc[0], doc[1], doc[2], self.causal)[0].transpose(0, 1))
            out = torch.cat(pieces)
        (out,) = head_gather(out_plan, out.contiguous(), num_tokens=tokens)
        return out

    def close(self) -> None:
        """Destroys the cached plans (not collective)."""
        for qkv, out in self._plans.values():
            qkv.close()
            out.close()
        self._plans.clear()
        self._kv_maps.clear()

    def extra_repr(self) -> str:
        capacity = ", token_capacity=%d" % self.token_capacity if self.token_capacity is not None else ""
        return "num_heads=%d, num_kv_heads=%d, head_dim=%d, causal=%s, layout=%s%s, K=%d" % (
            self.num_heads, self.num_kv_heads, self.head_dim, self.causal, self.layout.name, capacity,
            self.comm.group_size)


def _group_device(group: Any) -> torch.device:
    """Where the group's collectives take tensors: the current CUDA device for an NCCL group, else the CPU (gloo,
    mpi, and mixed backends such as "cpu:gloo,cuda:nccl", whose gloo part takes CPU tensors)."""
    import torch.distributed as dist

    if str(dist.get_backend(group)).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _process_group_rank(group: Any, where: str) -> Tuple[int, int]:
    """(rank in the group, group size), or basp.Error when torch.distributed is not up or this is no member."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise invalid_argument("%s: torch.distributed is not initialised (call torch.distributed.init_process_group "
                               "first)" % where)
    rank = dist.get_rank(group)
    if rank < 0:
        raise invalid_argument("%s: this process is not a member of the group (%r)" % (where, group))
    return rank, dist.get_world_size(group)


class _Gather:
    """One all-gather in flight: the torch Work, its tensors, and the library's recv buffer to fill once done."""

    def __init__(self, work: Any, outputs: List[torch.Tensor], recv: memoryview) -> None:
        self.work = work
        self.outputs = outputs
        self.recv = recv
        self.done = False


class ProcessGroupAllgather(OobAllgather):
    """basp.OobAllgather over a torch.distributed process group (default: the world): all_gather of uint8 tensors
    with async_op=True, on the group's device (CUDA for an NCCL group, CPU otherwise), tested with
    Work.is_completed(). An all-gather the library gives up on (timeout) is kept with its tensors until the process
    ends, since the process group may still run it."""

    # Operations freed unfinished: the process group may still write their tensors.
    _abandoned: List[_Gather] = []

    def __init__(self, group: Any = None) -> None:
        rank, size = _process_group_rank(group, "basp.torch.ProcessGroupAllgather")
        super().__init__(rank, size)
        self.group = group
        self.device = _group_device(group)

    def start(self, send: memoryview, recv: memoryview, nbytes: int) -> _Gather:
        import torch.distributed as dist

        # A copy: torch.frombuffer of a read-only buffer warns, and a CUDA group needs device memory anyway. An empty
        # all-gather still runs (it may be the ranks' meeting point), as one byte: gloo divides by the size.
        mine = torch.frombuffer(bytearray(send), dtype=torch.uint8) if nbytes else torch.zeros(1, dtype=torch.uint8)
        mine = mine.to(self.device)
        outputs = [torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device) for _ in range(self.size)]
        return _Gather(dist.all_gather(outputs, mine, group=self.group, async_op=True), outputs, recv)

    def test(self, handle: _Gather) -> bool:
        if not handle.work.is_completed():
            return False
        handle.work.wait()  # raises what made a completed operation fail
        if len(handle.recv):
            torch.frombuffer(handle.recv, dtype=torch.uint8).copy_(torch.cat(handle.outputs).cpu())
        handle.done = True
        return True

    def free(self, handle: _Gather) -> None:
        handle.recv = memoryview(b"")  # the library's memory: not referenced past free
        if not handle.done:
            ProcessGroupAllgather._abandoned.append(handle)


def comm_from_process_group(micro_batch: Optional[int] = None, group: Any = None, num_groups: Optional[int] = None,
                            placement: PlacementLike = Placement.DEFAULT, config: Optional[_abi.CommConfig] = None,
                            timeout_ms: Optional[int] = None) -> Comm:
    """A basp.Comm on the NCCL backend over the ranks of a torch.distributed process group (default: the
    world), for programs started by torchrun or any other launcher: no MPI needed. Collective over `group`.

    basp.Comm.from_oob over ProcessGroupAllgather(group): libbasp runs its agreement (the configs must match), its
    readiness round (every rank needs a CUDA device: `torch.cuda.set_device` first) and the exchange of the groups'
    NCCL unique ids over the process group's all_gather (any backend: gloo or nccl), then makes one NCCL
    communicator per BASP group on each rank's current CUDA device. Arguments as for basp.Comm.from_oob."""
    where = "basp.torch.comm_from_process_group"
    if micro_batch is None and config is None:
        raise invalid_argument("%s: micro_batch is required (sequences per micro-batch, B)" % where)
    _process_group_rank(group, where)
    return Comm.from_oob(ProcessGroupAllgather(group), micro_batch=micro_batch, num_groups=num_groups,
                         placement=placement, config=config, timeout_ms=timeout_ms)
