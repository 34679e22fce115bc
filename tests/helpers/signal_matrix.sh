#!/usr/bin/env bash
# The signal matrix (docs/reliability.md, "Signals"): a signal sent to pcollrun or to one
# rank of a running two-rank job must leave, within 3 s, no rank running, no orphan, nothing
# in /dev/shm, and pcollrun's exit status 128 + that signal. The phases: 'run', C ranks
# (pcoll_allreduce) in their rounds; 'compute', Python ranks between rounds (a sleep); and
# 'init', 'create', 'finalize', Python ranks where rank 0 is inside pcoll.init(),
# comm.allreduce() or comm.close(), waiting there for rank 1, which holds back before the
# same call (a rank signal goes to rank 0, the one inside the call). Runs in a private
# /dev/shm (a tmpfs in its own mount namespace).
#
#   signal_matrix.sh BUILD [--ci] [--providers "ofi:shm ucx:shm"] [--signals "INT TERM HUP QUIT USR1"]
#                          [--phases "run compute init create finalize"]
#
# --ci runs the subset CI runs (suite 'signals'): HUP, TERM and USR1 to a C rank, HUP, INT and
# USR1 to pcollrun, on the default provider; HUP to a Python rank on ofi:shm; INT to a rank
# in init, TERM to pcollrun in create, INT to a rank in finalize, on the default provider.
# Prints one line per cell and 'N passed, N failed'; exit status 1 if any failed.
set -uo pipefail
source "$(dirname "$0")/private_dev_shm.sh" 512m "$0" "$@"
build=$(cd "$1" && pwd)
shift
ci=0 providers="ofi:shm ofi:tcp ucx:shm ucx:tcp" signals="INT TERM HUP QUIT USR1"
phases="run compute init create finalize"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ci) ci=1; shift ;;
    --providers) providers="$2"; shift 2 ;;
    --signals) signals="$2"; shift 2 ;;
    --phases) phases="$2"; shift 2 ;;
    *) echo "signal_matrix.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
ulimit -c 0
pcollrun="$build/tools/pcollrun"
allreduce="$build/perf/pcoll_allreduce"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/rounds.py" <<'PY'
import sys, time
import numpy as np
import pcoll
comm = pcoll.init()
with comm.allreduce(1024, dtype="float32", mode="solo") as ar:
    buf = np.ones(1024, np.float32)
    for t in range(1000000):
        ar.run(buf, buf)
        if t == 3:
            print("ready", flush=True)
        time.sleep(0.01)
PY
# The phase cells: rank 0 goes into the phase's call and waits there for rank 1, which
# holds back just before it. Each says 'ready RANK PID' as it gets there.
cat > "$work/phase.py" <<'PY'
import os, sys, time
import numpy as np
import pcoll
phase, rank = sys.argv[1], int(os.environ["PCOLL_RANK"])
def arrive(here):
    if phase != here:
        return
    print("ready", rank, os.getpid(), flush=True)
    if rank == 1:
        time.sleep(3600)
arrive("init")
comm = pcoll.init()
arrive("create")
ar = comm.allreduce(1024, dtype="float32", mode="sync")
buf = np.ones(1024, np.float32)
ar.run(buf, buf)
ar.close()
arrive("finalize")
comm.close()
PY
export PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1 PCOLL_TIMEOUT_MS=5000 UCX_NET_DEVICES=lo FI_TCP_IFACE=lo
passed=0 failed=0

# cell PHASE PROVIDER SIGNAL TARGET: PHASE as above, TARGET pcollrun or rank.
cell() {
  local phase=$1 provider=$2 sig=$3 target=$4
  local out="$work/out" name="$phase $provider SIG$sig to $target"
  local -a command
  case $phase in
    run) command=("$allreduce" -b 64K -e 64K -n 1000000 -w 0) ;;
    compute) command=(/usr/bin/python3 "$work/rounds.py") ;;
    *) command=(/usr/bin/python3 "$work/phase.py" "$phase") ;;
  esac
  PCOLL_PROVIDER=$provider "$pcollrun" -n 2 "${command[@]}" >"$out" 2>&1 &
  local launcher=$! ready=0
  # Python ranks say when they are there; C ranks' output is buffered until they exit, so
  # a C job is taken to be in its rounds a second after both ranks exist. Rank 0 of a
  # phase cell is given half a second to get into the call.
  for _ in $(seq 200); do
    if [[ $phase != run ]]; then
      [[ $(grep -c '^ready' "$out" 2>/dev/null) -ge 2 ]] && { ready=1; break; }
    elif [[ $(pgrep -P "$launcher" | wc -l) -ge 2 ]]; then
      sleep 1; ready=1; break
    fi
    sleep 0.05
  done
  [[ $phase == init || $phase == create || $phase == finalize ]] && sleep 0.5
  local ranks
  ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
  local victim=${ranks%% *}
  [[ $phase != run && $phase != compute ]] && victim=$(sed -n 's/^ready 0 \([0-9]*\)$/\1/p' "$out" | head -1)
  local why=""
  if ((ready == 0)); then
    why="the job did not start"
    kill -KILL "$launcher" $ranks 2>/dev/null
  else
    if [[ $target == pcollrun ]]; then kill -s "$sig" "$launcher"
    else kill -s "$sig" "$victim"; fi
    local gone=0
    for _ in $(seq 60); do
      kill -0 "$launcher" 2>/dev/null || { gone=1; break; }
      sleep 0.05
    done
    if ((gone == 0)); then why="pcollrun still running 3 s after SIG$sig"; kill -KILL "$launcher"; fi
  fi
  wait "$launcher"
  local rc=$?
  local want=$((128 + $(kill -l "$sig")))
  [[ -z $why && $rc != "$want" ]] && why="pcollrun returned $rc, not $want"
  for pid in $ranks; do
    [[ -z $why ]] && kill -0 "$pid" 2>/dev/null && why="rank process $pid still running"
  done
  local left
  left=$(find /dev/shm -mindepth 1 -maxdepth 1 -printf '%f ' 2>/dev/null)
  [[ -z $why && -n $left ]] && why="/dev/shm holds: $left"
  rm -rf /dev/shm/* 2>/dev/null
  for pid in $ranks; do kill -KILL "$pid" 2>/dev/null; done
  if [[ -z $why ]]; then
    passed=$((passed + 1)); echo "ok   $name"
  else
    failed=$((failed + 1)); echo "FAIL $name: $why"; tail -5 "$out" | sed 's/^/     /'
  fi
}

if ((ci)); then
  default=$("$build/tools/pcoll_info" 2>/dev/null | sed -n 's/^providers (default \([^)]*\)).*/\1/p' | head -1)
  [[ -n $default ]] || default=ofi:shm
  for sig in HUP TERM USR1; do cell run "$default" "$sig" rank; done
  for sig in HUP INT USR1; do cell run "$default" "$sig" pcollrun; done
  if [[ -d $build/python/pcoll ]]; then
    cell compute ofi:shm HUP rank
    cell init "$default" INT rank
    cell create "$default" TERM pcollrun
    cell finalize "$default" INT rank
  fi
else
  for provider in $providers; do
    for phase in $phases; do
      [[ $phase != run && ! -d $build/python/pcoll ]] && continue
      for sig in $signals; do
        for target in pcollrun rank; do cell "$phase" "$provider" "$sig" "$target"; done
      done
    done
  done
fi
echo "$passed passed, $failed failed"
((failed == 0))
