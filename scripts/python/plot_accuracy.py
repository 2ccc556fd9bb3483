#!/usr/bin/python3
"""Plots the JSON of examples/python/accuracy.py: BASP and Ulysses losses against the single process.

    plot_accuracy.py [--out FILE.png] FILE.json        (default out: the JSON's name with .png)

Top panel: the training loss per step of every configuration (single process, Ulysses, BASP for each G), drawn
over each other -- the counterpart of the BASP paper's loss-overlap figure; they should be indistinguishable.
Bottom panel: |loss - single-process loss| per step for each parallel configuration, on a log scale (steps
where a configuration matched exactly are left out, as a log scale cannot show 0), with the spacing of float32
numbers at the loss's value as a dashed line for scale.

Needs matplotlib: run it with Debian's /usr/bin/python3 (apt-get install python3-matplotlib), which has it; the
project's PyTorch virtual environment does not.
"""
import argparse
import json
import math
import os
import sys


def plot(data, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    single = data["single"]["loss"]
    steps = list(range(len(single)))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(steps, single, color="0.6", linewidth=4, label="single process")
    styles = ["-", "--", "-.", ":"]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for i, run in enumerate(data["runs"]):
        color, style = colors[i % len(colors)], styles[i % len(styles)]
        top.plot(steps, run["loss"], color=color, linestyle=style, linewidth=1.2, label=run["name"])
        shown = [(t, d) for t, d in zip(steps, run["abs_diff"]) if d > 0]
        if shown:
            bottom.plot([t for t, _ in shown], [d for _, d in shown], color=color, linestyle="none", marker="o",
                        markersize=2.5, alpha=0.7, label=run["name"])
    # The spacing of float32 numbers at the single-process loss: differences of a few of these are rounding.
    ulp = [2.0 ** (math.frexp(abs(x))[1] - 24) for x in single]
    bottom.step(steps, ulp, where="mid", color="0.3", linewidth=1, linestyle="--", label="float32 spacing at the loss")
    s = data["settings"]
    top.set_title("Training loss, N = %d ranks, B = %d, S = %d (%d layers, hidden %d, %d/%d heads)" % (
        data["world_size"], s["micro_batch"], s["seq_len"], s["layers"], s["hidden"], s["heads"], s["kv_heads"]),
        fontsize=10)
    top.set_ylabel("cross entropy (nats per byte)")
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.set_yscale("log")
    bottom.set_xlabel("step")
    bottom.set_ylabel("|loss - single process|")
    bottom.set_title("max %.2g (relative %.2g) over %d steps" % (data["max_abs_diff"], data["max_rel_diff"],
                                                                 data["steps"]), fontsize=10)
    bottom.legend(fontsize=8, ncol=2, markerscale=2)
    bottom.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="the file examples/python/accuracy.py --out wrote")
    parser.add_argument("--out", help="the PNG to write (default: the JSON's name with .png)")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    plot(data, out)
    print("wrote %s (%d bytes)" % (out, os.path.getsize(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
