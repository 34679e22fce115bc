// The routed transport (routed_transport.hpp): each peer through the transport of its place.
#include <routed/routed_transport.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

#include <routed/routed_provider.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll::transport::routed {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

constexpr uint32_t kAddressMagic = 0x50525441;  // "PRTA"
constexpr uint32_t kKeyMagic = 0x5052544b;      // "PRTK"

void put_u32(Bytes& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

void put_part(Bytes& out, std::span<const std::byte> part) {
  put_u32(out, static_cast<uint32_t>(part.size()));
  out.insert(out.end(), part.begin(), part.end());
}

// Reads length-prefixed parts; any overrun is Errc::protocol naming `what`.
class Reader {
 public:
  Reader(std::span<const std::byte> in, std::string what) : in_(in), what_(std::move(what)) {}
  uint32_t u32() {
    if (in_.size() - at_ < 4) malformed();
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in_[at_ + i]) << (8 * i);
    at_ += 4;
    return value;
  }
  std::span<const std::byte> part() {
    const uint32_t n = u32();
    if (in_.size() - at_ < n) malformed();
    const auto out = in_.subspan(at_, n);
    at_ += n;
    return out;
  }
  void end() {
    if (at_ != in_.size()) malformed();
  }

 private:
  [[noreturn]] void malformed() {
    fail(Errc::protocol, what_ + " is malformed (" + std::to_string(in_.size()) + " bytes)");
  }
  std::span<const std::byte> in_;
  std::string what_;
  size_t at_ = 0;
};

}  // namespace

Bytes RoutedLocalRegion::remote_key() const {
  Bytes out;
  put_u32(out, kKeyMagic);
  put_part(out, network_->remote_key());
  if (local_) put_part(out, local_->remote_key());
  else put_u32(out, 0);
  return out;
}

RoutedTransport::RoutedTransport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> network,
                                 std::string host_key, const std::string& name)
    : local_(std::move(local)), network_(std::move(network)), host_key_(std::move(host_key)) {
  if (!network_) fail(Errc::internal, "routed transport without a network transport");
  const Capabilities& n = network_->capabilities();
  if (!n.partial_connect || (local_ && !local_->capabilities().partial_connect))
    fail(Errc::internal, "routed transport over a transport that cannot connect part of a job");
  caps_ = n;
  caps_.name = name;
  caps_.partial_connect = false;
  if (local_) {
    const Capabilities& l = local_->capabilities();
    caps_.provider = l.provider + "+" + n.provider;
    caps_.inject_bytes = std::min(l.inject_bytes, n.inject_bytes);
    caps_.max_write_bytes = std::min(l.max_write_bytes, n.max_write_bytes);
    caps_.max_atomic_count = std::min(l.max_atomic_count, n.max_atomic_count);
    caps_.notify_bits = std::min(l.notify_bits, n.notify_bits);
    caps_.target_progress = l.target_progress || n.target_progress;
    caps_.native_atomic_max = l.native_atomic_max && n.native_atomic_max;
    caps_.remote_atomics = l.remote_atomics && n.remote_atomics;
  }
  set_wait_hook({});
}

RoutedTransport::~RoutedTransport() {
  network_->set_wait_hook({});
  if (local_) local_->set_wait_hook({});
}

// Each part progresses the other while it waits (Transport::set_wait_hook), and whatever
// the routed transport itself was asked to call.
void RoutedTransport::set_wait_hook(std::function<void()> hook) {
  if (!local_) {
    network_->set_wait_hook(std::move(hook));
    return;
  }
  Transport* local = local_.get();
  Transport* network = network_.get();
  local_->set_wait_hook([network, hook] {
    network->progress();
    if (hook) hook();
  });
  network_->set_wait_hook([local, hook] {
    local->progress();
    if (hook) hook();
  });
}

// --- Addressing -----------------------------------------------------------------------------

Bytes RoutedTransport::address() const {
  Bytes out;
  put_u32(out, kAddressMagic);
  put_part(out, std::as_bytes(std::span(host_key_)));
  if (local_) put_part(out, local_->address());
  else put_u32(out, 0);
  put_part(out, network_->address());
  return out;
}

