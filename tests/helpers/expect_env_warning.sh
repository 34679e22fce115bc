#!/bin/sh
# expect_env_warning.sh ASSIGNMENTS EXPECTED command...: runs the command with the
# space-separated NAME=VALUE pairs of ASSIGNMENTS added to its environment and passes when
# it succeeds (within 20 s) with exactly one "is not a pcoll setting" warning on stderr,
# containing EXPECTED; or with none at all when EXPECTED is empty.
assignments=$1
expected=$2
shift 2
# shellcheck disable=SC2086 # the assignments are meant to split
err=$(env $assignments timeout 20 "$@" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne 0 ]; then echo "exit status $rc with $assignments: $*"; echo "$err"; exit 1; fi
warnings=$(printf '%s\n' "$err" | grep 'is not a pcoll setting')
count=$(printf '%s' "$warnings" | grep -c .)
if [ -z "$expected" ]; then
  if [ "$count" -ne 0 ]; then echo "unexpected warning with $assignments:"; echo "$warnings"; exit 1; fi
  echo "no warning with $assignments"
  exit 0
fi
if [ "$count" -ne 1 ]; then echo "expected one warning with $assignments, got $count:"; echo "$err"; exit 1; fi
case "$warnings" in
  *"$expected"*) echo "$warnings" ;;
  *) echo "the warning does not say '$expected':"; echo "$warnings"; exit 1 ;;
esac
