"""torch.compile over libbasp's custom operators (PyTorch >= 2.4), under mpirun.

A small model (input projections, BaspAttention, output projection) is compiled with fullgraph=True, so that any
graph break fails the test, and compared with the same model run eagerly on the same inputs:
- backend "aot_eager" (the traced forward and backward graphs, run by PyTorch's eager kernels): outputs and the
  gradients of the input and of every weight bit-identical, for BSHD and SBHD with GQA and uneven heads and tokens
  (and values of another head size than queries and keys),
  and for THD streams of several lengths, which must all run on one graph (the token count is symbolic), values of
  the queries' head size and of another;
- backend "inductor" (generated C++ kernels): within 1e-6 relative;
- torch.library.opcheck of both operators (schema, fake implementation, autograd registration);
- what is refused, by name: a layer traced before its plans exist, a plan id that names no plan, a chunks="auto"
  layer traced before an eager forward of its shape chose C; after that forward, the compiled layer equals the eager
  one bit for bit with the chosen C and with C = 2 set as the shape's decision (its graph then holds the chunks);
- the pipelined layers (chunks=C > 1: the split-phase operators basp::scatter_chunk_start/_wait and
  basp::gather_chunk_start/_wait) against the chunks=1 layer run eagerly on the same data, a function of global
  coordinates: BaspAttention (BSHD, SBHD, THD; GQA, uneven heads with held K/V heads, MQA with an empty chunk, two sequences
  per rank;
  C = 2, 4 and the plans' max) and DistributedAttention (batch_dim_idx 0 and 1), output and q, k, v gradients
  torch.equal with aot_eager, within 1e-6 relative with inductor; no round left open; and the forward and backward
  graphs of C = 4 keep the pipeline's order (scatter c + 1 started before chunk c is waited for, attention on
  chunk c before gather c starts, gather c - 1 waited for after gather c started).

Run under mpirun (CTest: 2 ranks)."""
import math
import sys

import torch
from mpi4py import MPI

import basp
import basp.torch as bt
from harness import check, expect_error, run
from basp._torch_chunk_ops import open_rounds

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
E = 12  # model width

torch.set_num_threads(1)


class Block(torch.nn.Module):
    """x [b, s_l, E] (or [s_l, b, E] for SBHD, [T_l, E] for THD) -> attention -> projection, like one layer."""

    def __init__(self, comm, hq, hkv, d, layout, capacity=None, dv=None, chunks=1):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.hq, self.hkv, self.d = hq, hkv, d
        self.dv = d if dv is None else dv  # values' head size (multi-head latent attention: another than d)
        self.wq = torch.nn.Parameter(torch.randn(E, hq * d, generator=g) / math.sqrt(E))
        self.wk = torch.nn.Parameter(torch.randn(E, hkv * d, generator=g) / math.sqrt(E))
        self.wv = torch.nn.Parameter(torch.randn(E, hkv * self.dv, generator=g) / math.sqrt(E))
        self.wo = torch.nn.Parameter(torch.randn(hq * self.dv, E, generator=g) / math.sqrt(hq * self.dv))
        self.attn = bt.BaspAttention(comm, hq, d, num_kv_heads=hkv, causal=True, layout=layout,
                                     token_capacity=capacity, v_head_dim=dv, chunks=chunks)

    def forward(self, x, seq_len=None, cu_seqlens=None, num_tokens=None):
        lead = x.shape[:-1]
        q = (x @ self.wq).reshape(*lead, self.hq, self.d)
        k = (x @ self.wk).reshape(*lead, self.hkv, self.d)
        v = (x @ self.wv).reshape(*lead, self.hkv, self.dv)
        if cu_seqlens is None:
            out = self.attn(q, k, v, seq_len=seq_len)
        else:
            out = self.attn(q, k, v, cu_seqlens=cu_seqlens, num_tokens=num_tokens)
        return out.reshape(*lead, self.hq * self.dv) @ self.wo


