#!/usr/bin/python3
"""pcoll_sim against measurement on this machine, in one run (docs/scaling.md, "Validation").

  perf/sim/validate.py BUILD_DIR [--runs 3] [--steps 60]

1. calibrates (pcoll_sim calibrate: pcoll_pingpong and the kernels, never pcoll_allreduce);
2. the balanced round: pcoll_allreduce's sync p50 at P = 2 and 4 for 8 B, 64 KiB and 4 MiB
   (pcollrun, the default provider) against pcoll_sim's call_us_p50 (--model none
   --compute-ms 0) on the calibrated platform;
3. where communication matters: pcoll_imbalance --model paper at P = 4, --count 4194304
   --compute-ms 5 --delay-ms 4, against pcoll_sim with the same options and seed, and the
   zero-communication ideal (pcoll_sim --platform ideal).
Measured figures are medians of --runs launches. Prints markdown tables."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def rows(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=900).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    b = os.path.abspath(args.build)
    sim, pcollrun = f"{b}/perf/pcoll_sim", f"{b}/tools/pcollrun"
    tmp = tempfile.mkdtemp()
    cal = f"{tmp}/calibrated.xml"
    print(subprocess.run([sim, "calibrate", "--out", cal], check=True, capture_output=True, text=True).stdout.strip())
    sizes = [8, 65536, 4194304]
    print("\n| P | bytes | measured p50 (us) | predicted (us) | predicted / measured | plan |")
    print("|---|---|---|---|---|---|")
    for P in (2, 4):
        for size in sizes:
            measured = []
            for _ in range(args.runs):
                r = rows([pcollrun, "-n", str(P), f"{b}/perf/pcoll_allreduce", "--mode", "sync", "-b", str(size),
                          "-e", str(size), "-n", "100", "-w", "10", "--json"])
                measured.append(r[0]["p50_us"])
            m = statistics.median(measured)
            p = rows([sim, "-n", str(P), "--calibration", cal, "--model", "none", "--compute-ms", "0", "--steps", "100",
                      "--count", str(size // 4), "--modes", "sync", "--json"])[0]
            print(f"| {P} | {size} | {m:.2f} | {p['call_us_p50']:.2f} | {p['call_us_p50'] / m:.2f} | {p['plan']} |")
    common = ["--model", "paper", "--count", "4194304", "--compute-ms", "5", "--delay-ms", "4", "--steps",
              str(args.steps), "--modes", "sync,solo,majority", "--json"]
    measured = {}
    for _ in range(args.runs):
        for r in rows([pcollrun, "-n", "4", f"{b}/perf/pcoll_imbalance"] + common):
            measured.setdefault(r["mode"], []).append(r)
    predicted = {r["mode"]: r for r in rows([sim, "-n", "4", "--calibration", cal] + common)}
    ideal = {r["mode"]: r for r in rows([sim, "-n", "4", "--platform", "ideal"] + common)}
    print("\n| mode | measured wall_s | predicted wall_s | ratio | measured speedup | predicted speedup | ideal speedup"
          " | measured fresh | predicted fresh |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in ("sync", "solo", "majority"):
        mw = statistics.median(r["wall_s"] for r in measured[mode])
        ms = statistics.median((r["speedup_vs_sync"] or 1.0) for r in measured[mode])
        mf = statistics.median(r["fresh_fraction"] for r in measured[mode])
        p, i = predicted[mode], ideal[mode]
        print(f"| {mode} | {mw:.3f} | {p['wall_s']:.3f} | {p['wall_s'] / mw:.2f} | {ms:.3f} | "
              f"{p['speedup_vs_sync']:.3f} | {i['speedup_vs_sync']:.3f} | {mf:.3f} | {p['fresh_fraction']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
