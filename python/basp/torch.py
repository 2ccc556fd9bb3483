"""PyTorch on libbasp: head scatter/gather as autograd functions and a BASP attention module.

    q, k, v  sequence-sharded  [b_loc, S/K, H, D]   (each rank: B/G sequences, S/K tokens of each)
      | head scatter (one exchange for Q, K and V; backward: head gather)
    q, k, v  head-sharded      [b_loc, S, H/K, D]   (each rank: whole sequences, H/K heads)
      | any local attention (K/V heads expanded here for GQA)
    out      head-sharded      [b_loc, S, Hq/K, D]
      | head gather (backward: head scatter)
    out      sequence-sharded  [b_loc, S/K, Hq, D]

Shapes are shown for the BSHD layout; SBHD puts the token dimension first. Plans are created on first use for
each (S, dtype, device) and kept: every rank of a group must run the same forward/backward sequence.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from . import _abi, _arrays
from ._abi import Layout, Placement
from .comm import Comm, PlacementLike
from .errors import invalid_argument
from .oob import OobAllgather
from .plan import LayoutLike, Plan

# fn(q, k, v, causal) -> out, on head-sharded [b, h, S, D] tensors.
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor]

SCATTER = "scatter"
GATHER = "gather"
_INVERSE = {SCATTER: GATHER, GATHER: SCATTER}


class Exchange(torch.autograd.Function):
    """plan.scatter or plan.gather of all of a plan's tensors; its backward is the inverse exchange of the
    gradients (itself an Exchange, so higher-order gradients work too)."""

    @staticmethod
    def forward(ctx: Any, plan: Plan, direction: str, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.plan = plan
        ctx.direction = direction
        run = plan.scatter if direction == SCATTER else plan.gather
        return tuple(run([t.contiguous() for t in tensors]))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        # Undefined gradients arrive as zeros (materialised by autograd); the exchange needs dense inputs.
        inverse = Exchange.apply(ctx.plan, _INVERSE[ctx.direction], *[g.contiguous() for g in grads])
        return (None, None) + tuple(inverse)


def head_scatter(plan: Plan, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """Sequence-sharded tensors -> head-sharded tensors (a tuple), differentiable."""
    return Exchange.apply(plan, SCATTER, *tensors)


def head_gather(plan: Plan, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """Head-sharded tensors -> sequence-sharded tensors (a tuple), differentiable."""
    return Exchange.apply(plan, GATHER, *tensors)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D)) V on [b, h, S, D] tensors, masking j > i when causal."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s_q, s_k = scores.shape[-2], scores.shape[-1]
        future = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def default_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention where this PyTorch has it (2.0+), else explicit_attention."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v, is_causal=causal)
    return explicit_attention(q, k, v, causal)


class BaspAttention(torch.nn.Module):
    """Attention over sequence-sharded Q, K, V with BASP redistribution around a local attention function.

    comm          a basp.Comm (its group size K must divide num_heads and num_kv_heads)
    num_heads     Hq, query heads of the whole model layer
    head_dim      D
    num_kv_heads  Hkv (default Hq); GQA when Hkv < Hq: each K/V head serves Hq/Hkv query heads, expanded locally
                  after the exchange so only Hkv heads travel
    causal        mask future tokens (token order is the global order: the exchange restores whole sequences)
    attention     fn(q, k, v, causal) -> out on head-sharded [b, h, S, D] tensors (default: default_attention)
    layout        "bshd" or "sbhd" (basp.Layout), the layout of q, k, v and of the output
    """

    def __init__(self, comm: Comm, num_heads: int, head_dim: int, num_kv_heads: Optional[int] = None,
                 causal: bool = False, attention: Optional[AttentionFn] = None,
                 layout: LayoutLike = Layout.BSHD) -> None:
        super().__init__()
        if not isinstance(comm, Comm):
            raise invalid_argument("basp.torch.BaspAttention: comm (a %s) is not a basp.Comm" % type(comm).__name__)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads <= 0 or num_kv_heads <= 0 or num_heads % num_kv_heads != 0:
            raise invalid_argument("basp.torch.BaspAttention: num_heads (%d) must be a positive multiple of "
                                   "num_kv_heads (%d)" % (num_heads, num_kv_heads))
        if head_dim <= 0:
            raise invalid_argument("basp.torch.BaspAttention: head_dim (%d) must be positive" % head_dim)
        self.comm = comm
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads)
        self.head_dim = int(head_dim)
        self.causal = bool(causal)
        self.attention = attention if attention is not None else default_attention
        self.layout = Layout[layout.upper()] if isinstance(layout, str) else Layout(layout)
        self._plans: Dict[Tuple[int, Any, str], Tuple[Plan, Plan]] = {}

    def plans(self, seq_len: int, dtype: Any, device: Union[torch.device, str]) -> Tuple[Plan, Plan]:
        """(qkv plan, output plan) for full sequences of seq_len tokens; created on first use (collective over
        the group)."""
        key = (int(seq_len), dtype, str(device))
        if key not in self._plans:
            basp_dtype = _arrays.basp_dtype(dtype, "basp.torch.BaspAttention: dtype")
            qkv = Plan(self.comm, seq_len, self.head_dim, [self.num_heads, self.num_kv_heads, self.num_kv_heads],
                       basp_dtype, self.layout)
            out = Plan(self.comm, seq_len, self.head_dim, [self.num_heads], basp_dtype, self.layout)
            self._plans[key] = (qkv, out)
        return self._plans[key]

    def _check(self, name: str, x: Any, heads: int) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise invalid_argument("basp.torch.BaspAttention: %s must be a 4-d torch.Tensor, got %s" % (
                name, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__))
        if x.shape[2] != heads or x.shape[3] != self.head_dim:
            raise invalid_argument("basp.torch.BaspAttention: %s has shape %s: expected %d heads of dim %d in "
                                   "dims 2 and 3 (%s)" % (name, tuple(x.shape), heads, self.head_dim,
                                                          self.layout.name))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [b_loc, S/K, Hq, D], k and v [b_loc, S/K, Hkv, D] (BSHD; SBHD swaps the first two) -> the
        attention output, sequence-sharded like q."""
        self._check("q", q, self.num_heads)
        self._check("k", k, self.num_kv_heads)
        self._check("v", v, self.num_kv_heads)
        for name, x in (("k", k), ("v", v)):
            if x.shape[:2] != q.shape[:2] or x.dtype != q.dtype or x.device != q.device:
                raise invalid_argument("basp.torch.BaspAttention: %s (%s, %s, %s) does not match q (%s, %s, %s) "
                                       "in the first two dims, dtype and device" % (
                                           name, tuple(x.shape), x.dtype, x.device, tuple(q.shape), q.dtype,
                                           q.device))
        s_dim = 1 if self.layout == Layout.BSHD else 0
        seq_len = q.shape[s_dim] * self.comm.group_size
        qkv_plan, out_plan = self.plans(seq_len, q.dtype, q.device)
        qh, kh, vh = head_scatter(qkv_plan, q, k, v)
        # -> [b, h, S, D] for the attention function.
        to_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (1, 2, 0, 3)
        qh, kh, vh = (x.permute(*to_bhsd) for x in (qh, kh, vh))
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            # Local query head i is global head l*Hq/K + i; it reads global K/V head (l*Hq/K + i) / group =
            # l*Hkv/K + i / group, i.e. local K/V head i / group.
            kh = kh.repeat_interleave(group, dim=1)
            vh = vh.repeat_interleave(group, dim=1)
        out = self.attention(qh, kh, vh, self.causal)
        from_bhsd = (0, 2, 1, 3) if self.layout == Layout.BSHD else (2, 0, 1, 3)
        (out,) = head_gather(out_plan, out.permute(*from_bhsd).contiguous())
        return out

    def close(self) -> None:
        """Destroys the cached plans (not collective)."""
        for qkv, out in self._plans.values():
            qkv.close()
            out.close()
        self._plans.clear()

    def extra_repr(self) -> str:
        return "num_heads=%d, num_kv_heads=%d, head_dim=%d, causal=%s, layout=%s, K=%d" % (
            self.num_heads, self.num_kv_heads, self.head_dim, self.causal, self.layout.name, self.comm.group_size)


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
                            timeout_ms: Optional[int] = None) -> Comm:
    """A basp.Comm on the NCCL backend over the ranks of a torch.distributed process group (default: the
    world), for programs started by torchrun or any other launcher: no MPI needed. Collective over `group`.

    basp.Comm.from_oob over ProcessGroupAllgather(group): libbasp runs its agreement (the configs must match), its
    readiness round (every rank needs a CUDA device: `torch.cuda.set_device` first) and the exchange of the groups'
    NCCL unique ids over the process group's all_gather (any backend: gloo or nccl), then makes one NCCL
    communicator per BASP group on each rank's current CUDA device. Arguments as for basp.Comm.from_oob."""
    where = "basp.torch.comm_from_process_group"
    if micro_batch is None and config is None:
        raise invalid_argument("%s: micro_batch is required (sequences per micro-batch, B)" % where)
    _process_group_rank(group, where)
    return Comm.from_oob(ProcessGroupAllgather(group), micro_batch=micro_batch, num_groups=num_groups,
                         placement=placement, config=config, timeout_ms=timeout_ms)
