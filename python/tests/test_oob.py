"""basp.Comm.from_oob under mpirun (CTest: 2 and 3 ranks), over an all-gather implemented with mpi4py
(Iallgather, Request.Test) on a duplicate of the world, as any framework's would be. Every scenario runs on every
rank and the statuses are gathered with mpi4py, so that a rank that succeeds or fails alone is caught:
  - matching configs: libbasp's agreement and readiness rounds run over the Python callbacks; without a GPU every
    rank then fails with BASP_ERROR_CUDA (with one GPU per rank the comm is made and checked);
  - a config that differs on one rank: BASP_ERROR_MISMATCH on every rank, naming the field;
  - a start, test or free that raises (or a test that returns no bool) on every rank: BASP_ERROR_OOB on every rank,
    naming the callback and the Python exception; a KeyboardInterrupt comes out as itself;
  - a test that never completes: BASP_ERROR_TIMEOUT on every rank after timeout_ms;
  - a bad oob object or argument: basp.Error naming it, before any callback runs, and no comm."""
import contextlib
import os
import sys
import time
import types

from mpi4py import MPI

import basp
from basp import Status
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
INVALID = Status.ERROR_INVALID_ARGUMENT


def cuda_devices():
    """GPUs this process can use: PyTorch's count where it is importable (it also makes the device current for this
    rank), else 0 without an NVIDIA driver, else None (unknown: any consistent outcome is accepted)."""
    try:
        import torch
    except ImportError:
        return 0 if not os.path.exists("/dev/nvidiactl") else None
    count = torch.cuda.device_count()
    if count:
        torch.cuda.set_device(RANK % count)
    return count


GPUS = cuda_devices()


class MpiAllgather(basp.OobAllgather):
    """The all-gather over an mpi4py communicator, with ways to misbehave: `fail` names the method that raises
    ("start", "test", "free", "interrupt" for a KeyboardInterrupt in start, "not-bool" for a test returning None),
    `never_done` makes test say "in progress" forever. Counts the calls."""

    def __init__(self, comm, fail=None, never_done=False):
        super().__init__(comm.Get_rank(), comm.Get_size())
        self.comm = comm
        self.fail = fail
        self.never_done = never_done
        self.starts = self.tests = self.frees = 0
        self.unfinished = []

    def start(self, send, recv, nbytes):
        self.starts += 1
        if self.fail == "start":
            raise RuntimeError("start failed on purpose")
        if self.fail == "interrupt":
            raise KeyboardInterrupt()
        return self.comm.Iallgather([send, nbytes, MPI.BYTE], [recv, nbytes, MPI.BYTE])

    def test(self, request):
        self.tests += 1
        if self.fail == "test":
            raise ValueError("test failed on purpose")
        if self.fail == "not-bool":
            return None
        return False if self.never_done else request.Test()

    def free(self, request):
        self.frees += 1
        # MPI forbids freeing the request of an unfinished collective: kept, and completed by `channel` (every rank
        # started it, so it does complete).
        if not request.Test():
            self.unfinished.append(request)
        if self.fail == "free":
            raise KeyError("free failed on purpose")


@contextlib.contextmanager
def channel(**kwargs):
    """An MpiAllgather on a duplicate of the world (the library's all-gathers never meet the test's own)."""
    comm = WORLD.Dup()
    oob = MpiAllgather(comm, **kwargs)
    try:
        yield oob
    finally:
        MPI.Request.Waitall(oob.unfinished)
        comm.Free()


def live_comms():
    return [h for h in list(basp._handle._live) if isinstance(h, basp.Comm) and not h.closed]


def create(oob, **kwargs):
    """(status, basp.Error or None, comm or None, seconds) of basp.Comm.from_oob on this rank."""
    kwargs.setdefault("micro_batch", 1)
    kwargs.setdefault("timeout_ms", 20000)
    t0 = time.monotonic()
    try:
        comm = basp.Comm.from_oob(oob, **kwargs)
    except basp.Error as e:
        return e.status, e, None, time.monotonic() - t0
    return Status.SUCCESS, None, comm, time.monotonic() - t0


