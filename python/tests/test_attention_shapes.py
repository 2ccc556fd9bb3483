"""BaspAttention for any shape against float64 single-process attention, on the CPU over the MPI backend:
GQA ratios 1, 2, 4, 8 and 16 (MQA), head counts the group size K does not divide (fewer query heads than ranks
included), sequence lengths K does not divide (ranks without tokens included), BSHD and SBHD; and packed documents
(THD, documents of random lengths assigned to groups by basp.data.assign_documents, causal within each document)
whose token count changes on every forward through the same plans. Output and the gradients of Q, K and V on every
rank equal the rank's slice of the reference, computed here independently of basp.torch (query head h reads K/V head
h // (Hq / Hkv), selected by index). Also: what a custom attention function sees on each rank, the varlen hook, and
that the backward of the Q/K/V scatter on a plan with replicated K/V heads is the summing gather (its adjoint).
Multi-head latent attention: values of another head size than q and k (sequences and THD), the rotary key sent
once as a one-head tensor (docs/python.md's recipe), and the refusals naming the shapes.

Run under mpirun (CTest: 2, 3, 4 ranks)."""
import math
import sys

import numpy as np
import torch
from mpi4py import MPI

import basp
import basp.torch as bt
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
D = 4
TOLERANCE = {torch.float32: (1e-4, 2e-5), torch.float64: (1e-10, 1e-12)}

torch.set_num_threads(1)


def split(items, parts, j):
    """[begin, end) of position j, torch.tensor_split's rule."""
    q, r = divmod(items, parts)
    begin = j * q + min(j, r)
    return begin, begin + q + (1 if j < r else 0)


def reference(q, k, v, dout, causal):
    """Attention on whole sequences [b, S, H, D] in float64; returns out, dq, dk, dv."""
    q, k, v = (x.double().detach().requires_grad_() for x in (q, k, v))
    hq, hkv, s = q.shape[2], k.shape[2], q.shape[1]
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = k.index_select(2, kv_of), v.index_select(2, kv_of)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), vv)
    (out * dout.double()).sum().backward()
    return [out.detach(), q.grad, k.grad, v.grad]


def close(got, ref, dtype, what):
    rtol, atol = TOLERANCE[dtype]
    err = (got.double() - ref).abs().max().item() if got.numel() else 0.0
    check.true(got.shape == ref.shape and torch.allclose(got.double(), ref, rtol=rtol, atol=atol),
               "%s: shapes %s / %s, max abs error %.3g" % (what, tuple(got.shape), tuple(ref.shape), err))


def sequence_case(b, groups, hq, hkv, seq_len, causal, layout, dtype, seed, attention=None, d=D, dv=None):
    """One forward and backward of BaspAttention on this rank's shard, checked against its slice of the reference;
    q and k have head size d, v and the output dv (None: d). Returns the layer's comm facts."""
    dv = d if dv is None else dv
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, seq_len, h, x, generator=g, dtype=torch.float64) for h, x in ((hq, d), (hkv, d),
                                                                                            (hkv, dv)))
    dout = torch.randn(b, seq_len, hq, dv, generator=g, dtype=torch.float64)
    ref = reference(q, k, v, dout, causal)
    comm = basp.Comm(WORLD, micro_batch=b, num_groups=groups)
    me = comm.query(seq_len)

    def local(x):
        return basp.data.local_shard(x if layout == "bshd" else x.transpose(0, 1).contiguous(), me, layout)

    leaves = [local(x).to(dtype).requires_grad_() for x in (q, k, v)]
    layer = bt.BaspAttention(comm, hq, d, num_kv_heads=hkv, causal=causal, layout=layout, attention=attention,
                             v_head_dim=None if dv == d else dv)
    out = layer(*leaves, seq_len=seq_len)
    (out * local(dout).to(dtype)).sum().backward()
    what = "N=%d B=%d G=%d K=%d Hq=%d Hkv=%d S=%d D=%d Dv=%d causal=%s %s %s" % (
        N, b, comm.num_groups, comm.group_size, hq, hkv, seq_len, d, dv, causal, layout, dtype)
    for name, got, expected in zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in leaves], ref):
        close(got, local(expected), dtype, "%s, %s" % (name, what))
    facts = (comm.group_size, comm.group_position, comm.num_groups)
    layer.close()
    comm.close()
    return facts


