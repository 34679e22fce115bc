#!/usr/bin/env bash
# Checks of pcoll_sim that need more than its exit status (perf/meson.build, suite 'sim'):
#
#   sim_checks.sh ideal PCOLL_SIM REPLAY_PY P MODEL_ARGS...
#       on the ideal platform, sync and solo wall times equal the plain schedule replay's
#   sim_checks.sh rows PCOLL_SIM N ARGS...
#       the run prints N JSON rows, each with the fields a pcoll_imbalance row has
#   sim_checks.sh trace PCOLL_SIM PCOLL_TRACE_PY
#       --trace writes PCOLL_TRACE's files: tools/pcoll_trace.py reads them and names the slow rank
#   sim_checks.sh activations PCOLL_SIM P ARGS...
#       in every mode, a round's activations cost at most 2 (P - 1) messages: the messages a
#       rank sends per round beyond sync's, which sends none, less quorum's one fetch-add
#   sim_checks.sh calibrate PCOLL_SIM PINGPONG PCOLLRUN
#       calibrates this machine into a temporary file and simulates two ranks on it
#   sim_checks.sh handover PCOLL_SIM
#       a vector beyond the cache goes to the caller at pcoll.copy_out_bytes_per_s: two
#       platforms that differ in that rate alone differ in the balanced direct-plan round by
#       the vector's bytes over each rate
set -euo pipefail
what=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $what in
  ideal)
    sim=$1 replay=$2 ranks=$3
    shift 3
    "$sim" -n "$ranks" --platform ideal --modes sync,solo --write-schedule "$tmp/schedule.csv" --json "$@" > "$tmp/rows.json"
    /usr/bin/python3 "$replay" "$tmp/schedule.csv" --check "$tmp/rows.json"
    ;;
  rows)
    sim=$1 want=$2
    shift 2
    "$sim" "$@" --json > "$tmp/rows.json"
    /usr/bin/python3 - "$tmp/rows.json" "$want" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
want = int(sys.argv[2])
fields = ["tool", "mode", "P", "steps", "model", "count", "wall_s", "steps_per_s", "speedup_vs_sync",
          "lower_bound_s", "efficiency", "fresh_fraction", "max_late_run", "cpu_s", "call_us_p50",
          "activation_us", "exchange_us", "blocked_us", "reduce_us", "plan", "sim_runtime_s"]
if len(rows) != want:
    sys.exit(f"{len(rows)} rows, expected {want}")
for row in rows:
    missing = [f for f in fields if f not in row]
    if missing:
        sys.exit(f"row {row.get('mode')} lacks {missing}")
    if not row["wall_s"] > 0 or not 0 < row["fresh_fraction"] <= 1 or row["efficiency"] > 1.0001:
        sys.exit(f"row {row['mode']} is impossible: {row}")
    if row["mode"] == "sync" and row["fresh_fraction"] != 1:
        sys.exit(f"a sync round had a late contribution: {row}")
print(f"{len(rows)} rows, plans {sorted(set(r['plan'] for r in rows))}")
PY
    ;;
  trace)
    sim=$1 report=$2
    "$sim" -n 5 --platform fat-tree --model slowrank --slow-rank 3 --compute-ms 2 --steps 12 --modes sync,solo \
      --trace "$tmp" > /dev/null
    /usr/bin/python3 "$report" "$tmp" > "$tmp/report.txt"
    cat "$tmp/report.txt"
    for mode in sync solo; do
      grep -q "($mode): 5 ranks, 12 rounds" "$tmp/report.txt" || { echo "no $mode handle of 5 ranks and 12 rounds"; exit 1; }
    done
    [[ $(grep -c '^latest: rank 3$' "$tmp/report.txt") == 2 ]] || { echo "the report does not name rank 3 as the latest"; exit 1; }
    ;;
  activations)
    sim=$1 ranks=$2
    shift 2
    "$sim" -n "$ranks" --modes sync,solo,majority,quorum --json "$@" > "$tmp/rows.json"
    /usr/bin/python3 - "$tmp/rows.json" "$ranks" <<'PY'
import json, sys
rows = {r["mode"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
ranks = int(sys.argv[2])
bound = 2 * (ranks - 1) / ranks
base = rows["sync"]["messages_per_round"]
for mode in ("solo", "majority", "quorum"):
    extra = rows[mode]["messages_per_round"] - base - (1 if mode == "quorum" else 0)
    print(f"{mode}: {extra:.2f} activation messages per rank and round (bound {bound:.2f})")
    if not 0 < extra <= bound + 1e-9:
        sys.exit(f"{mode} sends {extra:.2f} activation messages per rank and round, outside (0, {bound:.2f}]")
PY
    ;;
  calibrate)
    sim=$1 pingpong=$2 pcollrun=$3
    "$sim" calibrate --out "$tmp/calibrated.xml" --pingpong "$pingpong" --pcollrun "$pcollrun"
    grep -q 'pcoll.reduce_bytes_per_s' "$tmp/calibrated.xml"
    "$sim" -n 2 --calibration "$tmp/calibrated.xml" --model none --compute-ms 0 --steps 20 --count 1024 --modes sync
    ;;
  handover)
    sim=$1
    count=4194304  # 16 MiB of float32: beyond cache_bytes below
    for out in 2e9 8e9; do
      cat > "$tmp/node-$out.xml" <<XML
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
<zone id="world" routing="Full">
  <prop id="pcoll.reduce_bytes_per_s" value="1e10"/>
  <prop id="pcoll.copy_bytes_per_s" value="1e10"/>
  <prop id="pcoll.reduce_cached_bytes_per_s" value="4e10"/>
  <prop id="pcoll.copy_cached_bytes_per_s" value="4e10"/>
  <prop id="pcoll.copy_out_bytes_per_s" value="$out"/>
  <prop id="pcoll.cache_bytes" value="1e6"/>
  <cluster id="node" prefix="node-" suffix="" radical="0-0" speed="1Gf" core="2" bw="5e10Bps" lat="1e-7s" loopback_bw="5e10Bps" loopback_lat="1e-7s"/>
</zone>
</platform>
XML
      "$sim" -n 2 --platform "$tmp/node-$out.xml" --ranks-per-node 2 --model none --compute-ms 0 --steps 10 \
        --count $count --modes sync --json > "$tmp/rows-$out.json"
    done
    /usr/bin/python3 - "$tmp/rows-2e9.json" "$tmp/rows-8e9.json" $count <<'PY'
import json, sys
slow, fast = (json.loads(next(l for l in open(f) if l.startswith("{"))) for f in sys.argv[1:3])
want = int(sys.argv[3]) * 4 * (1 / 2e9 - 1 / 8e9) * 1e6
got = slow["call_us_p50"] - fast["call_us_p50"]
print(f"plan {slow['plan']}: round {slow['call_us_p50']:.1f} us at 2 GB/s, {fast['call_us_p50']:.1f} at 8 GB/s: "
      f"{got:.1f} us apart, the hand-over accounts for {want:.1f}")
if slow["plan"] != "direct" or abs(got - want) > 0.05 * want:
    sys.exit("the hand-over of a vector beyond the cache is not costed at pcoll.copy_out_bytes_per_s")
PY
    ;;
  *)
    echo "sim_checks.sh: unknown check '$what'" >&2
    exit 2
    ;;
esac
