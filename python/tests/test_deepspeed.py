"""basp.torch.DistributedAttention, the DeepSpeed-Ulysses drop-in, on the CPU over the MPI backend.

1. Against single-process attention on the gathered inputs, in float64: outputs and the gradients of query, key and
   value, for both layouts (batch_dim_idx 0 and 1), MHA and GQA (8/2 heads; 6/3 and 10/2, whose query heads straddle
   K/V groups unevenly at K = 2 and K = 4, so that K/V are expanded before the local attention; 2/1, whose K/V head
   serves two ranks, and at K = 4 leaves two ranks without query heads), tokens dividing K
   and not (seq_len=), causal passed through **kwargs, a scale through *args, DeepSpeed's rotary_pos_emb, Ulysses
   (num_groups=1) and BASP (B = 2 and 4). The local attention records what it receives: whole sequences of this
   rank's heads, K/V grouped or expanded as the docstring says.
2. Refusals: every unsupported argument is named with its value. Values of another head size than query and key
   (multi-head latent attention), against float64 attention, and named when the plans were prepared without it.
3. torch.compile (PyTorch >= 2.4, backend aot_eager, fullgraph) of a prepared layer equals the eager one.
4. Against DeepSpeed's own DistributedAttention (deepspeed.sequence.layer) over a gloo process group spanning the
   job, when `import deepspeed` works: the same inputs, local attention and rotary embedding through both, Ulysses
   here; outputs and gradients must be bit-equal. Without deepspeed that test is left out, saying why.

Run under mpirun (CTest: 2 and 4 ranks)."""
import math
import sys

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import basp
import basp.torch as bt
from harness import check, expect_error, run, set_rendezvous

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
D = 4
INV = basp.Status.ERROR_INVALID_ARGUMENT
TOL = 1e-10  # float64 against float64

torch.set_num_threads(1)

try:
    import deepspeed
    import deepspeed.ops  # noqa: F401 -- its table of buildable ops is read below
    from deepspeed.sequence.layer import DistributedAttention as DeepSpeedAttention
    import deepspeed.comm as ds_comm
    DEEPSPEED_WHY = None
except Exception as e:  # noqa: BLE001 -- any failure to import means: no comparison, and why
    DEEPSPEED_WHY = "%s: %s" % (type(e).__name__, e)


def init_gloo():
    """torch.distributed over gloo for the ranks of this job (once): rank 0's free port, broadcast with mpi4py."""
    if dist.is_initialized():
        return
    set_rendezvous(WORLD)
    dist.init_process_group("gloo", init_method="env://", rank=RANK, world_size=N)


class LocalAttention(torch.nn.Module):
    """A plain attention in one layout ([S, b, h, D] or [b, S, h, D]) that takes fewer K/V heads than query heads
    in grouped order (query head i reads K/V head i // (hq / hkv)); records the shapes of each call."""

    def __init__(self, batch_dim_idx):
        super().__init__()
        self.batch_dim_idx = batch_dim_idx
        self.seen = []

    def forward(self, q, k, v, scale=1.0, causal=False):
        self.seen.append((tuple(q.shape), tuple(k.shape), tuple(v.shape), scale, causal))
        to_bhsd = (0, 2, 1, 3) if self.batch_dim_idx == 0 else (1, 2, 0, 3)
        q, k, v = (x.permute(*to_bhsd) for x in (q, k, v))
        ratio = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(ratio, dim=1), v.repeat_interleave(ratio, dim=1)
        scores = scale * torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if causal:
            s = scores.shape[-1]
            scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return out.permute(0, 2, 1, 3) if self.batch_dim_idx == 0 else out.permute(2, 0, 1, 3)


def rope_reference(x, cos, sin):
    """x [B, S, H, D] (BSHD), cos/sin [S, rot]: channel c < rot becomes x_c cos_c + s_c x_{p(c)} sin_c, with p(c) =
    c + rot/2 and s_c = -1 for the first half, p(c) = c - rot/2 and s_c = +1 for the second; the rest pass."""
    rot = cos.shape[-1]
    half = rot // 2
    partner = torch.tensor([c + half if c < half else c - half for c in range(rot)])
    sign = torch.tensor([-1.0 if c < half else 1.0 for c in range(rot)], dtype=x.dtype)
    head = x[..., :rot]
    turned = head * cos[None, :, None, :] + sign * head.index_select(-1, partner) * sin[None, :, None, :]
    return torch.cat((turned, x[..., rot:]), dim=-1)


