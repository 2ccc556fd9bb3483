"""A basp.Comm over a torch.distributed process group: the all-gather libbasp's OOB creation needs, run by the
process group (basp.torch re-exports it)."""
from __future__ import annotations

import os
import re
from typing import Any, List, Optional, Tuple

import torch

from . import _abi, _library
from ._abi import Backend, Placement
from .comm import Comm, PlacementLike, _config
from .errors import Error, invalid_argument
from .oob import OobAllgather

ROUTES = ("auto", "nccl", "oob")
# ProcessGroupNCCL._comm_ptr(), the ncclComm_t of the current CUDA device as an int (0 until it exists), is
# PyTorch's since 2.8 (a private method: looked up, never assumed).
COMM_PTR_SINCE = (2, 8)


def _group_device(group: Any) -> torch.device:
    """Where the group's collectives take tensors: the current CUDA device for an NCCL group, else the CPU (gloo,
    mpi, and mixed backends such as "cpu:gloo,cuda:nccl", whose gloo part takes CPU tensors)."""
    if _backend_name(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _backend_name(group: Any) -> str:
    """dist.get_backend(group), lower case: "nccl", "gloo", "mpi", or a mixed one ("cpu:gloo,cuda:nccl")."""
    import torch.distributed as dist

    return str(dist.get_backend(group)).lower()


def _has_nccl(backend: str) -> bool:
    """Whether a group of this backend runs its CUDA collectives on a ProcessGroupNCCL: "nccl", or a mixed backend
    with "cuda:nccl" among its parts."""
    return backend == "nccl" or "cuda:nccl" in [part.strip() for part in backend.split(",")]


def _process_group_rank(group: Any, where: str) -> Tuple[int, int]:
    """(rank in the group, group size), or basp.Error when torch.distributed is not up or this is no member."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise invalid_argument("%s: torch.distributed is not initialised (call torch.distributed.init_process_group "
                               "first)" % where)
    rank = dist.get_rank(group)
    if rank < 0:
        raise invalid_argument("%s: this process is not a member of the group (%r)" % (where, group))
    return rank, dist.get_world_size(group)


class _Gather:
    """One all-gather in flight: the torch Work, its tensors, and the library's recv buffer to fill once done."""

    def __init__(self, work: Any, outputs: List[torch.Tensor], recv: memoryview) -> None:
        self.work = work
        self.outputs = outputs
        self.recv = recv
        self.done = False


class ProcessGroupAllgather(OobAllgather):
    """basp.OobAllgather over a torch.distributed process group (default: the world): all_gather of uint8 tensors
    with async_op=True, on the group's device (CUDA for an NCCL group, CPU otherwise), tested with
    Work.is_completed(). An all-gather the library gives up on (timeout) is kept with its tensors until the process
    ends, since the process group may still run it."""

    # Operations freed unfinished: the process group may still write their tensors.
    _abandoned: List[_Gather] = []

    def __init__(self, group: Any = None) -> None:
        rank, size = _process_group_rank(group, "basp.torch.ProcessGroupAllgather")
        super().__init__(rank, size)
        self.group = group
        self.device = _group_device(group)

    def start(self, send: memoryview, recv: memoryview, nbytes: int) -> _Gather:
        import torch.distributed as dist

        # A copy: torch.frombuffer of a read-only buffer warns, and a CUDA group needs device memory anyway. An empty
        # all-gather still runs (it may be the ranks' meeting point), as one byte: gloo divides by the size.
        mine = torch.frombuffer(bytearray(send), dtype=torch.uint8) if nbytes else torch.zeros(1, dtype=torch.uint8)
        mine = mine.to(self.device)
        outputs = [torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device) for _ in range(self.size)]
        return _Gather(dist.all_gather(outputs, mine, group=self.group, async_op=True), outputs, recv)

    def test(self, handle: _Gather) -> bool:
        if not handle.work.is_completed():
            return False
        handle.work.wait()  # raises what made a completed operation fail
        if len(handle.recv):
            torch.frombuffer(handle.recv, dtype=torch.uint8).copy_(torch.cat(handle.outputs).cpu())
        handle.done = True
        return True

    def free(self, handle: _Gather) -> None:
        handle.recv = memoryview(b"")  # the library's memory: not referenced past free
        if not handle.done:
            ProcessGroupAllgather._abandoned.append(handle)


