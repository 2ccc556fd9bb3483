"""chunks="auto" for the pipelined layers (BaspAttention, DistributedAttention): the head chunk count C chosen per
shape from this rank's measured attention time.

The first forward of a shape (the plans' key: every rank of the group runs it, so it is a collective point) runs
unpipelined (chunks=1) while timing the layer's attention calls on this rank (time.perf_counter on the CPU;
torch.cuda.Event around the calls on CUDA, waited for), then asks basp.Plan.choose_head_chunks(seconds,
gather=<the output plan>, collective=True): the library takes the maximum of the ranks' seconds, so that every rank
gets the same C. C is kept for that shape and used from the next forward on. Under torch.compile nothing is
measured: a shape must have had its eager forward first (or the layer an int chunks)."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional, Union

import torch

from ._head_chunks import HeadChunkChoice
from ._torch_pipeline import compiling
from .errors import invalid_argument

AUTO = "auto"
Chunks = Union[int, str]  # an int >= 1, or AUTO


class ChunkChooser:
    """The chunks="auto" state of one layer: C per shape key, and the last decision (last_chunk_choice, the
    HeadChunkChoice the library returned; last_attention_seconds, this rank's measured seconds it was asked with)."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.chosen: Dict[Any, int] = {}
        self.last_chunk_choice: Optional[HeadChunkChoice] = None
        self.last_attention_seconds: Optional[float] = None
        self._seconds: Optional[float] = None  # the attention seconds of the forward being measured; None: none is

    def chunks_for(self, chunks: Chunks, key: Any) -> Optional[int]:
        """The C of this forward: `chunks` when an int; for "auto", the C chosen for this shape, or None when this
        forward is the one that measures (it then runs chunks=1, its attention through call(), and ends in
        choose()). Under torch.compile a shape without a choice is refused."""
        self._seconds = None
        if chunks != AUTO:
            return int(chunks)
        c = self.chosen.get(key)
        if c is not None:
            return c
        if compiling():
            # (the key is not formatted: its ints may be symbolic here, which torch.compile cannot print)
            raise invalid_argument("%s: chunks='auto' has no head chunk count for this shape yet, and torch.compile "
                                   "traces the layer: the count is measured on an eager forward of that shape (run "
                                   "one on every rank before compiling), or make the layer with an int chunks"
                                   % self.where)
        self._seconds = 0.0
        return None

    def call(self, fn: Callable[..., torch.Tensor], device: torch.device, *args: Any, **kwargs: Any) -> torch.Tensor:
        """fn(*args, **kwargs), timed when this forward measures (the time added to this forward's seconds)."""
        if self._seconds is None:
            return fn(*args, **kwargs)
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            out = fn(*args, **kwargs)
            end.record()
            end.synchronize()
            self._seconds += begin.elapsed_time(end) / 1e3
            return out
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self._seconds += time.perf_counter() - t0
        return out

    def choose(self, key: Any, plans: Any, num_tokens: Optional[int]) -> HeadChunkChoice:
        """The end of the measuring forward (collective over the group): C for this shape from the library, kept."""
        seconds, self._seconds = self._seconds or 0.0, None
        choice = plans.qkv.choose_head_chunks(seconds, gather=plans.out, num_tokens=num_tokens, collective=True)
        self.chosen[key] = choice.num_chunks
        self.last_chunk_choice = choice
        self.last_attention_seconds = seconds
        return choice


class ChunkChoiceView:
    """The chunks="auto" decision of a layer that keeps its ChunkChooser in `self._chooser` (BaspAttention,
    DistributedAttention)."""

    _chooser: ChunkChooser

    @property
    def last_chunk_choice(self) -> Optional[HeadChunkChoice]:
        """chunks="auto": the library's answer for the last shape measured (None before any)."""
        return self._chooser.last_chunk_choice

    @property
    def last_attention_seconds(self) -> Optional[float]:
        """chunks="auto": this rank's measured attention seconds that the last choice was asked with."""
        return self._chooser.last_attention_seconds
