"""A basp.Comm over a torch.distributed process group: the all-gather libbasp's OOB creation needs, run by the
process group (basp.torch re-exports it)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch

from . import _abi
from ._abi import Placement
from .comm import Comm, PlacementLike
from .errors import invalid_argument
from .oob import OobAllgather


def _group_device(group: Any) -> torch.device:
    """Where the group's collectives take tensors: the current CUDA device for an NCCL group, else the CPU (gloo,
    mpi, and mixed backends such as "cpu:gloo,cuda:nccl", whose gloo part takes CPU tensors)."""
    import torch.distributed as dist

    if str(dist.get_backend(group)).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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


def comm_from_process_group(micro_batch: Optional[int] = None, group: Any = None, num_groups: Optional[int] = None,
                            placement: PlacementLike = Placement.DEFAULT, config: Optional[_abi.CommConfig] = None,
                            timeout_ms: Optional[int] = None, batch_capacity: Optional[int] = None) -> Comm:
    """A basp.Comm on the NCCL backend over the ranks of a torch.distributed process group (default: the
    world), for programs started by torchrun or any other launcher: no MPI needed. Collective over `group`.

    basp.Comm.from_oob over ProcessGroupAllgather(group): libbasp runs its agreement (the configs must match), its
    readiness round (every rank needs a CUDA device: `torch.cuda.set_device` first) and the exchange of the groups'
    NCCL unique ids over the process group's all_gather (any backend: gloo or nccl), then makes one NCCL
    communicator per BASP group on each rank's current CUDA device. Arguments as for basp.Comm.from_oob."""
    where = "basp.torch.comm_from_process_group"
    if micro_batch is None and config is None and not batch_capacity:
        raise invalid_argument("%s: micro_batch is required (sequences per micro-batch, B), unless the comm serves "
                               "batch plans only (batch_capacity > 0)" % where)
    _process_group_rank(group, where)
    return Comm.from_oob(ProcessGroupAllgather(group), micro_batch=micro_batch, num_groups=num_groups,
                         placement=placement, config=config, timeout_ms=timeout_ms, batch_capacity=batch_capacity)
