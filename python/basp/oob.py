"""basp.OobAllgather: the non-blocking all-gather that basp.Comm.from_oob lends libbasp (basp_comm_create_oob), and
the ctypes glue that turns such an object into a basp_oob_v1.

    class MyAllgather(basp.OobAllgather):
        def start(self, send, recv, nbytes):   # begin: every rank's `send` (nbytes) into `recv`, in rank order
            return some_handle
        def test(self, handle):                # True once `recv` holds every rank's bytes
            ...
        def free(self, handle):                # release the handle (the operation may be unfinished)
            ...
    comm = basp.Comm.from_oob(MyAllgather(rank, size), micro_batch=B)

basp.torch.ProcessGroupAllgather implements it over torch.distributed.
"""
from __future__ import annotations

import abc
import ctypes
import itertools
from typing import Any, Dict, Optional, Tuple

from . import _abi
from .errors import Error, invalid_argument

# What a callback returns to the library when the Python side raised: any value but OOB_SUCCESS and
# OOB_IN_PROGRESS is an error, which the library reports as BASP_ERROR_OOB naming the callback and this value.
CALLBACK_RAISED = -1

_PyBUF_READ = 0x100
_PyBUF_WRITE = 0x200
_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.restype = ctypes.py_object
_memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]


class OobAllgather(abc.ABC):
    """An all-gather among `size` processes, of which this one is `rank` (0 .. size-1), that libbasp drives while
    it creates a comm: start, then test until it says done, then free. Every method runs on the thread that called
    basp.Comm.from_oob, during that call only.

    start(send, recv, nbytes) -> handle   starts gathering `send` (a read-only memoryview of nbytes bytes) of every
                                          rank, in rank order, into `recv` (a writable memoryview of size * nbytes
                                          bytes); returns any object that test and free get back. It may raise
                                          only when it started nothing: the library then frees the buffers.
    test(handle) -> bool                  True once `recv` holds every rank's bytes, False while in progress.
    free(handle)                          releases the handle: after test said True, after test raised, or when
                                          the library gave up on the operation (the comm's timeout). In the last
                                          two cases the operation may be unfinished: keep what it uses (requests,
                                          tensors) alive rather than cancel it; `send` and `recv` stay valid.

    `send` and `recv` are the library's memory, valid until free returns; do not keep them after. An exception in
    any method fails the creation with a basp.Error (BASP_ERROR_OOB) that names it. Objects that are not
    subclasses work too, if they have these methods and int attributes `rank` and `size`.
    """

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size

    @abc.abstractmethod
    def start(self, send: memoryview, recv: memoryview, nbytes: int) -> Any:
        """Starts the all-gather; returns its handle."""

    @abc.abstractmethod
    def test(self, handle: Any) -> bool:
        """Whether the all-gather of `handle` is complete."""

    @abc.abstractmethod
    def free(self, handle: Any) -> None:
        """Releases `handle`."""