def run_once(fn, model, x, dy, **kwargs):
    """Output, input gradient and weight gradients of one forward/backward."""
    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = fn(x, **kwargs)
    y.backward(dy)
    return [y.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def shard(comm, b, s, layout, seed):
    """This rank's input and output gradient of a global [B, S, E] batch (its sequences and tokens)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(comm.micro_batch, s, E, generator=g)
    dy = torch.randn(comm.micro_batch, s, E, generator=g)
    info = comm.query(s)
    x, dy = (basp.data.local_shard(t, info) for t in (x, dy))
    if layout == "sbhd":
        x, dy = (t.transpose(0, 1).contiguous() for t in (x, dy))
    return x, dy


def compare(what, eager, compiled, exact, rtol=1e-6):
    for i, (a, b) in enumerate(zip(eager, compiled)):
        name = "%s: tensor %d of (output, dx, dwq, dwk, dwv, dwo)" % (what, i)
        check.equal(tuple(b.shape), tuple(a.shape), name + " shape")
        if exact:
            check.true(torch.equal(a, b), name + " is not bit-identical (max diff %g)" % (a - b).abs().max().item())
        else:
            scale = a.abs().max().item() or 1.0
            check.true((a - b).abs().max().item() <= rtol * scale, name + " differs by %g (scale %g)" % (
                (a - b).abs().max().item(), scale))


def test_aot_eager_bit_identical_bshd_sbhd():
    # Uneven heads (6 query heads over K = 4 ranks, K/V heads replicated) and tokens (S = 10 over K); values of
    # another head size than q and k (multi-head latent attention: the plans' per-tensor sizes in the fake shapes).
    for b, hq, hkv, d, s, layout, dv in ((2, 8, 2, 4, 16, "bshd", None), (1, 6, 3, 4, 10, "bshd", None),
                                         (2, 4, 1, 8, 12, "sbhd", None), (1, 3, 3, 6, 10, "sbhd", 4)):
        comm = basp.Comm(WORLD, micro_batch=b)
        model = Block(comm, hq, hkv, d, layout, dv=dv)
        model.attn.prepare(s, torch.float32, "cpu")
        x, dy = shard(comm, b, s, layout, seed=hq + s)
        eager = run_once(model, model, x, dy, seq_len=s)
        compiled_fn = torch.compile(model, backend="aot_eager", fullgraph=True)
        compiled = run_once(compiled_fn, model, x, dy, seq_len=s)
        compare("aot_eager %s Hq %d Hkv %d D %d Dv %s S %d" % (layout, hq, hkv, d, dv, s), eager, compiled, exact=True)
        # A second call reuses the graph and still matches (the plans' state carries over correctly).
        again = run_once(compiled_fn, model, x, dy, seq_len=s)
        compare("aot_eager %s, second call" % layout, eager, again, exact=True)
        model.attn.close()
        comm.close()


class GraphCounter:
    """A torch.compile backend that counts the graphs it is given and runs them eagerly (aot_eager)."""

    def __init__(self):
        self.graphs = 0
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd
        self._boxed = make_boxed_func
        self._backend = aot_autograd(fw_compiler=self._compile, bw_compiler=lambda gm, _: make_boxed_func(gm))

    def _compile(self, gm, example_inputs):
        self.graphs += 1
        return self._boxed(gm)

    def __call__(self, gm, example_inputs):
        return self._backend(gm, example_inputs)


def test_thd_one_graph_for_every_length():
    # Streams of several lengths and document counts (two or more documents: a one-document stream's cu_seqlens
    # of size 2 is a size PyTorch specialises on, and would be a second graph); q and k of 4, v of 4 and of 3
    # (multi-head latent attention: the THD plans' per-tensor sizes in the fake shapes).
    for dv in (None, 3):
        thd_case(dv)


def thd_case(dv):
    comm = basp.Comm(WORLD, micro_batch=1)  # one group of N ranks: one packed stream
    k, pos = comm.group_size, comm.group_position
    model = Block(comm, 4, 2, 4, "thd", capacity=64, dv=dv)
    model.attn.prepare(None, torch.float32, "cpu")
    counter = GraphCounter()
    compiled_fn = torch.compile(model, backend=counter, fullgraph=True, dynamic=True)
    for step, (tokens, docs) in enumerate(((13, [5, 8]), (40, [1, 30, 9]), (27, [26, 1]), (64, [20, 20, 24]))):
        cu = torch.tensor([0] + [sum(docs[:i + 1]) for i in range(len(docs))], dtype=torch.int64)
        check.equal(int(cu[-1]), tokens, "the documents fill the stream")
        g = torch.Generator().manual_seed(100 + step)
        x, dy = torch.randn(tokens, E, generator=g), torch.randn(tokens, E, generator=g)
        begin, end = basp._library.split(tokens, k, pos, "test")
        x, dy = x[begin:end].contiguous(), dy[begin:end].contiguous()
        eager = run_once(model, model, x, dy, cu_seqlens=cu, num_tokens=tokens)
        compiled = run_once(compiled_fn, model, x, dy, cu_seqlens=cu, num_tokens=tokens)
        check.equal(tuple(eager[0].shape), (end - begin, E), "output of Dv %s" % dv)
        compare("aot_eager THD T %d docs %r Dv %s" % (tokens, docs, dv), eager, compiled, exact=True)
    check.equal(counter.graphs, 1, "forward graphs compiled for four stream lengths (T is symbolic), Dv %s" % dv)
    model.attn.close()
    comm.close()


def test_inductor_close():
    comm = basp.Comm(WORLD, micro_batch=2)
    model = Block(comm, 4, 2, 8, "bshd")
    model.attn.prepare(16, torch.float32, "cpu")
    x, dy = shard(comm, 2, 16, "bshd", seed=3)
    eager = run_once(model, model, x, dy, seq_len=16)
    compiled = run_once(torch.compile(model, backend="inductor", fullgraph=True), model, x, dy, seq_len=16)
    compare("inductor BSHD", eager, compiled, exact=False, rtol=1e-6)
    model.attn.close()
    comm.close()


def test_opcheck():
    comm = basp.Comm(WORLD, micro_batch=1)
    plan = comm.plan(seq_len=2 * N + 1, head_dim=4, num_heads=[5, 1, 1], dtype=torch.float32,
                     query_heads=[0, 5, 5])
    pid = bt.plan_id(plan)
    check.equal(bt.plan_id(plan), pid, "a plan keeps its id")
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(plan.seq_sharded_shape(t), generator=g, requires_grad=True) for t in range(3)]
    # Every rank runs the same sequence of exchanges inside opcheck, so the collectives pair up.
    torch.library.opcheck(torch.ops.basp.scatter.default, (pid, xs, -1, None))
    hs = [torch.randn(plan.head_sharded_shape(t), generator=g, requires_grad=True) for t in range(3)]
    torch.library.opcheck(torch.ops.basp.gather.default, (pid, hs, -1, None))
    check.true(True, "opcheck passed (it raises otherwise)")
    plan.close()
    expect_error(lambda: bt.head_scatter(pid, *xs), basp.Status.ERROR_INVALID_ARGUMENT,
                 "plan id %d names no live plan" % pid)
    comm.close()


def test_refusals():
    comm = basp.Comm(WORLD, micro_batch=1)
    model = Block(comm, 4, 2, 4, "bshd")  # no prepare: its plans do not exist
    x, _ = shard(comm, 1, 8, "bshd", seed=1)
    compiled_fn = torch.compile(model, backend="aot_eager", fullgraph=True)
    try:
        compiled_fn(x, seq_len=8)
        raise AssertionError("tracing a layer without plans did not fail")
    except AssertionError:
        raise
    except Exception as e:  # dynamo wraps what the traced code raised
        check.true("layer.prepare(seq_len, dtype, device)" in str(e), "the error says what to do: %s" % e)
    expect_error(lambda: model.attn.prepare(None), basp.Status.ERROR_INVALID_ARGUMENT, "seq_len (None)")
    model.attn.close()
    comm.close()


def test_auto_chunks():
    comm = basp.Comm(WORLD, micro_batch=1)
    model = Block(comm, 4, 2, 4, "bshd", chunks="auto")
    model.attn.prepare(8, torch.float32, "cpu")
    x, dy = shard(comm, 1, 8, "bshd", seed=3)
    try:
        torch.compile(model, backend="aot_eager", fullgraph=True)(x, seq_len=8)
        raise AssertionError("tracing chunks='auto' before an eager forward did not fail")
    except AssertionError:
        raise
    except Exception as e:  # dynamo wraps what the traced code raised
        check.true("chunks='auto' has no head chunk count" in str(e) and "eager forward" in str(e),
                   "the error says what to do: %s" % e)
    torch._dynamo.reset()
    eager = run_once(model, model, x, dy, seq_len=8)  # measures and chooses
    chosen = model.attn.last_chunk_choice.num_chunks
    key = next(iter(model.attn._chooser.chosen))
    # The library's C, then (where it chose 1, as these small CPU exchanges make it do) C = 2 set as the layer's
    # decision for the shape, standing in for a choice of C > 1: both compile and equal the eager forward.
    for c in sorted({chosen, max(chosen, 2)}):
        model.attn._chooser.chosen[key] = c
        keeper = GraphKeeper()
        compiled = run_once(torch.compile(model, backend=keeper, fullgraph=True), model, x, dy, seq_len=8)
        for i, (got, want) in enumerate(zip(compiled, eager)):
            check.true(torch.equal(got, want), "chunks='auto' (C = %d), compiled against eager: tensor %d differs"
                       % (c, i))
        starts = [n for n in keeper.graphs[0].graph.nodes if "scatter_chunk_start" in str(n.target)]
        check.equal(len(starts), c if c > 1 else 0, "chunks='auto' (C = %d): scatter chunk starts in the graph" % c)
        torch._dynamo.reset()
    model.attn.close()
    comm.close()


# The pipelined layers (chunks=C > 1) compiled, against the chunks=1 layer run eagerly on the same data.

def global_tensor(seed, shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def layer_inputs(comm, layout, s, hq, hkv, d, seed):
    """q, k, v and dout of this rank: its slices of whole tensors [B, S, H, D] (THD: one stream [T, H, D])."""
    if layout == "thd":
        begin, end = basp._library.split(s, comm.group_size, comm.group_position, "test")
        whole = [global_tensor(seed + i, (s, h, d)) for i, h in enumerate((hq, hkv, hkv, hq))]
        return [x[begin:end].contiguous() for x in whole]
    info = comm.query(s)
    whole = [global_tensor(seed + i, (comm.micro_batch, s, h, d)) for i, h in enumerate((hq, hkv, hkv, hq))]
    mine = [x[info.first_sequence:info.first_sequence + info.num_sequences, info.token_begin:info.token_end]
            for x in whole]
    return [(x.transpose(0, 1) if layout == "sbhd" else x).contiguous() for x in mine]


def layer_grads(layer, tensors, **kwargs):
    """The output and the q, k, v gradients of one forward/backward."""
    leaves = [x.clone().requires_grad_() for x in tensors[:3]]
    out = layer(*leaves, **kwargs)
    out.backward(tensors[3])
    return [out.detach()] + [x.grad for x in leaves]


def check_same(what, want, got, exact=True):
    for name, w, g in zip(("output", "dq", "dk", "dv"), want, got):
        check.equal(tuple(g.shape), tuple(w.shape), "%s: %s shape" % (what, name))
        diff = (g - w).abs().max().item() if g.numel() else 0.0
        if exact:
            check.true(torch.equal(g, w), "%s: %s differs from chunks=1 eagerly by %g" % (what, name, diff))
        else:
            scale = w.abs().max().item() or 1.0
            check.true(diff <= 1e-6 * scale, "%s: %s differs by %g (scale %g)" % (what, name, diff, scale))
    check.equal(open_rounds(), 0, "%s: split-phase rounds left open" % what)


def pipelined_counts(plans, counts):
    """The chunk counts asked of a case: ints, and "max" for the plans' max_head_chunks."""
    return [plans.max_head_chunks if c == "max" else c for c in counts]


class GraphKeeper:
    """A torch.compile backend that keeps the forward and backward graphs AOT autograd gives it and runs them
    eagerly (aot_eager)."""

    def __init__(self):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd
        self.graphs = []

        def keep(gm, _):
            self.graphs.append(gm)
            return make_boxed_func(gm)
        self._backend = aot_autograd(fw_compiler=keep, bw_compiler=keep)

    def __call__(self, gm, example_inputs):
        return self._backend(gm, example_inputs)


def pipeline_order(gm, attention):
    """The positions in gm of each chunk's basp start and wait nodes ({(op, chunk): index}) and of the nodes whose
    target's name contains every string of `attention` (a list, in graph order)."""
    at, found = {}, []
    for i, node in enumerate(gm.graph.nodes):
        name = str(node.target) if node.op == "call_function" else ""
        if name.startswith("basp.") and "_chunk_" in name:
            at[(name.split(".")[1], node.args[3])] = i
        elif all(part in name for part in attention):
            found.append(i)
    return at, found


def check_pipeline_order(what, gm, chunks, attention):
    """Scatter chunk c + 1 started before chunk c is waited for, attention on chunk c between that wait and gather
    chunk c's start, gather chunk c - 1 waited for after gather chunk c started: the pipeline the layer wrote,
    still there in the graph that runs."""
    at, att = pipeline_order(gm, attention)
    check.equal(len(att), chunks, "%s: attention nodes (%s), one per chunk" % (what, attention))
    for c in range(chunks):
        order = [("scatter_chunk_start", c)] + ([("scatter_chunk_start", c + 1)] if c + 1 < chunks else [])
        order += [("scatter_chunk_wait", c)]
        positions = [at.get(key, -1) for key in order]
        positions.append(att[c] if c < len(att) else -1)
        after = [("gather_chunk_start", c)] + ([("gather_chunk_wait", c - 1)] if c > 0 else [])
        after += [("gather_chunk_start", c + 1)] if c + 1 < chunks else [("gather_chunk_wait", c)]
        positions += [at.get(key, -1) for key in after]
        check.true(min(positions) >= 0 and positions == sorted(positions),
                   "%s, chunk %d: %s, attention, %s at graph positions %s: not in pipelined order" % (
                       what, c, order, after, positions))


def test_pipelined_basp_attention_aot_eager():
    # GQA (K/V expanded by index_select), uneven heads with K/V heads held by both ranks (Hq 6, Hkv 3 over K = 2),
    # MQA over 3 query heads (rank 1's second chunk has none), two sequences per rank, BSHD, SBHD and THD
    # (documents as a list). chunks=4 on the first case is its
    # max_head_chunks; its graphs are checked to keep the pipeline's order.
    for layout, b, s, hq, hkv, counts in (("bshd", 1, 16, 8, 2, (2, 4)), ("bshd", 2, 10, 6, 3, ("max",)),
                                          ("sbhd", 2, 12, 3, 1, ("max",)), ("thd", 1, 13, 6, 2, (2,))):
        comm = basp.Comm(WORLD, micro_batch=b, num_groups=1)
        extra = {"token_capacity": 16} if layout == "thd" else {}
        call = {"cu_seqlens": [0, 5, 6, s]} if layout == "thd" else {"seq_len": s}
        tensors = layer_inputs(comm, layout, s, hq, hkv, 4, seed=hq * 10 + hkv)
        one = bt.BaspAttention(comm, hq, 4, num_kv_heads=hkv, causal=True, layout=layout, **extra)
        want = layer_grads(one, tensors, **call)
        plans = one._plans[next(iter(one._plans))]
        for chunks in pipelined_counts(plans, counts):
            layer = bt.BaspAttention(comm, hq, 4, num_kv_heads=hkv, causal=True, layout=layout, chunks=chunks,
                                     **extra)
            layer.prepare(None if layout == "thd" else s, torch.float32, "cpu")
            keeper = GraphKeeper()
            compiled = torch.compile(layer, backend=keeper, fullgraph=True, dynamic=False)
            what = "aot_eager %s B %d Hq %d Hkv %d chunks %d (max %d)" % (layout, b, hq, hkv, chunks,
                                                                        plans.max_head_chunks)
            check_same(what, want, layer_grads(compiled, tensors, **call))
            if chunks == 4:
                check.equal(len(keeper.graphs), 2, "%s: forward and backward graphs" % what)
                check_pipeline_order(what + ", forward", keeper.graphs[0], chunks, ("scaled_dot_product",))
                check_pipeline_order(what + ", backward", keeper.graphs[1], chunks,
                                     ("scaled_dot_product", "backward"))
            layer.close()
        torch._dynamo.reset()
        one.close()
        comm.close()


def ulysses_attention(bdi):
    """A DistributedAttention local attention on [b, S, h, D] (bdi 0) or [S, b, h, D] (1): K/V repeated by
    h_q / h_kv, then SDPA per head."""
    to_bhsd, back = ((0, 2, 1, 3), (0, 2, 1, 3)) if bdi == 0 else ((1, 2, 0, 3), (2, 0, 1, 3))

    def attend(q, k, v):
        r = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)
        q, k, v = (x.permute(*to_bhsd) for x in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).permute(*back)
    return attend


