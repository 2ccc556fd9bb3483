"""BaspAttention(..., chunks=C) and DistributedAttention(..., chunks=C), the pipelined layers (head chunks of the
scatter and gather beside attention): outputs and input gradients bit-identical (torch.equal) to chunks=1 for C = 2
and 4 (capped at the plans' maximum), for GQA with uneven heads and tokens (replicated K/V heads among them), BSHD,
SBHD and THD (DistributedAttention: batch_dim_idx 0 and 1, a local attention repeating K/V by Hq_l / Hkv_l and taking
causal through kwargs), on data that is a function of global coordinates.
chunks="auto" (both layers, BSHD and THD for BaspAttention): every forward bit-identical to chunks=1; the chosen C
the same on every rank (allgathered); the layer's HeadChunkChoice equal to basp.Plan.choose_head_chunks asked here
(not collectively) with the maximum over the group's ranks of the seconds each rank's layer measured.
Head size 8: SDPA on CPU gives a head the same bits in a subset of the heads only
when the heads' rows keep their alignment (with a head size of 5 its backward differs in the last bits).

Run under mpirun (CTest: 2 and 4 ranks)."""
import sys
import time

import torch
import torch.nn.functional as F
from mpi4py import MPI

import basp
import basp.torch as bt
from harness import check, expect_error, run

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
D = 8


def global_tensor(seed, shape):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32)


def local_inputs(comm, layout, b, seq_len, hq, hkv, seed):
    """q, k, v and dout of this rank: slices of whole micro-batch tensors [B, S, H, D] (THD: one stream [T, H, D])."""
    if layout == "thd":
        begin, end = basp._library.split(seq_len, comm.group_size, comm.group_position, "test")
        whole = [global_tensor(seed + i, (seq_len, h, D)) for i, h in enumerate((hq, hkv, hkv, hq))]
        return [x[begin:end].contiguous() for x in whole]
    info = comm.query(seq_len)
    whole = [global_tensor(seed + i, (b, seq_len, h, D)) for i, h in enumerate((hq, hkv, hkv, hq))]
    mine = [x[info.first_sequence:info.first_sequence + info.num_sequences, info.token_begin:info.token_end]
            for x in whole]
    if layout == "sbhd":
        mine = [x.transpose(0, 1) for x in mine]
    return [x.contiguous() for x in mine]


def forward_backward(layer, tensors, **kwargs):
    q, k, v, dout = tensors
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = layer(*leaves, **kwargs)
    out.backward(dout)
    return [out.detach()] + [x.grad for x in leaves]


def check_layers(comm, layout, b, seq_len, hq, hkv, causal, what, call):
    tensors = local_inputs(comm, layout, b, seq_len, hq, hkv, 1000 + hq * 10 + hkv)
    capacity = {"token_capacity": seq_len + 3} if layout == "thd" else {}
    one = bt.BaspAttention(comm, hq, D, hkv, causal=causal, layout=layout, **capacity)
    want = forward_backward(one, tensors, **call)
    plans = one._plans[next(iter(one._plans))]
    most = plans.qkv.max_head_chunks
    for chunks in (2, 4):
        layer = bt.BaspAttention(comm, hq, D, hkv, causal=causal, layout=layout, chunks=chunks, **capacity)
        for step in range(2):  # the plans again, and the chunks started anew
            got = forward_backward(layer, tensors, **call)
            for name, g, w in zip(("output", "dq", "dk", "dv"), got, want):
                check.true(torch.equal(g, w), "%s, chunks=%d (max %d), step %d: %s differs from chunks=1 by %g"
                           % (what, chunks, most, step, name, (g - w).abs().max().item() if g.numel() else 0))
        layer.close()
    one.close()


def head_cases(k):
    # GQA with a K/V head read by query heads of several ranks (replicated), uneven heads, MHA.
    return [(2 * k + 1, 1), (3 * k, 3), (4 * k + 2, 2 * k + 1), (2 * k, 2 * k)]


