// One-sided data movement: write (ucp_put_nbx), write_notify and notify (mailbox stores or
// active messages; see the design note below), and flush.
//
// Notifications. To a peer whose memory UCX maps here (same host, every selector but
// ucx:tcp) both go through its mailbox: a copy into its mapped region and a store into its
// ring (ucx_mailbox.cpp). Otherwise they are active messages, since UCP has no
// put-with-immediate. Up to kEagerNotifyBytes, one eager active message carries the
// target address, the value and the bytes: the target's handler copies the bytes into the
// registered region and queues the value only after that, so a value is never seen before
// its bytes, and each value is queued exactly once by construction. Larger writes depend on
// the transport:
//   - ucx:tcp: the same active message, sent with UCP_AM_SEND_FLAG_EAGER, so UCP fragments
//     it on the endpoint's byte stream and hands on_write_notify the whole message (the
//     target copies it out of UCP's reassembly buffer). A put would cost no less here: tcp
//     gives UCP no RMA lane, so UCP 1.13 runs a put as its own active-message fragments,
//     which the target answers with a completion message. UCX aborts the target process
//     when that answer goes to a peer whose endpoint has failed (`ucp_request_try_send`
//     treats the send error as fatal), which a survivor ran into when a peer died with
//     puts on the wire (docs/reliability.md). Eager fragments need no answer, and a
//     rendezvous would bring back a protocol with one.
//   - everything else: a ucp_put_nbx, then a non-blocking endpoint flush whose completion
//     (remote completion of the put) sends the value: one round trip, nearly free on shm
//     (puts there complete in place). ucp_worker_fence would not do: in UCX 1.13 it calls
//     uct_iface_fence on each interface, which orders operations within one UCT interface
//     (a CPU fence on shared memory, a fenced work request on rc), not a put on one lane
//     against a message on another, nor requests UCP still holds. An active message whose
//     data the target fetches by rendezvous is correct everywhere but costs the same round
//     trip (the target asks for the data) and makes the data wait for the target's
//     progress.
// The target must progress to see notifications, which pcoll's progress engine does anyway.
// Plain write() stays a put (shm: no target involvement; on ucx:tcp UCP's software put,
// which only tools and tests use: the engine writes with write_notify alone).
//
// flush() flushes an endpoint only if puts went to it since the last flush that covered them:
// on tcp a UCT endpoint flush is a request/ack round trip the peer must progress, even when
// only active messages were sent, so flushing after notifications made a flush wait on a
// peer that had legitimately stopped progressing (e.g. sitting in a bootstrap barrier).
#include <algorithm>
#include <cstring>
#include <limits>

#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

ucp_request_param_t send_param(SendOp* op) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_complete;
  param.user_data = op;
  return param;
}

bool UcxTransport::send_by_mailbox(std::unique_lock<std::mutex>& lock, Peer& p, std::byte* target,
                                   uint64_t target_address, const void* bytes, size_t count,
                                   uint64_t value) {
  if (!core_->mailbox.send(p.rank, target, target_address, bytes, count, value)) return false;
  if (core_->mailbox.receiver_asleep()) {
    SendOp* op = core_->acquire_send_op(p.rank);
    const ucp_request_param_t param = send_param(op);
    post_send(lock, p, op, ucp_am_send_nbx(p.ep, am_kick, nullptr, 0, nullptr, 0, &param), "wake-up");
  }
  return true;
}

void on_send_complete(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  UcxCore* core = op->core;
  if (op->peer >= 0 && static_cast<size_t>(op->peer) < core->peers.size()) {
    Peer& p = *core->peers[static_cast<size_t>(op->peer)];
    --p.sends_in_flight;
    if (status != UCS_OK && status != UCS_ERR_CANCELED)
      core->record_failure(p, status, "a write or notification failed");
  }
  core->release_send_op(op);
  ucp_request_free(request);
}