void RoutedTransport::do_connect(int my_rank, std::span<const Bytes> addresses) {
  if (rank_ >= 0) fail(Errc::invalid_state, caps_.name + ": connect() called twice");
  const auto ranks = addresses.size();
  if (my_rank < 0 || static_cast<size_t>(my_rank) >= ranks)
    invalid_argument(caps_.name + ": connect(): rank " + std::to_string(my_rank) + " outside a job of " +
                     std::to_string(ranks));
  std::vector<Bytes> local_addresses(ranks), network_addresses(ranks);
  local_peer_.assign(ranks, false);
  size_t on_this_host = 0;
  for (size_t r = 0; r < ranks; ++r) {
    Reader in(addresses[r], caps_.name + ": the address of rank " + std::to_string(r));
    if (in.u32() != kAddressMagic)
      fail(Errc::mismatch, caps_.name + ": rank " + std::to_string(r) +
                               " does not use the routed transport; set the same PCOLL_PROVIDER on every rank");
    const auto key = in.part();
    const auto local_address = in.part();
    const auto network_address = in.part();
    in.end();
    const bool here = std::string_view(reinterpret_cast<const char*>(key.data()), key.size()) == host_key_;
    if (here && local_) {
      if (local_address.empty())
        fail(Errc::protocol, caps_.name + ": rank " + std::to_string(r) +
                                 " shares this host but has no shared-memory address");
      local_addresses[r].assign(local_address.begin(), local_address.end());
      local_peer_[r] = true;
      ++on_this_host;
    }
    // The network reaches every rank off this host, and this rank itself (connect needs
    // its own address); ranks on this host are the local transport's.
    if (!local_peer_[r] || r == static_cast<size_t>(my_rank))
      network_addresses[r].assign(network_address.begin(), network_address.end());
  }
  if (local_) local_->connect(my_rank, local_addresses);
  network_->connect(my_rank, network_addresses);
  rank_ = my_rank;
  size_ = static_cast<int>(ranks);
  log::debug(caps_.name + ": " + std::to_string(on_this_host) + " ranks through " +
             (local_ ? local_->capabilities().name : std::string("-")) + ", " +
             std::to_string(ranks - on_this_host) + " through " + network_->capabilities().name);
}

bool RoutedTransport::is_local(int peer) const {
  if (peer < 0 || peer >= size_)
    invalid_argument(caps_.name + ": rank " + std::to_string(peer) + " outside a job of " + std::to_string(size_));
  return local_peer_[static_cast<size_t>(peer)];
}

Transport& RoutedTransport::route(int peer) const { return is_local(peer) ? *local_ : *network_; }

const RoutedRemoteRegion& RoutedTransport::remote(const RemoteRegion& region) {
  const auto* r = dynamic_cast<const RoutedRemoteRegion*>(&region);
  if (r == nullptr) invalid_argument("routed transport: a remote region of another transport");
  return *r;
}

const RoutedLocalRegion& RoutedTransport::local(const LocalRegion& region) {
  const auto* r = dynamic_cast<const RoutedLocalRegion*>(&region);
  if (r == nullptr) invalid_argument("routed transport: a local region of another transport");
  return *r;
}

// --- Memory ---------------------------------------------------------------------------------

std::unique_ptr<LocalRegion> RoutedTransport::allocate(size_t bytes) {
  auto network = network_->allocate(bytes);
  auto on_host = local_ ? local_->register_memory(network->bytes()) : nullptr;
  return std::make_unique<RoutedLocalRegion>(std::move(network), std::move(on_host));
}

std::unique_ptr<LocalRegion> RoutedTransport::register_memory(std::span<std::byte> memory) {
  auto network = network_->register_memory(memory);
  auto on_host = local_ ? local_->register_memory(memory) : nullptr;
  return std::make_unique<RoutedLocalRegion>(std::move(network), std::move(on_host));
}

std::unique_ptr<RemoteRegion> RoutedTransport::do_import_region(int peer, std::span<const std::byte> key) {
  const bool here = is_local(peer);
  Reader in(key, caps_.name + ": the region key of rank " + std::to_string(peer));
  if (in.u32() != kKeyMagic)
    fail(Errc::protocol, caps_.name + ": rank " + std::to_string(peer) + " sent a region key of another transport");
  const auto network_key = in.part();
  const auto local_key = in.part();
  in.end();
  if (here && local_key.empty())
    fail(Errc::protocol, caps_.name + ": rank " + std::to_string(peer) +
                             " shares this host but sent no shared-memory region key");
  auto inner = here ? local_->import_region(peer, local_key) : network_->import_region(peer, network_key);
  return std::make_unique<RoutedRemoteRegion>(std::move(inner), here);
}