def expect_everywhere(status, got, error, *fragments):
    """This rank got basp.Error(status) whose message holds every fragment, and so did every other rank."""
    check.equal(got, status, "status on rank %d (%s)" % (RANK, error))
    for f in fragments:
        check.true(f in error.message, "rank %d: message %r lacks %r" % (RANK, error.message, f))
    check.equal(WORLD.allgather(int(got)), [int(status)] * N, "every rank's status")


def test_matching_configs_run_the_creation_over_the_callbacks():
    before = len(live_comms())
    with channel() as oob:
        status, error, comm, _ = create(oob)
        check.equal(WORLD.allgather(int(status)), [int(status)] * N, "every rank has the same outcome")
        if GPUS == 0:
            expect_everywhere(Status.ERROR_CUDA, status, error, "basp_comm_create_oob",
                              "the NCCL backend needs a CUDA device")
        elif GPUS is not None and GPUS >= N:
            check.equal(status, Status.SUCCESS, "a comm with a GPU per rank (%s)" % error)
        if comm is not None:
            check.equal((comm.backend, comm.world_size, comm.rank, comm.num_groups, comm.group_size),
                        (basp.Backend.NCCL, N, RANK, 1, N), "the comm: B = 1, one group of K = N")
            comm.close()
        # The agreement's rounds and the readiness round, at least, each request freed once.
        check.true(oob.starts >= 3, "the callbacks carried the creation: %d starts" % oob.starts)
        check.equal((oob.frees, oob.tests >= oob.starts), (oob.starts, True), "every request tested and freed")
    check.equal(len(live_comms()), before, "no comm is left")


def test_a_comm_of_batch_plans_only_needs_no_micro_batch():
    """micro_batch=None with batch_capacity: a comm of batch plans only (docs/batch.md), NCCL over the callbacks."""
    with channel() as oob:
        status, error, comm, _ = create(oob, micro_batch=None, batch_capacity=64)
        check.equal(WORLD.allgather(int(status)), [int(status)] * N, "every rank has the same outcome")
        if GPUS == 0:
            expect_everywhere(Status.ERROR_CUDA, status, error, "the NCCL backend needs a CUDA device")
        elif GPUS is not None and GPUS >= N:
            check.equal(status, Status.SUCCESS, "a batch comm with a GPU per rank (%s)" % error)
        if comm is not None:
            check.equal((comm.batch_capacity, comm.num_groups, comm.group_size), (64, N, 1),
                        "the comm: batch_capacity 64, its own groups N groups of one")
            comm.close()
        check.true(oob.starts >= 3, "the library ran the creation (%d starts): the binding did not refuse it"
                   % oob.starts)


def test_an_object_that_only_has_the_methods_works_too():
    with channel() as inner:
        duck = types.SimpleNamespace(rank=RANK, size=N, start=inner.start, test=inner.test, free=inner.free)
        status, error, comm, _ = create(duck)
        if GPUS == 0:
            expect_everywhere(Status.ERROR_CUDA, status, error, "the NCCL backend needs a CUDA device")
        elif comm is not None:
            check.equal(comm.world_size, N, "the comm's world")
            comm.close()
        check.true(inner.starts >= 3 and inner.frees == inner.starts, "its methods were called")


if N > 1:
    def test_a_config_that_differs_on_one_rank_is_a_mismatch_everywhere():
        for field, value, others in (("num_groups", 1, -1), ("micro_batch", 2 * N, N)):
            with channel() as oob:
                kwargs = {"micro_batch": N, field: value if RANK == 1 else others}
                status, error, comm, seconds = create(oob, **kwargs)
                expect_everywhere(Status.ERROR_MISMATCH, status, error, "basp_comm_create_oob", field,
                                  "rank 1 = %d" % value)
                check.true(comm is None and seconds < 5, "no comm, at once (%.1f s), not after the timeout"
                           % seconds)


def test_a_start_that_raises_is_an_oob_error_naming_it():
    with channel(fail="start") as oob:
        status, error, _, _ = create(oob)
        expect_everywhere(Status.ERROR_OOB, status, error, "oob->allgather_start returned -1",
                          "basp.Comm.from_oob: oob.start raised RuntimeError: start failed on purpose")
        check.true(isinstance(error.__cause__, RuntimeError), "the exception is the error's cause")
        check.equal((oob.starts, oob.frees), (1, 0), "one start, nothing started to free")


