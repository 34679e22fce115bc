#!/usr/bin/python3
"""Plots the --json output of pcoll_allreduce and pcoll_imbalance (one object per line).

  plot.py allreduce.jsonl [more.jsonl ...] -o docs/img/allreduce   # latency + busbw vs size
  plot.py imbalance.jsonl [more.jsonl ...] -o docs/img/imbalance   # time/step + efficiency

Files may mix both tools and several runs; lines that are not JSON objects (table text)
are skipped. Allreduce objects are grouped by (P, mode) and, when a size was measured
more than once, its median is plotted. Needs Debian's python3-matplotlib (/usr/bin/python3).
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODE_STYLE = {"sync": ("tab:blue", "o"), "solo": ("tab:orange", "s"),
              "majority": ("tab:green", "^"), "mpi": ("black", "x")}


def load(paths):
    objects = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    objects.append(json.loads(line))
                except json.JSONDecodeError:
                    print(f"plot.py: {path}: skipping a malformed line", file=sys.stderr)
    return objects


def size_label(n):
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n // scale}{unit}"
    return str(n)


def plot_allreduce(rows, out):
    series = defaultdict(lambda: defaultdict(list))  # (P, mode) -> bytes -> [(p50, busbw)]
    for r in rows:
        series[(r["P"], r["mode"])][r["bytes"]].append((r["p50_us"], r["busbw_GBps"]))
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for (P, mode), by_size in sorted(series.items()):
        sizes = sorted(by_size)
        p50 = [statistics.median(v[0] for v in by_size[s]) for s in sizes]
        busbw = [statistics.median(v[1] for v in by_size[s]) for s in sizes]
        color, marker = MODE_STYLE.get(mode, (None, "."))
        style = "-" if P == min(p for p, _ in series) else "--"
        label = f"{'MPI_Allreduce' if mode == 'mpi' else 'pcoll ' + mode}, P={P}"
        lat.plot(sizes, p50, style, color=color, marker=marker, markersize=4, label=label)
        bw.plot(sizes, busbw, style, color=color, marker=marker, markersize=4, label=label)
    for ax, title, ylabel in ((lat, "median latency per round", "p50 time (us)"),
                              (bw, "bus bandwidth", "busbw (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ticks = sorted({s for v in series.values() for s in v})[::2]
        ax.set_xticks(ticks, [size_label(t) for t in ticks], fontsize=8)
    lat.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot.py: wrote {out}")


def plot_imbalance(rows, out):
    runs = defaultdict(lambda: defaultdict(list))  # model -> mode -> [(s/step, efficiency)]
    for r in rows:
        runs[r["model"]][r["mode"]].append((r["wall_s"] / r["steps"] * 1e3, r["efficiency"]))
    models = sorted(runs)
    modes = [m for m in MODE_STYLE if any(m in runs[x] for x in models)]
    fig, (step_ax, eff_ax) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(models))]
        ms = [statistics.median(v[0] for v in runs[m][mode]) if mode in runs[m] else 0 for m in models]
        eff = [statistics.median(v[1] for v in runs[m][mode]) if mode in runs[m] else 0 for m in models]
        color = MODE_STYLE[mode][0]
        name = "MPI_Allreduce" if mode == "mpi" else mode
        step_ax.bar(xs, ms, width, color=color, label=name)
        eff_ax.bar(xs, eff, width, color=color, label=name)
    for ax, title, ylabel in ((step_ax, "wall time per step", "ms per step"),
                              (eff_ax, "efficiency (lower bound / wall)", "efficiency")):
        ax.set_xticks(range(len(models)), [m.split("/")[-1] for m in models], fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    eff_ax.set_ylim(0, 1.15)
    step_ax.set_ylim(0, step_ax.get_ylim()[1] * 1.2)
    step_ax.legend(fontsize=8, loc="upper center", ncol=len(modes))
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot.py: wrote {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="files of --json lines")
    parser.add_argument("-o", "--output", required=True, help="output prefix: PREFIX_allreduce.png, PREFIX_imbalance.png")
    args = parser.parse_args()
    objects = load(args.inputs)
    allreduce = [o for o in objects if o.get("tool") == "pcoll_allreduce" or "busbw_GBps" in o]
    imbalance = [o for o in objects if o.get("tool") == "pcoll_imbalance" or "efficiency" in o]
    if not allreduce and not imbalance:
        sys.exit("plot.py: no pcoll_allreduce or pcoll_imbalance JSON objects in the input")
    if allreduce:
        plot_allreduce(allreduce, f"{args.output}_allreduce.png")
    if imbalance:
        plot_imbalance(imbalance, f"{args.output}_imbalance.png")


if __name__ == "__main__":
    main()