// --- Data movement and atomics ------------------------------------------------------------------

void RoutedTransport::do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                               size_t bytes) {
  const RoutedRemoteRegion& d = remote(dst);
  (d.local() ? *local_ : *network_).write(local(src).half(d.local()), src_offset, d.inner(), dst_offset, bytes);
}

void RoutedTransport::do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                                      size_t dst_offset, size_t bytes, uint64_t value) {
  const RoutedRemoteRegion& d = remote(dst);
  (d.local() ? *local_ : *network_)
      .write_notify(local(src).half(d.local()), src_offset, d.inner(), dst_offset, bytes, value);
}

void RoutedTransport::do_notify(int peer, uint64_t value) { route(peer).notify(peer, value); }
bool RoutedTransport::do_try_notify(int peer, uint64_t value) { return route(peer).try_notify(peer, value); }

uint64_t RoutedTransport::do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  const RoutedRemoteRegion& d = remote(dst);
  return (d.local() ? *local_ : *network_).fetch_add(d.inner(), offset, operand);
}

uint64_t RoutedTransport::do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) {
  const RoutedRemoteRegion& d = remote(dst);
  return (d.local() ? *local_ : *network_).compare_swap(d.inner(), offset, expected, desired);
}

uint64_t RoutedTransport::do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  const RoutedRemoteRegion& d = remote(dst);
  return (d.local() ? *local_ : *network_).swap(d.inner(), offset, value);
}

uint64_t RoutedTransport::do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  const RoutedRemoteRegion& d = remote(dst);
  return (d.local() ? *local_ : *network_).atomic_max(d.inner(), offset, value);
}

void RoutedTransport::flush() {
  network_->flush();
  if (local_) local_->flush();
}

// --- Progress, notifications, waiting ----------------------------------------------------------

void RoutedTransport::progress() {
  if (local_) local_->progress();
  network_->progress();
}

size_t RoutedTransport::poll(std::span<uint64_t> out) {
  if (!local_) return network_->poll(out);
  // Whichever went second last time goes first, so that a busy one cannot starve the other.
  const bool local_first = poll_local_first_.exchange(!poll_local_first_.load(std::memory_order_relaxed),
                                                      std::memory_order_relaxed);
  Transport& first = local_first ? *local_ : *network_;
  Transport& second = local_first ? *network_ : *local_;
  size_t n = first.poll(out);
  n += second.poll(out.subspan(n));
  return n;
}

bool RoutedTransport::wait(microseconds timeout, WaitFor what) {
  if (!local_) return network_->wait(timeout, what);
  const uint64_t wakes_at_entry = wakes_.load(std::memory_order_acquire);
  const auto deadline = Clock::now() + timeout;
  microseconds slice{50};
  for (;;) {
    if (local_->wait(microseconds(0), what)) return true;
    if (wakes_.load(std::memory_order_acquire) != wakes_at_entry) return true;
    const auto left = std::chrono::duration_cast<microseconds>(deadline - Clock::now());
    if (left <= microseconds(0)) return false;
    if (network_->wait(std::min(slice, left), what)) return true;
    slice = std::min<microseconds>(2 * slice, std::chrono::milliseconds(1));
  }
}

void RoutedTransport::wake() {
  wakes_.fetch_add(1, std::memory_order_acq_rel);
  network_->wake();
  if (local_) local_->wake();
}

void RoutedTransport::abandon() {
  network_->abandon();
  if (local_) local_->abandon();
}

void RoutedTransport::expect_departures() {
  network_->expect_departures();
  if (local_) local_->expect_departures();
}

std::unique_ptr<Transport> route(std::unique_ptr<Transport> local, std::unique_ptr<Transport> network,
                                 const std::string& host_key, const std::string& name) {
  return std::make_unique<RoutedTransport>(std::move(local), std::move(network), host_key, name);
}

}  // namespace pcoll::transport::routed
