# Sourced by a test script as its first step: runs the script again in its own mount
# namespace with a fresh tmpfs on /dev/shm (SIZE, e.g. 256m), so that concurrent tests
# neither disturb nor are disturbed by its files there; exits 77 (skip) where no mount
# namespace can be made (not root). Usage, before anything else the script does:
#   source "$(dirname "$0")/private_dev_shm.sh" SIZE "$0" "$@"
private_dev_shm_size=$1
shift
if [[ "${IN_PRIVATE_DEV_SHM:-}" != 1 ]]; then
  if ! unshare --mount --propagation private true 2>/dev/null; then
    echo "skip: needs a mount namespace (unshare --mount, as root) for a private /dev/shm"
    exit 77
  fi
  IN_PRIVATE_DEV_SHM=1 exec unshare --mount --propagation private bash -c \
    'mount -t tmpfs -o size='"$private_dev_shm_size"' tmpfs /dev/shm && exec "$0" "$@"' "$@"
fi
unset private_dev_shm_size
