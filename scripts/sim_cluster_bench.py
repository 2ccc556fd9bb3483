#!/usr/bin/python3
"""Ulysses vs BASP on the emulated cluster of scripts/sim-cluster (docs/benchmarks.md, docs/sim-cluster.md).

    sim_cluster_bench.py run  [--build DIR] [--out FILE] [--size 8M] [--iters 5] [--repeats 3] [--quick]
    sim_cluster_bench.py plot FILE [--img DIR]

run   runs, as root, every configuration below under sim-cluster (each --repeats times) and writes one JSON file
      holding the machine, the commands and every perf binary's own JSON output:
        links:     2 x 4 and 4 x 2 fake nodes, block numbering, TOPOLOGY placement, link unshaped, 1, 4, 16
                   Gbit/s: basp_alltoall_perf --mode both -B 1,2,4,8
        numbering: 2 x 4 fake nodes, 4 Gbit/s, block and cyclic numbering, CONTIGUOUS and TOPOLOGY placement:
                   basp_alltoall_perf --mode both -B 1,2,4,8
        bare:      2 x 4 fake nodes, block numbering, every link: basp_layout_cost -B 2 (a bare MPI_Alltoall of the
                   same bytes over the same ranks, next to scatter and gather)
plot  reads that file, writes the PNGs into DIR (default docs/img) and prints the Markdown tables of
      docs/benchmarks.md (medians over the repeats). Plotting needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM = os.path.join(ROOT, "scripts", "sim-cluster")
LINKS = ["none", "1gbit", "4gbit", "16gbit"]
BATCHES = [1, 2, 4, 8]


def configurations(quick):
    links = ["4gbit"] if quick else LINKS
    shapes = [(2, 4)] if quick else [(2, 4), (4, 2)]
    out = []
    for nodes, per_node in shapes:
        for link in links:
            out.append(dict(study="links", program="basp_alltoall_perf", nodes=nodes, ranks_per_node=per_node,
                            map_by="slot", link=link, placement="topology"))
    for map_by in ("slot", "node"):
        for placement in ("contiguous", "topology"):
            out.append(dict(study="numbering", program="basp_alltoall_perf", nodes=2, ranks_per_node=4,
                            map_by=map_by, link="4gbit", placement=placement))
    for link in links:
        out.append(dict(study="bare", program="basp_layout_cost", nodes=2, ranks_per_node=4, map_by="slot",
                        link=link, placement="default"))
    return out


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return dict(cpu=cpu, cores=os.cpu_count(), kernel=platform.release(),
                mpirun=subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.split("\n")[0])


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def command(cfg, build, size, iters, json_path):
    sim = [SIM, "--nodes", str(cfg["nodes"]), "--ranks-per-node", str(cfg["ranks_per_node"]), "--map-by",
           cfg["map_by"], "--link", cfg["link"], "--stats", "--timeout", "900", "--"]
    if cfg["program"] == "basp_alltoall_perf":
        prog = [os.path.join(build, "bench", "basp_alltoall_perf"), "-b", size, "-e", size, "-n", str(iters),
                "-w", "1", "-c", "1", "-B", ",".join(map(str, BATCHES)), "--mode", "both", "--placement",
                cfg["placement"], "-J", json_path]
    else:
        prog = [os.path.join(build, "bench", "basp_layout_cost"), "-b", size, "-n", str(iters), "-w", "1", "-B", "2",
                "-J", json_path]
    return sim + prog


def run(args):
    if os.geteuid() != 0:
        sys.exit("sim_cluster_bench.py run: needs root (sim-cluster creates network namespaces)")
    out = dict(program="sim_cluster_bench", date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
               machine=machine(), size=args.size, iters=args.iters, repeats=args.repeats, runs=[])
    configs = configurations(args.quick)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for i, cfg in enumerate(configs):
                json_path = os.path.join(tmp, "run.json")
                if os.path.exists(json_path):
                    os.remove(json_path)
                cmd = command(cfg, args.build, args.size, args.iters, json_path)
                load = loadavg()
                print(f"[{rep + 1}/{args.repeats} {i + 1}/{len(configs)}] {' '.join(cmd[1:])}", flush=True)
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0 or not os.path.exists(json_path):
                    sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
                    sys.exit(f"sim_cluster_bench.py: the run failed (exit status {p.returncode})")
                m = re.search(r"link carried (\d+) bytes", p.stderr)
                with open(json_path) as f:
                    result = json.load(f)
                out["runs"].append(dict(cfg, repeat=rep, load_before=load, load_after=loadavg(),
                                        link_bytes=int(m.group(1)) if m else None,
                                        command="scripts/sim-cluster " + " ".join(
                                            os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                            for c in cmd[1:] if c != json_path).replace(" -J", ""),
                                        result=result))
                with open(args.out, "w") as f:
                    json.dump(out, f, indent=1)
    print(f"wrote {args.out}")


# ---- plot ---------------------------------------------------------------------------------------------------------
def median_perf(runs, **match):
    """{(mode, B): median time_us} over the repeats of the runs matching `match`, plus wrong count."""
    times, wrong = {}, 0
    for r in runs:
        if all(r[k] == v for k, v in match.items()):
            for row in r["result"]["results"]:
                times.setdefault((row["mode"], row["B"]), []).append(row["time_us"])
                wrong += row["wrong"]
    return {k: statistics.median(v) for k, v in times.items()}, wrong


def ratio(t, b):
    u, s = t.get(("ulysses", b)), t.get(("basp", b))
    return u / s if u and s else None


def link_label(link):
    return "unshaped" if link == "none" else link.replace("gbit", " Gbit/s")


def tables(data):
    runs = data["runs"]
    lines = []
    lines.append("| fake nodes | link | B | G x K | Ulysses (ms) | BASP (ms) | Ulysses/BASP |")
    lines.append("|---|---|---|---|---|---|---|")
    total_wrong = 0
    for nodes, per_node in ((2, 4), (4, 2)):
        for link in LINKS:
            t, wrong = median_perf(runs, study="links", nodes=nodes, ranks_per_node=per_node, link=link)
            total_wrong += wrong
            if not t:
                continue
            n = nodes * per_node
            for b in BATCHES:
                if ("basp", b) not in t:
                    continue
                g = math.gcd(n, b)
                lines.append(f"| {nodes} x {per_node} | {link_label(link)} | {b} | {g} x {n // g} | "
                             f"{t[('ulysses', b)] / 1e3:.1f} | {t[('basp', b)] / 1e3:.1f} | {ratio(t, b):.2f} |")
    lines.append("")
    lines.append("| numbering | placement | B | Ulysses (ms) | BASP (ms) | Ulysses/BASP |")
    lines.append("|---|---|---|---|---|---|")
    for map_by in ("slot", "node"):
        for placement in ("contiguous", "topology"):
            t, wrong = median_perf(runs, study="numbering", map_by=map_by, placement=placement)
            total_wrong += wrong
            for b in BATCHES:
                if ("basp", b) in t:
                    lines.append(f"| {'block' if map_by == 'slot' else 'cyclic'} | {placement.upper()} | {b} | "
                                 f"{t[('ulysses', b)] / 1e3:.1f} | {t[('basp', b)] / 1e3:.1f} | {ratio(t, b):.2f} |")
    lines.append("")
    lines.append("| link | Ulysses a2a, K=8 (ms) | BASP a2a, K=4 (ms) | a2a ratio | Ulysses scatter+gather (ms) | "
                 "BASP scatter+gather (ms) | ratio |")
    lines.append("|---|---|---|---|---|---|---|")
    for link in LINKS:
        rows = {}
        for r in runs:
            if r["study"] == "bare" and r["link"] == link:
                for row in r["result"]["results"]:
                    rows.setdefault(row["mode"], []).append(row)
                    total_wrong += row["wrong"]
        if "ulysses" not in rows or "basp" not in rows:
            continue
        med = {m: {k: statistics.median(x[k] for x in v) for k in ("alltoall_ms", "scatter_ms", "gather_ms")}
               for m, v in rows.items()}
        u, b = med["ulysses"], med["basp"]
        us, bs = u["scatter_ms"] + u["gather_ms"], b["scatter_ms"] + b["gather_ms"]
        lines.append(f"| {link_label(link)} | {u['alltoall_ms']:.1f} | {b['alltoall_ms']:.1f} | "
                     f"{u['alltoall_ms'] / b['alltoall_ms']:.2f} | {us:.1f} | {bs:.1f} | {us / bs:.2f} |")
    lines.append("")
    lines.append(f"Bit-exact checks: {total_wrong} wrong elements over all runs.")
    return "\n".join(lines)


def plot(args):
    with open(args.file) as f:
        data = json.load(f)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(args.img, exist_ok=True)
    runs = data["runs"]
    subtitle = f"{data['machine']['cores']} cores, {data['date']}, size {data['size']} per rank, medians of " \
               f"{data['repeats']}"

    # Ulysses/BASP time ratio against B, one line per link, one panel per node shape.
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (nodes, per_node) in zip(axes, ((2, 4), (4, 2))):
        for link in LINKS:
            t, _ = median_perf(runs, study="links", nodes=nodes, ranks_per_node=per_node, link=link)
            bs = [b for b in BATCHES if ratio(t, b)]
            if bs:
                ax.plot(bs, [ratio(t, b) for b in bs], marker="o", label=link_label(link))
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhspan(2.23, 3.10, color="tab:green", alpha=0.15, label="paper, K=4 (2 x 4 A100)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
        ax.set_xlabel("micro-batch B")
        ax.set_title(f"{nodes} fake nodes x {per_node} ranks")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Ulysses time / BASP time")
    axes[1].legend(fontsize=8)
    fig.suptitle("All-to-all round trip (Q,K,V scatter + O gather), Ulysses vs BASP on sim-cluster\n" + subtitle,
                 fontsize=9)
    fig.tight_layout()
    path = os.path.join(args.img, "sim_cluster_links.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)

    # Numbering x placement at B = 2.
    fig, ax = plt.subplots(figsize=(6, 3.8))
    labels, vals = [], []
    for map_by in ("slot", "node"):
        for placement in ("contiguous", "topology"):
            t, _ = median_perf(runs, study="numbering", map_by=map_by, placement=placement)
            if ratio(t, 2):
                labels.append(f"{'block' if map_by == 'slot' else 'cyclic'}\n{placement.upper()}")
                vals.append(ratio(t, 2))
    ax.bar(labels, vals, color=["tab:blue", "tab:blue", "tab:red", "tab:green"][:len(vals)])
    ax.axhline(2.2, color="black", ls="--", lw=0.8, label="goal: 2.2x")
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("Ulysses time / BASP time, B = 2")
    ax.set_title("2 fake nodes x 4 ranks, 4 Gbit/s: rank numbering and placement\n" + subtitle, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(args.img, "sim_cluster_numbering.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)
    print(tables(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--out", default="sim_cluster_bench.json")
    r.add_argument("--size", default="8M")
    r.add_argument("--iters", type=int, default=5)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--quick", action="store_true", help="2 x 4 at 4 Gbit/s only (a smoke run)")
    p = sub.add_parser("plot")
    p.add_argument("file")
    p.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    args = parser.parse_args()
    if args.cmd == "run":
        if args.repeats < 1 or args.iters < 1:
            sys.exit("sim_cluster_bench.py run: --repeats and --iters must be at least 1")
        run(args)
    else:
        plot(args)


if __name__ == "__main__":
    main()
