"""The split-phase head exchanges as functional PyTorch operators, for the pipelined layers under torch.compile:
torch.ops.basp.scatter_chunk_start / scatter_chunk_wait and gather_chunk_start / gather_chunk_wait (PyTorch >= 2.4).

One round (the C chunks of one scatter or gather, basp.Plan.scatter_start's chunks) lives in a Python-side table
under an integer id; the operators pass it on as a handle, an int64 scalar tensor holding that id, like torch's
wait_tensor consumes what its collective returned:

    h = scatter_chunk_start(plan, inputs, None, 0, C, ...)   # round made, chunk 0 started
    h = scatter_chunk_start(plan, inputs, h, 1, C, ...)      # chunk 1 started
    outs, h = scatter_chunk_wait(plan, h, inputs, 0, ...)    # chunk 0 waited for: outs hold its heads

Each operator takes the handle the one before it in the round returned, so the round is one chain of data
dependencies: torch.compile can neither reorder its starts and waits nor drop one (the last wait's outputs are
what the layer returns). A gather start also takes, as `after`, the handle that the scatter wait of its chunk
returned, which it does not otherwise use: that puts the scatter's waits on the chain to the layer's output too,
even a wait whose buffers this rank does not read (a chunk without query heads here). A scatter wait also takes the scatter's inputs, so that they stay alive and unchanged
until the library has read them. None of them mutates an argument: the round's buffers are its own, allocated by its
first start. A scatter wait returns views of the whole head-sharded buffers (complete in the heads of the chunks
waited for), so that attention on chunk c reads the same memory, at the same offsets and strides, as chunks=1 hands
the attention function; the graph takes each wait's outputs for new tensors, which holds for what the layer reads:
the later chunks write other heads only. But the compiler may also write a kernel's result in place into a
buffer whose last reader that kernel is (inductor does), taking these views for buffers of their own, which would
write into heads still in flight: so the pipeline passes every scatter wait's outputs to the last gather wait of
its pass (`keep`, otherwise unused), which keeps each of them read until then and out of such reuse. A gather start copies its chunk's attention output (or gradients) into
the round's head-sharded buffers first, at the chunk's heads (K/V gradients: index_add_ in ascending query head
order, into zeros), and the wait of the last chunk returns the gathered tensors. The operators have no autograd
formula: the pipelined layer's backward calls them itself (_torch_pipeline_compiled). A round still in the table
when the next round of its plan and direction opens (left by a graph that raised part way) is ended then: its
chunks not yet started are started on its own buffers, all are waited for, and it is dropped.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from . import _library
from ._torch_exchange import (GATHER, HAVE_CUSTOM_OPS, SCATTER, TORCH_DTYPES, check_tokens, fake_outputs,
                              plan_by_id)
from .errors import Error, invalid_argument

_lock = threading.Lock()
_round_ids = itertools.count(1)


class _Round:
    """One scatter or gather in chunks: its plan, buffers and started Works."""

    def __init__(self, plan: Any, direction: str, num_chunks: int, tokens: Optional[int],
                 head_side: List[torch.Tensor], seq_side: List[torch.Tensor]) -> None:
        self.plan, self.direction, self.num_chunks, self.tokens = plan, direction, num_chunks, tokens
        self.head_side, self.seq_side = head_side, seq_side
        self.works: Dict[int, Any] = {}
        self.started = 0  # chunks 0 .. started - 1 were started (in order)
        self.waited = 0


_rounds: Dict[int, _Round] = {}


def _handle(rid: int) -> torch.Tensor:
    return torch.tensor(rid, dtype=torch.int64)


def _round(handle: torch.Tensor, where: str) -> Tuple[int, _Round]:
    rid = int(handle)
    with _lock:
        found = _rounds.get(rid)
    if found is None:
        raise invalid_argument("%s: handle %d names no round in flight (its last chunk was waited for already)"
                               % (where, rid))
    return rid, found


def open_rounds() -> int:
    """How many rounds are started and not fully waited for (tests: 0 once every pipelined layer returned)."""
    with _lock:
        return len(_rounds)


def _drop_stale(plan: Any, direction: str) -> None:
    """Ends the rounds of `plan` and `direction` still in the table when a new one opens: left by a graph that
    raised between their first start and last wait (a pipeline never runs two of them at once). The library keeps a
    round open until all its chunks are started, so the chunks not started yet are started here, in order, on the
    round's own buffers (every rank abandons the same round the same way); then all are waited for, their errors
    dropped, so that the library takes the new round's starts."""
    with _lock:
        stale = [rid for rid, r in _rounds.items() if r.plan is plan and r.direction == direction]
        rounds = [_rounds.pop(rid) for rid in stale]
    for state in rounds:
        ins, outs = ((state.seq_side, state.head_side) if direction == SCATTER else (state.head_side, state.seq_side))
        start = state.plan.scatter_start if direction == SCATTER else state.plan.gather_start
        for c in range(state.started, state.num_chunks):
            try:
                state.works[c] = start(ins, outs, c, state.num_chunks, num_tokens=state.tokens)
            except Error:
                break  # the library refused it: nothing more of this round can start
        for work in state.works.values():
            try:
                work.wait()
            except Error:
                pass  # the round is abandoned; its buffers are free again either way
        state.works.clear()


