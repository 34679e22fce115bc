#!/usr/bin/python3
"""pcoll's sync allreduce against MPI_Allreduce, launch after launch, on one node.

Runs `pcoll_allreduce --mode sync --compare-mpi --json` under mpirun LAUNCHES times for
each P (MPI in the same launch as its anchor) and prints, per P and size, the median over
launches of pcoll's p50 / MPI's p50 with every launch's ratio, and for large vectors how
fast the round ran against what memory allows: the least traffic n(3P - 1)/P divided by
the p50, over 2 x memcpy_GBps x min(1, cores / P) of the same launch (a copy reads and
writes each byte; ranks that share a core share its speed). docs/performance.md.

    perf/vs_mpi.py [--ranks 2,4] [--launches 5] [-b 8] [-e 8M] [-f 4] [-n 30] [-w 5]
                   [--binary build/perf/pcoll_allreduce] [--json-out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def usage(message):
    print(f"vs_mpi: {message}", file=sys.stderr)
    sys.exit(2)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def launch(args, ranks):
    command = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_tcp_if_include", "lo",
               "--mca", "oob_tcp_if_include", "lo", "-np", str(ranks), args.binary, "--mode", "sync",
               "--compare-mpi", "-b", args.b, "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w",
               str(args.w), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        sys.exit(f"vs_mpi: {' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    rows = []
    for line in done.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    if not rows:
        sys.exit(f"vs_mpi: no JSON rows from {' '.join(command)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="comma-separated P values (default 2,4)")
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("-b", default="8")
    parser.add_argument("-e", default="8M")
    parser.add_argument("-f", type=int, default=4)
    parser.add_argument("-n", type=int, default=30)
    parser.add_argument("-w", type=int, default=5)
    parser.add_argument("--binary", default="build/perf/pcoll_allreduce")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    parser.add_argument("--json-out", help="write every launch's rows here, one JSON object per line")
    args = parser.parse_args()
    try:
        ranks = [int(p) for p in args.ranks.split(",")]
        parse_size(args.b), parse_size(args.e)
    except ValueError as error:
        usage(f"bad --ranks, -b or -e: {error}")
    if args.launches < 1 or any(p < 1 for p in ranks):
        usage("--launches and every P must be at least 1")
    if not os.access(args.binary, os.X_OK):
        usage(f"{args.binary} is not an executable (build first, or pass --binary)")
    cores = os.cpu_count() or 1
    out = open(args.json_out, "w") if args.json_out else None
    print(f"# pcoll sync p50 / MPI_Allreduce p50, medians of {args.launches} launches, {cores} cores")
    print(f"{'P':>3} {'bytes':>10} {'plan':>18} {'pcoll us':>10} {'mpi us':>10} {'ratio':>6}  launches"
          f"{'':28} mem speed (pcoll, mpi) x traffic/floor")
    for p in ranks:
        per_size = {}
        for k in range(args.launches):
            for row in launch(args, p):
                if out:
                    out.write(json.dumps(dict(row, launch=k)) + "\n")
                per_size.setdefault(row["bytes"], {}).setdefault(row["mode"], []).append(row)
        for size in sorted(per_size):
            modes = per_size[size]
            if "sync" not in modes or "mpi" not in modes:
                continue
            ratios = [s["p50_us"] / m["p50_us"] for s, m in zip(modes["sync"], modes["mpi"]) if m["p50_us"] > 0]
            pcoll = statistics.median(r["p50_us"] for r in modes["sync"])
            mpi = statistics.median(r["p50_us"] for r in modes["mpi"])

            def speed(rows):
                # the row's floor bytes per ns over what memory allows (GB/s = bytes per ns)
                values = []
                for r in rows:
                    allowed = 2 * r["memcpy_GBps"] * min(1.0, cores / p)
                    if r["p50_us"] > 0 and allowed > 0:
                        values.append(r["mem_floor_bytes"] / (r["p50_us"] * 1e3) / allowed)
                return statistics.median(values) if values else float("nan")

            traffic = modes["sync"][0].get("mem_bytes_per_round")
            floor = modes["sync"][0].get("mem_floor_bytes") or 0
            launches = " ".join(f"{r:.2f}" for r in ratios)
            print(f"{p:>3} {size:>10} {modes['sync'][0]['plan']:>18} {pcoll:>10.2f} {mpi:>10.2f} "
                  f"{statistics.median(ratios):>5.2f}x  {launches:<36} {speed(modes['sync']):.2f}, "
                  f"{speed(modes['mpi']):.2f}  {traffic / floor if traffic and floor else float('nan'):.2f}")
    if out:
        out.close()


if __name__ == "__main__":
    main()
