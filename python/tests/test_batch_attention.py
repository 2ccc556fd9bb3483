"""BaspAttention over batch plans against float64 single-process attention, on the CPU over the MPI
backend: every step a new membership (the planner's answer under a cost model that makes groups of several ranks,
and memberships written here with random group sizes and permuted ranks, groups without documents included), each
group attending over its whole packed stream, causal within each document. Output and the gradients of Q, K and V
on every rank equal the rank's slice (basp.data.pack_batch) of the reference, computed here per document
independently of basp.torch (query head h reads K/V head h // (Hq / Hkv), selected by index). Also: layers of one
shape share a batch's plans, the plans live on the batch, prepare(batch=...) makes them ahead (and a compiled
forward then traces, PyTorch >= 2.4), values of another head size than queries and keys (multi-head latent
attention), and a batch that describes another rank or a non-THD layer is refused.

Run under mpirun (CTest: 2 and 4 ranks). Exits 77 (skipped) only where PyTorch is not installed."""
import math
import sys

try:
    import torch
except ImportError:
    print("PyTorch is not installed: skipped", flush=True)
    sys.exit(77)
import numpy as np
from mpi4py import MPI

import basp
import basp.torch as bt
from harness import check, expect_error, random_membership, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
D = 4
TOLERANCE = {torch.float32: (1e-4, 2e-5), torch.float64: (1e-10, 1e-12)}
MODEL = basp.CostModel(a0=2e-5, a1=5e-6, beta_node=2e-10, beta_network=8e-11, c2=1e-6, c1=1e-7)

torch.set_num_threads(1)


def reference(q, k, v, dout, causal):
    """Attention over one whole document [L, H, D] in float64; returns out, dq, dk, dv."""
    q, k, v = (x.double().detach().requires_grad_() for x in (q, k, v))
    hq, hkv, s = q.shape[1], k.shape[1], q.shape[0]
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = k.index_select(1, kv_of), v.index_select(1, kv_of)
    scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv)
    (out * dout.double()).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


def close(got, ref, dtype, what):
    rtol, atol = TOLERANCE[dtype]
    err = (got.double() - ref).abs().max().item() if got.numel() and got.shape == ref.shape else 0.0
    check.true(got.shape == ref.shape and torch.allclose(got.double(), ref, rtol=rtol, atol=atol),
               "%s: shapes %s / %s, max abs error %.3g" % (what, tuple(got.shape), tuple(ref.shape), err))


def drawn_batch(rng, lengths):
    """A membership written here: random group sizes, the world's ranks permuted, documents to groups at random
    (a group may have none), each group's stream in an order of its own."""
    groups = random_membership(rng, N)
    owner = rng.randint(0, len(groups), size=len(lengths))
    order = rng.permutation(len(lengths))
    return basp.Batch(groups, docs=[[int(d) for d in order if owner[d] == g] for g in range(len(groups))],
                      lengths=lengths)


def batch_step(comm, layer, batch, hq, hkv, causal, dtype, seed, what, d=D, dv=D):
    """One forward and backward over `batch`; q and k of head size d, v and the output dv."""
    lengths = batch.lengths
    g = torch.Generator().manual_seed(seed)
    docs = [[torch.randn(n, h, x, generator=g, dtype=torch.float64) for h, x in ((hq, d), (hkv, d), (hkv, dv),
                                                                               (hq, dv))] for n in lengths]
    # The reference of every document of this rank's group (the others are never read by pack_batch).
    mine = set(batch.for_rank(RANK).group_docs)
    # Others get zeros of the reference's shapes: an empty group's slice takes its trailing shape from document 0.
    refs = [reference(*doc[:3], doc[3], causal) if i in mine else
            [torch.zeros(n, h, x, dtype=torch.float64) for h, x in ((hq, dv), (hq, d), (hkv, d), (hkv, dv))]
            for i, (n, doc) in enumerate(zip(lengths, docs))]

    def pack(i, source):
        documents = [(r[i] if source == "ref" else d[i]) for d, r in zip(docs, refs)]
        return basp.data.pack_batch(documents, batch, rank=RANK).tokens

    leaves = [pack(i, "in").to(dtype).requires_grad_() for i in range(3)]
    out = layer(*leaves, batch=batch)
    (out * pack(3, "in").to(dtype)).sum().backward()
    view = batch.for_rank(RANK)
    what = "%s: N=%d Hq=%d Hkv=%d D=%d Dv=%d causal=%s %s, groups %r, this rank's group %d (T=%d, docs %r)" % (
        what, N, hq, hkv, d, dv, causal, dtype, batch.groups, view.group_index, view.stream_tokens, view.group_docs)
    for i, (name, got) in enumerate(zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in leaves])):
        close(got, pack(i, "ref"), dtype, "%s, %s" % (name, what))


def test_planned_batches():
    with basp.Comm(WORLD, batch_capacity=1 << 12) as comm:
        comm.cost_model = MODEL
        rng = np.random.RandomState(3)
        cases = [(4, 2, True, torch.float64), (6, 1, True, torch.float64), (2 * N + 1, 1, False, torch.float32),
                 (8, 8, True, torch.float32)]
        sizes = set()
        for c, (hq, hkv, causal, dtype) in enumerate(cases):
            layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=causal, layout="thd")
            for step in range(3):
                lengths = [int(x) for x in rng.randint(1, 24 * N, size=int(rng.randint(1, 2 * N + 2)))]
                batch = comm.plan_batch(lengths, hq, hkv, D, dtype)
                sizes.update(len(grp) for grp in batch.groups)
                batch_step(comm, layer, batch, hq, hkv, causal, dtype, 100 * c + step,
                           "case %d step %d (planned)" % (c, step))
        check.true(max(sizes) > 1 or N == 1, "the planner made a group of several ranks (sizes %r)" % sorted(sizes))


