# Shared helpers of the cluster test scripts (sourced, not run). Each script gets the
# programs it runs from the environment meson sets:
#   PCOLL_TEST_COLLECTIVE_CHECK  tests/collective_check
#   PCOLL_TEST_INFO              tools/pcoll_info
#   PCOLL_TEST_IMBALANCE         tests/cluster/imbalance_check (netns.sh only)
#   PCOLL_TEST_CONFORMANCE       tests/transport_conformance (netns.sh only)
#   PCOLL_TEST_RANK_PROGRAM      tests/bootstrap_rank (allgather of 0 B .. 1 MiB blobs)
# Exit status 77 tells meson the test was skipped; the reason is printed first.

# The collective_check cases a launcher run executes: one per rule family, a few seconds.
CLUSTER_CASES='every mode*,a late rank*,majority*,mismatched*'

skip() {
  echo "SKIP: $*"
  exit 77
}

die() {
  echo "FAIL: $*" >&2
  exit 1
}

# need COMMAND PACKAGE: skip unless COMMAND exists (scripts/install-deps.sh installs PACKAGE).
need() {
  command -v "$1" >/dev/null 2>&1 ||
    skip "$1 not found: install the Debian package $2 (bash scripts/install-deps.sh does)"
}

need_root() {
  [[ $(id -u) -eq 0 ]] || skip "needs root (it starts daemons / creates network namespaces)"
}

require_programs() {
  local var
  for var in "$@"; do
    [[ -n ${!var:-} && -x ${!var} ]] || die "$var is not set to an executable (run through meson test)"
  done
}

# check_bootstrap EXPECTED FILE: every line of FILE (pcoll_info --json of each rank) names
# EXPECTED as the selected bootstrap.
check_bootstrap() {
  local expected=$1 file=$2 lines matching
  lines=$(grep -c '"pcoll_info"' "$file" || true)
  matching=$(grep -c "\"bootstrap\":{\"name\":\"$expected\"" "$file" || true)
  echo "pcoll_info: $matching of $lines ranks select bootstrap '$expected'"
  grep -o '"bootstrap":{[^}]*}' "$file" | sort | uniq -c
  [[ $lines -gt 0 && $lines -eq $matching ]] || die "pcoll_info did not report bootstrap '$expected' on every rank"
}

# stop_pids PID...: TERM, up to 5 s grace, then KILL; only the PIDs given.
stop_pids() {
  local pid i
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for i in $(seq 50); do
    local alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# A free TCP port on 127.0.0.1 (the kernel's pick; a tiny race with other users is accepted).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
