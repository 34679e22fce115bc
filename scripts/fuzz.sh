#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in ./build-fuzz and runs each for SECONDS_PER_TARGET (default 20)
# from a copy of its checked-in corpus (tests/fuzz/corpus/<target>). Fails on any crash,
# overread, undefined behaviour, leak or broken invariant; the input that caused it is left
# in build-fuzz/artifacts/ (add it to the corpus with the fix).
#   usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ not found; bash scripts/install-deps.sh installs clang and libclang-rt-14-dev" >&2
  exit 1
fi
if [[ ! -f build-fuzz/build.ninja ]]; then
  # A build of its own, so the gcc build in build/ is left as it is. The libraries get
  # coverage instrumentation (fuzzer-no-link); the targets link libFuzzer.
  # -O1 with line tables only, as the sanitizer builds.
  CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Doptimization=1 -Ddebug=false \
    -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args='-fsanitize=fuzzer-no-link -gline-tables-only' \
    -Dcpp_args='-fsanitize=fuzzer-no-link -gline-tables-only'
fi
targets=()
for source in tests/fuzz/fuzz_*.cpp; do
  target="$(basename "$source" .cpp)"
  # fuzz_ucx_key exists only where the UCX provider is built.
  if grep -q "build tests/fuzz/$target:" build-fuzz/build.ninja; then targets+=("$target"); fi
done
ninja -C build-fuzz "${targets[@]/#/tests/fuzz/}"
# Each target sees only the layer it fuzzes (its dependency in tests/fuzz/meson.build); the
# layering of the layers themselves is checked on this build too.
/usr/bin/python3 tests/unit/layering.py build-fuzz .

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p build-fuzz/artifacts
for target in "${targets[@]}"; do
  work="build-fuzz/corpus-run/$target"
  rm -rf "$work" && mkdir -p "$work"
  cp tests/fuzz/corpus/"$target"/* "$work"/
  echo "fuzz: $target for ${seconds}s"
  "build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$target-" "$work"
done
echo "fuzz: ${#targets[@]} targets ran clean (${targets[*]})"
