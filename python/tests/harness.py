"""A tiny runner for the Python tests (no pytest dependency): runs every test_* function of a module in
order, prints one line per test, and on the first failure prints the traceback and aborts every MPI rank, so a
failure mid-collective can never leave the other ranks hanging."""
import os
import socket
import sys
import time
import traceback


class Checks:
    """Counts assertions so that a test that checked nothing is reported as a failure."""

    def __init__(self):
        self.count = 0

    def true(self, cond, what):
        self.count += 1
        if not cond:
            raise AssertionError(what)

    def equal(self, got, expected, what):
        self.count += 1
        if got != expected:
            raise AssertionError("%s: got %r, expected %r" % (what, got, expected))


check = Checks()


def random_membership(rng, world_size):
    """Groups of random sizes summing to `world_size` over the world's ranks permuted (batch plans: any membership);
    the same on every rank when `rng` (numpy.random.RandomState) has the same seed."""
    sizes, left = [], world_size
    while left:
        k = int(rng.randint(1, left + 1))
        sizes.append(k)
        left -= k
    ranks = [int(r) for r in rng.permutation(world_size)]
    groups, at = [], 0
    for k in sizes:
        groups.append(ranks[at:at + k])
        at += k
    return groups


def expect_error(fn, status, *fragments):
    """fn() must raise basp.Error with `status` and a message containing every fragment; returns the error."""
    import basp
    try:
        fn()
    except basp.Error as e:
        check.equal(e.status, status, "status of %s" % e)
        for f in fragments:
            check.true(f in e.message, "message %r lacks %r" % (e.message, f))
        return e
    raise AssertionError("no basp.Error (expected %s with %r)" % (status, fragments))


def set_rendezvous(world):
    """The environment torch.distributed's env:// rendezvous reads, for the ranks of this job on one machine:
    rank 0 picks a free port on the loopback and broadcasts it over `world` (an mpi4py comm; None: one process)."""
    port = None
    if world is None or world.Get_rank() == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(world.bcast(port, root=0) if world is not None else port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: never an interface another host would need


def run(module_globals, mpi_comm=None, argv=None):
    """Runs the module's test_* functions in order (or those named in argv[1:]): one line per test on rank 0 with
    its checks and its time (rank 0's, up to the barrier that follows it), then "all N tests passed". mpi_comm: an
    mpi4py communicator, or any object with Get_rank, Get_size, Barrier and Abort (test_torch_ranks.py's over
    torch.distributed); None for one process."""
    rank = mpi_comm.Get_rank() if mpi_comm is not None else 0
    size = mpi_comm.Get_size() if mpi_comm is not None else 1
    only = (argv or [])[1:]
    tests = [(name, fn) for name, fn in module_globals.items()
             if name.startswith("test_") and callable(fn) and (not only or name in only)]
    if not tests:
        print("no tests selected", flush=True)
        sys.exit(1)
    for name, fn in tests:
        before = check.count
        started = time.monotonic()
        try:
            fn()
            if check.count == before:
                raise AssertionError("the test checked nothing")
        except BaseException:  # noqa: BLE001 -- report everything, then abort all ranks
            print("[rank %d/%d] FAIL %s\n%s" % (rank, size, name, traceback.format_exc()), flush=True)
            if mpi_comm is not None and size > 1:
                mpi_comm.Abort(1)
            sys.exit(1)
        if mpi_comm is not None:
            mpi_comm.Barrier()
        if rank == 0:
            print("ok %s (%d checks on rank 0, %.2f s)" % (name, check.count - before, time.monotonic() - started),
                  flush=True)
    if rank == 0:
        print("all %d tests passed on %d rank(s)" % (len(tests), size), flush=True)
