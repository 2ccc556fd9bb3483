"""Split-phase exchanges by head chunks (basp_scatter_start / _test / _wait, basp_gather_*): basp.Work, the handle
of one started chunk, and the start that makes it (basp.Plan.scatter_start and gather_start call it).

A chunk's buffers belong to the library until its wait returns: the Work holds the input and output objects (and
the plan) so that none of them is freed while the chunk may still read or write them. A Work dropped without being
waited for waits in its finaliser, for the same reason."""
from __future__ import annotations

import ctypes
from typing import Any, List, Optional

from . import _library
from .errors import Error, invalid_argument

SCATTER = "scatter"
GATHER = "gather"
SEQ_SIDE = "sequence-sharded"  # scatter input, gather output
HEAD_SIDE = "head-sharded"  # scatter output, gather input
Plan = Any  # a basp.Plan (plan.py imports this module, not the other way round)
Array = Any


def _int32(value: Any, name: str, where: str) -> int:
    """An int argument for an int32_t parameter (the library checks its range and names it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument("%s: %s (%r, a %s) is not an int" % (where, name, value, type(value).__name__))
    if not -2 ** 31 <= value < 2 ** 31:
        raise invalid_argument("%s: %s (%d) is beyond int32" % (where, name, value))
    return value


class Work:
    """One started head chunk of a scatter or gather (like torch.distributed's Work of an async_op): wait() blocks
    until the chunk is complete and raises basp.Error with the library's message if it failed; is_completed()
    tests without blocking. The chunk's outputs are `outputs` (the list passed to the start), complete after wait().
    NCCL backend: wait() does not block; it makes the start's CUDA stream wait for the chunk (as a CUDA Work's wait
    does), so the outputs are complete for work enqueued on that stream after it.
    Each Work is waited for once; a second wait() raises basp.Error (INVALID_ARGUMENT)."""

    def __init__(self, plan: Plan, op: str, chunk: int, num_chunks: int, inputs: List[Any],
                 outputs: List[Array]) -> None:
        self.plan = plan
        self.op = op
        self.chunk = chunk
        self.num_chunks = num_chunks
        self.inputs: Optional[List[Any]] = inputs  # kept alive until waited for
        self.outputs = outputs
        self._waited = False

    @property
    def waited(self) -> bool:
        return self._waited

    def is_completed(self) -> bool:
        """Whether the chunk is complete (basp_*_test; its error, if any, is raised by wait()). True once waited."""
        if self._waited:
            return True
        done = ctypes.c_int32(0)
        fn = _library.require("basp_%s_test" % self.op, "basp.Work.is_completed")
        _library.check(fn(self._plan_handle("is_completed"), self.chunk, ctypes.byref(done)))
        return bool(done.value)

    def wait(self) -> List[Array]:
        """Blocks until the chunk is complete (basp_*_wait) and returns the outputs; raises basp.Error with the
        library's message when the chunk failed. The buffers are the caller's again once it returns (or raises)."""
        if self._waited:
            raise invalid_argument("basp.Work.wait: %s chunk %d of %d was already waited for" % (
                self.op, self.chunk, self.num_chunks))
        fn = _library.require("basp_%s_wait" % self.op, "basp.Work.wait")
        handle = self._plan_handle("wait")
        self._waited = True  # the library releases the chunk whatever its status
        self.inputs = None
        _library.check(fn(handle, self.chunk))
        return self.outputs

    def _plan_handle(self, what: str) -> int:
        handle = self.plan.handle
        if handle is None:
            raise invalid_argument("basp.Work.%s: the plan of %s chunk %d was closed (closing it waited for the "
                                   "chunk)" % (what, self.op, self.chunk))
        return handle

    def __del__(self) -> None:
        if getattr(self, "_waited", True) or getattr(self, "plan", None) is None or self.plan.handle is None:
            return
        try:
            self.wait()
        except Error:
            pass  # nobody is left to raise it to; the buffers are free again either way

    def __repr__(self) -> str:
        return "basp.Work(%s chunk %d of %d, %s)" % (self.op, self.chunk, self.num_chunks,
                                                     "waited" if self._waited else "started")


def start(plan: Plan, op: str, inputs: Any, outputs: Any, chunk: Any, num_chunks: Any, num_tokens: Optional[int],
          stream: Any) -> Work:
    """basp_scatter_start / basp_gather_start of `plan` (basp.Plan's checks of the arrays first)."""
    where = "basp.Plan.%s_start" % op
    fn = _library.require("basp_%s_start" % op, where)
    chunk = _int32(chunk, "chunk", where)
    num_chunks = _int32(num_chunks, "num_chunks", where)
    if outputs is None:
        raise invalid_argument("%s: outputs is None: a chunk writes only its heads' rows, so pass the outputs every "
                               "chunk of the round writes into" % where)
    if isinstance(num_tokens, int) and not isinstance(num_tokens, bool) and num_tokens == -1:
        num_tokens = None  # the C default: the plan's
    tokens = plan._tokens_argument(where, num_tokens)
    sides = (SEQ_SIDE, HEAD_SIDE) if op == SCATTER else (HEAD_SIDE, SEQ_SIDE)
    listed = plan._as_list(where, "inputs", inputs)
    outs, in_arr, out_arr, stream_ptr = plan._arguments(where, tokens, sides[0], sides[1], listed, outputs, stream)
    _library.check(fn(plan.handle, chunk, num_chunks, -1 if tokens is None else tokens, in_arr, out_arr, stream_ptr))
    return Work(plan, op, chunk, num_chunks, listed, outs)
