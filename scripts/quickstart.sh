#!/usr/bin/env bash
# One command from a fresh clone: install what is missing, build, and run the demos on the
# default one-node provider (UCX shared memory, libfabric shm without UCX): transport
# ping-pong, the eager-SGD imbalance experiment (sync vs solo vs majority on 4 ranks), then
# the same on a real training job from Python (time to accuracy, torch DDP beside).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
echo "== pcoll_pingpong: write_notify latency and streaming bandwidth, default provider (2 ranks)"
timeout 120 build/tools/pcollrun -n 2 build/perf/pcoll_pingpong -S 8 -I 5000
timeout 120 build/tools/pcollrun -n 2 build/perf/pcoll_pingpong -S 1M -I 2000 --bw
echo
echo "== pcoll_imbalance: 4 ranks, each step two random ranks compute 16 ms longer than 20 ms"
timeout 180 build/tools/pcollrun -n 4 build/perf/pcoll_imbalance --model paper --compute-ms 20 --delay-ms 16 \
  --steps 100 --modes sync,solo,majority
echo
if [[ -d build/python/pcoll ]]; then
  echo "== train_imbalance.py: 4 ranks train an MLP on digits (real compute; two random ranks sleep 0.8x it"
  echo "   each step); time to sync's accuracy for sync, solo, majority and torch DDP"
  PYTHONPATH=build/python timeout 300 build/tools/pcollrun -n 4 /usr/bin/python3 perf/train_imbalance.py \
    --model paper --steps 150
else
  echo "== train_imbalance.py skipped: the Python package was not built (see meson's summary)"
fi
