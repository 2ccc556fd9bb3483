"""BASP preserves training accuracy: a small Llama-like model trained with BASP, Ulysses and one process.

The counterpart, at CPU scale, of the BASP paper's loss-convergence experiment (there: Llama 3.2-3B on 8 GPUs
for 800 iterations, whose BASP and Ulysses-SP loss curves overlap). Here a two-layer Llama-like model (RMSNorm,
rotary position embeddings over global positions, grouped-query attention, SwiGLU MLP, a byte vocabulary of 256)
is trained on the repository's own text with the same initial weights, the same data order and the same AdamW
settings in every configuration:

  single process   the whole micro-batch of B sequences in one process, plain full attention
  Ulysses          basp.Comm(world, micro_batch=B, num_groups=1): one group of K = N ranks
  BASP             num_groups=G for every other G dividing gcd(N, B): G groups of K = N/G ranks

In the parallel configurations each rank holds the token shard basp.data.local_shard gives it (B/G sequences,
S/K tokens of each), its attention is basp.torch.BaspAttention (head scatter, local attention over whole
sequences, head gather), the loss is the sum of the cross entropy over the rank's tokens divided by the global
token count B*S (all-reduced for the report), and the weight gradients are summed over all N ranks with one
MPI Allreduce before the optimizer step. Labels are the next byte of the global sequence, cut with the same
shard as the inputs, so a shard's last label is the first token of the next rank's shard. The single-process
run is the same model code with the attention swapped for full attention (the same local attention function on
all heads of all sequences).

The parallel runs do the same arithmetic as the single process except for the order of floating-point sums
(the gradient of each weight is a sum over tokens, cut into N partial sums here), so their losses agree with it
to rounding, which training then amplifies: measured on 8 ranks, float32 losses differ by at most ~1e-6 (a few
float32 spacings) over the first 20 steps, and the gap grows to ~1e-3 by step 300; with --dtype float64 the same
runs differ by ~1e-15 at first and ~1e-11 at step 300, the same growth scaled by the ratio of the two machine
epsilons, which is what rounding (and no modelling difference) gives.

Training text: every tracked *.md, *.h, *.cpp and *.py file of the repository (git ls-files, sorted by path,
concatenated as bytes; without git, the same suffixes found by walking the tree), read by rank 0 and broadcast.
Step t trains on B windows of S + 1 bytes whose offsets come from numpy's default_rng([seed, t]).

Run (8 ranks; 300 steps take about four minutes on 2 cores in float32, eight in float64):

    export BASP_LIBRARY=$PWD/build/src/libbasp.so.0 PYTHONPATH=$PWD/python
    mpirun --oversubscribe -np 8 -x BASP_LIBRARY -x PYTHONPATH -x OMP_NUM_THREADS=1 \\
        python3 examples/python/accuracy.py --steps 300 --out docs/accuracy.json

Rank 0 prints a summary table and writes the JSON (per-step losses of every configuration, |difference| to the
single process per step, the maxima); scripts/python/plot_accuracy.py draws it. python/tests/test_accuracy.py runs the
same code for 20 steps and asserts the agreement.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

import basp
import basp.torch as bt

SUFFIXES = (".md", ".h", ".cpp", ".py")
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


@dataclasses.dataclass(frozen=True)
class Settings:
    """The model, the data and the optimizer: the same in every configuration."""
    layers: int = 2
    hidden: int = 128
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 16
    mlp: int = 384            # SwiGLU intermediate size
    vocab: int = 256          # bytes
    seq_len: int = 256        # S
    micro_batch: int = 8      # B
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    lr: float = 2e-3
    warmup: int = 10          # linear warm-up steps, then constant
    betas: tuple = (0.9, 0.95)
    adam_eps: float = 1e-8
    weight_decay: float = 0.1
    seed: int = 1234
    dtype: str = "float32"    # of weights, activations and gradients ("float64": a rounding check)


# --- the model ------------------------------------------------------------------------------------------------

class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x [b, s, h, d] at the given global token positions [s] (the halves of the head dim are
    the pairs rotated together)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    angles = positions.to(x.dtype)[:, None] * inv_freq[None, :]                # [s, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[None, :, None, :]    # [1, s, 1, d]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[None, :, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class FullAttention(torch.nn.Module):
    """Attention of one process over whole sequences: q [B, S, Hq, D], k/v [B, S, Hkv, D] -> [B, S, Hq, D], each
    K/V head read by Hq/Hkv consecutive query heads, computed by basp.torch.default_attention (what BaspAttention
    runs on its head shard)."""

    def __init__(self, num_heads: int, num_kv_heads: int, causal: bool) -> None:
        super().__init__()
        self.ratio = num_heads // num_kv_heads
        self.causal = causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))                          # [B, H, S, D]
        k, v = k.repeat_interleave(self.ratio, dim=1), v.repeat_interleave(self.ratio, dim=1)
        return bt.default_attention(q, k, v, self.causal).transpose(1, 2)


class Block(torch.nn.Module):
    def __init__(self, cfg: Settings, core: torch.nn.Module) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden, cfg.head_dim
        self.attn_norm = RMSNorm(h, cfg.norm_eps)
        self.wq = torch.nn.Linear(h, cfg.heads * d, bias=False)
        self.wk = torch.nn.Linear(h, cfg.kv_heads * d, bias=False)
        self.wv = torch.nn.Linear(h, cfg.kv_heads * d, bias=False)
        self.wo = torch.nn.Linear(cfg.heads * d, h, bias=False)
        self.core = core
        self.mlp_norm = RMSNorm(h, cfg.norm_eps)
        self.gate = torch.nn.Linear(h, cfg.mlp, bias=False)
        self.up = torch.nn.Linear(h, cfg.mlp, bias=False)
        self.down = torch.nn.Linear(cfg.mlp, h, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        b, s, _ = x.shape
        y = self.attn_norm(x)
        q = rotary(self.wq(y).view(b, s, cfg.heads, cfg.head_dim), positions, cfg.rope_theta)
        k = rotary(self.wk(y).view(b, s, cfg.kv_heads, cfg.head_dim), positions, cfg.rope_theta)
        v = self.wv(y).view(b, s, cfg.kv_heads, cfg.head_dim)
        x = x + self.wo(self.core(q, k, v).reshape(b, s, cfg.heads * cfg.head_dim))
        y = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class TinyLlama(torch.nn.Module):
    """Token ids [b, s] at global positions [s] -> logits [b, s, vocab]. `make_core(layer)` gives each layer's
    attention module, fn(q, k, v) on [b, s, H, D] tensors: the only difference between the configurations."""

    def __init__(self, cfg: Settings, make_core: Callable[[int], torch.nn.Module]) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = torch.nn.ModuleList([Block(cfg, make_core(i)) for i in range(cfg.layers)])
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.head = torch.nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions)
        return self.head(self.norm(x))


def initial_weights(cfg: Settings) -> Dict[str, torch.Tensor]:
    """Seeded initial weights (every rank computes the same): normal(0, init_std) matrices, the residual output
    projections scaled by 1/sqrt(2 * layers), norms at one; drawn in float32 and stored in cfg.dtype."""
    model = TinyLlama(cfg, lambda i: FullAttention(cfg.heads, cfg.kv_heads, True))
    g = torch.Generator().manual_seed(cfg.seed)
    state = {}
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            state[name] = torch.ones_like(p)
        else:
            std = cfg.init_std / (math.sqrt(2 * cfg.layers) if name.endswith(("wo.weight", "down.weight")) else 1)
            state[name] = torch.randn(p.shape, generator=g) * std
    dtype = getattr(torch, cfg.dtype)
    return {name: t.to(dtype) for name, t in state.items()}


# --- the data -------------------------------------------------------------------------------------------------

def corpus_files(root: str) -> List[str]:
    """The training text's files, relative to root: tracked *.md, *.h, *.cpp, *.py (git ls-files), sorted; without
    git, the same suffixes under root, skipping hidden directories and build trees."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True, capture_output=True).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n.endswith(SUFFIXES)]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for top, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            names += [os.path.relpath(os.path.join(top, f), root) for f in files if f.endswith(SUFFIXES)]
    return sorted(n for n in names if os.path.isfile(os.path.join(root, n)))


