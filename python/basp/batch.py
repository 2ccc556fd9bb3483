"""basp.Batch: one micro-batch's membership for batch plans (basp_batch_v1): groups of any size partitioning the
world, each with its documents (a packed THD stream) or its sequences (BSHD/SBHD), and what one rank does in it.

A Batch comes from the batch planner (basp.Comm.partition_batch, basp_comm_partition_batch) or is written by hand;
either way every rank must make the same batch plans from the same Batch, in the same order (docs/batch.md). The
rank a Batch describes (`rank`: its group, position, stream and token range) is a view: Batch.for_rank gives another
rank's.
This module calls no library function and imports neither NumPy nor comm.py.
"""
from __future__ import annotations

import ctypes
import dataclasses
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _abi
from .errors import invalid_argument


def split_range(items: int, parts: int, index: int) -> Tuple[int, int]:
    """[begin, end) of position `index` when `items` are split over `parts` positions as torch.tensor_split does
    (the first items % parts positions get one more): basp_split's rule, here without a library call."""
    base, extra = divmod(int(items), int(parts))
    begin = index * base + min(index, extra)
    return begin, begin + base + (1 if index < extra else 0)


def _ints(values: Any, name: str) -> List[int]:
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise invalid_argument("basp.Batch: %s (%r) is not a sequence of ints" % (name, values)) from None


