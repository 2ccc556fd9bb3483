"""basp.Error: every failure of the binding, whether the library or the binding's own checks found it."""
from __future__ import annotations

from typing import Union

from ._abi import Status


class Error(Exception):
    """A libbasp failure.

    status   the basp_status_t (a basp.Status when the value is known, else the raw int)
    message  the library's basp_last_error() text ("basp_plan_create: num_heads[1] (3) does not divide its
             query head count (4)"), or, for checks the binding makes before calling the library (shapes, dtypes,
             contiguity, devices), a message in the same style naming the Python argument and its value.
    """

    def __init__(self, status: Union[Status, int], message: str) -> None:
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status: Union[Status, int] = status
        self.message = message
        super().__init__(status, message)

    @property
    def status_name(self) -> str:
        """The C name of the status, as basp_status_string() spells it."""
        if isinstance(self.status, Status):
            return "BASP_" + self.status.name
        return "unknown status"

    def __str__(self) -> str:
        return "%s: %s" % (self.status_name, self.message)


def invalid_argument(message: str) -> Error:
    """The binding's own argument check failed: the library was not called."""
    return Error(Status.ERROR_INVALID_ARGUMENT, message)


def int64_arg(value: object, name: str, where: str) -> int:
    """int(value) for an int64 field of a C struct, named when beyond int64 (ctypes would keep its low 64 bits and
    the library would read another value); the library checks the rest."""
    v = int(value)  # type: ignore[call-overload]
    if not -2 ** 63 <= v < 2 ** 63:
        raise invalid_argument("%s: %s (%d) is beyond int64" % (where, name, v))
    return v