def test_bshd_and_sbhd():
    for micro_batch in sorted({1, 2} if N % 2 == 0 else {1}):
        with basp.Comm(WORLD, micro_batch=micro_batch) as comm:
            k = comm.group_size
            for layout in ("bshd", "sbhd"):
                for hq, hkv in head_cases(k):
                    check_layers(comm, layout, micro_batch, 2 * k + 1, hq, hkv, layout == "bshd",
                                 "%s K=%d Hq=%d Hkv=%d" % (layout, k, hq, hkv), {"seq_len": 2 * k + 1})


def test_thd():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        k = comm.group_size
        tokens = 3 * k + 2
        cu = [0, 2, tokens - 3, tokens]
        for hq, hkv in head_cases(k):
            check_layers(comm, "thd", 1, tokens, hq, hkv, True, "THD K=%d Hq=%d Hkv=%d" % (k, hq, hkv),
                         {"cu_seqlens": cu})


def ulysses_attention(batch_dim_idx):
    """A DistributedAttention local attention on [b, S, h, D] (batch_dim_idx 0) or [S, b, h, D] (1): K/V repeated
    by h_q / h_kv (grouped order), then SDPA per head."""
    to_bhsd = (0, 2, 1, 3) if batch_dim_idx == 0 else (1, 2, 0, 3)
    back = (0, 2, 1, 3) if batch_dim_idx == 0 else (2, 0, 1, 3)

    def attend(q, k, v, causal=False):
        r = q.shape[2] // k.shape[2]
        if r > 1:
            k, v = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)
        q, k, v = (x.permute(*to_bhsd) for x in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal).permute(*back)
    return attend


def check_distributed(comm, bdi, seq_len, hq, hkv, what):
    layout = "bshd" if bdi == 0 else "sbhd"
    tensors = local_inputs(comm, layout, comm.micro_batch, seq_len, hq, hkv,
                           2000 + hq * 10 + hkv)
    call = {"seq_len": seq_len, "causal": bdi == 1}
    one = bt.DistributedAttention(ulysses_attention(bdi), comm)
    want = forward_backward(one, tensors, batch_dim_idx=bdi, **call)
    most = one._plans[next(iter(one._plans))].qkv.max_head_chunks
    for chunks in (2, 4):
        layer = bt.DistributedAttention(ulysses_attention(bdi), comm, chunks=chunks)
        for step in range(2):
            got = forward_backward(layer, tensors, batch_dim_idx=bdi, **call)
            for name, g, w in zip(("output", "dq", "dk", "dv"), got, want):
                check.true(torch.equal(g, w), "%s, chunks=%d (max %d), step %d: %s differs from chunks=1 by %g"
                           % (what, chunks, most, step, name, (g - w).abs().max().item() if g.numel() else 0))
        layer.close()
    one.close()


def test_distributed_attention():
    for micro_batch in sorted({1, 2} if N % 2 == 0 else {1}):
        with basp.Comm(WORLD, micro_batch=micro_batch) as comm:
            k = comm.group_size
            for bdi in (0, 1):
                for hq, hkv in head_cases(k):
                    check_distributed(comm, bdi, 2 * k + 1, hq, hkv,
                                      "DistributedAttention batch_dim_idx=%d K=%d Hq=%d Hkv=%d" % (bdi, k, hq, hkv))


def slow(attend):
    """attend after a pause, so that attention weighs something against the exchanges in the measured time."""
    def slowed(*args, **kwargs):
        time.sleep(0.02)
        return attend(*args, **kwargs)
    return slowed


def check_auto(comm, group, layer, plans, tensors, want, what, **call):
    """layer (chunks="auto"): three forwards equal to chunks=1; its choice is the same on every rank, and the one
    choose_head_chunks gives for the maximum over the group of the measured seconds."""
    for step in range(3):
        got = forward_backward(layer, tensors, **call)
        for name, g, w in zip(("output", "dq", "dk", "dv"), got, want):
            check.true(torch.equal(g, w), "%s, chunks='auto', step %d: %s differs from chunks=1" % (what, step, name))
        choice = layer.last_chunk_choice
        check.true(choice is not None, "%s: a choice after the first forward" % what)
        cs = WORLD.allgather(choice.num_chunks)
        check.true(len(set(cs)) == 1, "%s: chunks='auto' chose %r over the ranks" % (what, cs))
    seconds = layer.last_attention_seconds
    check.true(seconds is not None and seconds > 0.0 or plans.qkv.info.head_end[0] == plans.qkv.info.head_begin[0],
               "%s: measured %r seconds of attention" % (what, seconds))
    most = group.allreduce(seconds, op=MPI.MAX)
    tokens = call.get("cu_seqlens", [-1])[-1]
    expected = plans.qkv.choose_head_chunks(most, gather=plans.out, num_tokens=tokens, collective=False)
    check.equal(tuple(choice), tuple(expected), "%s: the layer's choice against choose_head_chunks(max seconds)"
                % what)
    if comm.rank == 0:
        print("%s: chunks='auto' chose C=%d of %d (attention %.4g s)" % (what, choice.num_chunks,
                                                                      choice.max_head_chunks, most))