def load_corpus(root: str, revision: Optional[str] = None) -> bytes:
    """The training text: the corpus files of the working tree, or, with `revision`, of that commit (read with git,
    so that later edits of the repository do not change it; None when git or the commit is missing)."""
    if revision is not None:
        return _corpus_at(root, revision)
    parts = []
    for name in corpus_files(root):
        with open(os.path.join(root, name), "rb") as f:
            parts.append(f.read())
    return b"".join(parts)


def _corpus_at(root: str, revision: str) -> Optional[bytes]:
    """The regular files with the corpus suffixes in `revision`'s tree, sorted by path and concatenated, as
    corpus_files and load_corpus take them from a checkout of that commit; None without git or the commit."""
    try:
        tree = subprocess.run(["git", "-C", root, "ls-tree", "-r", "-z", revision], check=True,
                              capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    names = []
    for entry in tree.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, name = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == "blob" and fields[0] != "120000" and name.endswith(SUFFIXES):
            names.append(name)
    names.sort()
    request = "".join("%s:%s\n" % (revision, n) for n in names).encode("utf-8", "surrogateescape")
    out = subprocess.run(["git", "-C", root, "cat-file", "--batch"], input=request, check=True,
                         capture_output=True).stdout
    parts, at = [], 0
    for _ in names:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        parts.append(out[header_end + 1:header_end + 1 + size])
        at = header_end + 1 + size + 1
    return b"".join(parts)


def batch_at(data: np.ndarray, step: int, cfg: Settings) -> torch.Tensor:
    """Micro-batch `step`: B windows of S + 1 bytes [B, S + 1] (int64) at offsets drawn from default_rng([seed,
    step]); inputs are [:, :S], labels [:, 1:]."""
    rng = np.random.default_rng([cfg.seed, step])
    starts = rng.integers(0, len(data) - cfg.seq_len, size=cfg.micro_batch)
    return torch.from_numpy(np.stack([data[s:s + cfg.seq_len + 1] for s in starts]).astype(np.int64))


# --- training -------------------------------------------------------------------------------------------------

def _optimizer(model: torch.nn.Module, cfg: Settings) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps,
                             weight_decay=cfg.weight_decay)


