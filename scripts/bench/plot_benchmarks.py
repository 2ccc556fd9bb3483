#!/usr/bin/python3
"""Plots the JSON that the benchmarks write with -J (docs/benchmarks.md), or checks it.

    plot_benchmarks.py [--out DIR] FILE.json...   one set of PNGs per file, named after it, in DIR (default .)
    plot_benchmarks.py --check FILE.json...       exits 1 unless every file is well formed and reports 0 wrong
    plot_benchmarks.py --markdown FILE.json...    prints the results as Markdown tables (for docs/benchmarks.md)

Perf-binary files (basp_alltoall_perf and siblings) give <stem>_time.png (time per iteration against size, one
line per mode and B) and, when both modes ran, <stem>_ratio.png (Ulysses/BASP time ratio against size).
basp_layout_cost files give <stem>.png (median scatter, gather and MPI_Alltoall per B and mode).
Plotting needs matplotlib (Debian: python3-matplotlib); --check needs only the standard library.
"""
import argparse
import json
import os
import sys

PERF_KEYS = ("mode", "B", "G", "K", "S", "size", "count", "time_us", "algbw_gbs", "busbw_gbs", "wrong")
COST_KEYS = ("B", "mode", "G", "K", "S", "size", "scatter_ms", "gather_ms", "alltoall_ms", "wrong")


def load(path):
    with open(path) as f:
        return json.load(f)


def is_layout_cost(data):
    return data.get("program") == "basp_layout_cost"


def check(path, data):
    """Problems with one file, as strings (empty: fine)."""
    problems = []
    results = data.get("results")
    if not isinstance(results, list) or not results:
        return [f"{path}: no results"]
    keys = COST_KEYS if is_layout_cost(data) else PERF_KEYS
    for i, r in enumerate(results):
        missing = [k for k in keys if k not in r]
        if missing:
            problems.append(f"{path}: results[{i}] lacks {', '.join(missing)}")
        elif r["wrong"] not in (0, None):
            problems.append(f"{path}: results[{i}] (mode {r['mode']}, B {r['B']}) has {r['wrong']} wrong values")
    if data.get("out_of_bounds") not in (0, None):
        problems.append(f"{path}: out_of_bounds is {data.get('out_of_bounds')}")
    if data.get("out_of_bounds") is None:
        problems.append(f"{path}: results were not checked (-c 0)")
    return problems


def title(data):
    shape = f"Hq={data.get('heads')} D={data.get('head_dim')} {data.get('dtype')} {data.get('layout')}"
    if "kv_heads" in data:
        shape = f"Hq={data['heads']} Hkv={data['kv_heads']} D={data['head_dim']} {data['dtype']} {data['layout']}"
    return f"{data.get('program')}, {data.get('nranks')} ranks, {data.get('backend')} backend, {shape}"