def test_gqa_ratios_1_to_16():
    for b in (1, 2):
        for i, hkv in enumerate((16, 8, 4, 2, 1)):  # Hq / Hkv = 1, 2, 4, 8, 16
            k = N // math.gcd(N, b)
            seq_len = 2 * k + 1 if i % 2 else 3 * k
            sequence_case(b, None, 16, hkv, seq_len, i % 2 == 0, ("bshd", "sbhd")[i % 2], torch.float32,
                          seed=100 * b + i)


def test_uneven_heads_and_tokens():
    # (Hq, Hkv, S as a function of K): nothing divides; fewer query heads than ranks; ranks without tokens.
    cases = [(5, 1, lambda k: 2 * k + 1), (6, 3, lambda k: k + 1), (7, 7, lambda k: 5), (2, 1, lambda k: 3 * k),
             (3, 3, lambda k: max(1, k - 1)), (12, 4, lambda k: 1)]
    for b, groups in ((1, None), (2, None), (2, 1)):
        k = N // (math.gcd(N, b) if groups is None else groups)
        for i, (hq, hkv, seq_len) in enumerate(cases):
            dtype = torch.float64 if i == 0 else torch.float32
            sequence_case(b, groups, hq, hkv, seq_len(k), i % 2 == 1, ("sbhd", "bshd")[i % 2], dtype,
                          seed=1000 * b + 10 * i + (groups or 0))


def test_custom_attention_sees_this_ranks_heads():
    seen = []

    def probe(q, k, v, causal):
        seen.append((tuple(q.shape), tuple(k.shape), tuple(v.shape), causal))
        return bt.explicit_attention(q, k, v, causal)

    hq, hkv, seq_len = 5, 1, 2 * N + 1
    k, l, _ = sequence_case(1, None, hq, hkv, seq_len, True, "bshd", torch.float32, seed=7, attention=probe)
    local_q = split(hq, k, l)[1] - split(hq, k, l)[0]
    # K/V heads expanded to this rank's query heads before the call; a rank without query heads calls nothing.
    expected = [((1, local_q, seq_len, D),) * 3 + (True,)] if local_q else []
    check.equal(seen, expected, "the local attention gets [B/G, Hq_l, S, D]")


