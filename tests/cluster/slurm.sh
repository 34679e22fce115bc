#!/usr/bin/env bash
# A one-node Slurm cluster of its own (munged, slurmctld, slurmd under a temp folder, on
# 127.0.0.1 and free ports), then for each MPI plugin given (pmix, pmi2):
#   srun -n 4 --mpi=PLUGIN pcoll_info --json     -> every rank selects that bootstrap
#   srun -n 4 --mpi=PLUGIN bootstrap_rank gather 3  (allgathers of 0 B .. 1 MiB blobs)
#   srun -n 4 --mpi=PLUGIN collective_check -tc=...
# The daemons are stopped by PID and the folder removed on every exit (trap).
#   usage: slurm.sh pmix|pmi2 [...]
set -euo pipefail
source "$(dirname "$0")/common.sh"

(($#)) || die "usage: slurm.sh pmix|pmi2 [...]"
need_root
need srun slurm-client
need slurmctld slurmctld
need slurmd slurmd
need munged munge
need mungekey munge
require_programs PCOLL_TEST_COLLECTIVE_CHECK PCOLL_TEST_INFO PCOLL_TEST_RANK_PROGRAM
plugin_dir=$(dirname "$(find /usr/lib /usr/lib64 /usr/local/lib -name 'mpi_pmi2.so' -path '*slurm*' 2>/dev/null | head -n1)")
for plugin in "$@"; do
  [[ -e $plugin_dir/mpi_$plugin.so ]] || skip "Slurm's mpi_$plugin plugin is not installed (slurm-wlm)"
done

work=$(mktemp -d /tmp/pcoll-slurm.XXXXXX)
pids=()      # the daemons
srun_pid=""  # the srun running now
# slurmstepd processes of this cluster (they outlive slurmd), found by the SLURM_CONF they
# inherited from it.
our_stepds() {
  local dir
  for dir in /proc/[0-9]*; do
    [[ $(cat "$dir/comm" 2>/dev/null) == slurmstepd ]] || continue
    { tr '\0' '\n' <"$dir/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$work/slurm.conf" && echo "${dir#/proc/}"
  done
}
cleanup() {
  local rc=$? stepds
  trap - EXIT INT TERM
  # Jobs first (while the daemons can still end their steps), for at most ~5 s.
  [[ -n $srun_pid ]] && kill -TERM "$srun_pid" 2>/dev/null
  if [[ -n ${SLURM_CONF:-} ]] && ((${#pids[@]} > 1)); then
    timeout 2 scancel --quiet --user=root 2>/dev/null || true
    local deadline=$((SECONDS + 4))
    while ((SECONDS < deadline)) && [[ -n $(timeout 1 squeue -h 2>/dev/null) ]]; do sleep 0.2; done
  fi
  [[ -n $srun_pid ]] && stop_pids "$srun_pid"
  ((${#pids[@]})) && stop_pids "${pids[@]}"
  mapfile -t stepds < <(our_stepds)
  ((${#stepds[@]})) && stop_pids "${stepds[@]}"
  if ((rc != 0)); then
    for log in "$work"/*.log; do
      [[ -f $log ]] && { echo "--- $log (last 30 lines)"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- munge: a fresh key and a private socket.
mkdir -m 0700 "$work/munge"
mungekey --create --keyfile="$work/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$work/munge/munge.key"
setsid munged --foreground --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/seed" \
  >>"$work/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $work/munge/munge.sock ]] && break; sleep 0.1; done
[[ -S $work/munge/munge.sock ]] || die "munged did not create its socket"

# --- slurm.conf: one node of 8 CPUs (config_overrides: more than this machine has), no cgroups.
host=$(hostname -s)
ctld_port=$(free_port)
slurmd_port=$(free_port)
mkdir -p "$work/state" "$work/spool/pcollnode"
cat >"$work/slurm.conf" <<CONF
ClusterName=pcolltest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
KillWait=5
InactiveLimit=0
MinJobAge=5
NodeName=pcollnode NodeAddr=127.0.0.1 NodeHostname=$host CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=pcoll Nodes=pcollnode Default=YES MaxTime=10 State=UP
CONF
export SLURM_CONF=$work/slurm.conf
# Nothing of the caller's Slurm environment (an outer allocation) may leak into ours.
while IFS= read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SALLOC_|SRUN_)' | grep -vx SLURM_CONF || true)

setsid slurmctld -D -i -f "$SLURM_CONF" >>"$work/slurmctld.out.log" 2>&1 &
pids+=($!)
setsid slurmd -D -N pcollnode -f "$SLURM_CONF" >>"$work/slurmd.out.log" 2>&1 &
pids+=($!)

state=""
for _ in $(seq 300); do
  state=$(timeout 5 sinfo -h -n pcollnode -o %T 2>/dev/null | head -n1 || true)
  [[ $state == idle ]] && break
  sleep 0.1
done
[[ $state == idle ]] || die "the test cluster's node is '${state:-unreachable}', not idle, after 30 s"
echo "slurm: one-node cluster up (node pcollnode, 8 CPUs, slurmctld port $ctld_port)"

# srun runs in the background and the script waits for it: a signal to the script then
# runs the trap at once (bash defers traps while a foreground child runs).
run_srun() {
  "$@" &
  srun_pid=$!
  local rc=0
  wait "$srun_pid" || rc=$?
  srun_pid=""
  return "$rc"
}

for plugin in "$@"; do
  echo "=== srun -n 4 --mpi=$plugin"
  run_srun timeout 60 srun -n 4 --mpi="$plugin" --kill-on-bad-exit=1 -t 2 "$PCOLL_TEST_INFO" --json -p ofi:shm \
    >"$work/info-$plugin.json" || die "srun --mpi=$plugin pcoll_info failed"
  check_bootstrap "$plugin" "$work/info-$plugin.json"
  # Repeated allgathers of blobs up to 1 MiB (PMI2 values are split), verified on every rank.
  run_srun timeout 60 srun -n 4 --mpi="$plugin" --kill-on-bad-exit=1 -t 2 "$PCOLL_TEST_RANK_PROGRAM" gather 3 ||
    die "srun --mpi=$plugin bootstrap_rank gather failed"
  run_srun timeout 60 srun -n 4 --mpi="$plugin" --kill-on-bad-exit=1 -t 2 "$PCOLL_TEST_RANK_PROGRAM" barrier-late 300 ||
    die "srun --mpi=$plugin: a barrier let ranks through early"
  run_srun timeout 120 srun -n 4 --mpi="$plugin" --kill-on-bad-exit=1 -t 3 \
    "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ||
    die "srun -n 4 --mpi=$plugin collective_check failed"
done
echo "slurm: all runs passed"