def data(b, s, hq, hkv, rot, seed, dtype=torch.float64, d=D, dv=D):
    """Global q, k (head size d), v, output gradient (dv), all BSHD, and rotary cos/sin [S, rot] (None when rot is
    0): seeded, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, hq, d, generator=g, dtype=dtype)
    k = torch.randn(b, s, hkv, d, generator=g, dtype=dtype)
    v = torch.randn(b, s, hkv, dv, generator=g, dtype=dtype)
    dout = torch.randn(b, s, hq, dv, generator=g, dtype=dtype)
    rope = None
    if rot:
        angle = torch.randn(s, rot, generator=g, dtype=dtype)
        rope = (torch.cos(angle), torch.sin(angle))
    return q, k, v, dout, rope


def reference(q, k, v, dout, rope, scale, causal):
    """Attention on the whole micro-batch, written independently of basp.torch: outputs and input gradients."""
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    qq, kk = (q, k) if rope is None else (rope_reference(q, *rope), rope_reference(k, *rope))
    s, hq, hkv = q.shape[1], q.shape[2], k.shape[2]
    kv_of = torch.arange(hq) // (hq // hkv)
    kk, vv = kk.index_select(2, kv_of), v.index_select(2, kv_of)
    scores = scale * torch.einsum("bqhd,bkhd->bhqk", qq, kk) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), vv)
    (out * dout).sum().backward()
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def in_layout(x, bdi):
    """A BSHD tensor in the layout batch_dim_idx names (a copy)."""
    return x.contiguous() if bdi == 0 else x.transpose(0, 1).contiguous()


def rope_argument(rope, bdi):
    """(cos, sin) [S, rot] as DeepSpeed's forward takes them: 4-d, such that their permute(1, 0, 2, 3) broadcasts
    against the head-sharded [S, b, h, D] (bdi 1: given [1, S, 1, rot]) or [b, S, h, D] (bdi 0: [S, 1, 1, rot])."""
    if rope is None:
        return None
    return tuple(t[None, :, None, :] if bdi == 1 else t[:, None, None, :] for t in rope)


def gather_global(info, local, bdi):
    """Every rank's shard (in bdi's layout), reassembled as the whole [B, S, H, D] on every rank."""
    mine = local.detach()
    if bdi == 1:
        mine = mine.transpose(0, 1)
    whole = None
    for d, piece in WORLD.allgather((info.as_dict(), mine.numpy())):
        if whole is None:
            whole = np.full((d["micro_batch"], d["seq_len"]) + piece.shape[2:], np.nan, dtype=piece.dtype)
        whole[d["first_sequence"]:d["first_sequence"] + d["num_sequences"], d["token_begin"]:d["token_end"]] = piece
    return torch.from_numpy(whole)


def query_heads(h, k, position):
    """The query heads torch.tensor_split gives position `position` of k: range(begin, end)."""
    sizes = [h // k + (1 if p < h % k else 0) for p in range(k)]
    begin = sum(sizes[:position])
    return range(begin, begin + sizes[position])


def expected_kv_heads(hq, hkv, k, position):
    """What the local attention should receive as K/V heads: the distinct K/V heads this rank's query heads read
    when each of them serves equally many of its query heads (grouped order), else one per query head."""
    heads = query_heads(hq, k, position)
    kv = [i // (hq // hkv) for i in heads]
    counts = [kv.count(j) for j in sorted(set(kv))]
    grouped = len(set(counts)) == 1
    return (len(counts) if grouped else len(kv)), not grouped


def test_matches_single_process():
    # (2, 1): one K/V head read on two ranks (its gradient summed), and at K = 4 ranks without query heads.
    head_cases = [(4, 4), (8, 2), (6, 3), (10, 2), (2, 1)]
    expanded = {}  # (hq, hkv, K) -> whether some rank had its K/V expanded
    runs = 0
    for b, num_groups in ((2, 1), (2, None), (4, None)):
        for n_case, (hq, hkv) in enumerate(head_cases):
            for bdi in (0, 1):
                comm = basp.Comm(WORLD, micro_batch=b, num_groups=num_groups)
                kk = comm.group_size
                variant = (n_case + bdi + b) % 3
                s = 2 * kk + (1 if variant == 0 and kk > 1 else 0)  # tokens not dividing K in a third of the runs
                rot = (D, D // 2, 0)[variant]  # full, partial, no rotary embedding
                causal, scale = variant != 1, 1.0 + 0.25 * bdi
                seed = 10000 * b + 100 * hq + 10 * hkv + bdi
                q, k, v, dout, rope = data(b, s, hq, hkv, rot, seed)
                ref = reference(q, k, v, dout, rope, scale, causal)
                info = comm.query(s)
                loc = [basp.data.local_shard(in_layout(x, bdi), info, "bshd" if bdi == 0 else "sbhd")
                       for x in (q, k, v, dout)]
                ql, kl, vl = (x.requires_grad_() for x in loc[:3])
                attn = LocalAttention(bdi)
                layer = bt.DistributedAttention(attn, comm, 2, 1 - bdi)
                extra = {"seq_len": s} if s % kk else {}
                out = layer(ql, kl, vl, bdi, rope_argument(rope, bdi), scale, causal=causal, **extra)
                (out * loc[3]).sum().backward()
                what = "B=%d G=%d K=%d Hq=%d Hkv=%d S=%d batch_dim_idx=%d rot=%d causal=%s" % (
                    b, comm.num_groups, kk, hq, hkv, s, bdi, rot, causal)
                check.equal(tuple(out.shape), tuple(ql.shape), "output sharded like query, " + what)
                got = {name: gather_global(info, t, bdi) for name, t in
                       (("out", out), ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad))}
                for name in ("out", "dq", "dk", "dv"):
                    err = (got[name] - ref[name]).abs().max().item()
                    check.true(err <= TOL, "%s: max abs error %.3g, %s" % (name, err, what))
                # What the local attention received: whole sequences of this rank's heads.
                heads = query_heads(hq, kk, comm.group_position)
                kv_heads, expand = expected_kv_heads(hq, hkv, kk, comm.group_position)
                lead = (b // comm.num_groups, s) if bdi == 0 else (s, b // comm.num_groups)
                want = [(lead + (len(heads), D), lead + (kv_heads, D), lead + (kv_heads, D), scale, causal)]
                check.equal(attn.seen, want if len(heads) else [], "local attention's inputs, " + what)
                key = (hq, hkv, kk)
                expanded[key] = expanded.get(key, False) or WORLD.allreduce(expand, op=MPI.LOR)
                layer.close()
                comm.close()
                runs += 1
    # The uneven cases were really exercised where they can be: 6/3 heads at K = 2, 10/2 heads at K = 4.
    for hq, hkv, kk in ((6, 3, 2), (10, 2, 4)):
        if (hq, hkv, kk) in expanded:
            check.true(expanded[(hq, hkv, kk)], "K/V expanded somewhere for Hq=%d Hkv=%d K=%d" % (hq, hkv, kk))
    check.true(all(not expanded[key] for key in ((8, 2, 2), (4, 4, N)) if key in expanded),
               "grouped K/V pass through unexpanded")
    check.true(runs == 30, "ran all cases")


def test_refusals_name_the_argument():
    attn = LocalAttention(1)
    with basp.Comm(WORLD, micro_batch=2, num_groups=1) as comm:
        expect_error(lambda: bt.DistributedAttention(attn, comm, scatter_idx=1), INV, "scatter_idx (1)")
        expect_error(lambda: bt.DistributedAttention(attn, comm, 2, 3), INV, "gather_idx (3)")
        expect_error(lambda: bt.DistributedAttention(attn, comm, 2, 0, object()), INV, "sp_stream")
        expect_error(lambda: bt.DistributedAttention(attn, "world"), INV, "comm (a str)")
        expect_error(lambda: bt.DistributedAttention(None, comm), INV, "local_attention (a NoneType)")
        expect_error(lambda: bt.DistributedAttention(attn, comm, micro_batch=3), INV, "micro_batch (3)")
        expect_error(lambda: bt.DistributedAttention(attn, comm, num_groups=N + 1), INV, "num_groups (%d)" % (N + 1))
        layer = bt.DistributedAttention(attn, comm, num_kv_heads=2)
        k = comm.group_size
        q = torch.randn(2, 2, 4, D)  # [s_l, b, h, D]
        kv = torch.randn(2, 2, 2, D)
        expect_error(lambda: layer(q, kv, kv, 2), INV, "batch_dim_idx (2)")
        expect_error(lambda: layer(q, kv.double(), kv, 1), INV, "key", "does not match query")
        expect_error(lambda: layer(q, kv, kv[:1], 1), INV, "value", "does not match query")
        expect_error(lambda: layer(q, kv[..., :2], kv, 1), INV, "query (2, 2, 4, 4) and key (2, 2, 2, 2) have "
                     "different head sizes (4, 2)")
        expect_error(lambda: layer(q[0], kv, kv, 1), INV, "query must be a 4-d")
        expect_error(lambda: layer(q[:, :, :3], kv, kv, 1), INV, "key has 2 heads", "query's 3")
        expect_error(lambda: layer(q, kv[:, :, :1], kv[:, :, :1], 1), INV, "num_kv_heads (2)", "key's 1")
        expect_error(lambda: bt.DistributedAttention(attn, comm, 2, 0, None, 0), INV, "num_kv_heads (0)")
        expect_error(lambda: layer(q, kv, kv, 1, seq_len=0), INV, "seq_len (0)")
        # This rank holds all B = 2 sequences (Ulysses): a batch of 1 is refused, naming the shape.
        expect_error(lambda: layer(q[:, :1], kv[:, :1], kv[:, :1], 1), INV, "query has shape (2, 1, 4, 4)",
                     "holds 2 sequences")
        # seq_len 3K + 1: every rank holds 3 or 4 tokens of it, not q's 2 (refused on every rank alike).
        expect_error(lambda: layer(q, kv, kv, 1, seq_len=3 * k + 1), INV, "seq_len %d" % (3 * k + 1),
                     "tensor_split")
        expect_error(lambda: layer(q, kv, kv, 1, "cos"), INV, "rotary_pos_emb (a str)")
        odd = torch.ones(1, 2 * k, 1, 3)
        expect_error(lambda: layer(q, kv, kv, 1, (odd, odd)), INV, "rotary_pos_emb has 3 and 3 channels")
        bad = bt.DistributedAttention(lambda q, k, v: q[..., :2], comm)
        expect_error(lambda: bad(q, kv.repeat(1, 1, 2, 1), kv.repeat(1, 1, 2, 1), 1), INV,
                     "local_attention returned")
        bad.close()
        layer.close()


def test_values_of_another_head_size():
    # Multi-head latent attention's shapes: query and key of 6 channels, value of 4 (the output has value's), in one
    # exchange; one K/V head per query head (3/3: uneven at K = 2 and 4, and at K = 4 a rank without query heads)
    # and grouped GQA (8/2), with a rotary embedding on query and key, both layouts; against float64 attention.
    for hq, hkv in ((3, 3), (8, 2)):
        for bdi in (0, 1):
            comm = basp.Comm(WORLD, micro_batch=2)
            kk = comm.group_size
            s = 2 * kk + 1
            q, k, v, dout, rope = data(2, s, hq, hkv, 2, 700 + 10 * hq + bdi, d=6, dv=4)
            ref = reference(q, k, v, dout, rope, 1.0, True)
            info = comm.query(s)
            loc = [basp.data.local_shard(in_layout(x, bdi), info, "bshd" if bdi == 0 else "sbhd")
                   for x in (q, k, v, dout)]
            ql, kl, vl = (x.requires_grad_() for x in loc[:3])
            layer = bt.DistributedAttention(LocalAttention(bdi), comm)
            out = layer(ql, kl, vl, bdi, rope_argument(rope, bdi), causal=True, seq_len=s)
            (out * loc[3]).sum().backward()
            what = "G=%d K=%d Hq=%d Hkv=%d S=%d batch_dim_idx=%d, D 6, Dv 4" % (comm.num_groups, kk, hq, hkv, s, bdi)
            check.equal(tuple(out.shape), tuple(ql.shape[:3]) + (4,), "output of value's head size, " + what)
            (plans,) = layer._plans.values()
            made = [[shape[-1] for shape in plan.info.seq_sharded_shapes + plan.info.head_sharded_shapes]
                    for plan in (plans.qkv, plans.out)]  # the sizes of the library's shapes, both sides
            check.equal(made, [[6, 6, 4] * 2, [4] * 2], "one Q/K/V plan, " + what)
            for name, t in (("out", out), ("dq", ql.grad), ("dk", kl.grad), ("dv", vl.grad)):
                err = (gather_global(info, t, bdi) - ref[name]).abs().max().item()
                check.true(err <= TOL, "%s: max abs error %.3g, %s" % (name, err, what))
            layer.close()
            comm.close()


def test_prepared_without_the_value_size():
    # Under torch.compile (made to look so here) the plans must exist: values of another size than prepared are
    # named, with the size to prepare; prepared with it, the layer runs.
    import basp._torch_deepspeed as layer_module
    with basp.Comm(WORLD, micro_batch=2, num_groups=1) as comm:
        s = 2 * comm.group_size
        layer = bt.DistributedAttention(LocalAttention(1), comm).prepare(s, 4, 6, dtype=torch.float64)
        q = torch.randn(2, 2, 4, 6, dtype=torch.float64)  # [s_l, b, h, D]
        v = torch.randn(2, 2, 4, 3, dtype=torch.float64)
        eager = layer_module.compiling

        def traced(fn):
            layer_module.compiling = lambda: True
            try:
                return fn()
            finally:
                layer_module.compiling = eager

        expect_error(lambda: traced(lambda: layer(q, q, v, 1)), INV, "value has head size 3", "Dv=3",
                     "prepared for values of head size [6]", "v_head_dim=3")
        layer.prepare(s, 4, 6, dtype=torch.float64, v_head_dim=3)
        check.equal(tuple(traced(lambda: layer(q, q, v, 1)).shape), (2, 2, 4, 3), "prepared with v_head_dim, it runs")
        layer.close()


def test_process_group_refusals():
    init_gloo()
    attn = LocalAttention(1)
    expect_error(lambda: bt.DistributedAttention(attn, dist.group.WORLD), INV, "micro_batch is required")
    if torch.cuda.is_available():
        return
    # No GPU: comm_from_process_group fails alike on every rank (no NCCL in the library, or no CUDA device).
    try:
        bt.DistributedAttention(attn, dist.group.WORLD, micro_batch=2, num_groups=1, timeout_ms=60000)
        status = basp.Status.SUCCESS
    except basp.Error as e:
        status = e.status
    check.true(status in (basp.Status.ERROR_UNSUPPORTED, basp.Status.ERROR_CUDA), "status %s without a GPU" % status)
    check.equal(len(set(WORLD.allgather(int(status)))), 1, "every rank fails alike")


def test_compiled_equals_eager():
    if not bt.HAVE_CUSTOM_OPS:
        if RANK == 0:
            print("torch %s has no custom operators: torch.compile not tested" % torch.__version__, flush=True)
        check.true(True, "skipped")
        return
    b, hq, hkv = 2, 6, 3
    with basp.Comm(WORLD, micro_batch=b, num_groups=1) as comm:
        s = 2 * comm.group_size
        q, k, v, dout, rope = data(b, s, hq, hkv, D, 5, torch.float32)
        info = comm.query(s)
        loc = [basp.data.local_shard(in_layout(x, 1), info, "sbhd") for x in (q, k, v, dout)]
        layer = bt.DistributedAttention(LocalAttention(1), comm).prepare(s, hq, D, hkv, torch.float32, "cpu", 1)
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        results = []
        for fn in (layer, compiled):
            ins = [x.clone().requires_grad_() for x in loc[:3]]
            out = fn(*ins, 1, rope_argument(rope, 1), causal=True)
            (out * loc[3]).sum().backward()
            results.append([out.detach()] + [x.grad for x in ins])
        for name, e, c in zip(("out", "dq", "dk", "dv"), *results):
            err = (e - c).abs().max().item()
            check.true(err <= 1e-6, "compiled %s differs from eager by %.3g" % (name, err))
        layer.close()


def deepspeed_comparison():
    """DeepSpeed's DistributedAttention over the gloo world against ours (Ulysses over MPI) on the same inputs."""
    init_gloo()
    # deepspeed.comm's TorchBackend wraps the initialised torch.distributed. Its shared-memory all-reduce kernel,
    # which a JIT build would compile at this point, plays no part in all_to_all_single: not built.
    compatible = getattr(getattr(deepspeed, "ops", None), "__compatible_ops__", None)
    if isinstance(compatible, dict):
        compatible["deepspeed_shm_comm"] = False
    ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    group = dist.group.WORLD
    # Head counts DeepSpeed splits evenly over P = N ranks (its GQA split needs P | Hkv).
    cases = [(N, N, 1, 0), (2 * N, N, 0, D), (4 * N, N, 1, D // 2), (2 * N, 2 * N, 0, 0)]
    bit_equal, worst = True, 0.0
    for n_case, (hq, hkv, bdi, rot) in enumerate(cases):
        b, s = 2, 3 * N
        q, k, v, dout, rope = data(b, s, hq, hkv, rot, 300 + n_case, torch.float32)
        with basp.Comm(WORLD, micro_batch=b, num_groups=1) as comm:
            check.equal(comm.group_position, RANK, "Ulysses positions are the gloo ranks")
            info = comm.query(s)
            layout = "bshd" if bdi == 0 else "sbhd"
            loc = [basp.data.local_shard(in_layout(x, bdi), info, layout) for x in (q, k, v, dout)]
            causal = n_case % 2 == 0
            ours_attn, ds_attn = LocalAttention(bdi), LocalAttention(bdi)
            layers = [bt.DistributedAttention(ours_attn, comm, 2, 1 - bdi),
                      DeepSpeedAttention(ds_attn, group, 2, 1 - bdi)]
            results = []
            for layer in layers:
                ins = [x.clone().requires_grad_() for x in loc[:3]]
                out = layer(*ins, bdi, rope_argument(rope, bdi), 1.0, causal=causal)
                (out * loc[3]).sum().backward()
                results.append([out.detach()] + [x.grad for x in ins])
            check.equal(ours_attn.seen, ds_attn.seen, "both local attentions get the same shapes")
            what = "Hq=%d Hkv=%d batch_dim_idx=%d rot=%d causal=%s" % (hq, hkv, bdi, rot, causal)
            for name, ours, theirs in zip(("out", "dq", "dk", "dv"), *results):
                err = (ours - theirs).abs().max().item()
                worst = max(worst, err)
                bit_equal = bit_equal and torch.equal(ours, theirs)
                check.true(err <= 1e-6 * max(1.0, theirs.abs().max().item()),
                           "%s differs from DeepSpeed's by %.3g (%s)" % (name, err, what))
            layers[0].close()
    bit_equal = WORLD.allreduce(bit_equal, op=MPI.LAND)
    worst = WORLD.allreduce(worst, op=MPI.MAX)
    if RANK == 0:
        print("deepspeed %s: outputs and gradients %s (max abs difference %.3g over %d cases)" % (
            deepspeed.__version__, "bit-equal" if bit_equal else "NOT bit-equal", worst, len(cases)), flush=True)
    check.true(bit_equal, "bit-equal to DeepSpeed's DistributedAttention")


if DEEPSPEED_WHY is None:
    test_against_deepspeed = deepspeed_comparison
elif RANK == 0:
    print("test_against_deepspeed left out: import deepspeed failed (%s)" % DEEPSPEED_WHY, flush=True)


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
