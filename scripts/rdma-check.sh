#!/usr/bin/env bash
# Validates pcoll on a node with an RDMA NIC and writes what it found as one JSON summary.
#
#   bash scripts/rdma-check.sh [--build DIR] [--out FILE] [--providers LIST] [--quick]
#                              [--ranks N] [--timeout S] [--logs DIR] [--list-only]
#
# 1. Lists the devices: ibv_devinfo, fi_info -l and each RDMA libfabric provider
#    (verbs;ofi_rxm, efa, cxi, psm3 on FI_EP_RDM), ucx_info -d, where those tools exist.
# 2. For every RDMA provider found (libfabric ofi:verbs, ofi:efa, ofi:cxi, ofi:psm3; UCX
#    rc, dc, ud through UCX_TLS), on this host through the NIC's loopback:
#    - the transport conformance suite (tests/transport_conformance under pcollrun),
#    - the collective suite (tests/collective_check) with 64-bit and with 32-bit
#      notifications (PCOLL_NOTIFY_BITS; 64 is skipped where the provider carries fewer;
#      the 32-bit run on libfabric carries 4 bytes of CQ data, PCOLL_TEST_OFI_CQ_DATA_SIZE),
#    - pcoll_pingpong next to its anchor over the same provider: fi_pingpong (libfabric) or
#      ucx_perftest (UCX), latency at 64 B and bandwidth at 1 MiB, with the ratio.
#    Each run is under a timeout; a run that hangs counts as failed ("timeout").
# 3. Writes the JSON summary (--out, default rdma-check.json): the device lists and, per
#    provider, its capabilities (pcoll_info), pass/fail/timeout/skip per suite with the log
#    file, and latency/bandwidth with the anchor's numbers and the ratio.
#
# Without an RDMA device it says so, still writes the device lists, and exits 77.
# --providers runs the same flow over the providers named instead of the ones found, for
# instance the loopback ones here (--providers ofi:tcp,ucx:tcp), which is how the script
# itself is tested (tests/cluster/rdma_check.sh). Accepted: ofi:verbs|efa|cxi|psm3|tcp|
# sockets|shm, ucx:rc|dc|ud (PCOLL_PROVIDER=ucx with UCX_TLS), ucx:shm, ucx:tcp.
# --quick runs a subset (a few collective cases, fewer atomics and iterations) in a minute
# or two; the default is the whole of each suite. --list-only stops after step 1. --ranks
# sets the ranks of the suites (default 2; the pingpongs are always 2), --timeout the limit
# of each run in seconds (default 900, 180 with --quick), --logs where the logs go.
#
# Exit status: 0 every suite passed (skips allowed), 1 something failed, 2 bad usage or a
# missing build, 77 no RDMA device found (and no --providers). --list-only: 0 or 77.
set -uo pipefail

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//'
  exit "${1:-0}"
}

die_usage() {
  echo "rdma-check: $*" >&2
  exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
out="rdma-check.json"
providers_arg=""
quick=0
list_only=0
ranks=2
step_timeout=""
logs=""
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --providers) providers_arg=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --list-only) list_only=1; shift ;;
    --ranks) ranks=$2; shift 2 ;;
    --timeout) step_timeout=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) die_usage "unknown option '$1' (--help lists them)" ;;
  esac
done
known_specs=" ofi:verbs ofi:efa ofi:cxi ofi:psm3 ofi:tcp ofi:sockets ofi:shm ucx:rc ucx:dc ucx:ud ucx:shm ucx:tcp "
IFS=',' read -r -a given_specs <<<"${providers_arg// /}"
for spec in "${given_specs[@]}"; do
  [[ $known_specs == *" $spec "* ]] ||
    die_usage "--providers: '$spec' is not one of ofi:verbs|efa|cxi|psm3|tcp|sockets|shm, ucx:rc|dc|ud|shm|tcp"
done
[[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 ]] || die_usage "--ranks $ranks: give a number of ranks, 2 or more"
if [[ -z $step_timeout ]]; then
  ((quick)) && step_timeout=180 || step_timeout=900
fi
[[ $step_timeout =~ ^[0-9]+$ && $step_timeout -ge 1 ]] || die_usage "--timeout $step_timeout: give seconds"

