"""The head scatter and gather as PyTorch operations, differentiable, and traceable by torch.compile.

On PyTorch >= 2.4 they are custom operators, torch.ops.basp.scatter and torch.ops.basp.gather, registered with
torch.library: a fake implementation gives the output shapes (a THD plan's token count is a SymInt, so a stream of
another length is no new graph), and the autograd formula is the adjoint exchange (the gather, summing a head that
several ranks hold, for a scatter; the scatter for a gather). torch.compile(fullgraph=True) traces them as opaque
nodes: the ctypes call into libbasp happens only when the graph runs.

An operator takes its plan as an integer id (plan_id), since a graph can carry ints but not a ctypes handle: plans
are collective and are made eagerly, outside tracing; their ids are constants of the graph. On older PyTorch (Debian's
1.13) the same exchanges run through a plain torch.autograd.Function, which works eagerly but breaks a compiled
graph.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from ._abi import Dtype, Layout, Status
from .errors import Error, invalid_argument
from .plan import Plan

SCATTER = "scatter"
GATHER = "gather"
_ADJOINT = {SCATTER: GATHER, GATHER: SCATTER}

# The torch dtype a plan's outputs get (the dtype the fake implementation reports); a plan of another dtype has no
# fake implementation and cannot be traced.
TORCH_DTYPES = {
    Dtype.FP16: torch.float16, Dtype.BF16: torch.bfloat16, Dtype.FP32: torch.float32, Dtype.FP64: torch.float64,
    Dtype.INT32: torch.int32, Dtype.INT64: torch.int64, Dtype.BYTE: torch.uint8,
}

_lock = threading.Lock()
_ids = itertools.count(1)
# id -> plan. Weak: a plan closed and dropped by its owner is not kept alive by having been used in a graph.
_plans: "weakref.WeakValueDictionary[int, Plan]" = weakref.WeakValueDictionary()


def _version_at_least(major: int, minor: int) -> bool:
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (IndexError, ValueError):
        return False


# A symbolic int under torch.compile (PyTorch >= 2.0); nothing matches it on older releases.
SYMBOLIC_INTS: Tuple[type, ...] = (torch.SymInt,) if hasattr(torch, "SymInt") else ()

# torch.library.custom_op with register_fake and register_autograd: PyTorch 2.4.
HAVE_CUSTOM_OPS = _version_at_least(2, 4) and hasattr(torch.library, "custom_op")


def plan_id(plan: Plan) -> int:
    """The integer id under which the operators find `plan` (assigned on first call, then the same)."""
    if not isinstance(plan, Plan):
        raise invalid_argument("basp.torch.plan_id: plan (a %s) is not a basp.Plan" % type(plan).__name__)
    with _lock:
        pid = getattr(plan, "_torch_id", None)
        if pid is None:
            pid = next(_ids)
            plan._torch_id = pid
            _plans[pid] = plan
    return pid


def plan_by_id(pid: int, where: str = "basp.torch") -> Plan:
    """The live plan with that id, or basp.Error naming it when it was closed (or never registered)."""
    plan = _plans.get(int(pid))
    if plan is None or plan.closed:
        raise invalid_argument("%s: plan id %d names no live plan (closed, or never passed to basp.torch.plan_id)"
                               % (where, int(pid)))
    return plan


def check_tokens(plan: Plan, num_tokens: Any, where: str) -> Optional[int]:
    """The operators' num_tokens (-1: none) for `plan`: None for a BSHD/SBHD plan (which takes -1 or its seq_len),
    a THD stream's T (checked against the capacity by basp.Plan when concrete)."""
    symbolic = isinstance(num_tokens, SYMBOLIC_INTS)
    if plan.layout != Layout.THD:
        if not symbolic and int(num_tokens) not in (-1, plan.seq_len):
            raise invalid_argument("%s: num_tokens (%d) is for THD plans; this %s plan has seq_len %d" % (
                where, int(num_tokens), plan.layout.name, plan.seq_len))
        return None
    if not symbolic and int(num_tokens) < 0 and plan._batch_tokens is not None:
        return plan._batch_tokens  # a THD batch plan moves its group's stream
    if not symbolic and int(num_tokens) < 0:
        raise invalid_argument("%s: num_tokens is required for a THD plan: the T tokens of the group's stream in "
                               "this call (0..%d)" % (where, plan.token_capacity))
    return num_tokens


