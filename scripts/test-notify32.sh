#!/usr/bin/env bash
# The collective suite in the 32-bit notification layout (docs/design.md, "Notifications"),
# every mode at P = 2..8: on ofi:shm with libfabric carrying only 4 bytes of remote CQ data
# (PCOLL_TEST_OFI_CQ_DATA_SIZE=4: the width is then chosen automatically, as on verbs and
# EFA) and on ofi:tcp with the layout forced (PCOLL_NOTIFY_BITS=32). Each run under a
# timeout. The default suite runs one case of each and the transport conformance cases
# (suite notify32); CI runs this whole matrix.
#   usage: scripts/test-notify32.sh [P...]     (default 2 3 4 5 6 7 8)
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
((${#sizes[@]})) || sizes=(2 3 4 5 6 7 8)
bash scripts/build.sh >/dev/null
export FI_TCP_IFACE=lo
failed=0 passed=0
for provider in ofi:shm ofi:tcp; do
  if [[ $provider == ofi:shm ]]; then mode=PCOLL_TEST_OFI_CQ_DATA_SIZE=4; else mode=PCOLL_NOTIFY_BITS=32; fi
  for p in "${sizes[@]}"; do
    start=$(date +%s)
    if env PCOLL_PROVIDER=$provider $mode timeout 300 build/tools/pcollrun -n "$p" --timeout-ms 20000 \
        build/tests/collective_check >/tmp/pcoll-notify32.log 2>&1; then
      passed=$((passed + 1)); echo "ok   $provider $mode P=$p ($(( $(date +%s) - start )) s)"
    else
      failed=$((failed + 1)); echo "FAIL $provider $mode P=$p"; tail -30 /tmp/pcoll-notify32.log
    fi
  done
done
echo "$passed passed, $failed failed"
((failed == 0))
