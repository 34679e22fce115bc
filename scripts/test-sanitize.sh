#!/usr/bin/env bash
# Builds pcoll with AddressSanitizer + UndefinedBehaviorSanitizer in ./build-sanitize and
# runs the unit, transport and collective suites there: the progress thread and the
# application thread share state, and no race, leak or undefined behaviour may hide there.
# Left out, to keep CI within its time: suites that need UCX, MPI, Slurm or Python, the
# collective runs at P >= 5 ('wide': the same code as P <= 4 with more peers) and the
# 32-bit layout runs ('notify32': the codec is unit-tested and fuzzed under ASan).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build-sanitize/build.ninja ]]; then
  meson setup build-sanitize -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dpython=disabled
fi
ninja -C build-sanitize
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
meson test -C build-sanitize --num-processes 1 --print-errorlogs --timeout-multiplier 3 \
  --no-suite bootstrap --no-suite perf --no-suite cluster --no-suite ucx --no-suite python \
  --no-suite packaging --no-suite large --no-suite wide --no-suite notify32 "$@"
