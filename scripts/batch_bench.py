#!/usr/bin/python3
"""Issue 16's benchmark: one attention layer with adaptive batch plans (docs/benchmarks.md section 12).

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
table prints the Markdown table of docs/benchmarks.md section 12 from the --json file(s) of run (the equal-memory
      table of 12.7 for a run with --equal-memory).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    cmd = [os.path.join(ROOT, "scripts", "sim-cluster"), "--nodes", "2", "--ranks-per-node", "4", "--map-by", "slot",
           "--link", "4gbit", "--timeout", "1800", "--"] + prog + extra
    print(" ".join(cmd), flush=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.call(cmd, env=env)


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
        print("| batch | docs | longest | adaptive: groups | adaptive ms (pred) | K=1 | K=2 | K=4 | Ulysses (K=8) "
              "| best fixed within capacity / adaptive |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        logs = []
        for c in d["cases"]:
            cf = {x["name"]: x for x in c["configs"]}
            ad = cf["adaptive"]
            sizes = [g.split("[")[0] for g in ad["groups"].split(" ")]

            def cell(name):
                if name not in cf:
                    return "doesn't fit"
                x = cf[name]
                mark = "" if x["within_capacity"] else " (over cap.)"
                return f"{x['measured_s'] * 1e3:.0f} ({x['predicted_s'] * 1e3:.0f}){mark}"
            fixed = [cf[n]["measured_s"] for n in ("K=1", "K=2", "K=4", "Ulysses") if n in cf and
                     cf[n]["within_capacity"]]
            ratio = min(fixed) / ad["measured_s"]
            if c["batch"] != "uniform":
                logs.append(math.log(ratio))
            print(f"| {c['batch']} | {c['num_docs']} | {c['longest']} | {'+'.join(sizes)} | "
                  f"{ad['measured_s'] * 1e3:.0f} ({ad['planner_predicted_s' if d['wait'] else 'predicted_s'] * 1e3:.0f}) | "
                  f"{cell('K=1')} | "
                  f"{cell('K=2')} | {cell('K=4')} | {cell('Ulysses')} | {ratio:.2f} |")
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
    pt = sub.add_parser("table")
    pt.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "attn":
        attn(args)
        return 0
    if args.cmd == "table":
        table(args)
        return 0
    return run(args, extra)


if __name__ == "__main__":
    sys.exit(main())