def test_pipelined_distributed_attention():
    # DistributedAttention (its own [b, S, h, D] / [S, b, h, D] layout, head axis 2), GQA with uneven and held
    # heads: aot_eager bit-identical to chunks=1 eagerly, inductor (generated C++ kernels) within 1e-6 relative.
    for bdi, hq, hkv, chunks, backend in ((0, 6, 3, 3, "aot_eager"), (1, 8, 2, 2, "aot_eager"),
                                          (1, 8, 2, 4, "aot_eager"), (0, 8, 2, 2, "inductor")):
        comm = basp.Comm(WORLD, micro_batch=1)
        layout = "bshd" if bdi == 0 else "sbhd"
        q, k, v, dout = layer_inputs(comm, layout, 12, hq, hkv, 4, seed=hq + hkv)
        tensors = [q, k, v, dout]
        want = layer_grads(bt.DistributedAttention(ulysses_attention(bdi), comm), tensors, batch_dim_idx=bdi)
        layer = bt.DistributedAttention(ulysses_attention(bdi), comm, chunks=chunks)
        layer.prepare(12, hq, 4, num_kv_heads=hkv, batch_dim_idx=bdi)
        compiled = torch.compile(layer, backend=backend, fullgraph=True, dynamic=False)
        got = layer_grads(compiled, tensors, batch_dim_idx=bdi)
        check_same("DistributedAttention %s batch_dim_idx %d Hq %d Hkv %d chunks %d" % (backend, bdi, hq, hkv,
                                                                                      chunks),
                   want, got, exact=backend == "aot_eager")
        torch._dynamo.reset()
        comm.close()


