"""BASP attention in PyTorch against single-process attention, on the CPU over the MPI backend.

For every micro-batch B in {1, 2, 4, 8}, BASP (G = gcd(N, B)) and Ulysses (G = 1), causal or not, MHA and GQA,
BSHD and SBHD: each rank projects its shard of the input X (the data-loader helper picks it), runs
BaspAttention and backpropagates a fixed output gradient. The shards of the output and of the gradients of X,
Q, K, V, gathered from all ranks, and the all-reduced gradients of the projection weights equal full attention
computed by one process on the gathered X, within float32 tolerance; BASP and Ulysses agree with each other.

Run under mpirun (CTest: 2, 4, 8 ranks)."""
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
D = 4          # head dim
E = 8          # model dim of the input projection
S = 2 * N      # tokens per sequence: divisible by every group size K <= N
RTOL, ATOL = 1e-4, 2e-5

torch.set_num_threads(1)


def model(b, hq, hkv, seed):
    """Global input, projection weights and output gradient: seeded, identical on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, S, E, generator=g)
    w = [torch.randn(E, h * D, generator=g) / math.sqrt(E) for h in (hq, hkv, hkv)]
    dout = torch.randn(b, S, hq, D, generator=g)
    return x, w, dout


def reference(x, w, dout, hq, hkv, causal):
    """Full attention on the whole micro-batch, in float64, written independently of basp.torch: K/V heads
    are selected by index (query head h reads K/V head h // (hq / hkv))."""
    x = x.double().requires_grad_()
    w = [t.double().requires_grad_() for t in w]
    b = x.shape[0]
    q = (x @ w[0]).view(b, S, hq, D)
    k = (x @ w[1]).view(b, S, hkv, D)
    v = (x @ w[2]).view(b, S, hkv, D)
    for t in (q, k, v):
        t.retain_grad()
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = k.index_select(2, kv_of), v.index_select(2, kv_of)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kk) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), vv)
    (out * dout.double()).sum().backward()
    return {"out": out.detach(), "dx": x.grad, "dq": q.grad, "dk": k.grad, "dv": v.grad,
            "dw": [t.grad for t in w]}


def gather_global(info, local, layout):
    """Every rank's shard of a [B, S, ...] tensor (given in `layout`), reassembled on every rank as BSHD."""
    mine = local.detach()
    if layout == "sbhd":
        mine = mine.transpose(0, 1)
    pieces = WORLD.allgather((info.as_dict(), mine.numpy()))
    whole = None
    for d, piece in pieces:
        if whole is None:
            whole = np.full((d["micro_batch"], d["seq_len"]) + piece.shape[2:], np.nan, dtype=piece.dtype)
        whole[d["first_sequence"]:d["first_sequence"] + d["num_sequences"], d["token_begin"]:d["token_end"]] = piece
    return torch.from_numpy(whole)


def distributed(b, hq, hkv, causal, layout, num_groups, seed, attention=None):
    """One BaspAttention forward/backward on this rank's shard; returns the gathered results."""
    x, w, dout = model(b, hq, hkv, seed)
    comm = basp.Comm(WORLD, micro_batch=b, num_groups=num_groups)
    info = comm.query(S)
    if layout == "sbhd":
        x, dout = x.transpose(0, 1).contiguous(), dout.transpose(0, 1).contiguous()
    x_loc = basp.data.local_shard(x, info, layout).requires_grad_()
    dout_loc = basp.data.local_shard(dout, info, layout)
    w_loc = [t.clone().requires_grad_() for t in w]
    lead = x_loc.shape[:2]
    q = (x_loc @ w_loc[0]).view(*lead, hq, D)
    k = (x_loc @ w_loc[1]).view(*lead, hkv, D)
    v = (x_loc @ w_loc[2]).view(*lead, hkv, D)
    for t in (q, k, v):
        t.retain_grad()
    layer = bt.BaspAttention(comm, hq, D, num_kv_heads=hkv, causal=causal, attention=attention, layout=layout)
    out = layer(q, k, v)
    check.equal(tuple(out.shape), tuple(q.shape), "output is sequence-sharded like q")
    (out * dout_loc).sum().backward()
    result = {name: gather_global(info, t, layout)
              for name, t in (("x", x_loc), ("out", out), ("dx", x_loc.grad), ("dq", q.grad), ("dk", k.grad),
                              ("dv", v.grad))}
    result["dw"] = [torch.from_numpy(WORLD.allreduce(t.grad.numpy(), op=MPI.SUM)) for t in w_loc]
    result["G"] = comm.num_groups
    layer.close()
    comm.close()
    return result


