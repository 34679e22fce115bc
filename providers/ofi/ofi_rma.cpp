// One-sided writes, write-with-notification, notify() messages and flush().
//
// Plain writes use fi_writemsg with FI_DELIVERY_COMPLETE, so a completion means the bytes
// are visible at the target: flush() only has to wait for completions. write_notify uses
// FI_TRANSMIT_COMPLETE: its notification tells the target when the data is there, and the
// initiator only needs to know when the source may be reused. Small writes add
// FI_INJECT (one call, source reusable at once) and still report a completion, which keeps
// flush() exact without a separate fence. write_notify's value rides as remote CQ data,
// which the target CQ reports only after the data is placed.
#include <string>

#include <ofi/ofi_transport.hpp>

namespace pcoll::transport::ofi {

const OfiLocalRegion& local(const LocalRegion& region) {
  const auto* ofi = dynamic_cast<const OfiLocalRegion*>(&region);
  if (ofi == nullptr) invalid_argument("ofi: a LocalRegion from another transport was passed");
  return *ofi;
}

const OfiRemoteRegion& remote(const RemoteRegion& region) {
  const auto* ofi = dynamic_cast<const OfiRemoteRegion*>(&region);
  if (ofi == nullptr) invalid_argument("ofi: a RemoteRegion from another transport was passed");
  return *ofi;
}

bool is_peer_loss(ssize_t rc) {
  switch (-rc) {
    case FI_ECONNREFUSED: case FI_ECONNRESET: case FI_ECONNABORTED: case FI_EHOSTUNREACH:
    case FI_ENOTCONN: case FI_ESHUTDOWN: case FI_EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

// Shared by the posting paths: the error for a post that failed for good.
[[noreturn]] void fail_post(const std::string& op, int peer, ssize_t rc,
                            std::chrono::milliseconds timeout) {
  const std::string rank = "rank " + std::to_string(peer);
  if (rc == -FI_EAGAIN)
    fail_peer(Errc::timeout, peer, op + " to " + rank + ": the transmit queue stayed full for " +
                            timeout_text(timeout) + "; is " +
                            rank + " still progressing?");
  if (is_peer_loss(rc)) fail_peer(Errc::peer_failed, peer, fi_message(op + " to " + rank, rc));
  fail(Errc::transport, fi_message(op + " to " + rank, rc));
}

void OfiTransport::do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                            size_t dst_offset, size_t bytes) {
  post_write(local(src), src_offset, remote(dst), dst_offset, bytes, false, 0);
}

void OfiTransport::do_write_notify(const LocalRegion& src, size_t src_offset,
                                   const RemoteRegion& dst, size_t dst_offset, size_t bytes,
                                   uint64_t value) {
  post_write(local(src), src_offset, remote(dst), dst_offset, bytes, true, value);
}

void OfiTransport::post_write(const OfiLocalRegion& src, size_t src_offset,
                              const OfiRemoteRegion& dst, size_t dst_offset, size_t bytes,
                              bool with_value, uint64_t value) {
  if (bytes == 0) {
    // Nothing to make visible: only the value travels, as a notify() message. 0-byte RMA
    // writes never complete on sockets and shm (libfabric 1.17, with FI_DELIVERY_COMPLETE).
    if (with_value) notify(dst.peer(), value);
    return;
  }
  if (bytes <= max_write_bytes_) {
    post_write_chunk(src, src_offset, dst, dst_offset, bytes, with_value, value);
    return;
  }
  // Larger than one provider message: plain chunks first; the value rides on the last one,
  // posted only after the others completed, so it is never seen before all the bytes.
  size_t done = 0;
  while (bytes - done > max_write_bytes_) {
    post_write_chunk(src, src_offset + done, dst, dst_offset + done, max_write_bytes_, false, 0);
    done += max_write_bytes_;
  }
  if (with_value) flush();
  post_write_chunk(src, src_offset + done, dst, dst_offset + done, bytes - done, with_value, value);
}

void OfiTransport::post_write_chunk(const OfiLocalRegion& src, size_t src_offset,
                                    const OfiRemoteRegion& dst, size_t dst_offset, size_t bytes,
                                    bool with_value, uint64_t value) {
  const int peer = dst.peer();
  iovec iov{src.base() + src_offset, bytes};
  void* desc = src.desc();
  fi_rma_iov rma_iov{dst.address(dst_offset), bytes, dst.key()};
  // A plain write must be visible when flush() returns, so it asks for delivery
  // completion. A write_notify's data is announced by its own remote CQ entry, which the
  // target gets only after the data is placed: transmit completion (source reusable) is
  // enough, and on shm it saves an acknowledgement per write.
  uint64_t flags = with_value ? (FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA) : FI_DELIVERY_COMPLETE;
  if (bytes <= inject_bytes_) flags |= FI_INJECT;

  std::unique_lock lock(mutex_);
  if (!peer_failure_[peer].empty()) fail_peer(Errc::peer_failed, peer, peer_failure_[peer]);
  WriteBucket& bucket = buckets_[parity_ * peers_.size() + peer];
  // A context of its own, even for an inject: the write still completes, and FI_CONTEXT
  // providers keep state in the context until then.
  WriteOp& op = write_ops_.take(bucket);
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = peers_[peer];
  msg.rma_iov = &rma_iov;
  msg.rma_iov_count = 1;
  msg.context = op.context();
  msg.data = value & value_mask_;  // what the NIC's remote CQ data can hold
  const ssize_t rc = post_with_retry([&] { return fi_writemsg(ep_.get(), &msg, flags); }, lock,
                                     Clock::now() + options_.timeout);
  if (rc != 0) {
    write_ops_.give_back(op);
    fail_post(with_value ? "write_notify" : "write", peer, rc, options_.timeout);
  }
  if (bucket.outstanding++ == 0) bucket.moved = Clock::now();
}

void OfiTransport::do_notify(int peer, uint64_t value) { post_notify(peer, value, true); }

bool OfiTransport::do_try_notify(int peer, uint64_t value) { return post_notify(peer, value, false); }

// An 8-byte inject into one of the target's posted receives (see ofi_transport.hpp).
// Waiting for room, it is retried for the transport's timeout; otherwise posted once more
// after reaping completions (rxm over tcp answers -FI_EAGAIN for as long as it cannot reach
// a departed peer), and false when the queue is still full.
bool OfiTransport::post_notify(int peer, uint64_t value, bool wait_for_room) {
  std::unique_lock lock(mutex_);
  if (!peer_failure_[peer].empty()) fail_peer(Errc::peer_failed, peer, peer_failure_[peer]);
  const auto inject = [&] { return fi_inject(ep_.get(), &value, sizeof value, peers_[peer]); };
  ssize_t rc = 0;
  if (wait_for_room) {
    rc = post_with_retry(inject, lock, Clock::now() + options_.timeout);
  } else if (rc = inject(); rc == -FI_EAGAIN) {
    progress_locked();
    if (rc = inject(); rc == -FI_EAGAIN) return false;
  }
  if (rc != 0) fail_post("notify", peer, rc, options_.timeout);
  return true;
}

void OfiTransport::flush() {
  std::lock_guard flush_lock(flush_mutex_);
  const size_t ranks = peers_.size();
  if (ranks == 0) return;
  unsigned epoch = 0;
  {
    std::lock_guard lock(mutex_);
    epoch = parity_;
    parity_ ^= 1u;  // later writes go to the other epoch and do not delay this flush
  }
  WriteBucket* first = &buckets_[epoch * ranks];
  auto drained = [&] {
    for (size_t p = 0; p < ranks; ++p)
      if (first[p].outstanding != 0) return false;
    return true;
  };
  const bool done = block_until(drained, Clock::now() + options_.timeout);

  std::lock_guard lock(mutex_);
  std::string failures;
  std::string silent;
  size_t silent_count = 0;
  int failed_peer = -1;
  int silent_peer = -1;
  for (size_t p = 0; p < ranks; ++p) {
    if (!first[p].error.empty()) {
      failures += (failures.empty() ? "" : "; ") + first[p].error;
      first[p].error.clear();
      if (failed_peer < 0) failed_peer = static_cast<int>(p);
    }
    if (first[p].outstanding != 0) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(p);
      ++silent_count;
      if (silent_peer < 0) silent_peer = static_cast<int>(p);
    }
  }
  if (!failures.empty()) fail_peer(Errc::peer_failed, failed_peer, "ofi: flush: " + failures);
  if (!done)
    fail_peer(Errc::timeout, silent_peer, "ofi: flush: " + ranks_word(silent_count) + silent + " did not complete writes within " +
                            timeout_text(options_.timeout) +
                            "; is their progress engine running?");
}

}  // namespace pcoll::transport::ofi