class Batch:
    """Groups of any size for one micro-batch, and the documents or sequences of each.

    groups     the world ranks of each group, by position: [[3, 0], [1], [2, 4, 5]]; every rank of the comm once
    docs       THD: each group's documents (indices into `lengths`), in the order of its packed stream
    lengths    THD: tokens of each document of the micro-batch, by index (> 0)
    sequences  BSHD/SBHD (instead of docs and lengths): the number of sequences each group holds (>= 1)
    rank       the world rank this object describes (group_index, group_position, stream, token range); None: none
    predicted_seconds  the planner's predicted step time (None for a batch written by hand)

    A THD group's stream is its documents end to end (stream_tokens T, cu_seqlens); its K ranks hold tokens
    split_range(T, K, position) of it, as torch.tensor_split does. The library checks the description itself when
    a plan is made from it (basp.Comm.batch_plan); this class checks only what its answers need.
    """

    def __init__(self, groups: Sequence[Sequence[int]], docs: Optional[Sequence[Sequence[int]]] = None,
                 lengths: Optional[Sequence[int]] = None, sequences: Optional[Sequence[int]] = None,
                 rank: Optional[int] = None, predicted_seconds: Optional[float] = None) -> None:
        self.groups: List[List[int]] = [_ints(g, "groups[%d]" % i) for i, g in enumerate(groups)]
        if not self.groups:
            raise invalid_argument("basp.Batch: groups is empty; it lists the world ranks of each group")
        if sequences is not None:
            if docs is not None or lengths is not None:
                raise invalid_argument("basp.Batch: sequences (BSHD/SBHD) excludes docs and lengths (THD)")
            self.sequences: Optional[List[int]] = _ints(sequences, "sequences")
            if len(self.sequences) != len(self.groups):
                raise invalid_argument("basp.Batch: sequences lists %d groups but groups lists %d" % (
                    len(self.sequences), len(self.groups)))
            self.docs: Optional[List[List[int]]] = None
            self.lengths: Optional[List[int]] = None
        else:
            if docs is None or lengths is None:
                raise invalid_argument("basp.Batch: pass docs and lengths (THD documents) or sequences (BSHD/SBHD)")
            self.sequences = None
            self.docs = [_ints(d, "docs[%d]" % i) for i, d in enumerate(docs)]
            self.lengths = _ints(lengths, "lengths")
            if len(self.docs) != len(self.groups):
                raise invalid_argument("basp.Batch: docs lists %d groups but groups lists %d" % (
                    len(self.docs), len(self.groups)))
            for g, group_docs in enumerate(self.docs):
                for d in group_docs:
                    if not 0 <= d < len(self.lengths):
                        raise invalid_argument("basp.Batch: docs[%d] names document %d, outside 0..%d (lengths)" % (
                            g, d, len(self.lengths) - 1))
        self.predicted_seconds = None if predicted_seconds is None else float(predicted_seconds)
        self._where: Dict[int, Tuple[int, int]] = {}
        for g, members in enumerate(self.groups):
            for p, r in enumerate(members):
                if r in self._where:
                    raise invalid_argument("basp.Batch: rank %d is in group %d and in group %d" % (
                        r, self._where[r][0], g))
                self._where[r] = (g, p)
        self.rank: Optional[int] = None
        if rank is not None:
            self.rank = self._check_rank(operator.index(rank))

    # ---- the whole batch ------------------------------------------------------------------------------------
    @property
    def thd(self) -> bool:
        """Whether the batch holds documents (THD) rather than sequences (BSHD/SBHD)."""
        return self.docs is not None

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @property
    def world_size(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def group_sizes(self) -> List[int]:
        return [len(g) for g in self.groups]

    @property
    def num_docs(self) -> int:
        """THD: documents of the micro-batch (len(lengths)); BSHD/SBHD: its sequences."""
        return len(self.lengths) if self.lengths is not None else sum(self.sequences or [])

    def stream_tokens_of(self, group: int) -> int:
        """THD: the tokens of group `group`'s stream."""
        self._need_thd("stream_tokens_of")
        return sum(self.lengths[d] for d in self.docs[group])

    def cu_seqlens_of(self, group: int) -> List[int]:
        """THD: the document boundaries of group `group`'s stream, [0, ..., T]."""
        self._need_thd("cu_seqlens_of")
        cu = [0]
        for d in self.docs[group]:
            cu.append(cu[-1] + self.lengths[d])
        return cu

    def position_of(self, rank: int) -> Tuple[int, int]:
        """(group index, position in the group) of world rank `rank`."""
        return self._where[self._check_rank(rank)]

    def for_rank(self, rank: int) -> "Batch":
        """The same batch, describing world rank `rank`."""
        other = Batch.__new__(Batch)
        # Not what callers keep on their own object (basp.torch's plans of a batch, _attention_plans).
        other.__dict__.update({k: v for k, v in self.__dict__.items() if not k.startswith("_attention")})
        other.rank = self._check_rank(operator.index(rank))
        return other

    # ---- the rank it describes ------------------------------------------------------------------------------
    @property
    def group_index(self) -> int:
        return self._mine("group_index")[0]

    @property
    def group_position(self) -> int:
        return self._mine("group_position")[1]

    @property
    def group_size(self) -> int:
        return len(self.groups[self._mine("group_size")[0]])

    @property
    def group_ranks(self) -> List[int]:
        """World ranks of this rank's group, by position."""
        return list(self.groups[self._mine("group_ranks")[0]])

    @property
    def group_docs(self) -> List[int]:
        """THD: the documents of this rank's group, in stream order."""
        self._need_thd("group_docs")
        return list(self.docs[self._mine("group_docs")[0]])

    @property
    def stream_tokens(self) -> int:
        """THD: T, the tokens of this rank's group's stream."""
        return self.stream_tokens_of(self._mine("stream_tokens")[0])

    @property
    def cu_seqlens(self) -> List[int]:
        """THD: the document boundaries of this rank's group's stream, [0, ..., T] (flash-attn's cu_seqlens)."""
        return self.cu_seqlens_of(self._mine("cu_seqlens")[0])

    @property
    def max_seqlen(self) -> int:
        """THD: the longest document of this rank's group (0 for a group without documents)."""
        cu = self.cu_seqlens
        return max([b - a for a, b in zip(cu, cu[1:])] or [0])

    @property
    def token_begin(self) -> int:
        return self.token_range()[0]

    @property
    def token_end(self) -> int:
        return self.token_range()[1]

    @property
    def tokens(self) -> slice:
        """slice of the group's stream (THD) or of each sequence (BSHD/SBHD, token_range(seq_len)) this rank holds."""
        return slice(*self.token_range())

    @property
    def num_sequences(self) -> int:
        """BSHD/SBHD: the sequences this rank's group holds (THD: 1, its stream)."""
        g = self._mine("num_sequences")[0]
        return 1 if self.thd else self.sequences[g]

    @property
    def first_sequence(self) -> int:
        """BSHD/SBHD: the index of the group's first sequence in the micro-batch (groups' sequences in order)."""
        g = self._mine("first_sequence")[0]
        return 0 if self.thd else sum(self.sequences[:g])

    def token_range(self, seq_len: Optional[int] = None) -> Tuple[int, int]:
        """[begin, end) of the tokens this rank holds: of its group's stream (THD), or of each sequence of seq_len
        tokens (BSHD/SBHD, where seq_len is required)."""
        g, p = self._mine("token_range")
        if self.thd:
            tokens = self.stream_tokens_of(g)
        elif seq_len is None:
            raise invalid_argument("basp.Batch.token_range: seq_len is required for a BSHD/SBHD batch")
        else:
            tokens = int(seq_len)
        return split_range(tokens, len(self.groups[g]), p)

    # ---- the C description ----------------------------------------------------------------------------------
    def _struct(self) -> Tuple[_abi.BatchStruct, List[Any]]:
        """(basp_batch_v1, the C arrays it points into: keep them referenced while the struct is in use)."""
        flat = [r for g in self.groups for r in g]
        sizes = (ctypes.c_int32 * len(self.groups))(*self.group_sizes)
        ranks = (ctypes.c_int32 * max(1, len(flat)))(*flat)
        keep: List[Any] = [sizes, ranks]
        s = _abi.BatchStruct(num_groups=len(self.groups), group_sizes=sizes, ranks=ranks)
        if self.thd:
            counts = [len(d) for d in self.docs]
            order = [d for group in self.docs for d in group]
            group_docs = (ctypes.c_int32 * len(counts))(*counts)
            docs = (ctypes.c_int32 * max(1, len(order)))(*order)
            lengths = (ctypes.c_int64 * max(1, len(self.lengths)))(*self.lengths)
            keep += [group_docs, docs, lengths]
            s.num_docs, s.group_docs, s.docs, s.lengths = len(self.lengths), group_docs, docs, lengths
        else:
            group_docs = (ctypes.c_int32 * len(self.sequences))(*self.sequences)
            keep.append(group_docs)
            s.num_docs, s.group_docs = sum(self.sequences), group_docs
        return s, keep

    def as_dict(self) -> Dict[str, Any]:
        """The batch without the rank it describes: groups, docs, lengths, sequences, predicted_seconds."""
        return {"groups": self.groups, "docs": self.docs, "lengths": self.lengths, "sequences": self.sequences,
                "predicted_seconds": self.predicted_seconds}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return self.as_dict() == other.as_dict() and self.rank == other.rank

    def __repr__(self) -> str:
        what = "docs=%r, lengths=%r" % (self.docs, self.lengths) if self.thd else "sequences=%r" % (self.sequences,)
        seconds = ", predicted_seconds=%.3g" % self.predicted_seconds if self.predicted_seconds is not None else ""
        return "basp.Batch(groups=%r, %s, rank=%r%s)" % (self.groups, what, self.rank, seconds)

    # ---- helpers --------------------------------------------------------------------------------------------
    def _check_rank(self, rank: int) -> int:
        if rank not in self._where:
            raise invalid_argument("basp.Batch: rank %d is in no group of the batch (groups %r)" % (rank, self.groups))
        return rank

    def _mine(self, what: str) -> Tuple[int, int]:
        if self.rank is None:
            raise invalid_argument("basp.Batch.%s: the batch describes no rank (rank None): use batch.for_rank(r), "
                                   "or a batch from basp.Comm.partition_batch" % what)
        return self._where[self.rank]

    def _need_thd(self, what: str) -> None:
        if not self.thd:
            raise invalid_argument("basp.Batch.%s: a BSHD/SBHD batch (sequences) has no documents" % what)


@dataclasses.dataclass
class CostModel:
    """A comm's cost model (basp_cost_model_v1, docs/batch.md), what basp.Comm.cost_model gets and sets: one
    exchange of a group of K ranks costs a0 + a1 * (K - 1) + beta_node * node_bytes + beta_network * network_bytes
    seconds; a group's attention (c2 * sum L^2 + c1 * sum L) times the share of the query heads its busiest rank
    holds; an exchange cut into C head chunks pays per_piece * pieces * (C - 1) more (pieces: the row pieces the
    busiest rank copies to its peers, 0 across a network link; docs/overlap.md). `calibrated`: measured on the live comm (basp.Comm.calibrate,
    or imported from a measured one)."""

    a0: float = 0.0
    a1: float = 0.0
    beta_node: float = 0.0
    beta_network: float = 0.0
    c2: float = 0.0
    c1: float = 0.0
    calibrated: bool = False
    per_piece: float = 0.0

    @classmethod
    def from_struct(cls, s: _abi.CostModelStruct) -> "CostModel":
        return cls(a0=float(s.a0), a1=float(s.a1), beta_node=float(s.beta_node), beta_network=float(s.beta_network),
                   c2=float(s.c2), c1=float(s.c1), calibrated=bool(s.calibrated), per_piece=float(s.per_piece))

    def to_struct(self) -> _abi.CostModelStruct:
        return _abi.CostModelStruct(a0=float(self.a0), a1=float(self.a1), beta_node=float(self.beta_node),
                                    beta_network=float(self.beta_network), c2=float(self.c2), c1=float(self.c1),
                                    calibrated=1 if self.calibrated else 0, per_piece=float(self.per_piece))
