#!/usr/bin/python3
"""Ulysses vs BASP on the emulated cluster of scripts/sim-cluster (docs/benchmarks.md, docs/sim-cluster.md).

    sim_cluster_bench.py run  [--build DIR] [--out FILE] [--size 8M] [--iters 5] [--repeats 3] [--quick]
                              [--commit SHA]
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    def git(*a):
        return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    # The library's sources as measured: the commit, and whether src/, include/ or bench/ differed from it
    # (--commit: the build is of that commit exactly, e.g. from `git archive`).
    if args.commit:
        source = dict(commit=args.commit, modified=False)
    else:
        source = dict(commit=git("rev-parse", "HEAD"),
                      modified=git("status", "--porcelain", "--untracked-files=no", "--", "src", "include",
                                   "bench") != "")
    out = dict(program="sim_cluster_bench", date=datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
               machine=machine(), source=source, size=args.size, iters=args.iters, repeats=args.repeats, runs=[])
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
# Ulysses and BASP of one run share the machine's load of that moment, so a run's Ulysses/BASP ratio is the unit
# of comparison: tables and plots give the median over the runs of a configuration (and the range). Runs of the
# same configuration from different studies are pooled.
def perf_runs(runs, **match):
    return [r for r in runs
            if r["program"] == "basp_alltoall_perf" and all(r[k] == v for k, v in match.items())]


def times(runs, b):
    """Per run: (Ulysses us, BASP us) at micro-batch b."""
    out = []
    for r in runs:
        rows = {(x["mode"], x["B"]): x["time_us"] for x in r["result"]["results"]}
        if ("ulysses", b) in rows and ("basp", b) in rows:
            out.append((rows[("ulysses", b)], rows[("basp", b)]))
    return out


def summary(runs, b):
    """(median Ulysses ms, median BASP ms, median ratio, min ratio, max ratio, runs) or None."""
    t = times(runs, b)
    if not t:
        return None
    ratios = [u / s for u, s in t]
    return (statistics.median(u for u, _ in t) / 1e3, statistics.median(s for _, s in t) / 1e3,
            statistics.median(ratios), min(ratios), max(ratios), len(t))


def wrong_total(runs):
    return sum(row["wrong"] for r in runs for row in r["result"]["results"])


def link_label(link):
    return "unshaped" if link == "none" else link.replace("gbit", " Gbit/s")


def fmt_ratio(s):
    return f"{s[2]:.2f} ({s[3]:.2f}-{s[4]:.2f})"


def tables(data):
    runs = data["runs"]
    lines = ["| fake nodes | link | B | G x K | Ulysses (ms) | BASP (ms) | Ulysses/BASP (range) | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for nodes, per_node in ((2, 4), (4, 2)):
        for link in LINKS:
            sel = perf_runs(runs, nodes=nodes, ranks_per_node=per_node, link=link, map_by="slot",
                            placement="topology")
            n = nodes * per_node
            for b in BATCHES:
                s = summary(sel, b)
                if s:
                    g = math.gcd(n, b)
                    lines.append(f"| {nodes} x {per_node} | {link_label(link)} | {b} | {g} x {n // g} | "
                                 f"{s[0]:.1f} | {s[1]:.1f} | {fmt_ratio(s)} | {s[5]} |")
    lines += ["", "| numbering | placement | B | Ulysses (ms) | BASP (ms) | Ulysses/BASP (range) | runs |",
              "|---|---|---|---|---|---|---|"]
    for map_by in ("slot", "node"):
        for placement in ("contiguous", "topology"):
            sel = perf_runs(runs, nodes=2, ranks_per_node=4, link="4gbit", map_by=map_by, placement=placement)
            for b in BATCHES:
                s = summary(sel, b)
                if s:
                    lines.append(f"| {'block' if map_by == 'slot' else 'cyclic'} | {placement.upper()} | {b} | "
                                 f"{s[0]:.1f} | {s[1]:.1f} | {fmt_ratio(s)} | {s[5]} |")
    lines += ["", "| link | MPI_Alltoall K=8 (ms) | MPI_Alltoall K=4 (ms) | ratio | Ulysses scatter+gather (ms) | "
              "BASP scatter+gather (ms) | ratio |", "|---|---|---|---|---|---|---|"]
    wrong = wrong_total([r for r in runs if r["program"] == "basp_alltoall_perf"])
    unchecked = 0
    for link in LINKS:
        per_run = []
        for r in runs:
            if r["program"] == "basp_layout_cost" and r["link"] == link:
                rows = {x["mode"]: x for x in r["result"]["results"]}
                wrong += sum(x["wrong"] for x in rows.values() if x["wrong"] is not None)
                unchecked += sum(x["wrong"] is None for x in rows.values())
                if "ulysses" in rows and "basp" in rows:
                    per_run.append(rows)
        if not per_run:
            continue
        def med(mode, key):
            return statistics.median(x[mode][key] for x in per_run)
        def med_ratio(f):
            return statistics.median(f(x["ulysses"]) / f(x["basp"]) for x in per_run)
        sg = lambda x: x["scatter_ms"] + x["gather_ms"]  # noqa: E731
        lines.append(f"| {link_label(link)} | {med('ulysses', 'alltoall_ms'):.1f} | {med('basp', 'alltoall_ms'):.1f} | "
                     f"{med_ratio(lambda x: x['alltoall_ms']):.2f} | "
                     f"{statistics.median(sg(x['ulysses']) for x in per_run):.1f} | "
                     f"{statistics.median(sg(x['basp']) for x in per_run):.1f} | {med_ratio(sg):.2f} |")
    lines += ["", f"Bit-exact checks: {wrong} wrong elements over all runs"
              + (f" ({unchecked} layout-cost rows unchecked)." if unchecked else ".")]
    return "\n".join(lines)


def plot(args):
    with open(args.file) as f:
        data = json.load(f)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(args.img, exist_ok=True)
    runs = data["runs"]
    subtitle = (f"{data['machine']['cores']} cores, {data['date']}, {data['size']} per rank, "
                f"median and range of {data['repeats']}+ runs")

    # Ulysses/BASP time ratio against B, one line per link, one panel per node shape.
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, (nodes, per_node) in zip(axes, ((2, 4), (4, 2))):
        for i, link in enumerate(LINKS):
            sel = perf_runs(runs, nodes=nodes, ranks_per_node=per_node, link=link, map_by="slot",
                            placement="topology")
            pts = [(b, summary(sel, b)) for b in BATCHES if summary(sel, b)]
            if not pts:
                continue
            x = [b * (1 + 0.04 * (i - 1.5)) for b, _ in pts]  # side by side, so the ranges stay readable
            y = [s[2] for _, s in pts]
            err = [[s[2] - s[3] for _, s in pts], [s[4] - s[2] for _, s in pts]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=link_label(link))
        if nodes == 2:
            ax.vlines([2 * 0.86], 2.23, 3.10, colors="black", lw=7, alpha=0.45,
                      label="paper: 2.23-3.10x (B=2, K=4, 2 x 4 A100)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
        ax.set_yticks([1, 2, 3, 5, 10, 20, 40], ["1", "2", "3", "5", "10", "20", "40"])
        ax.set_xlabel("micro-batch B (BASP: G = gcd(8, B) groups of K = 8/G)")
        ax.set_title(f"{nodes} fake nodes x {per_node} ranks, block numbering")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("Ulysses time / BASP time")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Attention all-to-alls (scatter Q,K,V + gather O), Ulysses vs BASP on sim-cluster, by link rate\n"
                 + subtitle, fontsize=9)
    fig.tight_layout()
    path = os.path.join(args.img, "sim_cluster_links.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)

    # Numbering x placement at B = 2.
    fig, ax = plt.subplots(figsize=(6.4, 4))
    labels, vals, lo, hi = [], [], [], []
    for map_by in ("slot", "node"):
        for placement in ("contiguous", "topology"):
            s = summary(perf_runs(runs, nodes=2, ranks_per_node=4, link="4gbit", map_by=map_by,
                                  placement=placement), 2)
            if s:
                labels.append(f"{'block' if map_by == 'slot' else 'cyclic'}\n{placement.upper()}")
                vals.append(s[2])
                lo.append(s[2] - s[3])
                hi.append(s[4] - s[2])
    colors = ["tab:blue", "tab:blue", "tab:red", "tab:green"]
    ax.bar(labels, vals, yerr=[lo, hi], capsize=4, color=colors[:len(vals)])
    ax.axhline(2.2, color="black", ls="--", lw=0.8, label="goal: 2.2x")
    for i, v in enumerate(vals):
        ax.text(i + 0.05, v, f"{v:.2f}x", ha="left", va="bottom", fontsize=9)
    ax.set_ylabel("Ulysses time / BASP time, B = 2 (G = 2, K = 4)")
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
    r.add_argument("--commit", help="the commit the build directory was built from, when not this checkout's HEAD")
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
