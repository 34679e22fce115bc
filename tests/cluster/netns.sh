#!/usr/bin/env bash
# Several hosts on one machine: 3 hosts of 2 ranks each unless NETNS_HOSTS (2..16) and
# NETNS_PER_HOST (1..8) say otherwise. A host is a network namespace
# (joined to the others by a bridge that lives in a fourth namespace; the machine's own
# network is never touched) plus its own UTS, IPC, mount and PID namespaces: its own host
# name and a fresh tmpfs on /dev/shm, so shared memory does not reach across hosts, as
# between real machines. Addresses come from 10.77.0.0/24, IPv6 is off, and no namespace
# has a route anywhere else. Runs, with the manual store (PCOLL_RANK/SIZE/ROOT/JOB_KEY):
#   default  collective_check without PCOLL_PROVIDER: the default follows the job's layout
#            (routed libfabric: shm on each host, tcp between them; ucx where the hosts do
#            not share a kernel, which these do)
#   tcp      collective_check over ofi:tcp
#   ucx      collective_check over ucx:tcp
#   hosts    plain ucx (UCX picks its transports): transport_conformance, whose mailbox-path
#            case checks by host name that notifications to a peer on the same host are
#            stores into its mailbox and to every other peer messages, then collective_check
#   nodes    collective_check with the node-aware plan (PCOLL_PLAN_RULES=node_leader:0-inf) on
#            the default provider: each host a node, the plan checked by name
#   rails    collective_check's every-mode case with node_rails (PCOLL_PLAN_RULES=
#            node_rails:0-inf), and its 1 MiB round, which must send no more than the floor
#            across the network from each host
#   plans    a benchmark, not in 'all': pcoll_allreduce (NETNS_ALLREDUCE) --json, sync,
#            1 MiB and 16 MiB, on the default provider with the single-level plans (no rules)
#            and with node_rails (PCOLL_PLAN_RULES=node_rails:0-inf); rank 0's JSON rows, one
#            per plan and size, carry plan, p50 and net_bytes_per_round (NETNS_TBF=RATE caps
#            every host's link with tc tbf, as RATE in tc's units, e.g. 1gbit)
#   tbf      imbalance_check over ofi:tcp with host 2's link capped by tc tbf (both ways):
#            the run completes, sums are exact, and solo finishes before sync (3 hosts or more)
# Ranks go to hosts in blocks (ranks 0..K-1 on host 0) or, with NETNS_PLACEMENT=cyclic, round
# robin (rank r on host r mod H, as srun --distribution=cyclic places them).
# Namespaces (and with them every link and tmpfs) are removed on every exit (trap).
#   usage: [NETNS_HOSTS=H] [NETNS_PER_HOST=K] [NETNS_PLACEMENT=block|cyclic]
#          netns.sh all|default|tcp|ucx|hosts|nodes|rails|plans|tbf...
set -euo pipefail
source "$(dirname "$0")/common.sh"

need_root
need ip iproute2
need tc iproute2
need unshare util-linux
require_programs PCOLL_TEST_COLLECTIVE_CHECK PCOLL_TEST_IMBALANCE PCOLL_TEST_CONFORMANCE
parts=("$@")
[[ ${parts[*]:-all} == all ]] && parts=(default tcp ucx hosts nodes tbf)

hosts=${NETNS_HOSTS:-3}
per_host=${NETNS_PER_HOST:-2}
placement=${NETNS_PLACEMENT:-block}
[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 2 && hosts <= 16)) || die "NETNS_HOSTS='$hosts' is not a number of hosts from 2 to 16"
[[ $per_host =~ ^[0-9]+$ ]] && ((per_host >= 1 && per_host <= 8)) ||
  die "NETNS_PER_HOST='$per_host' is not a number of ranks per host from 1 to 8"
