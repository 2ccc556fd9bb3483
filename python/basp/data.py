"""Data-loader helpers (the paper's Algorithm 2): which sequences and tokens of a micro-batch a rank feeds.

Every rank of group g takes the same B/G sequences [g*B/G, (g+1)*B/G) of each micro-batch; the rank at position
l of the group keeps the l-th of K token ranges of each, split as torch.tensor_split does ([l*S/K, (l+1)*S/K) when
K divides S; otherwise the first S % K positions hold one token more). The library answers the arithmetic
(basp.Comm.shard); these helpers apply it to dataset indices and to a loaded micro-batch.

A packed micro-batch of documents (THD) is shared out by assign_documents: whole documents to groups, then each
group's packed stream split over its ranks (docs/packed.md). A batch plan's membership (basp.Batch, groups of any
size: basp.Comm.partition_batch) is applied the same way by batch_assignment and pack_batch.
"""
from __future__ import annotations

import ctypes
import dataclasses
import operator
import sys
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _abi, _arrays, _library
from ._abi import Layout
from ._arrays import Array
from ._handle import CommHandle
from .batch import Batch
from .comm import RankInfo
from .errors import invalid_argument


def sequence_indices(info: RankInfo, step: int = 0) -> range:
    """Dataset indices of the sequences the rank described by `info` (a basp.RankInfo) feeds at `step`, when
    micro-batch `step` is dataset sequences [step*B, (step+1)*B)."""
    base = int(step) * info.micro_batch + info.first_sequence
    return range(base, base + info.num_sequences)


def local_shard(batch: Array, info: RankInfo, layout: Union[Layout, int, str] = Layout.BSHD) -> Array:
    """This rank's part of a whole micro-batch: `batch` (NumPy or PyTorch) is [B, S, ...] (BSHD) or [S, B, ...]
    (SBHD) and the result, a contiguous copy, is [B/G, S_l, ...] or [S_l, B/G, ...], S_l = info.token_end -
    info.token_begin (S/K when K divides S; any S works). Works for token ids [B, S] as well as activations
    [B, S, H, D]. `info` must come from Comm.query(S). A packed batch (THD) takes DocumentAssignment.pack."""
    a = _arrays.ArrayInfo(batch, "basp.data.local_shard: batch")
    if isinstance(layout, str):
        layout = Layout[layout.upper()]
    if layout not in (Layout.BSHD, Layout.SBHD):
        raise invalid_argument("basp.data.local_shard: layout (%r) is not BSHD or SBHD: a packed batch's slice comes "
                               "from basp.data.assign_documents(...).pack" % (layout,))
    if info.seq_len <= 0:
        raise invalid_argument("basp.data.local_shard: info.seq_len (%d) is 0: query the comm with the sequence "
                               "length, comm.query(seq_len)" % info.seq_len)
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


