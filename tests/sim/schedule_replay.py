#!/usr/bin/env python3
"""The zero-communication ideal of the eager-SGD experiment, by plain replay of a schedule.

Reads a schedule (step,rank,compute_ms, as pcoll_sim --write-schedule and pcoll_imbalance
--trace write it) and replays the rounds with every communication free, under the semantics
of docs/design.md:

  sync  round t completes once every rank posted it:  done(t) = max_r post_r(t)
  solo  round t is started by the first rank that posts it, but every rank must join, and
        with max_lag L a rank joins round t (late, with its carry) only once it has posted
        round t - L:  done(t) = max(min_r post_r(t), max_r post_r(t - L))
  then  a rank gets round t's result at max(post_r(t), done(t)) and computes the next step;
        after the last step every rank posts a flush, which completes like a sync round.

Prints one JSON object per mode with wall_s and speedup_vs_sync; with --check FILE (pcoll_sim
--json rows run with --platform ideal) it fails unless the simulator's wall_s of each mode
matches the replay's within 1e-6 s.
"""
import argparse
import csv
import json
import sys


def read_schedule(path):
    rows = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            rows[(int(row["step"]), int(row["rank"]))] = float(row["compute_ms"]) / 1e3
    steps = max(s for s, _ in rows) + 1
    ranks = max(r for _, r in rows) + 1
    return [[rows[(s, r)] for r in range(ranks)] for s in range(steps)]


def replay(schedule, mode, max_lag=1):
    ranks = len(schedule[0])
    got = [0.0] * ranks  # when each rank got its previous result
    posts = []           # posts[t][r]
    for t, compute in enumerate(schedule):
        post = [got[r] + compute[r] for r in range(ranks)]
        posts.append(post)
        if mode == "sync":
            done = max(post)
        elif mode == "solo":
            done = min(post)
            if t >= max_lag:
                done = max(done, max(posts[t - max_lag]))
        else:
            raise ValueError(mode)
        got = [max(post[r], done) for r in range(ranks)]
    return max(got)  # the flush: every rank posts it at once, it completes when the last has


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("schedule")
    parser.add_argument("--max-lag", type=int, default=1)
    parser.add_argument("--check", help="pcoll_sim --json rows of an ideal-platform run")
    args = parser.parse_args()
    schedule = read_schedule(args.schedule)
    walls = {m: replay(schedule, m, args.max_lag) for m in ("sync", "solo")}
    for mode, wall in walls.items():
        print(json.dumps({"mode": mode, "wall_s": round(wall, 9), "speedup_vs_sync": round(walls["sync"] / wall, 4)}))
    if not args.check:
        return 0
    failures = 0
    seen = 0
    with open(args.check) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if row["mode"] not in walls:
                continue
            seen += 1
            want = walls[row["mode"]]
            if abs(row["wall_s"] - want) > 1e-6:
                print(f"{row['mode']}: pcoll_sim wall_s {row['wall_s']} but the replay gives {want:.9f}", file=sys.stderr)
                failures += 1
    if seen == 0:
        print(f"{args.check} holds no sync or solo row", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
