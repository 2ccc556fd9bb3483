"""Plans of any shape from NumPy over the MPI backend: sequence lengths and head counts the group size K
does not divide, key/value tensors that follow the query heads' split (GQA, MQA, 28/4 heads at K = 8), packed
streams (THD) whose token count changes every call, and tensors without elements on a rank (passed as None, sent
as NULL).

Every expectation comes from the formulas written here, not from the library: tensor_split for tokens and query
heads, [a // r, (b - 1) // r] for the K/V heads of query heads [a, b). Scatter outputs are poisoned first and
compared bit for bit with slices of global tensors whose every element is a function of its coordinates; the gather
of a query-like tensor restores the input bit for bit; the gather of heads several ranks hold equals the sum over
their holders computed here, on small-integer values whose sums every float type holds exactly; a summing gather of
int32 is BASP_ERROR_UNSUPPORTED and leaves its outputs alone.

Tensors of different head sizes in one plan (multi-head latent attention's q, k, v and one-head rotary key) are
checked the same way.

Run under mpirun with any number of ranks (CTest: 1, 2, 3, 4, 8)."""
import sys

import numpy as np
from mpi4py import MPI

import basp
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
POISON = 0xA5
D = 3


# --- the reference formulas --------------------------------------------------------------------------------------

def split(items, parts, j):
    """[begin, end) of position j when `items` are split over `parts` as torch.tensor_split does."""
    q, r = divmod(items, parts)
    begin = j * q + min(j, r)
    return begin, begin + q + (1 if j < r else 0)


def heads_of(h, q, k, j):
    """Global heads [begin, end) position j holds of a tensor of h heads; q: 0 (query-like) or the query head count
    it serves, whose split it follows: query heads [a, b) read K/V heads [a // r, (b - 1) // r]."""
    if q == 0:
        return split(h, k, j)
    a, b = split(q, k, j)
    if a == b:
        return 0, 0
    r = q // h
    return a // r, (b - 1) // r + 1


def holders(h, q, k, head):
    """The positions holding global head `head`, ascending."""
    return [j for j in range(k) if heads_of(h, q, k, j)[0] <= head < heads_of(h, q, k, j)[1]]


def replicated(heads, queries, k):
    return any(len(holders(h, q, k, x)) > 1 for h, q in zip(heads, queries) for x in range(h))


# --- data ----------------------------------------------------------------------------------------------------------