pcollrun="$build/tools/pcollrun"
pcoll_info="$build/tools/pcoll_info"
conformance="$build/tests/transport_conformance"
collective="$build/tests/collective_check"
pingpong="$build/perf/pcoll_pingpong"
if ((!list_only)); then
  for program in "$pcollrun" "$pcoll_info" "$conformance" "$collective" "$pingpong"; do
    [[ -x $program ]] || die_usage "$program is missing: build first (meson setup $build && ninja -C $build), or name the build with --build"
  done
fi
python=/usr/bin/python3
[[ -x $python ]] || die_usage "$python is needed to write the JSON summary"

if [[ -n $logs ]]; then
  mkdir -p "$logs" || die_usage "cannot create --logs $logs"
  work=$(cd "$logs" && pwd)
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/rdma-check.XXXXXX")
fi
results="$work/results.tsv"  # provider, key, value: what the JSON is made of
: >"$results"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }
have() { command -v "$1" >/dev/null 2>&1; }

# The pcoll test programs' knobs for --quick: the collective cases one per rule family,
# contention atomics and pingpong iterations cut down.
if ((quick)); then
  collective_filter='*in-place rounds*,a late rank is reported*,carried data*'
  conformance_atomics=200
  lat_iters=200 bw_iters=20 anchor_lat_iters=50 anchor_bw_iters=10
else
  collective_filter=''
  conformance_atomics=''
  lat_iters=10000 bw_iters=200 anchor_lat_iters=10000 anchor_bw_iters=200
fi

# --- 1. devices --------------------------------------------------------------------------

echo "== devices"
ibv_names=()
if have ibv_devinfo; then
  ibv_devinfo >"$work/ibv_devinfo.txt" 2>&1 || true
  mapfile -t ibv_names < <(ibv_devinfo -l 2>/dev/null | sed -n 's/^[[:space:]]\{1,\}\([^[:space:]]\{1,\}\)$/\1/p')
  echo "ibv_devinfo: ${#ibv_names[@]} device(s) ${ibv_names[*]:-}"
else
  echo "ibv_devinfo: not installed (Debian: ibverbs-utils)"
fi
for name in "${ibv_names[@]}"; do record devices ibv "$name"; done

fi_rdma=()
if have fi_info; then
  fi_info -l >"$work/fi_info_l.txt" 2>&1 || true
  while read -r name; do record devices libfabric_provider "$name"; done < <(sed -n 's/^\([^[:space:]].*\):$/\1/p' "$work/fi_info_l.txt")
  for prov in "verbs;ofi_rxm" efa cxi psm3; do
    listing="$work/fi_info_${prov//;/_}.txt"
    if fi_info -p "$prov" -t FI_EP_RDM >"$listing" 2>&1; then
      fi_rdma+=("$prov")
      while read -r domain; do record devices "libfabric_domain" "$prov $domain"; done \
        < <(sed -n 's/^[[:space:]]*domain:[[:space:]]*//p' "$listing" | sort -u)
    fi
  done
  echo "fi_info: RDMA providers on FI_EP_RDM: ${fi_rdma[*]:-none}"
else
  echo "fi_info: not installed (Debian: libfabric-bin)"
fi

ucx_rdma_tls=()
if have ucx_info; then
  ucx_info -d >"$work/ucx_info_d.txt" 2>&1 || true
  # "#      Transport: rc_mlx5" followed by "#         Device: mlx5_0:1"
  while read -r transport device; do
    record devices ucx "$transport $device"
  done < <(awk '/Transport:/ {t=$NF} /Device:/ && t != "" {print t, $NF; t=""}' "$work/ucx_info_d.txt")
  transports=$(awk '/Transport:/ {print $NF}' "$work/ucx_info_d.txt" | sort -u | tr '\n' ' ')
  for family in rc dc ud; do
    # The accelerated (mlx5) transports where present, else plain verbs.
    if [[ " $transports " == *" ${family}_mlx5 "* ]]; then
      ucx_rdma_tls+=("$family:${family}_x")
    elif [[ " $transports " == *" ${family}_verbs "* ]]; then
      ucx_rdma_tls+=("$family:${family}_v")
    fi
  done
  echo "ucx_info: transports ${transports:-none}"
else
  echo "ucx_info: not installed (Debian: ucx-utils)"
fi

