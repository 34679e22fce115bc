#!/usr/bin/env bash
# Several hosts on one machine: 4 network namespaces, one rank each, joined by a bridge that
# lives in a fifth namespace (the host's own network is never touched). Addresses come from
# 10.77.0.0/24, IPv6 is off, and no namespace has a route anywhere else. Runs, with the
# manual store (PCOLL_RANK/SIZE/ROOT/JOB_KEY):
#   tcp   collective_check over ofi:tcp
#   ucx   collective_check over ucx:tcp
#   hosts plain ucx (UCX picks its transports) with every rank also in a UTS, IPC, mount and
#         PID namespace of its own (own host name, /dev/shm, System V segments, pids):
#         hosts that share a kernel but no shared memory. UCX must find no peer's memory
#         mappable and every notification must take the network, cleanly
#         (transport_conformance's mailbox-path case checks it by host name), then
#         collective_check
#   tbf   imbalance_check over ofi:tcp with rank 3's link capped by tc tbf (both ways):
#         the run completes, sums are exact, and solo finishes before sync
# Namespaces (and with them every link) are removed on every exit (trap).
#   usage: netns.sh all|tcp|ucx|hosts|tbf...
set -euo pipefail
source "$(dirname "$0")/common.sh"

need_root
need ip iproute2
need tc iproute2
require_programs PCOLL_TEST_COLLECTIVE_CHECK PCOLL_TEST_IMBALANCE PCOLL_TEST_CONFORMANCE
parts=("$@")
[[ ${parts[*]:-all} == all ]] && parts=(tcp ucx hosts tbf)

size=4
tag=pc$$
switch=${tag}sw
namespaces=()
for ((i = 0; i < size; i++)); do namespaces+=("${tag}n$i"); done
work=$(mktemp -d /tmp/pcoll-netns.XXXXXX)
rank_pids=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  ((${#rank_pids[@]})) && stop_pids "${rank_pids[@]}"
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
for ((i = 0; i < size; i++)); do
  ns=${namespaces[i]}
  ip netns add "$ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$switch" link add "port$i" type veth peer name pcnet netns "$ns"
  ip -n "$switch" link set "port$i" master br0 up
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev pcnet
  ip -n "$ns" link set lo up
  ip -n "$ns" link set pcnet up
done
# Links up on both ends before anything starts (the bridge forwards at once, without STP;
# the store client retries its connection to rank 0 anyway).
for ((i = 0; i < size; i++)); do
  for try in $(seq 50); do
    ip -n "${namespaces[i]}" link show pcnet | grep -q LOWER_UP &&
      ip -n "$switch" link show "port$i" | grep -q LOWER_UP && break
    ((try == 50)) && die "the link of namespace $i did not come up"
    sleep 0.1
  done
done
echo "netns: $size namespaces on a private bridge, 10.77.0.1-$size"

job=0
isolate=0  # 1: each rank in UTS/IPC/mount/PID namespaces of its own as well (part "hosts")
# run_job LABEL PROVIDER PROGRAM ARGS...: one rank per namespace, manual store at rank 0.
run_job() {
  local label=$1 provider=$2
  shift 2
  local port=$((29500 + job)) key
  job=$((job + 1))
  key=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  echo "=== $label: $size ranks, $provider, PCOLL_ROOT=10.77.0.1:$port"
  rank_pids=()
  for ((i = 0; i < size; i++)); do
    local host=()
    ((isolate)) && host=(unshare --uts --ipc --mount --pid --fork --kill-child --mount-proc
      sh -c 'hostname "$0" && mount -t tmpfs -o size=256m tmpfs /dev/shm && exec "$@"' "${tag}host$i")
    ip netns exec "${namespaces[i]}" "${host[@]}" env PCOLL_RANK=$i PCOLL_SIZE=$size PCOLL_ROOT=10.77.0.1:$port \
      PCOLL_JOB_KEY="$key" PCOLL_PROVIDER="$provider" PCOLL_TIMEOUT_MS=20000 \
      FI_TCP_IFACE=pcnet FI_SOCKETS_IFACE=pcnet UCX_NET_DEVICES=pcnet \
      timeout 100 "$@" >"$work/$label.rank$i.log" 2>&1 &
    rank_pids+=($!)
  done
  local failed=0 rc
  for ((i = 0; i < size; i++)); do
    rc=0
    wait "${rank_pids[i]}" || rc=$?
    ((rc == 0)) || { echo "rank $i exited with $rc"; failed=1; }
  done
  rank_pids=()
  cat "$work/$label.rank0.log"
  if ((failed)); then
    for ((i = 1; i < size; i++)); do echo "--- rank $i"; tail -n 20 "$work/$label.rank$i.log"; done
    die "$label failed"
  fi
}

for part in "${parts[@]}"; do
  case $part in
    tcp) run_job tcp ofi:tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ;;
    ucx) run_job ucx ucx:tcp "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ;;
    hosts)
      need unshare util-linux
      isolate=1
      run_job hosts-transport ucx "$PCOLL_TEST_CONFORMANCE" -nc \
        -tc='write_notify*,notification values*,ucx notifications*,fetch_add*'
      run_job hosts-collective ucx "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES"
      isolate=0
      ;;
    tbf)
      # Rank 3's link: 40 Mbit/s out of its namespace and into it (the switch port).
      ip netns exec "${namespaces[3]}" tc qdisc add dev pcnet root tbf rate 40mbit burst 64kb latency 100ms
      ip netns exec "$switch" tc qdisc add dev port3 root tbf rate 40mbit burst 64kb latency 100ms
      run_job tbf ofi:tcp "$PCOLL_TEST_IMBALANCE" 40 16384 20
      ip netns exec "${namespaces[3]}" tc qdisc del dev pcnet root
      ip netns exec "$switch" tc qdisc del dev port3 root
      ;;
    *) die "unknown part '$part' (all, tcp, ucx, hosts, tbf)" ;;
  esac
done
echo "netns: all runs passed"
