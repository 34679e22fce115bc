#!/usr/bin/env bash
# The store's hostile-client cases (tests/multiprocess/test_store_hostile.cpp) with bigger
# floods than CI runs: every flood opens FLOOD connections (default 2000) instead of
# 64-200. The process that hosts the store must stay within the same bounds.
#   bash scripts/test-store-hostile.sh [FLOOD]
set -euo pipefail
cd "$(dirname "$0")/.."
flood="${1:-2000}"
[[ -f build/build.ninja ]] || meson setup build -Dwerror=true
ninja -C build tests/test_store_hostile tests/bootstrap_rank tools/pcollrun
# The test process holds every connection of a flood open.
ulimit -n "$(ulimit -Hn)"
PCOLL_TEST_FLOOD="$flood" PCOLL_TEST_PCOLLRUN="$PWD/build/tools/pcollrun" \
  PCOLL_TEST_RANK_PROGRAM="$PWD/build/tests/bootstrap_rank" \
  timeout 600 build/tests/test_store_hostile
