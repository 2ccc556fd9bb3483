"""BaspAttention: attention over sequence-sharded Q, K, V, with the head scatter before a local attention function
and the head gather after it (basp.torch re-exports it)."""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from . import _arrays
from ._abi import Layout
from ._torch_auto_chunks import ChunkChooser, ChunkChoiceView
from ._torch_exchange import head_gather, head_scatter
from ._torch_pipeline import check_chunks, compiling, pipelined
from ._torch_plans import AttentionPlans, empty_output
from .batch import Batch
from .comm import Comm
from .errors import invalid_argument
from .plan import LayoutLike, Plan

# fn(q, k, v, causal) -> out, on head-sharded [b, h, S, D] tensors.
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]
# fn(q, k, v, cu_seqlens, max_seqlen, causal) -> out, on a head-sharded packed stream [T, h, D] (flash-attn's
# flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen, max_seqlen, causal=causal) fits).
VarlenAttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor]
CuSeqlens = Any  # a 1-D torch.Tensor, numpy array or sequence of ints: [0, end of document 0, ..., T]


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


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_layer_call(where: str, comm: Comm, query: torch.Tensor) -> None:
    """What every attention layer checks before its exchanges: its comm is still open (a comm closed under a live
    layer would leave its plans without their group), and the tensors hold floating-point values."""
    if comm.closed:
        raise invalid_argument("%s: comm (%r) was closed while the layer is alive: its plans belong to that comm; "
                               "make a new comm and a new layer" % (where, comm))
    if query.dtype not in FLOAT_DTYPES:
        raise invalid_argument("%s: query has dtype %s: attention takes float16, bfloat16, float32 or float64" % (
            where, query.dtype))


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     causal: bool = False) -> torch.Tensor:
    """Attention over a packed stream [T, h, D] of documents (cu_seqlens: a 1-D tensor [0, ..., T] on q's device),
    each token attending to its own document only (and to no later token when causal): one attention call with a
    block-diagonal mask. Costs T x T per head, which suits tests and short streams; pass a varlen attention
    (flash-attn's) to BaspAttention for long ones."""
    tokens = q.shape[0]
    position = torch.arange(tokens, device=q.device)
    document = torch.searchsorted(cu_seqlens[1:].to(torch.int64), position, right=True)
    mask = document[:, None] == document[None, :]
    if causal:
        mask = mask & (position[:, None] >= position[None, :])
    qb, kb, vb = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, h, T, D]
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        out = sdpa(qb, kb, vb, attn_mask=mask)
    else:
        scores = torch.matmul(qb, kb.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        out = torch.matmul(torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1), vb)
    return out[0].transpose(0, 1)


