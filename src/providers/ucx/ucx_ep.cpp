// Endpoints: one UCP endpoint per rank (self included), created from the gathered worker
// addresses with peer-failure error handling, and closed without waiting on dead peers.
#include <cstring>

#include "log.hpp"
#include "ucx_transport.hpp"

namespace pcoll::transport::ucx {

namespace {

// UCP calls this from worker progress (lock held) once an endpoint is unusable.
void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  peer->core->record_failure(*peer, status, "the connection failed");
}

}  // namespace

void UcxCore::record_failure(Peer& failed, ucs_status_t status, const std::string& what) {
  if (failed.failure != UCS_OK) return;
  failed.failure = status;
  failed.failure_what = what;
  log::warn("ucx: rank " + std::to_string(failed.rank) + ": " + what + ": " +
            ucs_status_string(status));
  // Blocked threads re-check their peers.
  ++activity_seq_;
  wait_loop->wake_all_waiters();
}

void UcxCore::check_peer(const Peer& p) const {
  if (p.failure == UCS_OK) return;
  fail_peer(errc_for_peer_status(p.failure) == Errc::peer_failed ? Errc::peer_failed
                                                                  : Errc::transport,
            p.rank, "ucx: rank " + std::to_string(p.rank) + " failed (" + p.failure_what +
                        ": " + ucs_status_string(p.failure) + ")");
}

Peer& UcxCore::peer(int rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= peers.size())
    invalid_argument("ucx: peer " + std::to_string(rank) + " is not a rank of this job (size " +
                     std::to_string(peers.size()) + ")");
  return *peers[static_cast<size_t>(rank)];
}

void UcxTransport::check_connected(const char* operation) const {
  if (core_->my_rank < 0)
    fail(Errc::invalid_state, std::string("ucx: ") + operation + " before connect()");
}

void UcxTransport::connect(int my_rank, std::span<const Bytes> addresses) {
  std::unique_lock lock(core_->mutex);
  if (core_->my_rank >= 0) fail(Errc::invalid_state, "ucx: connect() called twice");
  if (addresses.empty() || my_rank < 0 || static_cast<size_t>(my_rank) >= addresses.size())
    invalid_argument("ucx: connect(rank " + std::to_string(my_rank) + ", " +
                     std::to_string(addresses.size()) + " addresses): rank out of range");
  if (addresses[static_cast<size_t>(my_rank)] != core_->worker_address)
    invalid_argument("ucx: connect(): address " + std::to_string(my_rank) +
                     " is not this transport's address (bootstrap gathered out of order?)");

  std::vector<std::unique_ptr<Peer>> peers;
  peers.reserve(addresses.size());
  for (size_t rank = 0; rank < addresses.size(); ++rank) {
    auto p = std::make_unique<Peer>();
    p->core = core_.get();
    p->rank = static_cast<int>(rank);
    p->address_fingerprint = address_fingerprint(addresses[rank]);
    if (addresses[rank].empty())
      fail(Errc::protocol, "ucx: rank " + std::to_string(rank) + " sent an empty worker address");

    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(addresses[rank].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = on_endpoint_error;
    params.err_handler.arg = p.get();
    const ucs_status_t status = ucp_ep_create(core_->worker.get(), &params, &p->ep);
    if (status != UCS_OK) {
      // Close what exists so far before reporting.
      core_->peers = std::move(peers);
      fail_peer_status(status == UCS_ERR_UNREACHABLE ? Errc::peer_failed : Errc::transport,
                       static_cast<int>(rank),
                       "creating the endpoint to rank " + std::to_string(rank) +
                           " (UCX_TLS=" + core_->caps.provider + ")",
                       status);
    }
    peers.push_back(std::move(p));
  }
  core_->peers = std::move(peers);
  core_->my_rank = my_rank;
  // Wire-up completes lazily while ranks progress; waiting here could deadlock with a rank
  // that went on to a bootstrap barrier without progressing.

  // Shared memory: open the notification mailbox and send its key to every peer; until a
  // peer's key arrives, notifications to it travel as active messages.
  if (core_->variant != "shm") return;
  core_->mailbox.open(my_rank, static_cast<int>(addresses.size()));
  if (!core_->mailbox.is_open() || core_->mailbox.key().size() > kEagerNotifyBytes) return;
  for (auto& owned : core_->peers) {
    Peer& p = *owned;
    if (p.rank == my_rank) continue;
    SendOp* op = core_->acquire_send_op(p.rank);
    op->header[0] = static_cast<uint64_t>(my_rank);
    const Bytes& key = core_->mailbox.key();
    std::memcpy(op->inline_bytes.data(), key.data(), key.size());
    const ucp_request_param_t param = send_param(op);
    post_send(lock, p, op,
              ucp_am_send_nbx(p.ep, am_mailbox, op->header.data(), sizeof(uint64_t),
                              op->inline_bytes.data(), key.size(), &param),
              "mailbox announcement");
  }
}

void UcxCore::close_endpoints() {
  // Force mode: no handshake, so a dead peer cannot hold up shutdown.
  std::vector<ucs_status_ptr_t> requests;
  for (auto& p : peers) {
    if (!p->ep) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(p->ep, &param);
    if (UCS_PTR_IS_PTR(request)) requests.push_back(request);
    p->ep = nullptr;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (ucs_status_ptr_t request : requests) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < deadline)
      ucp_worker_progress(worker.get());
    ucp_request_free(request);
  }
  // The Peer objects stay until the core is gone: late callbacks may still name them.
}

}  // namespace pcoll::transport::ucx
