"""The Python binding on the GPU with several ranks, one process per rank, started by torchrun (no MPI, no mpi4py):

  torchrun --standalone --nproc_per_node N --no_python scripts/gpu/rank-env python3 python/tests/test_torch_ranks.py

Each rank is a process of its own (rank and size from torchrun's RANK and WORLD_SIZE) on CUDA device
LOCAL_RANK % device_count: with one GPU, every rank shares cuda:0 (scripts/gpu/rank-env gives each rank its own
NCCL_HOSTID, so that NCCL accepts several ranks on one GPU and moves their data over sockets). The world is an NCCL
process group (made at init_process_group(device_id=...) where PyTorch has it); a gloo group beside it only paces
the tests (the harness's barrier). Without torchrun the script runs as one rank. What it checks, on every rank:

- basp.Comm.from_nccl over an NCCL communicator made here (ncclGetUniqueId, ncclCommInitRank through ctypes, on
  libbasp's libnccl: a blocking parent), and over the process group's own (ProcessGroupNCCL._comm_ptr(), PyTorch
  >= 2.8; a group bound to its device at init_process_group is non-blocking in recent PyTorch, and its split
  then returns ncclInProgress until it is done);
- basp.torch.comm_from_process_group on the NCCL group by both routes, each asserted through comm.created_by:
  route="nccl" (the group's communicator; PyTorch < 2.8 refuses it, UNSUPPORTED), route="oob" (the unique-id
  exchange over the group's all_gather), route="auto" (the NCCL route where it can be taken), and a new subgroup
  whose communicator PyTorch may not have made yet (auto: the OOB route then; the NCCL route once it exists);
- every comm's exchange against the data: a scatter then a gather of coordinate-valued bf16 tensors into
  NaN-poisoned outputs, the heads and tokens of each rank checked bit for bit (K = N and the BASP rule);
- basp.torch.DistributedAttention given the ProcessGroup (its comm made by the layer), and BaspAttention with
  K > 1 (Ulysses, and G = gcd(N, B)), forward and backward on CUDA, against float64 attention computed by one
  process on the whole batch (each rank compares its own shard);
- BaspAttention and DistributedAttention with chunks = 2 and 3: the NCCL backend's stream-ordered head chunks,
  forward and backward, against the float64 reference and the chunks=1 layer;
- the custom operators basp.torch.head_scatter / head_gather on CUDA: each rank's heads, and the backward of each
  being the other (PyTorch >= 2.4; a plain autograd.Function before);
- torch.compile(backend="aot_eager", fullgraph=True) of BaspAttention on CUDA against eager (PyTorch >= 2.4).

Prints each test's time and "all N tests passed" (harness.py). Exits 77 (skipped) where PyTorch sees no CUDA
device: every rank does, and torchrun then reports the job failed (exit 1: it does not pass a worker's 77 on)."""
import ctypes
import inspect
import math
import os
import sys
import time
from datetime import timedelta

import torch

if not torch.cuda.is_available():
    print("skipped: PyTorch %s sees no CUDA device" % torch.__version__, flush=True)
    sys.exit(77)

import torch.distributed as dist  # noqa: E402

import basp  # noqa: E402 -- after the skip, so that a machine without a GPU loads nothing
import basp.torch as bt  # noqa: E402
from basp import _torch_group as tg  # noqa: E402
from harness import check, expect_error, run, set_rendezvous  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
N = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
B, D = 2, 8  # sequences per micro-batch, head dim
RTOL, ATOL = 1e-3, 1e-4  # float32 on the GPU against float64


