"""The binding's CUDA path on the NCCL backend: device tensors, the current stream, an explicit stream, and
BaspAttention on the GPU against the CPU. One rank (one GPU: NCCL refuses two ranks on one device), so the
group has K = 1 and the exchange is a device-local copy through the NCCL backend's path.

Exits 77 (CTest: skipped, never passed) when PyTorch sees no CUDA device."""
import sys

import torch
from mpi4py import MPI

if not torch.cuda.is_available():
    print("skipped: PyTorch %s sees no CUDA device" % torch.__version__, flush=True)
    sys.exit(77)

import basp  # noqa: E402 -- after the skip, so that a machine without a GPU loads nothing
import basp.torch as bt  # noqa: E402
from harness import check, expect_error, run  # noqa: E402

WORLD = MPI.COMM_WORLD
torch.cuda.set_device(WORLD.Get_rank() % torch.cuda.device_count())
DEV = torch.device("cuda", torch.cuda.current_device())


def test_scatter_gather_on_device_streams():
    with basp.Comm(WORLD, micro_batch=2, backend="nccl") as comm:
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


def test_attention_on_the_gpu_matches_the_cpu():
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


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
