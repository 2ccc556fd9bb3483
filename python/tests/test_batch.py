"""Batch plans from Python (basp.Batch, basp.Comm.plan_batch / batch_plan, basp.data.pack_batch, the cost model)
under mpirun, with NumPy only:

- a new membership every step on one comm (random group sizes, ranks permuted; THD with documents in any order and
  groups without any, BSHD, SBHD; GQA and uneven heads and tokens): the scatter bit-exact against values that are a
  function of each element's global coordinates (document and token in it, or sequence and token; head; element),
  written into poisoned outputs, and the gather of the scatter's output the holders' sum (exact in FP64);
- the planner's answer (and its predicted time) identical on every rank (mpi4py allgather), a partition of the
  world and of the documents, before and after setting a cost model, and a plan made from it exchanging exactly;
- basp.data.pack_batch and batch_assignment against an independent slicing of the group's stream, and
  unpack_batch's pieces of every rank rebuilding every document exactly once;
- the cost model: get/set, export/import round trip, malformed text raising with the line named, bad values named;
- the planner with a value head size of its own (multi-head latent attention): its predicted bytes and attention
  time against the model written out, bad values named;
- the refusals: a comm without batch_capacity, a batch that is no partition, a description the library refuses.

usage: mpirun -np N python3 test_batch.py [test names]
"""
import ctypes
import sys
import warnings

import numpy as np
from mpi4py import MPI

import basp
from harness import check, expect_error, random_membership, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
CAPACITY = 1 << 16
POISON = -7777.0
S = basp.Status


