// One-sided data movement: write (ucp_put_nbx), write_notify and notify (active messages;
// see the design note below), and flush.
//
// Why notifications are active messages: UCP has no put-with-immediate. "put; fence;
// doorbell" needs ucp_worker_fence, which on lanes that differ (shm puts are CPU copies or
// cma, the doorbell goes through the shm FIFO; tcp emulates both) may turn into a full flush,
// i.e. one extra round trip per write on tcp, and is only as strong as each transport's
// fence. An active message that carries the target address, the value and the bytes is one
// message on every transport: the target's handler copies the bytes into the registered
// region (eager, small messages) or has UCP fetch them straight into it (rendezvous, large
// messages, zero-copy via cma on shm) and queues the value only after that, so a value is
// never seen before its bytes, and each value is queued exactly once by construction.
// The target must progress (Capabilities::target_progress), which pcoll's progress engine
// does anyway. Plain write() stays a true one-sided put (shm: no target involvement).
#include <cstring>
#include <limits>

#include "ucx_transport.hpp"

namespace pcoll::transport::ucx {

namespace {

// Throws invalid_argument unless [offset, offset + bytes) lies inside a region of `size`.
void check_range(const char* operation, const char* side, int peer, size_t offset, size_t bytes,
                 size_t size) {
  if (offset <= size && bytes <= size - offset) return;
  invalid_argument(std::string("ucx: ") + operation + " to rank " + std::to_string(peer) +
                   ": " + side + " range [offset " + std::to_string(offset) + ", length " +
                   std::to_string(bytes) + "] exceeds the " + std::to_string(size) +
                   "-byte region");
}

ucp_request_param_t send_param(SendOp* op) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send_complete;
  param.user_data = op;
  return param;
}

}  // namespace

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

void on_blocking_complete(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<BlockingOp*>(user_data);
  op->status = status;
  op->done = true;
  ucp_request_free(request);
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
    fail_status(errc_for_peer_status(status), std::string(what) + " to rank " +
                                                  std::to_string(p.rank), status);
  }
  ++p.sends_in_flight;
}

void UcxTransport::write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                         size_t dst_offset, size_t bytes) {
  check_connected("write");
  const UcxLocalRegion& s = local(src);
  const UcxRemoteRegion& d = remote(dst);
  check_range("write", "local", d.peer(), src_offset, bytes, s.bytes().size());
  check_range("write", "remote", d.peer(), dst_offset, bytes, d.size());
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
}

void UcxTransport::write_notify(const LocalRegion& src, size_t src_offset,
                                const RemoteRegion& dst, size_t dst_offset, size_t bytes,
                                uint64_t value) {
  check_connected("write_notify");
  const UcxLocalRegion& s = local(src);
  const UcxRemoteRegion& d = remote(dst);
  check_range("write_notify", "local", d.peer(), src_offset, bytes, s.bytes().size());
  check_range("write_notify", "remote", d.peer(), dst_offset, bytes, d.size());
  if (bytes == 0) return notify(d.peer(), value);

  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(d.peer());
  core_->check_peer(p);
  SendOp* op = core_->acquire_send_op(p.rank);
  op->header = {d.address() + dst_offset, value};
  const void* source = s.bytes().data() + src_offset;
  if (bytes <= kInjectBytes) {
    std::memcpy(op->inline_bytes.data(), source, bytes);
    source = op->inline_bytes.data();
  }
  const ucp_request_param_t param = send_param(op);
  post_send(lock, p, op,
            ucp_am_send_nbx(p.ep, am_write_notify, op->header.data(), sizeof op->header, source,
                            bytes, &param),
            "write_notify");
}

void UcxTransport::notify(int peer_rank, uint64_t value) {
  check_connected("notify");
  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(peer_rank);
  core_->check_peer(p);
  SendOp* op = core_->acquire_send_op(p.rank);
  op->header[0] = value;  // the header must live until UCP completes the send
  const ucp_request_param_t param = send_param(op);
  post_send(lock, p, op,
            ucp_am_send_nbx(p.ep, am_notify, op->header.data(), sizeof(uint64_t), nullptr, 0,
                            &param),
            "notify");
}

void UcxTransport::flush() { flush_within(core_->options.timeout); }

void UcxTransport::flush_within(std::chrono::milliseconds timeout) {
  check_connected("flush");
  std::unique_lock lock(core_->mutex);
  const auto deadline = Clock::now() + timeout;

  // Endpoint flushes give remote completion of puts and atomics; our own send count covers
  // active messages (a rendezvous write_notify completes once the target holds the data).
  // Nothing may throw while flush requests are posted: they point at `pending`.
  std::vector<std::pair<Peer*, std::unique_ptr<BlockingOp>>> pending;
  std::vector<Peer*> failed;
  for (auto& owned : core_->peers) {
    Peer& p = *owned;
    if (!p.dirty) continue;
    p.dirty = false;
    if (p.failure != UCS_OK) {
      failed.push_back(&p);
      continue;
    }
    auto op = std::make_unique<BlockingOp>();
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_blocking_complete;
    param.user_data = op.get();
    ucs_status_ptr_t request = ucp_ep_flush_nbx(p.ep, &param);
    if (UCS_PTR_IS_ERR(request)) {
      core_->record_failure(p, UCS_PTR_STATUS(request), "flush failed");
      failed.push_back(&p);
      continue;
    }
    if (request == nullptr) op->done = true;
    pending.emplace_back(&p, std::move(op));
  }
  auto settled = [&](const Peer& p, const BlockingOp& op) {
    return (op.done && p.sends_in_flight == 0) || p.failure != UCS_OK;
  };
  const bool finished = core_->block_until(
      lock,
      [&] {
        for (auto& [p, op] : pending)
          if (!settled(*p, *op)) return false;
        return true;
      },
      deadline, WaitKind::operation, std::chrono::microseconds(200), 0);

  std::string late;
  for (auto& [p, op] : pending) {
    if (!settled(*p, *op)) late += (late.empty() ? "" : ", ") + std::to_string(p->rank);
    if (!op->done) core_->abandon(std::move(op));
  }
  if (!finished)
    fail(Errc::timeout, "ucx: flush: rank(s) " + late + " did not complete within " +
                            std::to_string(timeout.count()) + " ms (PCOLL_TIMEOUT_MS)");
  for (Peer* p : failed) core_->check_peer(*p);
  for (auto& [p, op] : pending) {
    core_->check_peer(*p);
    if (op && op->status != UCS_OK)
      fail_status(errc_for_peer_status(op->status), "flush to rank " + std::to_string(p->rank),
                  op->status);
  }
}

void UcxCore::abandon(std::unique_ptr<BlockingOp> op) {
  abandoned_ops.remove_if([](const std::unique_ptr<BlockingOp>& o) { return o->done; });
  abandoned_ops.push_back(std::move(op));
}

}  // namespace pcoll::transport::ucx
