"""Split-phase exchanges by head chunks from Python (basp.Plan.scatter_start / gather_start and basp.Work) over the
MPI backend: over C = 1, 2, 3 and the plan's maximum, the chunks' outputs (poisoned first) are bit-identical to the
one-call scatter/gather of the same inputs, on data that is a function of global coordinates, for GQA with uneven
heads and tokens, replicated K/V heads (the summing gather) and THD; and misuse raises basp.Error with the library's
message (a chunk or count out of range, a chunk started while in flight, a Work waited for twice).

Run under mpirun (CTest: 2 and 4 ranks)."""
import sys

import numpy as np
from mpi4py import MPI

import basp
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
INVALID = basp.Status.ERROR_INVALID_ARGUMENT


def global_tensor(seed, shape):
    """A whole tensor of float32 values that are a function of their global coordinates (and the seed)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def poisoned_like(shape):
    return np.full(shape, np.nan, dtype=np.float32)


def same_bytes(a, b):
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                                                 np.ascontiguousarray(b).view(np.uint8))


def chunk_counts(plan):
    return sorted({c for c in (1, 2, 3, plan.max_head_chunks) if 1 <= c <= plan.max_head_chunks})


def seq_inputs(plan, comm, seq_len, seed):
    """This rank's sequence-sharded slice of each tensor of the micro-batch [B, S, H_t, D] (BSHD)."""
    q = comm.query(seq_len)
    out = []
    for t, heads in enumerate(plan.num_heads):
        whole = global_tensor(seed + t, (comm.micro_batch, seq_len, heads, plan.head_dims[t]))
        out.append(np.ascontiguousarray(whole[q.first_sequence:q.first_sequence + q.num_sequences,
                                              q.token_begin:q.token_end]))
    return out


def head_inputs(plan, comm, seq_len, seed):
    """This rank's head-sharded slice of each tensor: its sequences, every token, its heads [head_begin, head_end)."""
    q = comm.query(seq_len)
    info = plan.info
    out = []
    for t, heads in enumerate(plan.num_heads):
        whole = global_tensor(seed + 10 + t, (comm.micro_batch, seq_len, heads, plan.head_dims[t]))
        out.append(np.ascontiguousarray(whole[q.first_sequence:q.first_sequence + q.num_sequences, :,
                                              info.head_begin[t]:info.head_end[t]]))
    return out


def run_chunks(plan, op, inputs, shapes, count, pipelined, num_tokens=None):
    """Every chunk of a round of `count` into poisoned outputs: started all before any wait, or pipelined (chunk
    c + 1 started before chunk c is waited for)."""
    outputs = [poisoned_like(s) for s in shapes]
    start = plan.scatter_start if op == "scatter" else plan.gather_start
    if pipelined:
        work = start(inputs, outputs, 0, count, num_tokens=num_tokens)
        for c in range(count):
            following = start(inputs, outputs, c + 1, count, num_tokens=num_tokens) if c + 1 < count else None
            waited = work.wait()
            check.true(all(a is b for a, b in zip(waited, outputs)), "wait returns the outputs")
            check.true(work.is_completed(), "a waited chunk is complete")
            work = following
    else:
        works = [start(inputs, outputs, c, count, num_tokens=num_tokens) for c in range(count)]
        for w in works:
            w.wait()
    return outputs


def check_plan(plan, comm, seq_len, what):
    scatter_in = seq_inputs(plan, comm, seq_len, 100)
    gather_in = head_inputs(plan, comm, seq_len, 200)
    one_scatter = plan.scatter(scatter_in)
    one_gather = plan.gather(gather_in)
    head_shapes = [plan.head_sharded_shape(t) for t in range(plan.num_tensors)]
    seq_shapes = [plan.seq_sharded_shape(t) for t in range(plan.num_tensors)]
    check.true(plan.max_head_chunks >= 1, "%s: max_head_chunks %d" % (what, plan.max_head_chunks))
    for count in chunk_counts(plan):
        for pipelined in (False, True):
            got = run_chunks(plan, "scatter", scatter_in, head_shapes, count, pipelined)
            for t in range(plan.num_tensors):
                check.true(same_bytes(got[t], one_scatter[t]), "%s: scatter tensor %d over %d chunks%s" % (
                    what, t, count, " (pipelined)" if pipelined else ""))
            got = run_chunks(plan, "gather", gather_in, seq_shapes, count, pipelined)
            for t in range(plan.num_tensors):
                check.true(same_bytes(got[t], one_gather[t]), "%s: gather tensor %d over %d chunks%s" % (
                    what, t, count, " (pipelined)" if pipelined else ""))


def test_gqa_uneven_heads_and_tokens():
    # K = N (one group), then K = N / 2 with two groups where N allows it.
    for micro_batch in sorted({1, 2} if N % 2 == 0 else {1}):
        with basp.Comm(WORLD, micro_batch=micro_batch) as comm:
            k = comm.group_size
            seq_len = 2 * k + 1
            for hq, hkv in ((2 * k + 1, 1), (3 * k, 3), (4 * k + 2, 2 * k + 1)):
                with comm.plan(seq_len, head_dim=3, num_heads=[hq, hkv, hkv], dtype=np.float32,
                               query_heads=[0, hq, hq]) as plan:
                    check_plan(plan, comm, seq_len, "K=%d Hq=%d Hkv=%d (replicated %s)" % (
                        k, hq, hkv, plan.info.replicated))


