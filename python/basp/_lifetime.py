"""Closing handles before the interpreter tears down.

mpi4py finalises MPI from Py_AtExit, after Python's atexit handlers: closing every live plan and comm here
frees their MPI objects while MPI is still up, and before module teardown makes ctypes unusable.
"""
import atexit
import weakref

_live = weakref.WeakSet()


def track(obj):
    _live.add(obj)


@atexit.register
def _close_all():
    # Plans first: they hold MPI datatypes and group resources of their comm.
    objs = sorted(list(_live), key=lambda o: 0 if o.__class__.__name__ == "Plan" else 1)
    for obj in objs:
        try:
            obj.close()
        except Exception:  # noqa: BLE001 -- nothing useful can be done with an error at exit
            pass
