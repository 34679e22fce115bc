#!/usr/bin/env bash
# The collective suite (tests/helpers/collective_rules.cpp) over real processes at every P
# from 1 to 8 on ofi:shm and ucx:shm, each run under a timeout. `meson test` runs the cells
# that differ in kind (P = 1..5 and 8 on ofi:shm, P = 3 and 4 on ucx:shm; suite 'wide' for
# P >= 5); this script adds P = 6 and 7 and the ucx:shm sizes the suites leave out.
#   usage: scripts/test-collective-matrix.sh [P...]     (default 1 2 3 4 5 6 7 8)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
((${#sizes[@]})) || sizes=(1 2 3 4 5 6 7 8)
bash scripts/build.sh >/dev/null
failed=0 passed=0
for provider in ofi:shm ucx:shm; do
  for p in "${sizes[@]}"; do
    start=$(date +%s)
    if env PCOLL_PROVIDER=$provider timeout 300 build/tools/pcollrun -n "$p" --timeout-ms 20000 \
        build/tests/collective_check >/tmp/pcoll-collective-matrix.log 2>&1; then
      passed=$((passed + 1)); echo "ok   $provider P=$p ($(( $(date +%s) - start )) s)"
    else
      failed=$((failed + 1)); echo "FAIL $provider P=$p"; tail -30 /tmp/pcoll-collective-matrix.log
    fi
  done
done
echo "$passed passed, $failed failed"
((failed == 0))
