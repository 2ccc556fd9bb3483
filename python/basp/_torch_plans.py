"""The plans of one attention shape, shared by BaspAttention and DistributedAttention: Q, K, V in one exchange and
the output in another, with the K/V head each local query head reads."""
from __future__ import annotations

from typing import Any, List, Optional

import torch

from . import _abi, _library
from ._abi import Layout
from ._torch_exchange import plan_id
from .batch import Batch
from .comm import Comm
from .errors import Error
from .plan import Plan


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



class AttentionPlans:
    """The two plans of one attention shape: Q, K, V in one exchange (K/V following the query heads' split, so each
    rank receives the K/V heads its query heads read) and the output; their operator ids (plan_id); `kv`, the local
    K/V head each of this rank's query heads reads (kv_head_map); and `kv_map`, the index a layer expands K/V with
    (None when it needs none; set by the layer, whose rule it is). Q and K have head_dim, V and the output
    v_head_dim (None: head_dim), so that values of another head size (multi-head latent attention) travel in the
    same exchange. Made collectively; nothing is left open if one of the two plans fails."""

    def __init__(self, comm: Comm, seq_len: Optional[int], num_heads: int, num_kv_heads: int, head_dim: int,
                 dtype: Any, layout: Layout, token_capacity: Optional[int] = None,
                 batch: Optional[Batch] = None, v_head_dim: Optional[int] = None) -> None:
        # When K divides Hkv the K/V heads' own split is the query heads' one: planned query-like (the same
        # routing, and the uniform shape every backend takes). A batch plan's K is its group's.
        k = batch.group_size if batch is not None else comm.group_size
        kv_query = 0 if num_kv_heads % k == 0 else num_heads
        self.head_dim = int(head_dim)
        self.v_head_dim = self.head_dim if v_head_dim is None else int(v_head_dim)
        sizes = [self.head_dim, self.head_dim, self.v_head_dim]
        self.qkv = Plan(comm, seq_len, sizes if self.v_head_dim != self.head_dim else self.head_dim,
                        [num_heads, num_kv_heads, num_kv_heads], dtype, layout, query_heads=[0, kv_query, kv_query],
                        token_capacity=token_capacity, batch=batch)
        try:
            self.out = Plan(comm, seq_len, self.v_head_dim, [num_heads], dtype, layout,
                            token_capacity=token_capacity, batch=batch)
            try:
                self.kv = kv_head_map(self.qkv, num_heads, num_kv_heads)
            except BaseException:
                self.out.close()
                raise
        except BaseException:
            self.qkv.close()
            raise
        self.qkv_id = plan_id(self.qkv)
        self.out_id = plan_id(self.out)
        self.kv_map: Optional[torch.Tensor] = None
        # The pipelined layer's chunk count cap and, per count, each chunk's local query heads: plain values, which
        # torch.compile reads while tracing (the library is not called then).
        self.max_head_chunks = max(1, min(self.qkv.max_head_chunks, self.out.max_head_chunks))
        local = self.qkv.info.head_end[0] - self.qkv.info.head_begin[0]
        self.chunk_head_ranges = {n: [_library.split(local, n, c, "basp.torch: head chunks") for c in range(n)]
                                  for n in range(1, self.max_head_chunks + 1)}

    @property
    def local_kv_heads(self) -> int:
        return self.qkv.info.head_end[1] - self.qkv.info.head_begin[1]

    def close(self) -> None:
        self.qkv.close()
        self.out.close()


def empty_output(q: torch.Tensor, v_head_dim: int) -> torch.Tensor:
    """The attention output of a rank without query heads (q has 0 heads): q itself when V has q's head size, else a
    view of q of V's head size (no element either way). It stays in q's graph, so that this rank's backward runs the
    exchanges the other ranks of its group run too."""
    if q.shape[-1] == v_head_dim:
        return q
    return q[..., :1].expand(*q.shape[:-1], v_head_dim)
