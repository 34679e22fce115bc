// Endpoints: one UCP endpoint per rank (self included), created from the gathered worker
// addresses with peer-failure error handling, wired up to every peer before connect()
// returns (hello and ready messages, which also carry the mailbox keys), and closed without
// waiting on dead peers.
#include <algorithm>
#include <array>
#include <cstring>

#include <support/log.hpp>
#include <ucx/ucx_transport.hpp>

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
  const std::string line = "ucx: rank " + std::to_string(failed.rank) + ": " + what + ": " + ucs_status_string(status);
  if (departures_expected.load(std::memory_order_relaxed))
    log::debug(line + " (during finalize: the peer has most likely left)");
  else
    log::warn(line);
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

void UcxTransport::do_connect(int my_rank, std::span<const Bytes> addresses) {
  std::unique_lock lock(core_->mutex);
  if (core_->my_rank >= 0) fail(Errc::invalid_state, "ucx: connect() called twice");
  if (addresses.empty() || my_rank < 0 || static_cast<size_t>(my_rank) >= addresses.size())
    invalid_argument("ucx: connect(rank " + std::to_string(my_rank) + ", " +
                     std::to_string(addresses.size()) + " addresses): rank out of range");
  if (addresses[static_cast<size_t>(my_rank)] != core_->worker_address)
    invalid_argument("ucx: connect(): address " + std::to_string(my_rank) +
                     " is not this transport's address (bootstrap gathered out of order?)");
  if (core_->unmapped_rank >= 0 && static_cast<size_t>(core_->unmapped_rank) >= addresses.size())
    invalid_argument("PCOLL_TEST_UCX_UNMAPPED_RANK=" + std::to_string(core_->unmapped_rank) +
                     " is not a rank of this job of " + std::to_string(addresses.size()));

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
  // The mailbox before any hello is taken: a peer's key is attached as its hello arrives.
  if (core_->mailbox_wanted) core_->mailbox.open(my_rank, static_cast<int>(addresses.size()));
  core_->take_early_hellos();
  wire_up(lock);
}

void UcxTransport::send_to_every_peer(std::unique_lock<std::mutex>& lock, AmId id,
                                      std::span<const uint64_t> header,
                                      std::span<const std::byte> data, const char* what) {
  for (auto& owned : core_->peers) {
    Peer& p = *owned;
    if (p.rank == core_->my_rank) continue;
    SendOp* op = core_->acquire_send_op(p.rank);
    std::copy(header.begin(), header.end(), op->header.begin());
    std::copy(data.begin(), data.end(), op->inline_bytes.begin());
    const ucp_request_param_t param = send_param(op);
    post_send(lock, p, op,
              ucp_am_send_nbx(p.ep, id, op->header.data(), header.size_bytes(),
                              data.empty() ? nullptr : op->inline_bytes.data(), data.size(), &param),
              what);
  }
}

