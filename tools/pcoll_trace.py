#!/usr/bin/python3
"""pcoll_trace: the straggler report of one job's round traces (PCOLL_TRACE=DIR,
docs/observability.md).

Reads every pcoll-trace.rank<R>.handle<H>.json in DIR, puts each rank's events on rank 0's
clock (the clock_offset_ns each file records), and per handle prints one row per rank: the
fraction of rounds it joined late, how long after the round's initiator it posted (mean and
p99; a synchronous round's reference is its first poster), and its longest run of late
rounds. The latest rank (largest mean) is named on the last line.

Usage: pcoll_trace.py DIR [--png FILE] [--merged FILE] [--json]
  --png FILE     heatmap of rank x round: late rounds and how late each rank posted
                 (handles of more than one round)
  --merged FILE  one Chrome trace of every rank on rank 0's clock (Perfetto, chrome://tracing)
  --json         the table as JSON, one object per handle"""
import argparse
import glob
import json
import os
import sys


def load(directory):
    """{handle: {rank: (meta, events)}}; event times in ns on rank 0's clock."""
    handles = {}
    paths = sorted(glob.glob(os.path.join(directory, "pcoll-trace.rank*.handle*.json")))
    if not paths:
        sys.exit(f"pcoll_trace: no pcoll-trace.rank*.handle*.json in {directory} (was PCOLL_TRACE set?)")
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        meta = doc["otherData"]
        offset = meta["clock_offset_ns"]
        events = []
        for e in doc["traceEvents"]:
            if e.get("ph") == "M":
                continue
            e = dict(e)
            e["t_ns"] = round(float(e["ts"]) * 1000) - offset
            events.append(e)
        handles.setdefault(meta["handle"], {})[meta["rank"]] = (meta, events)
    return handles


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def analyse(ranks):
    """Per-rank rows and the rank x round matrices of one handle."""
    size = next(iter(ranks.values()))[0]["size"]
    posts, fresh, initiator, flushes = {}, {}, {}, set()
    for rank, (_, events) in ranks.items():
        for e in events:
            rnd = e["args"]["round"]
            if e["name"] == "post":
                posts[(rank, rnd)] = e["t_ns"]
            elif e["name"] == "flush":
                flushes.add(rnd)
            elif e["name"] == "join":
                fresh[(rank, rnd)] = e["args"]["fresh"] == 1
            elif e["name"] == "complete":
                initiator.setdefault(rnd, e["args"]["initiator"])
    rounds = sorted({r for (_, r) in fresh} - flushes)
    delay = {}  # (rank, round) -> ns after the round's initiator posted
    for rnd in rounds:
        init = initiator.get(rnd, -1)
        times = {rank: posts[(rank, rnd)] for rank in range(size) if (rank, rnd) in posts}
        if init >= 0 and init in times:
            reference = times[init]
        elif times:
            reference = min(times.values())
        else:
            continue
        for rank, t in times.items():
            delay[(rank, rnd)] = t - reference
    rows = []
    for rank in range(size):
        joined = [rnd for rnd in rounds if (rank, rnd) in fresh]
        late = [rnd for rnd in joined if not fresh[(rank, rnd)]]
        longest = run = 0
        for rnd in joined:
            run = run + 1 if not fresh[(rank, rnd)] else 0
            longest = max(longest, run)
        delays = [delay[(rank, rnd)] / 1e6 for rnd in rounds if (rank, rnd) in delay]
        rows.append({"rank": rank, "rounds": len(joined),
                     "late_fraction": len(late) / len(joined) if joined else 0.0,
                     "post_after_initiator_mean_ms": sum(delays) / len(delays) if delays else float("nan"),
                     "post_after_initiator_p99_ms": percentile(delays, 0.99),
                     "longest_late_run": longest})
    return size, rounds, rows, fresh, delay