@dataclasses.dataclass(frozen=True, eq=False)
class DocumentAssignment:
    """What one rank does with a packed micro-batch of documents (basp_doc_assignment_t, from assign_documents).

    The rank belongs to group `group_index` (position `group_position` of `group_size`). The group's stream is its
    documents `docs` (indices into the micro-batch, ascending) packed end to end: `stream_tokens` tokens, with
    `cu_seqlens` (num_docs + 1 offsets, cu_seqlens[0] = 0) and `max_seqlen` as flash-attn's varlen functions take
    them. The rank feeds tokens [token_begin, token_end) of that stream; the first of them is token
    `first_doc_offset` of document docs[first_doc] (first_doc -1 when the rank has no token). `max_group_tokens` is
    the largest stream of all groups and `imbalance` that over the mean (1.0: perfectly balanced).

    cu_seqlens is a read-only numpy.int32 array: flash-attn's flash_attn_varlen_func requires int32 cu_seqlens
    (torch.tensor(a.cu_seqlens, device="cuda") hands it over). The struct's header and reserved fields are left
    out.
    """

    rank: int
    group_index: int
    group_position: int
    group_size: int
    num_docs: int
    stream_tokens: int
    token_begin: int
    token_end: int
    first_doc: int
    first_doc_offset: int
    max_seqlen: int
    max_group_tokens: int
    imbalance: float
    docs: List[int]
    cu_seqlens: Any  # numpy.ndarray of int32, [num_docs + 1]

    @property
    def tokens(self) -> slice:
        """slice of the group's stream this rank feeds."""
        return slice(self.token_begin, self.token_end)

    @property
    def num_tokens(self) -> int:
        return self.token_end - self.token_begin

    def position_ids(self) -> Any:
        """The position of each of this rank's tokens inside its document (RoPE's position ids): a numpy.int64
        array of num_tokens entries, restarting at 0 where a document starts."""
        np = _numpy()
        t = np.arange(self.token_begin, self.token_end, dtype=np.int64)
        cu = self.cu_seqlens.astype(np.int64)
        return t - cu[np.searchsorted(cu, t, side="right") - 1]

    def pack(self, documents: Sequence[Array]) -> Tuple[Array, Array]:
        """This rank's input slice and its position ids: `documents` lists every document of the micro-batch by
        index, each a NumPy array or a PyTorch tensor of shape [L_i, ...] (token ids [L_i], embeddings [L_i, E]).
        Returns (tokens, positions): tokens [token_begin, token_end) of the group's packed stream, a new array of
        shape [num_tokens, ...] and the documents' kind, dtype and device; positions is position_ids() (a
        torch.int64 tensor on the same device for PyTorch input). Only the group's documents are read."""
        where = "basp.data.DocumentAssignment.pack"
        docs = list(documents)
        needed = max(self.docs) + 1 if self.docs else 0
        if len(docs) < needed:
            raise invalid_argument("%s: documents has %d entries but this group's stream holds document %d" % (
                where, len(docs), needed - 1))
        for j, d in enumerate(self.docs):
            shape = _arrays.ArrayInfo(docs[d], "%s: documents[%d]" % (where, d)).shape
            length = int(self.cu_seqlens[j + 1] - self.cu_seqlens[j])
            if len(shape) < 1 or shape[0] != length:
                raise invalid_argument("%s: documents[%d] has shape %s but document %d has %d tokens" % (
                    where, d, shape, d, length))
        pieces = []
        t, j = self.token_begin, self.first_doc
        while t < self.token_end:
            d, start, end = self.docs[j], int(self.cu_seqlens[j]), int(self.cu_seqlens[j + 1])
            stop = min(self.token_end, end)
            pieces.append(docs[d][t - start:stop - start])
            t, j = stop, j + 1
        np = _numpy()
        positions = self.position_ids()
        if not docs:  # a batch without documents: no kind, dtype or trailing shape to follow
            return np.zeros((0,), dtype=np.int64), positions
        # An empty slice (a rank without tokens) keeps the documents' kind, dtype and trailing shape.
        template = docs[self.docs[0]] if self.docs else docs[0]
        if _arrays.ArrayInfo(template, "%s: documents[0]" % where).kind == "torch":
            torch = sys.modules["torch"]
            out = torch.cat(pieces) if pieces else template[:0].clone()
            return out, torch.as_tensor(positions, device=out.device)
        return (np.concatenate(pieces) if pieces else template[:0].copy()), positions

    def unpack(self, local: Array) -> List[Tuple[int, int, Array]]:
        """pack's inverse: this rank's per-token result (hidden states, logits, per-token losses), an array or
        tensor of shape [num_tokens, ...] in the order of its packed input, cut at the document boundaries.
        Returns (document, offset, piece) for each document this rank holds tokens of, in stream order: `piece`
        (a view of `local`, no copy) is tokens [offset, offset + len(piece)) of micro-batch document `document`.
        The pieces of all ranks of the group, put at their offsets, give every document of the group whole."""
        where = "basp.data.DocumentAssignment.unpack"
        shape = _arrays.ArrayInfo(local, "%s: local" % where).shape
        if len(shape) < 1 or shape[0] != self.num_tokens:
            raise invalid_argument("%s: local has shape %s but this rank holds %d tokens (%d..%d of its group's "
                                   "stream)" % (where, tuple(shape), self.num_tokens, self.token_begin,
                                                self.token_end))
        out = []
        t, j = self.token_begin, self.first_doc
        while t < self.token_end:
            start, end = int(self.cu_seqlens[j]), int(self.cu_seqlens[j + 1])
            stop = min(self.token_end, end)
            out.append((self.docs[j], t - start, local[t - self.token_begin:stop - self.token_begin]))
            t, j = stop, j + 1
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DocumentAssignment):
            return NotImplemented
        plain = [f.name for f in dataclasses.fields(self) if f.name != "cu_seqlens"]
        return (all(getattr(self, n) == getattr(other, n) for n in plain) and
                self.cu_seqlens.tolist() == other.cu_seqlens.tolist())


def _numpy() -> Any:
    import numpy  # only when the caller asks for arrays: `import basp` stays free of NumPy
    return numpy


