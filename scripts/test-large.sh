#!/usr/bin/env bash
# Model-sized vectors on every provider and mode: tests/multiprocess/large_vector_check at
# P=4 with a 200 MB float32 handle (--count to change), each run under a timeout. Too slow
# for the default suite on a 2-core machine (CI runs the ucx:shm solo case, 'large' suite).
#   bash scripts/test-large.sh [--count N] [--rounds R] [--repeat K]
#                              [--providers "ucx:shm ofi:shm ucx:tcp ofi:tcp"] [--modes "solo majority sync"]
set -euo pipefail
cd "$(dirname "$0")/.."
count=50000000 rounds=20 repeat=1
providers="ucx:shm ofi:shm ucx:tcp ofi:tcp" modes="solo majority sync"
while (($#)); do
  case $1 in
    --count) count=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --providers) providers=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    *) echo "test-large: unknown option $1 (use --count N --rounds R --repeat K --providers P --modes M)" >&2; exit 2 ;;
  esac
done
bash scripts/build.sh >/dev/null
export FI_TCP_IFACE=lo UCX_NET_DEVICES=lo
failed=0 passed=0
for provider in $providers; do
  for mode in $modes; do
    for ((k = 1; k <= repeat; k++)); do
      start=$(date +%s)
      if timeout 900 build/tools/pcollrun -n 4 --provider "$provider" --timeout-ms 120000 \
          build/tests/large_vector_check --count "$count" --rounds "$rounds" --mode "$mode" >/tmp/pcoll-large.log 2>&1; then
        passed=$((passed + 1)); echo "ok   $provider $mode run $k ($(( $(date +%s) - start )) s)"
      else
        failed=$((failed + 1)); echo "FAIL $provider $mode run $k"; tail -5 /tmp/pcoll-large.log
      fi
    done
  done
done
echo "$passed passed, $failed failed"
((failed == 0))
