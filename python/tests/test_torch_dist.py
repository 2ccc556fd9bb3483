"""basp.torch.comm_from_process_group: a comm from a torch.distributed process group, without MPI. One process
(a gloo group of one rank). Without a GPU it checks the refusals (micro_batch missing, torch.distributed not
initialised, no CUDA device) and the NCCL helper's argument check; with one, the comm's creation through
torch.distributed and NCCL (unique id, ncclCommInitRank, the split) and a bit-exact K = 1 round trip (a device
copy: one rank has no NCCL exchange). Run without mpirun."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import basp
import basp.torch as bt
from basp import _nccl
from harness import check, expect_error, run

INV = basp.Status.ERROR_INVALID_ARGUMENT


def test_refusals_before_torch_distributed():
    expect_error(lambda: bt.comm_from_process_group(), INV, "micro_batch is required")
    check.true(not dist.is_initialized(), "torch.distributed starts uninitialised")
    expect_error(lambda: bt.comm_from_process_group(micro_batch=2), INV, "init_process_group")
    expect_error(lambda: _nccl.init_rank(1, b"short", 0), INV, "128 bytes")


def test_one_rank_group():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=0, world_size=1)
        try:
            if not torch.cuda.is_available():
                expect_error(lambda: bt.comm_from_process_group(micro_batch=2), basp.Status.ERROR_CUDA,
                             "needs a CUDA device on every rank", "rank 0: PyTorch")
                return
            torch.cuda.set_device(0)
            with bt.comm_from_process_group(micro_batch=2) as comm:
                check.equal(comm.backend, basp.Backend.NCCL, "an NCCL comm")
                check.equal((comm.world_size, comm.group_size), (1, 1), "one rank, K = 1")
                plan = comm.plan(8, 16, [4, 2, 2], torch.bfloat16)
                ins = [torch.arange(torch.Size(plan.seq_sharded_shape(t)).numel(), device="cuda", dtype=torch.int16)
                       .view(torch.bfloat16).reshape(plan.seq_sharded_shape(t)) for t in range(3)]
                outs = plan.scatter(ins)
                back = plan.gather(outs, [torch.full_like(x, float("nan")) for x in ins])
                torch.cuda.synchronize()
                check.true(all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(ins, back)),
                           "round trip, bit for bit")
                # K = 1: a device copy, no NCCL exchange (the NCCL part here is the comm's creation).
                check.equal(plan.query().last_path, basp.Path.LOCAL, "K = 1 takes the device-local path")
                plan.close()
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    run(globals(), None, sys.argv)