// Second half of a large write_notify: the put is remotely complete, the value may go. This
// runs inside ucp_worker_progress(), possibly while UCX dispatches this very endpoint's
// pending queue: sending from here trips UCX's arbiter assertion (seen with 200 MB vectors
// on shared memory), so the message is only queued and sent after progress returns.
void on_flush_then_notify(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  UcxCore* core = op->core;
  ucp_request_free(request);
  if (op->peer < 0 || static_cast<size_t>(op->peer) >= core->peers.size()) {
    core->release_send_op(op);
    return;
  }
  Peer& p = *core->peers[static_cast<size_t>(op->peer)];
  if (status == UCS_OK && p.ep) {
    p.puts_flushed = std::max(p.puts_flushed, op->puts_posted);
    core->defer_notify(op);  // still counted in sends_in_flight
    return;
  }
  --p.sends_in_flight;
  if (status != UCS_OK && status != UCS_ERR_CANCELED) {
    core->record_failure(p, status, "a write_notify failed");
    // Its target waits for the value: fail here too, not only at the next send to it.
    core->defer_delivery_error(Error(Errc::peer_failed, "ucx: a write_notify to rank " + std::to_string(p.rank) +
                                                            " failed: " + ucs_status_string(status), p.rank));
  }
  core->release_send_op(op);
}

void UcxCore::send_deferred_notifies() {
  // Sending may run callbacks that defer more: take the list first.
  std::vector<SendOp*> ready;
  ready.swap(deferred_notifies_);
  for (SendOp* op : ready) {
    Peer& p = *peers[static_cast<size_t>(op->peer)];
    ucs_status_t status = UCS_ERR_CANCELED;  // the endpoint was closed meanwhile
    if (p.ep) {
      const ucp_request_param_t param = send_param(op);
      ucs_status_ptr_t next =
          ucp_am_send_nbx(p.ep, am_notify, op->header.data(), sizeof(uint64_t), nullptr, 0, &param);
      if (UCS_PTR_IS_PTR(next)) continue;  // in flight: on_send_complete finishes it
      status = UCS_PTR_STATUS(next);
    }
    --p.sends_in_flight;
    if (status != UCS_OK && status != UCS_ERR_CANCELED) {
      record_failure(p, status, "a write_notify failed");
      defer_delivery_error(Error(Errc::peer_failed, "ucx: a write_notify to rank " + std::to_string(p.rank) +
                                                        " failed: " + ucs_status_string(status), p.rank));
    }
    release_send_op(op);
  }
}

void on_blocking_complete(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<BlockingOp*>(user_data);
  op->status = status;
  op->done = true;
  ucp_request_free(request);
}

std::unique_ptr<BlockingOp> start_endpoint_flush(UcxCore& core, Peer& p, const char* what) {
  auto op = std::make_unique<BlockingOp>();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_blocking_complete;
  param.user_data = op.get();
  ucs_status_ptr_t request = ucp_ep_flush_nbx(p.ep, &param);
  if (UCS_PTR_IS_ERR(request)) {
    core.record_failure(p, UCS_PTR_STATUS(request), what);
    return nullptr;
  }
  if (request == nullptr) op->done = true;
  return op;
}

SendOp* UcxCore::acquire_send_op(int peer_rank) {
  if (free_send_ops_.empty()) {
    send_op_storage.push_back(std::make_unique<SendOp>());
    free_send_ops_.push_back(send_op_storage.back().get());
  }
  SendOp* op = free_send_ops_.back();
  free_send_ops_.pop_back();
  op->core = this;
  op->peer = peer_rank;
  return op;
}

void UcxCore::release_send_op(SendOp* op) { free_send_ops_.push_back(op); }

void UcxTransport::post_send(std::unique_lock<std::mutex>&, Peer& p, SendOp* op,
                             ucs_status_ptr_t request, const char* what) {
  p.dirty = true;
  if (request == nullptr) {  // completed in place
    core_->release_send_op(op);
    return;
  }
  if (UCS_PTR_IS_ERR(request)) {
    core_->release_send_op(op);
    const ucs_status_t status = UCS_PTR_STATUS(request);
    fail_peer_status(errc_for_peer_status(status), p.rank,
                     std::string(what) + " to rank " + std::to_string(p.rank), status);
  }
  ++p.sends_in_flight;
}

void UcxTransport::do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                            size_t dst_offset, size_t bytes) {
  check_connected("write");
  const UcxLocalRegion& s = local(src);
  const UcxRemoteRegion& d = remote(dst);
  if (bytes == 0) return;

  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(d.peer());
  core_->check_peer(p);
  SendOp* op = core_->acquire_send_op(p.rank);
  const void* source = s.bytes().data() + src_offset;
  if (bytes <= kInjectBytes) {  // caller may reuse its buffer at once
    std::memcpy(op->inline_bytes.data(), source, bytes);
    source = op->inline_bytes.data();
  }
  const ucp_request_param_t param = send_param(op);
  post_send(lock, p, op,
            ucp_put_nbx(p.ep, source, bytes, d.address() + dst_offset, d.rkey(), &param),
            "write");
  ++p.puts_posted;
}

