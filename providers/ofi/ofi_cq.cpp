// Completion queue: progress (reaping completions, queueing notifications, re-posting
// notify receives), poll() and wait()/wake().
//
// Waiting is the shared WaitLoop (transport/wait_loop.hpp). With an FI_WAIT_FD CQ
// (tcp;ofi_rxm, sockets) one thread at a time sleeps in ppoll() on the CQ fd and the loop's
// eventfd, after fi_trywait() said that is safe; other waiters sleep on its condition
// variable, which progress and the sleeper signal. shm has no fd (and its fi_cq_sread
// yields in a loop, burning a core), so there a notification waiter spins for ~30 us, then
// progresses on growing sleeps of 50 us up to 1 ms. An activity waiter (the progress
// thread, or a flush past its own spin) skips the spin: it runs beside an application that
// spins itself or computes, often on the same core.
#include <ofi/ofi_transport.hpp>
#include <support/log.hpp>

namespace pcoll::transport::ofi {

namespace {

constexpr size_t kCqBatch = 16;
// Notification waiters without a CQ fd spin this long before they back off.
constexpr auto kSpin = std::chrono::microseconds(30);

WaitTuning wait_tuning() {
  WaitTuning tuning;
  // The fd sleeper re-checks at least this often, in case the provider needs a poll to make
  // progress that does not signal its fd.
  tuning.max_sleep = std::chrono::milliseconds(10);
  tuning.first_backoff = std::chrono::microseconds(50);
  tuning.max_backoff = std::chrono::milliseconds(1);
  tuning.yield_while_spinning = false;
  // A provider that keeps saying "progress first" without producing events must not turn
  // the wait into a spin.
  tuning.arm_refusals_before_pause = 16;
  return tuning;
}

}  // namespace

void OfiTransport::open_wait_loop() {
  wait_loop_.emplace(static_cast<WaitLoop::Hooks&>(*this), fd_wait_ ? cq_fd_ : -1, wait_tuning(), "ofi");
}

bool OfiTransport::arm() {
  fid* fids[] = {&cq_->fid};
  return fi_trywait(fabric_.get(), fids, 1) == FI_SUCCESS;
}

void OfiTransport::repost_receive_locked(RecvSlot& slot) {
  const ssize_t rc = fi_recv(ep_.get(), slot.value, sizeof(uint64_t), scratch_desc_,
                             FI_ADDR_UNSPEC, slot.context());
  if (rc == -FI_EAGAIN) {
    pending_reposts_.push_back(&slot);  // capacity reserved: no allocation
    return;
  }
  if (rc != 0) fail_fi("fi_recv(notify buffer)", rc);
}

void OfiTransport::handle_error_locked() {
  fi_cq_err_entry err{};
  const ssize_t rc = fi_cq_readerr(cq_.get(), &err, 0);
  if (rc == -FI_EAGAIN) return;
  if (rc < 0) fail_fi("fi_cq_readerr", rc);
  char buffer[256] = {};
  const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buffer, sizeof buffer);
  std::string text = std::string(fi_strerror(err.err)) + " (" + std::to_string(-err.err) + ")";
  if (detail != nullptr && *detail != '\0') text += ": " + std::string(detail);

  if (err.op_context == nullptr || (err.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))) {
    log::warn("ofi: completion error for a peer's access to this rank: " + text);
    return;
  }
  Op* op = &Op::of(err.op_context);
  switch (op->kind) {
    case Op::Kind::recv: {
      // Cancelled at shutdown; anything else (a truncated message) lost a peer's
      // notification, which somebody waits for: the buffer goes back into service and the
      // next poll() fails.
      if (err.err != FI_ECANCELED) {
        delivery_error_.keep(Error(Errc::protocol, "ofi: a notification arrived damaged: " + text));
        repost_receive_locked(*static_cast<RecvSlot*>(op));
      }
      return;
    }
    case Op::Kind::write: {
      auto& write = *static_cast<WriteOp*>(op);
      WriteBucket& bucket = *write.bucket;
      write_ops_.give_back(write);  // completed, in error: the provider is done with it
      if (bucket.outstanding > 0) --bucket.outstanding;
      bucket.moved = Clock::now();
      const std::string message = "write to rank " + std::to_string(bucket.peer) + " failed: " + text;
      if (bucket.error.empty()) bucket.error = message;
      const bool lost = is_peer_loss(-static_cast<ssize_t>(err.err));
      if (lost && peer_failure_[bucket.peer].empty())
        peer_failure_[bucket.peer] = "ofi: rank " + std::to_string(bucket.peer) + " failed: " + text;
      // The target waits for this write's data (or its notification): a flush may never
      // come (small writes need none), so the next poll() fails too. As in flush(), the
      // peer is failed whatever the reason: a connection torn down under the write
      // (FI_ECANCELED on tcp when the peer died) is as final as a reset.
      delivery_error_.keep(Error(Errc::peer_failed, "ofi: " + message, bucket.peer));
      return;
    }
    case Op::Kind::atomic: {
      auto& slot = *static_cast<AtomicSlot*>(op);
      if (is_peer_loss(-static_cast<ssize_t>(err.err)) && peer_failure_[slot.peer].empty())
        peer_failure_[slot.peer] = "ofi: rank " + std::to_string(slot.peer) + " failed: " + text;
      if (slot.state == AtomicSlot::State::abandoned) {
        slot.state = AtomicSlot::State::free;
      } else {
        slot.error = "rank " + std::to_string(slot.peer) + " failed: " + text;
        slot.state = AtomicSlot::State::done;
      }
      return;
    }
  }
}