def heatmap(path, title_rows, plots):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, axes = plt.subplots(len(plots), 2, figsize=(12, 2.5 + 0.35 * max(p[0] for p in plots) * len(plots)),
                             squeeze=False)
    for row, (size, rounds, fresh, delay, title) in zip(axes, plots):
        late = np.full((size, len(rounds)), np.nan)
        lateness = np.full((size, len(rounds)), np.nan)
        for j, rnd in enumerate(rounds):
            for r in range(size):
                if (r, rnd) in fresh:
                    late[r, j] = 0 if fresh[(r, rnd)] else 1
                if (r, rnd) in delay:
                    lateness[r, j] = delay[(r, rnd)] / 1e6
        row[0].imshow(late, aspect="auto", interpolation="nearest", cmap="RdYlGn_r", vmin=0, vmax=1)
        row[0].set_title(f"{title}: late (red) / fresh (green)")
        image = row[1].imshow(lateness, aspect="auto", interpolation="nearest", cmap="magma_r")
        row[1].set_title(f"{title}: posted after the initiator (ms)")
        fig.colorbar(image, ax=row[1])
        for ax in row:
            ax.set_xlabel("round")
            ax.set_ylabel("rank")
            ax.set_yticks(range(size))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def merged(path, handles):
    events = []
    for ranks in handles.values():
        for rank, (meta, evs) in ranks.items():
            events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
            for e in evs:
                out = {k: v for k, v in e.items() if k != "t_ns"}
                out["ts"] = e["t_ns"] / 1000
                events.append(out)
    with open(path, "w") as f:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--png")
    parser.add_argument("--merged")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    handles = load(args.directory)
    plots, reports = [], []
    for handle in sorted(handles):
        ranks = handles[handle]
        mode = next(iter(ranks.values()))[0]["mode"]
        size, rounds, rows, fresh, delay = analyse(ranks)
        dropped = sum(meta["dropped_events"] for meta, _ in ranks.values())
        valid = [r for r in rows if r["post_after_initiator_mean_ms"] == r["post_after_initiator_mean_ms"]]
        latest = max(valid, key=lambda r: r["post_after_initiator_mean_ms"])["rank"] if valid else -1
        offsets = {rank: meta["clock_offset_ns"] for rank, (meta, _) in sorted(ranks.items())}
        reports.append({"handle": handle, "mode": mode, "ranks": size, "rounds": len(rounds),
                        "dropped_events": dropped, "clock_offset_ns": offsets, "latest": latest, "rows": rows,
                        "round_numbers": rounds,
                        "post_after_initiator_ms": [[delay[(r, t)] / 1e6 if (r, t) in delay else None
                                                     for t in rounds] for r in range(size)],
                        "late": [[not fresh[(r, t)] if (r, t) in fresh else None for t in rounds]
                                 for r in range(size)]})
        if len(rounds) > 1:  # the one-round handles of a tool's own bookkeeping stay out
            plots.append((size, rounds, fresh, delay, f"handle {handle} ({mode})"))
        if args.json:
            continue
        print(f"# handle {handle} ({mode}): {size} ranks, {len(rounds)} rounds"
              + (f", {dropped} events dropped (ring full)" if dropped else ""))
        print("# clock offsets vs rank 0 (ms): " + " ".join(f"{r}:{o / 1e6:.3f}" for r, o in offsets.items()))
        print(f"{'rank':>5} {'rounds':>7} {'late%':>7} {'post_mean_ms':>13} {'post_p99_ms':>12} {'longest_late_run':>17}")
        for r in rows:
            print(f"{r['rank']:>5} {r['rounds']:>7} {100 * r['late_fraction']:>7.1f} "
                  f"{r['post_after_initiator_mean_ms']:>13.3f} {r['post_after_initiator_p99_ms']:>12.3f} "
                  f"{r['longest_late_run']:>17}")
        print(f"latest: rank {latest}")
    if args.json:
        print(json.dumps(reports, indent=1))
    if args.png and plots:
        heatmap(args.png, reports, plots)
    if args.merged:
        merged(args.merged, handles)


if __name__ == "__main__":
    main()
