"""The process's NCCL library through ctypes: what basp.torch needs to make an NCCL communicator for
Comm.from_nccl without MPI (a unique id, init, destroy), and what tests use.

"libnccl.so.2" resolves to the copy already loaded in the process under that name (PyTorch's, once `import torch`
loaded one; libbasp then uses the same), else to the one libbasp's run path names: libbasp is loaded first."""
import ctypes
import threading

from . import _library
from ._abi import Status
from .errors import Error

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


_lock = threading.Lock()
_lib = None


def library():
    """The ctypes.CDLL of libnccl.so.2, with the prototypes used here."""
    global _lib
    with _lock:
        if _lib is None:
            _library.load()
            try:
                lib = ctypes.CDLL("libnccl.so.2")
            except OSError as e:
                raise Error(Status.ERROR_UNSUPPORTED, "libnccl.so.2 could not be loaded: %s" % e) from None
            lib.ncclGetErrorString.restype = ctypes.c_char_p
            lib.ncclGetErrorString.argtypes = [ctypes.c_int]
            lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
            lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
            lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
            lib.ncclCommInitAll.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int)]
            lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
            lib.ncclCommAbort.argtypes = [ctypes.c_void_p]
            _lib = lib
        return _lib


def _check(rc, what):
    if rc != 0:
        raise Error(Status.ERROR_NCCL, "%s failed: %s" % (what, library().ncclGetErrorString(rc).decode()))


def version():
    """NCCL's version code (e.g. 22809 for 2.28.9)."""
    v = ctypes.c_int()
    _check(library().ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
    return v.value


def unique_id():
    """A new ncclUniqueId, as bytes (to be sent to the other ranks)."""
    uid = UniqueId()
    _check(library().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)


def init_rank(nranks, uid, rank):
    """ncclCommInitRank on the current CUDA device; returns the ncclComm_t as an int. Collective over nranks."""
    if not isinstance(uid, (bytes, bytearray)) or len(uid) != UNIQUE_ID_BYTES:
        raise Error(Status.ERROR_INVALID_ARGUMENT, "the NCCL unique id must be %d bytes" % UNIQUE_ID_BYTES)
    arg = UniqueId()
    ctypes.memmove(ctypes.addressof(arg), bytes(uid), UNIQUE_ID_BYTES)
    comm = ctypes.c_void_p()
    _check(library().ncclCommInitRank(ctypes.byref(comm), int(nranks), arg, int(rank)),
           "ncclCommInitRank(%d ranks, rank %d)" % (nranks, rank))
    return comm.value


def init_all(devices):
    """ncclCommInitAll: one communicator per device of this process, as ints."""
    n = len(devices)
    comms = (ctypes.c_void_p * n)()
    devs = (ctypes.c_int * n)(*devices)
    _check(library().ncclCommInitAll(comms, n, devs), "ncclCommInitAll(devices %s)" % list(devices))
    return [c for c in comms]


def destroy(comm):
    _check(library().ncclCommDestroy(ctypes.c_void_p(comm)), "ncclCommDestroy")


def abort(comm):
    """ncclCommAbort: for a communicator that may still have work enqueued (ncclCommDestroy would wait for it)."""
    _check(library().ncclCommAbort(ctypes.c_void_p(comm)), "ncclCommAbort")
