"""NumPy over the MPI backend: rank queries and the data-loader helpers against the paper's rules, and
scatter/gather round trips that are bit-exact on data that is a function of global coordinates.

Run under mpirun with any number of ranks (CTest: 1, 2, 3, 4, 6)."""
import math
import sys

import numpy as np
from mpi4py import MPI

import basp
from harness import check, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
POISON = 0xA5


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def global_tensor(seed, shape, dtype):
    """The whole micro-batch of one tensor, [B, S, H, D]: random bits from a seed every rank shares, so each
    element is a function of its global coordinates (and NaN bit patterns compare fine as bytes)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    bits = np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)
    return bits.view(dtype).reshape(shape)


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def poisoned(shape, dtype):
    return np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, POISON, dtype=np.uint8).view(dtype).reshape(shape)


def test_rank_info_follows_the_paper():
    # The paper's contiguous rule, asked for explicitly (the default placement may follow the topology).
    for b in range(1, 9):
        for groups in [None] + divisors(math.gcd(N, b)):
            comm = basp.Comm(WORLD, micro_batch=b, num_groups=groups, placement="contiguous")
            g_count = math.gcd(N, b) if groups is None else groups
            k = N // g_count
            check.equal((comm.world_size, comm.rank, comm.num_groups, comm.group_size, comm.micro_batch),
                        (N, RANK, g_count, k, b), "comm for B=%d G=%s" % (b, groups))
            check.equal((comm.group_index, comm.group_position), (RANK // k, RANK % k), "g = rank/K, l = rank%K")
            seq_len = 3 * k
            for r in range(N):
                info = comm.query(seq_len, r)
                g, l = r // k, r % k
                expected = dict(world_size=N, rank=r, num_groups=g_count, group_size=k, group_index=g,
                                group_position=l, micro_batch=b, first_sequence=g * b // g_count,
                                num_sequences=b // g_count, seq_len=seq_len, token_begin=l * 3,
                                token_end=(l + 1) * 3)
                check.equal(info.as_dict(), expected, "Algorithm 2 for rank %d, B=%d, G=%d" % (r, b, g_count))
            for g in range(g_count):
                check.equal(comm.group_ranks(g), list(range(g * k, (g + 1) * k)), "members of group %d" % g)
            check.equal(comm.query(), comm.query(0, RANK), "rank -1 is the caller")
            comm.close()


def test_groups_and_queries_agree_for_the_default_placement():
    for b in range(1, 9):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            g_count, k = math.gcd(N, b), N // math.gcd(N, b)
            check.equal((comm.num_groups, comm.group_size), (g_count, k), "G = gcd(N, B) for B=%d" % b)
            members = [comm.group_ranks(g) for g in range(g_count)]
            check.equal(sorted(r for m in members for r in m), list(range(N)), "groups partition the world")
            for r in range(N):
                info = comm.query(2 * k, r)
                check.equal(members[info.group_index][info.group_position], r, "rank %d sits where the query "
                            "says" % r)
                check.equal((info.first_sequence, info.num_sequences, info.token_begin),
                            (info.group_index * (b // g_count), b // g_count, info.group_position * 2),
                            "Algorithm 2 from the group and position of rank %d" % r)
            check.equal(comm.group_ranks(), members[comm.group_index], "own group")


def test_every_token_has_exactly_one_owner():
    for b in (1, 2, 3, 4, 6, 8):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            seq_len = 2 * comm.group_size
            owners = np.zeros((b, seq_len), dtype=np.int64)
            for r in range(N):
                info = comm.query(seq_len, r)
                owners[info.sequences, info.tokens] += 1
            check.true((owners == 1).all(), "B=%d: tokens owned %s times" % (b, np.unique(owners)))


def test_data_loader_helpers():
    for b in (1, 2, 4, 6):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            seq_len = 4 * comm.group_size
            info = comm.query(seq_len)
            step = 5
            indices = basp.data.sequence_indices(info, step)
            check.equal(list(indices), [step * b + info.first_sequence + i for i in range(b // comm.num_groups)],
                        "dataset indices at step %d" % step)
            tokens = np.arange(b * seq_len, dtype=np.int64).reshape(b, seq_len)  # token id = b * S + s
            part = basp.data.local_shard(tokens, info)
            expected = np.array([[i * seq_len + s for s in range(info.token_begin, info.token_end)]
                                 for i in range(info.first_sequence, info.first_sequence + info.num_sequences)])
            check.true(np.array_equal(part, expected) and part.flags["C_CONTIGUOUS"], "BSHD token shard")
            sbhd = basp.data.local_shard(np.ascontiguousarray(tokens.T), info, "sbhd")
            check.true(np.array_equal(sbhd, expected.T), "SBHD token shard")
            e = None
            try:
                basp.data.local_shard(tokens[:, 1:], info)
            except basp.Error as err:
                e = err
            check.true(e is not None and "(%d, %d)" % (b, seq_len - 1) in e.message, "wrong batch shape named")


def check_shapes_and_heads(comm, plan, heads, sbhd):
    """The shapes and head ranges the library reports against the header's formulas."""
    k, b_loc, s_loc = comm.group_size, comm.micro_batch // comm.num_groups, plan.seq_len // comm.group_size
    l = comm.group_position
    check.equal((plan.info.layout, plan.info.ndim, plan.info.num_tensors), (plan.layout, 4, len(heads)),
                "plan info layout, ndim, tensors")
    for t, h in enumerate(heads):
        seq, head = (b_loc, s_loc, h, plan.head_dim), (b_loc, plan.seq_len, h // k, plan.head_dim)
        if sbhd:
            seq, head = (seq[1], seq[0]) + seq[2:], (head[1], head[0]) + head[2:]
        check.equal((plan.seq_sharded_shape(t), plan.head_sharded_shape(t)), (seq, head), "shapes of tensor %d" % t)
        check.equal(plan.info.head_ranges[t], range(l * h // k, (l + 1) * h // k), "heads of tensor %d" % t)


def roundtrip(comm, layout, dtype, head_mult, seq_mult, head_dim, seed):
    """Scatter then gather through one plan; every output poisoned first and compared byte for byte."""
    k, b = comm.group_size, comm.micro_batch
    seq_len = seq_mult * k
    heads = [m * k for m in head_mult]
    info = comm.query(seq_len)
    plan = comm.plan(seq_len, head_dim, heads, dtype, layout)
    elem = np.dtype(dtype).itemsize
    b_loc, s_loc = b // comm.num_groups, seq_len // k
    check.equal((plan.info.group_size, plan.info.local_sequences, plan.info.local_tokens), (k, b_loc, s_loc),
                "plan info")
    check.equal(plan.info.bytes_sent_per_exchange,
                sum((k - 1) * b_loc * s_loc * (h // k) * head_dim * elem for h in heads), "bytes sent")
    sbhd = plan.layout == basp.Layout.SBHD
    check_shapes_and_heads(comm, plan, heads, sbhd)
    single_node_paths = (basp.Path.P2P, basp.Path.CMA, basp.Path.STAGED)
    check.true(plan.info.plan_path == basp.Path.LOCAL if k == 1 else plan.info.plan_path in single_node_paths,
               "K=%d plan's path %r" % (k, plan.info.plan_path))
    inputs, expected = [], []
    for t, h in enumerate(heads):
        whole = global_tensor(seed * 100 + t, (b, seq_len, h, head_dim), dtype)
        mine = whole[info.sequences, info.tokens]
        l = comm.group_position
        slice_h = whole[info.sequences, :, l * (h // k):(l + 1) * (h // k)]
        inputs.append(np.ascontiguousarray(mine.transpose(1, 0, 2, 3) if sbhd else mine))
        expected.append(np.ascontiguousarray(slice_h.transpose(1, 0, 2, 3) if sbhd else slice_h))
    originals = [x.copy() for x in inputs]
    outs = [poisoned(plan.head_sharded_shape(t), dtype) for t in range(len(heads))]
    check.equal(plan.query().last_path, basp.Path.NONE, "no path before the first exchange")
    returned = plan.scatter(inputs, outs)
    moved = plan.query().last_path
    # Ordinary (not basp_mem_alloc) memory: the exchange takes the path fixed at plan creation.
    check.equal(moved, plan.info.plan_path, "K=%d exchange's path vs the plan's" % k)
    what = "N=%d B=%d G=%d %s %s heads=%r" % (N, b, comm.num_groups, plan.layout.name, np.dtype(dtype), heads)
    check.true(all(r is o for r, o in zip(returned, outs)), "scatter returns the given outputs")
    for t in range(len(heads)):
        check.true(same_bytes(outs[t], expected[t]), "scatter output %d, %s" % (t, what))
        check.true(same_bytes(inputs[t], originals[t]), "scatter input %d untouched, %s" % (t, what))
    back = [poisoned(plan.seq_sharded_shape(t), dtype) for t in range(len(heads))]
    plan.gather(outs, back)
    for t in range(len(heads)):
        check.true(same_bytes(back[t], originals[t]), "gather restores input %d, %s" % (t, what))
    fresh = plan.scatter(inputs)  # outputs allocated by the binding
    check.true(all(same_bytes(f, e) for f, e in zip(fresh, expected)), "allocated outputs, %s" % what)
    plan.close()


def test_roundtrip_every_micro_batch_and_layout():
    for b in range(1, 9):
        for groups in (None, 1):  # BASP (gcd rule) and Ulysses
            with basp.Comm(WORLD, micro_batch=b, num_groups=groups) as comm:
                for layout in ("bshd", "sbhd"):
                    roundtrip(comm, layout, np.float32, [2, 1, 1], 3, 5, seed=b)


def test_roundtrip_every_dtype():
    b = 2 * N if N > 1 else 2
    with basp.Comm(WORLD, micro_batch=b, num_groups=1) as comm:  # K = N: the widest exchange
        for dtype, basp_dtype in ((np.float32, None), (np.float64, None), (np.float16, None), (np.int32, None),
                                  (np.int64, None), (np.uint8, None), (np.int8, None),
                                  (np.uint16, basp.Dtype.BF16), (np.uint8, basp.Dtype.FP8_E4M3)):
            k = comm.group_size
            seq_len, heads, head_dim = 2 * k, [k, 3 * k], 3
            plan = comm.plan(seq_len, head_dim, heads, basp_dtype if basp_dtype is not None else dtype)
            info = comm.query(seq_len)
            ins = [np.ascontiguousarray(global_tensor(7 + t, (b, seq_len, h, head_dim), dtype)[info.sequences,
                                                                                               info.tokens])
                   for t, h in enumerate(heads)]
            outs = plan.scatter(ins)
            back = plan.gather(outs, [poisoned(x.shape, dtype) for x in ins])
            check.true(all(same_bytes(x, y) for x, y in zip(ins, back)), "round trip of %s as %s" % (
                np.dtype(dtype), plan.dtype.name))
            plan.close()


def test_many_tensors_in_one_exchange():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        roundtrip(comm, "bshd", np.float64, [1, 2, 3, 4, 1, 2, 3, 1], 2, 2, seed=99)


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
