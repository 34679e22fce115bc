#!/usr/bin/env bash
# The hardware validation script (scripts/rdma-check.sh) exercised without RDMA hardware:
#   rdma_check.sh BUILD_ROOT SOURCE_ROOT PROVIDERS
# 1. --list-only: on a host without an RDMA NIC it says so and exits 77, with a JSON summary
#    that lists the devices and finds none (on an RDMA host: exit 0, something found).
# 2. --providers PROVIDERS --quick: the whole flow (conformance, collective in both
#    notification widths, pingpong against fi_pingpong / ucx_perftest) over loopback
#    providers must pass, and its JSON summary must hold every field users read.
set -uo pipefail
source "$(dirname "$0")/common.sh"

build=$1 source_root=$2 providers=$3
script="$source_root/scripts/rdma-check.sh"
[[ -x /usr/bin/python3 ]] || skip "/usr/bin/python3 is needed to read the JSON summary"
work=$(mktemp -d "${TMPDIR:-/tmp}/pcoll-rdma-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== rdma-check --list-only"
bash "$script" --build "$build" --list-only --out "$work/list.json" --logs "$work/list"
rc=$?
/usr/bin/python3 - "$work/list.json" "$rc" <<'PY' || die "rdma-check --list-only: wrong summary or exit status $rc"
import json, sys
summary, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
assert set(summary["devices"]) == {"ibv", "libfabric_providers", "libfabric_rdma_domains", "ucx"}, summary["devices"]
assert summary["providers"] == [], "--list-only ran providers"
if summary["rdma_found"]:
    assert rc == 0 and summary["found"], (rc, summary["found"])
else:
    assert rc == 77 and summary["found"] == [], (rc, summary["found"])
print("list-only: exit", rc, "rdma_found", summary["rdma_found"], "libfabric providers",
      summary["devices"]["libfabric_providers"])
PY

echo "== rdma-check --providers $providers --quick"
bash "$script" --build "$build" --providers "$providers" --quick --timeout 240 \
  --out "$work/loopback.json" --logs "$work/loopback"
rc=$?
/usr/bin/python3 - "$work/loopback.json" "$providers" <<'PY' || die "rdma-check over $providers: summary incomplete"
import json, sys
summary, wanted = json.load(open(sys.argv[1])), sys.argv[2].split(",")
names = [p["name"] for p in summary["providers"]]
assert names == wanted, f"providers {names}, expected {wanted}"
assert summary["mode"] == "given" and summary["quick"] is True
for p in summary["providers"]:
    where = p["name"]
    assert "PCOLL_PROVIDER" in p["env"], (where, p["env"])
    caps = p["capabilities"]
    assert caps and "error" not in caps and "remote_atomics" in caps and "notify_bits" in caps, (where, caps)
    for suite in ("transport_conformance", "collective_64", "collective_32"):
        result = p["suites"][suite]["result"]
        assert result == "pass", f"{where}: {suite} {result} (log {p['suites'][suite].get('log')})"
        assert p["suites"][suite]["seconds"] is not None
    latency, bandwidth = p["pingpong"]["latency"], p["pingpong"]["bandwidth"]
    assert latency["result"] == "pass" and bandwidth["result"] == "pass", (where, p["pingpong"])
    assert latency["pcoll_usec"] > 0 and latency["anchor_usec"] > 0 and latency["ratio"] > 0, (where, latency)
    assert bandwidth["pcoll_mb_per_sec"] > 0 and bandwidth["anchor_mb_per_sec"] > 0 and bandwidth["ratio"] > 0, (where, bandwidth)
    assert latency["anchor"].startswith(("fi_pingpong", "ucx_perftest")), (where, latency["anchor"])
    assert p["passed"], where
    print(f"{where}: suites pass; latency {latency['pcoll_usec']} us vs {latency['anchor_usec']} us "
          f"({latency['ratio']}x); bandwidth {bandwidth['pcoll_mb_per_sec']} vs {bandwidth['anchor_mb_per_sec']} MB/s")
assert summary["passed"]
PY
((rc == 0)) || die "rdma-check over $providers exited $rc"
echo "rdma-check: both runs as expected"
