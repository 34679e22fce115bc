#!/usr/bin/python3
"""Plots of perf/sim/scaling.sh's rows (docs/scaling.md) and a markdown summary.

  perf/sim/plot_scaling.py scaling.json OUTDIR

Writes OUTDIR/sim_speedup.png (speedup over sync against P, per platform and model),
OUTDIR/sim_round.png (the balanced round's time against P, per size) and
OUTDIR/sim_messages.png (messages per rank and round against P, per mode), and prints the
tables docs/scaling.md quotes."""
import collections
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    out = sys.argv[2]
    timed_out = [r for r in rows if r.get("timed_out")]
    rows = [r for r in rows if not r.get("timed_out")]
    imb = [r for r in rows if r["model"] != "none"]
    bal = [r for r in rows if r["model"] == "none"]

    # Speedup over sync and fresh fraction, per platform, model, mode.
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, platform in zip(axes, ("fat-tree", "dragonfly")):
        for model, style in (("paper", "-"), ("lognormal", "--")):
            for mode, color in (("solo", "C0"), ("majority", "C1"), ("quorum", "C2")):
                pts = sorted((r["P"], r["speedup_vs_sync"]) for r in imb
                             if r["platform"] == platform and r["model"] == model and r["mode"] == mode
                             and r["speedup_vs_sync"] is not None)
                if pts:
                    ax.plot(*zip(*pts), style, color=color, marker="o", label=f"{mode}, {model}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{platform}, 4 ranks per node, 1 MiB")
        ax.set_xlabel("ranks P")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("speedup over sync (wall time)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/sim_speedup.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, platform in zip(axes, ("fat-tree", "dragonfly")):
        for count, color in ((2, "C0"), (16384, "C1"), (262144, "C2"), (4194304, "C3")):
            for mode, style in (("sync", "-"), ("majority", "--")):
                pts = sorted((r["P"], r["call_us_p50"]) for r in bal
                             if r["platform"] == platform and r["count"] == count and r["mode"] == mode)
                if pts:
                    ax.plot(*zip(*pts), style, color=color, marker="o", label=f"{count * 4} B, {mode}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{platform}: balanced round, p50 of the slowest rank's call")
        ax.set_xlabel("ranks P")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("us per round")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{out}/sim_round.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, color in (("sync", "C3"), ("solo", "C0"), ("majority", "C1"), ("quorum", "C2")):
        pts = sorted((r["P"], r["messages_per_round"]) for r in imb
                     if r["platform"] == "fat-tree" and r["model"] == "paper" and r["mode"] == mode)
        if pts:
            ax.plot(*zip(*pts), marker="o", color=color, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("messages sent per rank and round")
    ax.set_title("fat tree, paper model, 1 MiB")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/sim_messages.png", dpi=110)

    print("| platform | model | P | sync wall_s | solo | majority | quorum | fresh solo / majority / quorum | messages per rank and round sync / solo | simulated in (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups = collections.defaultdict(dict)
    for r in imb:
        groups[(r["platform"], r["model"], r["P"])][r["mode"]] = r
    for (platform, model, P), g in sorted(groups.items()):
        def sp(m):
            return f"{g[m]['speedup_vs_sync']:.3f}" if m in g and g[m]["speedup_vs_sync"] else "-"
        def fr(m):
            return f"{g[m]['fresh_fraction']:.2f}" if m in g else "-"
        def ms(m):
            return f"{g[m]['messages_per_round']:.0f}" if m in g else "-"
        sync = g.get("sync")
        runtime = max(r["sim_runtime_s"] for r in g.values())
        print(f"| {platform} | {model} | {P} | {sync['wall_s']:.3f} | {sp('solo')} | {sp('majority')} | {sp('quorum')} | "
              f"{fr('solo')} / {fr('majority')} / {fr('quorum')} | {ms('sync')} / {ms('solo')} | {runtime:.1f} |")
    print()
    print("| platform | P | 8 B sync / majority (us) | 64 KiB | 1 MiB | 16 MiB | plan at 16 MiB | simulated in (s), 16 MiB |")
    print("|---|---|---|---|---|---|---|---|")
    bg = collections.defaultdict(dict)
    for r in bal:
        bg[(r["platform"], r["P"])][(r["count"], r["mode"])] = r
    for (platform, P), g in sorted(bg.items()):
        cells = []
        for count in (2, 16384, 262144, 4194304):
            s, m = g.get((count, "sync")), g.get((count, "majority"))
            cells.append((f"{s['call_us_p50']:.1f}" if s else "-") + " / " + (f"{m['call_us_p50']:.1f}" if m else "-"))
        big = g.get((4194304, "sync"))
        print(f"| {platform} | {P} | " + " | ".join(cells) + f" | {big['plan'] if big else '-'} | "
              f"{big['sim_runtime_s'] if big else '-'} |")
    print()
    for r in timed_out:
        print(f"timed out after {r['limit_s']} s: pcoll_sim {r['args']}")


if __name__ == "__main__":
    main()
