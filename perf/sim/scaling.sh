#!/usr/bin/env bash
# The predictions of docs/scaling.md: pcoll_sim on the cluster platforms from P = 16 to
# 16384, 4 ranks per node, every run under a time limit (a run cut off is recorded, not
# waited for). Fewer steps at large P keep each run within minutes here.
#   perf/sim/scaling.sh BUILD_DIR OUT.json [LIMIT_S] [all|imbalance|balanced]
# Rows: every pcoll_sim --json row, plus {"timed_out": ...} lines for runs cut off;
# perf/sim/plot_scaling.py OUT.json DIR draws and tabulates them.
set -uo pipefail
build=$1 out=$2 limit=${3:-600} part=${4:-all}
sim=$build/perf/pcoll_sim
: > "$out"
run() {
  local started=$SECONDS
  if ! timeout "$limit" "$sim" "$@" --ranks-per-node 4 --json >> "$out"; then
    echo "{\"timed_out\":true,\"limit_s\":$limit,\"args\":\"$*\"}" >> "$out"
  fi
  echo "$(( SECONDS - started )) s: $*" >&2
}
for platform in fat-tree dragonfly; do
  # Imbalance: the paper model (C = 20 ms, D = 16 ms) and lognormal (sigma 0.5), 1 MiB.
  for model in paper lognormal; do
    [[ $part == balanced ]] && break
    for P in 16 64 256; do
      run -n $P --platform $platform --model $model --steps 10 --modes sync,solo,majority,quorum
    done
    run -n 1024 --platform $platform --model $model --steps 5 --modes sync,solo,majority,quorum
    run -n 4096 --platform $platform --model $model --steps 3 --modes sync,solo,majority,quorum
    run -n 16384 --platform $platform --model $model --steps 2 --modes sync,solo,majority,quorum
  done
  # Balanced load: the round itself, per size (8 B, 64 KiB, 1 MiB, 16 MiB), every mode.
  [[ $part == imbalance ]] && continue
  for P in 16 64 256 1024; do
    for count in 2 16384 262144 4194304; do
      run -n $P --platform $platform --model none --compute-ms 0 --steps 5 --count $count --modes sync,solo,majority,quorum
    done
  done
  for count in 2 16384 262144; do
    run -n 4096 --platform $platform --model none --compute-ms 0 --steps 3 --count $count --modes sync,solo,majority,quorum
  done
  for count in 2 262144; do
    run -n 16384 --platform $platform --model none --compute-ms 0 --steps 2 --count $count --modes sync,solo,majority,quorum
  done
done
