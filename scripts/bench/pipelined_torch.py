#!/usr/bin/python3
"""The pipelined attention layer with attention computed (docs/benchmarks.md, "Overlap: pipelined attention layer",
CPU SDPA): basp.torch.BaspAttention(chunks=C) forward, and forward + backward with --backward, with PyTorch's SDPA on
the CPU as the attention, under mpirun or scripts/sim-cluster. Where ranks share cores (8 ranks on 2 vCPUs) the
attention and the exchanges compete for them, so little can overlap: this is reported, not targeted.

    scripts/sim-cluster --nodes 2 --ranks-per-node 4 --map-by slot --link 4gbit \\
        -x BASP_LIBRARY=build/src/libbasp.so -x PYTHONPATH=python -- \\
        PYTHON scripts/bench/pipelined_torch.py --groups G [--seq S] [--chunks 1,2,4,auto] [--runs 5] [--backward]

Per C it prints the layer's time (the slowest rank's, median of --runs after --warmup), T(1) / T(C), and for "auto"
the C the layer chose. Every C's output (and gradients) is checked torch.equal to C = 1's; a difference exits 1.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from mpi4py import MPI

import basp
import basp.torch as bt

WORLD = MPI.COMM_WORLD


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=-1, help="G (1: Ulysses; default: the BASP rule)")
    p.add_argument("--seq", type=int, default=4096, help="S, tokens per sequence")
    p.add_argument("--batch", type=int, default=2, help="B, sequences per micro-batch")
    p.add_argument("--hq", type=int, default=32)
    p.add_argument("--hkv", type=int, default=8)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--chunks", default="1,2,4,auto", help="comma-separated C values and/or 'auto'")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--json", default="", help="write the rows here (rank 0)")
    a = p.parse_args()
    for c in a.chunks.split(","):
        if c != "auto" and (not c.isdigit() or int(c) < 1):
            p.error("--chunks (%r): each item must be an int >= 1 or 'auto'" % a.chunks)
    return a


def inputs(comm: basp.Comm, a: argparse.Namespace, dtype: torch.dtype):
    """This rank's q, k, v, dout: slices of whole tensors [B, S, H, D] seeded by the global coordinates."""
    info = comm.query(a.seq)
    out = []
    for i, h in enumerate((a.hq, a.hkv, a.hkv, a.hq)):
        g = torch.Generator().manual_seed(7 + i)
        whole = torch.randn((a.batch, a.seq, h, a.dim), generator=g, dtype=torch.float32)
        mine = whole[info.first_sequence:info.first_sequence + info.num_sequences, info.token_begin:info.token_end]
        out.append(mine.to(dtype).contiguous())
    return out


def one_pass(layer, tensors, backward: bool):
    q, k, v, dout = tensors
    leaves = [x.clone().requires_grad_(backward) for x in (q, k, v)]
    t0 = time.perf_counter()
    out = layer(*leaves)
    if backward:
        out.backward(dout)
    seconds = time.perf_counter() - t0
    result = [out.detach()] + ([x.grad for x in leaves] if backward else [])
    return WORLD.allreduce(seconds, op=MPI.MAX), result


def main() -> int:
    a = parse()
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    comm = basp.Comm(WORLD, micro_batch=a.batch, num_groups=a.groups)
    tensors = inputs(comm, a, dtype)
    rows, reference, t1 = [], None, None
    for c in a.chunks.split(","):
        chunks = c if c == "auto" else int(c)
        layer = bt.BaspAttention(comm, a.hq, a.dim, a.hkv, causal=True, chunks=chunks)
        times, result = [], None
        for r in range(a.warmup + a.runs):
            WORLD.Barrier()
            seconds, result = one_pass(layer, tensors, a.backward)
            if r >= a.warmup:
                times.append(seconds)
        same = reference is None or all(torch.equal(x, y) for x, y in zip(result, reference))
        if not WORLD.allreduce(same, op=MPI.LAND):
            if WORLD.Get_rank() == 0:
                print("pipelined_torch: C = %s differs from C = %s" % (c, a.chunks.split(",")[0]), file=sys.stderr)
            return 1
        reference = reference or result
        t = statistics.median(times)
        t1 = t1 or t
        chosen = layer.last_chunk_choice.num_chunks if c == "auto" and layer.last_chunk_choice else None
        rows.append({"chunks": c, "seconds": t, "speedup": t1 / t, "chosen": chosen})
    if WORLD.Get_rank() == 0:
        print("# pipelined_torch: %d ranks, K = %d, S = %d, B = %d, Hq %d, Hkv %d, D %d, %s, %s, CPU SDPA, %d thread(s)"
              % (WORLD.Get_size(), comm.group_size, a.seq, a.batch, a.hq, a.hkv, a.dim, a.dtype,
                 "forward + backward" if a.backward else "forward", a.threads))
        print("%6s %12s %8s %8s" % ("C", "T_ms", "T1/TC", "chosen"))
        for row in rows:
            print("%6s %12.1f %8.3f %8s" % (row["chunks"], row["seconds"] * 1e3, row["speedup"],
                                            row["chosen"] if row["chosen"] else "-"))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "group_size": comm.group_size, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
