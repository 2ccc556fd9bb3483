"""PyTorch on libbasp: the head scatter/gather as operators (torch.compile traces them) and a BASP attention module.

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
and kept: every rank of a group must run the same forward/backward sequence. Under torch.compile they must exist
before tracing (BaspAttention.prepare): the exchanges are then custom operators that trace without a graph break.

Three ways in: head_scatter/head_gather on plain tensors, BaspAttention (or DistributedAttention, DeepSpeed's
calling convention), and an attention backend for HF transformers (register_hf_attention).
"""
from __future__ import annotations

from ._torch_attention import (AttentionFn, BaspAttention, CuSeqlens, VarlenAttentionFn, default_attention,
                               explicit_attention, packed_attention)
from ._torch_deepspeed import DistributedAttention
from ._torch_exchange import (GATHER, HAVE_CUSTOM_OPS, SCATTER, Exchange, head_gather, head_scatter, plan_by_id,
                              plan_id)
from ._torch_group import ProcessGroupAllgather, comm_from_process_group
from ._torch_hf import register_hf_attention
from ._torch_plans import kv_head_map

__all__ = [
    "AttentionFn", "BaspAttention", "CuSeqlens", "DistributedAttention", "Exchange", "GATHER", "HAVE_CUSTOM_OPS",
    "ProcessGroupAllgather", "SCATTER", "VarlenAttentionFn", "comm_from_process_group", "default_attention",
    "explicit_attention", "head_gather", "head_scatter", "kv_head_map", "packed_attention", "plan_by_id", "plan_id",
    "register_hf_attention",
]
