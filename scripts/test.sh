#!/usr/bin/env bash
# Builds pcoll and runs every test (unit, transport conformance, bootstrap, collectives).
# Multi-process tests run one at a time: they need both cores, and each has a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
meson test -C build --num-processes 1 --print-errorlogs "$@"