void UcxTransport::do_write_notify(const LocalRegion& src, size_t src_offset,
                                   const RemoteRegion& dst, size_t dst_offset, size_t bytes,
                                   uint64_t value) {
  check_connected("write_notify");
  const UcxLocalRegion& s = local(src);
  const UcxRemoteRegion& d = remote(dst);
  if (bytes == 0) return notify(d.peer(), value);

  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(d.peer());
  core_->check_peer(p);
  const void* source = s.bytes().data() + src_offset;
  // Shared memory: copy straight into the peer's region, then the value into its mailbox.
  // Earlier plain writes to the peer may still be in flight: only with none pending may
  // this copy overtake nothing it must not.
  if (d.mapped_at() != nullptr && p.puts_posted == p.puts_flushed &&
      send_by_mailbox(lock, p, d.mapped_at() + dst_offset, d.address() + dst_offset, source, bytes, value)) {
    ++p.paths.by_memory;
    return;
  }
  ++p.paths.by_message;
  if (bytes > kEagerNotifyBytes && !core_->software_rma) {
    SendOp* put_op = core_->acquire_send_op(p.rank);
    const ucp_request_param_t put_param = send_param(put_op);
    post_send(lock, p, put_op,
              ucp_put_nbx(p.ep, source, bytes, d.address() + dst_offset, d.rkey(), &put_param),
              "write_notify");
    ++p.puts_posted;
    SendOp* op = core_->acquire_send_op(p.rank);
    op->header[0] = value;
    op->puts_posted = p.puts_posted;
    ucp_request_param_t flush_param{};
    flush_param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    flush_param.cb.send = on_flush_then_notify;
    flush_param.user_data = op;
    ucs_status_ptr_t request = ucp_ep_flush_nbx(p.ep, &flush_param);
    if (UCS_PTR_IS_PTR(request)) {
      ++p.sends_in_flight;  // until on_flush_then_notify's message completes
      return;
    }
    if (UCS_PTR_IS_ERR(request)) {
      core_->release_send_op(op);
      fail_peer_status(errc_for_peer_status(UCS_PTR_STATUS(request)), p.rank,
                       "write_notify to rank " + std::to_string(p.rank), UCS_PTR_STATUS(request));
    }
    p.puts_flushed = std::max(p.puts_flushed, op->puts_posted);  // flushed in place
    const ucp_request_param_t param = send_param(op);
    post_send(lock, p, op,
              ucp_am_send_nbx(p.ep, am_notify, op->header.data(), sizeof(uint64_t), nullptr, 0,
                              &param),
              "write_notify");
    return;
  }
  // One eager active message with the bytes (see the design note above): up to
  // kEagerNotifyBytes copied first, so the caller may reuse its buffer at once; larger ones
  // (ucx:tcp) sent from it, which UCP fragments and hands to on_write_notify whole.
  SendOp* op = core_->acquire_send_op(p.rank);
  op->header = {d.address() + dst_offset, value};
  if (bytes <= kEagerNotifyBytes) {
    std::memcpy(op->inline_bytes.data(), source, bytes);
    source = op->inline_bytes.data();
  }
  ucp_request_param_t param = send_param(op);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  post_send(lock, p, op,
            ucp_am_send_nbx(p.ep, am_write_notify, op->header.data(), sizeof op->header, source, bytes, &param),
            "write_notify");
}

void UcxTransport::do_notify(int peer_rank, uint64_t value) {
  check_connected("notify");
  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(peer_rank);
  core_->check_peer(p);
  if (send_by_mailbox(lock, p, nullptr, 0, nullptr, 0, value)) {
    ++p.paths.by_memory;
    return;
  }
  ++p.paths.by_message;
  SendOp* op = core_->acquire_send_op(p.rank);
  op->header[0] = value;  // the header must live until UCP completes the send
  const ucp_request_param_t param = send_param(op);
  post_send(lock, p, op,
            ucp_am_send_nbx(p.ep, am_notify, op->header.data(), sizeof(uint64_t), nullptr, 0,
                            &param),
            "notify");
}

