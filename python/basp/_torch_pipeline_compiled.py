"""The pipelined attention layer (chunks=C > 1) under torch.compile: the pipeline of _torch_pipeline, written with
the functional split-phase operators (_torch_chunk_ops) so that torch.compile traces it into one graph.

It is one torch.autograd.Function, which dynamo traces as a whole (forward and backward) and AOT autograd inlines:
- forward: scatter chunk c + 1 is started before chunk c is waited for, attention runs on chunk c's heads of the
  waited-for buffers, gather chunk c starts with attention's output and gather chunk c - 1 is waited for after it;
- backward: the same with the output gradient's scatter and the Q, K, V gradients' gather, in ascending chunk order,
  each chunk's gradients the vjp (torch.func.vjp) of the attention function at that chunk's inputs.
The starts and waits of a round form one chain of handles, so the graph keeps them in that order and keeps every
one of them; torch.compile may still move other work around them. The backward is written out rather than derived
by AOT autograd from per-operator formulas because autograd runs a derived backward in reverse chunk order, while
a K/V head's gradient must be summed in ascending query head order (as index_select's backward sums it at chunks=1)
and goes back with the last chunk whose query heads read it.

The backward evaluates the attention function again on each chunk's saved inputs (the vjp), as activation
checkpointing does: one more attention forward per chunk, in the backward graph (AOT autograd does not merge it with
the forward's). Eager runs keep _torch_pipeline's function, which keeps each chunk's autograd graph instead and so
computes no attention twice; this one would be slower there.

Bit-identical to chunks=1 (eager) under the same condition as the eager pipeline: the attention function computes
each head on its own. Query heads (and K/V heads without expansion) are views of the whole head-sharded buffers, at
chunks=1's offsets and strides; expanded K/V heads are index_select's output for the chunk's query heads."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch

from . import _torch_chunk_ops as ops

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Spec:
    """What the traced pipeline reads as constants: the plans' ids, C and the chunks' local query heads, the
    stream's tokens (-1: the plan's), and the attention layout (`perm` from the head-sharded one, () for none;
    the head axis `axis`)."""

    def __init__(self, qkv_id: int, out_id: int, ranges: Sequence[Tuple[int, int]], tokens: Optional[int],
                 perm: Sequence[int], axis: int) -> None:
        self.qkv_id, self.out_id = qkv_id, out_id
        self.ranges = list(ranges)
        self.chunks = len(self.ranges)
        self.tokens = -1 if tokens is None else tokens
        self.perm, self.axis = list(perm), axis

    def to_att(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.perm) if self.perm else x

    def heads(self, x: torch.Tensor, c: int) -> torch.Tensor:
        a, b = self.ranges[c]
        return self.to_att(x).narrow(self.axis, a, b - a)


def _inputs(spec: Spec, bufs: Sequence[torch.Tensor], c: int,
            kv: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunk c's q, k, v in the attention layout from the scatter's head-sharded buffers."""
    if kv is None:
        return spec.heads(bufs[0], c), spec.heads(bufs[1], c), spec.heads(bufs[2], c)
    a, b = spec.ranges[c]
    index = kv[a:b]
    return (spec.heads(bufs[0], c), spec.to_att(bufs[1]).index_select(spec.axis, index),
            spec.to_att(bufs[2]).index_select(spec.axis, index))


def _no_heads(like: torch.Tensor, head_dim: int) -> torch.Tensor:
    """A chunk without query heads: an output of no element (attention is not called)."""
    return like.new_empty(tuple(like.shape[:-1]) + (head_dim,))


class CompiledPipeline(torch.autograd.Function):
    """apply(spec, attend, kv, cu_seqlens, q, k, v) -> the sequence-sharded output (module docstring)."""

    @staticmethod
    def forward(ctx: Any, spec: Spec, attend: Attend, kv: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n, tokens, device = spec.chunks, spec.tokens, q.device
        ins = [q.contiguous(), k.contiguous(), v.contiguous()]
        scatter = ops.scatter_chunk_start(spec.qkv_id, ins, None, 0, n, tokens, cu_seqlens)
        gather: Optional[torch.Tensor] = None
        saved: List[torch.Tensor] = []
        for c in range(n):
            if c + 1 < n:
                scatter = ops.scatter_chunk_start(spec.qkv_id, ins, scatter, c + 1, n, tokens, cu_seqlens)
            bufs, scatter = ops.scatter_chunk_wait(spec.qkv_id, scatter, ins, c, tokens)
            saved.extend(bufs)
            qc, kc, vc = _inputs(spec, bufs, c, kv)
            a, b = spec.ranges[c]
            out = attend(qc, kc, vc) if b > a else _no_heads(qc, bufs[2].shape[-1])
            gather = ops.gather_chunk_start(spec.out_id, [out], gather, c, n, tokens, cu_seqlens, spec.perm,
                                            spec.axis, None, scatter)
            if c > 0:
                _, gather = ops.gather_chunk_wait(spec.out_id, gather, device, c - 1, tokens, [])
        (result,), _ = ops.gather_chunk_wait(spec.out_id, gather, device, n - 1, tokens, saved)
        ctx.spec, ctx.attend = spec, attend
        ctx.has_kv, ctx.has_cu = kv is not None, cu_seqlens is not None
        extra = ([kv] if kv is not None else []) + ([cu_seqlens] if cu_seqlens is not None else [])
        ctx.save_for_backward(*(saved + extra))
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        spec, attend = ctx.spec, ctx.attend
        n, tokens, device = spec.chunks, spec.tokens, grad.device
        saved = list(ctx.saved_tensors)
        cu_seqlens = saved.pop() if ctx.has_cu else None
        kv = saved.pop() if ctx.has_kv else None
        d_out = [grad.contiguous()]
        scatter = ops.scatter_chunk_start(spec.out_id, d_out, None, 0, n, tokens, cu_seqlens)
        gather: Optional[torch.Tensor] = None
        waited: List[torch.Tensor] = []  # the views of the round's buffers, kept read until its end (keep)
        for c in range(n):
            if c + 1 < n:
                scatter = ops.scatter_chunk_start(spec.out_id, d_out, scatter, c + 1, n, tokens, cu_seqlens)
            (d_out_h,), scatter = ops.scatter_chunk_wait(spec.out_id, scatter, d_out, c, tokens)
            waited.append(d_out_h)
            qc, kc, vc = _inputs(spec, saved[3 * c:3 * c + 3], c, kv)
            a, b = spec.ranges[c]
            if b > a:
                _, vjp = torch.func.vjp(attend, qc, kc, vc)
                grads = list(vjp(spec.heads(d_out_h, c)))
            else:
                grads = [torch.zeros_like(x) for x in (qc, kc, vc)]
            gather = ops.gather_chunk_start(spec.qkv_id, grads, gather, c, n, tokens, cu_seqlens, spec.perm,
                                            spec.axis, kv, scatter)
            if c > 0:
                _, gather = ops.gather_chunk_wait(spec.qkv_id, gather, device, c - 1, tokens, [])
        d_ins, _ = ops.gather_chunk_wait(spec.qkv_id, gather, device, n - 1, tokens, waited)
        return (None, None, None, None) + tuple(d_ins)