def split_bounds(items, parts):
    """tensor_split's bounds, written out here: position j holds bounds[j] .. bounds[j + 1]."""
    b = [0]
    for j in range(parts):
        b.append(b[-1] + items // parts + (1 if j < items % parts else 0))
    return b


def head_ranges(heads, split_heads, parts):
    """The heads position j holds (docs/design.md): its own split, or the KV heads [a / r, (b - 1) / r] of query
    heads [a, b) of the split of split_heads (none when a == b)."""
    q = split_bounds(split_heads, parts)
    r = split_heads // heads
    out = []
    for j in range(parts):
        if r == 1:
            out.append((q[j], q[j + 1]))
        elif q[j] == q[j + 1]:
            out.append((0, 0))
        else:
            out.append((q[j] // r, (q[j + 1] - 1) // r + 1))
    return out


def value(t, a, s, h, e):
    """An element's value from its global coordinates: tensor t, a = document (THD) or sequence (BSHD/SBHD) index,
    s = token in it, global head h, element e. Distinct and exact in FP64 (and under sums of a few)."""
    return float(((((t * 128 + a) * 1024 + s) * 64 + h) * 8 + e) + 1)


def draw_step(rng):
    """One step: a membership, a layout, heads and a batch description."""
    groups = random_membership(rng, N)
    layout = ["thd", "bshd", "sbhd"][int(rng.randint(0, 3))]
    head_dim = int(rng.randint(1, 4))
    hq = int(rng.randint(1, 2 * N + 3))
    divisors = [h for h in range(1, hq + 1) if hq % h == 0]
    hkv = 1 if rng.randint(0, 3) == 0 else divisors[int(rng.randint(0, len(divisors)))]
    if layout == "thd":
        num_docs = int(rng.randint(0, 3 * len(groups) + 1))
        lengths = [int(x) for x in rng.randint(1, 3 * N + 2, size=num_docs)]
        owner = rng.randint(0, len(groups), size=num_docs)
        order = rng.permutation(num_docs)  # each group's stream in an order of its own, not ascending
        docs = [[int(d) for d in order if owner[d] == g] for g in range(len(groups))]
        batch = basp.Batch(groups, docs=docs, lengths=lengths)
        seq_len = None
    else:
        batch = basp.Batch(groups, sequences=[int(x) for x in rng.randint(1, 3, size=len(groups))])
        seq_len = int(rng.randint(1, 2 * N + 4))
    return batch, layout, seq_len, head_dim, [hq, hkv, hkv]


def where_am_i(batch):
    for g, members in enumerate(batch.groups):
        if RANK in members:
            return g, members.index(RANK), len(members)
    raise AssertionError("rank %d in no group of %r" % (RANK, batch))


def coordinates(batch, layout, seq_len, g):
    """Per sequence of the group (THD: its one stream), per token of it: (a, s), the global coordinates of the
    token (document and token in it, or sequence and token); and the number of tokens."""
    if layout == "thd":
        coords = [(d, i) for d in batch.docs[g] for i in range(batch.lengths[d])]
        return [coords], len(coords)
    first = sum(batch.sequences[:g])
    return [[(first + b, s) for s in range(seq_len)] for b in range(batch.sequences[g])], seq_len


def fill(layout, seqs, tokens, head_list, head_dim, t, heads_total):
    """An array of the layout's shape holding value() of each element: seqs[b][s] are the global coordinates of
    sequence b's token s, for s in `tokens` (a range), heads head_list (global indices)."""
    b_loc, n_tok, n_h = len(seqs), len(tokens), len(head_list)
    out = np.empty((b_loc, n_tok, n_h, head_dim), dtype=np.float64)
    for b in range(b_loc):
        for j, s in enumerate(tokens):
            a, pos = seqs[b][s]
            for i, h in enumerate(head_list):
                for e in range(head_dim):
                    out[b, j, i, e] = value(t, a, pos, h, e)
    if layout == "thd":
        return out[0]  # [T, H, D]
    if layout == "sbhd":
        return np.ascontiguousarray(out.transpose(1, 0, 2, 3))
    return out


def exchange_step(comm, batch, layout, seq_len, head_dim, heads, what):
    """Makes the batch plan and checks its scatter and gather bit for bit against the formulas above."""
    hq = heads[0]
    split = [0] + [0 if h == hq else hq for h in heads[1:]]
    plan = comm.batch_plan(batch, head_dim, heads, np.float64, layout=layout, query_heads=split, seq_len=seq_len)
    try:
        g, pos, k = where_am_i(batch)
        seqs, tokens = coordinates(batch, layout, seq_len, g)
        tok = split_bounds(tokens, k)
        info = plan.info
        check.equal((info.group_size, info.token_begin, info.token_end), (k, tok[pos], tok[pos + 1]),
                    "%s: plan info K and token range" % what)
        check.equal((plan.batch.group_index, plan.batch.group_position, plan.batch.rank), (g, pos, RANK),
                    "%s: plan.batch describes this rank" % what)
        ranges = [head_ranges(h, hq if h != hq else h, k) for h in heads]
        inputs = [fill(layout, seqs, range(tok[pos], tok[pos + 1]), list(range(h)), head_dim, t, h)
                  for t, h in enumerate(heads)]
        expected = [fill(layout, seqs, range(tokens), list(range(*ranges[t][pos])), head_dim, t, h)
                    for t, h in enumerate(heads)]
        outputs = [np.full(e.shape, POISON) for e in expected]
        got = plan.scatter(inputs, outputs)
        check.true(all(o is p for o, p in zip(got, outputs)), "%s: scatter returns the outputs given" % what)
        for t in range(len(heads)):
            check.equal(outputs[t].shape, expected[t].shape, "%s: scatter tensor %d shape" % (what, t))
            check.true(np.array_equal(outputs[t], expected[t]), "%s: scatter tensor %d, heads %r (%s, K %d, "
                       "position %d): bit-exact" % (what, t, ranges[t][pos], layout, k, pos))
        back = [np.full(x.shape, POISON) for x in inputs]
        plan.gather(outputs, back)
        for t, h in enumerate(heads):
            holders = np.array([sum(1 for r in ranges[t] if r[0] <= x < r[1]) for x in range(h)], dtype=np.float64)
            want = inputs[t] * holders[:, None]  # heads are the second-to-last axis in every layout
            check.true(np.array_equal(back[t], want), "%s: gather tensor %d is each head times its holders (%r)"
                       % (what, t, holders.tolist()))
    finally:
        plan.close()


def batch_comm():
    return basp.Comm(WORLD, batch_capacity=CAPACITY)


def test_new_membership_every_step():
    steps = 24
    with batch_comm() as comm:
        check.equal(comm.batch_capacity, CAPACITY, "comm.batch_capacity")
        rng = np.random.RandomState(1234)  # the same draws on every rank
        for step in range(steps):
            batch, layout, seq_len, head_dim, heads = draw_step(rng)
            exchange_step(comm, batch, layout, seq_len, head_dim, heads,
                          "step %d (%s, heads %r, %r)" % (step, layout, heads, batch))
        # Fixed shapes too: every rank alone, and the whole world in one group with its ranks reversed.
        alone = basp.Batch([[r] for r in range(N)], docs=[[r] for r in range(N)], lengths=[r + 2 for r in range(N)])
        exchange_step(comm, alone, "thd", None, 2, [2 * N + 1, 1, 1], "groups of one rank")
        whole = basp.Batch([list(reversed(range(N)))], docs=[[1, 0]], lengths=[3 * N + 1, 2])
        exchange_step(comm, whole, "thd", None, 3, [3, 3, 3], "one group of every rank, reversed")


def check_batch_is_partition(batch, num_docs, what):
    ranks = sorted(r for g in batch.groups for r in g)
    check.equal(ranks, list(range(N)), "%s: the groups partition the world" % what)
    docs = sorted(d for g in batch.docs for d in g)
    check.equal(docs, list(range(num_docs)), "%s: the groups' documents partition the batch" % what)
    check.true(all(g == sorted(g) for g in batch.docs), "%s: each group's documents ascending" % what)


def test_planner_identical_on_every_rank():
    with batch_comm() as comm:
        rng = np.random.RandomState(77)
        models = [None, basp.CostModel(a0=2e-5, a1=5e-6, beta_node=2e-10, beta_network=8e-11, c2=1e-9, c1=1e-7)]
        for m, model in enumerate(models):
            if model is not None:
                comm.cost_model = model
                check.equal(comm.cost_model, model, "the cost model set")
            for trial in range(6):
                lengths = [int(x) for x in rng.randint(1, 400, size=int(rng.randint(1, 3 * N + 2)))]
                batch = comm.plan_batch(lengths, query_heads=8, kv_heads=2, head_dim=16, dtype=np.float32,
                                        capacity=4096)
                what = "model %d trial %d (lengths %r)" % (m, trial, lengths)
                check.equal(batch.rank, RANK, "%s: the planner's batch describes this rank" % what)
                check.equal(batch.lengths, lengths, "%s: the batch's lengths" % what)
                check_batch_is_partition(batch, len(lengths), what)
                check.true(batch.predicted_seconds is not None and batch.predicted_seconds >= 0,
                           "%s: predicted_seconds %r" % (what, batch.predicted_seconds))
                answers = WORLD.allgather((batch.as_dict(), repr(batch.predicted_seconds)))
                check.true(all(a == answers[0] for a in answers), "%s: the planner's answer on every rank: %r" % (
                    what, answers))
                # The same answer again from numpy lengths, and a plan made from it moves its stream exactly.
                again = comm.plan_batch(np.array(lengths, dtype=np.int64), 8, 2, 16, "float32", capacity=4096)
                check.equal(again, batch, "%s: the same answer for the same problem" % what)
                short = basp.Batch(batch.groups, docs=batch.docs, lengths=[1 + x % 7 for x in lengths])
                exchange_step(comm, short, "thd", None, 2, [8, 2, 2], what + ": exchanged (shortened documents)")
        expect_error(lambda: comm.plan_batch([10, 5000], 8, 2, 16, np.float32, capacity=10), S.ERROR_INVALID_ARGUMENT,
                     "basp_comm_plan_batch")
        expect_error(lambda: comm.plan_batch([[1, 2]], 8, 2, 16, np.float32), S.ERROR_INVALID_ARGUMENT, "lengths")


def test_pack_batch_against_slicing():
    with batch_comm() as comm:
        rng = np.random.RandomState(5)
        for trial in range(10):
            lengths = [int(x) for x in rng.randint(1, 4 * N + 3, size=int(rng.randint(1, 2 * N + 3)))]
            if trial % 2:
                batch = comm.plan_batch(lengths, 4, 4, 8, np.float32)
            else:
                groups = random_membership(rng, N)
                owner = rng.randint(0, len(groups), size=len(lengths))
                order = rng.permutation(len(lengths))
                batch = basp.Batch(groups, docs=[[int(d) for d in order if owner[d] == g] for g in range(len(groups))],
                                   lengths=lengths, rank=RANK)
            documents = [np.arange(L * 3, dtype=np.float32).reshape(L, 3) + 1000 * d for d, L in enumerate(lengths)]
            g, pos, k = where_am_i(batch)
            stream = [documents[d] for d in batch.docs[g]]
            whole = np.concatenate(stream) if stream else np.zeros((0, 3), np.float32)
            starts = np.cumsum([0] + [lengths[d] for d in batch.docs[g]])
            positions = np.concatenate([np.arange(lengths[d]) for d in batch.docs[g]] or [np.zeros(0, np.int64)])
            tok = split_bounds(len(whole), k)
            packed = basp.data.pack_batch(documents, batch)
            what = "trial %d (%r)" % (trial, batch)
            check.true(np.array_equal(packed.tokens, whole[tok[pos]:tok[pos + 1]]), "%s: tokens" % what)
            check.equal(packed.tokens.dtype, np.float32, "%s: the documents' dtype" % what)
            check.equal(packed.positions.tolist(), positions[tok[pos]:tok[pos + 1]].tolist(), "%s: positions" % what)
            check.equal(packed.cu_seqlens.tolist(), starts.tolist(), "%s: the group's cu_seqlens" % what)
            check.equal(packed.cu_seqlens.dtype, np.int32, "%s: cu_seqlens is int32 (flash-attn's)" % what)
            check.equal(packed.max_seqlen, max([lengths[d] for d in batch.docs[g]] or [0]), "%s: max_seqlen" % what)
            check.equal((packed.stream_tokens, packed.num_tokens), (len(whole), tok[pos + 1] - tok[pos]),
                        "%s: stream and slice lengths" % what)
            check.equal((batch.token_begin, batch.token_end, batch.stream_tokens), (tok[pos], tok[pos + 1], len(whole)),
                        "%s: the batch's token range" % what)
            # Another rank's view, without MPI: what that rank would pack.
            other = (RANK + 1) % N
            og, opos = batch.position_of(other)
            ok = len(batch.groups[og])
            ostream = [documents[d] for d in batch.docs[og]]
            owhole = np.concatenate(ostream) if ostream else np.zeros((0, 3), np.float32)
            otok = split_bounds(len(owhole), ok)
            check.true(np.array_equal(basp.data.pack_batch(documents, batch, rank=other).tokens,
                                      owhole[otok[opos]:otok[opos + 1]]), "%s: rank %d's tokens" % (what, other))
            # unpack_batch, pack's inverse: every rank's pieces of a per-token result (here its packed input, poisoned
            # copies of it elsewhere) put at their offsets give every document of the micro-batch whole, once.
            local = packed.tokens.copy()
            pieces = basp.data.unpack_batch(local, batch)
            check.true(all(np.shares_memory(p, local) for _, _, p in pieces if p.size), "%s: pieces are views" % what)
            rebuilt = [np.full((L, 3), POISON, np.float32) for L in lengths]
            covered = [np.zeros(L, np.int64) for L in lengths]
            for rank_pieces in WORLD.allgather(pieces):
                for d, offset, piece in rank_pieces:
                    rebuilt[d][offset:offset + len(piece)] = piece
                    covered[d][offset:offset + len(piece)] += 1
            check.true(all(np.array_equal(r, doc) for r, doc in zip(rebuilt, documents)),
                       "%s: the documents rebuilt from every rank's unpacked pieces" % what)
            check.true(all((c == 1).all() for c in covered), "%s: every token in exactly one piece" % what)
        lengths = [3, 4]
        batch = basp.Batch([list(range(N))], docs=[[1, 0]], lengths=lengths)
        expect_error(lambda: basp.data.pack_batch([np.zeros((3, 2))], batch, rank=0), S.ERROR_INVALID_ARGUMENT,
                     "documents has 1 entries")
        expect_error(lambda: basp.data.pack_batch([np.zeros((3, 2)), np.zeros((5, 2))], batch, rank=0),
                     S.ERROR_INVALID_ARGUMENT, "documents[1] has shape (5, 2)")
        expect_error(lambda: basp.data.pack_batch([np.zeros((3, 2))] * 2, batch), S.ERROR_INVALID_ARGUMENT,
                     "describes no rank")
        if N > 1:
            short = basp.data.batch_assignment(batch, rank=0).num_tokens
            expect_error(lambda: basp.data.unpack_batch(np.zeros((short + 1, 2)), batch, rank=0),
                         S.ERROR_INVALID_ARGUMENT, "local has shape (%d, 2) but this rank holds %d tokens" % (short + 1,
                                                                                                          short))
        seqs = basp.Batch([list(range(N))], sequences=[2])
        expect_error(lambda: basp.data.batch_assignment(seqs, rank=0), S.ERROR_INVALID_ARGUMENT, "BSHD/SBHD")


def test_cost_model_round_trip():
    with batch_comm() as comm:
        default = comm.cost_model
        check.true(isinstance(default, basp.CostModel) and not default.calibrated, "a fresh comm's model: %r" % default)
        check.equal((default.c2, default.c1), (0.0, 0.0), "a fresh comm's attention coefficients are 0")
        text = comm.export_cost_model()
        check.true(text.startswith("basp-cost-model 1\n"), "export starts with its header: %r" % text)
        check.equal(default.per_piece, 0.0, "a fresh comm's model has no per-piece term")
        model = basp.CostModel(a0=1.5e-5, a1=3.25e-6, beta_node=1.0 / 3e11, beta_network=1.0 / 7e9, c2=2.5e-12,
                               c1=1e-9, calibrated=True, per_piece=1.0 / 3e7)
        comm.cost_model = model
        check.equal(comm.cost_model, model, "get returns what set stored (bit for bit)")
        exported = comm.export_cost_model()
        comm.import_cost_model(text)
        check.equal(comm.cost_model, default, "importing the first export restores the default")
        comm.import_cost_model(exported)
        check.equal(comm.cost_model, model, "importing the second restores the model set, calibrated included")
        check.equal(comm.export_cost_model(), exported, "export of an imported model is the same text")
        # Rank 0's text on every rank: every rank then holds the same model and the planner agrees.
        shared = WORLD.bcast(exported if RANK == 0 else None, root=0)
        comm.import_cost_model(shared)
        models = WORLD.allgather(comm.cost_model)
        check.true(all(m == models[0] for m in models), "the same model on every rank")
        lines = exported.splitlines()
        bad = "\n".join(lines[:2] + [lines[2].split()[0] + " not-a-number"] + lines[3:]) + "\n"
        expect_error(lambda: comm.import_cost_model(bad), S.ERROR_INVALID_ARGUMENT, "line 3")
        expect_error(lambda: comm.import_cost_model("basp-cost-model 99\n"), S.ERROR_INVALID_ARGUMENT, "line 1")
        expect_error(lambda: comm.import_cost_model(42), S.ERROR_INVALID_ARGUMENT, "not a str")
        check.equal(comm.cost_model, model, "a refused import leaves the model as it was")
        check.true("\nper_piece " in exported, "the export carries per_piece: %r" % exported)
        expect_error(lambda: setattr(comm, "cost_model", basp.CostModel(a1=-1.0)), S.ERROR_INVALID_ARGUMENT, "a1")
        expect_error(lambda: setattr(comm, "cost_model", basp.CostModel(per_piece=-1e-9)), S.ERROR_INVALID_ARGUMENT,
                     "per_piece")
        expect_error(lambda: setattr(comm, "cost_model", basp.CostModel(c2=float("nan"))), S.ERROR_INVALID_ARGUMENT,
                     "c2")
        expect_error(lambda: setattr(comm, "cost_model", "fast"), S.ERROR_INVALID_ARGUMENT, "basp.CostModel")
        # Calibration on the live comm, small: the same fitted model on every rank, marked calibrated.
        if N == 1:
            expect_error(lambda: comm.calibrate(), S.ERROR_UNSUPPORTED, "one rank")
            return
        measured = comm.calibrate(max_bytes=1 << 12, repeats=1)
        check.true(measured.calibrated and measured == comm.cost_model, "calibrate returns the stored model")
        models = WORLD.allgather(measured)
        check.true(all(m == models[0] for m in models), "calibration stores the same model on every rank")


def _warned(fn, name):
    """fn()'s result; checks that it warned once with a DeprecationWarning naming `name`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    check.equal(len(deprecations), 1, "%s warns once" % name)
    check.true(all(name in str(w.message) and w.filename == __file__ for w in deprecations),
               "%s's warning names it and points at its caller: %s" % (name, [str(w.message) for w in deprecations]))
    return result


def test_deprecated_names():
    """The former names answer as the new ones do, with a DeprecationWarning; the new ones warn nothing."""
    lengths = [5 + (7 * i) % 23 for i in range(2 * N + 1)]
    with batch_comm() as comm:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            batch = comm.partition_batch(lengths, 8, 2, 16, np.float32)
            info = comm.query(12)
        old = _warned(lambda: comm.plan_batch(lengths, 8, 2, 16, np.float32), "plan_batch")
        check.equal(old, batch, "plan_batch's answer is partition_batch's")
        shard = _warned(lambda: comm.shard(12), "shard")
        check.equal(shard.as_dict(), info.as_dict(), "shard's answer is query's")
        expect_error(lambda: comm.partition_batch([10, 5000], 8, 2, 16, np.float32, capacity=10),
                     S.ERROR_INVALID_ARGUMENT, "basp_comm_partition_batch")


def _older_partition_batch(fn):
    """basp_comm_partition_batch (`fn`) as a libbasp built before v_head_dim reads the problem: through capacity
    only (the library copies the bytes its own struct has); any other function as it is."""
    if getattr(fn, "__name__", "") != "basp_comm_partition_batch":
        return fn

    def call(comm, problem, *rest):
        older = type(problem._obj).from_buffer_copy(problem._obj)  # problem: ctypes.byref(a BatchProblemStruct)
        older.size = type(older).v_head_dim.offset
        return fn(comm, ctypes.byref(older), *rest)
    return call


def test_v_head_dim():
    """partition_batch with v's head size (multi-head latent attention): the predicted time as docs/batch.md's model
    written out here, bytes and attention, and v_head_dim None, 0 and head_dim alike; bad values named."""
    hq = hkv = 12  # divisible by every K up to 4
    d, dv, elem = 24, 16, 4  # float32
    length = 301
    capacity = -(-length // N)  # the one document needs a group of all N ranks
    one_node = len(set(WORLD.allgather(MPI.Get_processor_name()))) == 1
    with batch_comm() as comm:
        # Bytes alone (beta_node 1): N - 1 peers on the node, each sent t tokens of hq / N heads of Q and K at D and
        # V at Dv, then the output's at Dv; no exchange when N == 1.
        comm.cost_model = basp.CostModel(beta_node=1.0)
        t, h = -(-length // N), hq // N
        for value in (None, 0, d, dv, 40):
            v = d if not value else value
            batch = comm.partition_batch([length], hq, hkv, d, np.float32, capacity=capacity, v_head_dim=value)
            want = float((N - 1) * t * (h * d + h * d + h * v + h * v) * elem)
            if one_node:
                check.equal(batch.predicted_seconds, want, "bytes of v_head_dim %r" % value)
            check.equal(batch.groups, [list(range(N))], "one group of all ranks for v_head_dim %r" % value)
        # Attention alone: every plan's time scales by (D + Dv) / (2 D).
        comm.cost_model = basp.CostModel(c2=1e-9, c1=1e-7)
        lengths = [5 + (7 * i) % 23 for i in range(2 * N + 1)]
        plain = comm.partition_batch(lengths, hq, hkv, d, np.float32)
        same = comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=d)
        mla = comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=dv)
        check.equal(repr(same.predicted_seconds), repr(plain.predicted_seconds), "v_head_dim = head_dim")
        check.true(plain.predicted_seconds > 0, "attention costs: %r" % plain.predicted_seconds)
        want = plain.predicted_seconds * (d + dv) / (2.0 * d)
        check.true(abs(mla.predicted_seconds - want) <= 1e-12 * want,
                   "MLA's attention: %r, expected %r" % (mla.predicted_seconds, want))
        # A libbasp built before v_head_dim (the real one given the struct through capacity, as such a library
        # reads it) would plan as if v had head_dim's size: refused, naming its version; None, 0 and head_dim plan.
        real_require = basp._library.require
        basp._library.require = lambda name, where: _older_partition_batch(real_require(name, where))
        try:
            for value in (None, 0, d):
                older = comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=value)
                check.equal(repr(older.predicted_seconds), repr(plain.predicted_seconds), "older, v %r" % value)
            expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=dv),
                         S.ERROR_UNSUPPORTED, "v_head_dim (%d, head_dim %d)" % (dv, d),
                         "libbasp %d.%d.%d" % basp.version(), "does not read basp_batch_problem_v1.v_head_dim")
        finally:
            basp._library.require = real_require
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=-1),
                     S.ERROR_INVALID_ARGUMENT, "v_head_dim (-1)")
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim="16"),
                     S.ERROR_INVALID_ARGUMENT, "v_head_dim ('16')")
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=True),
                     S.ERROR_INVALID_ARGUMENT, "v_head_dim (True)")
        # Beyond int64 (ctypes would keep the low 64 bits: 2^64 + 16 as 16, a plan for Dv 16): named, not wrapped.
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=2 ** 64 + dv),
                     S.ERROR_INVALID_ARGUMENT, "v_head_dim (18446744073709551632) must be None or in 0..2^63 - 1")
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, v_head_dim=2 ** 63),
                     S.ERROR_INVALID_ARGUMENT, "v_head_dim (9223372036854775808)")
        for name, args in (("query_heads", (2 ** 64 + hq, hkv, d)), ("kv_heads", (hq, 2 ** 64 + hkv, d)),
                           ("head_dim", (hq, hkv, 2 ** 64 + d))):
            expect_error(lambda: comm.partition_batch(lengths, *args, np.float32), S.ERROR_INVALID_ARGUMENT,
                         "%s (%d) is beyond int64" % (name, max(args)))
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, d, np.float32, capacity=2 ** 64 + 100),
                     S.ERROR_INVALID_ARGUMENT, "capacity (18446744073709551716) is beyond int64")
        expect_error(lambda: comm.partition_batch([5, 2 ** 64 + 5], hq, hkv, d, np.float32),
                     S.ERROR_INVALID_ARGUMENT, "lengths[1] (18446744073709551621) is beyond int64")
        expect_error(lambda: comm.partition_batch(lengths, hq, hkv, 1 << 40, np.float32, v_head_dim=1 << 60),
                     S.ERROR_INVALID_ARGUMENT, "bytes per token", "v_head_dim 1152921504606846976")


def test_refusals():
    with basp.Comm(WORLD, micro_batch=N) as plain:
        check.equal(plain.batch_capacity, 0, "a comm without batch_capacity")
        expect_error(lambda: plain.plan_batch([4], 2, 2, 2, np.float32), S.ERROR_INVALID_ARGUMENT, "batch_capacity")
        one = basp.Batch([list(range(N))], docs=[[0]], lengths=[4])
        expect_error(lambda: plain.batch_plan(one, 2, [N], np.float32), S.ERROR_INVALID_ARGUMENT, "batch_capacity")
    expect_error(lambda: basp.Comm(WORLD), S.ERROR_INVALID_ARGUMENT, "micro_batch is required")
    with basp.Comm(WORLD, micro_batch=0, batch_capacity=8) as comm:
        check.equal(comm.batch_capacity, 8, "micro_batch 0 with batch_capacity: a comm of batch plans only")
        big = basp.Batch([list(range(N))], docs=[[0]], lengths=[8 * N + 1])
        expect_error(lambda: comm.batch_plan(big, 2, [N], np.float32), S.ERROR_INVALID_ARGUMENT, "batch_capacity")
        expect_error(lambda: comm.plan(4, 2, [N], np.float32), S.ERROR_INVALID_ARGUMENT, "batch plans only")
        if N > 1:
            short = basp.Batch([list(range(N - 1))], docs=[[0]], lengths=[4])
            expect_error(lambda: comm.batch_plan(short, 2, [N], np.float32), S.ERROR_INVALID_ARGUMENT, "sum")
        expect_error(lambda: basp.Batch([[0], [0]], docs=[[], []], lengths=[]), S.ERROR_INVALID_ARGUMENT,
                     "rank 0 is in group 0 and in group 1")
        expect_error(lambda: basp.Batch([[0]], docs=[[3]], lengths=[1]), S.ERROR_INVALID_ARGUMENT, "document 3")
        expect_error(lambda: comm.batch_plan("groups", 2, [N], np.float32), S.ERROR_INVALID_ARGUMENT, "basp.Batch")
        # The comm still makes batch plans after the refusals (none of them counted).
        exchange_step(comm, basp.Batch([list(range(N))], docs=[[0]], lengths=[N + 1]), "thd", None, 1, [N, 1, 1],
                      "after the refusals")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