def _run(direction: str, pid: int, tensors: Sequence[torch.Tensor], num_tokens: int,
         cu_seqlens: Optional[torch.Tensor]) -> List[torch.Tensor]:
    """The real exchange (eager): libbasp through basp.Plan, on contiguous inputs, into new outputs."""
    where = "basp.torch.%s" % direction
    plan = plan_by_id(pid, where)
    if cu_seqlens is not None:
        plan.set_documents(cu_seqlens.tolist())
    tokens = check_tokens(plan, num_tokens, where)
    run = plan.scatter if direction == SCATTER else plan.gather
    return list(run([t.contiguous() for t in tensors], num_tokens=None if tokens is None else int(tokens)))


def fake_outputs(direction: str, pid: int, count: int, device: torch.device, num_tokens: Any,
                 where: str) -> List[torch.Tensor]:
    """Empty outputs of an exchange of `count` tensors in `direction` (the head-sharded side for a scatter, the
    sequence-sharded one for a gather), of the plan's shapes and dtype, without running anything: a THD plan's token
    dimension in terms of T. The head-sharded side has T tokens; position l of K has (T + K - 1 - l) // K of them
    on the sequence-sharded side (torch.tensor_split's count, basp_split), which holds for a symbolic T as well."""
    plan = plan_by_id(pid, where)
    dtype = TORCH_DTYPES.get(plan.dtype)
    if dtype is None:
        raise Error(Status.ERROR_UNSUPPORTED, "%s: a %s plan cannot be traced (no torch dtype holds its elements)"
                    % (where, plan.dtype.name))
    if count != plan.num_tensors:
        raise invalid_argument("%s: %d tensors given to a plan of %d (num_heads %r)" % (
            where, count, plan.num_tensors, plan.num_heads))
    head_side = direction == SCATTER
    shapes = plan.info.head_sharded_shapes if head_side else plan.info.seq_sharded_shapes
    call_tokens = check_tokens(plan, num_tokens, where)
    if call_tokens is not None:
        k, position = plan.info.group_size, plan._position
        tokens = call_tokens if head_side else (call_tokens + k - 1 - position) // k
        shapes = [(tokens,) + tuple(s[1:]) for s in shapes]
    return [torch.empty(tuple(s), dtype=dtype, device=device) for s in shapes]


def _fake(direction: str, pid: int, tensors: Sequence[torch.Tensor], num_tokens: Any) -> List[torch.Tensor]:
    """The one-call operators' fake outputs (fake_outputs, on the device of the inputs)."""
    device = tensors[0].device if tensors else torch.device("cpu")
    return fake_outputs(direction, pid, len(tensors), device, num_tokens, "basp.torch.%s" % direction)


class Exchange(torch.autograd.Function):
    """The exchanges as a plain autograd function (PyTorch < 2.4, and the reference the operators are tested
    against): plan.scatter or plan.gather of all of a plan's tensors, whose backward is the adjoint exchange of the
    gradients. It is itself an Exchange, so higher-order gradients work too."""

    @staticmethod
    def forward(ctx: Any, plan: Plan, direction: str, num_tokens: int,
                cu_seqlens: Optional[torch.Tensor], *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.plan = plan
        ctx.direction = direction
        ctx.num_tokens = num_tokens
        ctx.cu_seqlens = cu_seqlens
        return tuple(_run(direction, plan_id(plan), tensors, num_tokens, cu_seqlens))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        # Undefined gradients arrive as zeros (materialised by autograd); the exchange needs dense inputs.
        adjoint = Exchange.apply(ctx.plan, _ADJOINT[ctx.direction], ctx.num_tokens, ctx.cu_seqlens,
                                 *[g.contiguous() for g in grads])
        return (None, None, None, None) + tuple(adjoint)


if HAVE_CUSTOM_OPS:
    # The schema comes from the annotations: int is a SymInt, so a THD stream's T may be symbolic.
    @torch.library.custom_op("basp::scatter", mutates_args=())
    def _scatter_op(plan: int, tensors: List[torch.Tensor], num_tokens: int,
                    cu_seqlens: Optional[torch.Tensor]) -> List[torch.Tensor]:
        return _run(SCATTER, plan, tensors, num_tokens, cu_seqlens)

    @torch.library.custom_op("basp::gather", mutates_args=())
    def _gather_op(plan: int, tensors: List[torch.Tensor], num_tokens: int,
                   cu_seqlens: Optional[torch.Tensor]) -> List[torch.Tensor]:
        return _run(GATHER, plan, tensors, num_tokens, cu_seqlens)

    @_scatter_op.register_fake
    def _scatter_fake(plan: int, tensors: List[torch.Tensor], num_tokens: int,
                      cu_seqlens: Optional[torch.Tensor]) -> List[torch.Tensor]:
        return _fake(SCATTER, plan, tensors, num_tokens)

    @_gather_op.register_fake
    def _gather_fake(plan: int, tensors: List[torch.Tensor], num_tokens: int,
                     cu_seqlens: Optional[torch.Tensor]) -> List[torch.Tensor]:
        return _fake(GATHER, plan, tensors, num_tokens)

    def _setup_context(ctx: Any, inputs: Tuple[Any, ...], output: List[torch.Tensor]) -> None:
        ctx.plan, _, ctx.num_tokens, cu_seqlens = inputs
        ctx.has_cu = cu_seqlens is not None
        if ctx.has_cu:
            ctx.save_for_backward(cu_seqlens)
        # For gradients autograd leaves undefined (an output nobody used): zeros of the output's shape.
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in output]

    def _dense(ctx: Any, grads: Sequence[Optional[torch.Tensor]]) -> List[torch.Tensor]:
        return [g.contiguous() if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                for g, (shape, dtype, device) in zip(grads, ctx.outputs)]

    def _scatter_backward(ctx: Any, grads: List[Optional[torch.Tensor]]) -> Tuple[Any, ...]:
        cu = ctx.saved_tensors[0] if ctx.has_cu else None
        return None, list(torch.ops.basp.gather(ctx.plan, _dense(ctx, grads), ctx.num_tokens, cu)), None, None

    def _gather_backward(ctx: Any, grads: List[Optional[torch.Tensor]]) -> Tuple[Any, ...]:
        cu = ctx.saved_tensors[0] if ctx.has_cu else None
        return None, list(torch.ops.basp.scatter(ctx.plan, _dense(ctx, grads), ctx.num_tokens, cu)), None, None

    _scatter_op.register_autograd(_scatter_backward, setup_context=_setup_context)
    _gather_op.register_autograd(_gather_backward, setup_context=_setup_context)