class BaspAttention(ChunkChoiceView, torch.nn.Module):
    """Attention over sequence-sharded Q, K, V with BASP redistribution around a local attention function.

    comm            a basp.Comm (any group size K: heads and tokens are split as torch.tensor_split does)
    num_heads       Hq, query heads of the whole model layer
    head_dim        D, the head size of q and k
    num_kv_heads    Hkv (default Hq), dividing Hq (GQA; 1: MQA). The K/V tensors follow the query heads' split: each
                    rank receives the K/V heads its query heads read (only those travel) and expands them locally
                    (kv_head_map); a K/V head read by several ranks is sent to each, and the backward's gather sums
                    their gradients. When K divides Hkv this is the independent split, and the plan stays uniform.
    causal          mask future tokens (token order is the global order: the exchange restores whole sequences; THD:
                    causal within each document)
    attention       fn(q, k, v, causal) -> out on head-sharded [b, h, S, D] tensors (default: default_attention);
                    for THD it is called once per document, with b = 1
    layout          "bshd", "sbhd" or "thd" (basp.Layout), the layout of q, k, v and of the output
    token_capacity  THD only: the most tokens of a group's stream in one forward (the plans are made for it); may
                    be None on a comm with batch_capacity when every forward passes a batch
    varlen_attention  THD only: fn(q, k, v, cu_seqlens, max_seqlen, causal) -> out on the packed head-sharded stream
                    [T, h, D] (cu_seqlens an int32 tensor on q's device), replacing the per-document loop
    v_head_dim      Dv, the head size of v and of the output (default D): multi-head latent attention's values
                    (DeepSeek-V2/V3: q and k of 192, v of 128). Q, K and V still travel in one exchange (a plan of
                    per-tensor head sizes), the output in one of Dv; the attention functions get v [.., Dv] and must
                    return [.., Dv] (SDPA, explicit_attention and packed_attention do)
    chunks          C >= 1 (default 1: one scatter and one gather): the exchanges cut into C chunks of each rank's
                    query heads, attention on chunk c beside scatter c + 1 and gather c - 1 (capped at the plans'
                    max_head_chunks; not with batch plans; torch.compile needs PyTorch >= 2.4); docs/python.md,
                    "The pipelined layers".
                    "auto": the first forward of each shape (plan key) runs with C = 1, timing the attention calls,
                    and C comes from basp.Plan.choose_head_chunks (collective: the same C on every rank), used from
                    the next forward on; last_chunk_choice and last_attention_seconds hold that decision (batch
                    plans: C = 1, nothing measured)

    Batch plans (THD, a comm made with batch_capacity): forward(q, k, v, batch=batch), batch a basp.Batch
    (comm.partition_batch's answer, or written by hand): groups of any size for this micro-batch, each attending over
    its whole stream. The layer makes the batch's two plans on first use (not collective: host work only) and keeps
    them on the batch object, shared by every layer of the same shape, so they live as long as the caller keeps the
    batch (through the backward). Every rank must run the same layers on the same batches in the same order.
    """

    def __init__(self, comm: Comm, num_heads: int, head_dim: int, num_kv_heads: Optional[int] = None,
                 causal: bool = False, attention: Optional[AttentionFn] = None,
                 layout: LayoutLike = Layout.BSHD, token_capacity: Optional[int] = None,
                 varlen_attention: Optional[VarlenAttentionFn] = None, v_head_dim: Optional[int] = None,
                 chunks: int = 1) -> None:
        super().__init__()
        where = "basp.torch.BaspAttention"
        self.chunks = check_chunks(where, chunks)
        self._chooser = ChunkChooser(where)
        if not isinstance(comm, Comm):
            raise invalid_argument("%s: comm (a %s) is not a basp.Comm" % (where, type(comm).__name__))
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise invalid_argument("%s: num_heads (%d) must be a positive multiple of num_kv_heads (%d)" % (
                where, num_heads, num_kv_heads))
        if head_dim <= 0:
            raise invalid_argument("%s: head_dim (%d) must be positive" % (where, head_dim))
        if v_head_dim is not None and v_head_dim <= 0:
            raise invalid_argument("%s: v_head_dim (%d) must be positive (None: head_dim)" % (where, v_head_dim))
        self.comm = comm
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.v_head_dim = self.head_dim if v_head_dim is None else int(v_head_dim)
        self.causal = bool(causal)
        self.attention = attention if attention is not None else default_attention
        self.varlen_attention = varlen_attention
        self.layout = Layout[layout.upper()] if isinstance(layout, str) else Layout(layout)
        if self.layout == Layout.THD:
            if token_capacity is None and getattr(comm, "batch_capacity", 0) > 0:
                pass  # batch plans only: each forward's batch sizes its plans
            elif token_capacity is None or int(token_capacity) <= 0:
                raise invalid_argument("%s: token_capacity (%r) must be positive for layout THD: the most tokens of "
                                       "a group's stream in one forward" % (where, token_capacity))
        elif token_capacity is not None or varlen_attention is not None:
            raise invalid_argument("%s: token_capacity and varlen_attention are for layout THD, not %s" % (
                where, self.layout.name))
        self.token_capacity = None if token_capacity is None else int(token_capacity)
        self._plans: Dict[Tuple[int, Any, str], AttentionPlans] = {}

    def _key(self, seq_len: Optional[int], dtype: Any, device: Union[torch.device, str]) -> Tuple[int, Any, str]:
        tokens = self.token_capacity if self.layout == Layout.THD else int(seq_len)
        return (tokens, dtype, str(torch.device(device)))

    def plans(self, seq_len: Optional[int], dtype: Any, device: Union[torch.device, str]) -> Tuple[Plan, Plan]:
        """(qkv plan, output plan) for full sequences of seq_len tokens (THD: seq_len is ignored, the plans are made
        for the layer's token capacity); created on first use (collective over the group)."""
        key = self._key(seq_len, dtype, device)
        if key not in self._plans:
            basp_dtype = _arrays.basp_dtype(dtype, "basp.torch.BaspAttention: dtype")
            tokens = None if self.layout == Layout.THD else key[0]
            plans = AttentionPlans(self.comm, tokens, self.num_heads, self.num_kv_heads, self.head_dim, basp_dtype,
                                   self.layout, self.token_capacity, v_head_dim=self.v_head_dim)
            if plans.kv != list(range(plans.local_kv_heads)):
                plans.kv_map = torch.tensor(plans.kv, dtype=torch.long, device=device)
            self._plans[key] = plans
        plans = self._plans[key]
        return plans.qkv, plans.out

    def prepare(self, seq_len: Optional[int] = None, dtype: Any = torch.float32,
                device: Union[torch.device, str] = "cpu", batch: Optional[Batch] = None) -> "BaspAttention":
        """Makes the plans for sequences of seq_len tokens (THD: None) of `dtype` on `device` now (collective over
        the group). Needed before torch.compile traces the layer: plans are made eagerly, never while tracing.
        batch: makes that batch's plans instead (not collective), before a compiled forward(..., batch=batch)."""
        if batch is not None:
            self._batch_plans(batch, self._own_batch(batch, "basp.torch.BaspAttention.prepare"), dtype, device)
            return self
        if self.layout != Layout.THD and (seq_len is None or int(seq_len) <= 0):
            raise invalid_argument("basp.torch.BaspAttention.prepare: seq_len (%r) must be positive for layout %s"
                                   % (seq_len, self.layout.name))
        self.plans(seq_len, dtype, device)
        return self

    def _own_batch(self, batch: Any, where: str) -> Batch:
        """`batch` describing this rank (a batch of no rank is read for the comm's), checked to be one."""
        if not isinstance(batch, Batch):
            raise invalid_argument("%s: batch (a %s) is not a basp.Batch" % (where, type(batch).__name__))
        if self.layout != Layout.THD or not batch.thd:
            raise invalid_argument("%s: batch plans in BaspAttention are for layout THD and a batch of documents "
                                   "(the layer's layout is %s)" % (where, self.layout.name))
        if batch.rank is None:
            return batch.for_rank(self.comm.rank)
        if batch.rank != self.comm.rank:
            raise invalid_argument("%s: batch describes rank %d but this is rank %d of the comm" % (
                where, batch.rank, self.comm.rank))
        return batch

    def _batch_plans(self, owner: Batch, batch: Batch, dtype: Any,
                     device: Union[torch.device, str]) -> AttentionPlans:
        """The two batch plans of this layer's shape for `batch` (`owner` describing this rank), made on first use
        and kept on the caller's object `owner` (its `_attention_plans`), shared by the layers of one shape: they
        live as long as the caller holds the batch."""
        cache = owner.__dict__.setdefault("_attention_plans", {})
        key = (self.comm.handle, self.num_heads, self.num_kv_heads, self.head_dim, self.v_head_dim, dtype,
               str(torch.device(device)))
        plans = cache.get(key)
        if plans is None or plans.qkv.closed or plans.out.closed:
            if compiling():
                raise invalid_argument("basp.torch.BaspAttention: no plan for this batch while torch.compile traces "
                                       "the layer: call layer.prepare(dtype=..., device=..., batch=batch) first")
            basp_dtype = _arrays.basp_dtype(dtype, "basp.torch.BaspAttention: dtype")
            plans = AttentionPlans(self.comm, None, self.num_heads, self.num_kv_heads, self.head_dim, basp_dtype,
                                   Layout.THD, None, batch=batch, v_head_dim=self.v_head_dim)
            if plans.kv != list(range(plans.local_kv_heads)):
                plans.kv_map = torch.tensor(plans.kv, dtype=torch.long, device=device)
            cache[key] = plans
        return plans

    def _ids(self, seq_len: Optional[int], dtype: Any, device: torch.device) -> Tuple[int, int, Optional[torch.Tensor]]:
        """The plan ids and K/V map for this call: made on first use when eager; under torch.compile they must exist
        (prepare), since making a plan is a collective call into the library."""
        key = self._key(seq_len, dtype, device)
        plans = self._plans.get(key)
        if plans is None:
            if compiling():
                raise invalid_argument("basp.torch.BaspAttention: no plan for %s tokens of %s on %s while torch.compile "
                                       "traces the layer: call layer.prepare(seq_len, dtype, device) before "
                                       "compiling (plans are collective and are made eagerly)" % key)
            self.plans(seq_len, dtype, device)
            plans = self._plans[key]
        return plans.qkv_id, plans.out_id, plans.kv_map

    def _check(self, name: str, x: Any, heads: int, head_dim: int) -> None:
        ndim = 3 if self.layout == Layout.THD else 4
        if not isinstance(x, torch.Tensor) or x.dim() != ndim:
            raise invalid_argument("basp.torch.BaspAttention: %s must be a %d-d torch.Tensor (%s), got %s" % (
                name, ndim, self.layout.name, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        if x.shape[-2] != heads or x.shape[-1] != head_dim:
            raise invalid_argument("basp.torch.BaspAttention: %s has shape %s: expected %d heads of dim %d in "
                                   "its last two dims (%s)" % (name, tuple(x.shape), heads, head_dim,
                                                               self.layout.name))

    def _check_inputs(self, where: str, q: Any, k: Any, v: Any) -> None:
        self._check("q", q, self.num_heads, self.head_dim)
        check_layer_call(where, self.comm, q)
        if isinstance(k, torch.Tensor) and k.dim() == q.dim() and k.shape[-1] != q.shape[-1]:
            raise invalid_argument("%s: q %s and k %s have different head sizes (%d, %d): attention takes q and k of "
                                   "one size (head_dim); only v may differ (v_head_dim)" % (
                                       where, tuple(q.shape), tuple(k.shape), q.shape[-1], k.shape[-1]))
        self._check("k", k, self.num_kv_heads, self.head_dim)
        self._check("v", v, self.num_kv_heads, self.v_head_dim)
        for name, x in (("k", k), ("v", v)):
            if x.shape[:-2] != q.shape[:-2] or x.dtype != q.dtype or x.device != q.device:
                raise invalid_argument("%s: %s (%s, %s, %s) does not match q (%s, %s, %s) in the token dims, dtype "
                                       "and device" % (where, name, tuple(x.shape), x.dtype, x.device, tuple(q.shape),
                                                       q.dtype, q.device))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_len: Optional[int] = None,
                cu_seqlens: Optional[CuSeqlens] = None, max_seqlen: Optional[int] = None,
                num_tokens: Optional[int] = None, batch: Optional[Batch] = None) -> torch.Tensor:
        """q [b_loc, S_l, Hq, D], k [b_loc, S_l, Hkv, D] and v [b_loc, S_l, Hkv, Dv] (BSHD; SBHD swaps the first
        two; THD [T_l, H, D]) -> the attention output [b_loc, S_l, Hq, Dv], sequence-sharded like q.

        seq_len: S, the full sequence length; needed when the group size K does not divide it (default: S_l * K).
        cu_seqlens (THD, required): the document boundaries of the group's stream, [0, ..., T], the same on every
        rank of the group (basp.data.assign_documents(...).cu_seqlens); this rank's q holds tokens
        basp_split(T, K, l) of it. A list is checked here; a 1-D integer tensor is what torch.compile takes (the
        library checks it when the exchange runs). max_seqlen (THD): the longest document, for varlen_attention
        (default: computed). num_tokens (THD): T, the stream's length (default: cu_seqlens[-1]); under
        torch.compile pass it as an int, which the graph keeps symbolic.
        batch (THD): a basp.Batch; this rank's q holds tokens batch.tokens of its group's stream, whose documents
        (batch.cu_seqlens) and length the batch gives: cu_seqlens and num_tokens are then not passed.
        """
        where = "basp.torch.BaspAttention"
        self._check_inputs(where, q, k, v)
        if batch is not None:
            owner, batch = batch, self._own_batch(batch, where)
            if cu_seqlens is not None or num_tokens is not None or seq_len is not None:
                raise invalid_argument("%s: with a batch, cu_seqlens, num_tokens and seq_len come from the batch "
                                       "(batch.cu_seqlens, batch.stream_tokens)" % where)
            return self._forward_thd(q, k, v, batch.cu_seqlens, max_seqlen, batch.stream_tokens, (owner, batch))
        if self.layout == Layout.THD:
            if self.token_capacity is None:
                raise invalid_argument("%s: this layer has no token_capacity: pass batch= (batch plans)" % where)
            if cu_seqlens is None:
                raise invalid_argument("%s: cu_seqlens is required for layout THD" % where)
            if seq_len is not None:
                raise invalid_argument("%s: seq_len is not for layout THD (cu_seqlens[-1] is the stream's T)" % where)
            return self._forward_thd(q, k, v, cu_seqlens, max_seqlen, num_tokens)
        if cu_seqlens is not None or max_seqlen is not None or num_tokens is not None:
            raise invalid_argument("%s: cu_seqlens, max_seqlen and num_tokens are for layout THD, not %s" % (
                where, self.layout.name))
        s_dim = 1 if self.layout == Layout.BSHD else 0
        if seq_len is None:
            seq_len = q.shape[s_dim] * self.comm.group_size
        qkv_id, out_id, kv_map = self._ids(seq_len, q.dtype, q.device)
        # -> [b, h, S, D] for the attention function.
        to_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (1, 2, 0, 3)
        key = self._key(seq_len, q.dtype, q.device)
        chunks = self._chooser.chunks_for(self.chunks, key)
        if chunks is not None and chunks > 1:
            plans = self._plans[key]
            return pipelined(plans, chunks, None, to_bhsd,
                             lambda a, b, c: self.attention(a, b, c, self.causal), q, k, v, kv=plans.kv_map)
        qh, kh, vh = head_scatter(qkv_id, q, k, v)
        qh, kh, vh = (x.permute(*to_bhsd) for x in (qh, kh, vh))
        if kv_map is not None:
            kh, vh = kh.index_select(1, kv_map), vh.index_select(1, kv_map)
        # A rank without query heads (Hq < K) has nothing to compute: its output is [b, 0, S, Dv].
        out = (self._chooser.call(self.attention, qh.device, qh, kh, vh, self.causal) if qh.shape[1]
               else empty_output(qh, self.v_head_dim))
        from_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (2, 0, 1, 3)
        (out,) = head_gather(out_id, out.permute(*from_bhsd).contiguous())
        if chunks is None:
            self._chooser.choose(key, self._plans[key], None)
        return out

    def _forward_thd(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: CuSeqlens,
                     max_seqlen: Optional[int], num_tokens: Optional[int],
                     batch: Optional[Tuple[Batch, Batch]] = None) -> torch.Tensor:
        where = "basp.torch.BaspAttention"
        cu_list: Optional[List[int]] = None
        if isinstance(cu_seqlens, torch.Tensor):
            cu_t = cu_seqlens
            if cu_t.dim() != 1 or cu_t.dtype not in (torch.int32, torch.int64):
                raise invalid_argument("%s: cu_seqlens (shape %s, %s) must be a 1-D int32 or int64 tensor" % (
                    where, tuple(cu_t.shape), cu_t.dtype))
            if not compiling():
                cu_list = _cu_list(cu_t, where)
        else:
            cu_list = _cu_list(cu_seqlens, where)
            cu_t = torch.tensor(cu_list, dtype=torch.int64)
        if num_tokens is None:
            if cu_list is None:
                raise invalid_argument("%s: num_tokens (the stream's T) is required under torch.compile: cu_seqlens "
                                       "is a tensor whose last value the graph cannot read" % where)
            num_tokens = cu_list[-1]
        elif cu_list is not None and int(num_tokens) != cu_list[-1]:
            raise invalid_argument("%s: num_tokens (%d) is not cu_seqlens[-1] (%d)" % (where, int(num_tokens),
                                                                                       cu_list[-1]))
        if batch is not None:
            plans = self._batch_plans(batch[0], batch[1], q.dtype, q.device)
            qkv_id, out_id, kv_map = plans.qkv_id, plans.out_id, plans.kv_map
            cu_host: Optional[torch.Tensor] = None  # a batch plan knows its group's documents
        else:
            qkv_id, out_id, kv_map = self._ids(None, q.dtype, q.device)
            # The boundaries travel with the exchanges (MPI): a rank that packed other documents fails loudly. The
            # library reads them on the host.
            cu_host = cu_t.to(device="cpu", dtype=torch.int64)
        key = self._key(None, q.dtype, q.device)
        chunks = 1 if batch is not None and self.chunks == "auto" else self._chooser.chunks_for(self.chunks, key)
        if chunks is not None and chunks > 1 and batch is None and cu_list is not None:
            plans = self._plans[key]
            return pipelined(plans, chunks, int(num_tokens), (),
                             lambda a, b, c: self._thd_attention(a, b, c, cu_seqlens, cu_t, cu_list, max_seqlen),
                             q, k, v, cu_list, kv=plans.kv_map)
        if chunks is not None and chunks > 1:
            raise invalid_argument("%s: chunks > 1 takes cu_seqlens as a list of ints, without batch plans" % where)
        qh, kh, vh = head_scatter(qkv_id, q, k, v, num_tokens=num_tokens, cu_seqlens=cu_host)  # [T, h, D]
        if kv_map is not None:
            kh, vh = kh.index_select(1, kv_map), vh.index_select(1, kv_map)
        if not qh.shape[1]:
            out = empty_output(qh, self.v_head_dim)  # no query heads here: nothing to compute
        else:
            out = self._chooser.call(self._thd_attention, qh.device, qh, kh, vh, cu_seqlens, cu_t, cu_list,
                                     max_seqlen)
        (out,) = head_gather(out_id, out.contiguous(), num_tokens=num_tokens, cu_seqlens=cu_host)
        if chunks is None:
            self._chooser.choose(key, self._plans[key], int(num_tokens))
        return out

    def _thd_attention(self, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, cu_seqlens: CuSeqlens,
                       cu_t: torch.Tensor, cu_list: Optional[List[int]], max_seqlen: Optional[int]) -> torch.Tensor:
        """Attention on head-sharded [T, h, D] tensors of at least one head (K/V expanded), by the layer's rule."""
        where = "basp.torch.BaspAttention"
        q = qh
        if self.varlen_attention is not None:
            cu_dev = cu_t.to(device=q.device, dtype=torch.int32)
            if max_seqlen is None:
                if cu_list is None:
                    raise invalid_argument("%s: max_seqlen is required with varlen_attention under torch.compile"
                                           % where)
                max_seqlen = max([b - a for a, b in zip(cu_list, cu_list[1:])] or [0])
            out = self.varlen_attention(qh, kh, vh, cu_dev, int(max_seqlen), self.causal)
        elif cu_list is None or (isinstance(cu_seqlens, torch.Tensor) and self.attention is default_attention):
            # A tensor of boundaries: one masked attention over the stream (a graph torch.compile can trace).
            out = packed_attention(qh, kh, vh, cu_t.to(q.device), self.causal)
        else:
            pieces = [empty_output(qh[:0], self.v_head_dim)]
            for begin, end in zip(cu_list, cu_list[1:]):
                if end > begin:  # [L, h, D] -> [1, h, L, D] -> attention -> [L, h, D]
                    doc = [x[begin:end].transpose(0, 1).unsqueeze(0) for x in (qh, kh, vh)]
                    pieces.append(self.attention(doc[0], doc[1], doc[2], self.causal)[0].transpose(0, 1))
            out = torch.cat(pieces)
        return out

    def close(self) -> None:
        """Destroys the cached plans (not collective)."""
        for plans in self._plans.values():
            plans.close()
        self._plans.clear()

    def extra_repr(self) -> str:
        capacity = ", token_capacity=%d" % self.token_capacity if self.token_capacity is not None else ""
        v_dim = ", v_head_dim=%d" % self.v_head_dim if self.v_head_dim != self.head_dim else ""
        return "num_heads=%d, num_kv_heads=%d, head_dim=%d%s, causal=%s, layout=%s%s, K=%d" % (
            self.num_heads, self.num_kv_heads, self.head_dim, v_dim, self.causal, self.layout.name, capacity,
            self.comm.group_size)
