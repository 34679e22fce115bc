#!/usr/bin/env bash
# The predictions of docs/scaling.md: pcoll_sim on the cluster platforms from P = 16 to 16384,
# every run under a time limit (a run that exceeds it is reported, not waited for).
#   perf/sim/scaling.sh BUILD_DIR OUT.json [LIMIT_S]
# Rows: every pcoll_sim --json row, plus {"timed_out": ...} lines for runs cut off.
set -uo pipefail
build=$1 out=$2 limit=${3:-600}
sim=$build/perf/pcoll_sim
: > "$out"
run() {
  local started=$SECONDS
  if ! timeout "$limit" "$sim" "$@" --json >> "$out"; then
    echo "{\"timed_out\":true,\"limit_s\":$limit,\"args\":\"$*\"}" >> "$out"
  fi
  echo "$(( SECONDS - started )) s: $*" >&2
}
for platform in fat-tree dragonfly; do
  # Imbalance: the paper model (C = 20 ms, D = 16 ms) and lognormal (sigma 0.5), 1 MiB gradients.
  for model in paper lognormal; do
    for P in 16 64 256 1024; do
      run -n $P --platform $platform --ranks-per-node 4 --model $model --steps 10 --modes sync,solo,majority,quorum
    done
    for P in 4096 16384; do
      run -n $P --platform $platform --ranks-per-node 4 --model $model --steps 3 --modes sync,majority,quorum
    done
  done
  # Balanced load: the round itself, per size.
  for count in 2 16384 262144 4194304; do
    for P in 16 64 256 1024 4096 16384; do
      run -n $P --platform $platform --ranks-per-node 4 --model none --compute-ms 0 --steps 3 --count $count --modes sync,majority
    done
  done
done
# Solo's activations at scale (every rank that posts before an activation reaches it starts
# a tree of its own): the paper model to the largest P that runs within the limit.
for P in 2048 4096; do
  run -n $P --platform fat-tree --ranks-per-node 4 --model paper --steps 3 --modes solo
done
