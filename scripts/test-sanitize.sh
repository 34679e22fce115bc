#!/usr/bin/env bash
# Builds pcoll with AddressSanitizer + UndefinedBehaviorSanitizer in ./build-sanitize and
# runs the engine's suites there: the progress thread and the application thread share
# state, peers' bytes are parsed, and no race, leak or undefined behaviour may hide there.
#
#   scripts/test-sanitize.sh           CI's subset (below)
#   scripts/test-sanitize.sh --whole   every suite the sanitizers can run
#   scripts/test-sanitize.sh ARGS...   meson test ARGS in the sanitizer build
#
# Always left out: suites that need UCX (UCX under ASan is not pcoll's to fix), MPI, Slurm or
# Python, the collective runs at P >= 5 ('wide': the same code as P <= 4 with more peers)
# and the 32-bit layout runs ('notify32': the codec is unit-tested and fuzzed under ASan).
# CI's subset also leaves out suite 'slow' (the soak runs, the killed-rank test, which waits
# out timeouts, and the longest absorbed-fault cell), suite 'config' (each a program refusing
# one bad setting; the settings readers are fuzzed under ASan), suite 'exhaustive' (the
# schedule test's walk of every interleaving: pure logic, a minute here under ASan, run in
# the default build and by --whole), suite 'scale' (the rules at P = 32 and 64 as threads:
# the same code as P <= 8, minutes under ASan), the rules as threads at P = 2 and 4 (P = 3
# runs), and the collective cells
# that repeat a provider at another P: it runs the unit, threads, transport, bootstrap
# (the store under hostile clients), fault and mismatch suites, and the collective
# semantics once per ofi provider, routed over emulated hosts, and without atomics.
# Only what the chosen tests run is built (scripts/test-targets.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# -O1 with line tables only (-g1): the sanitizers' reports keep function names and lines,
# and the build takes about half the time of -O2 -g (27 s against 12 s for the engine's
# largest file here). An existing build directory is brought to these options.
options=(-Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Ddebug=false
         -Dc_args='-g1 -fno-omit-frame-pointer' -Dcpp_args='-g1 -fno-omit-frame-pointer' -Dpython=disabled)
if [[ ! -f build-sanitize/build.ninja ]]; then
  meson setup build-sanitize "${options[@]}"
else
  meson configure build-sanitize "${options[@]}"
fi
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
never=(--no-suite perf --no-suite cluster --no-suite ucx --no-suite python --no-suite packaging
       --no-suite large --no-suite wide --no-suite notify32)
whole=("${never[@]}")
ci_suites=(--suite unit --suite threads --suite transport --suite bootstrap --suite fault --suite mismatch
           "${never[@]}" --no-suite slow --no-suite config --no-suite exhaustive --no-suite scale)
ci_collective=('collective ofi-shm P=3' 'collective ofi-tcp P=2' 'quorum refused without remote atomics ofi-shm P=2'
               'routed ofi, two emulated hosts P=4' 'ofi-shm leaves no file in /dev/shm after SIGKILL')
run() {
  local selection=()
  for a in "$@"; do [[ $a == --test-args=* ]] || selection+=("$a"); done
  # shellcheck disable=SC2046
  ninja -C build-sanitize $(/usr/bin/python3 scripts/test-targets.py build-sanitize "${selection[@]}")
  meson test -C build-sanitize --no-rebuild --num-processes 1 --print-errorlogs --timeout-multiplier 3 "$@"
}
if (($# == 0)); then
  run "${ci_suites[@]}" --no-suite engine_rules
  # The engine's rules as threads at P = 3 alone (the fold-in of a non-power-of-two, every
  # rule): P = 2 and 4 add nothing the sanitizers would see (ThreadSanitizer runs all three).
  run 'engine rules as threads P=2..4' --test-args=--ranks=3
  run "${ci_collective[@]}"
elif [[ $1 == --whole ]]; then
  shift
  run "${whole[@]}" "$@"
else
  run "$@"
fi
