"""basp.PlanInfo: basp_plan_query's answer, read from the C struct (basp.plan re-exports it)."""
from __future__ import annotations

from typing import Any, List, Tuple, Type, Union

from . import _abi
from ._abi import Layout, Path

Shape = Tuple[int, ...]


def _enum_or_int(enum_type: Type[Any], value: int) -> Any:
    """The enum member of a value the library reported, or the int when this binding does not know it."""
    try:
        return enum_type(value)
    except ValueError:
        return int(value)


def _shapes(rows: Any, num_tensors: int, ndim: int) -> List[Shape]:
    """The first ndim dims of the first num_tensors rows of a basp_plan_info_t shape array."""
    dims = max(0, min(ndim, _abi.MAX_DIMS))  # a bad ndim is reported by Plan, not turned into an IndexError
    return [tuple(int(x) for x in row[:dims]) for row in rows[:num_tensors]]


class PlanInfo:
    """basp_plan_query's answer: K, b_loc, this rank's tokens, workspace and traffic; per tensor its element counts,
    its shapes on both sides (in the layout's own dimension order), the heads this rank holds and the query heads
    whose split they follow; whether a gather sums (replicated heads); the plan's path and the one its last exchange
    took. THD plans report their shapes at the token capacity."""

    def __init__(self, struct: _abi.PlanInfoStruct) -> None:
        n = int(struct.num_tensors)
        self.num_tensors = n
        self.group_size = int(struct.group_size)
        self.local_sequences = int(struct.local_sequences)
        self.local_tokens = int(struct.local_tokens)
        self.workspace_bytes = int(struct.workspace_bytes)
        self.seq_sharded_elems = [int(x) for x in struct.seq_sharded_elems[:n]]
        self.head_sharded_elems = [int(x) for x in struct.head_sharded_elems[:n]]
        self.bytes_sent_per_exchange = int(struct.bytes_sent_per_exchange)
        self.last_path: Union[Path, int] = _enum_or_int(Path, struct.last_path)
        self.layout: Union[Layout, int] = _enum_or_int(Layout, struct.layout)
        self.ndim = int(struct.ndim)
        self.seq_sharded_shapes = _shapes(struct.seq_sharded_shape, n, self.ndim)
        self.head_sharded_shapes = _shapes(struct.head_sharded_shape, n, self.ndim)
        self.head_begin = [int(x) for x in struct.head_begin[:n]]
        self.head_end = [int(x) for x in struct.head_end[:n]]
        self.plan_path: Union[Path, int] = _enum_or_int(Path, struct.plan_path)
        self.split_begin = [int(x) for x in struct.split_begin[:n]]
        self.split_end = [int(x) for x in struct.split_end[:n]]
        self.token_begin = int(struct.token_begin)
        self.token_end = int(struct.token_end)
        self.token_capacity = int(struct.token_capacity)
        self.replicated = bool(struct.replicated)
        self.max_head_chunks = int(struct.max_head_chunks)  # 0 from a libbasp older than split-phase chunks

    @property
    def head_ranges(self) -> List[range]:
        """Per tensor, the global heads this rank holds on the head-sharded side."""
        return [range(b, e) for b, e in zip(self.head_begin, self.head_end)]

    @property
    def split_ranges(self) -> List[range]:
        """Per tensor, the heads whose split its heads follow that this rank holds: its own heads for a query-like
        tensor, the query heads it serves for a key/value tensor (Plan's query_heads)."""
        return [range(b, e) for b, e in zip(self.split_begin, self.split_end)]

    @property
    def tokens(self) -> slice:
        """The tokens of each sequence this rank holds on the sequence-sharded side (THD: at the capacity)."""
        return slice(self.token_begin, self.token_end)

    def __repr__(self) -> str:
        return "PlanInfo(%s)" % ", ".join("%s=%r" % kv for kv in vars(self).items())