def test_kv_head_map_follows_the_query_split():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k, l = comm.group_size, comm.group_position
        for hq, hkv in ((16, 1), (6, 3), (28, 4), (5, 5), (2 * k, 2), (8, 2)):
            layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv)
            qkv, _ = layer.plans(k + 1, torch.float32, "cpu")
            a, b = split(hq, k, l)
            r = hq // hkv
            kv_first = a // r if a < b else 0
            check.equal(bt.kv_head_map(qkv, hq, hkv), [(a + i) // r - kv_first for i in range(b - a)],
                        "local K/V head of each local query head, Hq=%d Hkv=%d" % (hq, hkv))
            check.equal(qkv.info.head_ranges[1], range(kv_first, (b - 1) // r + 1 if a < b else 0),
                        "K/V heads received, Hq=%d Hkv=%d" % (hq, hkv))
            layer.close()


def test_scatter_backward_is_the_summing_gather():
    with basp.Comm(WORLD, micro_batch=2) as comm:
        k = comm.group_size
        plan = comm.plan(k + 1, 3, [3, 1, 1], torch.float64, query_heads=[0, 3, 3])
        check.equal(plan.info.replicated, k > 1, "one K/V head for three query heads is replicated when K > 1")
        g = torch.Generator().manual_seed(RANK + 3)
        xs = [torch.randn(plan.seq_sharded_shape(t), generator=g, dtype=torch.float64, requires_grad=True)
              for t in range(3)]
        ys = [torch.randn(plan.head_sharded_shape(t), generator=g, dtype=torch.float64) for t in range(3)]
        outs = bt.head_scatter(plan, *xs)
        torch.autograd.backward(outs, ys)
        expected = plan.gather(ys)
        check.true(all(torch.equal(x.grad, e) for x, e in zip(xs, expected)), "scatter backward = summing gather")
        hs = [y.clone().requires_grad_() for y in ys]
        seeds = [torch.randn(plan.seq_sharded_shape(t), generator=g, dtype=torch.float64) for t in range(3)]
        torch.autograd.backward(bt.head_gather(plan, *hs), seeds)
        check.true(all(torch.equal(h.grad, e) for h, e in zip(hs, plan.scatter(seeds))), "gather backward = scatter")
        xd = [x.detach() for x in xs]
        lhs = WORLD.allreduce(sum((o * y).sum().item() for o, y in zip(plan.scatter(xd), ys)))
        rhs = WORLD.allreduce(sum((x * z).sum().item() for x, z in zip(xd, plan.gather(ys))))
        check.true(abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), "adjoint identity %r vs %r" % (lhs, rhs))
        plan.close()


def test_mla_values_of_another_head_size():
    # Multi-head latent attention (DeepSeek-V2/V3): q and k of 192 channels, v of 128 (the output has v's), one
    # exchange for the three. Hq = Hkv = K - 1 (at K = 2 a rank without query heads, whose empty output is still
    # v's size) and GQA 4/2, BSHD and SBHD, float32 and float64, BASP and Ulysses.
    for b, groups in ((1, None), (2, 1)):
        k = N // (math.gcd(N, b) if groups is None else groups)
        for i, (hq, hkv) in enumerate(((max(1, k - 1), max(1, k - 1)), (4, 2))):
            sequence_case(b, groups, hq, hkv, k + 1, i == 0, ("bshd", "sbhd")[i], (torch.float32, torch.float64)[i],
                          seed=300 + 10 * b + i, d=192, dv=128)


def test_mla_thd_documents():
    # Packed documents with values of another head size: q, k [T, 3, 6], v [T, 3, 4], causal per document.
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        lengths = [3, 2 * k + 1, 1]
        a = basp.data.assign_documents(comm, lengths, 64)
        g = torch.Generator().manual_seed(31)
        docs = [[torch.randn(n, 3, x, generator=g, dtype=torch.float64) for x in (6, 6, 4, 4)] for n in lengths]
        refs = [reference(*(x.unsqueeze(0) for x in doc), causal=True) for doc in docs]
        layer = bt.BaspAttention(comm, 3, 6, causal=True, layout="thd", token_capacity=64, v_head_dim=4)
        leaves = [a.pack([doc[i] for doc in docs])[0].requires_grad_() for i in range(3)]
        out = layer(*leaves, cu_seqlens=a.cu_seqlens)
        (out * a.pack([doc[3] for doc in docs])[0]).sum().backward()
        for i, (name, got) in enumerate(zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in leaves])):
            close(got, a.pack([r[i][0] for r in refs])[0], torch.float64, "%s, THD K=%d D=6 Dv=4" % (name, k))
        layer.close()


def mla_rope_once(qkv, out_plan, q, k_nope, k_rope, v, causal):
    """docs/python.md's recipe: multi-head latent attention with the rotary key sent once. q [b, S_l, H, 192],
    k_nope [b, S_l, H, 128], k_rope [b, S_l, 1, 64] (one vector per token for every head), v [b, S_l, H, 128]: one
    exchange; on the head-sharded side k = cat(k_nope, k_rope broadcast to this rank's heads); the output gathered at
    v's size. The backward sums k_rope's gradient over this rank's heads (expand) and over the ranks (the gather)."""
    qh, kh_nope, kh_rope, vh = bt.head_scatter(qkv, q, k_nope, k_rope, v)  # [b, S, H_l, .]
    if not qh.shape[2]:
        out = vh  # no query heads here: nothing to compute, an empty output of v's size
    else:
        kh = torch.cat((kh_nope, kh_rope.expand(-1, -1, kh_nope.shape[2], -1)), dim=-1)
        out = bt.default_attention(*(x.transpose(1, 2) for x in (qh, kh, vh)), causal).transpose(1, 2)
    (out,) = bt.head_gather(out_plan, out.contiguous())
    return out


