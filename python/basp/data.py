"""Data-loader helpers (the paper's Algorithm 2): which sequences and tokens of a micro-batch a rank feeds.

Every rank of group g takes the same B/G sequences [g*B/G, (g+1)*B/G) of each micro-batch; the rank at position
l of the group keeps tokens [l*S/K, (l+1)*S/K) of each. The library answers the arithmetic (basp.Comm.shard);
these helpers apply it to dataset indices and to a loaded micro-batch.
"""
from __future__ import annotations

import sys
from typing import Union

from . import _arrays
from ._abi import Layout
from ._arrays import Array
from .comm import RankInfo
from .errors import invalid_argument


def sequence_indices(info: RankInfo, step: int = 0) -> range:
    """Dataset indices of the sequences the rank described by `info` (a basp.RankInfo) feeds at `step`, when
    micro-batch `step` is dataset sequences [step*B, (step+1)*B)."""
    base = int(step) * info.micro_batch + info.first_sequence
    return range(base, base + info.num_sequences)


def local_shard(batch: Array, info: RankInfo, layout: Union[Layout, int, str] = Layout.BSHD) -> Array:
    """This rank's part of a whole micro-batch: `batch` (NumPy or PyTorch) is [B, S, ...] (BSHD) or [S, B, ...]
    (SBHD) and the result, a contiguous copy, is [B/G, S/K, ...] or [S/K, B/G, ...]. Works for token ids
    [B, S] as well as activations [B, S, H, D]. `info` must come from Comm.shard(S)."""
    a = _arrays.ArrayInfo(batch, "basp.data.local_shard: batch")
    if isinstance(layout, str):
        layout = Layout[layout.upper()]
    if info.seq_len <= 0:
        raise invalid_argument("basp.data.local_shard: info.seq_len (%d) is 0: query the comm with the sequence "
                               "length, comm.shard(seq_len)" % info.seq_len)
    b_dim, s_dim = (0, 1) if layout == Layout.BSHD else (1, 0)
    if len(a.shape) < 2 or a.shape[b_dim] != info.micro_batch or a.shape[s_dim] != info.seq_len:
        raise invalid_argument("basp.data.local_shard: batch has shape %s but a %s micro-batch of B=%d sequences "
                               "of S=%d tokens is expected" % (a.shape, layout.name, info.micro_batch, info.seq_len))
    index = [slice(None)] * len(a.shape)
    index[b_dim] = info.sequences
    index[s_dim] = info.tokens
    part = batch[tuple(index)]
    if a.kind == "torch":
        return part.clone(memory_format=sys.modules["torch"].contiguous_format)
    return part.copy(order="C")
