"""basp.torch.DistributedAttention: DeepSpeed-Ulysses' DistributedAttention interface over libbasp's exchanges.

DeepSpeed (deepspeed.sequence.layer.DistributedAttention) wraps a local attention in two all-to-alls over a sequence
parallel process group of P ranks, each holding all b sequences of the micro-batch and S/P tokens of each:

    DistributedAttention(local_attention, sequence_process_group, scatter_idx=2, gather_idx=0, sp_stream=None,
                         num_kv_heads=None)                                             (DeepSpeed 0.19.8)
    forward(query, key, value, batch_dim_idx, rotary_pos_emb=None, *args, **kwargs)

This class takes the same arguments and calls, with a basp.Comm (or a torch.distributed ProcessGroup, from which a
basp.Comm is made) in place of the process group. With num_groups=1 (Ulysses) the comm's ranks hold what DeepSpeed's
do; with BASP (G = gcd(N, B) groups of K = N / G ranks) each rank holds B/G whole sequences of the micro-batch instead
of all B (the data loader takes them from comm.query(S)), and the exchanges stay inside groups of K ranks:

    query, key, value  [s_l, b_loc, H, D]  (batch_dim_idx 1; batch_dim_idx 0: [b_loc, s_l, H, D])
      | one head scatter for the three (backward: the gather, summing K/V heads read by several ranks)
    q, k, v            [S, b_loc, H_l, D]  (whole sequences, this rank's heads; rotary embedding applied here)
      | local_attention(q, k, v, *args, **kwargs)
    context            [S, b_loc, Hq_l, D]
      | head gather (backward: head scatter)
    output             [s_l, b_loc, Hq, D]

What DeepSpeed's version does with its index arguments, mirrored here: scatter_idx 2 is the head dimension, the only
one DistributedAttention scatters (its scatter_idx < 2 is the inverse all-to-all, head-sharded to sequence-sharded);
gather_idx names the token dimension, which DeepSpeed's even-head path never reads (the layout follows batch_dim_idx
on each call), so either 0 or 1 is accepted; batch_dim_idx 0 or 1 picks the layout per call.

Where the two differ: heads and tokens need not divide K. Query heads are split as torch.tensor_split does (the first
Hq % K ranks get one more) and K/V heads follow their query heads, so any Hkv dividing Hq works, Hkv < K included (a
K/V head read by query heads of two ranks goes to both; the backward sums its gradients), and when a rank's query
heads do not read its K/V heads in the plain grouped order, its K/V are expanded to one head per query head before
local_attention is called. DeepSpeed needs K | S, refuses Hkv < K, and for K not dividing Hkv splits whole K/V groups
over the ranks (an uneven all-to-all). When K divides Hkv both give each rank the same heads, and the same results.
Values may have another head size than query and key (multi-head latent attention): the output then has value's;
Q, K and V still travel in one exchange. Also: the batch each rank holds is fixed by the comm (B/G sequences;
DeepSpeed takes any b per call); the rotary results keep query's dtype; a rank without query heads (Hq < K) does not
call local_attention.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch

from ._abi import Layout
from ._torch_attention import compiling, check_layer_call
from ._torch_auto_chunks import ChunkChooser, ChunkChoiceView
from ._torch_pipeline import check_chunks, pipelined
from ._torch_plans import AttentionPlans, empty_output
from ._torch_exchange import SYMBOLIC_INTS, head_gather, head_scatter
from .comm import Comm
from .errors import invalid_argument

WHERE = "basp.torch.DistributedAttention"
# A symbolic int under torch.compile (PyTorch 2); plain ints only on older PyTorch.
_INTS: Tuple[type, ...] = (int,) + SYMBOLIC_INTS

# (layout, S, Hq, Hkv, D, Dv, dtype, device) -> the plans' state.
PlanKey = Tuple[Layout, int, int, int, int, int, Any, str]


def _is_process_group(x: Any) -> bool:
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return False
    group_type = getattr(dist, "ProcessGroup", None)
    return group_type is not None and isinstance(x, group_type)


def _int_arg(name: str, value: Any, allowed: Sequence[int], why: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise invalid_argument("%s: %s (%r) must be %s: %s" % (WHERE, name, value,
                                                              " or ".join(str(a) for a in allowed), why))
    return int(value)


def _grouped(kv: Sequence[int], local_kv: int) -> bool:
    """Whether query head i reading K/V head kv[i] is the grouped order a GQA attention assumes: each K/V head
    serves the same number of consecutive query heads (i // (Hq_l / Hkv_l)); with Hq_l == Hkv_l, head i reads i."""
    local_q = len(kv)
    if local_q == 0 or local_kv == 0 or local_q % local_kv != 0:
        return False
    ratio = local_q // local_kv
    return list(kv) == [i // ratio for i in range(local_q)]


def rotate_half_embedding(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding in the rotate-half convention, on the first cos.shape[-1] channels of t:
    t * cos + rot(t) * sin with rot([x1, x2]) = [-x2, x1] (halves of those channels); the other channels pass
    through. cos and sin broadcast against t."""
    width = cos.shape[-1]
    head, rest = t[..., :width], t[..., width:]
    x1, x2 = head.chunk(2, dim=-1)
    turned = head * cos + torch.cat((-x2, x1), dim=-1) * sin
    return turned if rest.shape[-1] == 0 else torch.cat((turned, rest), dim=-1)


class DistributedAttention(ChunkChoiceView, torch.nn.Module):
    """DeepSpeed-Ulysses' DistributedAttention over libbasp (BASP, or Ulysses with num_groups=1).

    local_attention  fn(q, k, v, *args, **kwargs) -> context, called on this rank's heads of whole sequences in the
                     layout of the call ([S, b_loc, h, D] for batch_dim_idx 1, [b_loc, S, h, D] for 0): q has
                     Hq_l query heads, k and v either Hkv_l heads that q's heads read in grouped order (query head i
                     reads K/V head i // (Hq_l / Hkv_l): what SDPA with enable_gqa, flash-attn and DeepSpeed's own
                     split give) or, where this rank's query heads straddle K/V groups unevenly (heads not dividing
                     K), exactly Hq_l heads, K/V expanded to one per query head (MHA). So a GQA-aware attention and a
                     plain one that repeats K/V by Hq_l / Hkv_l both work. It must return [S, b_loc, Hq_l, Dv]
                     (resp. [b_loc, S, Hq_l, Dv]) of q's dtype, Dv being value's head size (D unless the values
                     have another, as multi-head latent attention's do). It is not called on a rank without query heads
                     (Hq < K); that rank's context is empty.
    comm             a basp.Comm, or a torch.distributed ProcessGroup: then the comm is made now (collective over
                     the group) by basp.torch.comm_from_process_group(micro_batch, group=comm, num_groups=...),
                     which needs libbasp with NCCL and each rank's CUDA device set (torch.cuda.set_device). The
                     layer closes a comm it made in close().
    scatter_idx      2 (the head dimension: the only one DeepSpeed's DistributedAttention scatters)
    gather_idx       0 or 1 (the token dimension; the layout is batch_dim_idx's, as in DeepSpeed's even-head path)
    sp_stream        None only (DeepSpeed's overlap stream: here Q, K and V travel in one exchange)
    num_kv_heads     None, or Hkv (DeepSpeed 0.19.8's argument, there the count its uneven split follows): here
                     key's head count always is Hkv, and this is checked against it
    micro_batch      B, sequences per micro-batch: required with a ProcessGroup (the BASP groups depend on it);
                     with a basp.Comm, None or comm.micro_batch
    num_groups       with a ProcessGroup: G (None: gcd(N, B), the BASP rule; 1: Ulysses, DeepSpeed's data layout)
    chunks           C >= 1 (default 1) or "auto": the exchanges cut into C chunks of each rank's query heads,
                     local_attention called once per chunk on that chunk's query heads (with the same args and
                     kwargs), beside scatter c + 1 and gather c - 1 (capped at the plans' max_head_chunks; not
                     with rotary_pos_emb; torch.compile needs PyTorch >= 2.4). Each call then gets K/V expanded to
                     one head per query head wherever this rank's query heads do not read its K/V heads one to one
                     (GQA): a plain attention that repeats K/V by Hq_l / Hkv_l works. "auto": the first forward of
                     each shape runs with C = 1, timing local_attention, and C comes from
                     basp.Plan.choose_head_chunks (collective: the same C on every rank); last_chunk_choice and
                     last_attention_seconds hold that decision.

    Each rank's inputs hold b_loc = B/G sequences (with Ulysses, all B) and its tokens of each: with K dividing S,
    S/K contiguous tokens in group-position order; otherwise pass seq_len=S to forward (the tokens are split as
    torch.tensor_split does, the first S % K positions holding one more; comm.query(S).tokens says which).
    Plans are made on first use for each (layout, S, Hq, Hkv, D, Dv, dtype, device) and kept; call prepare() for each
    shape before torch.compile traces the layer. Every rank of a group must run the same forward/backward sequence.
    """

    def __init__(self, local_attention: Callable[..., torch.Tensor], comm: Any, scatter_idx: int = 2,
                 gather_idx: int = 0, sp_stream: Any = None, num_kv_heads: Optional[int] = None, *,
                 micro_batch: Optional[int] = None, num_groups: Optional[int] = None,
                 timeout_ms: Optional[int] = None, chunks: Any = 1) -> None:
        super().__init__()
        self.chunks = check_chunks(WHERE, chunks)
        self._chooser = ChunkChooser(WHERE)
        if not callable(local_attention):
            raise invalid_argument("%s: local_attention (a %s) is not callable" % (
                WHERE, type(local_attention).__name__))
        _int_arg("scatter_idx", scatter_idx, (2,), "the head dimension of [s, b, h, d] and [b, s, h, d] (the "
                 "inverse all-to-all, scatter_idx < 2, is not an attention)")
        _int_arg("gather_idx", gather_idx, (0, 1), "the token dimension (which of the two follows batch_dim_idx on "
                 "each call)")
        if sp_stream is not None:
            raise invalid_argument("%s: sp_stream (%r) must be None: Q, K and V travel in one exchange here, with "
                                   "nothing to overlap on a side stream" % (WHERE, sp_stream))
        if num_kv_heads is not None and (isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, int)
                                         or num_kv_heads <= 0):
            raise invalid_argument("%s: num_kv_heads (%r) must be None or a positive int" % (WHERE, num_kv_heads))
        self.local_attn = local_attention  # DeepSpeed's attribute name: a Module here is a submodule
        self.num_kv_heads = num_kv_heads
        self.scatter_idx = int(scatter_idx)
        self.gather_idx = int(gather_idx)
        self._owns_comm = False
        if isinstance(comm, Comm):
            if micro_batch is not None and int(micro_batch) != comm.micro_batch:
                raise invalid_argument("%s: micro_batch (%r) differs from the comm's (%d)" % (
                    WHERE, micro_batch, comm.micro_batch))
            if num_groups is not None and int(num_groups) != comm.num_groups:
                raise invalid_argument("%s: num_groups (%r) differs from the comm's (%d)" % (
                    WHERE, num_groups, comm.num_groups))
            if timeout_ms is not None:
                raise invalid_argument("%s: timeout_ms (%r) is for a comm made from a ProcessGroup" % (
                    WHERE, timeout_ms))
        elif _is_process_group(comm):
            if micro_batch is None:
                raise invalid_argument("%s: micro_batch is required with a ProcessGroup (sequences per "
                                       "micro-batch, B: the BASP groups depend on it; num_groups=1 for Ulysses)"
                                       % WHERE)
            from ._torch_group import comm_from_process_group
            comm = comm_from_process_group(micro_batch=micro_batch, group=comm, num_groups=num_groups,
                                           timeout_ms=timeout_ms)
            self._owns_comm = True
        else:
            raise invalid_argument("%s: comm (a %s) is neither a basp.Comm nor a torch.distributed ProcessGroup" % (
                WHERE, type(comm).__name__))
        self.comm: Comm = comm
        self._plans: Dict[PlanKey, AttentionPlans] = {}
        self._expand: Dict[PlanKey, Optional[torch.Tensor]] = {}  # the pipeline's K/V index per shape

    # -- plans ---------------------------------------------------------------------------------------------------

    def _key(self, layout: Layout, seq_len: int, num_heads: int, num_kv_heads: int, head_dim: int,
             v_head_dim: int, dtype: Any, device: Union[torch.device, str]) -> PlanKey:
        return (layout, int(seq_len), int(num_heads), int(num_kv_heads), int(head_dim), int(v_head_dim), dtype,
                str(torch.device(device)))

    def _make(self, key: PlanKey) -> AttentionPlans:
        layout, seq_len, hq, hkv, head_dim, v_head_dim, dtype, device = key
        if seq_len <= 0 or hq <= 0 or hkv <= 0 or hq % hkv != 0 or head_dim <= 0 or v_head_dim <= 0:
            raise invalid_argument("%s: seq_len (%d), num_heads (%d), num_kv_heads (%d), head_dim (%d), v_head_dim "
                                   "(%d): all must be positive and num_kv_heads must divide num_heads" % (
                                       WHERE, seq_len, hq, hkv, head_dim, v_head_dim))
        # K/V follow the query heads' split: DeepSpeed's own even split when K divides Hkv.
        plans = AttentionPlans(self.comm, seq_len, hq, hkv, head_dim, dtype, layout, v_head_dim=v_head_dim)
        if plans.kv and not _grouped(plans.kv, plans.local_kv_heads):
            plans.kv_map = torch.tensor(plans.kv, dtype=torch.long, device=device)
        return plans

    def _get(self, key: PlanKey) -> AttentionPlans:
        plans = self._plans.get(key)
        if plans is None:
            if compiling():
                other = [k[5] for k in self._plans if k[:5] + k[6:] == key[:5] + key[6:]]
                if other:
                    raise invalid_argument("%s: value has head size %d (%s), but this shape's plans were prepared "
                                           "for values of head size %s: call layer.prepare(..., v_head_dim=%d) before "
                                           "compiling" % (WHERE, key[5], self._describe_key(key), other, key[5]))
                raise invalid_argument("%s: no plan for %s while torch.compile traces the layer: call "
                                       "layer.prepare(seq_len, num_heads, head_dim, num_kv_heads, dtype, device, "
                                       "batch_dim_idx, v_head_dim) before compiling (plans are collective, made "
                                       "eagerly)" % (WHERE, self._describe_key(key)))
            plans = self._make(key)
            self._plans[key] = plans
        return plans

    @staticmethod
    def _describe_key(key: PlanKey) -> str:
        layout, seq_len, hq, hkv, head_dim, v_head_dim, dtype, device = key
        return "batch_dim_idx %d, S=%d, Hq=%d, Hkv=%d, D=%d, Dv=%d, %s on %s" % (
            0 if layout == Layout.BSHD else 1, seq_len, hq, hkv, head_dim, v_head_dim, dtype, device)

    def prepare(self, seq_len: int, num_heads: int, head_dim: int, num_kv_heads: Optional[int] = None,
                dtype: Any = torch.float32, device: Union[torch.device, str] = "cpu",
                batch_dim_idx: int = 1, v_head_dim: Optional[int] = None) -> "DistributedAttention":
        """Makes the plans for full sequences of seq_len tokens, num_heads query and num_kv_heads (default
        num_heads) key/value heads of head_dim (values: v_head_dim, default head_dim), `dtype` on `device`, for
        inputs laid out as batch_dim_idx says (1: [s, b, h, d], 0: [b, s, h, d]) now: collective over the group.
        Needed before torch.compile traces the layer, once per shape it will see."""
        bdi = _int_arg("batch_dim_idx", batch_dim_idx, (0, 1), "the batch dimension of the layer's inputs")
        layout = Layout.BSHD if bdi == 0 else Layout.SBHD
        hkv = num_heads if num_kv_heads is None else num_kv_heads
        dv = head_dim if v_head_dim is None else v_head_dim
        self._get(self._key(layout, seq_len, num_heads, hkv, head_dim, dv, dtype, device))
        return self

    # -- forward -------------------------------------------------------------------------------------------------

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, batch_dim_idx: int,
                rotary_pos_emb: Optional[Sequence[torch.Tensor]] = None, *args: Any, seq_len: Optional[int] = None,
                **kwargs: Any) -> torch.Tensor:
        """query [s_l, b_loc, Hq, D], key [s_l, b_loc, Hkv, D] and value [s_l, b_loc, Hkv, Dv] for batch_dim_idx 1
        ([b_loc, s_l, ., .] for 0) -> the attention output [s_l, b_loc, Hq, Dv], sequence-sharded like query. Q, K
        and V travel in one exchange whatever Dv is (a plan of per-tensor head sizes).

        rotary_pos_emb: None, or (cos, sin) as DeepSpeed takes them: each permuted (1, 0, 2, 3) and applied to q and
        k after the exchange (whole sequences), rotate-half convention, on the first cos.shape[-1] channels; the
        results keep query's dtype. seq_len (keyword only, not passed on): S, needed when K does not divide it
        (default s_l * K). Other args and kwargs go to local_attention."""
        bdi = _int_arg("batch_dim_idx", batch_dim_idx, (0, 1), "the batch dimension of query, key and value")
        layout = Layout.BSHD if bdi == 0 else Layout.SBHD
        s_dim = 1 - bdi
        hq, hkv, head_dim, v_head_dim = self._check_qkv(query, key, value, bdi)
        if rotary_pos_emb is not None and self.chunks != 1:
            raise invalid_argument("%s: rotary_pos_emb is not taken with chunks=%r (the pipelined layer applies no "
                                   "embedding after its exchanges): apply it before the layer, or use chunks=1" % (
                                       WHERE, self.chunks))
        rotary = None if rotary_pos_emb is None else self._rotary_tables(rotary_pos_emb, head_dim)
        if seq_len is None:
            seq_len = query.shape[s_dim] * self.comm.group_size
        elif isinstance(seq_len, bool) or not isinstance(seq_len, _INTS) or seq_len <= 0:
            raise invalid_argument("%s: seq_len (%r) must be a positive int, the full sequence length" % (
                WHERE, seq_len))
        pkey = self._key(layout, seq_len, hq, hkv, head_dim, v_head_dim, query.dtype, query.device)
        plans = self._get(pkey)
        self._check_tokens(query, plans, bdi, seq_len)
        chunks = self._chooser.chunks_for(self.chunks, pkey)
        if chunks is not None and chunks > 1:
            return pipelined(plans, chunks, None, (),
                             lambda q, k, v: self._local(q, k, v, v_head_dim, args, kwargs), query, key, value,
                             axis=2, kv=self._expand_map(pkey, plans))
        q, k, v = head_scatter(plans.qkv_id, query, key, value)
        if rotary is not None:
            cos, sin = rotary
            q, k = rotate_half_embedding(q, cos, sin).to(q.dtype), rotate_half_embedding(k, cos, sin).to(k.dtype)
        if plans.kv_map is not None:
            k, v = k.index_select(2, plans.kv_map), v.index_select(2, plans.kv_map)
        if q.shape[2] == 0:
            context = empty_output(q, v_head_dim)  # no query heads on this rank (Hq < K): nothing to compute
        else:
            context = self._local(q, k, v, v_head_dim, args, kwargs)
        (output,) = head_gather(plans.out_id, context.contiguous())
        if chunks is None:
            self._chooser.choose(pkey, plans, None)
        return output

    def _check_qkv(self, query: Any, key: Any, value: Any, bdi: int) -> Tuple[int, int, int, int]:
        """forward's checks of query, key and value: (Hq, Hkv, D, Dv)."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4:
                raise invalid_argument("%s: %s must be a 4-d torch.Tensor (%s), got %s" % (
                    WHERE, name, "[b, s, h, d]" if bdi == 0 else "[s, b, h, d]",
                    tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        check_layer_call(WHERE, self.comm, query)
        hq, head_dim = query.shape[2], query.shape[3]
        hkv, v_head_dim = key.shape[2], value.shape[3]
        if key.shape[3] != head_dim:
            raise invalid_argument("%s: query %s and key %s have different head sizes (%d, %d): attention takes query "
                                   "and key of one size; only value may differ" % (
                                       WHERE, tuple(query.shape), tuple(key.shape), head_dim, key.shape[3]))
        for name, x in (("key", key), ("value", value)):
            if (x.shape[:2] != query.shape[:2] or x.shape[2] != hkv
                    or x.dtype != query.dtype or x.device != query.device):
                raise invalid_argument("%s: %s (%s, %s, %s) does not match query (%s, %s, %s): the same token and "
                                       "batch dims, dtype and device (value as key in heads)" % (
                                           WHERE, name, tuple(x.shape), x.dtype, x.device, tuple(query.shape),
                                           query.dtype, query.device))
        if hkv == 0 or hq % hkv != 0:
            raise invalid_argument("%s: key has %d heads, which does not divide query's %d (GQA)" % (WHERE, hkv, hq))
        if self.num_kv_heads is not None and hkv != self.num_kv_heads:
            raise invalid_argument("%s: num_kv_heads (%d) is not key's %d heads" % (WHERE, self.num_kv_heads, hkv))
        return hq, hkv, head_dim, v_head_dim

    def _check_tokens(self, query: torch.Tensor, plans: AttentionPlans, bdi: int, seq_len: int) -> None:
        """query holds this rank's sequences and tokens of the plans."""
        s_dim = 1 - bdi
        local_tokens = plans.qkv.info.token_end - plans.qkv.info.token_begin
        if query.shape[bdi] != plans.qkv.info.local_sequences or query.shape[s_dim] != local_tokens:
            raise invalid_argument("%s: query has shape %s, with %d sequences in dim batch_dim_idx (%d) and %d "
                                   "tokens in dim %d; this rank holds %d sequences (B/G: micro_batch %d, %d groups) "
                                   "of %d tokens (of seq_len %d, over K=%d ranks%s)" % (
                                       WHERE, tuple(query.shape), query.shape[bdi], bdi, query.shape[s_dim], s_dim,
                                       plans.qkv.info.local_sequences, self.comm.micro_batch, self.comm.num_groups,
                                       local_tokens, seq_len, self.comm.group_size,
                                       "" if seq_len % self.comm.group_size == 0 else ", tensor_split"))

    def _expand_map(self, pkey: PlanKey, plans: AttentionPlans) -> Optional[torch.Tensor]:
        """The pipeline's K/V index: the local K/V head of each local query head, None where head i reads i."""
        if pkey not in self._expand:
            identity = plans.kv == list(range(plans.local_kv_heads))
            self._expand[pkey] = None if identity else torch.tensor(plans.kv, dtype=torch.long, device=pkey[7])
        return self._expand[pkey]

    def _local(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, v_head_dim: int, args: Tuple[Any, ...],
               kwargs: Dict[str, Any]) -> torch.Tensor:
        """local_attention(q, k, v, *args, **kwargs) (timed for chunks="auto"), its answer checked."""
        expected = q.shape[:3] + (v_head_dim,)
        context = self._chooser.call(self.local_attn, q.device, q, k, v, *args, **kwargs)
        if (not isinstance(context, torch.Tensor) or context.shape != expected or context.dtype != q.dtype
                or context.device != q.device):
            got = ("%s %s on %s" % (tuple(context.shape), context.dtype, context.device)
                   if isinstance(context, torch.Tensor) else "a %s" % type(context).__name__)
            raise invalid_argument("%s: local_attention returned %s; expected %s %s on %s (the layout of q, value's "
                                   "head size)" % (WHERE, got, tuple(expected), q.dtype, q.device))
        return context

    @staticmethod
    def _rotary_tables(rotary_pos_emb: Any, head_dim: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) checked and permuted (1, 0, 2, 3) as DeepSpeed does, before any exchange (so that every
        rank refuses a bad one before the collective)."""
        if (not isinstance(rotary_pos_emb, (tuple, list)) or len(rotary_pos_emb) != 2
                or not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in rotary_pos_emb)):
            raise invalid_argument("%s: rotary_pos_emb (a %s) must be None or (cos, sin), two 4-d tensors" % (
                WHERE, type(rotary_pos_emb).__name__))
        cos, sin = (t.permute(1, 0, 2, 3) for t in rotary_pos_emb)
        width = cos.shape[-1]
        if width % 2 != 0 or width > head_dim or sin.shape[-1] != width:
            raise invalid_argument("%s: rotary_pos_emb has %d and %d channels; expected the same even count, at "
                                   "most the head dim (%d)" % (WHERE, width, sin.shape[-1], head_dim))
        return cos, sin

    def close(self) -> None:
        """Destroys the cached plans, and the comm when the layer made it (not collective)."""
        for plans in self._plans.values():
            plans.close()
        self._plans.clear()
        if self._owns_comm:
            self.comm.close()
            self._owns_comm = False

    def extra_repr(self) -> str:
        return "scatter_idx=%d, gather_idx=%d, N=%d, B=%d, G=%d, K=%d" % (
            self.scatter_idx, self.gather_idx, self.comm.world_size, self.comm.micro_batch, self.comm.num_groups,
            self.comm.group_size)
