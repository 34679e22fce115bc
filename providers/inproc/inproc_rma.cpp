// The in-process provider's data movement: write, write_notify, the queue of large writes
// and flush().
#include <cstring>

#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {

void copy_between(uint64_t src_region, size_t src_offset, uint64_t dst_region, size_t dst_offset, size_t bytes,
                  int peer) {
  Fabric& fabric = Fabric::instance();
  std::shared_lock lock(fabric.regions_mutex());
  const Fabric::Region* src = fabric.find_region_locked(src_region);
  const Fabric::Region* dst = fabric.find_region_locked(dst_region);
  if (dst == nullptr)
    fail_peer(Errc::peer_failed, peer,
              "inproc write to rank " + std::to_string(peer) + ": its region is no longer registered (remote access error)");
  if (src == nullptr)
    fail(Errc::invalid_state, "inproc write to rank " + std::to_string(peer) +
                                  ": the source region was deregistered before the write completed (flush first)");
  if (bytes > 0) std::memcpy(dst->bytes.data() + dst_offset, src->bytes.data() + src_offset, bytes);
}

void InprocTransport::check_error() {
  std::lock_guard lock(self_->mutex);
  if (self_->error_code != Errc::ok) fail(self_->error_code, self_->error);
}

void InprocTransport::post_write(const char* op, const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                                 size_t dst_offset, size_t bytes, bool notify, uint64_t value) {
  const InprocLocalRegion& local = local_of(src, op);
  const InprocRemoteRegion& remote = remote_of(dst, op);
  const int peer = remote.peer();
  Endpoint& target = peer_endpoint(peer, op);
  if (&local.endpoint() != self_.get())
    invalid_argument(std::string("inproc ") + op + ": the source region belongs to another rank's transport");
  check_error();
  if (bytes <= caps_.inject_bytes) {
    copy_between(local.id(), src_offset, remote.id(), dst_offset, bytes, peer);
    if (notify) deliver(target, value);
    return;
  }
  std::lock_guard lock(self_->mutex);
  self_->outbox.push_back(PendingWrite{local.id(), src_offset, peers_[static_cast<size_t>(peer)], peer, remote.id(),
                                       dst_offset, bytes, notify, value});
  // Wakes this rank's progress driver, the provider's "NIC" for queued writes.
  ++self_->activity;
  self_->changed.notify_all();
}

void InprocTransport::do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                               size_t bytes) {
  post_write("write", src, src_offset, dst, dst_offset, bytes, false, 0);
}

void InprocTransport::do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                                      size_t dst_offset, size_t bytes, uint64_t value) {
  post_write("write_notify", src, src_offset, dst, dst_offset, bytes, true, value);
}

void InprocTransport::copy_pending() {
  for (;;) {
    PendingWrite pending;
    {
      std::lock_guard lock(self_->mutex);
      if (self_->outbox.empty() || self_->error_code != Errc::ok) return;
      pending = std::move(self_->outbox.front());
      self_->outbox.pop_front();
      ++self_->copying;
    }
    Errc code = Errc::ok;
    std::string message;
    try {
      copy_between(pending.src_region, pending.src_offset, pending.dst_region, pending.dst_offset, pending.bytes,
                   pending.peer);
      if (pending.notify) deliver(*pending.target, pending.value);
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    }
    std::lock_guard lock(self_->mutex);
    --self_->copying;
    // A failed write fails every later call, as a provider's error completion would.
    if (code != Errc::ok && self_->error_code == Errc::ok) {
      self_->error_code = code;
      self_->error = message;
    }
    self_->changed.notify_all();
  }
}

void InprocTransport::flush() {
  copy_pending();
  {
    // Writes another thread took from the outbox before this call complete before it returns.
    std::unique_lock lock(self_->mutex);
    if (!self_->changed.wait_for(lock, options_.timeout, [&] { return self_->copying == 0; }))
      fail(Errc::timeout, "inproc flush: a write still copying after " + std::to_string(options_.timeout.count()) + " ms");
  }
  check_error();
}

}  // namespace pcoll::transport::inproc