def test_auto():
    for micro_batch in sorted({1, 2} if N % 2 == 0 else {1}):
        with basp.Comm(WORLD, micro_batch=micro_batch) as comm:
            group = WORLD.Split(comm.group_index, comm.group_position)
            k = comm.group_size
            hq, hkv = 4 * k + 2, 2 * k + 1
            for layout in ("bshd", "thd"):
                tokens = 3 * k + 2
                call = {"cu_seqlens": [0, 2, tokens]} if layout == "thd" else {"seq_len": 2 * k + 1}
                capacity = {"token_capacity": tokens} if layout == "thd" else {}
                tensors = local_inputs(comm, layout, micro_batch, tokens if layout == "thd" else 2 * k + 1, hq,
                                       hkv, 3000)
                attend = slow(bt.default_attention)
                want = forward_backward(bt.BaspAttention(comm, hq, D, hkv, causal=True, layout=layout,
                                                         attention=attend, **capacity), tensors, **call)
                layer = bt.BaspAttention(comm, hq, D, hkv, causal=True, layout=layout, attention=attend,
                                         chunks="auto", **capacity)
                check.true(layer.last_chunk_choice is None, "no choice before a forward")
                got = forward_backward(layer, tensors, **call)  # makes the plans and chooses
                check_auto(comm, group, layer, layer._plans[next(iter(layer._plans))], tensors, want,
                           "BaspAttention %s B=%d K=%d" % (layout, micro_batch, k), **call)
                check.true(all(torch.equal(g, w) for g, w in zip(got, want)), "the measuring forward equals chunks=1")
                layer.close()
            tensors = local_inputs(comm, "sbhd", micro_batch, 2 * k + 1, hq, hkv, 3100)
            call = {"batch_dim_idx": 1, "seq_len": 2 * k + 1, "causal": True}
            attend = slow(ulysses_attention(1))
            want = forward_backward(bt.DistributedAttention(attend, comm), tensors, **call)
            layer = bt.DistributedAttention(attend, comm, chunks="auto")
            got = forward_backward(layer, tensors, **call)
            check.true(all(torch.equal(g, w) for g, w in zip(got, want)), "the measuring forward equals chunks=1")
            check_auto(comm, group, layer, layer._plans[next(iter(layer._plans))], tensors, want,
                       "DistributedAttention B=%d K=%d" % (micro_batch, k), **call)
            layer.close()
            group.Free()


def test_chunks_argument():
    with basp.Comm(WORLD, micro_batch=1) as comm:
        invalid = basp.Status.ERROR_INVALID_ARGUMENT
        for bad, fragment in ((0, "chunks (0) must be at least 1"), ("fast", "chunks ('fast', a str)"),
                              (True, "chunks (True, a bool)"), (2.0, "chunks (2.0, a float)")):
            expect_error(lambda: bt.BaspAttention(comm, 4, D, chunks=bad), invalid, fragment)
        check.equal(bt.BaspAttention(comm, 4, D).chunks, 1, "default")
        attend = ulysses_attention(1)
        for bad, fragment in ((0, "chunks (0) must be at least 1"), (2.5, "chunks (2.5, a float)")):
            expect_error(lambda: bt.DistributedAttention(attend, comm, chunks=bad), invalid, fragment)
        layer = bt.DistributedAttention(attend, comm, chunks=2)
        q = torch.zeros(1, 1, 4, D)
        cos = torch.ones(1, 1, 1, D)
        expect_error(lambda: layer(q, q, q, 1, (cos, cos)), invalid, "rotary_pos_emb is not taken with chunks=2")


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