class TorchWorld:
    """What harness.run asks of an mpi4py communicator, over torch.distributed: the tests' barrier on a gloo group,
    and an abort that ends this process at once (torchrun then stops the other ranks)."""

    def __init__(self, group):
        self.group = group

    def Get_rank(self):
        return RANK

    def Get_size(self):
        return N

    def Barrier(self):
        dist.barrier(group=self.group)

    def Abort(self, code):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def setup():
    """The NCCL world on this rank's device, bound to it where PyTorch can (then its communicator exists from the
    start), and the gloo group of the harness."""
    global DEV, WORLD_PG, CONTROL, HAS_COMM_PTR
    torch.cuda.set_device(LOCAL_RANK % torch.cuda.device_count())
    DEV = torch.device("cuda", torch.cuda.current_device())
    if "MASTER_ADDR" not in os.environ:  # not under torchrun: one rank
        set_rendezvous(None)
    kwargs = {}
    if "device_id" in inspect.signature(dist.init_process_group).parameters:
        kwargs["device_id"] = DEV
    dist.init_process_group("nccl", init_method="env://", rank=RANK, world_size=N, timeout=timedelta(seconds=180),
                            **kwargs)
    WORLD_PG = tg._default_group(None)
    CONTROL = dist.new_group(backend="gloo")
    HAS_COMM_PTR = tg._torch_version() >= tg.COMM_PTR_SINCE and tg._comm_pointer(WORLD_PG)[0]
    if RANK == 0:
        version, nccl = basp.nccl_library()
        print("PyTorch %s (CUDA %s), %d rank(s) on %s; libbasp %s with NCCL %d from %s; PyTorch's NCCL: %s; "
              "ProcessGroupNCCL._comm_ptr: %s" % (
                  torch.__version__, torch.version.cuda, N, torch.cuda.get_device_name(DEV), basp.library_path(),
                  version, nccl, tg._torch_nccl_file(), "yes" if HAS_COMM_PTR else "no"), flush=True)


def everyone(value):
    """Every rank's value, by rank (over the gloo group)."""
    out = [None] * N
    dist.all_gather_object(out, value, group=CONTROL)
    return out


def coordinates(shape, offset):
    """A bf16 tensor on the CPU whose bit patterns count up from `offset` (each element distinct, none a NaN)."""
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, dtype=torch.int32) + offset) % 30000).to(torch.int16).view(torch.bfloat16).reshape(shape)


def bits(t):
    return t.detach().cpu().view(torch.int16)


def check_exchange(comm, what):
    """A scatter and a gather on `comm` of two query-like bf16 tensors (no replicated heads: the gather is the exact
    inverse), tokens and heads that K need not divide, checked element for element against the global tensors."""
    k = comm.group_size
    s, heads = 2 * k + 1, 2 * k + 1
    plan = comm.plan(s, D, [heads, heads], torch.bfloat16)
    info, pinfo = comm.query(s), plan.query()
    whole = [coordinates((comm.micro_batch, s, heads, D), 7919 * t) for t in range(2)]
    ins = [basp.data.local_shard(w, info).to(DEV) for w in whole]
    outs = plan.scatter(ins, [torch.full(plan.head_sharded_shape(t), float("nan"), dtype=torch.bfloat16, device=DEV)
                              for t in range(2)])
    torch.cuda.synchronize()
    for t in range(2):
        h = pinfo.head_ranges[t]
        expected = whole[t][info.sequences][:, :, h.start:h.stop]
        check.true(torch.equal(bits(outs[t]), bits(expected)), "%s: scatter, tensor %d: this rank's heads %s of "
                   "whole sequences %s, bit for bit" % (what, t, h, info.sequences))
    check.equal(plan.query().last_path, basp.Path.LOCAL if k == 1 else basp.Path.NCCL, "%s: the path" % what)
    back = plan.gather(outs, [torch.full_like(x, float("nan")) for x in ins])
    torch.cuda.synchronize()
    check.true(all(torch.equal(bits(a), bits(b)) for a, b in zip(ins, back)), "%s: the gather restores the inputs"
               % what)
    check.true(comm.async_error() is None, "%s: no asynchronous error" % what)
    plan.close()