def test_values_of_another_head_size():
    # Multi-head latent attention's shapes over batch plans: q and k of 6 channels, v of 4 (MHA 3/3, GQA 4/2).
    with basp.Comm(WORLD, micro_batch=0, batch_capacity=1 << 12) as comm:
        rng = np.random.RandomState(17)
        for c, (hq, hkv) in enumerate(((3, 3), (4, 2))):
            layer = bt.BaspAttention(comm, hq, 6, num_kv_heads=hkv, causal=True, layout="thd", v_head_dim=4)
            for step in range(2):
                lengths = [int(x) for x in rng.randint(1, 6 * N + 2, size=int(rng.randint(1, 2 * N + 2)))]
                batch_step(comm, layer, drawn_batch(rng, lengths), hq, hkv, True, torch.float64, 3000 + 10 * c + step,
                           "MLA case %d step %d (drawn)" % (c, step), d=6, dv=4)


def test_drawn_memberships():
    with basp.Comm(WORLD, micro_batch=0, batch_capacity=1 << 12) as comm:
        rng = np.random.RandomState(11)
        for c, (hq, hkv, causal) in enumerate([(4, 2, True), (3, 3, False), (2 * N + 2, 2, True)]):
            layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=causal, layout="thd")
            for step in range(4):
                lengths = [int(x) for x in rng.randint(1, 6 * N + 2, size=int(rng.randint(1, 2 * N + 2)))]
                batch = drawn_batch(rng, lengths)
                batch_step(comm, layer, batch, hq, hkv, causal, torch.float64, 1000 + 100 * c + step,
                           "case %d step %d (drawn)" % (c, step))


def test_layers_share_a_batchs_plans():
    with basp.Comm(WORLD, batch_capacity=1 << 12) as comm:
        lengths = [5, 3 * N + 1, 2]
        batch = basp.Batch([list(reversed(range(N)))], docs=[[2, 0, 1]], lengths=lengths)
        first = bt.BaspAttention(comm, 4, D, num_kv_heads=2, causal=True, layout="thd")
        second = bt.BaspAttention(comm, 4, D, num_kv_heads=2, causal=True, layout="thd")
        other = bt.BaspAttention(comm, 2, D, causal=True, layout="thd")
        first.prepare(dtype=torch.float64, batch=batch)
        check.equal(len(batch._attention_plans), 1, "prepare(batch=...) made the batch's plans")
        batch_step(comm, first, batch, 4, 2, True, torch.float64, 7, "first layer")
        batch_step(comm, second, batch, 4, 2, True, torch.float64, 8, "second layer")
        check.equal(len(batch._attention_plans), 1, "layers of one shape share the batch's plans")
        batch_step(comm, other, batch, 2, 2, True, torch.float64, 9, "a layer of another shape")
        check.equal(len(batch._attention_plans), 2, "a layer of another shape has plans of its own")
        plans = list(batch._attention_plans.values())[0]
        check.equal(plans.qkv.batch.group_position, list(reversed(range(N))).index(RANK),
                    "the plans describe this rank's position")
        q = torch.zeros(1, 4, D, dtype=torch.float64)
        elsewhere = batch.for_rank((RANK + 1) % N)
        if N > 1:
            expect_error(lambda: first(q, q[:, :2], q[:, :2], batch=elsewhere), basp.Status.ERROR_INVALID_ARGUMENT,
                         "describes rank")
        expect_error(lambda: first(q, q[:, :2], q[:, :2], batch=batch, cu_seqlens=[0, 1]),
                     basp.Status.ERROR_INVALID_ARGUMENT, "come from the batch")
        expect_error(lambda: first(q, q[:, :2], q[:, :2], cu_seqlens=[0, 1]), basp.Status.ERROR_INVALID_ARGUMENT,
                     "no token_capacity")
        bshd = bt.BaspAttention(comm, 4, D, layout="bshd")
        x = torch.zeros(1, 1, 4, D)
        expect_error(lambda: bshd(x, x, x, batch=batch), basp.Status.ERROR_INVALID_ARGUMENT, "layout THD")


def test_compiled_forward_with_prepared_batch():
    """torch.compile(fullgraph=True) traces a forward with a batch whose plans prepare(batch=...) made (PyTorch >=
    2.4, the custom operators; eager only on older PyTorch), forward and backward equal to the eager layer's."""
    with basp.Comm(WORLD, batch_capacity=1 << 12) as comm:
        layer = bt.BaspAttention(comm, 4, D, num_kv_heads=2, causal=True, layout="thd")
        batch = basp.Batch([list(reversed(range(N)))], docs=[[1, 0]], lengths=[2 * N + 3, N + 1], rank=RANK)
        layer.prepare(dtype=torch.float64, batch=batch)
        n = batch.token_end - batch.token_begin
        g = torch.Generator().manual_seed(5)
        x = [torch.randn(n, h, D, generator=g, dtype=torch.float64) for h in (4, 2, 2)]
        eager = [t.clone().requires_grad_() for t in x]
        want = layer(*eager, batch=batch)
        want.sum().backward()
        if not bt.HAVE_CUSTOM_OPS:
            check.equal(want.shape, (n, 4, D), "eager forward (no custom operators on PyTorch %s: not compiled)" %
                        torch.__version__)
            return
        traced = [t.clone().requires_grad_() for t in x]
        fn = torch.compile(lambda q, k, v: layer(q, k, v, batch=batch), fullgraph=True, backend="eager")
        got = fn(*traced)
        got.sum().backward()
        check.true(torch.equal(got, want), "compiled forward equals the eager one")
        for name, a, b in zip("qkv", traced, eager):
            check.true(torch.equal(a.grad, b.grad), "compiled d%s equals the eager one" % name)


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