def _lengths_array(lengths: Any, where: str) -> Tuple[Any, int]:
    """Document lengths (a sequence of ints or a 1-D integer array) -> (a C int64 array, its count)."""
    np = _numpy()
    if _arrays.is_torch(lengths):
        lengths = lengths.detach().cpu().numpy()
    a = np.asarray(lengths)
    if a.ndim != 1:
        raise invalid_argument("%s: lengths has shape %s; expected one length per document (1-D)" % (
            where, a.shape))
    if a.size and a.dtype.kind not in "iu":
        raise invalid_argument("%s: lengths has dtype %s; document lengths are integers" % (where, a.dtype))
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise invalid_argument("%s: lengths holds %d, more than int64" % (where, int(a.max())))
    if a.size >= 2 ** 31:
        raise invalid_argument("%s: %d documents; at most 2^31 - 1" % (where, a.size))
    c = (ctypes.c_int64 * max(1, a.size))()
    if a.size:
        np.frombuffer(c, dtype=np.int64, count=a.size)[:] = a
    return c, int(a.size)


def assign_documents(comm: CommHandle, lengths: Any, capacity: int = 0, rank: int = -1) -> DocumentAssignment:
    """Shares a packed micro-batch of documents out over `comm`'s groups and describes world rank `rank` (-1: the
    caller), as basp_comm_assign_documents does: documents in decreasing length (ties: lower index first) each go
    to the group with the fewest tokens so far, then the smallest sum of squared lengths, then the lowest index;
    each group's stream holds its documents in ascending index, split over its K ranks as torch.tensor_split does.
    Every rank computes the same answer from the same lengths; not collective.

    lengths: one positive length per document (a list of ints, or a 1-D integer NumPy array or tensor).
    capacity: the most tokens a group's stream may hold (0: no limit); a document longer than it, or a batch the
    rule cannot fit, raises basp.Error (INVALID_ARGUMENT) naming the document or the group.
    Returns a DocumentAssignment (cu_seqlens as numpy.int32, flash-attn's dtype).
    """
    where = "basp.data.assign_documents"
    if not isinstance(comm, CommHandle):
        raise invalid_argument("%s: comm (a %s) is not a basp.Comm" % (where, type(comm).__name__))
    np = _numpy()
    c_lengths, n = _lengths_array(lengths, where)
    capacity = _integer(capacity, 64, "%s: capacity" % where)
    rank = _integer(rank, 32, "%s: rank" % where)
    struct = _abi.DocAssignmentStruct()
    docs = (ctypes.c_int32 * max(1, n))()
    cu = (ctypes.c_int64 * (n + 1))()
    fn = _assign_documents_function(where)
    # max_docs = n: no group holds more documents than the batch, so one call always has room.
    _library.check(fn(comm.handle, c_lengths if n else None, n, capacity, rank, ctypes.byref(struct), docs, cu, n))
    count = int(struct.num_docs)
    cu_seqlens = np.frombuffer(cu, dtype=np.int64, count=count + 1).copy()
    if cu_seqlens[-1] > np.iinfo(np.int32).max:
        raise invalid_argument("%s: group %d's stream holds %d tokens, more than an int32 cu_seqlens can index" % (
            where, struct.group_index, int(cu_seqlens[-1])))
    cu_seqlens = cu_seqlens.astype(np.int32)
    cu_seqlens.flags.writeable = False
    fields = {name: getattr(struct, name) for name, _ in _abi.DocAssignmentStruct._fields_
              if name not in ("size", "magic", "version", "reserved0", "reserved1")}
    return DocumentAssignment(docs=list(docs[:count]), cu_seqlens=cu_seqlens, **fields)


def _integer(value: Any, bits: int, name: str) -> int:
    """An int that fits a C int of `bits` bits (ctypes would wrap one that does not), else INVALID_ARGUMENT."""
    try:
        v = operator.index(value)
    except TypeError:
        raise invalid_argument("%s (%r) is not an integer" % (name, value)) from None
    if not -2 ** (bits - 1) <= v < 2 ** (bits - 1):
        raise invalid_argument("%s (%d) does not fit in int%d" % (name, v, bits))
    return v


def _assign_documents_function(where: str) -> Any:
    """basp_comm_assign_documents with its prototype declared (older libraries lack it: basp.Error UNSUPPORTED)."""
    fn = _library.require("basp_comm_assign_documents", where)
    if fn.argtypes is None:
        fn.restype, fn.argtypes = _abi.ASSIGN_DOCUMENTS_PROTOTYPE
    return fn


