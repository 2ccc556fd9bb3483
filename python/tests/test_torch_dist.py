"""basp.torch.comm_from_process_group: a comm from a torch.distributed process group, without MPI in the library
(basp.Comm.from_oob over basp.torch.ProcessGroupAllgather). Runs two ways:
  test_torch_dist.py          one process, a gloo group of one rank (CTest python_torch_dist, scripts/device-check.sh);
  test_torch_dist.py --mpi    under mpirun (CTest python_torch_dist_mpi_np2/np3): a gloo group over every rank of the
                              job, its rank and size from MPI, its port chosen by rank 0 and broadcast with mpi4py;
                              mpi4py also gathers each rank's outcome, so that a rank failing alone is caught.
Without a GPU it checks the refusals (micro_batch missing, torch.distributed not initialised, not a member of the
group), the all-gather itself, BASP_ERROR_CUDA on every rank for matching configs and BASP_ERROR_MISMATCH on every
rank for a config that differs on one rank; with a GPU per rank, the comm's creation, and with one rank a bit-exact
K = 1 round trip (a device copy: one rank has no NCCL exchange)."""
import sys
import time

import torch
import torch.distributed as dist

import basp
import basp.torch as bt
from harness import check, expect_error, run, set_rendezvous

USE_MPI = "--mpi" in sys.argv
ARGV = [a for a in sys.argv if a != "--mpi"]
if USE_MPI:
    from mpi4py import MPI
    WORLD = MPI.COMM_WORLD
    RANK, N = WORLD.Get_rank(), WORLD.Get_size()
else:
    WORLD, RANK, N = None, 0, 1
INV = basp.Status.ERROR_INVALID_ARGUMENT
GPUS = torch.cuda.device_count()


def everyone(value):
    """Every rank's value, by rank."""
    return WORLD.allgather(value) if WORLD is not None else [value]


def init_group():
    """The gloo world of this job (once): rank 0's free port, broadcast."""
    if dist.is_initialized():
        return
    set_rendezvous(WORLD)
    dist.init_process_group("gloo", init_method="env://", rank=RANK, world_size=N)
    if GPUS:
        torch.cuda.set_device(RANK % GPUS)


def outcome(fn):
    """(status, basp.Error or None, comm or None) of fn() on this rank."""
    try:
        return basp.Status.SUCCESS, None, fn()
    except basp.Error as e:
        return e.status, e, None


def expect_everywhere(status, got, error, *fragments):
    check.equal(got, status, "status on rank %d (%s)" % (RANK, error))
    for f in fragments:
        check.true(f in error.message, "rank %d: message %r lacks %r" % (RANK, error.message, f))
    check.equal(everyone(int(got)), [int(status)] * N, "every rank's status")


def test_refusals_before_torch_distributed():
    expect_error(lambda: bt.comm_from_process_group(), INV, "micro_batch is required")
    check.true(not dist.is_initialized(), "torch.distributed starts uninitialised")
    expect_error(lambda: bt.comm_from_process_group(micro_batch=2), INV,
                 "basp.torch.comm_from_process_group: torch.distributed is not initialised", "init_process_group")
    expect_error(lambda: bt.ProcessGroupAllgather(), INV, "basp.torch.ProcessGroupAllgather", "init_process_group")


def gather_through(oob, nbytes):
    """One all-gather driven as libbasp drives it: start, test until done, free. Returns recv."""
    send = bytes((RANK * 31 + i) % 256 for i in range(nbytes))
    recv = bytearray(b"\xa5" * (nbytes * oob.size))
    handle = oob.start(memoryview(send), memoryview(recv), nbytes)
    deadline = time.monotonic() + 60
    while not oob.test(handle):
        check.true(time.monotonic() < deadline, "the all-gather completes")
        time.sleep(0.001)
    oob.free(handle)
    return bytes(recv)


def test_the_all_gather_over_the_group():
    init_group()
    oob = bt.ProcessGroupAllgather()
    check.equal((oob.rank, oob.size, oob.device), (RANK, N, torch.device("cpu")), "gloo: rank, size, the CPU")
    for nbytes in (5, 1000, 0):
        expected = b"".join(bytes((r * 31 + i) % 256 for i in range(nbytes)) for r in range(N))
        check.equal(gather_through(oob, nbytes), expected, "every rank's bytes in rank order (%d each)" % nbytes)
    check.equal(bt.ProcessGroupAllgather._abandoned, [], "nothing left unfinished")


def round_trip_on_one_gpu(comm):
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


def test_matching_configs():
    init_group()
    status, error, comm = outcome(lambda: bt.comm_from_process_group(micro_batch=2 * N, timeout_ms=60000))
    check.equal(everyone(int(status)), [int(status)] * N, "every rank has the same outcome")
    if GPUS == 0:
        expect_everywhere(basp.Status.ERROR_CUDA, status, error, "basp_comm_create_oob",
                          "the NCCL backend needs a CUDA device")
        return
    if GPUS >= N:
        check.equal(status, basp.Status.SUCCESS, "a comm with a GPU per rank (%s)" % error)
    if comm is not None:
        with comm:
            check.equal(comm.backend, basp.Backend.NCCL, "an NCCL comm")
            check.equal((comm.world_size, comm.rank, comm.num_groups, comm.group_size), (N, RANK, N, 1),
                        "B = 2N: N groups of K = 1")
            if N == 1:
                round_trip_on_one_gpu(comm)


if N > 1:
    def test_a_config_that_differs_on_one_rank():
        init_group()
        status, error, comm = outcome(lambda: bt.comm_from_process_group(
            micro_batch=N, num_groups=1 if RANK == 1 else None, timeout_ms=60000))
        expect_everywhere(basp.Status.ERROR_MISMATCH, status, error, "basp_comm_create_oob", "num_groups",
                          "rank 1 = 1")
        check.true(comm is None, "no comm")

    def test_a_subgroup():
        init_group()
        members = list(range(1, N))  # all but rank 0: its ranks in the group are one less than in the world
        sub = dist.new_group(members)  # collective over the world
        if RANK == 0:
            expect_error(lambda: bt.comm_from_process_group(micro_batch=1, group=sub), INV,
                         "basp.torch.comm_from_process_group: this process is not a member of the group")
            return
        oob = bt.ProcessGroupAllgather(sub)
        check.equal((oob.rank, oob.size), (RANK - 1, N - 1), "the rank and size in the group")
        expected = b"".join(bytes((r * 31 + i) % 256 for i in range(3)) for r in members)
        check.equal(gather_through(oob, 3), expected, "the members' bytes")
        status, error, comm = outcome(lambda: bt.comm_from_process_group(micro_batch=1, group=sub))
        if GPUS == 0:
            check.equal(status, basp.Status.ERROR_CUDA, "no GPU (%s)" % error)
            check.true("the NCCL backend needs a CUDA device" in error.message, "message %r" % error.message)
        elif comm is not None:
            check.equal((comm.world_size, comm.rank), (N - 1, RANK - 1), "the comm spans the group")
            comm.close()


def test_destroy_the_group():
    init_group()
    dist.destroy_process_group()
    check.true(not dist.is_initialized(), "torch.distributed is down again")


if __name__ == "__main__":
    run(globals(), WORLD, ARGV)