NotificationPaths UcxTransport::notification_paths(int peer_rank) const {
  check_connected("notification_paths");
  std::unique_lock lock(core_->mutex);
  return core_->peer(peer_rank).paths;
}

// A peer whose mailbox is mapped here: its allocate()d regions map the same way (UCP's
// shared-memory allocation, ucp_rkey_ptr; UcxRemoteRegion).
bool UcxTransport::maps_memory_of(int peer_rank) const {
  check_connected("maps_memory_of");
  std::unique_lock lock(core_->mutex);
  return peer_rank != rank() && core_->mailbox.attached(peer_rank) && core_->may_map(peer_rank);
}

void UcxTransport::flush() { flush_within(core_->options.timeout); }

void UcxTransport::flush_within(std::chrono::milliseconds timeout) {
  check_connected("flush");
  std::unique_lock lock(core_->mutex);
  const auto deadline = Clock::now() + timeout;

  // Per peer: an endpoint flush if puts are not yet known to be remotely complete, and our
  // own count of sends (active messages, large write_notify chains) until UCP completes them.
  // Nothing may throw while flush requests are posted: they point at `pending`.
  struct Pending {
    Peer* peer;
    std::unique_ptr<BlockingOp> op;  // null: no endpoint flush needed
    uint64_t puts_posted;
  };
  std::vector<Pending> pending;
  std::vector<Peer*> failed;
  for (auto& owned : core_->peers) {
    Peer& p = *owned;
    if (!p.dirty && p.sends_in_flight == 0) continue;
    p.dirty = false;
    if (p.failure != UCS_OK) {
      failed.push_back(&p);
      continue;
    }
    if (p.puts_posted == p.puts_flushed) {
      pending.push_back({&p, nullptr, p.puts_posted});
      continue;
    }
    auto op = start_endpoint_flush(*core_, p, "flush failed");
    if (!op) {
      failed.push_back(&p);
      continue;
    }
    pending.push_back({&p, std::move(op), p.puts_posted});
  }
  auto settled = [](const Pending& e) {
    return ((!e.op || e.op->done) && e.peer->sends_in_flight == 0) ||
           e.peer->failure != UCS_OK;
  };
  const bool finished = core_->wait_loop->wait(
      lock,
      [&] {
        for (const Pending& e : pending)
          if (!settled(e)) return false;
        return true;
      },
      deadline, WaitKind::operation, std::chrono::microseconds(200));

  std::string late;
  size_t late_count = 0;
  int first_late = -1;
  for (Pending& e : pending) {
    Peer& p = *e.peer;
    if (!settled(e)) {
      if (first_late < 0) first_late = p.rank;
      ++late_count;
      late += (late.empty() ? "" : ", ") + std::to_string(p.rank) + " (" +
              std::to_string(p.sends_in_flight) + " sends in flight" +
              (e.op && !e.op->done ? ", endpoint flush pending)" : ")");
      p.dirty = true;  // the next flush must look at this peer again
    }
    if (e.op && e.op->done && e.op->status == UCS_OK)
      p.puts_flushed = std::max(p.puts_flushed, e.puts_posted);
    if (e.op && !e.op->done) core_->abandon(std::move(e.op));
  }
  if (!finished)
    fail_peer(Errc::timeout, first_late,
              "ucx: flush: " + ranks_word(late_count) + late + " did not complete within " +
                  (timeout == core_->options.timeout ? timeout_text(timeout)
                                                     : std::to_string(timeout.count()) + " ms"));
  for (Peer* p : failed) core_->check_peer(*p);
  for (const Pending& e : pending) {
    core_->check_peer(*e.peer);
    if (e.op && e.op->status != UCS_OK)
      fail_peer_status(errc_for_peer_status(e.op->status), e.peer->rank,
                       "flush to rank " + std::to_string(e.peer->rank), e.op->status);
  }
}

void UcxCore::abandon(std::unique_ptr<BlockingOp> op) {
  abandoned_ops.remove_if([](const std::unique_ptr<BlockingOp>& o) { return o->done; });
  abandoned_ops.push_back(std::move(op));
}

}  // namespace pcoll::transport::ucx
