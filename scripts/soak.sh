#!/usr/bin/env bash
# Soak: tests/multiprocess/soak_check at P=4 for 10^6 rounds (--rounds to change) in solo and
# majority mode on the default provider, random per-rank delays, conservation checked
# exactly (int64 sums) and identical results on every rank. Prints one line per mode.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=1000000
[[ ${1:-} == --rounds ]] && rounds=$2
bash scripts/build.sh >/dev/null
for mode in solo majority; do
  timeout 3600 build/tools/pcollrun -n 4 --timeout-ms 120000 build/tests/soak_check --rounds "$rounds" --mode "$mode"
done