def _torch_version(version: Optional[str] = None) -> Tuple[int, int]:
    """(major, minor) of torch.__version__ ("2.8.0+cu128", "2.9.0a0+git1234" -> (2, 8), (2, 9)); (0, 0) when it
    cannot be read."""
    found = re.match(r"\s*(\d+)\.(\d+)", torch.__version__ if version is None else version)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _choose_route(route: Any, backend: str, torch_version: Tuple[int, int], has_comm_ptr: bool,
                  comm_ptr: Optional[int], torch_nccl: Optional[str], basp_nccl: Optional[str],
                  where: str = "basp.torch.comm_from_process_group") -> Tuple[str, str]:
    """How comm_from_process_group makes the comm: ("nccl" | "oob", why), from what it found, with no side effect.

    route          what the caller asked for: "auto", "nccl" or "oob"
    backend        dist.get_backend(group), lower case ("nccl", "gloo", "cpu:gloo,cuda:nccl")
    torch_version  (major, minor) of PyTorch
    has_comm_ptr   whether the group's CUDA backend object has _comm_ptr
    comm_ptr       what _comm_ptr() returned for the current CUDA device (None: not asked, or it raised)
    torch_nccl     the file of the NCCL that PyTorch runs (a libnccl, or the library it is linked into), or None
    basp_nccl      the libnccl file libbasp runs (basp.nccl_library()), or None

    The rules, in order: "oob" is taken as asked. Otherwise the group's own communicator is used when the group
    runs NCCL, PyTorch >= 2.8 has _comm_ptr, the pointer is not 0 and both libraries are known; "auto" falls back
    to "oob" at the first rule that fails, saying which, where "nccl" raises basp.Error instead (INVALID_ARGUMENT
    for the group's backend or a pointer of 0, UNSUPPORTED for what this PyTorch or libbasp lacks). Where the
    pointer would be used ("auto" or "nccl" with every rule above met), two libnccl files that differ (compared by
    real path) raise INVALID_ARGUMENT naming both: the pointer means nothing to libbasp's NCCL."""
    if not isinstance(route, str) or route not in ROUTES:
        raise invalid_argument("%s: route (%r) is not one of %s" % (where, route, ", ".join(repr(r) for r in ROUTES)))
    if route == "oob":
        return "oob", "route='oob' was asked for"

    def fallback(status: int, why: str) -> Tuple[str, str]:
        if route == "auto":
            return "oob", why
        raise Error(status, "%s: route='nccl': %s" % (where, why))

    inv, unsupported = _abi.Status.ERROR_INVALID_ARGUMENT, _abi.Status.ERROR_UNSUPPORTED
    if not _has_nccl(backend):
        return fallback(inv, "the group's backend is %r, not nccl: it has no NCCL communicator to split" % backend)
    version = "%d.%d" % tuple(torch_version)
    if tuple(torch_version) < COMM_PTR_SINCE:
        return fallback(unsupported, "PyTorch %s cannot lend the group's NCCL communicator (ProcessGroupNCCL."
                                     "_comm_ptr is PyTorch's since %d.%d)" % ((version,) + COMM_PTR_SINCE))
    if not has_comm_ptr:
        return fallback(unsupported, "the group's NCCL backend in PyTorch %s has no _comm_ptr" % version)
    if not comm_ptr:
        return fallback(inv, "the group has no NCCL communicator on this CUDA device yet (_comm_ptr() is %s: "
                             "PyTorch makes it at the group's first collective, or at "
                             "init_process_group(device_id=...))" % ("0" if comm_ptr is not None else "not readable"))
    if not basp_nccl:
        return fallback(unsupported, "the loaded libbasp (%s) cannot say which libnccl it runs (built without "
                                     "NCCL, or older than basp_get_nccl_library)" % _library_path())
    if not torch_nccl:
        return fallback(unsupported, "which NCCL PyTorch runs cannot be told (no libtorch_cuda or libnccl file "
                                     "found among the mapped files)")
    if not _same_file(torch_nccl, basp_nccl):
        raise invalid_argument(
            "%s: PyTorch's NCCL communicator comes from %s but libbasp runs %s: an ncclComm_t made by one libnccl "
            "means nothing to another. Load one NCCL (with "
            "PyTorch's nvidia-nccl wheel, build libbasp with NCCL_ROOT=site-packages/nvidia/nccl); "
            "route='oob' makes the comm without the pointer" % (where, torch_nccl, basp_nccl))
    return "nccl", "the group's own NCCL communicator (PyTorch %s, %s)" % (version, basp_nccl)


