#!/usr/bin/env bash
# The same binaries under the MPI launchers, which start pcoll through their PMI servers:
#   openmpi:  mpirun.openmpi --allow-run-as-root --oversubscribe -np 4   (PMIx)
#   hydra:    mpiexec.hydra -n 4                                          (PMI2)
# Each: pcoll_info --json on every rank names the expected bootstrap, repeated allgathers of
# 0 B .. 1 MiB blobs (bootstrap_rank), then collective_check.
# Named launchers, not mpirun/mpiexec: with MPICH and Open MPI both installed, those
# alternatives may point to either.
#   usage: mpirun.sh openmpi|hydra
set -euo pipefail
source "$(dirname "$0")/common.sh"

require_programs PCOLL_TEST_COLLECTIVE_CHECK PCOLL_TEST_INFO PCOLL_TEST_RANK_PROGRAM
case ${1:-} in
  openmpi)
    need mpirun.openmpi openmpi-bin
    expected=pmix
    # Local ranks only; ORTE's out-of-band channel stays on loopback.
    launch=(mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 --bind-to none
            --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)
    ;;
  hydra)
    need mpiexec.hydra mpich
    expected=pmi2
    launch=(mpiexec.hydra -n 4 -launcher fork -iface lo -bind-to none)
    ;;
  *) die "usage: mpirun.sh openmpi|hydra" ;;
esac

out=$(mktemp /tmp/pcoll-mpirun.XXXXXX)
trap 'rm -f "$out"' EXIT

echo "=== ${launch[*]} pcoll_info --json"
timeout 60 "${launch[@]}" "$PCOLL_TEST_INFO" --json -p ofi:shm >"$out" || die "${launch[0]} pcoll_info failed"
check_bootstrap "$expected" "$out"
echo "=== ${launch[*]} bootstrap_rank gather 3"
timeout 60 "${launch[@]}" "$PCOLL_TEST_RANK_PROGRAM" gather 3 || die "${launch[0]} bootstrap_rank gather failed"
timeout 60 "${launch[@]}" "$PCOLL_TEST_RANK_PROGRAM" barrier-late 300 || die "${launch[0]}: a barrier let ranks through early"
echo "=== ${launch[*]} collective_check"
timeout 120 "${launch[@]}" "$PCOLL_TEST_COLLECTIVE_CHECK" -nc -tc="$CLUSTER_CASES" ||
  die "${launch[0]} -n 4 collective_check failed"
echo "${launch[0]}: all runs passed"