def _exchange(direction: str, plan: Any, tensors: Sequence[torch.Tensor], num_tokens: Optional[int],
              cu_seqlens: Optional[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
    # Traced by torch.compile: no lock, no registry lookup here (the operators check their plan id themselves).
    where = "basp.torch.head_%s" % direction
    if isinstance(plan, Plan):
        pid = getattr(plan, "_torch_id", None) or plan_id(plan)
    elif isinstance(plan, int) and not isinstance(plan, bool):
        pid = plan
    else:
        raise invalid_argument("%s: plan (a %s) is neither a basp.Plan nor a plan id" % (where,
                                                                                        type(plan).__name__))
    for t, x in enumerate(tensors):
        if not isinstance(x, torch.Tensor):
            raise invalid_argument("%s: tensors[%d] (a %s) is not a torch.Tensor" % (where, t, type(x).__name__))
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        raise invalid_argument("%s: cu_seqlens (a %s) must be a 1-D integer torch.Tensor here" % (
            where, type(cu_seqlens).__name__))
    if num_tokens is not None and (isinstance(num_tokens, bool) or not isinstance(num_tokens, (int,) + SYMBOLIC_INTS)):
        raise invalid_argument("%s: num_tokens (%r, a %s) is not an int" % (where, num_tokens,
                                                                             type(num_tokens).__name__))
    tokens = -1 if num_tokens is None else num_tokens
    if HAVE_CUSTOM_OPS:
        op = torch.ops.basp.scatter if direction == SCATTER else torch.ops.basp.gather
        return tuple(op(pid, list(tensors), tokens, cu_seqlens))
    return Exchange.apply(plan_by_id(pid, where), direction, tokens, cu_seqlens, *tensors)


def head_scatter(plan: Any, *tensors: torch.Tensor, num_tokens: Optional[int] = None,
                 cu_seqlens: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, ...]:
    """Sequence-sharded tensors -> head-sharded tensors (a tuple), differentiable (backward: the summing gather).
    `plan` is a basp.Plan or its plan_id; num_tokens is a THD plan's T (an int, symbolic under torch.compile);
    cu_seqlens (THD, optional) the group's document boundaries as a tensor, passed to plan.set_documents first."""
    return _exchange(SCATTER, plan, tensors, num_tokens, cu_seqlens)


def head_gather(plan: Any, *tensors: torch.Tensor, num_tokens: Optional[int] = None,
                cu_seqlens: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, ...]:
    """Head-sharded tensors -> sequence-sharded tensors (a tuple), differentiable (backward: the scatter).
    Arguments as for head_scatter."""
    return _exchange(GATHER, plan, tensors, num_tokens, cu_seqlens)


def registered_plans() -> Dict[int, Plan]:
    """The live plans the operators can name, by id (for tests and debugging)."""
    return {pid: p for pid, p in _plans.items() if not p.closed}