def check_comm(comm, created_by, what, group_size=None):
    check.equal(comm.created_by, created_by, "%s: made by" % what)
    check.equal(comm.backend, basp.Backend.NCCL, "%s: an NCCL comm" % what)
    check.equal(everyone((comm.world_size, comm.rank, comm.micro_batch)), [(N, r, B) for r in range(N)],
                "%s: the world and ranks" % what)
    if group_size is not None:
        check.equal(comm.group_size, group_size, "%s: K" % what)
    check_exchange(comm, what)


# ---- Comm.from_nccl -----------------------------------------------------------------------------------------------

class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]  # NCCL_UNIQUE_ID_BYTES (c_char would stop at a NUL)


def nccl_comm_init():
    """An NCCL communicator over the world made here, on libbasp's libnccl: rank 0's unique id, broadcast over gloo,
    then ncclCommInitRank on this rank's device. Returns (the library, the ncclComm_t as an int)."""
    nccl = ctypes.CDLL(basp.nccl_library()[1])
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(NcclUniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    nccl.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    uid = NcclUniqueId()
    if RANK == 0:
        check.equal(nccl.ncclGetUniqueId(ctypes.byref(uid)), 0, "ncclGetUniqueId")
    box = [bytes(uid) if RANK == 0 else None]
    dist.broadcast_object_list(box, src=0, group=CONTROL)
    check.equal(len(box[0]), ctypes.sizeof(NcclUniqueId), "the unique id's bytes")
    uid = NcclUniqueId.from_buffer_copy(box[0])
    handle = ctypes.c_void_p()
    check.equal(nccl.ncclCommInitRank(ctypes.byref(handle), N, uid, RANK), 0, "ncclCommInitRank")
    return nccl, handle.value


def test_from_nccl_over_a_communicator_made_here():
    nccl, handle = nccl_comm_init()
    with basp.Comm.from_nccl(handle, micro_batch=B, num_groups=1) as comm:
        check_comm(comm, "nccl", "from_nccl (own communicator, Ulysses)", group_size=N)
    with basp.Comm.from_nccl(handle, micro_batch=B) as comm:  # the BASP rule: G = gcd(N, B)
        check_comm(comm, "nccl", "from_nccl (own communicator, BASP)", group_size=N // math.gcd(N, B))
    check.equal(nccl.ncclCommDestroy(handle), 0, "ncclCommDestroy, after the comms split from it")


# ---- comm_from_process_group, both routes -------------------------------------------------------------------------

def torch_pointer(group):
    dist.all_reduce(torch.ones(1, device=DEV), group=group)  # the group's communicator exists after a collective
    torch.cuda.synchronize()
    return tg._comm_pointer(group)[1]


def test_from_nccl_over_the_groups_communicator():
    if not HAS_COMM_PTR:
        check.true(True, "not run: PyTorch %s has no ProcessGroupNCCL._comm_ptr" % torch.__version__)
        if RANK == 0:
            print("not run: from_nccl over the group's communicator (PyTorch %s has no _comm_ptr)" % torch.__version__,
                  flush=True)
        return
    pointer = torch_pointer(WORLD_PG)
    check.true(bool(pointer), "the world's ncclComm_t after a collective (%r)" % pointer)
    with basp.Comm.from_nccl(pointer, micro_batch=B, num_groups=1) as comm:
        check_comm(comm, "nccl", "from_nccl (the process group's communicator)", group_size=N)
    dist.all_reduce(torch.ones(1, device=DEV))  # the group's communicator still works
    torch.cuda.synchronize()
    check.equal(tg._comm_pointer(WORLD_PG)[1], pointer, "the group keeps its communicator")


def test_comm_from_process_group_both_routes():
    routes = ["oob", "auto"] + (["nccl"] if HAS_COMM_PTR else [])
    for route in routes:
        taken = "nccl" if route == "nccl" or (route == "auto" and HAS_COMM_PTR and torch_pointer(WORLD_PG)) else "oob"
        started = time.monotonic()
        with bt.comm_from_process_group(micro_batch=B, num_groups=1, route=route, timeout_ms=120000) as comm:
            made = time.monotonic() - started
            check_comm(comm, taken, "comm_from_process_group(route=%r)" % route, group_size=N)
            check.true(comm._parent is (WORLD_PG if taken == "nccl" else None), "the parent kept")
        if RANK == 0:
            print("  route=%s: %s route, made in %.3f s" % (route, taken, made), flush=True)
    if not HAS_COMM_PTR:
        expect_error(lambda: bt.comm_from_process_group(micro_batch=B, route="nccl"),
                     basp.Status.ERROR_UNSUPPORTED, "route='nccl'", "_comm_ptr")


def test_a_new_group_before_and_after_its_communicator():
    sub = dist.new_group(list(range(N)), backend="nccl")  # collective over the world
    had = tg._comm_pointer(sub)[1]
    first = "nccl" if HAS_COMM_PTR and had else "oob"
    with bt.comm_from_process_group(micro_batch=B, group=sub, timeout_ms=120000) as comm:
        check_comm(comm, first, "a new group, its communicator %s" % ("made" if had else "not made yet"))
    # The OOB route ran the group's all_gather: its communicator exists now (so does it after any collective).
    torch_pointer(sub)
    with bt.comm_from_process_group(micro_batch=B, group=sub, timeout_ms=120000) as comm:
        check_comm(comm, "nccl" if HAS_COMM_PTR else "oob", "the new group after a collective")
    dist.destroy_process_group(sub)
    check.true(True, "the subgroup destroyed after its comms")


# ---- attention against float64 -------------------------------------------------------------------------------

def attention64(q, k, v, causal):
    """[b, S, h, D] attention in float64 on the CPU; query head h reads K/V head h // (Hq / Hkv)."""
    hq, hkv, s, d = q.shape[2], k.shape[2], q.shape[1], q.shape[3]
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = k.index_select(2, kv_of), v.index_select(2, kv_of)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), vv)


