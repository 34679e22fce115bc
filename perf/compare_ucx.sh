#!/usr/bin/env bash
# pcoll_pingpong on the UCX provider next to UCX's own ucx_perftest, over the same
# transports, alternating the two tools in one run (the host is shared and noisy):
#
#   latency:   ucx_perftest -t ucp_put_lat -s 8      vs  pcoll_pingpong -o write_notify -S 8
#   bandwidth: ucx_perftest -t ucp_put_bw  -s 1MiB   vs  pcoll_pingpong -o write_notify --bw -S 1M
#
# over three transport choices: "shm" (UCX_TLS=posix,sysv,cma,self against ucx:shm), "tcp"
# (UCX_TLS=tcp,self against ucx:tcp) and "ucx" (UCX_TLS as the caller's environment has it,
# unset: UCX picks, against plain ucx; on one host both tools then use shared memory, and
# plain ucx takes the mailbox), with the libfabric provider's figures beside them (ofi:shm,
# ofi:tcp, and ofi for "ucx"). Prints one line per measurement and a summary of medians
# and ratios; --json writes the raw measurements as JSON lines to the given file as well.
#
#   perf/compare_ucx.sh [-B BUILD_DIR] [-r REPEATS] [-t shm,tcp,ucx] [--json FILE]
set -euo pipefail

build=build
repeats=5
transports=shm,tcp,ucx
json=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -B) build=$2; shift 2 ;;
    -r) repeats=$2; shift 2 ;;
    -t) transports=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "compare_ucx.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "compare_ucx.sh: -r '$repeats' is not a positive count" >&2; exit 2; }
IFS=, read -r -a transport_list <<<"$transports"
for transport in "${transport_list[@]}"; do
  [[ $transport =~ ^(shm|tcp|ucx)$ ]] || { echo "compare_ucx.sh: -t: '$transport' is not shm, tcp or ucx" >&2; exit 2; }
done
pingpong="$build/perf/pcoll_pingpong"
pcollrun="$build/tools/pcollrun"
for tool in "$pingpong" "$pcollrun"; do
  [[ -x "$tool" ]] || { echo "compare_ucx.sh: $tool not found; build first (scripts/build.sh) or pass -B" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "compare_ucx.sh: ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 2; }

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
export UCX_NET_DEVICES=lo FI_TCP_IFACE=lo

# ucx_perftest as server and client on 127.0.0.1; prints "latency_p50 latency_avg bw_MiBps".
perftest() {  # tls test size iters
  local tls=$1 test=$2 size=$3 iters=$4 port=$((20000 + RANDOM % 20000))
  local env_tls=()
  [[ -n $tls ]] && env_tls=("UCX_TLS=$tls")
  env "${env_tls[@]}" timeout 120 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local server=$!
  local out=""
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.3
    if out=$(env "${env_tls[@]}" timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" 2>&1); then break; fi
    out=""
  done
  wait "$server" 2>/dev/null || true
  [[ -n "$out" ]] || { echo "compare_ucx.sh: ucx_perftest $test over ${tls:-UCX_TLS=${UCX_TLS:-all}} failed" >&2; exit 1; }
  awk '/^Final:/ {print $3, $4, $6}' <<<"$out"
}

pcoll() {  # selector extra-args...
  local selector=$1
  shift
  timeout 120 "$pcollrun" -n 2 --provider "$selector" "$pingpong" --json "$@" </dev/null | tail -n 1
}

record() {  # tool transport metric value
  printf '{"tool":"%s","transport":"%s","metric":"%s","value":%s}\n' "$1" "$2" "$3" "$4" | tee -a "$raw"
}

# selector FAMILY TRANSPORT: the pcoll selector measured against ucx_perftest over TRANSPORT.
selector() {
  [[ $2 == ucx ]] && echo "$1" || echo "$1:$2"
}

for ((i = 1; i <= repeats; i++)); do
  for transport in "${transport_list[@]}"; do
    case $transport in
      shm) tls=posix,sysv,cma,self ;;
      tcp) tls=tcp,self ;;
      ucx) tls="" ;;  # the environment's UCX_TLS, as plain ucx takes it
    esac
    read -r p50 avg _ < <(perftest "$tls" ucp_put_lat 8 100000)
    record ucx_perftest "$transport" lat_p50_us "$p50"
    record ucx_perftest "$transport" lat_avg_us "$avg"
    for family in ucx ofi; do
      v=$(pcoll "$(selector "$family" "$transport")" -S 8 -I 20000 | sed -E 's/.*"usec_per_xfer":([0-9.]+).*/\1/')
      record "pcoll_$family" "$transport" lat_avg_us "$v"
    done
    read -r _ _ bw < <(perftest "$tls" ucp_put_bw 1048576 2000)
    record ucx_perftest "$transport" bw_MBps "$(awk -v b="$bw" 'BEGIN {printf "%.1f", b * 1.048576}')"
    for family in ucx ofi; do
      v=$(pcoll "$(selector "$family" "$transport")" --bw -S 1M -I 2048 | sed -E 's/.*"mb_per_sec":([0-9.]+).*/\1/')
      record "pcoll_$family" "$transport" bw_MBps "$v"
    done
  done
done

[[ -z "$json" ]] || cp "$raw" "$json"

/usr/bin/python3 - "$raw" "$transports" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
transports = sys.argv[2].split(",")
def med(tool, transport, metric):
    v = [r["value"] for r in rows if (r["tool"], r["transport"], r["metric"]) == (tool, transport, metric)]
    return statistics.median(v) if v else float("nan")
print()
repeats = sum(1 for r in rows if (r["tool"], r["transport"], r["metric"]) == ("ucx_perftest", transports[0], "lat_avg_us"))
print("medians over %d repeats (latency: half round trip, us; bandwidth: 10^6 B/s, one direction)" % repeats)
print("%-4s %-10s %12s %12s %12s %8s %12s" % ("", "metric", "ucx_perftest", "pcoll ucx", "pcoll ofi", "ucx ratio", "target"))
for transport in transports:
    lat_p50 = med("ucx_perftest", transport, "lat_p50_us")
    lat = med("ucx_perftest", transport, "lat_avg_us")
    mine = med("pcoll_ucx", transport, "lat_avg_us")
    print("%-4s %-10s %12.3f %12.3f %12.3f %7.2fx %12s   (perftest p50 %.3f)" %
          (transport, "lat 8B avg", lat, mine, med("pcoll_ofi", transport, "lat_avg_us"), mine / lat, "<= 1.5x", lat_p50))
    bw = med("ucx_perftest", transport, "bw_MBps")
    mine = med("pcoll_ucx", transport, "bw_MBps")
    print("%-4s %-10s %12.0f %12.0f %12.0f %7.2fx %12s" %
          (transport, "bw 1MiB", bw, mine, med("pcoll_ofi", transport, "bw_MBps"), mine / bw, ">= 0.8x"))
EOF
