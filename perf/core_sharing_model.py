"""core_sharing_model: step time of sync and solo under the paper model when P ranks share
fewer cores, as in train_imbalance.py on a small host. Each step a rank computes c seconds
of CPU and, if drawn (two draws per step), sleeps D as well, before or after its compute.
Computing ranks share the cores evenly (rate min(1, cores / computing ranks)); sleeping
and waiting ranks use none. sync: round t completes when every rank has called run(t).
solo with max_lag L: round t completes once some rank has called run(t), round t-1 is
complete and every rank has called run(t - L) (docs/design.md, "Bounded lag"). A run(t)
returns when round t is complete. Prints solo's step speedup over sync.

    /usr/bin/python3 perf/core_sharing_model.py [--ranks 4] [--cores 2] [--steps 600]
"""
import argparse
import random


def simulate(mode, lag, after, ranks, cores, steps, delay_factor, seed, dt=0.002):
    rnd = random.Random(seed)
    c = 1.0                        # CPU seconds per step per rank
    contended = c * ranks / cores  # C as train_imbalance measures it: all ranks computing
    delay = delay_factor * contended
    sleeps = [[0.0] * ranks for _ in range(steps)]
    for s in range(steps):
        for _ in range(2):
            sleeps[s][rnd.randrange(ranks)] = delay
    halves = ("compute", "sleep") if after else ("sleep", "compute")

    def length(half, s, r):
        return c if half == "compute" else sleeps[s][r]

    called = [[False] * ranks for _ in range(steps)]
    complete = 0                   # rounds 0 .. complete-1 are complete
    step = [0] * ranks
    half = [0] * ranks             # index into halves; 2 = called run(step), waiting
    left = [length(halves[0], 0, r) for r in range(ranks)]
    now = 0.0
    while min(step) < steps:
        computing = sum(1 for r in range(ranks) if half[r] < 2 and halves[half[r]] == "compute")
        rate = min(1.0, cores / computing) if computing else 0.0
        for r in range(ranks):
            if step[r] >= steps or half[r] == 2:
                continue
            left[r] -= dt * (rate if halves[half[r]] == "compute" else 1.0)
            if left[r] <= 0:
                half[r] += 1
                if half[r] == 2:
                    called[step[r]][r] = True
                else:
                    left[r] = length(halves[1], step[r], r)
        while complete < steps:
            t = complete
            if mode == "sync":
                ready = all(called[t])
            else:
                ready = any(called[t]) and (t < lag or all(called[t - lag]))
            if not ready:
                break
            complete += 1
        for r in range(ranks):
            if half[r] == 2 and step[r] < complete:
                step[r] += 1
                if step[r] < steps:
                    half[r] = 0
                    left[r] = length(halves[0], step[r], r)
        now += dt
    return now / steps / contended  # step time in units of C


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--delay-factor", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.ranks < 1 or args.cores < 1 or args.steps < 4:
        parser.error("--ranks and --cores must be at least 1, --steps at least 4")
    if not 0 <= args.delay_factor < 1e6:
        parser.error(f"--delay-factor {args.delay_factor:g} must be a non-negative number")
    for after in (False, True):
        where = "after compute " if after else "before compute"
        common = (after, args.ranks, args.cores, args.steps, args.delay_factor, args.seed)
        sync = simulate("sync", 0, *common)
        row = [f"sync {sync:.2f} C"]
        for lag in (1, 2, 3):
            solo = simulate("solo", lag, *common)
            row.append(f"solo max_lag {lag}: {solo:.2f} C ({sync / solo:.2f}x)")
        print(f"delay {where}: " + ", ".join(row))


if __name__ == "__main__":
    main()
