// 64-bit remote atomics: fetch-add, compare-swap, swap, and max as a compare-swap loop (UCP
// has no max; transport/atomic_emulation.hpp). With ucp_atomic_op_nbx, except on ucx:tcp:
// on shm they are CPU atomics on the shared mapping. tcp has no remote memory access, so UCP
// would run them at the target in software and send the old value back from inside its own
// progress; UCX aborts the target process when that reply goes to a peer whose endpoint has
// failed (the same fatal path as its software put, ucx_rma.cpp). On ucx:tcp pcoll does what
// UCP would, with its own messages: an am_atomic request, run by the target's handler as a
// CPU atomic on its memory, and an am_atomic_reply, which the target sends after its
// progress pass returned and, on a failed endpoint, simply does not send.
#include <atomic>
#include <cstring>

#include <ucx/ucx_transport.hpp>
#include <util/atomic_emulation.hpp>

namespace pcoll::transport::ucx {

static_assert(sizeof(AtomicRequest) <= kEagerNotifyBytes, "an AtomicRequest lives in SendOp::inline_bytes");

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
  await_done(lock, op, owner, peer_rank, what);
}

void UcxTransport::await_done(std::unique_lock<std::mutex>& lock, BlockingOp& op,
                              std::unique_ptr<BlockingOp>& owner, int peer_rank,
                              const std::string& what) {
  Peer& p = core_->peer(peer_rank);
  const auto deadline = Clock::now() + core_->options.timeout;
  const bool finished = core_->wait_loop->wait(
      lock, [&] { return op.done || p.failure != UCS_OK; }, deadline, WaitKind::operation,
      std::chrono::microseconds(200));
  if (!op.done) {
    core_->abandon(std::move(owner));  // UCP may still write the reply
    if (!finished)
      fail_peer(Errc::timeout, peer_rank, "ucx: " + what + " on rank " + std::to_string(peer_rank) +
                              " did not complete within " + timeout_text(core_->options.timeout));
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
  // Offset and range are checked by Transport; the peer's memory itself may be unaligned.
  if ((d.address() + offset) % sizeof(uint64_t) != 0)
    invalid_argument(std::string("ucx: ") + what + " on rank " + std::to_string(d.peer()) +
                     ": the word at offset " + std::to_string(offset) +
                     " is not 8-byte aligned in memory (register aligned memory for atomics)");

  if (core_->software_rma) {
    const AtomicKind kind = opcode == UCP_ATOMIC_OP_ADD     ? AtomicKind::add
                            : opcode == UCP_ATOMIC_OP_CSWAP ? AtomicKind::compare_swap
                                                            : AtomicKind::swap;
    return atomic_by_message(d, offset, kind, operand, reply_in, what);
  }
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

uint64_t UcxTransport::atomic_by_message(const UcxRemoteRegion& d, size_t offset, AtomicKind kind,
                                         uint64_t operand, uint64_t desired, const char* what) {
  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(d.peer());
  core_->check_peer(p);
  auto owner = std::make_unique<BlockingOp>();
  BlockingOp& op = *owner;
  const uint64_t id = core_->next_atomic_id++;
  const AtomicRequest request{static_cast<uint64_t>(kind), static_cast<uint64_t>(core_->my_rank), id,
                              d.address() + offset, operand, desired};
  SendOp* send = core_->acquire_send_op(p.rank);
  std::memcpy(send->inline_bytes.data(), &request, sizeof request);  // lives until UCP is done
  const ucp_request_param_t param = send_param(send);
  core_->atomics_awaited[id] = &op;
  try {
    post_send(lock, p, send,
              ucp_am_send_nbx(p.ep, am_atomic, send->inline_bytes.data(), sizeof request, nullptr, 0, &param),
              what);
  } catch (...) {
    core_->atomics_awaited.erase(id);
    throw;
  }
  await_done(lock, op, owner, p.rank, what);  // on_atomic_reply sets op.done
  return op.reply;
}

// The target's half: the request's atomic on this process's memory, its old value queued.
void UcxCore::run_atomic_request(const AtomicRequest& r) {
  const auto fail_request = [&](const std::string& why) {
    defer_delivery_error(Error(Errc::protocol, "ucx: an atomic request from rank " + std::to_string(r.sender) +
                                                   " was refused: " + why));
  };
  if (r.sender >= peers.size()) return fail_request("the job has no such rank");
  if (r.address % sizeof(uint64_t) != 0 || !contains_local_range(static_cast<uintptr_t>(r.address), sizeof(uint64_t)))
    return fail_request("its word is unaligned or outside every registered region");
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(static_cast<uintptr_t>(r.address)));
  uint64_t old_value = 0;
  switch (static_cast<AtomicKind>(r.kind)) {
    case AtomicKind::add:
      old_value = word.fetch_add(r.operand);
      break;
    case AtomicKind::compare_swap:
      old_value = r.operand;
      word.compare_exchange_strong(old_value, r.desired);  // old_value: the word before
      break;
    case AtomicKind::swap:
      old_value = word.exchange(r.operand);
      break;
    default:
      return fail_request("unknown kind " + std::to_string(r.kind));
  }
  defer_atomic_reply(static_cast<int>(r.sender), r.id, old_value);
}

void UcxCore::take_atomic_reply(uint64_t id, uint64_t old_value) {
  const auto it = atomics_awaited.find(id);
  if (it == atomics_awaited.end()) {
    defer_delivery_error(Error(Errc::protocol, "ucx: an atomic reply arrived for request " + std::to_string(id) +
                                                   ", which this rank never sent or was answered already"));
    return;
  }
  it->second->reply = old_value;
  it->second->done = true;
  atomics_awaited.erase(it);
}

void UcxCore::send_deferred_atomic_replies() {
  std::vector<AtomicReply> ready;
  ready.swap(deferred_atomic_replies_);
  for (const AtomicReply& reply : ready) {
    Peer& p = *peers[static_cast<size_t>(reply.rank)];
    if (!p.ep || p.failure != UCS_OK) continue;  // its sender has failed: nobody to answer
    SendOp* op = acquire_send_op(p.rank);
    op->header = {reply.id, reply.old_value};
    const ucp_request_param_t param = send_param(op);
    ucs_status_ptr_t request =
        ucp_am_send_nbx(p.ep, am_atomic_reply, op->header.data(), sizeof op->header, nullptr, 0, &param);
    if (UCS_PTR_IS_PTR(request)) {
      ++p.sends_in_flight;  // on_send_complete finishes it
      continue;
    }
    release_send_op(op);
    if (UCS_PTR_IS_ERR(request)) record_failure(p, UCS_PTR_STATUS(request), "an atomic reply failed");
  }
}

uint64_t UcxTransport::do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  return atomic(dst, offset, UCP_ATOMIC_OP_ADD, operand, 0, "fetch_add");
}

uint64_t UcxTransport::do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                                       uint64_t desired) {
  // UCP's CSWAP compares with the operand buffer and stores what reply_buffer held on entry
  // (libfabric is the other way round: the operand is the new value).
  return atomic(dst, offset, UCP_ATOMIC_OP_CSWAP, expected, desired, "compare_swap");
}

uint64_t UcxTransport::do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic(dst, offset, UCP_ATOMIC_OP_SWAP, value, 0, "swap");
}

uint64_t UcxTransport::do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return max_by_compare_swap(*this, dst, offset, value);
}

}  // namespace pcoll::transport::ucx
