"""The base of basp.Comm and basp.Plan: one C handle, closed once, and closed in a safe order at exit.

mpi4py finalises MPI from Py_AtExit, after Python's atexit handlers: closing every live handle here frees their MPI
objects while MPI is still up, and before module teardown makes ctypes unusable. Plans go first, since they hold
MPI datatypes and group resources of their comm (the library accepts either order; MPI's finalisation does not).

This module imports neither comm.py nor plan.py: plan.py checks its comm against CommHandle, so that comm.py can
import plan.py (for Comm.plan) without a cycle.
"""
from __future__ import annotations

import atexit
import weakref
from typing import Any, Optional, TypeVar, Union

from . import _library
from ._abi import Backend

_live: "weakref.WeakSet[Handle]" = weakref.WeakSet()
_H = TypeVar("_H", bound="Handle")


class Handle:
    """Owns one libbasp handle (an int; None once closed). Subclasses name their C type and destroy function."""

    _destroy_name = ""  # the C function that destroys the handle: "basp_comm_destroy"
    _close_order = 0  # at exit, lower values close first
    # A class attribute, so that close() and __del__ also work on an object whose __init__ failed early.
    _handle: Optional[int] = None

    def _adopt_handle(self, handle: Optional[int]) -> None:
        """Takes ownership of a handle the library just created; closed at exit unless closed before."""
        self._handle = handle
        _live.add(self)

    @property
    def handle(self) -> Optional[int]:
        """The C handle (basp_comm_t, basp_plan_t) as an int; None once closed."""
        return self._handle

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Destroys the handle (not collective). Idempotent: later calls do nothing."""
        # Taken before the call, so that a second close (another thread, __del__, exit) never destroys it twice.
        handle, self._handle = self._handle, None
        if handle is None:
            return
        _live.discard(self)
        _library.check(getattr(_library.lib(), self._destroy_name)(handle))

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- a destructor must not raise
            pass

    def _describe(self) -> str:
        """What repr shows of an object (open or closed); subclasses override."""
        return ""

    def __repr__(self) -> str:
        try:
            text = self._describe()
        except AttributeError:  # an object whose __init__ failed before its fields were set
            text = "not created"
        if self.closed:
            text = text + ", closed" if text else "closed"
        return "basp.%s(%s)" % (type(self).__name__, text)


class CommHandle(Handle):
    """What a basp.Plan needs of its comm: the handle and the backend. basp.Comm is the implementation."""

    _destroy_name = "basp_comm_destroy"
    _close_order = 1  # after the plans
    backend: Union[Backend, int]  # set by the subclass when the comm is created


@atexit.register
def _close_all() -> None:
    for obj in sorted(list(_live), key=lambda o: o._close_order):
        try:
            obj.close()
        except Exception:  # noqa: BLE001 -- nothing useful can be done with an error at exit
            pass
