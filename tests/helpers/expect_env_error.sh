#!/bin/sh
# expect_env_error.sh VARIABLE VALUE command...: runs the command with VARIABLE=VALUE and
# passes when it fails (non-zero exit, within 20 s) with a message on stderr that names
# VARIABLE; a bad environment value must never be ignored or silently replaced.
variable=$1
value=$2
shift 2
err=$(env "$variable=$value" timeout 20 "$@" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -eq 0 ]; then echo "$variable='$value' was accepted: $*"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "$variable='$value': the command hung: $*"; exit 1; fi
case "$err" in
  *"$variable"*) echo "$err" | head -1 ;;
  *) echo "exit status $rc but the message does not name $variable:"; echo "$err"; exit 1 ;;
esac
