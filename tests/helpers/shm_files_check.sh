#!/usr/bin/env bash
# No file of pcoll's stays in /dev/shm (docs/reliability.md, "Files in /dev/shm"): a job on
# ofi:shm whose rank is killed with SIGKILL leaves none once pcollrun has returned, and a
# later process on ofi:shm removes those of departed processes, never those of live ones.
# Runs in a private /dev/shm (a tmpfs in its own mount namespace) so that concurrent tests
# neither disturb nor are disturbed.
# usage: shm_files_check.sh PCOLLRUN PCOLL_ALLREDUCE
set -euo pipefail
source "$(dirname "$0")/private_dev_shm.sh" 256m "$0" "$@"
pcollrun=$1 allreduce=$2
export PCOLL_PROVIDER=ofi:shm PCOLL_TIMEOUT_MS=5000
ns=$(readlink /proc/self/ns/pid | tr -dc 0-9)
pcoll_files() { find /dev/shm -maxdepth 1 -name 'pcoll_*' -printf '%f\n' | sort; }

# 1. A rank killed by SIGKILL in the middle of its rounds.
"$pcollrun" -n 2 "$allreduce" -b 1M -e 1M -n 1000000 -w 0 >/dev/null 2>&1 &
launcher=$!
for _ in $(seq 100); do
  [[ $(pcoll_files | wc -l) -ge 2 ]] && break
  sleep 0.1
done
[[ $(pcoll_files | wc -l) -ge 2 ]] || { echo "FAIL: the job made no endpoint files in /dev/shm"; exit 1; }
victim=$(pgrep -P "$launcher" | head -1)
kill -KILL "$victim"
set +e
wait "$launcher"
rc=$?
set -e
[[ $rc == $((128 + 9)) ]] || { echo "FAIL: pcollrun returned $rc, not 137 for a rank killed by SIGKILL"; exit 1; }
left=$(pcoll_files)
[[ -z "$left" ]] || { echo "FAIL: after the killed job /dev/shm holds: $left"; exit 1; }
echo "ok: a job with a rank killed by SIGKILL left nothing in /dev/shm"

# 2. Files of a departed process (another launcher's, say) and of a live one.
sh -c 'exit 0' &
dead=$!
wait "$dead"
touch "/dev/shm/pcoll_${ns}_${dead}_1:0:0" "/dev/shm/pcoll_${ns}_$$_2:0:0" "/dev/shm/pcoll_1_${dead}_3:0:0"
"$pcollrun" -n 1 "$allreduce" -b 8 -e 8 -n 2 >/dev/null
left=$(pcoll_files | tr '\n' ' ')
[[ "$left" == "pcoll_1_${dead}_3:0:0 pcoll_${ns}_$$_2:0:0 " ]] ||
  { echo "FAIL: expected only the live process's file and the other namespace's, found: $left"; exit 1; }
echo "ok: the departed process's file was removed, the live one's and another namespace's kept"