def _new_round(direction: str, pid: int, device: torch.device, num_chunks: int, num_tokens: int,
               cu_seqlens: Optional[torch.Tensor], zero: Sequence[int], where: str) -> Tuple[int, _Round]:
    """A round's buffers (head-sharded tensors in `zero` start at zero), the plan's documents set from cu_seqlens."""
    plan = plan_by_id(pid, where)
    _drop_stale(plan, direction)
    if cu_seqlens is not None:
        plan.set_documents(cu_seqlens.tolist())
    tokens = check_tokens(plan, num_tokens, where)
    n = plan.num_tensors
    heads = [(torch.zeros if t in zero else torch.empty)(plan.head_sharded_shape(t, tokens), dtype=_dtype(plan),
                                                         device=device) for t in range(n)]
    seq = [torch.empty(plan.seq_sharded_shape(t, tokens), dtype=_dtype(plan), device=device) for t in range(n)]
    state = _Round(plan, direction, num_chunks, tokens, heads, seq)
    with _lock:
        rid = next(_round_ids)
        _rounds[rid] = state
    return rid, state


def _dtype(plan: Any) -> torch.dtype:
    return TORCH_DTYPES[plan.dtype]


def _next_round(direction: str, pid: int, device: torch.device, handle: Optional[torch.Tensor], chunk: int,
                num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor], zero: Sequence[int],
                where: str) -> Tuple[int, _Round]:
    """The round a start belongs to: a new one for chunk 0 (no handle), else the handle's, checked."""
    if handle is None:
        if chunk != 0:
            raise invalid_argument("%s: chunk %d of %d started without the round's handle (only chunk 0 opens a "
                                   "round)" % (where, chunk, num_chunks))
        return _new_round(direction, pid, device, num_chunks, num_tokens, cu_seqlens, zero, where)
    rid, state = _round(handle, where)
    if state.direction != direction or state.plan is not plan_by_id(pid, where) or state.num_chunks != num_chunks:
        raise invalid_argument("%s: handle %d is a %s round of %d chunks of another plan or count (chunk %d of %d "
                               "of plan %d asked)" % (where, rid, state.direction, state.num_chunks, chunk,
                                                      num_chunks, pid))
    return rid, state


@contextlib.contextmanager
def _closing_on_error(rid: int, handle: Optional[torch.Tensor]) -> Iterator[None]:
    """A round that its first start opened is taken out of the table again if that start fails (nothing of it is
    in flight then)."""
    try:
        yield
    except BaseException:
        if handle is None:
            with _lock:
                _rounds.pop(rid, None)
        raise


def _wait(handle: torch.Tensor, chunk: int, direction: str, where: str) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Waits for `chunk` of the handle's round: the buffers the caller reads (views), and the handle again."""
    rid, state = _round(handle, where)
    work = state.works.pop(chunk, None) if state.direction == direction else None
    if work is None:
        raise invalid_argument("%s: chunk %d of round %d (a %s) is not in flight" % (where, chunk, rid,
                                                                                     state.direction))
    try:
        work.wait()
    finally:
        state.waited += 1
        if state.waited == state.num_chunks:
            with _lock:
                _rounds.pop(rid, None)
    outs = state.head_side if direction == SCATTER else state.seq_side
    return [x.view(x.shape) for x in outs], _handle(rid)


def _scatter_start(plan: int, inputs: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                   num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor]) -> torch.Tensor:
    where = "basp.torch.scatter_chunk_start"
    device = inputs[0].device if inputs else torch.device("cpu")
    rid, state = _next_round(SCATTER, plan, device, handle, chunk, num_chunks, num_tokens, cu_seqlens, (), where)
    ins = [x.contiguous() for x in inputs]
    with _closing_on_error(rid, handle):
        state.works[chunk] = state.plan.scatter_start(ins, state.head_side, chunk, num_chunks,
                                                      num_tokens=state.tokens)
        state.started = chunk + 1
    return _handle(rid)