def problem(s, hq, hkv, seed):
    """Global q, k, v and output gradient ([B, S, h, D], the same on every rank) and the float64 reference: the
    output and the gradients of q, k, v."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, s, h, D, generator=g) for h in (hq, hkv, hkv))
    dout = torch.randn(B, s, hq, D, generator=g)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    out = attention64(*leaves, causal=True)
    (out * dout.double()).sum().backward()
    return (q, k, v, dout), [out.detach()] + [t.grad for t in leaves]


def compare_shards(comm, s, got, reference, what):
    """This rank's shard of each reference tensor against what it computed."""
    info = comm.query(s)
    for name, a, ref in zip(("out", "dq", "dk", "dv"), got, reference):
        mine = basp.data.local_shard(ref, info)
        check.equal(tuple(a.shape), tuple(mine.shape), "%s: %s shape" % (what, name))
        err = (a.double().cpu() - mine).abs().max().item()
        check.true(torch.allclose(a.double().cpu(), mine, rtol=RTOL, atol=ATOL),
                   "%s: %s equals the float64 reference on rank %d (max error %.3g)" % (what, name, RANK, err))


def run_layer(layer, comm, inputs, s, **kwargs):
    """One forward and backward of `layer` on this rank's shards (moved to the GPU); (out, dq, dk, dv) on the CPU."""
    info = comm.query(s)
    q, k, v, dout = (basp.data.local_shard(t, info).to(DEV) for t in inputs)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = layer(*leaves, **kwargs)
    (out * dout).sum().backward()
    torch.cuda.synchronize()
    return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]