def test_a_test_or_free_that_raises_is_an_oob_error_naming_it():
    cases = (("test", "oob->allgather_test returned -1", "oob.test raised ValueError: test failed on purpose"),
             ("not-bool", "oob->allgather_test returned -1", "oob.test returned None (a NoneType), not a bool"),
             ("free", "oob->allgather_free returned -1", "oob.free raised KeyError: 'free failed on purpose'"))
    for fail, library_part, python_part in cases:
        with channel(fail=fail) as oob:
            status, error, comm, _ = create(oob)
            expect_everywhere(Status.ERROR_OOB, status, error, library_part, python_part)
            check.equal((comm, oob.starts, oob.frees), (None, 1, 1), "%s: the one request was freed" % fail)


def test_a_keyboard_interrupt_in_a_callback_comes_out_as_itself():
    with channel(fail="interrupt") as oob:
        try:
            create(oob)
        except KeyboardInterrupt:
            interrupted = True
        else:
            interrupted = False
        check.equal(WORLD.allgather(interrupted), [True] * N, "KeyboardInterrupt on every rank")


def test_a_test_that_never_completes_times_out_everywhere():
    with channel(never_done=True) as oob:
        status, error, _, seconds = create(oob, timeout_ms=500)
        expect_everywhere(Status.ERROR_TIMEOUT, status, error, "timed out after", "basp_comm_create_oob",
                          "oob->allgather_test never completed")
        check.true(0.45 <= seconds < 5, "failed after the 500 ms timeout, not much later: %.2f s" % seconds)
        check.equal((oob.starts, oob.frees), (1, 1), "the abandoned request was freed")


class NoFree:
    rank, size = RANK, N

    def start(self, send, recv, nbytes):
        raise AssertionError("never called")

    test = start


def test_bad_arguments_are_named_and_nothing_is_created():
    where = "basp.Comm.from_oob: "
    before = len(live_comms())
    with channel() as oob:
        def with_fields(**fields):
            return types.SimpleNamespace(**dict(dict(rank=RANK, size=N, start=oob.start, test=oob.test,
                                                     free=oob.free), **fields))

        cases = ((NoFree(), "oob (a NoFree) has no method free (see basp.OobAllgather)"),
                 (None, "oob (a NoneType) has no method start"),
                 (with_fields(test=3), "oob (a SimpleNamespace) has no method test"),
                 (with_fields(rank=N), "oob.rank (%d) is outside 0..%d (oob.size %d)" % (N, N - 1, N)),
                 (with_fields(rank=-1), "oob.rank (-1) is outside 0..%d" % (N - 1)),
                 (with_fields(size=0, rank=0), "oob.size (0) must be at least 1"),
                 (with_fields(rank="0"), "oob.rank ('0', a str) must be an int"),
                 (with_fields(size=True), "oob.size (True, a bool) must be an int"),
                 (with_fields(size=None), "oob.size (None, a NoneType) must be an int"))
        for bad, fragment in cases:
            expect_error(lambda: basp.Comm.from_oob(bad, micro_batch=1), INVALID, where + fragment)
        expect_error(lambda: basp.Comm.from_oob(oob), INVALID, where + "micro_batch is required")
        expect_error(lambda: basp.Comm.from_oob(oob, config={}), INVALID,
                     where + "config (a dict) is not a basp.CommConfig")
        expect_error(lambda: basp.Comm.from_oob(oob, micro_batch=1, placement="ring"), INVALID, "placement ('ring')")
        check.equal(oob.starts, 0, "the binding refused all of these before calling the library")
        # A config the library refuses (the agreement runs, so that every rank names it): collective.
        cfg = basp.CommConfig(micro_batch=1)  # backend MPI
        status, error, _, _ = create(oob, config=cfg)
        expect_everywhere(INVALID, status, error, "config->backend (0) is not BASP_BACKEND_NCCL")
    check.equal(len(live_comms()), before, "no comm was created")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