// UCP connects an endpoint lazily, on its first message; left so, the first round of the
// first allreduce pays the wire-up, and a peer that dies during it can fault UCX 1.13
// (docs/reliability.md). So connect() makes every connection now, in two phases:
//   1. a hello to every peer (carrying our mailbox key, where we have one) followed by an
//      endpoint flush, until every peer's hello has arrived and our flushes completed: the
//      connection is made both ways and the peer has answered on it;
//   2. a ready to every peer, until every peer's ready has arrived.
// A rank's flush needs its peer to progress; phase 2 keeps every rank progressing until all
// have finished phase 1, so a rank that returns (and sits, say, in a bootstrap barrier that
// does not drive the transport) is needed by nobody. Peers may call connect() in any order
// and at any time within the timeout.
void UcxTransport::wire_up(std::unique_lock<std::mutex>& lock) {
  const auto deadline = Clock::now() + core_->options.timeout;
  const uint64_t me = static_cast<uint64_t>(core_->my_rank);
  const auto ranks = static_cast<uint64_t>(core_->peers.size());
  const Bytes& key = core_->mailbox.is_open() && core_->mailbox.key().size() <= kEagerNotifyBytes
                         ? core_->mailbox.key()
                         : Bytes{};
  const std::array<uint64_t, 2> hello{me, ranks};
  send_to_every_peer(lock, am_hello, hello, key, "connection hello");

  // One endpoint flush per peer. Nothing may throw while they are posted: they point at
  // `flushes`, and a flush still pending on the way out goes to the core (abandon).
  std::vector<std::unique_ptr<BlockingOp>> flushes(core_->peers.size());
  for (auto& owned : core_->peers) {
    Peer& p = *owned;
    if (p.rank == core_->my_rank || p.failure != UCS_OK) continue;
    flushes[static_cast<size_t>(p.rank)] = start_endpoint_flush(*core_, p, "connecting (endpoint flush) failed");
  }

  enum class Phase { hello, ready };
  // What rank `p` still owes this phase, or nullptr when nothing.
  auto missing = [&](const Peer& p, Phase phase) -> const char* {
    if (p.rank == core_->my_rank || p.failure != UCS_OK) return nullptr;
    if (phase == Phase::hello) {
      if (!p.hello_received) return "no hello";
      const auto& flush = flushes[static_cast<size_t>(p.rank)];
      if (flush && !flush->done) return "endpoint flush pending";
    } else if (!p.ready_received) {
      return "not ready";
    }
    return p.sends_in_flight > 0 ? "sends in flight" : nullptr;
  };
  auto await_phase = [&](Phase phase) {
    auto settled = [&] {
      bool all_done = true;
      for (const auto& p : core_->peers) {
        if (p->failure != UCS_OK) return true;  // check_peer() below names it
        if (missing(*p, phase)) all_done = false;
      }
      return all_done;
    };
    const bool finished = core_->wait_loop->wait(lock, settled, deadline, WaitKind::operation,
                                                 std::chrono::microseconds(200));
    std::string late;
    size_t late_count = 0;
    int first_late = -1;
    for (const auto& p : core_->peers) {
      core_->check_peer(*p);
      if (const char* what = missing(*p, phase)) {
        if (first_late < 0) first_late = p->rank;
        late += (late.empty() ? "" : ", ") + std::to_string(p->rank) + " (" + what + ")";
        ++late_count;
      }
    }
    if (!finished || first_late >= 0)
      fail_peer(Errc::timeout, first_late,
                "ucx: connect: " + ranks_word(late_count) + late + " did not connect within " +
                    timeout_text(core_->options.timeout) +
                    ": every rank must call connect(), with the same "
                    "PCOLL_PROVIDER; is that rank alive?");
  };
  auto settle_flushes = [&] {
    for (auto& op : flushes) {
      if (!op) continue;
      if (!op->done) {
        core_->abandon(std::move(op));
      } else if (op->status != UCS_OK) {
        const int rank = static_cast<int>(&op - flushes.data());
        core_->record_failure(core_->peer(rank), op->status, "connecting (endpoint flush) failed");
      }
    }
  };
  try {
    await_phase(Phase::hello);
  } catch (...) {
    settle_flushes();
    throw;
  }
  settle_flushes();
  for (const auto& p : core_->peers) core_->check_peer(*p);

  const std::array<uint64_t, 1> ready{me};
  send_to_every_peer(lock, am_ready, ready, {}, "connection ready");
  await_phase(Phase::ready);
}

void UcxCore::take_hello(int rank, uint64_t job_size, std::span<const std::byte> key) {
  if (my_rank < 0) {
    // Our connect() has not made the endpoints yet; a job never has more early hellos than
    // ranks, so the bound only stops garbage.
    if (early_hellos_.size() < 65536) early_hellos_.push_back({rank, job_size, Bytes(key.begin(), key.end())});
    return;
  }
  if (rank < 0 || static_cast<size_t>(rank) >= peers.size() || rank == my_rank || job_size != peers.size()) {
    log::error("ucx: dropped a connection hello from rank " + std::to_string(rank) + " of a job of " +
               std::to_string(job_size) + " ranks (this job: " + std::to_string(peers.size()) +
               "; do all ranks share one bootstrap?)");
    return;
  }
  Peer& p = *peers[static_cast<size_t>(rank)];
  if (p.hello_received) return;
  p.hello_received = true;
  if (!key.empty() && mailbox.is_open()) mailbox.attach(rank, key);
}

void UcxCore::take_ready(int rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= peers.size() || rank == my_rank) {
    log::error("ucx: dropped a connection ready from rank " + std::to_string(rank));
    return;
  }
  peers[static_cast<size_t>(rank)]->ready_received = true;
}

void UcxCore::take_early_hellos() {
  auto early = std::move(early_hellos_);
  early_hellos_.clear();
  for (const EarlyHello& h : early) take_hello(h.rank, h.job_size, h.key);
}

bool UcxCore::may_map(int peer_rank) const {
  return unmapped_rank < 0 || (peer_rank != unmapped_rank && my_rank != unmapped_rank);
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
