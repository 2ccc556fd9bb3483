"""Every error path of the binding raises basp.Error: the library's status and its basp_last_error() message
when the library found the problem, INVALID_ARGUMENT and a message naming the argument and its value when the
binding's own checks did; and a failed call changes nothing.

Run under mpirun with 2 or 3 ranks: with B = 1 the group is the whole world (K = N > 1)."""
import ctypes
import sys

import numpy as np
from mpi4py import MPI

import basp
from basp import Status
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
INVALID = Status.ERROR_INVALID_ARGUMENT
LIB = basp._library


def library_error(fn, status, *fragments):
    """expect_error, plus: the message is the library's (it is basp_last_error() and names the C function)."""
    e = expect_error(fn, status, *fragments)
    check.equal(e.message, basp.last_error(), "message is basp_last_error()")
    check.true(e.message.startswith("basp_"), "library message names its function: %r" % e.message)
    check.true(str(e).startswith(basp.status_string(status) + ": "), "str(Error) leads with the status")
    return e


def binding_error(fn, *fragments):
    e = expect_error(fn, INVALID, *fragments)
    check.true(e.message.startswith("basp."), "binding message names its function: %r" % e.message)
    return e


def test_comm_creation():
    library_error(lambda: basp.Comm(WORLD, micro_batch=0), INVALID, "basp_comm_create_mpi",
                  "config->micro_batch (0) must be positive")
    library_error(lambda: basp.Comm(WORLD, micro_batch=N, num_groups=2 * N), INVALID,
                  "num_groups (%d) does not divide the world size (%d)" % (2 * N, N))
    library_error(lambda: basp.Comm(WORLD, micro_batch=1, num_groups=N), INVALID,
                  "num_groups (%d) does not divide micro_batch (1)" % N)
    library_error(lambda: basp.Comm(WORLD, micro_batch=1, backend=7), INVALID, "config->backend (7)")
    library_error(lambda: basp.Comm(WORLD, micro_batch=1, placement=9), INVALID, "config->placement (9)")
    library_error(lambda: basp.Comm(MPI.COMM_NULL, micro_batch=1), INVALID, "MPI_COMM_NULL")
    binding_error(lambda: basp.Comm("world", micro_batch=1), "mpi_comm ('world', a str)")
    binding_error(lambda: basp.Comm(WORLD), "micro_batch is required")
    binding_error(lambda: basp.Comm(WORLD, micro_batch=1, backend="cuda"), "backend ('cuda')", "mpi, nccl")


def test_nccl_backend_request():
    # Without CUDA + NCCL in the build (or without a GPU) the library refuses; with both it may succeed. Either
    # way nothing but a basp.Error carrying the library's message may come out.
    try:
        comm = basp.Comm(WORLD, micro_batch=1, backend="nccl")
    except basp.Error as e:
        check.true(e.status in (Status.ERROR_UNSUPPORTED, Status.ERROR_CUDA, Status.ERROR_NCCL),
                   "NCCL refusal status: %s" % e)
        check.true(e.message.startswith("basp_comm_create_mpi: "), "library message: %r" % e.message)
    else:
        check.equal(comm.backend, basp.Backend.NCCL, "an NCCL comm")
        comm.close()


def test_bad_structs():
    for field, value, fragment in (("magic", 0, "config->magic (0x0) is wrong"),
                                   ("version", 2, "config->version (2) is not supported"),
                                   ("size", 8, "config->size (8)"),
                                   ("reserved0", 1, "config->reserved0 (1) must be 0")):
        cfg = basp.CommConfig(micro_batch=1)
        setattr(cfg, field, value)
        status = INVALID if field == "reserved0" else Status.ERROR_BAD_STRUCT
        library_error(lambda: basp.Comm(WORLD, config=cfg), status, fragment)
    binding_error(lambda: basp.Comm(WORLD, config=object()), "config (a object) is not a basp.CommConfig")


def test_comm_queries():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        library_error(lambda: comm.query(0, N), INVALID, "rank (%d) is outside 0..%d" % (N, N - 1))
        # Any S is accepted: the tokens split as torch.tensor_split does (position 0 one more).
        uneven = comm.query(k + 1)
        l = comm.group_position
        check.equal((uneven.token_begin, uneven.token_end), (0, 2) if l == 0 else (l + 1, l + 2),
                    "seq_len K + 1 is split, not refused")
        library_error(lambda: comm.query(-k), INVALID, "seq_len (%d)" % -k)
        library_error(lambda: comm.group_ranks(1), INVALID, "group_index (1) is outside 0..0")