[[ $placement == block || $placement == cyclic ]] || die "NETNS_PLACEMENT='$placement' is neither block nor cyclic"
size=$((hosts * per_host))
tag=pc$$
switch=${tag}sw
namespaces=()
for ((h = 0; h < hosts; h++)); do namespaces+=("${tag}h$h"); done
work=$(mktemp -d /tmp/pcoll-netns.XXXXXX)
host_pids=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  ((${#host_pids[@]})) && stop_pids "${host_pids[@]}"
  for ns in "${namespaces[@]}" "$switch"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$switch" || skip "cannot create network namespaces here (no CAP_SYS_ADMIN / CAP_NET_ADMIN)"
ip -n "$switch" link add br0 type bridge
ip -n "$switch" link set br0 up
for ((h = 0; h < hosts; h++)); do
  ns=${namespaces[h]}
  ip netns add "$ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$switch" link add "port$h" type veth peer name pcnet netns "$ns"
  ip -n "$switch" link set "port$h" master br0 up
  ip -n "$ns" addr add "10.77.0.$((h + 1))/24" dev pcnet
  ip -n "$ns" link set lo up
  ip -n "$ns" link set pcnet up
done
# Links up on both ends before anything starts (the bridge forwards at once, without STP;
# the store client retries its connection to rank 0 anyway).
for ((h = 0; h < hosts; h++)); do
  for try in $(seq 50); do
    ip -n "${namespaces[h]}" link show pcnet | grep -q LOWER_UP &&
      ip -n "$switch" link show "port$h" | grep -q LOWER_UP && break
    ((try == 50)) && die "the link of host $h did not come up"
    sleep 0.1
  done
done
# A host can have its own host name and /dev/shm (unshare needs CAP_SYS_ADMIN).
ip netns exec "${namespaces[0]}" unshare --uts --ipc --mount --pid --fork --mount-proc true ||
  skip "cannot unshare UTS/IPC/mount/PID namespaces here"
echo "netns: $hosts hosts of $per_host ranks placed $placement (own host name, IPC and /dev/shm) on a private bridge, 10.77.0.1-$hosts"

job=0
# run_job LABEL PROVIDER EXPECTED PROGRAM ARGS...: per_host ranks on each host (block: h*per_host
# .. h*per_host+per_host-1 on host h; cyclic: h, h+hosts, ...), manual store at rank 0 (host 0). PROVIDER "" leaves PCOLL_PROVIDER unset (the default);
# EXPECTED, when not "", is the provider collective_check must find the communicator using.
run_job() {
  local label=$1 provider=$2 expected=$3
  shift 3
  local port=$((29500 + job)) key
  job=$((job + 1))
  key=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "=== $label: $size ranks on $hosts hosts, ${provider:-the default provider}, PCOLL_ROOT=10.77.0.1:$port"
  host_pids=()
  for ((h = 0; h < hosts; h++)); do
    # One shell per host in its own namespaces: it names the host, mounts a fresh /dev/shm
    # and starts the host's ranks, then waits for them and exits with the first failure.
    ip netns exec "${namespaces[h]}" unshare --uts --ipc --mount --pid --fork --mount-proc \
      env PCOLL_SIZE=$size PCOLL_ROOT=10.77.0.1:$port PCOLL_JOB_KEY="$key" PCOLL_TIMEOUT_MS=20000 \
      FI_TCP_IFACE=pcnet FI_SOCKETS_IFACE=pcnet UCX_NET_DEVICES=pcnet \
      HOST=$h HOSTS=$hosts PER_HOST=$per_host PLACEMENT=$placement PROVIDER="$provider" EXPECTED="$expected" WORK="$work" LABEL="$label" \
      bash -c '
        hostname "pcoll-host$HOST"
        mount -t tmpfs -o size=512m tmpfs /dev/shm
        [[ -n $PROVIDER ]] && export PCOLL_PROVIDER=$PROVIDER
        [[ -n $EXPECTED ]] && export PCOLL_TEST_EXPECT_PROVIDER=$EXPECTED
        pids=()
        for ((i = 0; i < PER_HOST; i++)); do
          if [[ $PLACEMENT == cyclic ]]; then r=$((i * HOSTS + HOST)); else r=$((HOST * PER_HOST + i)); fi
          PCOLL_RANK=$r timeout 100 "$@" >"$WORK/$LABEL.rank$r.log" 2>&1 &
          pids+=($!)
        done
        rc=0
        for pid in "${pids[@]}"; do wait "$pid" || { s=$?; ((rc == 0)) && rc=$s; }; done
        exit $rc' host "$@" &
    host_pids+=($!)
  done
  local failed=0 rc
  for ((h = 0; h < hosts; h++)); do
    rc=0
    wait "${host_pids[h]}" || rc=$?
    ((rc == 0)) || { echo "host $h: a rank exited with $rc"; failed=1; }
  done
  host_pids=()
  cat "$work/$label.rank0.log"
  if ((failed)); then
    for ((r = 1; r < size; r++)); do echo "--- rank $r"; tail -n 20 "$work/$label.rank$r.log"; done
    die "$label failed"
  fi
}

for part in "${parts[@]}"; do
  case $part in
    default)
      # The hosts share this machine's kernel, so the default is the routed libfabric
      # transport (UCX would take them for one machine).
      run_job default "" ofi:shm+tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES,network counters*" ;;
    nodes)
      PCOLL_PLAN_RULES=node_leader:0-inf PCOLL_TEST_EXPECT_PLAN=node_leader \
        run_job nodes "" ofi:shm+tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES,network counters*" ;;
    rails)
      PCOLL_PLAN_RULES=node_rails:0-inf PCOLL_TEST_EXPECT_PLAN=node_rails \
        run_job rails "" ofi:shm+tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="every mode*,network counters*,node_rails*" ;;
    tcp) run_job tcp ofi:tcp ofi:tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ;;
    ucx) run_job ucx ucx:tcp ucx:tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ;;
    hosts)
      run_job hosts-transport ucx "" "$PCOLL_TEST_CONFORMANCE" -nc \
        -tc='write_notify*,notification values*,ucx notifications*,fetch_add*'
      run_job hosts-collective ucx ucx "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES"
      ;;
    plans)
      [[ -n ${NETNS_ALLREDUCE:-} ]] || die "part plans needs NETNS_ALLREDUCE (the pcoll_allreduce program)"
      if [[ -n ${NETNS_TBF:-} ]]; then
        for ((h = 0; h < hosts; h++)); do
          ip netns exec "${namespaces[h]}" tc qdisc add dev pcnet root tbf rate "$NETNS_TBF" burst 256kb latency 100ms
          ip netns exec "$switch" tc qdisc add dev "port$h" root tbf rate "$NETNS_TBF" burst 256kb latency 100ms
        done
      fi
      run_job plans-single-level "" ofi:shm+tcp "$NETNS_ALLREDUCE" --mode sync -b 1M -e 16M -f 16 -n 10 -w 2 --json
      PCOLL_PLAN_RULES=node_rails:0-inf \
        run_job plans-node-rails "" ofi:shm+tcp "$NETNS_ALLREDUCE" --mode sync -b 1M -e 16M -f 16 -n 10 -w 2 --json
      ;;
    tbf)
      ((hosts >= 3)) || die "part tbf needs 3 hosts or more (NETNS_HOSTS=$hosts)"
      # Host 2's link: 40 Mbit/s out of its namespace and into it (the switch port).
      ip netns exec "${namespaces[2]}" tc qdisc add dev pcnet root tbf rate 40mbit burst 64kb latency 100ms
      ip netns exec "$switch" tc qdisc add dev port2 root tbf rate 40mbit burst 64kb latency 100ms
      run_job tbf ofi:tcp "" "$PCOLL_TEST_IMBALANCE" 40 16384 20
      ip netns exec "${namespaces[2]}" tc qdisc del dev pcnet root
      ip netns exec "$switch" tc qdisc del dev port2 root
      ;;
    *) die "unknown part '$part' (all, default, tcp, ucx, hosts, nodes, rails, plans, tbf)" ;;
  esac
done
echo "netns: all runs passed"
