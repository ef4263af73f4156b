#!/usr/bin/python3
"""Bar charts for the benchmark scripts.

    plot.py IN.json OUT.png TITLE

IN.json: {"metrics": [{"name": ..., "unit": ..., "better": "higher"|"lower",
           "values": {"series label": number, ...}}, ...], "note": "..."}
Draws one panel per metric, one bar per series, with the value on each bar.
Uses Debian's python3-matplotlib (scripts/setup installs it).
"""
import json
import os
import sys
import tempfile

os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "vnr-matplotlib"))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out, title = sys.argv[1:]
    with open(src) as f:
        data = json.load(f)
    metrics = [m for m in data["metrics"] if m["values"]]
    if not metrics:
        sys.exit("plot.py: no data to plot")
    cols = min(3, len(metrics))
    rows = (len(metrics) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    colors = ["#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"]
    for ax, m in zip(axes.flat, metrics):
        labels = list(m["values"].keys())
        vals = [m["values"][k] for k in labels]
        bars = ax.bar(labels, vals, color=colors[: len(labels)])
        ax.set_title(f'{m["name"]} ({m["better"]} is better)', fontsize=9)
        ax.set_ylabel(m["unit"], fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=20)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.4g}", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    if data.get("note"):
        fig.text(0.5, 0.005, data["note"], ha="center", fontsize=7, style="italic")
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
