// The in-process provider: its process-wide directory, its registry descriptor, and the
// transport's construction and teardown.
#include <unistd.h>

#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {

Fabric& Fabric::instance() {
  static Fabric fabric;  // documented global: the directory every rank of this process shares
  return fabric;
}

void Fabric::add_endpoint(const std::shared_ptr<Endpoint>& endpoint) {
  std::lock_guard lock(endpoints_mutex_);
  endpoints_[endpoint->id] = endpoint;
}

void Fabric::remove_endpoint(uint64_t id) {
  std::lock_guard lock(endpoints_mutex_);
  endpoints_.erase(id);
}

std::shared_ptr<Endpoint> Fabric::find_endpoint(uint64_t id) {
  std::lock_guard lock(endpoints_mutex_);
  const auto it = endpoints_.find(id);
  return it == endpoints_.end() ? nullptr : it->second.lock();
}

uint64_t Fabric::add_region(uint64_t owner, std::span<std::byte> bytes) {
  const uint64_t id = next_id();
  std::unique_lock lock(regions_mutex_);
  regions_.emplace(id, Region{owner, bytes});
  return id;
}

void Fabric::remove_region(uint64_t id) {
  std::unique_lock lock(regions_mutex_);
  regions_.erase(id);
}

const Fabric::Region* Fabric::find_region_locked(uint64_t id) const {
  const auto it = regions_.find(id);
  return it == regions_.end() ? nullptr : &it->second;
}

std::string selector_of(const Endpoint& endpoint) { return endpoint.fifo ? "inproc:fifo" : "inproc"; }

InprocTransport::InprocTransport(const std::string& variant, const Options& options) : options_(options) {
  if (!variant.empty() && variant != "fifo")
    invalid_argument("PCOLL_PROVIDER='inproc:" + variant + "' is not a variant of the in-process provider; use inproc or inproc:fifo");
  self_ = std::make_shared<Endpoint>(Fabric::instance().next_id(), variant == "fifo");
  Fabric::instance().add_endpoint(self_);
  caps_.name = selector_of(*self_);
  caps_.provider = variant == "fifo" ? "memcpy, notifications in arrival order" : "memcpy, notifications reordered";
  caps_.domain = "process " + std::to_string(::getpid());
  // Small on purpose: most of the engine's writes are then queued, and its flushes count.
  caps_.inject_bytes = 64;
  caps_.max_write_bytes = size_t{1} << 40;
  caps_.max_atomic_count = 1;
  caps_.notify_bits = 64;
  caps_.target_progress = false;   // the initiator copies; the target never has to poll
  caps_.remote_atomics = true;     // std::atomic_ref on the target's word
  caps_.native_atomic_max = true;  // one atomic operation on the target's word
  caps_.wait_object = true;        // a condition variable
}

InprocTransport::~InprocTransport() {
  Fabric::instance().remove_endpoint(self_->id);
  std::lock_guard lock(self_->mutex);
  // Peers that still hold this endpoint get Errc::peer_failed from now on. Writes still
  // queued here are dropped, as closing an RDMA endpoint cancels what it has not sent.
  self_->closed = true;
  self_->inbox.clear();
  self_->outbox.clear();
  self_->changed.notify_all();
}

namespace {

std::unique_ptr<Transport> create_inproc(const std::string& variant, const Options& options) {
  return std::make_unique<InprocTransport>(variant, options);
}

}  // namespace

const ProviderDescriptor& descriptor() {
  static const ProviderDescriptor inproc{
      "inproc", "memory copies between ranks that are threads of one process (tests/threads)",
      {"", "fifo"}, create_inproc};
  return inproc;
}

}  // namespace pcoll::transport::inproc
