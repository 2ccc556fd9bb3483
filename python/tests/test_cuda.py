"""The binding's CUDA path on the NCCL backend: device tensors, the current stream, an explicit stream, a comm
made over an out-of-band all-gather (basp.Comm.from_oob), and BaspAttention on the GPU against a float64 CPU
reference. One rank (one GPU), so the group has K = 1 and the exchange is a device-local copy through the NCCL
backend's path.

It runs two ways:
  under mpirun with mpi4py (CTest python_cuda_np1): comms from MPI_COMM_WORLD, plus one from a one-rank OOB;
  with no MPI at all (`test_cuda.py --no-mpi`, what scripts/device-check.sh runs against its GPU-only libbasp,
  and what happens when mpi4py cannot be imported): every comm is made by basp.Comm.from_oob over a one-rank
  all-gather in pure Python (it copies send to recv), so libbasp creates the group's NCCL communicator itself
  (ncclGetUniqueId, ncclCommInitRank) on the GPU.

Exits 77 (CTest: skipped, never passed) when PyTorch sees no CUDA device."""
import contextlib
import math
import sys

import torch

if not torch.cuda.is_available():
    print("skipped: PyTorch %s sees no CUDA device" % torch.__version__, flush=True)
    sys.exit(77)

NO_MPI = "--no-mpi" in sys.argv
ARGV = [a for a in sys.argv if a != "--no-mpi"]
WORLD = None
if not NO_MPI:
    try:
        from mpi4py import MPI
        WORLD = MPI.COMM_WORLD
    except Exception as e:  # noqa: BLE001 -- ImportError, or mpi4py finding no MPI library
        print("no MPI (%s: %s): running with NCCL communicators only" % (type(e).__name__, e), flush=True)
        NO_MPI = True

import basp  # noqa: E402 -- after the skip, so that a machine without a GPU loads nothing
import basp.torch as bt  # noqa: E402
from harness import check, expect_error, run  # noqa: E402

torch.cuda.set_device(0 if WORLD is None else WORLD.Get_rank() % torch.cuda.device_count())
DEV = torch.device("cuda", torch.cuda.current_device())
print("PyTorch %s (CUDA %s) on %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(DEV)),
      flush=True)


class SelfAllgather(basp.OobAllgather):
    """The all-gather of a world of one rank: recv is send. Counts its calls, to show the library used it."""

    def __init__(self):
        super().__init__(0, 1)
        self.calls = {"start": 0, "test": 0, "free": 0}

    def start(self, send, recv, nbytes):
        self.calls["start"] += 1
        recv[:nbytes] = send
        return nbytes

    def test(self, handle):
        self.calls["test"] += 1
        return True

    def free(self, handle):
        self.calls["free"] += 1


def one_rank_oob_comm(micro_batch):
    """basp.Comm.from_oob over SelfAllgather on the current device, checked to have used the all-gather."""
    torch.zeros(1, device=DEV)  # the device's primary context, current on this thread
    oob = SelfAllgather()
    comm = basp.Comm.from_oob(oob, micro_batch=micro_batch, timeout_ms=60000)
    check.true(oob.calls["start"] >= 3 and oob.calls["free"] == oob.calls["start"],
               "the creation ran its all-gathers over the OOB, each freed: %r" % oob.calls)
    return comm


@contextlib.contextmanager
def nccl_backend_comm(micro_batch):
    """A basp.Comm on the NCCL backend: from MPI_COMM_WORLD, or (no MPI) over a one-rank OOB."""
    if WORLD is not None:
        with basp.Comm(WORLD, micro_batch=micro_batch, backend="nccl") as comm:
            yield comm
        return
    with one_rank_oob_comm(micro_batch) as comm:
        yield comm


