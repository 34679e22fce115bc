#!/usr/bin/env bash
# The whole collective-mismatch matrix (docs/reliability.md, "Mismatched calls"): every
# ordered pair of create, destroy, barrier, finalize, flush and run on two ranks, each call
# outside rounds against a solo run, and P=3 cases, on every provider. One
# tests/mismatch_check job per cell through pcollrun: equal calls must succeed, different
# ones fail with PCOLL_ERR_MISMATCH on every rank, naming both calls, within the timeout.
# Prints each cell as it finishes, then one line per provider and a summary line
# 'N passed, N failed'. Exit status 1 if any cell failed.
#
#   scripts/test-mismatch-matrix.sh [--build DIR] [--providers "ofi:shm ofi:tcp ucx:shm ucx:tcp"]
#                                   [--timeout-ms T] [--log FILE]
set -uo pipefail
cd "$(dirname "$0")/.."

build=build
providers="ofi:shm ofi:tcp ucx:shm ucx:tcp"
timeout_ms=5000
log=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --providers) providers="$2"; shift 2 ;;
    --timeout-ms) timeout_ms="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    *) echo "test-mismatch-matrix.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
program="$build/tests/mismatch_check"
pcollrun="$build/tools/pcollrun"
for needed in "$program" "$pcollrun"; do
  if [[ ! -x "$needed" ]]; then
    echo "test-mismatch-matrix.sh: $needed is missing: build first (scripts/build.sh)" >&2
    exit 2
  fi
done
[[ -n "$log" ]] && : > "$log"

calls="create destroy barrier finalize flush run"
cells=()
for first in $calls; do
  for second in $calls; do
    cells+=("--rank0 $first --rank1 $second")
  done
done
for other in create destroy barrier finalize; do
  cells+=("--rank0 $other --rank1 run --mode solo --delay-ms 300")
  cells+=("--rank0 $other --rank1 run --mode majority --delay-ms 300")
done
cells+=("--rank0 create --rank1 create --rank2 finalize"
        "--rank0 run --rank1 run --rank2 barrier"
        "--rank0 destroy --rank1 destroy --rank2 run"
        "--rank0 flush --rank1 flush --rank2 run"
        "--rank0 barrier --rank1 run --rank2 run"
        "--rank0 create --rank1 destroy --rank2 barrier"
        "--rank0 finalize --rank1 run --rank2 run --mode solo --delay-ms 300"
        "--rank0 destroy --rank1 destroy --rank2 run --late-rank 0 --delay-ms 300"
        "--rank0 finalize --rank1 finalize --rank2 run --late-rank 0 --delay-ms 300"
        "--rank0 barrier --rank1 barrier --rank2 run --late-rank 0 --delay-ms 300")

declare -A passed_by failed_by
passed=0 failed=0
started=$(date +%s)
for provider in $providers; do
  passed_by[$provider]=0 failed_by[$provider]=0
  for cell in "${cells[@]}"; do
    # shellcheck disable=SC2086
    ranks=$(echo $cell | grep -o -- '--rank[0-9]*' | wc -l)
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    output=$(PCOLL_PROVIDER="$provider" FI_TCP_IFACE=lo UCX_NET_DEVICES=lo timeout 60 \
               "$pcollrun" -n "$ranks" --timeout-ms "$timeout_ms" "$program" $cell 2>&1)
    status=$?
    seconds=$(echo "$(date +%s.%N) - $t0" | bc)
    name="$provider P=$ranks ${cell//--rank[0-9] /}"
    if [[ $status -eq 0 ]]; then
      printf 'ok    %-70s %5.1f s\n' "$name" "$seconds"
      passed=$((passed + 1)); passed_by[$provider]=$((passed_by[$provider] + 1))
    else
      printf 'FAIL  %-70s %5.1f s (exit %d%s)\n' "$name" "$seconds" "$status" "$([[ $status -eq 124 ]] && echo ', hung')"
      failed=$((failed + 1)); failed_by[$provider]=$((failed_by[$provider] + 1))
    fi
    [[ -n "$log" ]] && printf '== %s (exit %d)\n%s\n' "$name" "$status" "$output" >> "$log"
  done
done
echo
for provider in $providers; do
  printf '%-10s %3d passed, %3d failed\n' "$provider" "${passed_by[$provider]}" "${failed_by[$provider]}"
done
echo "$passed passed, $failed failed ($(( $(date +%s) - started )) s)"
[[ $failed -eq 0 ]]