def test_closed_and_stale_handles():
    comm = basp.Comm(WORLD, micro_batch=1)
    stale = comm.handle
    check.true(not comm.closed and repr(comm).startswith("basp.Comm(N=%d " % N), "open: %r" % comm)
    comm.close()
    comm.close()  # idempotent
    check.true(comm.closed and comm.handle is None and repr(comm).endswith(", closed)"), "closed: %r" % comm)
    library_error(comm.query, Status.ERROR_INVALID_HANDLE, "comm is NULL")
    library_error(lambda: comm.plan(2 * N, 4, [N], np.float32), Status.ERROR_INVALID_HANDLE, "comm is NULL")
    library_error(lambda: LIB.check(LIB.lib().basp_comm_destroy(stale)), Status.ERROR_INVALID_HANDLE,
                  "is not a live basp_comm_t")
    with basp.Comm(WORLD, micro_batch=1) as comm:
        plan = comm.plan(2 * N, 4, [N], np.float32)
        x = np.ones(plan.seq_sharded_shape(), dtype=np.float32)
        stale = plan.handle
        with plan as same:
            check.true(same is plan and not plan.closed, "a plan is its own context manager")
        check.true(plan.closed and repr(plan).endswith(", closed)"), "closed by with: %r" % plan)
        plan.close()
        library_error(lambda: plan.scatter([x]), Status.ERROR_INVALID_HANDLE, "plan is NULL")
        library_error(lambda: LIB.check(LIB.lib().basp_plan_destroy(stale)), Status.ERROR_INVALID_HANDLE,
                      "is not a live basp_plan_t")
        info = basp.PlanInfoStruct()
        library_error(lambda: LIB.check(LIB.lib().basp_plan_query(comm.handle, ctypes.byref(info))),
                      Status.ERROR_INVALID_HANDLE, "is not a live basp_plan_t")


def test_plan_creation():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size  # = N
        # Head counts and sequence lengths that K does not divide are plans, no longer refused;
        # what is refused now is a key/value tensor whose head count does not divide its query head count.
        for seq_len, heads in ((2 * k, [k + 1]), (2 * k, [2 * k, 1, 1]), (2 * k + 1, [k])):
            with comm.plan(seq_len, 4, heads, np.float32) as plan:
                check.equal(plan.num_heads, heads, "a plan of S=%d, heads %r" % (seq_len, heads))
        library_error(lambda: comm.plan(2 * k, 4, [4, 3], np.float32, query_heads=[0, 4]), INVALID,
                      "basp_plan_create", "num_heads[1] (3) does not divide its query head count (4)")
        library_error(lambda: comm.plan(2 * k, 4, [4, 2], np.float32, query_heads=[0, -1]), INVALID,
                      "query_heads[1] (-1) must be 0 (query-like) or a query head count")
        library_error(lambda: comm.plan(-1, 4, [k], np.float32), INVALID, "seq_len (-1) must be positive")
        library_error(lambda: comm.plan(2 * k, 0, [k], np.float32), INVALID, "head_dim (0) must be positive")
        library_error(lambda: comm.plan(2 * k, 4, [], np.float32), INVALID, "num_tensors (0) must be in 1..8")
        library_error(lambda: comm.plan(2 * k, 4, [k], 42), INVALID, "dtype (42) is not a basp_dtype_t value")
        library_error(lambda: comm.plan(2 * k, 4, [k], np.float32, 5), INVALID, "layout (5)")
        binding_error(lambda: comm.plan(2 * k, 4, [k] * 9, np.float32), "lists 9 tensors")
        # A head size per tensor: one per tensor, each a positive int; the binding names the entry.
        binding_error(lambda: comm.plan(2 * k, [6, 4], [k, k, k], np.float32), "basp.Plan: head_dim ([6, 4]) lists 2 "
                      "head sizes but num_heads ([%d, %d, %d]) 3 tensors" % (k, k, k))
        binding_error(lambda: comm.plan(2 * k, [6, 6, 4, 4], [k, k, k], np.float32), "lists 4 head sizes",
                      "3 tensors")
        binding_error(lambda: comm.plan(2 * k, [6, 0, 4], [k, k, k], np.float32),
                      "head_dim[1] (0) in [6, 0, 4] must be a positive int below 2^63")
        binding_error(lambda: comm.plan(2 * k, [6, 6, -4], [k, k, k], np.float32),
                      "head_dim[2] (-4) in [6, 6, -4] must be a positive int below 2^63")
        # Beyond int64 (ctypes would keep the low 64 bits: 2^63 negative, 2^64 + 4 as 4): named, not wrapped.
        binding_error(lambda: comm.plan(2 * k, [6, 6, 2 ** 63], [k, k, k], np.float32),
                      "head_dim[2] (9223372036854775808) in [6, 6, 9223372036854775808] must be a positive int")
        binding_error(lambda: comm.plan(2 * k, [6, 6, 2 ** 64 + 4], [k, k, k], np.float32),
                      "head_dim[2] (18446744073709551620)")
        binding_error(lambda: comm.plan(2 * k, 2 ** 64 + 4, [k], np.float32),
                      "basp.Plan: head_dim (18446744073709551620) is beyond int64")
        binding_error(lambda: comm.plan(2 ** 64 + 2 * k, 4, [k], np.float32),
                      "seq_len (%d) is beyond int64" % (2 ** 64 + 2 * k))
        binding_error(lambda: comm.plan(2 * k, 4, [2 ** 64 + k], np.float32),
                      "num_heads[0] (%d) is beyond int64" % (2 ** 64 + k))
        binding_error(lambda: comm.plan(2 * k, 4, [k, 1], np.float32, query_heads=[0, 2 ** 64 + k]),
                      "query_heads[1] (%d) is beyond int64" % (2 ** 64 + k))
        binding_error(lambda: comm.plan(2 * k, [6, 2.5], [k, k], np.float32), "head_dim[1] (2.5)")
        binding_error(lambda: comm.plan(2 * k, "6", [k], np.float32), "head_dim ('6', a str) must be an int or a list")
        binding_error(lambda: comm.plan(2 * k, 4, [k], np.complex64), "dtype (complex64) has no basp.Dtype")
        binding_error(lambda: comm.plan(2 * k, 4, [k], np.float32, "bhsd"), "layout ('bhsd')")