def test_mla_rotary_key_sent_once():
    for b, groups, dtype in ((1, None, torch.float64), (2, 1, torch.float32)):
        with basp.Comm(WORLD, micro_batch=b, num_groups=groups) as comm:
            k, l = comm.group_size, comm.group_position
            for h in (k + 1, max(1, k - 1)):
                seq_len = k + 1
                qkv = comm.plan(seq_len, [192, 128, 64, 128], [h, h, 1, h], dtype, query_heads=[0, 0, h, 0])
                out_plan = comm.plan(seq_len, 128, [h], dtype)
                has_queries = split(h, k, l)[1] > split(h, k, l)[0]
                check.equal(qkv.info.head_ranges[2], range(0, 1 if has_queries else 0),
                            "the rotary key goes to every rank with query heads, H=%d K=%d" % (h, k))
                g = torch.Generator().manual_seed(400 + 10 * b + h)
                whole = [torch.randn(b, seq_len, n, x, generator=g, dtype=torch.float64)
                         for n, x in ((h, 192), (h, 128), (1, 64), (h, 128), (h, 128))]
                ref = [x.clone().requires_grad_() for x in whole[:4]]
                key = torch.cat((ref[1], ref[2].expand(-1, -1, h, -1)), dim=-1)
                scores = torch.einsum("bqhd,bkhd->bhqk", ref[0], key) / math.sqrt(192)
                scores = scores.masked_fill(torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1), float("-inf"))
                expected = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), ref[3])
                (expected * whole[4]).sum().backward()
                me = comm.query(seq_len)
                leaves = [basp.data.local_shard(x, me).to(dtype).requires_grad_() for x in whole[:4]]
                out = mla_rope_once(qkv, out_plan, *leaves, causal=True)
                (out * basp.data.local_shard(whole[4], me).to(dtype)).sum().backward()
                what = "rotary key once, B=%d K=%d H=%d %s" % (b, k, h, dtype)
                close(out, basp.data.local_shard(expected.detach(), me), dtype, "out, " + what)
                for name, leaf, r in zip(("dq", "dk_nope", "dk_rope", "dv"), leaves, ref):
                    close(leaf.grad, basp.data.local_shard(r.grad, me), dtype, "%s, %s" % (name, what))
                qkv.close()
                out_plan.close()


def test_mla_refusals_name_the_shapes():
    inv = basp.Status.ERROR_INVALID_ARGUMENT
    with basp.Comm(WORLD, micro_batch=1) as comm:
        expect_error(lambda: bt.BaspAttention(comm, 2, 192, v_head_dim=0), inv, "v_head_dim (0) must be positive")
        mla = bt.BaspAttention(comm, 2, 192, v_head_dim=128)
        plain = bt.BaspAttention(comm, 2, 192)
        q, k128 = torch.zeros(1, 2, 2, 192), torch.zeros(1, 2, 2, 128)
        expect_error(lambda: mla(q, k128, k128), inv, "q (1, 2, 2, 192) and k (1, 2, 2, 128) have different head "
                     "sizes (192, 128)", "v_head_dim")
        expect_error(lambda: mla(q, q, q), inv, "v has shape (1, 2, 2, 192): expected 2 heads of dim 128")
        expect_error(lambda: plain(q, q, k128), inv, "v has shape (1, 2, 2, 128): expected 2 heads of dim 192")
        check.true("v_head_dim=128" in repr(mla), "repr names v_head_dim: %r" % mla)
        mla.close()
        plain.close()