def _int_attribute(oob: Any, name: str, where: str) -> int:
    value = getattr(oob, name, None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument("%s: oob.%s (%r, a %s) must be an int" % (where, name, value, type(value).__name__))
    return value


def check_oob(oob: Any, where: str) -> Tuple[int, int]:
    """(rank, size) of an OobAllgather-like object, or basp.Error naming what it lacks."""
    for name in ("start", "test", "free"):
        if not callable(getattr(oob, name, None)):
            raise invalid_argument("%s: oob (a %s) has no method %s (see basp.OobAllgather)"
                                   % (where, type(oob).__name__, name))
    rank, size = _int_attribute(oob, "rank", where), _int_attribute(oob, "size", where)
    if size < 1:
        raise invalid_argument("%s: oob.size (%d) must be at least 1" % (where, size))
    if not 0 <= rank < size:
        raise invalid_argument("%s: oob.rank (%d) is outside 0..%d (oob.size %d)" % (where, rank, size - 1, size))
    return rank, size


def _view(address: Optional[int], nbytes: int, writable: bool) -> memoryview:
    """A memoryview of nbytes of the library's memory at `address` (no copy)."""
    if nbytes == 0 or not address:
        return memoryview(bytearray()) if writable else memoryview(b"")
    return _memory_view(address, nbytes, _PyBUF_WRITE if writable else _PyBUF_READ)


class Channel:
    """One basp_oob_v1 over an OobAllgather for one basp_comm_create_oob call. Keep it referenced until the call
    returns: it owns the CFUNCTYPE objects the struct points to, and a collected one would be called as freed
    memory. Each callback catches everything its Python side raises, since an exception escaping a ctypes
    callback returns an undefined value to C (which could read as success); the first one is kept for the error
    that raise_error raises."""

    def __init__(self, oob: Any, where: str) -> None:
        self.oob = oob
        self.where = where
        rank, self.size = check_oob(oob, where)
        self.failure: Optional[Tuple[str, BaseException]] = None
        # Request tokens the library holds (never 0, which would read as NULL) -> (handle, send view, recv view).
        self._requests: Dict[int, Tuple[Any, memoryview, memoryview]] = {}
        self._tokens = itertools.count(1)
        self._callbacks = (_abi.OobAllgatherStart(self._start), _abi.OobAllgatherTest(self._test),
                           _abi.OobAllgatherFree(self._free))
        self.struct = _abi.OobStruct(rank=rank, num_ranks=self.size, user_data=None,
                                     allgather_start=self._callbacks[0], allgather_test=self._callbacks[1],
                                     allgather_free=self._callbacks[2])

    def _raised(self, method: str, exc: BaseException) -> int:
        if self.failure is None:  # the first one is the cause; later ones (free after it) follow from it
            self.failure = (method, exc)
        return CALLBACK_RAISED

    def _start(self, _user: Any, send: Optional[int], recv: Optional[int], nbytes: int, request: Any) -> int:
        try:
            send_view, recv_view = _view(send, nbytes, False), _view(recv, nbytes * self.size, True)
            handle = self.oob.start(send_view, recv_view, nbytes)
            token = next(self._tokens)
            self._requests[token] = (handle, send_view, recv_view)
            request[0] = token
            return _abi.OOB_SUCCESS
        except BaseException as e:  # noqa: BLE001 -- see the class comment
            return self._raised("start", e)

    def _test(self, _user: Any, request: Optional[int]) -> int:
        try:
            done = self.oob.test(self._requests[request][0])
            if not isinstance(done, bool):
                raise TypeError("oob.test returned %r (a %s), not a bool" % (done, type(done).__name__))
            return _abi.OOB_SUCCESS if done else _abi.OOB_IN_PROGRESS
        except BaseException as e:  # noqa: BLE001
            return self._raised("test", e)

    def _free(self, _user: Any, request: Optional[int]) -> int:
        try:
            handle, send_view, recv_view = self._requests.pop(request)
            self.oob.free(handle)
        except BaseException as e:  # noqa: BLE001
            return self._raised("free", e)
        for view in (send_view, recv_view):
            try:  # so that a view kept by mistake raises instead of reading memory the library frees now
                view.release()
            except BufferError:  # still exported (an operation the library gave up on): the memory stays valid
                pass
        return _abi.OOB_SUCCESS

    def raise_error(self, status: int, message: str) -> None:
        """Raises what a failed basp_comm_create_oob (its status and basp_last_error() message) means. An exception
        of a callback that is not an Exception (KeyboardInterrupt, SystemExit) is raised again as it was."""
        if self.failure is None:
            raise Error(status, message)
        method, exc = self.failure
        if not isinstance(exc, Exception):
            raise exc
        raise Error(status, "%s (%s: oob.%s raised %s: %s)" % (message, self.where, method, type(exc).__name__,
                                                                 exc)) from exc