def test_execution_arguments():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        plan = comm.plan(2 * k, 3, [2 * k, k, k], np.float32)
        ins = [np.full(plan.seq_sharded_shape(t), t + 1, dtype=np.float32) for t in range(3)]
        outs = [np.full(plan.head_sharded_shape(t), -7, dtype=np.float32) for t in range(3)]
        s1 = plan.seq_sharded_shape(1)

        def untouched():
            return all((o == -7).all() for o in outs)

        binding_error(lambda: plan.scatter(ins[:2], outs), "basp.Plan.scatter", "inputs has 2 entries",
                      "3 tensors")
        binding_error(lambda: plan.scatter(ins, outs[:1]), "outputs has 1 entries")
        binding_error(lambda: plan.scatter([ins[0].tolist(), ins[1], ins[2]]),
                      "inputs[0] (a builtins.list) is neither a numpy.ndarray nor a torch.Tensor")
        binding_error(lambda: plan.scatter(42), "inputs (a int) must be a list")
        bad = np.zeros((s1[0], s1[1] + 1) + s1[2:], dtype=np.float32)
        binding_error(lambda: plan.scatter([ins[0], bad, ins[2]], outs),
                      "inputs[1] has shape %s but the plan expects %s" % (bad.shape, s1))
        binding_error(lambda: plan.scatter([ins[0], ins[1].astype(np.float64), ins[2]], outs),
                      "inputs[1] has dtype float64 but the plan's dtype is FP32")
        wide = np.zeros(s1[:-1] + (2 * s1[-1],), dtype=np.float32)
        binding_error(lambda: plan.scatter([ins[0], ins[1], wide[..., ::2]], outs),
                      "inputs[2] (shape %s) is not C-contiguous" % (s1,))
        frozen = outs[2].copy()
        frozen.flags.writeable = False
        binding_error(lambda: plan.scatter(ins, [outs[0], outs[1], frozen]), "outputs[2] is read-only")
        binding_error(lambda: plan.gather(ins, outs), "basp.Plan.gather", "inputs[0] has shape")
        binding_error(lambda: plan.scatter(ins, outs, stream="default"), "stream ('default', a str)")
        check.true(untouched(), "outputs unchanged after the binding's rejections")

        library_error(lambda: plan.scatter(ins, outs, stream=0x1234), INVALID, "basp_scatter",
                      "must be NULL on the MPI backend")
        alias = ins[0].reshape(plan.head_sharded_shape(0))  # same memory, head-sharded shape
        library_error(lambda: plan.scatter(ins, [alias, outs[1], outs[2]]), INVALID,
                      "outputs[0]", "overlaps inputs[0]")
        library_error(lambda: plan.scatter(ins, [outs[0], outs[1], outs[1]]), INVALID,
                      "outputs[1]", "overlaps outputs[2]")
        check.true(untouched(), "outputs unchanged after the library's rejections")
        check.true(all((x == t + 1).all() for t, x in enumerate(ins)), "inputs unchanged")

        plan.scatter(ins, outs)  # still usable after the failures
        check.true(all((o == t + 1).all() for t, o in enumerate(outs)), "a valid call after errors works")
        plan.close()


