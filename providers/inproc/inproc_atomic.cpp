// The in-process provider's 64-bit atomics: std::atomic_ref on the target rank's word.
#include <atomic>
#include <cstdint>

#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {

template <typename Op>
uint64_t InprocTransport::atomic(const char* name, const RemoteRegion& dst, size_t offset, Op&& op) {
  const InprocRemoteRegion& remote = remote_of(dst, name);
  const int peer = remote.peer();
  peer_endpoint(peer, name);
  check_error();
  Fabric& fabric = Fabric::instance();
  std::shared_lock lock(fabric.regions_mutex());
  const Fabric::Region* region = fabric.find_region_locked(remote.id());
  if (region == nullptr)
    fail_peer(Errc::peer_failed, peer,
              std::string("inproc ") + name + " on rank " + std::to_string(peer) +
                  ": its region is no longer registered (remote access error)");
  std::byte* at = region->bytes.data() + offset;
  if (reinterpret_cast<uintptr_t>(at) % alignof(std::atomic_ref<uint64_t>) != 0)
    invalid_argument(std::string("inproc ") + name + " on rank " + std::to_string(peer) +
                     ": the word is not 8-byte aligned in memory (register aligned memory for atomics)");
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(at));
  return op(word);
}

uint64_t InprocTransport::do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  return atomic("fetch_add", dst, offset, [&](std::atomic_ref<uint64_t> word) { return word.fetch_add(operand); });
}

uint64_t InprocTransport::do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) {
  return atomic("compare_swap", dst, offset, [&](std::atomic_ref<uint64_t> word) {
    uint64_t old = expected;
    word.compare_exchange_strong(old, desired);
    return old;
  });
}

uint64_t InprocTransport::do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic("swap", dst, offset, [&](std::atomic_ref<uint64_t> word) { return word.exchange(value); });
}

uint64_t InprocTransport::do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic("atomic_max", dst, offset, [&](std::atomic_ref<uint64_t> word) {
    uint64_t old = word.load();
    while (old < value && !word.compare_exchange_weak(old, value)) {
    }
    return old;
  });
}

}  // namespace pcoll::transport::inproc
