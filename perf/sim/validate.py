#!/usr/bin/python3
"""pcoll_sim against measurement on this machine, in one run (docs/scaling.md, "Validation").

  perf/sim/validate.py BUILD_DIR [--runs 3] [--steps 60]

Each of --runs launches
1. calibrates (pcoll_sim calibrate: pcoll_pingpong and the kernels, never pcoll_allreduce);
2. the balanced round: pcoll_allreduce's sync p50 at P = 2 and 4 for 8 B, 64 KiB, 4 MiB and
   16 MiB (pcollrun, the default provider) against pcoll_sim's call_us_p50 (--model none
   --compute-ms 0) on that launch's calibration;
3. where communication matters: pcoll_imbalance --model paper at P = 2 and 4, --count 4194304
   --compute-ms 5 --delay-ms 4, against pcoll_sim with the same options and seed.
Figures are medians of the launches; a ratio is the median of the launches' own ratios (each
prediction against the measurement of its launch), which are listed too. The ideal speedup
is pcoll_sim --platform ideal (no communication). Prints markdown tables."""
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
    sizes = [8, 65536, 4194304, 16777216]
    common = ["--model", "paper", "--count", "4194304", "--compute-ms", "5", "--delay-ms", "4", "--steps",
              str(args.steps), "--modes", "sync,solo,majority", "--json"]
    # Every launch calibrates again and is predicted on its own calibration: this machine's
    # memory speed moves by up to 2x within minutes, so a ratio is taken within one launch.
    rounds = {}      # (P, size) -> [(measured p50, predicted, plan)]
    imbalance = {}   # (P, mode) -> [(measured row, predicted row)]
    for run in range(args.runs):
        cal = f"{tmp}/calibrated{run}.xml"
        line = subprocess.run([sim, "calibrate", "--out", cal], check=True, capture_output=True, text=True).stdout
        print(f"launch {run + 1}: {line.splitlines()[0]}")
        for P in (2, 4):
            for size in sizes:
                m = rows([pcollrun, "-n", str(P), f"{b}/perf/pcoll_allreduce", "--mode", "sync", "-b", str(size),
                          "-e", str(size), "-n", "100", "-w", "10", "--json"])[0]
                p = rows([sim, "-n", str(P), "--calibration", cal, "--model", "none", "--compute-ms", "0", "--steps",
                          "100", "--count", str(size // 4), "--modes", "sync", "--json"])[0]
                rounds.setdefault((P, size), []).append((m["p50_us"], p["call_us_p50"], p["plan"]))
            measured = {r["mode"]: r for r in rows([pcollrun, "-n", str(P), f"{b}/perf/pcoll_imbalance"] + common)}
            predicted = {r["mode"]: r for r in rows([sim, "-n", str(P), "--calibration", cal] + common)}
            for mode, r in measured.items():
                imbalance.setdefault((P, mode), []).append((r, predicted[mode]))
    med = statistics.median

    def ratio_cell(ratios):
        return f"{med(ratios):.2f} [{' '.join(f'{r:.2f}' for r in ratios)}]"

    print("\n| P | bytes | measured p50 (us) | predicted (us) | predicted / measured [per launch] | plan |")
    print("|---|---|---|---|---|---|")
    for (P, size), pairs in rounds.items():
        ratios = [p / m for m, p, _ in pairs]
        print(f"| {P} | {size} | {med(m for m, _, _ in pairs):.2f} | {med(p for _, p, _ in pairs):.2f} | "
              f"{ratio_cell(ratios)} | {pairs[0][2]} |")
    print("\n| P | mode | measured wall_s | predicted wall_s | ratio [per launch] | measured speedup | predicted speedup"
          " | ideal speedup | measured fresh | predicted fresh |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for P in (2, 4):
        ideal = {r["mode"]: r for r in rows([sim, "-n", str(P), "--platform", "ideal"] + common)}
        for mode in ("sync", "solo", "majority"):
            pairs = imbalance[(P, mode)]
            ratios = [p["wall_s"] / m["wall_s"] for m, p in pairs]
            print(f"| {P} | {mode} | {med(m['wall_s'] for m, _ in pairs):.3f} | {med(p['wall_s'] for _, p in pairs):.3f} | "
                  f"{ratio_cell(ratios)} | "
                  f"{med((m['speedup_vs_sync'] or 1.0) for m, _ in pairs):.3f} | "
                  f"{med(p['speedup_vs_sync'] for _, p in pairs):.3f} | {ideal[mode]['speedup_vs_sync']:.3f} | "
                  f"{med(m['fresh_fraction'] for m, _ in pairs):.3f} | {med(p['fresh_fraction'] for _, p in pairs):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