size_t OfiTransport::progress_locked() {
  fi_cq_data_entry entries[kCqBatch];
  size_t events = 0;
  for (;;) {
    const ssize_t n = fi_cq_read(cq_.get(), entries, kCqBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      handle_error_locked();
      ++events;
      continue;
    }
    if (n < 0) fail_fi("fi_cq_read", n);
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      // sockets echoes FI_REMOTE_CQ_DATA on the initiator's own completion: only entries
      // for a peer's access (remote write or receive) carry notifications.
      const bool incoming = (e.flags & (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0;
      if (incoming && (e.flags & FI_REMOTE_CQ_DATA)) {
        // write_notify's value; the data it describes is already in place.
        notifications_.push_back(e.data & value_mask_);
        if ((e.flags & FI_RECV) && e.op_context != nullptr && Op::of(e.op_context).kind == Op::Kind::recv)
          repost_receive_locked(static_cast<RecvSlot&>(Op::of(e.op_context)));
        continue;
      }
      if (incoming && (e.flags & FI_RECV)) {
        auto& slot = static_cast<RecvSlot&>(Op::of(e.op_context));
        // A shorter message would hand out what the slot held before: the previous value.
        if (e.len == sizeof(uint64_t))
          notifications_.push_back(*slot.value);
        else
          delivery_error_.keep(Error(Errc::protocol, "ofi: a notification of " + std::to_string(e.len) +
                                                                " bytes arrived (notifications are 8 bytes)"));
        repost_receive_locked(slot);
        continue;
      }
      if (incoming) continue;  // a peer's access without a value: nothing to do
      if (e.op_context == nullptr) continue;
      Op* op = &Op::of(e.op_context);
      if (op->kind == Op::Kind::write) {
        auto& write = *static_cast<WriteOp*>(op);
        WriteBucket& bucket = *write.bucket;
        write_ops_.give_back(write);
        if (bucket.outstanding > 0) --bucket.outstanding;
        bucket.moved = Clock::now();
      } else if (op->kind == Op::Kind::atomic) {
        auto& slot = *static_cast<AtomicSlot*>(op);
        slot.state = slot.state == AtomicSlot::State::abandoned ? AtomicSlot::State::free
                                                                : AtomicSlot::State::done;
      }
    }
    events += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < kCqBatch) break;
  }
  if (!pending_reposts_.empty()) {
    std::vector<RecvSlot*> retry;
    retry.swap(pending_reposts_);
    pending_reposts_.reserve(kRecvSlots);
    for (RecvSlot* slot : retry) repost_receive_locked(*slot);
  }
  if (events > 0) {
    ++event_seq_;
    wait_loop_->on_progress(!notifications_.empty());
  }
  return events;
}

void OfiTransport::progress() {
  std::lock_guard lock(mutex_);
  progress_locked();
}

void OfiTransport::check_stalled_writes_locked() {
  const auto now = Clock::now();
  if (now < next_stall_check_ || delivery_error_.kept()) return;
  next_stall_check_ = now + std::chrono::milliseconds(10);
  for (const WriteBucket& bucket : buckets_) {
    if (bucket.outstanding == 0 || now - bucket.moved <= options_.timeout) continue;
    delivery_error_.keep(Error(
        Errc::timeout,
        "ofi: " + std::to_string(bucket.outstanding) + " write(s) to rank " + std::to_string(bucket.peer) +
            " have not completed for " + std::to_string(options_.timeout.count()) +
            " ms: the target dropped them (a bad key?) or its provider stopped progressing",
        bucket.peer));
    return;
  }
}

size_t OfiTransport::poll(std::span<uint64_t> out) {
  std::lock_guard lock(mutex_);
  progress_locked();
  check_stalled_writes_locked();
  delivery_error_.throw_once();
  size_t count = 0;
  while (count < out.size() && !notifications_.empty()) {
    out[count++] = notifications_.front();
    notifications_.pop_front();
  }
  return count;
}

void OfiTransport::wake() {
  std::lock_guard lock(mutex_);
  wait_loop_->wake();
}

bool OfiTransport::wait(std::chrono::microseconds timeout, WaitFor what) {
  return wait_impl(Clock::now() + timeout,
                   what == WaitFor::notification ? WaitKind::notification : WaitKind::activity);
}

bool OfiTransport::wait_impl(Clock::time_point deadline, WaitKind kind) {
  std::unique_lock lock(mutex_);
  if (kind == WaitKind::notification)
    return wait_loop_->wait(lock, [this] { return !notifications_.empty(); }, deadline, kind,
                            fd_wait_ ? std::chrono::microseconds(0) : kSpin);
  const uint64_t events_seen = event_seq_;
  return wait_loop_->wait(lock, [&] { return event_seq_ != events_seen; }, deadline, kind,
                          std::chrono::microseconds(0));
}

}  // namespace pcoll::transport::ofi
