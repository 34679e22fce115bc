#!/bin/sh
# expect_fault_wraps_default.sh program args...: PCOLL_PROVIDER=fault+ (nothing after the
# +) must wrap the provider the same job uses without PCOLL_PROVIDER, and say nothing about
# falling back. The program prints "provider <selector>," in its first line
# (pcoll_allreduce does).
unset PCOLL_PROVIDER PCOLL_FAULT
plain=$(timeout 20 "$@" 2>&1) || { echo "the job without PCOLL_PROVIDER failed:"; echo "$plain"; exit 1; }
faulty=$(PCOLL_PROVIDER=fault+ timeout 20 "$@" 2>&1) || { echo "the job with PCOLL_PROVIDER=fault+ failed:"; echo "$faulty"; exit 1; }
pick() { echo "$1" | sed -n 's/.*provider \([^,]*\),.*/\1/p' | head -1; }
want="fault+$(pick "$plain")"
got=$(pick "$faulty")
if [ "$got" != "$want" ]; then
  echo "PCOLL_PROVIDER=fault+ ran '$got', expected '$want':"; echo "$faulty"; exit 1
fi
case "$faulty" in
  *unusable*|*warn*) echo "PCOLL_PROVIDER=fault+ warned:"; echo "$faulty"; exit 1 ;;
esac
echo "fault+ wraps $want"
