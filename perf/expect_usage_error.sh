#!/bin/sh
# Runs a perf tool with bad arguments: passes when it exits with status 2 and says why on stderr.
err=$("$@" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne 2 ]; then echo "expected exit status 2, got $rc: $*"; echo "$err"; exit 1; fi
if [ -z "$err" ]; then echo "exit status 2 but no message: $*"; exit 1; fi
echo "$err" | head -1
