"""basp.torch.register_hf_attention: a Hugging Face Llama trained over BASP equals the same model trained whole.

Every rank builds LlamaForCausalLM from a small config (no download) with attn_implementation="basp", feeds its
shard of the [B, S] token ids (basp.data.local_shard, comm.query(S)) with the global position_ids of its tokens,
takes labels shifted over the whole sequence before sharding (a rank's last label is the next shard's first
token), computes sum of token losses / global token count, all-reduces the weight gradients (sum) and takes SGD
steps. Each step's loss (all-reduced) and the parameters after the steps must equal one process training the same
model on the whole micro-batch with transformers' own "sdpa" attention and the loss written independently (HF's
shift of logits[:, :-1] against ids[:, 1:]). Cases: GQA 4/2 and MQA 4/1, BASP (G = gcd(N, B)) and Ulysses (G = 1),
so that on 4 ranks K = 4 does not divide the K/V heads, and an S that K = 4 does not divide; and a small
DeepseekV3ForCausalLM (multi-head latent attention: q and k of 16 channels, v of 8; dense MLPs only), BASP and
Ulysses. Then the refusals:
padding masks, 4-D masks, dropout, wrong position_ids, packed position_ids, bad registrations.

Run under mpirun (CTest: 2 and 4 ranks). Exits 77 (skipped) where transformers is not importable; a transformers
without DeepSeek-V3 skips only its cases, saying so on stdout."""
import math
import os
import sys

import torch
from mpi4py import MPI

try:
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # the same on every rank
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("skipped: transformers is not importable (%s)" % e, flush=True)
    sys.exit(77)
try:  # DeepSeek-V3 came to transformers after Llama: without it only its cases are skipped (said on stdout)
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    NO_DEEPSEEK = None
except ImportError as e:
    NO_DEEPSEEK = str(e)

import basp
import basp.torch as bt
from harness import check, expect_error, run

# The example's gradient all-reduce (one flat MPI_Allreduce): the training step the example documents.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
from hf_llama import allreduce_gradients  # noqa: E402  (examples/python/hf_llama.py)

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
B = 2
STEPS = 5
LR = 0.5
RTOL = 1e-5  # loss of every step, relative
PARAM_ATOL = 1e-5  # parameters after the steps (they are O(0.02..1))
SCALING = 0.6

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()


def config(num_kv_heads, attn, seq_len, dropout=0.0):
    return LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=num_kv_heads, max_position_embeddings=64,
                       attention_dropout=dropout, use_cache=False, tie_word_embeddings=False, initializer_range=0.1,
                       attn_implementation=attn)


# num_kv_heads of this marker selects DeepSeek-V3's multi-head latent attention (its Hkv is Hq) instead of Llama.
MLA = "mla"
MLA_DIMS = (16, 8)  # q and k: 12 channels without position + 4 rotary; v: 8


def deepseek_config(attn):
    """A small DeepseekV3ForCausalLM: dense MLPs only (first_k_dense_replace covers every layer, so no expert
    routing), q and k of 16 channels, v of 8, Hq = 4, no dropout."""
    return DeepseekV3Config(vocab_size=96, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                            num_hidden_layers=2, first_k_dense_replace=2, num_attention_heads=4,
                            num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=12,
                            qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
                            n_shared_experts=1, n_group=1, topk_group=1, max_position_embeddings=64,
                            attention_dropout=0.0, use_cache=False, tie_word_embeddings=False,
                            initializer_range=0.1, attn_implementation=attn)


def new_model(num_kv_heads, attn, seq_len):
    if num_kv_heads == MLA:
        return DeepseekV3ForCausalLM(deepseek_config(attn))
    return LlamaForCausalLM(config(num_kv_heads, attn, seq_len))


def tokens(seq_len, seed):
    return torch.randint(0, 96, (B, seq_len), generator=torch.Generator().manual_seed(seed))