def _library_path() -> str:
    try:
        return _library.path()
    except OSError:
        return "not loaded"


def _basp_nccl_file() -> Optional[str]:
    """The libnccl file libbasp runs, or None (a libbasp without NCCL, or without basp_get_nccl_library)."""
    try:
        if not _library.has("basp_get_nccl_library"):
            return None
        return _library.nccl_library()[1] or None
    except Error:
        return None


def _torch_nccl_file() -> Optional[str]:
    """The file holding the NCCL that PyTorch's ProcessGroupNCCL runs, from what is mapped into the process: the
    libnccl libtorch_cuda needs (the dynamic linker maps a soname once per process, so that is the mapped file of
    that name), or libtorch_cuda itself when it needs none (NCCL linked into it, a source build's default). None
    when this cannot be told."""
    nccl_files = _library.mapped_nccl_files()
    for lib in _library.mapped_files("libtorch_cuda"):
        needed = _library.elf_needed(lib)
        if needed is None:
            continue
        sonames = [n for n in needed if n.startswith("libnccl.so")]
        if not sonames:
            return lib
        named = [f for f in nccl_files if os.path.basename(f).startswith(sonames[0])]
        if named:
            return named[0]
        return nccl_files[0] if len(nccl_files) == 1 else None
    return nccl_files[0] if len(nccl_files) == 1 else None


def _default_group(group: Any) -> Any:
    """The process group object: `group`, or the default (world) group for None."""
    if group is not None:
        return group
    import torch.distributed as dist

    return dist.distributed_c10d._get_default_group()


def _comm_pointer(group: Any) -> Tuple[bool, Optional[int]]:
    """(whether the group's CUDA backend has _comm_ptr, its value on the current CUDA device or None when the call
    raised). `group` is any object with _get_backend(device) (a ProcessGroup)."""
    try:
        device = torch.device("cuda", torch.cuda.current_device())
    except Exception:  # noqa: BLE001 -- no CUDA here: the pointer of "cuda" says the same (there is none)
        device = torch.device("cuda")
    get_backend = getattr(group, "_get_backend", None)
    if get_backend is None:
        return False, None
    try:
        backend = get_backend(device)
    except Exception:  # noqa: BLE001 -- RuntimeError where the group has no CUDA backend
        return False, None
    read = getattr(backend, "_comm_ptr", None)
    if not callable(read):
        return False, None
    try:
        return True, int(read())
    except Exception:  # noqa: BLE001 -- an aborted or failed communicator
        return True, None


def _route_for(group: Any, route: Any, backend: str, where: str = "basp.torch.comm_from_process_group"
               ) -> Tuple[str, str, Optional[int]]:
    """(route, why, the ncclComm_t for route "nccl" else None) for `group` (a ProcessGroup, or None: the world)
    whose backend is `backend`: _choose_route over what this process has. Asks only what the rules get to."""
    version = _torch_version()
    has_ptr, pointer = False, None
    torch_nccl = basp_nccl = None
    if route in ("auto", "nccl") and _has_nccl(backend) and version >= COMM_PTR_SINCE:
        has_ptr, pointer = _comm_pointer(_default_group(group))
        if pointer:
            basp_nccl, torch_nccl = _basp_nccl_file(), _torch_nccl_file()
    chosen, why = _choose_route(route, backend, version, has_ptr, pointer, torch_nccl, basp_nccl, where)
    return chosen, why, pointer if chosen == "nccl" else None