def _gather_start(plan: int, pieces: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                  num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor], perm: List[int], axis: int,
                  kv: Optional[torch.Tensor]) -> torch.Tensor:
    where = "basp.torch.gather_chunk_start"
    device = pieces[0].device if pieces else torch.device("cpu")
    zero = (1, 2) if kv is not None else ()
    rid, state = _next_round(GATHER, plan, device, handle, chunk, num_chunks, num_tokens, cu_seqlens, zero, where)
    with _closing_on_error(rid, handle):
        if len(pieces) != len(state.head_side):
            raise invalid_argument("%s: %d pieces for a plan of %d tensors" % (where, len(pieces),
                                                                              len(state.head_side)))
        local = state.head_side[0].shape[-2]
        a, b = _library.split(local, num_chunks, chunk, where)
        for t, (piece, buf) in enumerate(zip(pieces, state.head_side)):
            view = buf.permute(*perm) if perm else buf
            if kv is None or t == 0:
                view.narrow(axis, a, b - a).copy_(piece)
            else:  # index_select's backward: the K/V gradients summed in ascending query head order
                view.index_add_(axis, kv[a:b], piece)
        state.works[chunk] = state.plan.gather_start(state.head_side, state.seq_side, chunk, num_chunks,
                                                     num_tokens=state.tokens)
        state.started = chunk + 1
    return _handle(rid)


if HAVE_CUSTOM_OPS:
    @torch.library.custom_op("basp::scatter_chunk_start", mutates_args=())
    def scatter_chunk_start(plan: int, inputs: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                            num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor]) -> torch.Tensor:
        return _scatter_start(plan, inputs, handle, chunk, num_chunks, num_tokens, cu_seqlens)

    @torch.library.custom_op("basp::scatter_chunk_wait", mutates_args=())
    def scatter_chunk_wait(plan: int, handle: torch.Tensor, inputs: List[torch.Tensor], chunk: int,
                           num_tokens: int) -> Tuple[List[torch.Tensor], torch.Tensor]:
        return _wait(handle, chunk, SCATTER, "basp.torch.scatter_chunk_wait")

    @torch.library.custom_op("basp::gather_chunk_start", mutates_args=())
    def gather_chunk_start(plan: int, pieces: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                           num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor], perm: List[int],
                           axis: int, kv: Optional[torch.Tensor], after: Optional[torch.Tensor]) -> torch.Tensor:
        return _gather_start(plan, pieces, handle, chunk, num_chunks, num_tokens, cu_seqlens, perm, axis, kv)

    @torch.library.custom_op("basp::gather_chunk_wait", mutates_args=())
    def gather_chunk_wait(plan: int, handle: torch.Tensor, device: torch.device, chunk: int, num_tokens: int,
                          keep: List[torch.Tensor]) -> Tuple[List[torch.Tensor], torch.Tensor]:
        return _wait(handle, chunk, GATHER, "basp.torch.gather_chunk_wait")

    @scatter_chunk_start.register_fake
    def _scatter_start_fake(plan: int, inputs: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                            num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor]) -> torch.Tensor:
        return torch.empty((), dtype=torch.int64)

    @scatter_chunk_wait.register_fake
    def _scatter_wait_fake(plan: int, handle: torch.Tensor, inputs: List[torch.Tensor], chunk: int,
                           num_tokens: int) -> Tuple[List[torch.Tensor], torch.Tensor]:
        device = inputs[0].device if inputs else torch.device("cpu")
        outs = fake_outputs(SCATTER, plan, len(inputs), device, num_tokens, "basp.torch.scatter_chunk_wait")
        return outs, torch.empty((), dtype=torch.int64)

    @gather_chunk_start.register_fake
    def _gather_start_fake(plan: int, pieces: List[torch.Tensor], handle: Optional[torch.Tensor], chunk: int,
                           num_chunks: int, num_tokens: int, cu_seqlens: Optional[torch.Tensor], perm: List[int],
                           axis: int, kv: Optional[torch.Tensor], after: Optional[torch.Tensor]) -> torch.Tensor:
        return torch.empty((), dtype=torch.int64)

    @gather_chunk_wait.register_fake
    def _gather_wait_fake(plan: int, handle: torch.Tensor, device: torch.device, chunk: int, num_tokens: int,
                          keep: List[torch.Tensor]) -> Tuple[List[torch.Tensor], torch.Tensor]:
        count = plan_by_id(plan, "basp.torch.gather_chunk_wait").num_tensors
        outs = fake_outputs(GATHER, plan, count, device, num_tokens, "basp.torch.gather_chunk_wait")
        return outs, torch.empty((), dtype=torch.int64)