found=()
for prov in "${fi_rdma[@]}"; do
  case $prov in
    "verbs;ofi_rxm") found+=(ofi:verbs) ;;
    *) found+=("ofi:$prov") ;;
  esac
done
for entry in "${ucx_rdma_tls[@]}"; do found+=("ucx:${entry%%:*}"); done

if [[ -n $providers_arg ]]; then
  IFS=',' read -r -a run_providers <<<"${providers_arg// /}"
  record summary mode "given"
else
  run_providers=("${found[@]}")
  record summary mode "found"
fi
record summary rdma_found "$([[ ${#found[@]} -gt 0 ]] && echo true || echo false)"
for p in "${found[@]}"; do record summary found "$p"; done

# --- the JSON summary --------------------------------------------------------------------

write_json() {
  "$python" - "$results" "$out" "$quick" "$ranks" <<'PY'
import json, platform, sys, time
results, out, quick, ranks = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
summary = {"tool": "scripts/rdma-check.sh", "host": platform.node(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "quick": quick, "ranks": ranks,
           "devices": {"ibv": [], "libfabric_providers": [], "libfabric_rdma_domains": [], "ucx": []},
           "rdma_found": False, "found": [], "mode": "", "providers": []}
providers = {}
def provider(name):
    if name not in providers:
        providers[name] = {"name": name, "env": {}, "capabilities": None, "suites": {}, "pingpong": {}}
        summary["providers"].append(providers[name])
    return providers[name]
def number(text):
    try:
        return float(text)
    except ValueError:
        return None
with open(results) as f:
    for line in f:
        who, key, value = line.rstrip("\n").split("\t", 2)
        if who == "devices":
            summary["devices"][{"ibv": "ibv", "libfabric_provider": "libfabric_providers",
                                "libfabric_domain": "libfabric_rdma_domains", "ucx": "ucx"}[key]].append(value)
        elif who == "summary":
            if key == "found":
                summary["found"].append(value)
            elif key == "rdma_found":
                summary["rdma_found"] = value == "true"
            else:
                summary[key] = value
        else:
            p = provider(who)
            part, _, field = key.partition(".")
            if part == "env":
                p["env"][field] = value
            elif part == "capabilities":
                p["capabilities"] = json.loads(value) if value.startswith("{") else {"error": value}
            elif part == "suite":
                name, _, attr = field.partition(".")
                p["suites"].setdefault(name, {})[attr] = number(value) if attr == "seconds" else value
            elif part == "pingpong":
                name, _, attr = field.partition(".")
                entry = p["pingpong"].setdefault(name, {})
                if attr == "bytes":
                    entry[attr] = int(value)
                else:
                    entry[attr] = number(value) if attr.endswith(("usec", "mb_per_sec")) else value
for p in summary["providers"]:
    for entry in p["pingpong"].values():
        mine, anchor = entry.get("pcoll_usec"), entry.get("anchor_usec")
        if mine is None:
            mine, anchor = entry.get("pcoll_mb_per_sec"), entry.get("anchor_mb_per_sec")
        entry["ratio"] = round(mine / anchor, 3) if mine and anchor else None
        entry["ratio_is"] = "pcoll / anchor (latency: above 1 is slower; bandwidth: below 1 is slower)"
    # pcoll's own runs count; an anchor that did not run is noted, not a failure of pcoll.
    states = [s.get("result") for s in p["suites"].values()] + [e.get("result") for e in p["pingpong"].values()]
    p["passed"] = bool(states) and all(s in ("pass", "skip") for s in states)
summary["passed"] = bool(summary["providers"]) and all(p["passed"] for p in summary["providers"])
with open(out, "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
PY
}

if ((list_only)); then
  write_json
  echo "rdma-check: devices listed in $out (--list-only: nothing run)"
  ((${#found[@]} > 0)) && exit 0
  echo "rdma-check: no RDMA device found"
  exit 77
fi

if ((${#run_providers[@]} == 0)); then
  write_json
  echo "rdma-check: no RDMA device found (no ibverbs device, no libfabric verbs/efa/cxi/psm3, no UCX rc/dc/ud);"
  echo "rdma-check: nothing validated. --providers ofi:tcp,ucx:tcp runs the same flow over loopback. Summary: $out"
  exit 77
fi

# --- 2. each provider -----------------------------------------------------------------------

# run_step NAME LOG COMMAND...: runs under the step timeout, prints the outcome and leaves it
# in STEP_RESULT (pass, fail or timeout) and STEP_SECONDS.
run_step() {
  local name=$1 log=$2 start rc
  shift 2
  start=$(date +%s)
  timeout --kill-after=10 "$step_timeout" "$@" >"$log" 2>&1
  rc=$?
  local seconds=$(( $(date +%s) - start ))
  local result=pass
  if ((rc == 124 || rc == 137)); then result=timeout; elif ((rc != 0)); then result=fail; fi
  printf '   %-28s %-8s %4d s  %s\n' "$name" "$result" "$seconds" "$log"
  STEP_RESULT=$result STEP_SECONDS=$seconds
}

# suite PROVIDER NAME LOG COMMAND...: a suite run, recorded.
suite() {
  local who=$1 name=$2 log=$3
  shift 3
  run_step "$name" "$log" "$@"
  record "$who" "suite.$name.result" "$STEP_RESULT"
  record "$who" "suite.$name.seconds" "$STEP_SECONDS"
  record "$who" "suite.$name.log" "$log"
  [[ $STEP_RESULT == pass ]] || tail -n 15 "$log" | sed 's/^/      | /'
}

skip_suite() {
  record "$1" "suite.$2.result" skip
  record "$1" "suite.$2.reason" "$3"
  printf '   %-28s skip     %s\n' "$2" "$3"
}

# A free TCP port for the anchors' control connections (fi_pingpong -B/-P, ucx_perftest -p).
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# anchor_pair LOG_PREFIX SERVER_CMD... -- CLIENT_CMD...: runs a server and its client under
# the timeout; the client's output is LOG_PREFIX.client, the server's LOG_PREFIX.server.
anchor_pair() {
  local prefix=$1
  shift
  local server=()
  while (($#)) && [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift
  timeout --kill-after=5 "$step_timeout" "${server[@]}" >"$prefix.server" 2>&1 &
  local server_pid=$!
  sleep 1
  timeout --kill-after=5 "$step_timeout" "$@" >"$prefix.client" 2>&1
  local rc=$?
  # A client that failed leaves its server waiting: stop it rather than wait out the timeout.
  ((rc == 0)) || kill -TERM "$server_pid" 2>/dev/null
  if ! wait "$server_pid" && ((rc == 0)); then rc=1; fi
  return "$rc"
}

# The numbers of pcoll_pingpong's JSON line (rank 0): usec_per_xfer, mb_per_sec.
pingpong_field() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$1" | tail -n 1; }

for spec in "${run_providers[@]}"; do
  [[ -n $spec ]] || continue
  selector="" fi_prov="" fi_filter="" tls=""
  case $spec in
    ofi:verbs) selector=ofi:verbs fi_prov="verbs;ofi_rxm" fi_filter="verbs,ofi_rxm" ;;
    ofi:tcp) selector=ofi:tcp fi_prov="tcp;ofi_rxm" fi_filter="tcp,ofi_rxm" ;;
    ofi:efa|ofi:cxi|ofi:psm3|ofi:sockets|ofi:shm) selector=$spec fi_prov=${spec#ofi:} fi_filter=${spec#ofi:} ;;
    ucx:rc|ucx:dc|ucx:ud)
      selector=ucx
      family=${spec#ucx:}
      tls=""
      for entry in "${ucx_rdma_tls[@]}"; do [[ ${entry%%:*} == "$family" ]] && tls="${entry#*:},self"; done
      [[ -n $tls ]] || tls="${family},self"  # UCX's alias for the family, where ucx_info found none
      ;;
    ucx:shm) selector=ucx:shm tls="posix,sysv,cma,self" ;;
    ucx:tcp) selector=ucx:tcp tls="tcp,self" ;;
    *) die_usage "--providers: '$spec' is not known" ;;  # checked at the start
  esac
  echo "== $spec (PCOLL_PROVIDER=$selector)"
  # The environment every run of this provider gets; loopback providers stay on lo.
  run_env=("PCOLL_PROVIDER=$selector")
  if [[ -n $fi_filter ]]; then
    run_env+=("FI_PROVIDER=$fi_filter")
    [[ $spec == ofi:tcp ]] && run_env+=("FI_TCP_IFACE=${FI_TCP_IFACE:-lo}")
    [[ $spec == ofi:sockets ]] && run_env+=("FI_SOCKETS_IFACE=${FI_SOCKETS_IFACE:-lo}")
  else
    run_env+=("UCX_TLS=$tls")
    [[ $spec == ucx:tcp ]] && run_env+=("UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}")
  fi
  for assignment in "${run_env[@]}"; do record "$spec" "env.${assignment%%=*}" "${assignment#*=}"; done
  tag=${spec//:/-}

  # What pcoll makes of it; a provider that does not open is recorded and its suites fail.
  env "${run_env[@]}" "$pcoll_info" --json -p "$selector" >"$work/$tag.info.json" 2>"$work/$tag.info.err"
  caps=$("$python" -c '
import json, sys
p = json.load(open(sys.argv[1]))["providers"][0]
print(json.dumps(p) if "error" not in p else p["error"])' "$work/$tag.info.json" 2>/dev/null)
  [[ -n $caps ]] || caps="pcoll_info failed: $(tail -n 1 "$work/$tag.info.err")"
  record "$spec" capabilities "$caps"
  notify_bits=$(sed -n 's/.*"notify_bits":\([0-9]*\).*/\1/p' <<<"$caps")
  echo "   pcoll_info: ${caps:0:160}"

  conformance_env=("${run_env[@]}")
  [[ -n $conformance_atomics ]] && conformance_env+=("PCOLL_TEST_ATOMICS=$conformance_atomics")
  suite "$spec" transport_conformance "$work/$tag.conformance.log" \
    env "${conformance_env[@]}" "$pcollrun" -n "$ranks" --timeout-ms 30000 "$conformance"

  collective_args=()
  [[ -n $collective_filter ]] && collective_args+=("-tc=$collective_filter")
  for bits in 64 32; do
    if [[ $bits == 64 && -n $notify_bits && $notify_bits -lt 64 ]]; then
      skip_suite "$spec" "collective_$bits" "the provider carries ${notify_bits}-bit notifications"
      continue
    fi
    width_env=("PCOLL_NOTIFY_BITS=$bits")
    # On libfabric the 32-bit run also carries only 4 bytes of CQ data, as verbs and EFA do
    # (a no-op where the provider has only 4).
    [[ $bits == 32 && -n $fi_prov ]] && width_env+=("PCOLL_TEST_OFI_CQ_DATA_SIZE=4")
    suite "$spec" "collective_$bits" "$work/$tag.collective_$bits.log" \
      env "${run_env[@]}" "${width_env[@]}" "$pcollrun" -n "$ranks" --timeout-ms 30000 \
      "$collective" "${collective_args[@]}"
  done

  # Latency: write_notify of 64 B, half a round trip, against the provider's own ping-pong.
  log="$work/$tag.pingpong_latency.log"
  run_step pcoll_pingpong_latency "$log" env "${run_env[@]}" "$pcollrun" -n 2 --timeout-ms 30000 \
    "$pingpong" -p "$selector" -o write_notify -S 64 -I "$lat_iters" -w 20 --json
  record "$spec" pingpong.latency.bytes 64
  record "$spec" pingpong.latency.result "$STEP_RESULT"
  record "$spec" pingpong.latency.pcoll "pcoll_pingpong -o write_notify -S 64"
  record "$spec" pingpong.latency.pcoll_usec "$(pingpong_field "$log" usec_per_xfer)"
  # Bandwidth at 1 MiB: against fi_pingpong's ping-pong (MB/s of both directions) on
  # libfabric, against ucx_perftest's one-way stream (ucp_put_bw) on UCX.
  log="$work/$tag.pingpong_bandwidth.log"
  if [[ -n $fi_prov ]]; then
    run_step pcoll_pingpong_bandwidth "$log" env "${run_env[@]}" "$pcollrun" -n 2 --timeout-ms 30000 \
      "$pingpong" -p "$selector" -o write_notify -S 1M -I "$bw_iters" -w 5 --json
    record "$spec" pingpong.bandwidth.pcoll "pcoll_pingpong -o write_notify -S 1M, MB/s of both directions"
  else
    run_step pcoll_pingpong_bandwidth "$log" env "${run_env[@]}" "$pcollrun" -n 2 --timeout-ms 30000 \
      "$pingpong" -p "$selector" -o write_notify -S 1M --bw -I "$bw_iters" -w 5 --json
    record "$spec" pingpong.bandwidth.pcoll "pcoll_pingpong -o write_notify -S 1M --bw, MB/s of one direction"
  fi
  record "$spec" pingpong.bandwidth.result "$STEP_RESULT"
  record "$spec" pingpong.bandwidth.bytes 1048576
  record "$spec" pingpong.bandwidth.pcoll_mb_per_sec "$(pingpong_field "$log" mb_per_sec)"

  if [[ -n $fi_prov ]]; then
    if have fi_pingpong; then
      for kind in latency bandwidth; do
        if [[ $kind == latency ]]; then size=64 iters=$anchor_lat_iters; else size=1048576 iters=$anchor_bw_iters; fi
        port=$(free_port)
        prefix="$work/$tag.fi_pingpong_$kind"
        anchor_pair "$prefix" env "${run_env[@]}" fi_pingpong -p "$fi_prov" -e rdm -S "$size" -I "$iters" -B "$port" \
          -- env "${run_env[@]}" fi_pingpong -p "$fi_prov" -e rdm -S "$size" -I "$iters" -P "$port" 127.0.0.1
        rc=$?
        # bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
        row=$(awk 'NF == 8 && $1 ~ /^[0-9]/ {line=$0} END {print line}' "$prefix.client")
        record "$spec" "pingpong.$kind.anchor" "fi_pingpong -p '$fi_prov' -e rdm -S $size -I $iters (rc $rc)"
        if [[ $kind == latency ]]; then
          record "$spec" pingpong.latency.anchor_usec "$(awk '{print $7}' <<<"$row")"
        else
          record "$spec" pingpong.bandwidth.anchor_mb_per_sec "$(awk '{print $6}' <<<"$row")"
        fi
        echo "   fi_pingpong $kind: ${row:-no result (rc $rc, $prefix.client)}"
      done
    else
      record "$spec" pingpong.latency.anchor "fi_pingpong not installed (Debian: libfabric-bin)"
    fi
  else
    if have ucx_perftest; then
      for kind in latency bandwidth; do
        if [[ $kind == latency ]]; then test=ucp_am_lat size=64 iters=$anchor_lat_iters; else test=ucp_put_bw size=1048576 iters=$anchor_bw_iters; fi
        port=$(free_port)
        prefix="$work/$tag.ucx_perftest_$kind"
        anchor_pair "$prefix" env "${run_env[@]}" ucx_perftest -p "$port" -t "$test" -s "$size" -n "$iters" -w 10 -f \
          -- env "${run_env[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" -n "$iters" -w 10 -f
        rc=$?
        # iterations, latency 50%ile/average/overall (usec), bandwidth average/overall (MB/s
        # of 2^20 bytes), message rate average/overall
        row=$(awk 'NF == 8 && $1 ~ /^[0-9]+$/ {line=$0} END {print line}' "$prefix.client")
        record "$spec" "pingpong.$kind.anchor" "ucx_perftest -t $test -s $size -n $iters, UCX_TLS=$tls (rc $rc)"
        if [[ $kind == latency ]]; then
          record "$spec" pingpong.latency.anchor_usec "$(awk '{print $3}' <<<"$row")"
        else
          # pcoll counts 10^6 bytes per MB, ucx_perftest 2^20.
          record "$spec" pingpong.bandwidth.anchor_mb_per_sec "$(awk '$6 != "" {printf "%.2f", $6 * 1.048576}' <<<"$row")"
        fi
        echo "   ucx_perftest $kind: ${row:-no result (rc $rc, $prefix.client)}"
      done
    else
      record "$spec" pingpong.latency.anchor "ucx_perftest not installed (Debian: ucx-utils)"
    fi
  fi
done

write_json
passed=$("$python" -c 'import json, sys; print("yes" if json.load(open(sys.argv[1]))["passed"] else "no")' "$out")
echo "rdma-check: summary in $out, logs in $work"
if [[ $passed == yes ]]; then
  echo "rdma-check: every suite passed on: ${run_providers[*]}"
  exit 0
fi
echo "rdma-check: some suites failed (see the summary's \"suites\" and their logs)"
exit 1