def test_basp_attention_on_cuda_with_k_above_one():
    hq, hkv = 2 * N, N
    for num_groups in (1, None):  # Ulysses (K = N), then the BASP rule (K = N / gcd(N, B))
        with bt.comm_from_process_group(micro_batch=B, num_groups=num_groups, timeout_ms=120000) as comm:
            k = comm.group_size
            check.equal(k, N if num_groups == 1 else N // math.gcd(N, B), "K")
            for s in (4 * k, 4 * k + 1):  # tokens K divides, and tokens it does not
                inputs, reference = problem(s, hq, hkv, seed=100 + s)
                layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=True)
                got = run_layer(layer, comm, inputs, s, seq_len=s)
                compare_shards(comm, s, got, reference, "BaspAttention K=%d S=%d (%s)" % (k, s, comm.created_by))
                layer.close()


def local_attention(q, k, v, causal=False):
    """DistributedAttention's local attention: [b, S, h, D], K/V repeated to q's heads (grouped order)."""
    if k.shape[2] != q.shape[2]:
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[3])
    if causal:
        s = q.shape[1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)


def test_distributed_attention_with_a_process_group():
    hq, hkv = 2 * N, N
    expected_route = tg._route_for(None, "auto", "nccl")[0]
    layer = bt.DistributedAttention(local_attention, WORLD_PG, micro_batch=B, num_groups=1)
    check.equal(layer.comm.created_by, expected_route, "the layer's comm took the auto route")
    check.equal((layer.comm.world_size, layer.comm.group_size), (N, N), "Ulysses over the world")
    for s in (2 * N, 2 * N + 1):
        inputs, reference = problem(s, hq, hkv, seed=200 + s)
        got = run_layer(lambda q, k, v: layer(q, k, v, 0, None, causal=True, seq_len=s), layer.comm, inputs, s)
        compare_shards(layer.comm, s, got, reference, "DistributedAttention S=%d" % s)
    layer.close()
    check.true(layer.comm.closed, "the layer closed the comm it made")


def test_pipelined_attention_on_cuda():
    """BaspAttention and DistributedAttention with chunks = 2 and 3 (capped at the plans' maximum): the NCCL
    backend's stream-ordered head chunks (the forward's scatter and gather, the backward's dO scatter and dQ, dK,
    dV gathers by chunk) against the float64 reference and against chunks=1 on the same data (not bit for bit:
    SDPA's backward on CUDA adds in no fixed order)."""
    hq, hkv = 3 * N, N  # 3 query heads per rank at K = N: chunks of 1 and 2 heads, a K/V head read by 3
    with bt.comm_from_process_group(micro_batch=B, num_groups=1, timeout_ms=120000) as comm:
        s = 4 * comm.group_size + 1
        inputs, reference = problem(s, hq, hkv, seed=400)
        one = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=True)
        base = run_layer(one, comm, inputs, s, seq_len=s)
        one.close()
        for chunks in (2, 3):
            layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=True, chunks=chunks)
            got = run_layer(layer, comm, inputs, s, seq_len=s)
            what = "BaspAttention chunks=%d (%s)" % (chunks, comm.created_by)
            compare_shards(comm, s, got, reference, what)
            for name, a, e in zip(("out", "dq", "dk", "dv"), got, base):
                scale = e.abs().max().item() or 1.0
                check.true((a - e).abs().max().item() <= 1e-5 * scale, "%s: %s equals chunks=1 (max diff %.3g)"
                           % (what, name, (a - e).abs().max().item()))
            layer.close()
    layer = bt.DistributedAttention(local_attention, WORLD_PG, micro_batch=B, num_groups=1, chunks=2)
    inputs, reference = problem(s, hq, hkv, seed=401)
    got = run_layer(lambda q, k, v: layer(q, k, v, 0, None, causal=True, seq_len=s), layer.comm, inputs, s)
    compare_shards(layer.comm, s, got, reference, "DistributedAttention chunks=2")
    layer.close()


# ---- the custom operators and torch.compile ------------------------------------------------------------------