def test_comm_from_a_one_rank_oob():
    with one_rank_oob_comm(micro_batch=3) as comm:
        check.equal(comm.backend, basp.Backend.NCCL, "an NCCL comm")
        check.equal((comm.world_size, comm.group_size, comm.num_groups), (1, 1, 1), "one rank, K = 1, G = 1")
        plan = comm.plan(6, 24, [4, 2], torch.float16)
        # Values that are a function of the coordinates (b, s, h, d), distinct for every element.
        ins = []
        for t, heads in enumerate((4, 2)):
            check.equal(tuple(plan.seq_sharded_shape(t)), (3, 6, heads, 24), "tensor %d, sequence-sharded" % t)
            b, s, h, d = torch.meshgrid(*(torch.arange(n, device=DEV) for n in (3, 6, heads, 24)),
                                        indexing="ij")
            ins.append((t * 4096 + ((b * 6 + s) * heads + h) * 24 + d).to(torch.int16).view(torch.float16))
        outs = plan.scatter(ins, [torch.full_like(x, float("nan")) for x in ins])
        torch.cuda.synchronize()
        # K = 1: the head-sharded tensors are the whole tensors.
        check.true(all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ins, outs)),
                   "K = 1 scatter is the identity, bit for bit")
        check.equal(plan.query().last_path, basp.Path.LOCAL, "K = 1 takes the device-local path")
        back = plan.gather(outs, [torch.full_like(x, float("nan")) for x in ins])
        torch.cuda.synchronize()
        check.true(all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ins, back)),
                   "gather restores the inputs, bit for bit")
        check.true(comm.async_error() is None, "no asynchronous error")
        plan.close()


def test_scatter_gather_on_device_streams():
    with nccl_backend_comm(micro_batch=2) as comm:
        check.equal(comm.backend, basp.Backend.NCCL, "an NCCL comm")
        k = comm.group_size
        plan = comm.plan(4 * k, 8, [2 * k, k, k], torch.bfloat16)
        g = torch.Generator(device=DEV).manual_seed(3)
        ins = [torch.randn(plan.seq_sharded_shape(t), generator=g, device=DEV).to(torch.bfloat16)
               for t in range(3)]
        outs = plan.scatter(ins)  # the current stream
        back = plan.gather(outs, [torch.full_like(x, 7) for x in ins])
        torch.cuda.synchronize()
        check.true(all(torch.equal(a, b) for a, b in zip(ins, back)), "round trip on the current stream")
        check.true(plan.query().last_path in (basp.Path.LOCAL, basp.Path.NCCL), "an NCCL-backend path")

        side = torch.cuda.Stream(device=DEV)
        side.wait_stream(torch.cuda.current_stream(DEV))
        outs2 = plan.scatter(ins, [torch.full_like(o, 9) for o in outs], stream=side)
        torch.cuda.current_stream(DEV).wait_stream(side)
        check.true(all(torch.equal(a, b) for a, b in zip(outs, outs2)), "scatter on an explicit stream")
        raw = plan.gather(outs2, [torch.full_like(x, 5) for x in ins], stream=side.cuda_stream)
        torch.cuda.current_stream(DEV).wait_stream(side)
        check.true(all(torch.equal(a, b) for a, b in zip(ins, raw)), "gather on a raw cudaStream_t")

        inv = basp.Status.ERROR_INVALID_ARGUMENT
        expect_error(lambda: plan.scatter([x.cpu() for x in ins]), inv, "inputs[0] is in host memory")
        check.true(comm.async_error() is None, "no asynchronous error")
        plan.close()


def reference_attention(q, k, v, causal):
    """Attention in float64 on the CPU, written independently of basp.torch: [b, S, h, D] tensors, query head h
    reads K/V head h // (Hq / Hkv)."""
    hq, hkv, s, d = q.shape[2], k.shape[2], q.shape[1], q.shape[3]
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = k.index_select(2, kv_of), v.index_select(2, kv_of)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), vv)


def test_attention_on_the_gpu_matches_a_cpu_reference():
    b, s, hq, hkv, d = 2, 16, 4, 2, 8
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(b, s, h, d, generator=g) for h in (hq, hkv, hkv))
    dout = torch.randn(b, s, hq, d, generator=g)

    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref_out = reference_attention(*ref_leaves, causal=True)
    (ref_out * dout.double()).sum().backward()
    expected = [ref_out.detach()] + [t.grad for t in ref_leaves]

    with nccl_backend_comm(micro_batch=b) as comm:
        leaves = [t.to(DEV).detach().requires_grad_() for t in (q, k, v)]
        layer = bt.BaspAttention(comm, hq, d, num_kv_heads=hkv, causal=True)
        out = layer(*leaves)
        (out * dout.to(DEV)).sum().backward()
        got = [out.detach().cpu()] + [t.grad.cpu() for t in leaves]
        layer.close()
    for name, a, c in zip(("out", "dq", "dk", "dv"), got, expected):
        check.true(torch.allclose(a.double(), c, rtol=1e-3, atol=1e-4), "%s on the GPU equals the reference" % name)


