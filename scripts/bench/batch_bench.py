#!/usr/bin/python3
"""The batch-plan benchmark: one attention layer with adaptive batch plans (docs/benchmarks.md section 12).

    batch_bench.py attn [--out FILE] [--lengths 128,256,512,1024,2048] [--dtype fp32|bf16]
    batch_bench.py run  [--build DIR] [--attn FILE] [--scale X] [--runs 10] [--seeds 0-9] [--json FILE]
                        [--no-wait] [-- extra basp_batch_layer arguments]

attn  measures, in this process on one thread (torch.set_num_threads(1)), the time of per-document causal attention
      of one GQA group (Hq / Hkv = 4 query heads sharing one KV head, D = 128) for each length, divides by the query
      heads and fits t(L) = c2 * L^2 + c1 * L per head (least squares on relative error). With torch >= 2.0 it times
      F.scaled_dot_product_attention(is_causal=True); older torch (Debian's 1.13) has none, and it times
      softmax(Q K^T / sqrt(D) + causal mask) V written out. Writes {"c2", "c1", "samples", "torch", "method"}.
run   runs, as root, build/bench/basp_batch_layer under scripts/sim-cluster (2 fake nodes x 4 ranks, block
      numbering, a 4 Gbit/s link) with the fitted coefficients times --scale.
      Arguments after "--" go to basp_batch_layer, e.g. "-- --equal-memory --calib-bytes 33554432 --calib-repeats 5"
      (section 12.7: fixed K uncapped, the adaptive plan given the memory of the fastest fixed K; calibration sized
      to the layer) or "-- --estimate" (prints the emulated attention of the whole run, runs nothing).
real  runs the configurations of a basp_batch_layer --json file again (a `run` or a `run ... -- --plan-only`: the
      same batches, groups and documents) under the same sim-cluster with the attention computed: each rank, the
      torch venv's python on one thread, runs basp.torch.BaspAttention (THD, causal, Hq 32, Hkv 8, D 128, bf16) with
      the configuration's batch plan, F.scaled_dot_product_attention per document; the slowest rank's layer time,
      median of --runs after one warm-up whose attention is skipped, and the slowest rank's attention alone.
          batch_bench.py real --configs FILE [--python PY] [--runs 3] [--batches seed0,seed1] [--json OUT]
      (PY: a python with torch and mpi4py; default: the venv of scripts/python/env.sh)
bound prints, for each batch of basp_batch_layer --json file(s) (this version: with lengths), a lower bound of
      the predicted step time of ANY plan under the file's model (the group holding the longest document, over
      every size and split across the nodes it could have; and the attention of the whole batch over N ranks),
      and so an upper bound of what any planner could gain over the best fixed K, by the model's own numbers. It
      checks that no configuration of the file predicts less than the bound.
table prints the Markdown table of docs/benchmarks.md section 12 from the --json file(s) of run (the equal-memory
      table of 12.7 for a run with --equal-memory).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def attn(args):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dt = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    hq, hkv, d = 4, 1, 128
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    samples = []
    for length in [int(x) for x in args.lengths.split(",")]:
        q = torch.randn(1, hq, length, d, dtype=dt)
        k = torch.randn(1, hkv, length, d, dtype=dt)
        v = torch.randn(1, hkv, length, d, dtype=dt)
        if sdpa is not None:
            kk, vv = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)

            def f():
                return sdpa(q, kk, vv, is_causal=True)
        else:
            mask = torch.ones(length, length, dtype=torch.bool).tril()

            def f():
                kk, vv = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
                s = (q @ kk.transpose(-1, -2)) * (d ** -0.5)
                s = s.masked_fill(~mask, float("-inf"))
                return torch.softmax(s.float(), -1).to(dt) @ vv
        f()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            f()
            times.append((time.perf_counter() - t) / hq)
        times.sort()
        samples.append((length, times[len(times) // 2]))
        print(f"L {length}: {samples[-1][1] * 1e3:.3f} ms per head", flush=True)
    # Least squares on relative error: minimise sum(((c2 L^2 + c1 L) / t - 1)^2).
    a11 = a12 = a22 = b1 = b2 = 0.0
    for length, t in samples:
        x1, x2 = length * length / t, length / t
        a11 += x1 * x1
        a12 += x1 * x2
        a22 += x2 * x2
        b1 += x1
        b2 += x2
    det = a11 * a22 - a12 * a12
    c2 = (b1 * a22 - b2 * a12) / det
    c1 = (a11 * b2 - a12 * b1) / det
    if c1 < 0:  # clamp, refit c2 alone
        c1, c2 = 0.0, b1 / a11
    if c2 < 0:
        c2, c1 = 0.0, b2 / a22
    out = dict(c2=c2, c1=c1, samples=samples, torch=torch.__version__, dtype=args.dtype, threads=1,
               method="F.scaled_dot_product_attention(is_causal=True)" if sdpa else "softmax(QK^T/sqrt(D)+mask)V",
               heads=dict(hq=hq, hkv=hkv, d=d), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for length, t in samples:
        print(f"L {length}: fit {100 * ((c2 * length * length + c1 * length) / t - 1):+.1f}%")
    print(f"c2 {c2:.4g} s/token^2, c1 {c1:.4g} s/token per head ({out['method']}, torch {torch.__version__})")
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def run(args, extra):
    with open(args.attn) as f:
        a = json.load(f)
    prog = [os.path.join(args.build, "bench", "basp_batch_layer"), "--c2", repr(a["c2"]), "--c1", repr(a["c1"]),
            "--scale", str(args.scale), "--runs", str(args.runs), "--seeds", args.seeds]
    if args.json:
        prog += ["--json", os.path.abspath(args.json)]
    if args.no_wait:
        prog += ["--no-wait"]
    return sim_cluster(1800, [], prog + extra)


def sim_cluster(timeout, options, prog):
    """Runs prog as root under scripts/sim-cluster on the section 12 cluster (2 fake nodes x 4 ranks, block
    numbering, a 4 Gbit/s link), with extra sim-cluster options; returns its exit status."""
    cmd = [os.path.join(ROOT, "scripts", "sim-cluster"), "--nodes", "2", "--ranks-per-node", "4", "--map-by", "slot",
           "--link", "4gbit", "--timeout", str(timeout)] + options + ["--"] + prog
    print(" ".join(cmd), flush=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.call(cmd, env=env)


def real(args):
    if not args.python:
        env_sh = os.path.join(ROOT, "scripts", "python", "env.sh")
        args.python = subprocess.check_output(["bash", env_sh], text=True).strip().splitlines()[-1]
    options = ["-x", "PYTHONPATH=" + os.path.join(ROOT, "python"),
               "-x", "BASP_LIBRARY=" + os.path.join(args.build, "src", "libbasp.so"), "-x", "OMP_NUM_THREADS=1"]
    return sim_cluster(3600, options, [args.python, os.path.abspath(__file__), "real-rank", "--configs",
                                       os.path.abspath(args.configs), "--runs", str(args.runs), "--batches",
                                       args.batches, "--json", os.path.abspath(args.json)])


def real_rank(args):
    """One rank of `real` (under mpirun): every configuration of the file, attention computed."""
    import torch
    from mpi4py import MPI

    import basp
    import basp.torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    with open(args.configs) as f:
        d = json.load(f)
    wanted = set(args.batches.split(",")) if args.batches else None
    cases = [c for c in d["cases"] if wanted is None or c["batch"] in wanted]
    if any("lengths" not in c for c in cases):
        raise SystemExit("batch_bench.py real: %s has no lengths/members/docs: make it with this basp_batch_layer"
                         % args.configs)
    comm = basp.Comm(world, batch_capacity=16384)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    state = {"compute": False, "attention_s": 0.0}

    def attention(q, k, v, causal):
        if not state["compute"]:
            return q  # the warm-up: exchanges only
        t = time.perf_counter()
        out = sdpa(q, k, v, is_causal=causal)
        state["attention_s"] += time.perf_counter() - t
        return out

    layer = basp.torch.BaspAttention(comm, 32, 128, num_kv_heads=8, causal=True, layout="thd", attention=attention)
    out_cases = []
    for c in cases:
        out_configs = []
        for x in c["configs"]:
            batch = basp.Batch(x["members"], docs=x["docs"], lengths=c["lengths"], rank=rank)
            n = batch.token_end - batch.token_begin
            q = torch.randn(n, 32, 128, dtype=torch.bfloat16)
            k = torch.randn(n, 8, 128, dtype=torch.bfloat16)
            v = torch.randn(n, 8, 128, dtype=torch.bfloat16)
            times, attn = [], []
            for r in range(args.runs + 1):
                state["compute"], state["attention_s"] = r > 0, 0.0
                world.Barrier()
                t = time.perf_counter()
                with torch.no_grad():
                    layer(q, k, v, batch=batch)
                dt = time.perf_counter() - t
                worst = world.allreduce(dt, op=MPI.MAX)
                worst_attn = world.allreduce(state["attention_s"], op=MPI.MAX)
                total_attn = world.allreduce(state["attention_s"], op=MPI.SUM)
                if r > 0:
                    times.append(worst)
                    attn.append((worst_attn, total_attn))
            def median(v):
                v = sorted(v)
                return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
            y = dict(name=x["name"], measured_s=median(times), min_s=min(times), max_s=max(times),
                     attention_s=median(a for a, _ in attn), attention_sum_s=median(b for _, b in attn),
                     emulated_s=x["measured_s"], predicted_s=x["predicted_s"], within_capacity=x["within_capacity"],
                     groups=x["groups"])
            out_configs.append(y)
            if rank == 0:
                print(f"{c['batch']:8s} {x['name']:9s} {y['measured_s'] * 1e3:9.0f} ms (range "
                      f"{y['min_s'] * 1e3:.0f}-{y['max_s'] * 1e3:.0f}), attention slowest rank "
                      f"{y['attention_s'] * 1e3:.0f} ms, all ranks {y['attention_sum_s']:.1f} s  {x['groups']}",
                      flush=True)
        out_cases.append(dict(batch=c["batch"], num_docs=c["num_docs"], longest=c["longest"], configs=out_configs))
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(dict(source=args.configs, runs=args.runs, torch=torch.__version__, threads=1,
                           date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cases=out_cases), f, indent=1)
    comm.close()
    return 0


def layer_table(d, detail, adaptive_header):
    """The section 12 table of a run's (or a real run's) cases: measured ms and detail(config) per cell (the
    adaptive cell's detail from detail(config, True)), best fixed K within capacity over the adaptive plan. Returns
    the logs of that ratio and of Ulysses / adaptive over the long-tail batches."""
    import math
    print(f"| batch | docs | longest | adaptive: groups | {adaptive_header} | K=1 | K=2 | K=4 | Ulysses (K=8) "
          "| best fixed within capacity / adaptive |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    logs, logs_u = [], []
    for c in d["cases"]:
        cf = {x["name"]: x for x in c["configs"]}
        ad = cf["adaptive"]
        sizes = [g.split("[")[0] for g in ad["groups"].split(" ")]

        def cell(name):
            if name not in cf:
                return "doesn't fit"
            x = cf[name]
            mark = "" if x["within_capacity"] else " (over cap.)"
            return f"{x['measured_s'] * 1e3:.0f} ({detail(x)}){mark}"
        fixed = [cf[n]["measured_s"] for n in ("K=1", "K=2", "K=4", "Ulysses") if n in cf and
                 cf[n]["within_capacity"]]
        ratio = min(fixed) / ad["measured_s"]
        if c["batch"] != "uniform":
            logs.append(math.log(ratio))
            if "Ulysses" in cf:
                logs_u.append(math.log(cf["Ulysses"]["measured_s"] / ad["measured_s"]))
        print(f"| {c['batch']} | {c['num_docs']} | {c['longest']} | {'+'.join(sizes)} | "
              f"{ad['measured_s'] * 1e3:.0f} ({detail(ad, True)}) | {cell('K=1')} | {cell('K=2')} | "
              f"{cell('K=4')} | {cell('Ulysses')} | {ratio:.2f} |")
    return logs, logs_u


def table_real(path, d):
    import math
    print(f"\n{path}: attention computed (torch {d['torch']}, one thread per rank), median of {d['runs']}\n")
    logs, logs_u = layer_table(d, lambda x, adaptive=False: f"attn {x['attention_s'] * 1e3:.0f}", "adaptive ms")
    if logs:
        print(f"\ngeometric mean over {len(logs)} long-tail batches: {math.exp(sum(logs) / len(logs)):.2f}x "
              f"(range {math.exp(min(logs)):.2f}-{math.exp(max(logs)):.2f})" +
              (f"; Ulysses / adaptive {math.exp(sum(logs_u) / len(logs_u)):.2f}x" if logs_u else ""))


HQ, HKV, D, ELEM = 32, 8, 128, 2  # basp_batch_layer's shape


def plan_lower_bound(model, lengths, capacity, node_of):
    """The least predicted step time any plan of `lengths` can have under `model` (cost_model.h's formula; node_of:
    each rank's node; capacity tokens per rank): max of (1) the group that holds the longest document L, minimised
    over its size k (k * capacity >= L) and over m, the most of its members on one node (its node term is
    (m - 1) x bytes per peer; while m < k its network term is at least that node's own traffic m * (k - m) x bytes
    per peer, other groups only add), its stream holding at least L tokens and at least what the other N - k ranks
    cannot hold; (2) the whole batch's attention over N ranks (max over groups of
    A_g / k_g >= sum A / sum k)."""
    def ceil_div(a, b):
        return -(-a // b)
    n_ranks = len(node_of)
    per_node = [node_of.count(x) for x in set(node_of)]
    longest, total_tokens = max(lengths), sum(lengths)
    attn = lambda sq, sm, share: (model["c2"] * sq + model["c1"] * sm) * share  # noqa: E731
    best = float("inf")
    for k in range(1, n_ranks + 1):
        if k * capacity < longest:
            continue
        # The group's stream: the longest document, and whatever the other N - k ranks cannot hold.
        stream = max(longest, total_tokens - (n_ranks - k) * capacity)
        if k == 1:
            best = min(best, attn(longest * longest, stream, 1.0))
            continue
        t = ceil_div(stream, k)
        hq, hkv = ceil_div(HQ, k), max(1, ceil_div(HKV, k))
        pps, ppg = t * (hq + 2 * hkv) * D * ELEM, t * hq * D * ELEM
        alpha = model["a0"] + model["a1"] * (k - 1)
        exchange = float("inf")
        for m in range(ceil_div(k, len(per_node)), min(k, max(per_node)) + 1):
            cross = m * (k - m)
            exchange = min(exchange, 2 * alpha + (model["beta_node"] * (m - 1) + model["beta_network"] * cross) *
                           (pps + ppg))
        best = min(best, exchange + attn(longest * longest, stream, hq / HQ))
    total = attn(sum(x * x for x in lengths), total_tokens, 1.0) / n_ranks
    return max(best, total), best, total


def bound(args):
    import math
    for path in args.files:
        with open(path) as f:
            d = json.load(f)
        if not d.get("wait", 1):
            print(f"{path}: exchange only (no attention in the predictions): skipped")
            continue
        print(f"\n{path}: lower bound of any plan's predicted time under the file's model (capacity "
              f"{d['capacity']}, {len(d['node_of'])} ranks on {len(set(d['node_of']))} nodes)\n")
        print("| batch | longest | bound ms (longest doc's group / batch attention / N) | adaptive pred ms | "
              "best fixed K pred ms | best fixed / bound: most any plan could gain | adaptive pred / bound |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        logs, logs_ad = [], []
        for c in d["cases"]:
            if "lengths" not in c:
                raise SystemExit(f"{path}: no lengths (made by an older basp_batch_layer)")
            cap = c.get("adaptive_capacity", d["capacity"])
            lb, lb1, lb2 = plan_lower_bound(d["model"], c["lengths"], cap, d["node_of"])
            # Every configuration that holds the capacity is a plan the bound covers.
            preds = [x["predicted_s"] for x in c["configs"] if x["max_rank_tokens"] <= cap]
            # The file holds microseconds and the model's coefficients to 6 digits.
            if min(preds) < lb * (1 - 1e-5) - 1e-6:
                raise SystemExit(f"{path} {c['batch']}: a configuration predicts {min(preds)} s, under the bound "
                                 f"{lb} s: the bound is wrong")
            ad = next(x for x in c["configs"] if x["name"] == "adaptive")
            fixed = [x["predicted_s"] for x in c["configs"] if x["name"] != "adaptive" and x["within_capacity"]]
            bf = min(fixed) if fixed else float("nan")
            if c["batch"] != "uniform" and fixed:
                logs.append(math.log(bf / lb))
                logs_ad.append(math.log(bf / ad["predicted_s"]))
            print(f"| {c['batch']} | {c['longest']} | {lb * 1e3:.0f} ({lb1 * 1e3:.0f} / {lb2 * 1e3:.0f}) | "
                  f"{ad['predicted_s'] * 1e3:.0f} | {bf * 1e3:.0f} | {bf / lb:.2f} | {ad['predicted_s'] / lb:.2f} |")
        if logs:
            gain, got = math.exp(sum(logs) / len(logs)), math.exp(sum(logs_ad) / len(logs_ad))
            print(f"\ngeometric mean over {len(logs)} long-tail batches: best fixed K / bound {gain:.2f}x (no plan "
                  f"is predicted faster than this over the best fixed K); best fixed K / adaptive (predicted) "
                  f"{got:.2f}x")


def table_equal_memory(d):
    import math
    names = [n for n in ("K=1", "K=2", "K=4") if any(x["name"] == n for c in d["cases"] for x in c["configs"])]
    print("| batch | docs | longest | " + "".join(n + " | " for n in names) + "Ulysses (K=8) | best fixed K: K, M, ms | "
          "adaptive: capacity, groups | adaptive ms (pred) | best fixed / adaptive |")
    print("| --- " * (len(names) + 8) + "|")
    logs = []
    for c in d["cases"]:
        cf = {x["name"]: x for x in c["configs"]}
        ad = cf["adaptive"]
        fixed = [x for x in c["configs"] if x["name"] != "adaptive"]
        best = min(fixed, key=lambda x: x["measured_s"])
        sizes = [g.split("[")[0] for g in ad["groups"].split(" ")]

        def cell(name):
            if name not in cf:
                return "doesn't fit"
            x = cf[name]
            return f"{x['measured_s'] * 1e3:.0f} ({x['predicted_s'] * 1e3:.0f}), M {x['max_rank_tokens']}"
        ratio = best["measured_s"] / ad["measured_s"]
        if c["batch"] != "uniform":
            logs.append(math.log(ratio))
        k = "8" if best["name"] == "Ulysses" else best["name"][2:]
        print(f"| {c['batch']} | {c['num_docs']} | {c['longest']} | " + "".join(cell(n) + " | " for n in names) +
              f"{cell('Ulysses')} | {k}, {best['max_rank_tokens']}, {best['measured_s'] * 1e3:.0f} | "
              f"{c['adaptive_capacity']}, {'+'.join(sizes)} | {ad['measured_s'] * 1e3:.0f} "
              f"({ad['planner_predicted_s'] * 1e3:.0f}) | {ratio:.2f} |")
    if logs:
        print(f"\ngeometric mean over {len(logs)} long-tail batches: {math.exp(sum(logs) / len(logs)):.2f}x "
              f"(range {math.exp(min(logs)):.2f}-{math.exp(max(logs)):.2f}); uniform PASS: {d.get('uniform_pass')}")


def table(args):
    import math
    for path in args.files:
        with open(path) as f:
            d = json.load(f)
        if "source" in d:
            table_real(path, d)
            continue
        if d.get("equal_memory"):
            print(f"\n{path}: calibration max_bytes {d.get('calib_bytes')}, repeats {d.get('calib_repeats')}, "
                  f"{d['calibrate_s']:.1f} s; model:\n{d.get('model_text', '')}")
            table_equal_memory(d)
            errs = [x["predicted_s"] / x["measured_s"] for c in d["cases"] for x in c["configs"]]
            within = sum(1 for e in errs if abs(e - 1) <= 0.2)
            print(f"predicted/measured: {min(errs):.2f}-{max(errs):.2f}, median {sorted(errs)[len(errs) // 2]:.2f}, "
                  f"{within} of {len(errs)} within 20%")
            for c in d["cases"]:
                print(c["batch"] + ": " + ", ".join(f"{x['name']} {x['predicted_s'] / x['measured_s']:.2f}"
                                                    for x in c["configs"]))
            continue
        print(f"\n{path}: model a0 {d['model']['a0']:.3g} s, a1 {d['model']['a1']:.3g} s, beta_node "
              f"{d['model']['beta_node']:.3g} s/B, beta_network {d['model']['beta_network']:.3g} s/B, c2 "
              f"{d['model']['c2']:.3g}, c1 {d['model']['c1']:.3g}\n")
        own = "planner_predicted_s" if d["wait"] else "predicted_s"
        logs, _ = layer_table(d, lambda x, adaptive=False: f"{x[own if adaptive else 'predicted_s'] * 1e3:.0f}",
                              "adaptive ms (pred)")
        if logs:
            print(f"\ngeometric mean over {len(logs)} long-tail batches: {math.exp(sum(logs) / len(logs)):.2f}x; "
                  f"uniform PASS: {d.get('uniform_pass')}")
        errs = [x["predicted_s"] / x["measured_s"] for c in d["cases"] for x in c["configs"]]
        within = sum(1 for e in errs if abs(e - 1) <= 0.2)
        print(f"predicted/measured: {min(errs):.2f}-{max(errs):.2f}, median {sorted(errs)[len(errs) // 2]:.2f}, "
              f"{within} of {len(errs)} within 20%")


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pa = sub.add_parser("attn")
    pa.add_argument("--out", default="batch_attn.json")
    pa.add_argument("--lengths", default="128,256,512,1024,2048")
    pa.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    pa.add_argument("--repeats", type=int, default=3)
    pr = sub.add_parser("run")
    pr.add_argument("--build", default=os.path.join(ROOT, "build"))
    pr.add_argument("--attn", default="batch_attn.json")
    pr.add_argument("--scale", type=float, default=1.0)
    pr.add_argument("--runs", type=int, default=10)
    pr.add_argument("--seeds", default="0-9")
    pr.add_argument("--json", default="")
    pr.add_argument("--no-wait", action="store_true")
    for name in ("real", "real-rank"):
        pq = sub.add_parser(name)
        pq.add_argument("--configs", required=True)
        pq.add_argument("--runs", type=int, default=3)
        pq.add_argument("--batches", default="")
        pq.add_argument("--json", default="")
        pq.add_argument("--build", default=os.path.join(ROOT, "build"))
        pq.add_argument("--python", default="", help="python with torch and mpi4py (default: scripts/python/env.sh)")
    pb = sub.add_parser("bound")
    pb.add_argument("files", nargs="+")
    pt = sub.add_parser("table")
    pt.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "attn":
        attn(args)
        return 0
    if args.cmd == "bound":
        bound(args)
        return 0
    if args.cmd == "real":
        return real(args)
    if args.cmd == "real-rank":
        return real_rank(args)
    if args.cmd == "table":
        table(args)
        return 0
    return run(args, extra)


if __name__ == "__main__":
    sys.exit(main())