def close(got, ref, what):
    ok = torch.allclose(got.double(), ref, rtol=RTOL, atol=ATOL)
    err = (got.double() - ref).abs().max().item()
    check.true(ok, "%s: max abs error %.3g (rtol %g, atol %g)" % (what, err, RTOL, ATOL))


def test_attention_matches_single_process():
    # Head counts divisible by N, so that Ulysses (K = N) runs the same model as BASP.
    # (causal, Hq, Hkv, layout, also run Ulysses): Ulysses on two of them keeps the run time modest.
    cases = [(False, 2 * N, N, "bshd", True), (True, N, N, "bshd", False), (True, 2 * N, N, "sbhd", True),
             (False, 4 * N, N, "sbhd", False)]
    for b in (1, 2, 4, 8):
        for causal, hq, hkv, layout, with_ulysses in cases:
            seed = 1000 * b + 10 * hq + causal
            x, w, dout = model(b, hq, hkv, seed)
            ref = reference(x, w, dout, hq, hkv, causal)
            runs = {}
            # With gcd(N, B) = 1, BASP is Ulysses: the same comm twice would prove nothing.
            variants = [("BASP", None)] + ([("Ulysses", 1)] if with_ulysses and math.gcd(N, b) > 1 else [])
            for name, groups in variants:
                r = distributed(b, hq, hkv, causal, layout, groups, seed)
                what = "%s N=%d B=%d G=%d Hq=%d Hkv=%d causal=%s %s" % (name, N, b, r["G"], hq, hkv, causal,
                                                                        layout)
                check.true(torch.equal(r["x"], x), "gathered input is the input, " + what)
                for key in ("out", "dx", "dq", "dk", "dv"):
                    close(r[key], ref[key], "%s, %s" % (key, what))
                for i, name_w in enumerate(("dWq", "dWk", "dWv")):
                    close(r["dw"][i], ref["dw"][i], "%s, %s" % (name_w, what))
                runs[name] = r
            for key in ("out", "dx", "dq", "dk", "dv") if len(runs) == 2 else ():
                check.true(torch.allclose(runs["BASP"][key], runs["Ulysses"][key], rtol=RTOL, atol=ATOL),
                           "BASP and Ulysses agree on %s (B=%d, %s)" % (key, b, layout))


def test_custom_attention_sees_whole_sequences():
    seen = []

    def probe(q, k, v, causal):
        seen.append((tuple(q.shape), tuple(k.shape), tuple(v.shape), causal))
        return bt.explicit_attention(q, k, v, causal)

    b, hq, hkv = 4, 2 * N, N
    seed = 77
    r = distributed(b, hq, hkv, True, "bshd", None, seed, attention=probe)
    g = math.gcd(N, b)
    k = N // g
    local = (b // g, hq // k, S, D)  # K/V heads expanded to Hq/K before the call
    check.equal(seen, [(local, local, local, True)], "the local attention gets [B/G, Hq/K, S, D]")
    x, w, dout = model(b, hq, hkv, seed)
    close(r["out"], reference(x, w, dout, hq, hkv, True)["out"], "custom attention output")


def test_exchange_backward_is_the_inverse_exchange():
    for b in (1, 2):
        with basp.Comm(WORLD, micro_batch=b) as comm:
            k = comm.group_size
            plan = comm.plan(2 * k, 3, [2 * k, k], torch.float64)
            g = torch.Generator().manual_seed(RANK + 10 * b)
            xs = [torch.randn(plan.seq_sharded_shape(t), generator=g, dtype=torch.float64, requires_grad=True)
                  for t in range(2)]
            ys = [torch.randn(plan.head_sharded_shape(t), generator=g, dtype=torch.float64) for t in range(2)]
            outs = bt.head_scatter(plan, *xs)
            check.true(all(torch.equal(o, e) for o, e in zip(outs, plan.scatter([x.detach() for x in xs]))),
                       "head_scatter forward is plan.scatter")
            torch.autograd.backward(outs, ys)
            expected = plan.gather(ys)
            check.true(all(torch.equal(x.grad, e) for x, e in zip(xs, expected)), "scatter backward = gather")
            hs = [y.clone().requires_grad_() for y in ys]
            back = bt.head_gather(plan, *hs)
            seeds = [torch.randn(plan.seq_sharded_shape(t), generator=g, dtype=torch.float64) for t in range(2)]
            torch.autograd.backward(back, seeds)
            expected = plan.scatter(seeds)
            check.true(all(torch.equal(h.grad, e) for h, e in zip(hs, expected)), "gather backward = scatter")
            # Adjoint over the whole group: <scatter(x), y> = <x, gather(y)>.
            xs_d = [x.detach() for x in xs]
            lhs = WORLD.allreduce(sum((o * y).sum().item() for o, y in zip(plan.scatter(xs_d), ys)))
            rhs = WORLD.allreduce(sum((x * z).sum().item() for x, z in zip(xs_d, plan.gather(ys))))
            check.true(abs(lhs - rhs) <= 1e-9 * max(1.0, abs(lhs)), "adjoint identity %r vs %r" % (lhs, rhs))
            plan.close()


def test_torch_tensors_round_trip_bit_exact():
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8):
        with basp.Comm(WORLD, micro_batch=2, num_groups=1) as comm:
            k = comm.group_size
            plan = comm.plan(2 * k, 5, [k, 2 * k], dtype, "sbhd")
            g = torch.Generator().manual_seed(5 + RANK)
            ins = [torch.randint(0, 120, plan.seq_sharded_shape(t), generator=g).to(dtype) for t in range(2)]
            outs = plan.scatter(ins)
            back = plan.gather(outs, [torch.full(plan.seq_sharded_shape(t), 7).to(dtype) for t in range(2)])
            check.true(all(torch.equal(a, c) for a, c in zip(ins, back)), "torch %s round trip" % dtype)
            plan.close()