def comm_from_process_group(micro_batch: Optional[int] = None, group: Any = None, num_groups: Optional[int] = None,
                            placement: PlacementLike = Placement.DEFAULT, config: Optional[_abi.CommConfig] = None,
                            timeout_ms: Optional[int] = None, batch_capacity: Optional[int] = None,
                            route: str = "auto") -> Comm:
    """A basp.Comm on the NCCL backend over the ranks of a torch.distributed process group (default: the
    world), for programs started by torchrun or any other launcher: no MPI needed. Collective over `group`.
    Every rank's current CUDA device must be set first (`torch.cuda.set_device`). Arguments as for
    basp.Comm.from_oob, plus `route`, how the comm is made:

    "nccl"  the group's own NCCL communicator: on an NCCL group (or a mixed one with "cuda:nccl") with PyTorch >=
            2.8, ProcessGroupNCCL._comm_ptr() of the current CUDA device, after torch.cuda.synchronize(), goes to
            basp.Comm.from_nccl, which splits it into the groups' communicators (ncclCommSplit, the parent's config
            inherited: splitShare, non-blocking). No out-of-band round. The pointer exists once the group has run a
            collective on this device, or from init_process_group(device_id=...) on. PyTorch's libnccl must be
            libbasp's (the same file). The process group must outlive the comm: the comm keeps a reference to it;
            close the comm before dist.destroy_process_group.
    "oob"   basp.Comm.from_oob over ProcessGroupAllgather(group): libbasp runs its agreement, its readiness round
            and the exchange of the groups' NCCL unique ids over the group's all_gather (any backend: gloo or
            nccl), then makes one NCCL communicator per BASP group itself (ncclCommInitRank).
    "auto"  (default) "nccl" where all of its conditions hold, else "oob": gloo and mpi groups, PyTorch < 2.8, no
            _comm_ptr, a pointer of 0 (no collective yet). A libnccl of PyTorch other than libbasp's raises
            basp.Error (INVALID_ARGUMENT) naming both files, with either route that would use the pointer.

    Every rank must take the same route: the inputs of the choice (the backend, the PyTorch version, whether the
    group has made its communicator, the libraries) are the same on every rank at the same point of a program;
    force a route where they may not be. A route asked for that cannot be taken raises basp.Error saying why; an
    unknown one INVALID_ARGUMENT naming it. The comm's `created_by` ("nccl" or "oob") says which route was taken,
    and an error of the creation itself ends with the route and why it was chosen."""
    where = "basp.torch.comm_from_process_group"
    if micro_batch is None and config is None and not batch_capacity:
        raise invalid_argument("%s: micro_batch is required (sequences per micro-batch, B), unless the comm serves "
                               "batch plans only (batch_capacity > 0)" % where)
    if not isinstance(route, str) or route not in ROUTES:
        raise invalid_argument("%s: route (%r) is not one of %s" % (where, route, ", ".join(repr(r) for r in ROUTES)))
    _process_group_rank(group, where)
    chosen, why, pointer = _route_for(group, route, _backend_name(group), where)
    cfg = _config(where, config, micro_batch, num_groups, Backend.NCCL, placement, timeout_ms, batch_capacity)
    try:
        if chosen == "nccl":
            torch.cuda.synchronize()  # nothing of PyTorch's may be outstanding on the communicator it splits
            comm = Comm.from_nccl(int(pointer or 0), config=cfg)
            comm._parent = _default_group(group)  # libbasp's communicators are split from the group's
        else:
            comm = Comm.from_oob(ProcessGroupAllgather(group), config=cfg)
    except Error as e:
        e.message = "%s [%s took route %r: %s]" % (e.message, where, chosen, why)
        e.args = (e.status, e.message)
        raise
    return comm