def document_batches(k, steps, seed):
    """Per step, document lengths (the same on every rank): random, a lone 1-token document (one group gets T = 1,
    the others T = 0), then random again."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        if step == 1:
            out.append([1])
        else:
            out.append([int(x) for x in rng.integers(1, 2 * k + 3, size=int(rng.integers(1, 2 * N + 2)))])
    return out


def test_thd_documents_causal_per_document():
    cases = [(8, 2, True, torch.float32), (3, 1, False, torch.float32), (16, 16, True, torch.float64),
             (5, 1, True, torch.float32)]
    for b in (1, 2):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k = comm.group_size
            capacity = (2 * N + 1) * (2 * k + 2)  # every batch below fits one group's stream
            for c, (hq, hkv, causal, dtype) in enumerate(cases):
                layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=causal, layout="thd",
                                         token_capacity=capacity)
                for step, lengths in enumerate(document_batches(k, 3, seed=10 * b + c)):
                    a = basp.data.assign_documents(comm, lengths, capacity)
                    g = torch.Generator().manual_seed(1000 * b + 100 * c + step)
                    docs = [[torch.randn(n, h, D, generator=g, dtype=torch.float64) for h in (hq, hkv, hkv, hq)]
                            for n in lengths]
                    refs = [reference(*(x.unsqueeze(0) for x in doc[:3]), doc[3].unsqueeze(0), causal) for doc in docs]

                    def pack(i, source):
                        return a.pack([d[i][0] if source == "ref" else d[i] for d in
                                       (refs if source == "ref" else docs)])[0]

                    leaves = [pack(i, "in").to(dtype).requires_grad_() for i in range(3)]
                    out = layer(*leaves, cu_seqlens=a.cu_seqlens)
                    (out * pack(3, "in").to(dtype)).sum().backward()
                    what = "THD N=%d B=%d K=%d Hq=%d Hkv=%d causal=%s %s step %d: T=%d, docs %r" % (
                        N, b, k, hq, hkv, causal, dtype, step, a.stream_tokens, a.docs)
                    for i, (name, got) in enumerate(zip(("out", "dq", "dk", "dv"), [out] + [x.grad for x in leaves])):
                        close(got, pack(i, "ref"), dtype, "%s, %s" % (name, what))
                check.equal(len(layer._plans), 1, "one pair of plans for every T (the capacity's)")
                layer.close()


def test_thd_varlen_hook():
    calls = []

    def varlen(q, k, v, cu_seqlens, max_seqlen, causal):
        calls.append((tuple(q.shape), tuple(k.shape), cu_seqlens.dtype, cu_seqlens.tolist(), max_seqlen, causal))
        cu = cu_seqlens.tolist()
        pieces = [bt.explicit_attention(*(x[s:e].transpose(0, 1) for x in (q, k, v)), causal).transpose(0, 1)
                  for s, e in zip(cu, cu[1:])]
        return torch.cat(pieces)

    with basp.Comm(WORLD, micro_batch=1) as comm:
        k, l = comm.group_size, comm.group_position
        lengths = [3, 2 * k + 1, 1]
        a = basp.data.assign_documents(comm, lengths, 64)
        g = torch.Generator().manual_seed(9)
        docs = [[torch.randn(n, h, D, generator=g) for h in (6, 2, 2)] for n in lengths]
        leaves = [a.pack([d[i] for d in docs])[0] for i in range(3)]
        plain = bt.BaspAttention(comm, 6, D, num_kv_heads=2, causal=True, layout="thd", token_capacity=64)
        hooked = bt.BaspAttention(comm, 6, D, num_kv_heads=2, causal=True, layout="thd", token_capacity=64,
                                  varlen_attention=varlen)
        expected = plain(*leaves, cu_seqlens=a.cu_seqlens)
        got = hooked(*leaves, cu_seqlens=torch.tensor(a.cu_seqlens.tolist()))
        check.true(torch.allclose(got, expected, rtol=1e-6, atol=1e-7), "varlen hook gives the per-document result")
        hq_l = split(6, k, l)[1] - split(6, k, l)[0]
        total = int(a.cu_seqlens[-1])
        check.equal(calls, [((total, hq_l, D), (total, hq_l, D), torch.int32, a.cu_seqlens.tolist(), a.max_seqlen,
                             True)] if hq_l else [], "the hook gets the packed stream [T, Hq_l, D] and int32 cu")
        plain.close()
        hooked.close()


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
