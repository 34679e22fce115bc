#!/usr/bin/env bash
# libpcoll.so exports the C API and nothing else: every defined dynamic symbol is pcoll_*,
# none is C++ (pcoll:: or the standard library's templates), and the core calls are there.
# Usage: exports.sh LIBPCOLL_SO
set -euo pipefail
symbols=$(nm -D --defined-only "$1" | awk '{print $3}')
others=$(grep -v '^pcoll_' <<<"$symbols" || true)
if [[ -n $others ]]; then
  echo "exports.sh: $1 exports symbols outside the C API:"; echo "$others" | head -20; exit 1
fi
for required in pcoll_init pcoll_allreduce_create pcoll_allreduce_run pcoll_allreduce_stats pcoll_last_error pcoll_finalize; do
  grep -qx "$required" <<<"$symbols" || { echo "exports.sh: $1 does not export $required"; exit 1; }
done
echo "exports.sh: $(wc -l <<<"$symbols") symbols, all pcoll_*"
