"""Train a Hugging Face Llama with BASP sequence parallelism: basp.torch.register_hf_attention.

The model is transformers' own LlamaForCausalLM, built from a small config (no weights are downloaded) with
attn_implementation="basp". Nothing else of the model changes; what sequence parallelism needs is done here:

  who holds what   basp.Comm(world, micro_batch=B) makes G = gcd(N, B) groups of K = N/G ranks (--num-groups 1:
                   Ulysses). Every rank builds the same [B, S] micro-batch of token ids and keeps its shard,
                   basp.data.local_shard(ids, comm.query(S)): B/G sequences, tokens [token_begin, token_end).
  RoPE             the model is called with position_ids = torch.arange(token_begin, token_end), the global
                   positions of the rank's tokens (transformers would number them 0..S_l-1 on every rank).
  attention        the registered function runs basp.torch.BaspAttention: head scatter, causal attention over the
                   whole sequence (with GQA and HF's scaling), head gather. The causal mask over the whole sequence
                   is applied there; transformers builds no local mask (padding masks are refused).
  labels           shifted over the whole sequence before sharding: label[t] = ids[t + 1], so a shard's last label is
                   the first token of the next shard; the last position of each sequence has none (-100). The loss
                   is computed here, not by the model (which would shift within the shard): the sum of the rank's
                   token losses divided by the global count B * (S - 1); its all-reduced sum is the model's loss.
  gradients        every rank holds all weights; each backpropagates its own loss term (the exchanges carry the
                   gradient between the ranks of a group) and the weight gradients are summed over all N ranks
                   with one MPI Allreduce before the optimizer step, which is then the same on every rank.

With --check every rank also trains the same model in one process on the whole micro-batch with transformers'
"sdpa" attention and HF's own shifted loss, and rank 0 prints both losses per step. They differ only in the
order of floating-point sums: ~1e-7 at first (python/tests/test_hf.py asserts the agreement), growing as training
amplifies the rounding (AdamW at lr 1e-2: ~1e-4 by step 20 on 4 ranks; see examples/python/accuracy.py).

The data: sequences that count up by a per-sequence stride modulo the vocabulary (ids[t+1] = ids[t] + stride),
which a small model learns in a few dozen steps.

Run (CPU, float32):

    export BASP_LIBRARY=$PWD/build/src/libbasp.so.0 PYTHONPATH=$PWD/python
    mpirun --oversubscribe -np 4 -x BASP_LIBRARY -x PYTHONPATH -x OMP_NUM_THREADS=1 \\
        python3 examples/python/hf_llama.py --steps 40 --check

Needs transformers 5 and mpi4py. On GPUs the same code runs with a comm whose exchanges use NCCL and the
gradient all-reduce done by torch.distributed (or NCCL) instead of MPI on host copies.
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from mpi4py import MPI
from transformers import LlamaConfig, LlamaForCausalLM

import basp
import basp.torch as bt


def make_config(args: argparse.Namespace, attn_implementation: str) -> LlamaConfig:
    return LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq_len,
                       attention_dropout=0.0,  # dropout is refused by the basp backend
                       use_cache=False, attn_implementation=attn_implementation)


def micro_batch(args: argparse.Namespace, step: int) -> torch.Tensor:
    """The whole [B, S] micro-batch of step `step`, the same on every rank (seeded)."""
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, args.vocab, (args.micro_batch, 1), generator=g)
    stride = torch.randint(1, 8, (args.micro_batch, 1), generator=g)
    return (start + stride * torch.arange(args.seq_len)) % args.vocab


def allreduce_gradients(model: torch.nn.Module, world: MPI.Comm) -> None:
    """Sum every weight gradient over all ranks, in one flat buffer (one Allreduce)."""
    params = [p for p in model.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    world.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def train_basp(args: argparse.Namespace, world: MPI.Comm, initial: Dict[str, torch.Tensor]) -> List[float]:
    comm = basp.Comm(world, micro_batch=args.micro_batch, num_groups=args.num_groups)
    # Registers attn_implementation "basp" (and its mask function) for this process; S is given because K need
    # not divide it.
    hf = bt.register_hf_attention(comm, seq_len=args.seq_len)
    model = LlamaForCausalLM(make_config(args, "basp"))
    model.load_state_dict(initial)  # the same weights on every rank
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    info = comm.query(args.seq_len)
    if world.Get_rank() == 0:
        print("N=%d ranks, B=%d, S=%d: G=%d groups of K=%d ranks; rank 0 holds sequences %s, tokens %s" % (
            world.Get_size(), args.micro_batch, args.seq_len, comm.num_groups, comm.group_size,
            info.sequences, info.tokens), flush=True)
    positions = torch.arange(info.token_begin, info.token_end).unsqueeze(0)  # global positions, for RoPE
    count = args.micro_batch * (args.seq_len - 1)  # the global number of tokens with a label
    losses = []
    for step in range(args.steps):
        ids = micro_batch(args, step)
        labels = torch.full_like(ids, -100)
        labels[:, :-1] = ids[:, 1:]  # the shift, over the whole sequence
        ids_local = basp.data.local_shard(ids, info)
        labels_local = basp.data.local_shard(labels, info)
        logits = model(input_ids=ids_local, position_ids=positions, use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels_local.reshape(-1), ignore_index=-100,
                               reduction="sum") / count
        opt.zero_grad()
        loss.backward()
        allreduce_gradients(model, world)
        opt.step()
        losses.append(world.allreduce(loss.item(), op=MPI.SUM))
    hf.close()
    comm.close()
    return losses


def train_single(args: argparse.Namespace, initial: Dict[str, torch.Tensor]) -> List[float]:
    """The reference: one process, the whole micro-batch, transformers' sdpa attention and its own shifted loss."""
    model = LlamaForCausalLM(make_config(args, "sdpa"))
    model.load_state_dict(initial)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for step in range(args.steps):
        ids = micro_batch(args, step)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--micro-batch", type=int, default=2, help="B, sequences per micro-batch")
    p.add_argument("--seq-len", type=int, default=64, help="S, tokens per sequence")
    p.add_argument("--num-groups", type=int, default=None, help="G (default gcd(N, B); 1: Ulysses)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="num_key_value_heads (GQA; 1: MQA)")
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="also train in one process and compare the losses")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    world = MPI.COMM_WORLD
    torch.manual_seed(args.seed)
    initial = LlamaForCausalLM(make_config(args, "sdpa")).state_dict()  # identical on every rank: same seed
    losses = train_basp(args, world, initial)
    reference = train_single(args, initial) if args.check else None
    if world.Get_rank() == 0:
        for step, loss in enumerate(losses):
            line = "step %3d  loss %.6f" % (step, loss)
            if reference is not None:
                line += "  single process %.6f  |diff| %.2e" % (reference[step], abs(loss - reference[step]))
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