def test_thd_and_query_heads_arguments():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k, l = comm.group_size, comm.group_position
        library_error(lambda: comm.plan(2 * k, 4, [k], np.float32, token_capacity=5), INVALID,
                      "token_capacity (5) must be 0 unless the layout is BASP_LAYOUT_THD")
        library_error(lambda: comm.plan(None, 4, [k], np.float32, "thd"), INVALID,
                      "token_capacity (0) must be positive for a THD plan")
        library_error(lambda: comm.plan(3, 4, [k], np.float32, "thd", token_capacity=5), INVALID,
                      "seq_len (3) must be -1 or token_capacity (5) for a THD plan")
        binding_error(lambda: comm.plan(2 * k, 4, [4, 2], np.float32, query_heads=[4]),
                      "query_heads ([4]) must list one entry per tensor (num_heads [4, 2])")
        plan = comm.plan(2 * k, 4, [k], np.float32)
        x = np.zeros(plan.seq_sharded_shape(0), np.float32)
        library_error(lambda: plan.scatter([x], num_tokens=2 * k + 1), INVALID, "basp_scatter_tokens",
                      "num_tokens (%d) must be -1 or the plan's seq_len (%d) for a BSHD plan" % (2 * k + 1, 2 * k))
        binding_error(lambda: plan.scatter([x], num_tokens=2.0), "num_tokens (2.0, a float) is not an int")
        check.equal(plan.scatter([x], num_tokens=2 * k)[0].shape, plan.head_sharded_shape(0), "num_tokens = S")
        plan.close()
        thd = comm.plan(None, 4, [k, 1], np.float32, "thd", query_heads=[0, k], token_capacity=2 * k)
        binding_error(lambda: thd.scatter([x, x]), "basp.Plan.scatter", "num_tokens is required for a THD plan")
        binding_error(lambda: thd.gather([x, x], num_tokens=2 * k + 1),
                      "num_tokens (%d) is outside 0..token_capacity (%d)" % (2 * k + 1, 2 * k))
        binding_error(lambda: thd.seq_sharded_shape(0, -1), "basp.Plan.seq_sharded_shape", "num_tokens (-1)")
        binding_error(lambda: thd.scatter([x, x], num_tokens=True), "num_tokens (True, a bool) is not an int")
        # Every rank of a group must pass the same T: on the MPI backend another T is MISMATCH on every rank.
        tokens = k + (1 if l == 0 else 0)
        ins = [np.zeros(thd.seq_sharded_shape(t, tokens), np.float32) for t in range(2)]
        if k > 1:
            library_error(lambda: thd.scatter(ins, num_tokens=tokens), Status.ERROR_MISMATCH, "basp_scatter_tokens",
                          "basp_scatter of %d tokens" % (k + 1), "basp_scatter of %d tokens" % k)
        outs = thd.scatter([np.ones(thd.seq_sharded_shape(t, k), np.float32) for t in range(2)], num_tokens=k)
        check.true(all((o == 1).all() for o in outs), "the THD plan works after the mismatch")
        # Document boundaries (set_documents): checked against T, and across the group on the MPI backend.
        same = [np.ones(thd.seq_sharded_shape(t, 2 * k), np.float32) for t in range(2)]
        thd.set_documents([0, k, 2 * k])
        shorter = [np.ones(thd.seq_sharded_shape(t, 2 * k - 1), np.float32) for t in range(2)]
        library_error(lambda: thd.scatter(shorter, num_tokens=2 * k - 1), INVALID, "basp_scatter_tokens",
                      "num_tokens (%d) is not the stream's length in the document boundaries set (%d)" % (
                          2 * k - 1, 2 * k))
        library_error(lambda: thd.set_documents([1, 2]), INVALID, "basp_plan_set_documents", "cu_seqlens[0] (1)")
        if k > 1:
            thd.set_documents([0, k + (1 if l == 0 else 0), 2 * k])
            library_error(lambda: thd.scatter(same, num_tokens=2 * k), Status.ERROR_MISMATCH, "basp_scatter_tokens",
                          "with document boundaries")
        thd.set_documents([0, k, 2 * k])
        thd.scatter(same, num_tokens=2 * k)
        thd.set_documents(None)
        thd.scatter([np.ones(thd.seq_sharded_shape(t, k), np.float32) for t in range(2)], num_tokens=k)
        thd.close()


def test_error_object():
    e = basp.Error(3, "basp_x: y")
    check.equal((e.status, e.message, str(e)), (Status.ERROR_INVALID_HANDLE, "basp_x: y",
                                                "BASP_ERROR_INVALID_HANDLE: basp_x: y"), "Error fields")
    check.equal(basp.Error(99, "z").status_name, "unknown status", "unknown status value")
    check.true(isinstance(e, Exception), "basp.Error is an Exception")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
