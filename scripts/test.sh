#!/usr/bin/env bash
# Builds pcoll and runs every test (unit, transport conformance, bootstrap, collectives).
# Multi-process tests run one at a time: they need both cores, and each has a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
meson test -C build --num-processes 1 --print-errorlogs "$@"
# The default `meson test` leaves out suite 'wide' (tests/meson.build); every test runs here.
if (($# == 0)); then
  meson test -C build --setup wide --suite wide --num-processes 1 --print-errorlogs
fi
