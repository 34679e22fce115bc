#!/usr/bin/env bash
# One command from a fresh clone: install what is missing, build, and run the demo on the
# default one-node provider (libfabric shm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
echo "== pcoll_pingpong: write_notify latency and bandwidth over ofi:shm (2 ranks)"
timeout 300 build/util/pcollrun -n 2 build/perf/pcoll_pingpong -S 8 -I 20000
timeout 300 build/util/pcollrun -n 2 build/perf/pcoll_pingpong -S 1M -I 2000