def test_pipelined_inductor():
    comm = basp.Comm(WORLD, micro_batch=1)
    tensors = layer_inputs(comm, "bshd", 16, 8, 2, 4, seed=11)
    want = layer_grads(bt.BaspAttention(comm, 8, 4, num_kv_heads=2, causal=True), tensors, seq_len=16)
    layer = bt.BaspAttention(comm, 8, 4, num_kv_heads=2, causal=True, chunks=2).prepare(16, torch.float32, "cpu")
    compiled = torch.compile(layer, backend="inductor", fullgraph=True, dynamic=False)
    check_same("inductor BSHD Hq 8 Hkv 2 chunks 2", want, layer_grads(compiled, tensors, seq_len=16), exact=False)
    # A round left part way (as by a graph that raised between its starts and waits): the next round of its plan
    # ends it, and the layer runs as before.
    plans = layer._plans[next(iter(layer._plans))]
    ins = [x.contiguous() for x in tensors[:3]]
    handle = torch.ops.basp.scatter_chunk_start(plans.qkv_id, ins, None, 0, 2, -1, None)
    torch.ops.basp.scatter_chunk_start(plans.qkv_id, ins, handle, 1, 2, -1, None)
    check.equal(open_rounds(), 1, "a round left with both chunks in flight")
    check_same("inductor BSHD after a round left open", want, layer_grads(compiled, tensors, seq_len=16),
               exact=False)
    expect_error(lambda: torch.ops.basp.scatter_chunk_wait(plans.qkv_id, handle, ins, 0, -1),
                 basp.Status.ERROR_INVALID_ARGUMENT, "names no round in flight")
    # A round left with only its first chunk of 3 started, which the library keeps open until all are started: the
    # next round of its plan starts the rest, waits for them, and the layer runs as before.
    handle = torch.ops.basp.scatter_chunk_start(plans.qkv_id, ins, None, 0, 3, -1, None)
    check.equal(open_rounds(), 1, "a round left with 1 of its 3 chunks started")
    check_same("inductor BSHD after a round left part started", want, layer_grads(compiled, tensors, seq_len=16),
               exact=False)
    check.equal(open_rounds(), 0, "the part-started round ended")
    # A first start the library refuses leaves no round behind.
    too_many = plans.max_head_chunks + 1
    expect_error(lambda: torch.ops.basp.scatter_chunk_start(plans.qkv_id, ins, None, 0, too_many, -1, None),
                 basp.Status.ERROR_INVALID_ARGUMENT, str(too_many))
    check.equal(open_rounds(), 0, "rounds left by a refused first start")
    torch._dynamo.reset()
    comm.close()


if __name__ == "__main__":
    if not bt.HAVE_CUSTOM_OPS:
        print("torch %s has no torch.library.custom_op (needs 2.4): nothing to test" % torch.__version__)
        sys.exit(77)
    run(globals(), WORLD, sys.argv)