def test_batch_attention_on_the_gpu_matches_a_cpu_reference():
    """A comm of batch plans only (NCCL, one rank over the OOB): the planner, pack_batch, and BaspAttention with a
    batch plan (THD) against per-document causal attention in float64 on the CPU."""
    hq, hkv, d = 4, 2, 8
    lengths = [5, 11, 3, 9]
    g = torch.Generator().manual_seed(12)
    docs = [(torch.randn(n, hq, d, generator=g), torch.randn(n, hkv, d, generator=g),
             torch.randn(n, hkv, d, generator=g), torch.randn(n, hq, d, generator=g)) for n in lengths]
    torch.zeros(1, device=DEV)
    oob = SelfAllgather()
    with basp.Comm.from_oob(oob, batch_capacity=64, timeout_ms=60000) as comm:
        check.equal((comm.backend, comm.batch_capacity), (basp.Backend.NCCL, 64), "a batch comm on NCCL")
        batch = comm.plan_batch(lengths, hq, hkv, d, torch.float32)
        check.equal([list(m) for m in batch.groups], [[0]], "one rank: one group of one")
        packed = [basp.data.pack_batch([doc[i] for doc in docs], batch) for i in range(4)]
        cu = [int(c) for c in packed[0].cu_seqlens]
        check.equal(cu[-1], sum(lengths), "the stream holds every token")
        leaves = [p.tokens.to(DEV).detach().requires_grad_() for p in packed[:3]]
        layer = bt.BaspAttention(comm, hq, d, num_kv_heads=hkv, causal=True, layout="thd")
        out = layer(*leaves, batch=batch)
        (out * packed[3].tokens.to(DEV)).sum().backward()
        got = [out.detach().cpu()] + [t.grad.cpu() for t in leaves]
        layer.close()
    # The reference, document by document in stream order (its boundaries from cu_seqlens).
    ref = [t.double().requires_grad_() for t in (packed[0].tokens, packed[1].tokens, packed[2].tokens)]
    pieces = []
    for i in range(len(cu) - 1):
        a, b = cu[i], cu[i + 1]
        pieces.append(reference_attention(*(t[a:b].unsqueeze(0) for t in ref), causal=True).squeeze(0))
    ref_out = torch.cat(pieces)
    (ref_out * packed[3].tokens.double()).sum().backward()
    expected = [ref_out.detach()] + [t.grad for t in ref]
    for name, a, c in zip(("out", "dq", "dk", "dv"), got, expected):
        check.true(torch.allclose(a.double(), c, rtol=1e-3, atol=1e-4),
                   "batch %s on the GPU equals the reference" % name)


if WORLD is not None:
    def test_attention_on_the_gpu_matches_the_cpu_comm():
        """With MPI only: the same layer on an MPI (host) comm and on the NCCL comm."""
        b, s, hq, hkv, d = 2, 16, 4, 2, 8
        with basp.Comm(WORLD, micro_batch=b, backend="nccl") as comm:
            g = torch.Generator().manual_seed(11)
            q, k, v = (torch.randn(b, s, h, d, generator=g) for h in (hq, hkv, hkv))
            dout = torch.randn(b, s, hq, d, generator=g)
            results = []
            for device in ("cpu", DEV):
                leaves = [t.to(device).detach().requires_grad_() for t in (q, k, v)]
                cpu_comm = basp.Comm(WORLD, micro_batch=b) if device == "cpu" else None
                layer = bt.BaspAttention(cpu_comm or comm, hq, d, num_kv_heads=hkv, causal=True)
                out = layer(*leaves)
                (out * dout.to(device)).sum().backward()
                results.append([out.detach().cpu()] + [t.grad.cpu() for t in leaves])
                layer.close()
                if cpu_comm is not None:
                    cpu_comm.close()
            for name, a, c in zip(("out", "dq", "dk", "dv"), *results):
                check.true(torch.allclose(a, c, rtol=1e-3, atol=1e-4), "%s on the GPU equals the CPU" % name)
else:
    print("not run without MPI: test_attention_on_the_gpu_matches_the_cpu_comm (the float64 reference covers "
          "the GPU result)", flush=True)


if __name__ == "__main__":
    run(globals(), WORLD, ARGV)