def test_torch_argument_errors():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        plan = comm.plan(2 * k, 4, [k, k], torch.float32)
        a = torch.zeros(plan.seq_sharded_shape(0))
        bad_ns = torch.zeros(plan.seq_sharded_shape(0)[::-1]).transpose(0, 3).transpose(1, 2)
        inv = basp.Status.ERROR_INVALID_ARGUMENT
        expect_error(lambda: plan.scatter([a, a.double()]), inv, "inputs[1] has dtype torch.float64", "FP32")
        expect_error(lambda: plan.scatter([a, bad_ns]), inv, "inputs[1]", "is not C-contiguous")
        expect_error(lambda: plan.scatter([a, a.numpy()]), inv, "inputs[1] is a numpy tensor on cpu but inputs[0] "
                     "is a torch tensor")
        expect_error(lambda: plan.scatter([a, a], [np.zeros(plan.head_sharded_shape(0), np.float32)] * 2), inv,
                     "inputs are torch tensors on cpu but outputs are numpy")
        expect_error(lambda: comm.plan(2 * k, 4, [k], torch.complex64), inv, "dtype (torch.complex64) has no")
        expect_error(lambda: bt.BaspAttention(comm, 3, 4, num_kv_heads=2), inv,
                     "num_heads (3) must be a positive multiple of num_kv_heads (2)")
        layer = bt.BaspAttention(comm, k + 1 if k > 1 else 2, 4)
        q = torch.zeros(1, 2, layer.num_heads, 4)
        # A head count K does not divide is split over the group, no longer refused.
        check.equal(tuple(layer(q, q, q).shape), tuple(q.shape), "Hq = K + 1 runs")
        expect_error(lambda: layer(q, q[:, :, :1], q), inv, "k has shape (1, 2, 1, 4)")
        expect_error(lambda: layer(q, q.double(), q.double()), inv, "k (", "does not match q")
        qi = q.to(torch.int64)
        expect_error(lambda: layer(qi, qi, qi), inv, "query has dtype torch.int64", "float16, bfloat16")
        plan.close()
    # The comm closed under a live layer: named, on the next forward, whether its plans exist or not.
    check.true(comm.closed, "the with block closed the comm")
    expect_error(lambda: layer(q, q, q), inv, "was closed while the layer is alive")
    fresh = bt.BaspAttention(comm, 2, 4)
    expect_error(lambda: fresh(q[:, :, :2], q[:, :, :2], q[:, :, :2]), inv, "was closed while the layer is alive")


def test_nccl_side_checks():
    # The binding's checks for an NCCL plan, run on an MPI plan whose backend flag is forced: host memory is
    # refused before the library is called. (The NCCL exchange itself needs a GPU; see docs/python.md.)
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        plan = comm.plan(2 * k, 4, [k], torch.float32)
        plan.backend = basp.Backend.NCCL
        inv = basp.Status.ERROR_INVALID_ARGUMENT
        x = torch.zeros(plan.seq_sharded_shape(0))
        expect_error(lambda: plan.scatter([x]), inv, "inputs[0] is in host memory (a torch array on cpu)",
                     "NCCL backend moves device memory")
        expect_error(lambda: plan.scatter([x.numpy()]), inv, "inputs[0] is in host memory (a numpy array on cpu)")
        plan.backend = basp.Backend.MPI
        plan.close()


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
