"""basp.Plan's arguments read into a basp_plan_desc_v1: head counts, query heads, head sizes and the layout, each
checked where the binding can name what is wrong better than the library."""
from __future__ import annotations

import numbers
from typing import List, Optional, Sequence, Tuple, Union

from . import _abi, _arrays, _library
from ._abi import Layout
from ._arrays import DtypeLike
from .errors import int64_arg, invalid_argument

LayoutLike = Union[Layout, int, str]  # a member, its int, or "bshd" / "sbhd" / "thd"
HeadDimLike = Union[int, Sequence[int]]  # one head size for every tensor, or one per tensor


def head_counts(num_heads: Union[int, Sequence[int]]) -> List[int]:
    if isinstance(num_heads, int):
        num_heads = [num_heads]
    counts = [int64_arg(h, "num_heads[%d]" % t, "basp.Plan") for t, h in enumerate(num_heads)]
    if len(counts) > _abi.MAX_TENSORS:
        raise invalid_argument("basp.Plan: num_heads (%r) lists %d tensors, more than BASP_MAX_TENSORS (%d)"
                               % (counts, len(counts), _abi.MAX_TENSORS))
    return counts


def query_head_counts(query_heads: Optional[Sequence[Optional[int]]], heads: List[int]) -> List[int]:
    """query_heads as the descriptor takes it: one entry per tensor, 0 (or None) for a query-like tensor."""
    if query_heads is None:
        return [0] * len(heads)
    if isinstance(query_heads, int) or len(query_heads) != len(heads):
        raise invalid_argument("basp.Plan: query_heads (%r) must list one entry per tensor (num_heads %r): 0 for a "
                               "query-like tensor, else the query head count it serves" % (query_heads, heads))
    return [0 if q is None else int64_arg(q, "query_heads[%d]" % t, "basp.Plan") for t, q in enumerate(query_heads)]


def head_sizes(head_dim: HeadDimLike, heads: List[int]) -> Optional[List[int]]:
    """A list head_dim (a list, tuple or 1-D array) checked: one positive int per tensor -> the sizes. None for
    anything else, which goes to the descriptor as int(head_dim), as before per-tensor sizes (basp_plan_create names
    a bad one)."""
    if isinstance(head_dim, (str, bytes)):
        raise invalid_argument("basp.Plan: head_dim (%r, a %s) must be an int or a list of one int per tensor" % (
            head_dim, type(head_dim).__name__))
    if isinstance(head_dim, numbers.Integral):
        return None
    try:
        len(head_dim)  # type: ignore[arg-type]
    except TypeError:  # no length (a float, a 0-d array): one size
        return None
    sizes = [int(d) if isinstance(d, numbers.Integral) and not isinstance(d, bool) else d for d in head_dim]
    if len(sizes) != len(heads):
        raise invalid_argument("basp.Plan: head_dim (%r) lists %d head sizes but num_heads (%r) %d tensors: give one "
                               "size per tensor, or one int for all" % (sizes, len(sizes), heads, len(heads)))
    for t, d in enumerate(sizes):
        if not isinstance(d, int) or isinstance(d, bool) or not 0 < d < 2 ** 63:
            raise invalid_argument("basp.Plan: head_dim[%d] (%r) in %r must be a positive int below 2^63" % (
                t, d, sizes))
    return sizes


def layout_value(layout: LayoutLike) -> int:
    """A Layout, its int or its name -> int; unknown ints go to the library to be named there."""
    if isinstance(layout, str):
        if layout.upper() not in Layout.__members__:
            raise invalid_argument("basp.Plan: layout (%r) is not 'bshd', 'sbhd' or 'thd'" % layout)
        return int(Layout[layout.upper()])
    return int(layout)


def plan_desc(seq_len: Optional[int], head_dim: HeadDimLike, num_heads: Union[int, Sequence[int]],
              dtype: DtypeLike, layout: LayoutLike, query_heads: Optional[Sequence[Optional[int]]],
              token_capacity: Optional[int]) -> Tuple[_abi.PlanDesc, List[int], List[int], Optional[List[int]]]:
    """(descriptor, head counts, query head counts, head sizes per tensor or None for one int head_dim). Sizes that
    differ go as head_dim = tensor 0's and head_dims[t] for each tensor of another size (0: head_dim), so that a plan
    of one size is the descriptor an older library reads too."""
    heads = head_counts(num_heads)
    queries = query_head_counts(query_heads, heads)
    sizes = head_sizes(head_dim, heads)
    desc = _abi.PlanDesc(layout=layout_value(layout), dtype=_arrays.basp_dtype(dtype, "basp.Plan: dtype"),
                         seq_len=-1 if seq_len is None else int64_arg(seq_len, "seq_len", "basp.Plan"),
                         head_dim=int64_arg(head_dim, "head_dim", "basp.Plan") if sizes is None else (sizes + [-1])[0],
                         num_tensors=len(heads),
                         token_capacity=0 if token_capacity is None else int64_arg(token_capacity, "token_capacity",
                                                                                   "basp.Plan"))
    for t, (h, q) in enumerate(zip(heads, queries)):
        desc.num_heads[t] = h
        desc.query_heads[t] = q
        desc.head_dims[t] = 0 if sizes is None or sizes[t] == sizes[0] else sizes[t]
    if any(queries) or desc.layout == Layout.THD:
        # A library older than these fields would read the descriptor's first 112 bytes only and make another
        # plan than the one asked for: refuse instead.
        _library.require("basp_scatter_tokens", "basp.Plan (query_heads or layout THD)")
    return desc, heads, queries, sizes
