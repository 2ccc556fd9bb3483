"""Pipelined attention by head chunks (BaspAttention and DistributedAttention, chunks=C): the head scatter and
gather cut into C chunks of each rank's query heads (basp.Plan.scatter_start / gather_start), so that attention on
chunk c runs while scatter chunk c + 1 and gather chunk c - 1 move. Eagerly: one torch.autograd.Function whose
forward and backward run the whole pipeline (the backward scatters dO and gathers dQ, dK, dV chunk by chunk the
same way). Under torch.compile: the same pipeline on functional operators (_torch_pipeline_compiled).

Bit-identical to chunks=1 when the attention function computes each head on its own: chunk c's tensors are views
of the same buffers, at the same offsets and strides, as chunks=1 hands the attention function, K/V are expanded to
one head per query head into a buffer of the layout chunks=1's index_select makes, and the K/V gradients are summed
by index_add_ in ascending query head order as index_select's backward does."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from . import _library
from ._torch_exchange import HAVE_CUSTOM_OPS
from ._torch_pipeline_compiled import CompiledPipeline, Spec
from ._torch_plans import AttentionPlans
from .errors import invalid_argument

# attend(q, k, v) -> out on chunk views in the attention layout (BaspAttention: [b, h, S, D], or THD [T, h, D], head
# axis 1; DistributedAttention: the exchange's own [S, b, h, D] or [b, S, h, D], head axis 2).
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ToAttention = Callable[[torch.Tensor], torch.Tensor]


def chunk_heads(local_heads: int, chunks: int, c: int) -> Tuple[int, int]:
    """The local query heads of chunk c of `chunks` (basp_split of this rank's query heads)."""
    return _library.split(local_heads, chunks, c, "basp.torch.BaspAttention (chunks)")


def _empty(plan: Any, t: int, side: str, tokens: Optional[int], like: torch.Tensor) -> torch.Tensor:
    shape = plan.head_sharded_shape(t, tokens) if side == "head" else plan.seq_sharded_shape(t, tokens)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _alias(x: torch.Tensor) -> torch.Tensor:
    """A view of x's memory (same offset and strides) with a version counter of its own: the later chunks write
    other heads of the same buffers, which must not look like a change to the tensors autograd saved."""
    out = torch.empty(0, dtype=x.dtype, device=x.device)
    return out.set_(x.untyped_storage(), x.storage_offset(), x.shape, x.stride())


class _State:
    """What the forward leaves for the backward: the plans, the chunk leaves and outputs, the views."""

    def __init__(self, plans: AttentionPlans, chunks: int, tokens: Optional[int], to_att: ToAttention, axis: int,
                 kv: Optional[torch.Tensor], cu: Optional[List[int]]) -> None:
        self.plans, self.chunks, self.tokens, self.to_att, self.kv = plans, chunks, tokens, to_att, kv
        self.axis = axis  # the head axis of the attention layout
        self.cu = cu  # THD: the documents, set on both plans before each pipeline (forward and backward)
        self.leaves: List[Tuple[torch.Tensor, ...]] = []
        self.outs: List[Optional[torch.Tensor]] = []
        self.heads: List[Tuple[int, int]] = []

    def set_documents(self) -> None:
        if self.cu is not None:
            self.plans.qkv.set_documents(self.cu)
            self.plans.out.set_documents(self.cu)


def _attend_chunk(state: _State, attend: Attend, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor,
                  kx: Optional[torch.Tensor], vx: Optional[torch.Tensor], a: int, b: int) -> Optional[torch.Tensor]:
    """Attention on local query heads [a, b) with autograd inside; the leaves and output kept for the backward."""
    to_att, axis = state.to_att, state.axis
    q = to_att(qh).narrow(axis, a, b - a)
    if state.kv is None:
        k, v = to_att(kh).narrow(axis, a, b - a), to_att(vh).narrow(axis, a, b - a)
    else:
        k, v = kx.narrow(axis, a, b - a), vx.narrow(axis, a, b - a)
        k.copy_(to_att(kh).index_select(axis, state.kv[a:b]))
        v.copy_(to_att(vh).index_select(axis, state.kv[a:b]))
    leaves = tuple(_alias(x).requires_grad_() for x in (q, k, v))
    state.leaves.append(leaves)
    if b == a:
        state.outs.append(None)
        return None
    with torch.enable_grad():
        out = attend(*leaves)
    state.outs.append(out)
    return out


class PipelinedAttention(torch.autograd.Function):
    """forward(state, attend, q, k, v) -> the sequence-sharded output; the pipeline of the module docstring."""

    @staticmethod
    def forward(ctx: Any, state: _State, attend: Attend, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> torch.Tensor:
        plans, chunks, tokens, to_att = state.plans, state.chunks, state.tokens, state.to_att
        ins = [x.contiguous() for x in (q, k, v)]
        heads = [_empty(plans.qkv, t, "head", tokens, q) for t in range(3)]
        out_h = _empty(plans.out, 0, "head", tokens, q)
        out = _empty(plans.out, 0, "seq", tokens, q)
        state.set_documents()
        # K/V expanded to one head per query head: contiguous, as index_select over the whole heads makes them.
        expanded = state.kv is not None
        kx = torch.empty(to_att(heads[0]).shape, dtype=q.dtype, device=q.device) if expanded else None
        vx = torch.empty(to_att(heads[0]).shape[:-1] + (heads[2].shape[-1],), dtype=q.dtype,
                         device=q.device) if expanded else None
        local = heads[0].shape[-2]
        scatter = plans.qkv.scatter_start(ins, heads, 0, chunks, num_tokens=tokens)
        gathers: List[Any] = []
        for c in range(chunks):
            scatter.wait()
            if c + 1 < chunks:
                scatter = plans.qkv.scatter_start(ins, heads, c + 1, chunks, num_tokens=tokens)
            a, b = chunk_heads(local, chunks, c)
            state.heads.append((a, b))
            o = _attend_chunk(state, attend, heads[0], heads[1], heads[2], kx, vx, a, b)
            if o is not None:
                to_att(out_h).narrow(state.axis, a, b - a).copy_(o.detach())
            gathers.append(plans.out.gather_start([out_h], [out], c, chunks, num_tokens=tokens))
            if c > 0:
                gathers[c - 1].wait()
        gathers[-1].wait()
        ctx.state = state
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        state = ctx.state
        plans, chunks, tokens, to_att, axis = state.plans, state.chunks, state.tokens, state.to_att, state.axis
        d_out = [grad.contiguous()]
        d_out_h = _empty(plans.out, 0, "head", tokens, grad)
        d_heads = [_empty(plans.qkv, 0, "head", tokens, grad)]
        make = torch.zeros if state.kv is not None else torch.empty
        for t in (1, 2):
            d_heads.append(make(plans.qkv.head_sharded_shape(t, tokens), dtype=grad.dtype, device=grad.device))
        d_ins = [_empty(plans.qkv, t, "seq", tokens, grad) for t in range(3)]
        state.set_documents()
        scatter = plans.out.scatter_start(d_out, [d_out_h], 0, chunks, num_tokens=tokens)
        gathers: List[Any] = []
        for c in range(chunks):
            scatter.wait()
            if c + 1 < chunks:
                scatter = plans.out.scatter_start(d_out, [d_out_h], c + 1, chunks, num_tokens=tokens)
            a, b = state.heads[c]
            if state.outs[c] is not None:
                leaves = state.leaves[c]
                gq, gk, gv = torch.autograd.grad(state.outs[c], leaves, to_att(d_out_h).narrow(axis, a, b - a))
                to_att(d_heads[0]).narrow(axis, a, b - a).copy_(gq)
                if state.kv is None:
                    to_att(d_heads[1]).narrow(axis, a, b - a).copy_(gk)
                    to_att(d_heads[2]).narrow(axis, a, b - a).copy_(gv)
                else:
                    to_att(d_heads[1]).index_add_(axis, state.kv[a:b], gk)
                    to_att(d_heads[2]).index_add_(axis, state.kv[a:b], gv)
            gathers.append(plans.qkv.gather_start(d_heads, d_ins, c, chunks, num_tokens=tokens))
            if c > 0:
                gathers[c - 1].wait()
        gathers[-1].wait()
        state.leaves, state.outs = [], []
        return (None, None) + tuple(d_ins)


def check_chunks(where: str, chunks: Any) -> Any:
    """The layer's chunks argument: an int >= 1 (1: the one-call exchanges) or "auto" (chosen per shape)."""
    if isinstance(chunks, str) and chunks == "auto":
        return chunks
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise invalid_argument("%s: chunks (%r, a %s) must be an int >= 1 (the head chunks of the pipelined "
                               "exchanges; 1: none) or 'auto'" % (where, chunks, type(chunks).__name__))
    if chunks < 1:
        raise invalid_argument("%s: chunks (%d) must be at least 1" % (where, chunks))
    return chunks


def pipelined(plans: AttentionPlans, chunks: int, tokens: Optional[int], perm: Sequence[int], attend: Attend,
              q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: Optional[List[int]] = None, axis: int = 1,
              kv: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The pipelined layer's output (chunks capped at the plans' max_head_chunks, the same on every rank). perm
    maps a head-sharded tensor to the attention layout (x.permute(*perm); () for none), whose head axis is `axis`;
    kv: the local K/V head each local query head reads (None: head i reads i), K/V then expanded to one head per
    query head. Eagerly: PipelinedAttention; under torch.compile: the functional operators' pipeline
    (_torch_pipeline_compiled), which needs PyTorch >= 2.4."""
    n = max(1, min(chunks, plans.max_head_chunks))
    if compiling():
        if not HAVE_CUSTOM_OPS:
            raise invalid_argument("basp.torch: chunks > 1 under torch.compile needs torch.library.custom_op "
                                   "(PyTorch >= 2.4; this is %s): make the layer with chunks=1 to compile it"
                                   % torch.__version__)
        spec = Spec(plans.qkv_id, plans.out_id, plans.chunk_head_ranges[n], tokens, perm, axis)
        cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int64)
        return CompiledPipeline.apply(spec, attend, kv, cu_t, q, k, v)
    to_att: ToAttention = (lambda x: x.permute(*perm)) if perm else (lambda x: x)
    state = _State(plans, n, tokens, to_att, axis, kv, cu)
    return PipelinedAttention.apply(state, attend, q, k, v)


def compiling() -> bool:
    """Whether torch.compile (dynamo) is tracing this call (False on PyTorch without torch.compiler)."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())