def _set_lr(opt: torch.optim.Optimizer, cfg: Settings, step: int) -> None:
    for group in opt.param_groups:
        group["lr"] = cfg.lr * min(1.0, (step + 1) / cfg.warmup)


def train_single(cfg: Settings, data: np.ndarray, weights: Dict[str, torch.Tensor], steps: int) -> List[float]:
    """The reference: one process, the whole micro-batch, full attention. Returns the loss of every step."""
    model = TinyLlama(cfg, lambda i: FullAttention(cfg.heads, cfg.kv_heads, True)).to(getattr(torch, cfg.dtype))
    model.load_state_dict(weights)
    opt = _optimizer(model, cfg)
    positions = torch.arange(cfg.seq_len)
    losses = []
    for step in range(steps):
        batch = batch_at(data, step, cfg)
        logits = model(batch[:, :-1], positions)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1), reduction="sum") / (
            cfg.micro_batch * cfg.seq_len)
        loss.backward()
        _set_lr(opt, cfg, step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def train_parallel(mpi_comm: Any, cfg: Settings, data: np.ndarray, weights: Dict[str, torch.Tensor], steps: int,
                   num_groups: int) -> Dict[str, Any]:
    """BASP (Ulysses when num_groups is 1) over all ranks of mpi_comm: each rank trains on its shard, weight
    gradients summed over all ranks. Returns the comm's G and K and the (all-reduced) loss of every step."""
    from mpi4py import MPI

    comm = basp.Comm(mpi_comm, micro_batch=cfg.micro_batch, num_groups=num_groups)
    info = comm.query(cfg.seq_len)
    cores: List[bt.BaspAttention] = []

    def make_core(layer: int) -> torch.nn.Module:
        cores.append(bt.BaspAttention(comm, cfg.heads, cfg.head_dim, num_kv_heads=cfg.kv_heads, causal=True))
        return cores[-1]

    model = TinyLlama(cfg, make_core).to(getattr(torch, cfg.dtype))
    model.load_state_dict(weights)
    opt = _optimizer(model, cfg)
    params = list(model.parameters())
    positions = torch.arange(cfg.seq_len)[info.tokens]   # global positions of this rank's tokens
    flat = np.empty(sum(p.numel() for p in params), dtype=np.dtype(cfg.dtype))
    losses = []
    try:
        for step in range(steps):
            batch = batch_at(data, step, cfg)
            tokens = basp.data.local_shard(batch[:, :-1].contiguous(), info)
            labels = basp.data.local_shard(batch[:, 1:].contiguous(), info)
            logits = model(tokens, positions)
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), labels.reshape(-1), reduction="sum") / (
                cfg.micro_batch * cfg.seq_len)
            loss.backward()
            offset = 0
            for p in params:
                flat[offset:offset + p.numel()] = p.grad.reshape(-1).numpy()
                offset += p.numel()
            mpi_comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
            offset = 0
            for p in params:
                p.grad.copy_(torch.from_numpy(flat[offset:offset + p.numel()]).view_as(p.grad))
                offset += p.numel()
            _set_lr(opt, cfg, step)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(mpi_comm.allreduce(loss.item(), op=MPI.SUM))
        return {"num_groups": comm.num_groups, "group_size": comm.group_size, "loss": losses}
    finally:
        for core in cores:
            core.close()
        comm.close()


