#!/usr/bin/env bash
# The whole fault matrix (docs/reliability.md): every fault x phase x survivor behaviour x
# provider, one tests/fault_matrix run per cell (4 ranks started by hand with the store
# bootstrap, the last one the victim). Prints each cell as it finishes, then a table and
# a summary line 'N passed, N failed'. Exit status 1 if any cell failed.
#
#   scripts/test-fault-matrix.sh [--build DIR] [--providers "ofi:shm ofi:tcp ucx:shm ucx:tcp"]
#                                [--faults "..."] [--phases "..."] [--survivors "..."]
#                                [--timeout-ms T] [--log FILE] [--stacks DIR] [--resume]
#
# --log keeps every cell's full report (each survivor's error, the end of its stderr);
# --stacks DIR saves gdb backtraces of any rank that hangs; --resume adds each cell's
# shrink-and-resume outcome (fault_matrix --resume: the survivors shrink, resume their
# elastic handle and run on, with the same results).
#
# About 10 minutes per provider on 2 cores; a failing cell can take up to its 30 s deadline.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build
providers="ofi:shm ofi:tcp ucx:shm ucx:tcp"
faults="kill stop silent reset access eagain"
phases="init create sync solo majority flush destroy"
behaviours="run test compute"
timeout_ms=2000
log=""
stacks=()
resume=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --providers) providers="$2"; shift 2 ;;
    --faults) faults="$2"; shift 2 ;;
    --phases) phases="$2"; shift 2 ;;
    --survivors) behaviours="$2"; shift 2 ;;
    --timeout-ms) timeout_ms="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --stacks) mkdir -p "$2"; stacks=(--stacks "$2"); shift 2 ;;
    --resume) resume=(--resume); shift ;;
    *) echo "test-fault-matrix.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
program="$build/tests/fault_matrix"
if [[ ! -x "$program" ]]; then
  echo "test-fault-matrix.sh: $program is missing: build first (scripts/build.sh)" >&2
  exit 2
fi
[[ -n "$log" ]] && : > "$log"

declare -A result
passed=0 failed=0 skipped=0
started=$(date +%s)
for provider in $providers; do
  for fault in $faults; do
    for phase in $phases; do
      for behaviour in $behaviours; do
        line=$("$program" --fault "$fault" --phase "$phase" --survivors "$behaviour" \
                 --provider "$provider" --timeout-ms "$timeout_ms" --verbose "${stacks[@]}" "${resume[@]}" 2>&1)
        status=$?
        echo "$line" | head -n 1
        [[ -n "$log" ]] && echo "$line" >> "$log"
        key="$fault/$phase/$behaviour/$provider"
        case $status in
          0) result[$key]="ok"; passed=$((passed + 1)) ;;
          77) result[$key]="-"; skipped=$((skipped + 1)) ;;
          *) result[$key]="FAIL"; failed=$((failed + 1))
             echo "$line" | tail -n +2 | head -n 6 ;;
        esac
      done
    done
  done
done
elapsed=$(( $(date +%s) - started ))

# The table: one row per fault and phase, one column per provider and survivor behaviour
# (r = run, t = test, c = compute); ok, FAIL, or - where the cell does not apply.
echo
printf '%-8s %-9s' "fault" "phase"
for provider in $providers; do printf ' | %-14s' "$provider"; done
echo
printf '%-8s %-9s' "" ""
for provider in $providers; do
  printf ' |'
  for behaviour in $behaviours; do printf ' %-4s' "${behaviour:0:1}"; done
done
echo
for fault in $faults; do
  for phase in $phases; do
    printf '%-8s %-9s' "$fault" "$phase"
    for provider in $providers; do
      printf ' |'
      for behaviour in $behaviours; do printf ' %-4s' "${result[$fault/$phase/$behaviour/$provider]}"; done
    done
    echo
  done
done
echo
echo "$passed passed, $failed failed ($skipped not applicable; ${elapsed} s)"
[[ $failed -eq 0 ]]