def plot_perf(plt, data, stem, out_dir):
    results = data["results"]
    batches = sorted({r["B"] for r in results})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, b in enumerate(batches):
        for mode, style in (("ulysses", "--"), ("basp", "-")):
            rows = sorted((r for r in results if r["B"] == b and r["mode"] == mode), key=lambda r: r["size"])
            if not rows:
                continue
            k = rows[0]["K"]
            ax.plot([r["size"] for r in rows], [r["time_us"] for r in rows], style, marker="o", markersize=3,
                    color=colors[i % len(colors)], label=f"{mode} B={b} (K={k})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size: bytes per rank")
    ax.set_ylabel("time per iteration (us)")
    ax.set_title(title(data), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    path = os.path.join(out_dir, f"{stem}_time.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    if {r["mode"] for r in results} == {"ulysses", "basp"}:
        fig, ax = plt.subplots(figsize=(8, 4))
        for i, b in enumerate(batches):
            ulysses = {r["size"]: r["time_us"] for r in results if r["B"] == b and r["mode"] == "ulysses"}
            basp = {r["size"]: r["time_us"] for r in results if r["B"] == b and r["mode"] == "basp"}
            sizes = sorted(s for s in ulysses if s in basp and basp[s] > 0)
            ax.plot(sizes, [ulysses[s] / basp[s] for s in sizes], marker="o", markersize=3,
                    color=colors[i % len(colors)], label=f"B={b}")
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size: bytes per rank")
        ax.set_ylabel("Ulysses time / BASP time")
        ax.set_title(title(data), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(out_dir, f"{stem}_ratio.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def plot_layout_cost(plt, data, stem, out_dir):
    results = data["results"]
    labels = [f"B={r['B']}\n{r['mode']} K={r['K']}" for r in results]
    ops = (("scatter_ms", "basp_scatter"), ("gather_ms", "basp_gather"), ("alltoall_ms", "MPI_Alltoall"))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(results)), 4.5))
    for j, (key, name) in enumerate(ops):
        xs = [i + (j - 1) * width for i in range(len(results))]
        ax.bar(xs, [r[key] for r in results], width, label=name)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(f"median time (ms), {data.get('runs')} runs")
    ax.set_title(title(data) + f", {results[0]['size'] >> 20} MiB per rank", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out_dir, f"{stem}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def fmt_time_us(us):
    return f"{us:.0f}" if us >= 100 else f"{us:.1f}"


def markdown_perf(data):
    results = data["results"]
    lines = ["| B | K (BASP) | size (B) | S | Ulysses (us) | BASP (us) | Ulysses/BASP | Ulysses busbw (GB/s) "
             "| BASP busbw (GB/s) | #wrong |", "|" + " --- |" * 10]
    for b in sorted({r["B"] for r in results}):
        ulysses = {r["size"]: r for r in results if r["B"] == b and r["mode"] == "ulysses"}
        basp = {r["size"]: r for r in results if r["B"] == b and r["mode"] == "basp"}
        for size in sorted(set(ulysses) | set(basp)):
            u, p = ulysses.get(size), basp.get(size)
            cells = [b, p["K"] if p else "-", size, (u or p)["S"],
                     fmt_time_us(u["time_us"]) if u else "-", fmt_time_us(p["time_us"]) if p else "-",
                     f"{u['time_us'] / p['time_us']:.2f}" if u and p and p["time_us"] > 0 else "-",
                     f"{u['busbw_gbs']:.3f}" if u else "-", f"{p['busbw_gbs']:.3f}" if p else "-",
                     sum(r["wrong"] for r in (u, p) if r and r["wrong"] is not None)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def markdown_layout_cost(data):
    lines = ["| B | mode | G | K | S | scatter (ms) | gather (ms) | MPI_Alltoall (ms) | scatter/alltoall "
             "| gather/alltoall | #wrong |", "|" + " --- |" * 11]
    for r in data["results"]:
        lines.append(f"| {r['B']} | {r['mode']} | {r['G']} | {r['K']} | {r['S']} | {r['scatter_ms']:.1f} | "
                     f"{r['gather_ms']:.1f} | {r['alltoall_ms']:.1f} | {r['scatter_ms'] / r['alltoall_ms']:.2f} | "
                     f"{r['gather_ms'] / r['alltoall_ms']:.2f} | {r['wrong']} |")
    pairs = [(u, p) for u in data["results"] for p in data["results"]
             if u["mode"] == "ulysses" and p["mode"] == "basp" and u["B"] == p["B"]]
    if pairs:
        lines += ["", "| B | Ulysses scatter+gather (ms) | BASP scatter+gather (ms) | Ulysses/BASP |",
                  "| --- | --- | --- | --- |"]
        for u, p in pairs:
            tu, tp = u["scatter_ms"] + u["gather_ms"], p["scatter_ms"] + p["gather_ms"]
            lines.append(f"| {u['B']} | {tu:.1f} | {tp:.1f} | {tu / tp:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", default=".", help="directory for the PNGs")
    parser.add_argument("--check", action="store_true", help="validate the files instead of plotting")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables instead of plotting")
    args = parser.parse_args()

    datasets = []
    for path in args.files:
        try:
            datasets.append((path, load(path)))
        except (OSError, ValueError) as e:
            print(f"plot_benchmarks: {path}: {e}", file=sys.stderr)
            return 1

    if args.check:
        problems = [p for path, data in datasets for p in check(path, data)]
        for p in problems:
            print(f"plot_benchmarks: {p}", file=sys.stderr)
        if not problems:
            print(f"plot_benchmarks: {len(datasets)} file(s) OK")
        return 1 if problems else 0

    if args.markdown:
        for path, data in datasets:
            print(f"<!-- {path} -->")
            print(markdown_layout_cost(data) if is_layout_cost(data) else markdown_perf(data))
            print()
        return 0

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(args.out, exist_ok=True)
    for path, data in datasets:
        stem = os.path.splitext(os.path.basename(path))[0]
        plot = plot_layout_cost if is_layout_cost(data) else plot_perf
        for written in plot(plt, data, stem, args.out):
            print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