def _idle_until_done(mpi_comm: Any) -> None:
    """Waits at a barrier by polling and sleeping, so that waiting ranks leave the CPU to the working one
    (8 ranks often share a few cores)."""
    request = mpi_comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


def run_experiment(mpi_comm: Any, steps: int, cfg: Settings = Settings(), root: str = REPO_ROOT,
                   group_counts: Optional[Sequence[int]] = None, log: Callable[[str], None] = lambda s: None,
                   text: Optional[bytes] = None) -> Dict[str, Any]:
    """Trains every configuration for `steps` steps (collective over mpi_comm; the single process on rank 0) and
    returns the same results on every rank: settings, data description, per-step losses of each configuration,
    |loss - single| per step and the maxima. group_counts default: every divisor of gcd(N, B). text: the training
    text (rank 0's is used); default: load_corpus(root), read by rank 0."""
    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    files = None
    if rank == 0 and text is None:
        files = len(corpus_files(root))
        text = load_corpus(root)
    text, files = mpi_comm.bcast((text, files) if rank == 0 else None, root=0)
    data = np.frombuffer(text, dtype=np.uint8)
    if len(data) <= cfg.seq_len:
        raise basp.errors.invalid_argument("accuracy: the corpus under root (%r) has %d bytes, fewer than a window "
                                           "of seq_len + 1 (%d)" % (root, len(data), cfg.seq_len + 1))
    weights = initial_weights(cfg)
    if group_counts is None:
        g = math.gcd(size, cfg.micro_batch)
        group_counts = [d for d in range(1, g + 1) if g % d == 0]

    t0 = time.perf_counter()
    single = None
    if rank == 0:
        single = train_single(cfg, data, weights, steps)
        mpi_comm.Ibarrier().Wait()
    else:
        _idle_until_done(mpi_comm)
    single = mpi_comm.bcast(single, root=0)
    wall = {"single process": time.perf_counter() - t0}
    log("single process: %d steps in %.1f s" % (steps, wall["single process"]))

    # One untimed step first: the first parallel run of a process pays seconds of one-time start-up (measured:
    # ~8 s of 8 ranks on 2 cores, whichever configuration comes first), which would otherwise land on it.
    t0 = time.perf_counter()
    train_parallel(mpi_comm, cfg, data, weights, 1, group_counts[0])
    wall["warm-up"] = time.perf_counter() - t0
    log("warm-up (one step, G=%d): %.1f s" % (group_counts[0], wall["warm-up"]))

    runs = []
    for groups in group_counts:
        t0 = time.perf_counter()
        r = train_parallel(mpi_comm, cfg, data, weights, steps, groups)
        name = ("Ulysses" if r["num_groups"] == 1 else "BASP") + " G=%d K=%d" % (r["num_groups"], r["group_size"])
        wall[name] = time.perf_counter() - t0
        diff = [abs(a - b) for a, b in zip(r["loss"], single)]
        r.update(name=name, abs_diff=diff, max_abs_diff=max(diff),
                 max_rel_diff=max(d / abs(s) for d, s in zip(diff, single)))
        runs.append(r)
        log("%s: %d steps in %.1f s, max |loss - single| %.3g" % (name, steps, wall[name], r["max_abs_diff"]))

    per_step = [max(r["abs_diff"][t] for r in runs) for t in range(steps)]
    return {
        "experiment": "loss of BASP and Ulysses against a single process (examples/python/accuracy.py)",
        "world_size": size,
        "steps": steps,
        "settings": dataclasses.asdict(cfg),
        "torch": torch.__version__,
        "data": {"files": files, "bytes": len(data),
                 "sha256": hashlib.sha256(text).hexdigest()},
        "single": {"name": "single process", "loss": single},
        "runs": runs,
        "max_abs_diff_per_step": per_step,
        "max_abs_diff": max(per_step),
        "max_rel_diff": max(r["max_rel_diff"] for r in runs),
        "wall_s": wall,
    }


