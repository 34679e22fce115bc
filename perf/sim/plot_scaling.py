#!/usr/bin/python3
"""Plots of perf/sim/scaling.sh's rows (docs/scaling.md) and a markdown summary.

  perf/sim/plot_scaling.py scaling.json OUTDIR [BEFORE.json]

Writes OUTDIR/sim_speedup.png (speedup over sync against P, per platform and model),
OUTDIR/sim_round.png (the balanced round's time against P, per size) and
OUTDIR/sim_messages.png (messages per rank and round against P, per mode), and prints the
tables docs/scaling.md quotes. With BEFORE.json (an earlier sweep's rows), its curves are
drawn thin and dotted beside the new ones, and the tables give before -> after."""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PLATFORMS = ("fat-tree", "dragonfly")
SIZES = (2, 16384, 262144, 4194304)  # float32 elements: 8 B, 64 KiB, 1 MiB, 16 MiB


def load(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    timed_out = [r for r in rows if r.get("timed_out")]
    rows = [r for r in rows if not r.get("timed_out")]
    return ([r for r in rows if r["model"] != "none"], [r for r in rows if r["model"] == "none"], timed_out)


def curves(ax, sets, select, y, color, label):
    """One curve per sweep (the new one solid, the earlier one thin and dotted)."""
    for rows, style, suffix in sets:
        pts = sorted((r["P"], r[y]) for r in rows if select(r) and r[y] is not None)
        if pts:
            ax.plot(*zip(*pts), style, color=color, marker="o" if style == "-" else None,
                    linewidth=1.6 if style == "-" else 0.9, label=label + suffix)


def plots(out, imb, bal, before_imb, before_bal):
    def sets(new, old):
        return [(new, "-", "")] + ([(old, ":", ", before")] if old else [])

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, platform in zip(axes, PLATFORMS):
        for model, marker_style in (("paper", "-"), ("lognormal", "--")):
            for mode, color in (("solo", "C0"), ("majority", "C1"), ("quorum", "C2")):
                select = (lambda r, p=platform, m=model, mo=mode:
                          r["platform"] == p and r["model"] == m and r["mode"] == mo)
                new = [(imb, marker_style, "")]
                old = [(before_imb, ":", ", before")] if before_imb and model == "paper" else []
                curves(ax, new + old, select, "speedup_vs_sync", color, f"{mode}, {model}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{platform}, 4 ranks per node, 1 MiB")
        ax.set_xlabel("ranks P")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("speedup over sync (wall time)")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(f"{out}/sim_speedup.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, platform in zip(axes, PLATFORMS):
        for count, color in zip(SIZES, ("C0", "C1", "C2", "C3")):
            for mode, style in (("sync", "-"), ("majority", "--")):
                select = (lambda r, p=platform, c=count, m=mode:
                          r["platform"] == p and r["count"] == c and r["mode"] == m)
                new = [(bal, style, "")]
                old = [(before_bal, ":", ", before")] if before_bal and mode == "sync" else []
                curves(ax, new + old, select, "call_us_p50", color, f"{count * 4} B, {mode}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{platform}: balanced round, p50 of the slowest rank's call")
        ax.set_xlabel("ranks P")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("us per round")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(f"{out}/sim_round.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, color in (("sync", "C3"), ("solo", "C0"), ("majority", "C1"), ("quorum", "C2")):
        select = lambda r, m=mode: r["platform"] == "fat-tree" and r["model"] == "paper" and r["mode"] == m
        curves(ax, sets(imb, before_imb), select, "messages_per_round", color, mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("messages sent per rank and round")
    ax.set_title("fat tree, paper model, 1 MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/sim_messages.png", dpi=110)


def by_key(rows, key):
    groups = collections.defaultdict(dict)
    for r in rows:
        groups[key(r)][r["mode"] if "mode" in r else None] = r
    return groups


def pair(old, new, fmt):
    """'new' alone, or 'old -> new' where the earlier sweep has the figure."""
    if new is None:
        return "-"
    return (fmt.format(old) + " -> " if old is not None else "") + fmt.format(new)


def tables(imb, bal, before_imb, before_bal):
    key = lambda r: (r["platform"], r["model"], r["P"])
    groups, old_groups = by_key(imb, key), by_key(before_imb, key)
    print("| platform | model | P | sync wall_s | solo | majority | quorum | fresh solo / majority / quorum "
          "| messages per rank and round sync / solo | simulated in (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k, g in sorted(groups.items()):
        old = old_groups.get(k, {})

        def sp(m):
            get = lambda grp: grp[m]["speedup_vs_sync"] if m in grp and grp[m]["speedup_vs_sync"] else None
            return pair(get(old), get(g), "{:.3f}")

        def fr(m):
            return f"{g[m]['fresh_fraction']:.2f}" if m in g else "-"

        def ms(m):
            get = lambda grp: grp[m]["messages_per_round"] if m in grp else None
            return pair(get(old), get(g), "{:.0f}")

        sync = g.get("sync")
        runtime = max(r["sim_runtime_s"] for r in g.values())
        wall = f"{sync['wall_s']:.3f}" if sync else "-"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {wall} | {sp('solo')} | {sp('majority')} | {sp('quorum')} | "
              f"{fr('solo')} / {fr('majority')} / {fr('quorum')} | {ms('sync')} / {ms('solo')} | {runtime:.1f} |")
    print()
    key = lambda r: (r["platform"], r["P"], r["count"])
    groups, old_groups = by_key(bal, key), by_key(before_bal, key)
    print("| platform | P | bytes | sync (us) | solo / sync | majority / sync | quorum / sync | plan | simulated in (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, g in sorted(groups.items()):
        old = old_groups.get(k, {})
        sync = g.get("sync")
        old_sync = old.get("sync")
        if sync is None:
            continue

        def ratio(m):
            new = g[m]["call_us_p50"] / sync["call_us_p50"] if m in g else None
            was = old[m]["call_us_p50"] / old_sync["call_us_p50"] if m in old and old_sync else None
            return pair(was, new, "{:.2f}")

        runtime = max(r["sim_runtime_s"] for r in g.values())
        print(f"| {k[0]} | {k[1]} | {k[2] * 4} | {pair(old_sync['call_us_p50'] if old_sync else None, sync['call_us_p50'], '{:.1f}')} | "
              f"{ratio('solo')} | {ratio('majority')} | {ratio('quorum')} | {sync['plan']} | {runtime:.1f} |")
    print()


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: plot_scaling.py scaling.json OUTDIR [BEFORE.json]")
    imb, bal, timed_out = load(sys.argv[1])
    before_imb, before_bal = load(sys.argv[3])[:2] if len(sys.argv) == 4 else ([], [])
    plots(sys.argv[2], imb, bal, before_imb, before_bal)
    tables(imb, bal, before_imb, before_bal)
    for r in timed_out:
        print(f"timed out after {r['limit_s']} s: pcoll_sim {r['args']}")


if __name__ == "__main__":
    main()
