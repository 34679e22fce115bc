#!/usr/bin/env bash
# Builds pcoll with ThreadSanitizer in ./build-tsan and runs the engine's suites with ranks as
# threads (tests/threads: every collective rule for P = 2..8 in every mode, and the
# in-process bootstrap and provider). Ranks as threads over the in-process provider run
# nothing but pcoll's own code, so every access TSan sees is instrumented; libfabric is
# linked but never called. UCX is left out: merely loading libucm under TSan crashes any
# thread at exit (libucm's madvise hook, which glibc calls when it frees a thread's stack,
# runs inside TSan's thread teardown), a UCX matter, not pcoll's. Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# -O1 with line tables only (-g1), as the AddressSanitizer build: reports keep their stacks.
options=(-Db_sanitize=thread -Db_lundef=false -Doptimization=1 -Ddebug=false
         -Dc_args=-g1 -Dcpp_args=-g1 -Ducx=disabled)
if [[ ! -f build-tsan/build.ninja ]]; then
  meson setup build-tsan "${options[@]}"
else
  meson configure build-tsan "${options[@]}"
fi
# Only what runs: the rest of the tree (perf tools, multi-process tests) adds build time
# and nothing TSan could check here.
ninja -C build-tsan tests/engine_threads tests/test_inproc tests/test_stats
# halt_on_error: the first race fails the test with its report; second_deadlock_stack:
# lock-order reports show both stacks.
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# CI runs P = 2..4 (P = 3 has the fold-in of a non-power-of-two); `--whole` adds the P >= 5
# half of the engine rules, which is in suite 'wide' (hence --setup wide).
tests=('engine rules as threads P=2..4' 'inproc bootstrap and provider' 'allreduce stats as threads')
if [[ ${1:-} == --whole ]]; then
  shift
  tests+=('engine rules as threads P=5..8')
fi
meson test -C build-tsan --no-rebuild --setup wide --num-processes 1 --print-errorlogs --timeout-multiplier 3 \
  "${tests[@]}" "$@"
