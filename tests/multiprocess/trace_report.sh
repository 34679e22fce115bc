#!/usr/bin/env bash
# The round trace and its report (docs/observability.md), end to end: a slowrank
# pcoll_imbalance run with --trace gives a report that names the slow rank as the latest and
# draws the heatmap; with rank 1's trace clock skewed by 5 s (an emulated host with another
# clock) the recorded offset says so and the report still lines the ranks up; in a paper run
# the ranks drawn in a round stand out as late (trace_paper_check.py).
# Usage: trace_report.sh PCOLLRUN PCOLL_IMBALANCE PCOLL_TRACE_PY
set -euo pipefail
pcollrun=$1 imbalance=$2 report=$3
here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {  # run DIR [skew of rank 1 in ms]
  mkdir -p "$1"
  "$pcollrun" -n 3 --provider ofi:shm --timeout-ms 20000 /bin/sh -c \
    'if [ "$PCOLL_RANK" = 1 ] && [ -n "$0" ]; then export PCOLL_TEST_CLOCK_SKEW_MS=$0; fi; shift; exec "$@"' \
    "${2:-}" - "$imbalance" --model slowrank --slow-rank 2 --slow-factor 4 --compute-ms 4 \
    --steps 20 --count 256 --modes solo --trace "$1" >/dev/null
  ls "$1"/pcoll-trace.rank{0,1,2}.handle*.json >/dev/null
}
check() {  # check JSON_REPORT PYTHON_CONDITION MESSAGE
  /usr/bin/python3 -c "import json,sys; h=[x for x in json.load(open(sys.argv[1])) if x['mode']=='solo'][0]; r=h['rows']; sys.exit(0 if ($2) else 1)" "$1" \
    || { echo "trace_report.sh: $3"; cat "$1"; exit 1; }
}

run "$dir/plain"
/usr/bin/python3 "$report" "$dir/plain" --png "$dir/plain.png" --merged "$dir/merged.json"
/usr/bin/python3 "$report" "$dir/plain" --json >"$dir/plain.report"
check "$dir/plain.report" "h['latest'] == 2" "the slow rank 2 is not named the latest"
check "$dir/plain.report" "r[2]['late_fraction'] > 0 and r[2]['post_after_initiator_mean_ms'] > 4" \
  "the slow rank 2 is not late, or posts less than a compute step after the initiator"
[[ -s $dir/plain.png && -s $dir/merged.json ]] || { echo "trace_report.sh: no heatmap or merged trace"; exit 1; }

run "$dir/skewed" 5000
/usr/bin/python3 "$report" "$dir/skewed" --json >"$dir/skewed.report"
check "$dir/skewed.report" "abs(h['clock_offset_ns']['1'] - 5e9) < 0.5e9 and abs(h['clock_offset_ns']['2']) < 0.5e9" \
  "the recorded clock offsets do not show rank 1's 5 s skew"
check "$dir/skewed.report" "h['latest'] == 2 and abs(r[1]['post_after_initiator_mean_ms']) < 1000" \
  "with rank 1's clock skewed the report no longer lines the ranks up"

mkdir -p "$dir/paper"
"$pcollrun" -n 4 --provider ofi:shm --timeout-ms 20000 "$imbalance" --model paper --compute-ms 4 --delay-ms 8 \
  --steps 30 --count 256 --modes solo --trace "$dir/paper" >/dev/null
/usr/bin/python3 "$report" "$dir/paper" --json >"$dir/paper.report"
/usr/bin/python3 "$here/trace_paper_check.py" "$dir/paper.report" "$dir/paper/pcoll_imbalance.schedule.csv"
echo "trace_report.sh: slow rank named, heatmap drawn, 5 s skew corrected, drawn ranks late"