def summary(result: Dict[str, Any]) -> str:
    """A table: each configuration's first and last loss and its largest differences to the single process."""
    single = result["single"]["loss"]
    rows = ["%-18s %10s %10s %14s %14s %8s" % ("configuration", "loss[0]", "loss[-1]", "max|diff|", "max rel diff",
                                                 "wall s")]
    rows.append("%-18s %10.6f %10.6f %14s %14s %8.1f" % ("single process", single[0], single[-1], "-", "-",
                                                           result["wall_s"]["single process"]))
    for r in result["runs"]:
        rows.append("%-18s %10.6f %10.6f %14.3e %14.3e %8.1f" % (r["name"], r["loss"][0], r["loss"][-1],
                                                                   r["max_abs_diff"], r["max_rel_diff"],
                                                                   result["wall_s"][r["name"]]))
    return "\n".join(rows)


def _compact(result: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON to write: losses at full precision, differences to 4 significant digits."""
    out = dict(result)
    out["runs"] = [dict(r, abs_diff=[float("%.4g" % d) for d in r["abs_diff"]]) for r in result["runs"]]
    out["max_abs_diff_per_step"] = [float("%.4g" % d) for d in result["max_abs_diff_per_step"]]
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    from mpi4py import MPI

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per configuration (default 300)")
    parser.add_argument("--out", help="JSON file rank 0 writes the results to")
    parser.add_argument("--root", default=REPO_ROOT, help="repository whose text is the training data")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                        help="precision of the whole model (default float32; float64 shows how small the "
                             "differences get when rounding is)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    t0 = time.perf_counter()
    log = (lambda s: print(s, flush=True)) if rank == 0 else (lambda s: None)
    log("N = %d ranks, %d steps, B = %d, S = %d, %s" % (world.Get_size(), args.steps, Settings.micro_batch,
                                                       Settings.seq_len, args.dtype))
    result = run_experiment(world, args.steps, Settings(dtype=args.dtype), root=args.root, log=log)
    result["wall_s"]["total"] = time.perf_counter() - t0
    if rank == 0:
        print(summary(result))
        print("max |loss difference| over all steps and configurations: %.3e (relative %.3e); total %.1f s" % (
            result["max_abs_diff"], result["max_rel_diff"], result["wall_s"]["total"]), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(_compact(result), f, indent=1)
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