def test_thd_stream():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k, capacity = comm.group_size, 5 * N
        with comm.plan(None, head_dim=2, num_heads=[2 * k + 1, 1, 1], dtype=np.float32, layout="thd",
                       query_heads=[0, 2 * k + 1, 2 * k + 1], token_capacity=capacity) as plan:
            tokens = capacity - 3
            # The stream's tokens of this rank: basp_split(T, K, l) (the plan's shapes for this T).
            begin = sum(plan_rows(tokens, k, j) for j in range(comm.group_position))
            end = begin + plan_rows(tokens, k, comm.group_position)
            seq = [np.ascontiguousarray(global_tensor(300 + t, (tokens, h, 2))[begin:end])
                   for t, h in enumerate(plan.num_heads)]
            heads = [np.ascontiguousarray(global_tensor(400 + t, (tokens, h, 2))[:, plan.info.head_begin[t]:
                                                                               plan.info.head_end[t]])
                     for t, h in enumerate(plan.num_heads)]
            one_scatter = plan.scatter(seq, num_tokens=tokens)
            one_gather = plan.gather(heads, num_tokens=tokens)
            for count in chunk_counts(plan):
                got = run_chunks(plan, "scatter", seq, [plan.head_sharded_shape(t, tokens) for t in range(3)],
                                 count, True, tokens)
                check.true(all(same_bytes(a, b) for a, b in zip(got, one_scatter)), "THD scatter, C=%d" % count)
                got = run_chunks(plan, "gather", heads, [plan.seq_sharded_shape(t, tokens) for t in range(3)],
                                 count, True, tokens)
                check.true(all(same_bytes(a, b) for a, b in zip(got, one_gather)), "THD gather, C=%d" % count)


def plan_rows(tokens, parts, index):
    return tokens // parts + (1 if index < tokens % parts else 0)


def test_misuse_raises_with_the_library_message():
    if N < 2:
        return check.true(True, "one rank: a chunk needs no peer")
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        seq_len = 2 * k
        with comm.plan(seq_len, head_dim=2, num_heads=[2 * k, k, k], dtype=np.float32) as plan:
            most = plan.max_head_chunks
            check.equal(most, 2, "max_head_chunks: the query heads of the busiest position")
            ins = seq_inputs(plan, comm, seq_len, 500)
            outs = [poisoned_like(plan.head_sharded_shape(t)) for t in range(3)]
            expect_error(lambda: plan.scatter_start(ins, outs, 2, 2), INVALID, "head chunk index (2)", "0..1")
            expect_error(lambda: plan.scatter_start(ins, outs, -1, 2), INVALID, "head chunk index (-1)")
            expect_error(lambda: plan.scatter_start(ins, outs, 0, most + 1), INVALID,
                         "head chunk count (%d) is above the plan's maximum (%d" % (most + 1, most))
            expect_error(lambda: plan.scatter_start(ins, outs, 0, 0), INVALID, "head chunk count (0)")
            expect_error(lambda: plan.scatter_start(ins, None, 0, 2), INVALID, "outputs is None")
            expect_error(lambda: plan.scatter_start(ins, outs, "0", 2), INVALID, "chunk ('0', a str) is not an int")
            # Every rank makes the same misuse (a refused start is collective: its failure runs in order on the
            # progress thread). Chunk 0 in flight or done, its second start is refused and it can still be waited for.
            work = plan.scatter_start(ins, outs, 0, 2)
            expect_error(lambda: plan.scatter_start(ins, outs, 0, 2), INVALID,
                         "chunk 0 of 2 was started and not waited for")
            last = plan.scatter_start(ins, outs, 1, 2)
            work.wait()
            last.wait()
            expect_error(last.wait, INVALID, "scatter chunk 1 of 2 was already waited for")
            works = [plan.scatter_start(ins, outs, c, 2) for c in range(2)]
            expect_error(lambda: plan.scatter(ins), INVALID, "scatter: scatter chunk 0 of the plan is started and not "
                         "waited for")
            for w in works:
                w.wait()
            works = [plan.scatter_start(ins, outs, c, 2) for c in range(2)]
            for w in works:
                w.wait()
            one = plan.scatter(ins)  # the plan is whole again
            check.true(all(same_bytes(a, b) for a, b in zip(outs, one)), "the round after the refusals")
            check.true("waited" in repr(last), "repr: %r" % last)


def test_replicated_gather_refuses_a_scatter_between_its_chunks():
    if N < 2:
        return check.true(True, "one rank: no replicated head")
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        with comm.plan(k, head_dim=2, num_heads=[2 * k, 1, 1], dtype=np.float32,
                       query_heads=[0, 2 * k, 2 * k]) as plan:
            check.true(plan.info.replicated, "Hkv = 1 < K: replicated")
            seq = seq_inputs(plan, comm, k, 600)
            heads = head_inputs(plan, comm, k, 600)
            seq_out = [poisoned_like(plan.seq_sharded_shape(t)) for t in range(3)]
            head_out = [poisoned_like(plan.head_sharded_shape(t)) for t in range(3)]
            expect_error(lambda: plan.gather_start(heads, seq_out, 1, 2), INVALID, "expected chunk 0, got 1")
            first = plan.gather_start(heads, seq_out, 0, 2)
            expect_error(lambda: plan.scatter_start(seq, head_out, 0, 2), INVALID, "use a second plan")
            plan.gather_start(heads, seq_out, 1, 2).wait()
            first.wait()
            one = plan.gather(heads)
            check.true(all(same_bytes(a, b) for a, b in zip(seq_out, one)), "the gather after the refusal")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