def build(num_kv_heads, attn, seq_len, seed):
    """The model with the seeded initial weights; its attention scaling set to 0.6 (Llama's own is 1/sqrt(D) =
    0.25, which SDPA's default would give anyway): the backend must pass HF's `scaling` on."""
    model = new_model(num_kv_heads, attn, seq_len)
    model.load_state_dict(initial_state(num_kv_heads, seq_len, seed))
    for layer in model.model.layers:
        layer.self_attn.scaling = SCALING
    return model


def initial_state(num_kv_heads, seq_len, seed):
    torch.manual_seed(seed)
    return new_model(num_kv_heads, "sdpa", seq_len).state_dict()


def reference(num_kv_heads, seq_len, seed):
    """One process, the whole micro-batch, HF's sdpa: (losses per step, final parameters)."""
    model = build(num_kv_heads, "sdpa", seq_len, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ids = tokens(seq_len, seed)
    losses = []
    for _ in range(STEPS):
        logits = model(input_ids=ids, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def distributed(num_kv_heads, seq_len, seed, num_groups, per_call_seq_len=False):
    """Every rank trains on its shard: (losses per step, final parameters, G, K)."""
    comm = basp.Comm(WORLD, micro_batch=B, num_groups=num_groups)
    hf = bt.register_hf_attention(comm, seq_len=None if per_call_seq_len else seq_len)
    model = build(num_kv_heads, "basp", seq_len, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    info = comm.query(seq_len)
    ids = tokens(seq_len, seed)
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]  # shifted over the whole sequence, before sharding
    ids_loc, labels_loc = basp.data.local_shard(ids, info), basp.data.local_shard(labels, info)
    positions = torch.arange(info.token_begin, info.token_end).unsqueeze(0)
    extra = {"basp_seq_len": seq_len} if per_call_seq_len else {}
    count = B * (seq_len - 1)
    losses = []
    for _ in range(STEPS):
        logits = model(input_ids=ids_loc, position_ids=positions, use_cache=False, **extra).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels_loc.reshape(-1),
                                                 ignore_index=-100, reduction="sum") / count
        opt.zero_grad()
        loss.backward()
        allreduce_gradients(model, WORLD)
        opt.step()
        losses.append(WORLD.allreduce(loss.item(), op=MPI.SUM))
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    layer = (4, 4) + MLA_DIMS if num_kv_heads == MLA else (4, num_kv_heads, 16, 16)
    check.equal(sorted(hf.layers), [layer], "one BaspAttention for (Hq, Hkv, D, Dv)")
    groups, k = comm.num_groups, comm.group_size
    hf.close()
    comm.close()
    return losses, params, groups, k


def test_training_matches_single_process():
    worst_loss, worst_param = 0.0, 0.0
    cases = []
    for num_kv_heads in (2, 1):
        cases.append((num_kv_heads, 32, None, False))
        if math.gcd(N, B) > 1:
            cases.append((num_kv_heads, 32, 1, False))  # Ulysses: K = N
    cases.append((2, 30, 1, True))  # S = 30: K = 4 does not divide it; S given per call
    # DeepSeek-V3 (values of another head size than queries and keys): BASP, and Ulysses where it differs.
    if NO_DEEPSEEK is None:
        cases.append((MLA, 32, None, False))
        if math.gcd(N, B) > 1:
            cases.append((MLA, 30, 1, True))
    elif RANK == 0:
        print("  skipped: the DeepSeek-V3 (multi-head latent attention) cases: this transformers (%s) has no "
              "DeepseekV3ForCausalLM (%s)" % (transformers.__version__, NO_DEEPSEEK), flush=True)
    for num_kv_heads, seq_len, groups, per_call in cases:
        seed = (700 if num_kv_heads == MLA else 100 * num_kv_heads) + seq_len
        ref_losses, ref_params = reference(num_kv_heads, seq_len, seed)
        losses, params, g, k = distributed(num_kv_heads, seq_len, seed, groups, per_call)
        what = "N=%d G=%d K=%d Hkv=%s S=%d" % (N, g, k, num_kv_heads, seq_len)
        check.true(ref_losses[-1] < ref_losses[0] - 0.05, "the reference learns (%r), %s" % (ref_losses, what))
        for step, (got, ref) in enumerate(zip(losses, ref_losses)):
            rel = abs(got - ref) / abs(ref)
            worst_loss = max(worst_loss, rel)
            check.true(rel <= RTOL, "loss of step %d: %r vs %r (relative %.3g), %s" % (step, got, ref, rel, what))
        check.equal(sorted(params), sorted(ref_params), "parameter names")
        for name, p in params.items():
            err = (p - ref_params[name]).abs().max().item()
            worst_param = max(worst_param, err)
            check.true(err <= PARAM_ATOL, "%s after %d steps: max abs error %.3g, %s" % (name, STEPS, err, what))
    if RANK == 0:
        print("  worst relative loss difference %.3g, worst parameter difference %.3g" % (worst_loss, worst_param),
              flush=True)


def _model(comm, registered, dropout=0.0):
    registered.append(bt.register_hf_attention(comm))
    torch.manual_seed(1)
    return LlamaForCausalLM(config(2, "basp", 32, dropout))


def test_refusals():
    # Every rank refuses before any exchange, so no rank waits for another.
    inv = basp.Status.ERROR_INVALID_ARGUMENT
    seq_len = 32
    with basp.Comm(WORLD, micro_batch=B) as comm:
        info = comm.query(seq_len)
        ids = basp.data.local_shard(tokens(seq_len, 5), info)
        positions = torch.arange(info.token_begin, info.token_end).unsqueeze(0)
        registered = []
        model = _model(comm, registered)
        padding = torch.ones_like(ids)
        padding[:, 0] = 0
        expect_error(lambda: model(input_ids=ids, position_ids=positions, attention_mask=padding), inv,
                     "attention_mask", "padding mask")
        # An all-ones 2-D mask is no mask: accepted (and the result is the unmasked one).
        with torch.no_grad():
            plain = model(input_ids=ids, position_ids=positions).logits
            ones = model(input_ids=ids, position_ids=positions, attention_mask=torch.ones_like(ids)).logits
        check.true(torch.equal(plain, ones), "an all-ones attention_mask changes nothing")
        mask4 = torch.zeros(ids.shape[0], 1, ids.shape[1], ids.shape[1])
        expect_error(lambda: model(input_ids=ids, position_ids=positions, attention_mask=mask4), inv,
                     "attention_mask", "not None")
        expect_error(lambda: model(input_ids=ids, position_ids=positions + 1), inv, "position_ids",
                     "[%d, %d)" % (info.token_begin, info.token_end))
        packed = positions.clone()
        packed[:, positions.shape[1] // 2:] -= positions.shape[1] // 2  # a restart inside every shard
        expect_error(lambda: model(input_ids=ids, position_ids=packed), inv, "mask_function")
        expect_error(lambda: model(input_ids=ids, position_ids=positions, basp_seq_len=seq_len + 2 * N), inv,
                     "query holds")
        dropping = _model(comm, registered, dropout=0.1).train()
        expect_error(lambda: dropping(input_ids=ids, position_ids=positions), inv, "dropout (0.1)",
                     "attention_dropout")
        with torch.no_grad():
            check.equal(tuple(dropping.eval()(input_ids=ids, position_ids=positions).logits.shape),
                        tuple(ids.shape) + (96,), "in eval mode the dropout config is harmless")
        expect_error(lambda: bt.register_hf_attention("comm"), inv, "comm (a str)")
        expect_error(lambda: bt.register_hf_attention(comm, name="sdpa"), inv, "name ('sdpa')")
        expect_error(lambda: bt.register_hf_attention(comm, seq_len=0), inv, "seq_len (0)")
        check.true(transformers.AttentionInterface._global_mapping["basp"] is registered[-1],
                   "the last registration is the one transformers calls")
        for hf in registered:
            hf.close()


if __name__ == "__main__":
    run(globals(), WORLD, sys.argv)