def test_head_scatter_and_gather_operators_on_cuda():
    with bt.comm_from_process_group(micro_batch=B, num_groups=1, timeout_ms=120000) as comm:
        s, heads = 2 * N + 1, 2 * N + 1
        plan = comm.plan(s, D, [heads, heads], torch.float32)
        info, pinfo = comm.query(s), plan.query()
        g = torch.Generator().manual_seed(5)
        whole = [torch.randn(B, s, heads, D, generator=g) for _ in range(2)]
        weights = [torch.randn(B, s, heads, D, generator=g) for _ in range(2)]  # d(loss)/d(head-sharded)
        ins = [basp.data.local_shard(w, info).to(DEV).requires_grad_() for w in whole]
        outs = bt.head_scatter(plan, *ins)
        check.equal(len(outs), 2, "one output per tensor")
        for t in range(2):
            h = pinfo.head_ranges[t]
            check.true(torch.equal(outs[t].detach().cpu(), whole[t][info.sequences][:, :, h.start:h.stop]),
                       "head_scatter, tensor %d: heads %s of whole sequences" % (t, h))
        mine = [w[info.sequences][:, :, pinfo.head_ranges[t].start:pinfo.head_ranges[t].stop].to(DEV)
                for t, w in enumerate(weights)]
        sum(((o * w).sum() for o, w in zip(outs, mine)), torch.zeros((), device=DEV)).backward()
        for t in range(2):
            check.true(torch.equal(ins[t].grad.cpu(), basp.data.local_shard(weights[t], info)),
                       "head_scatter's backward (the gather), tensor %d" % t)
        heads_in = [o.detach().clone().requires_grad_() for o in outs]
        back = bt.head_gather(plan, *heads_in)
        check.true(all(torch.equal(a.detach(), b.detach()) for a, b in zip(back, ins)), "head_gather inverts it")
        sum(((b * w.to(DEV)).sum() for b, w in zip(back, (basp.data.local_shard(w, info) for w in weights))),
            torch.zeros((), device=DEV)).backward()
        check.true(all(torch.equal(h.grad, m) for h, m in zip(heads_in, mine)), "head_gather's backward (the scatter)")
        if bt.HAVE_CUSTOM_OPS:
            check.true(hasattr(torch.ops.basp, "scatter") and hasattr(torch.ops.basp, "gather"),
                       "torch.ops.basp.scatter and gather are registered")
        plan.close()


def test_torch_compile_aot_eager_on_cuda():
    if not bt.HAVE_CUSTOM_OPS:
        check.true(True, "not run: PyTorch %s has no torch.library.custom_op (2.4)" % torch.__version__)
        if RANK == 0:
            print("not run: torch.compile (PyTorch %s < 2.4)" % torch.__version__, flush=True)
        return
    hq, hkv = 2 * N, N
    with bt.comm_from_process_group(micro_batch=B, num_groups=1, timeout_ms=120000) as comm:
        s = 4 * comm.group_size
        inputs, reference = problem(s, hq, hkv, seed=300)
        layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=True)
        layer.prepare(s, torch.float32, DEV)
        eager = run_layer(layer, comm, inputs, s, seq_len=s)
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        for attempt in ("first call", "second call"):
            got = run_layer(compiled, comm, inputs, s, seq_len=s)
            for name, a, e in zip(("out", "dq", "dk", "dv"), got, eager):
                scale = e.abs().max().item() or 1.0
                # Not bit for bit: SDPA's memory-efficient backward on CUDA adds in no fixed order.
                check.true((a - e).abs().max().item() <= 1e-5 * scale, "aot_eager %s, %s: %s equals eager (max diff "
                           "%.3g)" % (attempt, comm.created_by, name, (a - e).abs().max().item()))
        compare_shards(comm, s, got, reference, "compiled BaspAttention")
        layer.close()


if __name__ == "__main__":
    setup()
    try:
        run(globals(), TorchWorld(CONTROL) if N > 1 else None, sys.argv)
    finally:
        dist.barrier(group=CONTROL)
        dist.destroy_process_group()