def batch_assignment(batch: Batch, rank: Optional[int] = None) -> DocumentAssignment:
    """What world rank `rank` (None: the rank `batch` describes) does in a THD basp.Batch, as a DocumentAssignment
    (its pack and position_ids work as for assign_documents): its group's documents in stream order, cu_seqlens
    (numpy.int32), max_seqlen, and its token range of the stream, split over the group's K ranks as
    torch.tensor_split does. max_group_tokens is the longest stream of the batch and imbalance that over the mean
    stream (1.0 for a batch without tokens). Not collective, no library call."""
    where = "basp.data.batch_assignment"
    if not isinstance(batch, Batch):
        raise invalid_argument("%s: batch (a %s) is not a basp.Batch" % (where, type(batch).__name__))
    if not batch.thd:
        raise invalid_argument("%s: batch holds sequences (BSHD/SBHD), not documents: its sequences are "
                               "batch.first_sequence .. + batch.num_sequences, tokens batch.token_range(seq_len)" %
                               where)
    if rank is not None:
        batch = batch.for_rank(_integer(rank, 32, "%s: rank" % where))
    elif batch.rank is None:
        raise invalid_argument("%s: the batch describes no rank: pass rank, or a batch from "
                               "basp.Comm.partition_batch" % where)
    np = _numpy()
    cu = batch.cu_seqlens
    if cu[-1] > np.iinfo(np.int32).max:
        raise invalid_argument("%s: group %d's stream holds %d tokens, more than an int32 cu_seqlens can index" % (
            where, batch.group_index, cu[-1]))
    cu_seqlens = np.asarray(cu, dtype=np.int32)
    cu_seqlens.flags.writeable = False
    begin, end = batch.token_range()
    first_doc, first_offset = -1, 0
    if end > begin:
        first_doc = int(np.searchsorted(np.asarray(cu, dtype=np.int64), begin, side="right")) - 1
        first_offset = begin - cu[first_doc]
    streams = [batch.stream_tokens_of(g) for g in range(batch.num_groups)]
    total = sum(streams)
    longest = max(streams)
    return DocumentAssignment(rank=batch.rank, group_index=batch.group_index, group_position=batch.group_position,
                              group_size=batch.group_size, num_docs=len(batch.group_docs), stream_tokens=cu[-1],
                              token_begin=begin, token_end=end, first_doc=first_doc, first_doc_offset=first_offset,
                              max_seqlen=batch.max_seqlen, max_group_tokens=longest,
                              imbalance=longest * len(streams) / total if total else 1.0, docs=batch.group_docs,
                              cu_seqlens=cu_seqlens)


@dataclasses.dataclass(frozen=True, eq=False)
class BatchInput:
    """This rank's sequence-side input of a batch plan (pack_batch): `tokens` its slice [num_tokens, ...] of its
    group's packed stream (the documents' kind, dtype and device), `positions` each token's position inside its
    document (RoPE's position ids: int64, a tensor on the same device for PyTorch input), and the group's
    `cu_seqlens` (numpy.int32, [num_docs + 1]) and `max_seqlen`, as flash-attn's varlen functions take them.
    `assignment` is the DocumentAssignment it came from (token_begin, token_end, stream_tokens, docs, ...)."""

    tokens: Any
    positions: Any
    cu_seqlens: Any
    max_seqlen: int
    assignment: DocumentAssignment

    @property
    def num_tokens(self) -> int:
        return self.assignment.num_tokens

    @property
    def stream_tokens(self) -> int:
        """T, the tokens of the group's stream (what a THD batch plan's exchanges move)."""
        return self.assignment.stream_tokens


def pack_batch(documents: Sequence[Array], batch: Batch, rank: Optional[int] = None) -> BatchInput:
    """This rank's packed input for a THD batch plan: `documents` lists every document of the micro-batch by index
    (batch.lengths), each a NumPy array or a PyTorch tensor [L_i, ...] (token ids [L_i], embeddings [L_i, E]); the
    result holds tokens [token_begin, token_end) of the rank's group's stream (its documents end to end, in the
    batch's order), their positions, and the group's cu_seqlens and max_seqlen. Only the group's documents are
    read. rank: as for batch_assignment."""
    assignment = batch_assignment(batch, rank)
    tokens, positions = assignment.pack(documents)
    return BatchInput(tokens=tokens, positions=positions, cu_seqlens=assignment.cu_seqlens,
                      max_seqlen=int(assignment.max_seqlen), assignment=assignment)


def unpack_batch(local: Array, batch: Batch, rank: Optional[int] = None) -> List[Tuple[int, int, Array]]:
    """pack_batch's inverse for a THD batch plan: this rank's per-token result [num_tokens, ...] cut at its
    documents' boundaries, as (document, offset, piece) in stream order (DocumentAssignment.unpack). rank: as for
    batch_assignment."""
    return batch_assignment(batch, rank).unpack(local)