def global_bits(seed, shape, dtype):
    """A whole tensor of random bits from a seed every rank shares: each element a function of its coordinates."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    bits = np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)
    return bits.view(dtype).reshape(shape)


def small_ints(seed, *coords):
    """A small integer (-4..4) from global coordinates (arrays broadcast): every sum of up to 8 is exact in FP16 and
    BF16."""
    v = seed * 13
    for i, c in enumerate(coords):
        v = v + c * (3 + 2 * i)
    return (v % 9) - 4


def as_dtype(values, dtype, basp_dtype=None):
    """Small integers in `dtype` (BF16: the top 16 bits of their float32, exact for them)."""
    if basp_dtype == basp.Dtype.BF16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(dtype)


def same_bytes(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def poisoned(shape, dtype):
    return np.full(int(np.prod(shape)) * np.dtype(dtype).itemsize, POISON, dtype=np.uint8).view(dtype).reshape(shape)


def to_layout(x, layout):
    """A [b, s, h, d] array in `layout` (SBHD swaps the first two), contiguous."""
    return np.ascontiguousarray(x.transpose(1, 0, 2, 3) if layout == "sbhd" else x)


# --- checks --------------------------------------------------------------------------------------------------------

def check_info(comm, plan, seq_len, heads, queries, layout, what, dims):
    """The plan info against the formulas: tokens, heads, splits, shapes (tensor t of head size dims[t]),
    replication and bytes sent."""
    k, l, b_loc = comm.group_size, comm.group_position, comm.micro_batch // comm.num_groups
    info = plan.info
    tb, te = split(seq_len, k, l)
    check.equal((info.group_size, info.local_sequences, info.token_begin, info.token_end, info.local_tokens),
                (k, b_loc, tb, te, te - tb), "tokens of this rank, " + what)
    check.equal((info.ndim, info.token_capacity, info.replicated), (4, 0, replicated(heads, queries, k)),
                "ndim, capacity, replicated, " + what)
    sent = 0
    for t, (h, q) in enumerate(zip(heads, queries)):
        hb, he = heads_of(h, q, k, l)
        check.equal(info.head_ranges[t], range(hb, he), "heads of tensor %d, %s" % (t, what))
        check.equal(info.split_ranges[t], range(*split(q or h, k, l)), "split of tensor %d, %s" % (t, what))
        seq, head = (b_loc, te - tb, h, dims[t]), (b_loc, seq_len, he - hb, dims[t])
        if layout == "sbhd":
            seq, head = (seq[1], seq[0]) + seq[2:], (head[1], head[0]) + head[2:]
        check.equal((plan.seq_sharded_shape(t), plan.head_sharded_shape(t)), (seq, head),
                    "shapes of tensor %d, %s" % (t, what))
        others = sum(heads_of(h, q, k, j)[1] - heads_of(h, q, k, j)[0] for j in range(k) if j != l)
        sent += b_loc * (te - tb) * others * dims[t]  # this rank's rows of every head some other position holds
    elem = basp._abi.DTYPE_SIZE[plan.dtype]
    check.equal(info.bytes_sent_per_exchange, sent * elem, "bytes sent (the routing minimum), " + what)


def exchange_case(comm, seq_len, heads, queries, dtype, layout, seed, basp_dtype=None, dims=None):
    """One plan: its info, a bit-exact scatter against slices of global tensors, the gather of every tensor
    (restoring query-like inputs, summing the holders of replicated heads), or UNSUPPORTED for a summing int gather.
    dims: a head size per tensor (None: D for all, passed as one int)."""
    k, l, b = comm.group_size, comm.group_position, comm.micro_batch
    me = comm.query(seq_len)
    what = "N=%d B=%d K=%d S=%d heads=%r query_heads=%r head_dim=%r %s %s" % (
        N, b, k, seq_len, heads, queries, dims or D, layout, basp_dtype.name if basp_dtype else np.dtype(dtype))
    plan = comm.plan(seq_len, dims or D, heads, basp_dtype if basp_dtype is not None else dtype, layout,
                     query_heads=queries)
    dims = dims or [D] * len(heads)
    check_info(comm, plan, seq_len, heads, queries, layout, what, dims)
    n = len(heads)
    wholes = [global_bits(seed * 100 + t, (b, seq_len, h, dims[t]), dtype) for t, h in enumerate(heads)]
    inputs = [to_layout(w[me.sequences, me.tokens], layout) for w in wholes]
    originals = [x.copy() for x in inputs]
    expected = [to_layout(w[me.sequences, :, slice(*heads_of(h, q, k, l))], layout)
                for w, h, q in zip(wholes, heads, queries)]
    outs = plan.scatter(inputs, [poisoned(plan.head_sharded_shape(t), dtype) for t in range(n)])
    for t in range(n):
        check.true(same_bytes(outs[t], expected[t]), "scatter output %d bit-exact, %s" % (t, what))
        check.true(same_bytes(inputs[t], originals[t]), "scatter input %d untouched, %s" % (t, what))
    summable = np.dtype(dtype).kind == "f" or basp_dtype == basp.Dtype.BF16
    back = [poisoned(plan.seq_sharded_shape(t), dtype) for t in range(n)]
    if plan.info.replicated and not summable:
        expect_error(lambda: plan.gather(outs, back), basp.Status.ERROR_UNSUPPORTED, "basp_gather",
                     "cannot be summed")
        check.true(all(same_bytes(x, poisoned(x.shape, dtype)) for x in back), "refused gather wrote nothing, " + what)
    else:
        plan.gather(outs, back)
        for t, (h, q) in enumerate(zip(heads, queries)):
            if not any(len(holders(h, q, k, x)) > 1 for x in range(h)):
                check.true(same_bytes(back[t], originals[t]), "gather restores input %d, %s" % (t, what))
    plan.close()


def summing_gather_case(comm, seq_len, heads, queries, dtype, layout, seed, basp_dtype=None, dims=None):
    """Each rank gathers head-sharded inputs of small integers that depend on (sequence, token, head, dim, position):
    every output element is the sum over the holders of its head, computed here, bit for bit. dims: as for
    exchange_case."""
    k, l, b = comm.group_size, comm.group_position, comm.micro_batch
    me = comm.query(seq_len)
    what = "summing gather N=%d B=%d K=%d S=%d heads=%r query_heads=%r head_dim=%r %s %s" % (
        N, b, k, seq_len, heads, queries, dims or D, layout, basp_dtype.name if basp_dtype else np.dtype(dtype))
    plan = comm.plan(seq_len, dims or D, heads, basp_dtype if basp_dtype is not None else dtype, layout,
                     query_heads=queries)
    dims = dims or [D] * len(heads)
    seqs = np.arange(me.first_sequence, me.first_sequence + me.num_sequences)
    inputs, expected = [], []
    for t, (h, q) in enumerate(zip(heads, queries)):
        hb, he = heads_of(h, q, k, l)
        bb, ss, hh, dd = np.meshgrid(seqs, np.arange(seq_len), np.arange(hb, he), np.arange(dims[t]), indexing="ij")
        inputs.append(to_layout(as_dtype(small_ints(seed + t, bb, ss, hh, dd, l), dtype, basp_dtype), layout))
        tb, te = split(seq_len, k, l)
        bb, ss, hh, dd = np.meshgrid(seqs, np.arange(tb, te), np.arange(h), np.arange(dims[t]), indexing="ij")
        total = np.zeros(bb.shape, dtype=np.int64)
        for head in range(h):
            for j in holders(h, q, k, head):
                mask = hh == head
                total[mask] += small_ints(seed + t, bb[mask], ss[mask], hh[mask], dd[mask], j)
        expected.append(to_layout(as_dtype(total, dtype, basp_dtype), layout))
    outs = plan.gather(inputs, [poisoned(plan.seq_sharded_shape(t), dtype) for t in range(len(heads))])
    for t in range(len(heads)):
        check.true(same_bytes(outs[t], expected[t]), "output %d is the sum over the holders, %s" % (t, what))
    plan.close()


def shape_cases(k):
    """(S, num_heads, query_heads) for a group of K: uneven tokens and heads, GQA, MQA, KV tensors beside Q."""
    return [
        (2 * k + 1, [k + 1, 1, 2 * k - 1], [0, 0, 0]),   # nothing divides, heads fewer than K
        (1, [2, 3], [0, 0]),                              # a single token: positions without tokens
        (3 * k - 1, [8, 2, 2], [0, 8, 8]),                # GQA r = 4
        (k + 2, [16, 1, 1], [0, 16, 16]),                 # MQA
        (2 * k, [28, 4, 4], [0, 28, 28]),                 # Qwen2.5-7B: r = 7
        (5, [6, 3, 3, 6], [0, 6, 6, 0]),                  # Q, K, V and a second query-like tensor
    ]


def test_shard_any_sequence_length():
    for b in (1, 2, 3):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k = comm.group_size
            for seq_len in range(1, 3 * k + 2):
                owners = np.zeros((b, seq_len), dtype=np.int64)
                for r in range(N):
                    info = comm.query(seq_len, r)
                    check.equal((info.token_begin, info.token_end), split(seq_len, k, info.group_position),
                                "tokens of rank %d, B=%d S=%d" % (r, b, seq_len))
                    owners[info.sequences, info.tokens] += 1
                check.true((owners == 1).all(), "B=%d S=%d: every token has one owner" % (b, seq_len))
                me = comm.query(seq_len)
                tokens = np.arange(b * seq_len).reshape(b, seq_len)
                part = basp.data.local_shard(tokens, me)
                check.true(np.array_equal(part, tokens[me.sequences, me.tokens]), "local_shard, S=%d" % seq_len)
                check.true(np.array_equal(basp.data.local_shard(np.ascontiguousarray(tokens.T), me, "sbhd"),
                                          part.T), "local_shard SBHD, S=%d" % seq_len)


def test_scatter_bit_exact_gather_restores():
    for b in (1, 2):
        for groups in (None, 1):
            with basp.Comm(WORLD, micro_batch=b, num_groups=groups) as comm:
                for i, (seq_len, heads, queries) in enumerate(shape_cases(comm.group_size)):
                    layout = ("bshd", "sbhd")[i % 2]
                    exchange_case(comm, seq_len, heads, queries, np.float32, layout, seed=10 * b + i)


def test_every_dtype_on_a_replicated_plan():
    # int32, int64 and bytes scatter, and their summing gather is refused; float types gather.
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        for i, (dtype, basp_dtype) in enumerate(((np.float64, None), (np.float16, None), (np.uint16, basp.Dtype.BF16),
                                                 (np.int32, None), (np.int64, None), (np.uint8, None))):
            exchange_case(comm, k + 1, [4, 1, 1], [0, 4, 4], dtype, ("bshd", "sbhd")[i % 2], 50 + i, basp_dtype)
        # Without a replicated head an int32 GQA plan gathers, exactly inverting its scatter.
        exchange_case(comm, 2 * k, [2 * k, k], [0, 2 * k], np.int32, "bshd", 60)


def test_head_size_per_tensor():
    # Multi-head latent attention's exchange (small sizes): q of 6 = 4 + 2, k_nope and v of 4, and the rotary key
    # [1 head, 2] serving every query head, sent to each rank that has query heads and summed by the gather; GQA
    # with smaller values; sizes of 1. Bit-exact scatter, restoring gather, and the sum over holders per tensor.
    for b in (1, 2):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k = comm.group_size
            h = k + 1
            cases = [(2 * k + 1, [h, h, 1, h], [0, 0, h, 0], [6, 4, 2, 4]),
                     (k + 2, [2 * k, k, k], [0, 2 * k, 2 * k], [5, 5, 3]),
                     (3, [2, 2, 2], [0, 0, 0], [1, 3, 1])]
            for i, (seq_len, heads, queries, dims) in enumerate(cases):
                layout = ("bshd", "sbhd")[i % 2]
                exchange_case(comm, seq_len, heads, queries, np.float32, layout, 70 + 10 * b + i, dims=dims)
                summing_gather_case(comm, seq_len, heads, queries, np.float64, layout, 90 + i, dims=dims)
            # The sizes as the library made them (its shapes), besides the binding's head_dims.
            with comm.plan(4, [6, 6, 4], [k, k, k], np.float32) as plan:
                check.equal((plan.head_dims, plan.head_dim), ([6, 6, 4], None), "sizes that differ: no head_dim")
                check.equal(made_head_sizes(plan), [6, 6, 4], "the library's sizes")
                check.true("D=[6, 6, 4]" in repr(plan), "repr names the sizes: %r" % plan)
            with comm.plan(4, [5, 5], [k, k], np.float32) as plan:
                check.equal((plan.head_dims, plan.head_dim), ([5, 5], 5), "one size listed twice is head_dim")
                check.equal(made_head_sizes(plan), [5, 5], "the library's sizes, one listed twice")
            with comm.plan(4, 5, [k, k], np.float32) as plan:
                check.equal((plan.head_dims, plan.head_dim), ([5, 5], 5), "an int head_dim for every tensor")
                check.equal(made_head_sizes(plan), [5, 5], "the library's sizes of an int head_dim")
            with comm.plan(4, np.array([6, 4]), [k, k], np.float32) as plan, \
                    comm.plan(4, np.int64(5), [k], np.float32) as one:
                check.equal((plan.head_dims, one.head_dims), ([6, 4], [5]), "NumPy sizes: an array, a scalar")
                check.equal((made_head_sizes(plan), made_head_sizes(one)), ([6, 4], [5]), "the library's NumPy sizes")


def made_head_sizes(plan):
    """Each tensor's head size as the library made it: the last dim of the shapes basp_plan_get_info reports, the
    sequence-side one and the head-side one alike."""
    seq = [shape[-1] for shape in plan.info.seq_sharded_shapes]
    check.equal([shape[-1] for shape in plan.info.head_sharded_shapes], seq, "head sizes of both sides")
    return seq


def test_summing_gather_equals_the_sum():
    for b in (1, 2):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k = comm.group_size
            cases = shape_cases(k)[2:] + [(k + 1, [3, 1, 1], [0, 3, 3])]
            types = ((np.float32, None), (np.float16, None), (np.uint16, basp.Dtype.BF16), (np.float64, None))
            for i, (seq_len, heads, queries) in enumerate(cases):
                dtype, basp_dtype = types[i % len(types)]
                summing_gather_case(comm, seq_len, heads, queries, dtype, ("sbhd", "bshd")[i % 2], 70 + i, basp_dtype)


def test_int32_summing_gather_is_unsupported():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        plan = comm.plan(2, D, [1, 1], np.int32, query_heads=[0, 2 * k])  # one KV head for all 2K query heads
        check.equal(plan.info.replicated, k > 1, "one K/V head serving every rank is replicated when K > 1")
        ins = [np.full(plan.head_sharded_shape(t), 3, dtype=np.int32) for t in range(2)]
        outs = [np.full(plan.seq_sharded_shape(t), -7, dtype=np.int32) for t in range(2)]
        if k > 1:
            expect_error(lambda: plan.gather(ins, outs), basp.Status.ERROR_UNSUPPORTED, "BASP_DTYPE_INT32",
                         "cannot be summed")
            check.true(all((o == -7).all() for o in outs), "outputs untouched by the refused gather")
        else:
            plan.gather(ins, outs)
            check.true(all((o == 3).all() for o in outs), "K = 1: nothing replicated, the gather is a copy")
        plan.close()


def test_qwen_heads_at_eight_ranks():
    # 28 query and 4 K/V heads over K = 8 (Qwen2.5-7B): ranks at positions 1, 3 and 5 hold two K/V heads.
    if N != 8:
        check.true(True, "only at N = 8")
        return
    with basp.Comm(WORLD, micro_batch=1) as comm:
        plan = comm.plan(9, D, [28, 4, 4], np.float32, query_heads=[0, 28, 28])
        counts = WORLD.allgather(len(plan.info.head_ranges[1]))
        check.equal(counts, [1, 2, 1, 2, 1, 2, 1, 1], "K/V heads per position")
        check.equal(WORLD.allgather(len(plan.info.head_ranges[0])), [4, 4, 4, 4, 3, 3, 3, 3], "query heads")
        check.true(plan.info.replicated, "28/4 at K = 8 replicates K/V heads")
        plan.close()
        exchange_case(comm, 9, [28, 4, 4], [0, 28, 28], np.float32, "bshd", 90)
        summing_gather_case(comm, 9, [28, 4, 4], [0, 28, 28], np.float32, "sbhd", 91)


def test_thd_token_count_changes_every_call():
    rng = np.random.default_rng(5)  # the same on every rank: every rank passes the same T
    for b in (1, 2):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k, l = comm.group_size, comm.group_position
            capacity = 3 * k + 2
            heads, queries = [6, 2, 2], [0, 6, 6]
            plan = comm.plan(None, D, heads, np.float32, "thd", query_heads=queries, token_capacity=capacity)
            info = plan.info
            check.equal((plan.layout, info.ndim, info.token_capacity, plan.seq_len), (basp.Layout.THD, 3, capacity,
                                                                                    capacity), "a THD plan's info")
            for t, (h, q) in enumerate(zip(heads, queries)):
                hb, he = heads_of(h, q, k, l)
                check.equal((plan.seq_sharded_shape(t), plan.head_sharded_shape(t)),
                            ((split(capacity, k, l)[1] - split(capacity, k, l)[0], h, D), (capacity, he - hb, D)),
                            "THD shapes at the capacity, tensor %d" % t)
            counts = [capacity, 0, 1, k + 1, 2 * k + 1, capacity - 1] + [int(x) for x in rng.integers(0, capacity + 1,
                                                                                                    size=4)]
            for call, tokens in enumerate(counts):
                tb, te = split(tokens, k, l)
                what = "THD N=%d B=%d K=%d T=%d (call %d)" % (N, b, k, tokens, call)
                streams = [small_ints(call + t, *np.meshgrid(np.arange(tokens), np.arange(h), np.arange(D),
                                                               indexing="ij")).astype(np.float32)
                           for t, h in enumerate(heads)]
                inputs = [np.ascontiguousarray(s[tb:te]) for s in streams]
                for t, h in enumerate(heads):
                    check.equal(plan.seq_sharded_shape(t, tokens), (te - tb, h, D), "T_l of tensor %d, %s" % (t, what))
                outs = plan.scatter(inputs, [poisoned(plan.head_sharded_shape(t, tokens), np.float32)
                                             for t in range(3)], num_tokens=tokens)
                for t, (h, q) in enumerate(zip(heads, queries)):
                    expected = np.ascontiguousarray(streams[t][:, slice(*heads_of(h, q, k, l))])
                    check.true(same_bytes(outs[t], expected), "scatter output %d bit-exact, %s" % (t, what))
                back = plan.gather(outs, [poisoned(x.shape, np.float32) for x in inputs], num_tokens=tokens)
                for t, (h, q) in enumerate(zip(heads, queries)):
                    # Each holder got the same copy: the gather sums as many copies as the head has holders.
                    times = np.array([len(holders(h, q, k, x)) for x in range(h)], dtype=np.float32)
                    check.true(same_bytes(back[t], inputs[t] * times[None, :, None]),
                               "gather(scatter(x)) = x times the holders of each head, tensor %d, %s" % (t, what))
            check.equal(plan.query().last_path, plan.info.plan_path, "the THD plan ran on its path")
            plan.close()


def test_tensors_without_elements_as_none():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k, l = comm.group_size, comm.group_position
        # One token and one head: only position 0 has tokens, only position 0 has the head.
        plan = comm.plan(1, D, [1, 2], np.float32)
        whole = [global_bits(200 + t, (1, 1, h, D), np.float32) for t, h in enumerate((1, 2))]
        inputs = [w if l == 0 else None for w in whole]
        outs = [poisoned(plan.head_sharded_shape(t), np.float32) if plan.head_sharded_shape(t)[2] else None
                for t in range(2)]
        plan.scatter(inputs, outs)
        for t, h in enumerate((1, 2)):
            hb, he = split(h, k, l)
            if outs[t] is not None:
                check.true(same_bytes(outs[t], np.ascontiguousarray(whole[t][:, :, hb:he])), "scatter with Nones")
            else:
                check.equal(he - hb, 0, "None only where no head is held")
        back = plan.gather(outs, [poisoned(whole[t].shape, np.float32) if l == 0 else None for t in range(2)])
        if l == 0:
            check.true(all(same_bytes(x, w) for x, w in zip(back, whole)), "gather with Nones restores")
        else:
            check.equal(back, [None, None], "a rank without tokens gets its Nones back")
        # Arrays without elements (not None) are sent as NULL too; outputs allocated for them have none.
        empty_ins = [x if x is not None else np.zeros(plan.seq_sharded_shape(t), np.float32)
                     for t, x in enumerate(inputs)]
        again = plan.scatter(empty_ins)
        for t in range(2):
            check.true(same_bytes(again[t], outs[t]) if outs[t] is not None else again[t].size == 0,
                       "scatter of empty arrays, tensor %d" % t)
        if l == 0:  # the binding's own check: no library call, so one rank may fail alone
            expect_error(lambda: plan.scatter([None, whole[1]]), basp.Status.ERROR_INVALID_ARGUMENT,
                         "inputs[0] is None but the plan expects shape (1, 1, 1, 3)")
        plan.close()
        thd = comm.plan(None, D, [k + 1], np.float32, "thd", token_capacity=4)
        (out,) = thd.scatter([None], [None if thd.head_sharded_shape(0, 0)[1] == 0 else
                                      np.zeros(thd.head_sharded_shape(0, 0), np.float32)], num_tokens=0)
        check.true(out is None or out.shape == (0, len(thd.info.head_ranges[0]), D), "T = 0: nothing moves")
        expect_error(lambda: thd.scatter([None], num_tokens=0), basp.Status.ERROR_INVALID_ARGUMENT,
                     "every input is None")
        thd.close()


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
