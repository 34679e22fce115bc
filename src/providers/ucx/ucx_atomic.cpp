// 64-bit remote atomics with ucp_atomic_op_nbx: fetch-add, compare-swap, swap, and max as a
// compare-swap loop (UCP has no max; transport/atomic_emulation.hpp). On shm they are CPU
// atomics on the shared mapping; on tcp UCP runs them at the target in software during its
// progress.
#include "atomic_emulation.hpp"
#include "ucx_transport.hpp"

namespace pcoll::transport::ucx {

void UcxTransport::await(std::unique_lock<std::mutex>& lock, ucs_status_ptr_t request,
                         BlockingOp& op, std::unique_ptr<BlockingOp>& owner, int peer_rank,
                         const std::string& what) {
  if (request == nullptr) {
    op.done = true;
  } else if (UCS_PTR_IS_ERR(request)) {
    const ucs_status_t status = UCS_PTR_STATUS(request);
    fail_peer_status(errc_for_peer_status(status), peer_rank,
                     what + " on rank " + std::to_string(peer_rank), status);
  }
  Peer& p = core_->peer(peer_rank);
  const auto deadline = Clock::now() + core_->options.timeout;
  const bool finished = core_->wait_loop->wait(
      lock, [&] { return op.done || p.failure != UCS_OK; }, deadline, WaitKind::operation,
      std::chrono::microseconds(200));
  if (!op.done) {
    core_->abandon(std::move(owner));  // UCP may still write the reply
    if (!finished)
      fail_peer(Errc::timeout, peer_rank, "ucx: " + what + " on rank " + std::to_string(peer_rank) +
                              " did not complete within " +
                              std::to_string(core_->options.timeout.count()) +
                              " ms (PCOLL_TIMEOUT_MS)");
    core_->check_peer(p);
  }
  if (op.status != UCS_OK)
    fail_peer_status(errc_for_peer_status(op.status), peer_rank,
                     what + " on rank " + std::to_string(peer_rank), op.status);
}

uint64_t UcxTransport::atomic(const RemoteRegion& dst, size_t offset, ucp_atomic_op_t opcode,
                              uint64_t operand, uint64_t reply_in, const char* what) {
  check_connected(what);
  const UcxRemoteRegion& d = remote(dst);
  if (offset > d.size() || d.size() - offset < sizeof(uint64_t) ||
      (d.address() + offset) % sizeof(uint64_t) != 0)
    invalid_argument(std::string("ucx: ") + what + " on rank " + std::to_string(d.peer()) +
                     ": offset " + std::to_string(offset) + ", length 8 is outside the " +
                     std::to_string(d.size()) + "-byte region or not 8-byte aligned");

  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(d.peer());
  core_->check_peer(p);
  p.dirty = true;
  auto owner = std::make_unique<BlockingOp>();
  BlockingOp& op = *owner;
  op.operand = operand;
  op.reply = reply_in;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  param.cb.send = on_blocking_complete;
  param.user_data = &op;
  param.datatype = ucp_dt_make_contig(sizeof(uint64_t));
  param.reply_buffer = &op.reply;
  ucs_status_ptr_t request =
      ucp_atomic_op_nbx(p.ep, opcode, &op.operand, 1, d.address() + offset, d.rkey(), &param);
  await(lock, request, op, owner, p.rank, what);
  return op.reply;
}

uint64_t UcxTransport::fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  return atomic(dst, offset, UCP_ATOMIC_OP_ADD, operand, 0, "fetch_add");
}

uint64_t UcxTransport::compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                                    uint64_t desired) {
  // UCP's CSWAP compares with the operand buffer and stores what reply_buffer held on entry
  // (libfabric is the other way round: the operand is the new value).
  return atomic(dst, offset, UCP_ATOMIC_OP_CSWAP, expected, desired, "compare_swap");
}

uint64_t UcxTransport::swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic(dst, offset, UCP_ATOMIC_OP_SWAP, value, 0, "swap");
}

uint64_t UcxTransport::atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return max_by_compare_swap(*this, dst, offset, value);
}

}  // namespace pcoll::transport::ucx
