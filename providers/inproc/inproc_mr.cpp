// The in-process provider's memory: regions listed in the fabric's directory, their keys,
// and the import of a peer's key.
#include <cstdlib>
#include <cstring>

#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {
namespace {

constexpr uint64_t kKeyMagic = 0x70636f6c6c69706bull;  // "pcollipk"

struct KeyWire {
  uint64_t magic;
  uint64_t endpoint;
  uint64_t region;
  uint64_t size;
};

}  // namespace

const InprocLocalRegion& local_of(const LocalRegion& region, const char* op) {
  const auto* local = dynamic_cast<const InprocLocalRegion*>(&region);
  if (local == nullptr) invalid_argument(std::string("inproc ") + op + ": the source region was made by another transport");
  return *local;
}

const InprocRemoteRegion& remote_of(const RemoteRegion& region, const char* op) {
  const auto* remote = dynamic_cast<const InprocRemoteRegion*>(&region);
  if (remote == nullptr) invalid_argument(std::string("inproc ") + op + ": the target region was imported by another transport");
  return *remote;
}

InprocLocalRegion::InprocLocalRegion(std::shared_ptr<Endpoint> endpoint, std::span<std::byte> bytes,
                                     std::unique_ptr<std::byte, void (*)(void*)> owned)
    : LocalRegion(bytes), endpoint_(std::move(endpoint)), bytes_(bytes), owned_(std::move(owned)) {
  id_ = Fabric::instance().add_region(endpoint_->id, bytes_);
}

InprocLocalRegion::~InprocLocalRegion() {
  // Exclusive: a peer's copy into this memory finishes before the memory goes away, and
  // later ones find the region gone.
  Fabric::instance().remove_region(id_);
}

Bytes InprocLocalRegion::remote_key() const {
  const KeyWire wire{kKeyMagic, endpoint_->id, id_, bytes_.size()};
  Bytes out(sizeof wire);
  std::memcpy(out.data(), &wire, sizeof wire);
  return out;
}

std::unique_ptr<LocalRegion> InprocTransport::allocate(size_t bytes) {
  // Cache-line aligned and zeroed, as the other providers' allocations are.
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  std::unique_ptr<std::byte, void (*)(void*)> memory(static_cast<std::byte*>(std::aligned_alloc(64, rounded)),
                                                     &std::free);
  if (!memory) fail(Errc::out_of_memory, "inproc allocate: cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(memory.get(), 0, rounded);
  const std::span<std::byte> span(memory.get(), bytes);
  return std::make_unique<InprocLocalRegion>(self_, span, std::move(memory));
}

std::unique_ptr<LocalRegion> InprocTransport::register_memory(std::span<std::byte> memory) {
  return std::make_unique<InprocLocalRegion>(self_, memory,
                                             std::unique_ptr<std::byte, void (*)(void*)>(nullptr, &std::free));
}

std::unique_ptr<RemoteRegion> InprocTransport::do_import_region(int peer, std::span<const std::byte> key) {
  const Endpoint& owner = peer_endpoint(peer, "import_region");
  KeyWire wire{};
  if (key.size() != sizeof wire)
    fail_peer(Errc::protocol, peer,
              "inproc import_region: rank " + std::to_string(peer) + "'s key has " + std::to_string(key.size()) +
                  " bytes, an in-process key has " + std::to_string(sizeof wire));
  std::memcpy(&wire, key.data(), sizeof wire);
  if (wire.magic != kKeyMagic)
    fail_peer(Errc::protocol, peer, "inproc import_region: rank " + std::to_string(peer) + "'s key is not an in-process key");
  if (wire.endpoint != owner.id)
    fail_peer(Errc::protocol, peer,
              "inproc import_region: the key given for rank " + std::to_string(peer) +
                  " describes memory of another endpoint (keys must be imported from the rank that made them)");
  {
    std::shared_lock lock(Fabric::instance().regions_mutex());
    const Fabric::Region* region = Fabric::instance().find_region_locked(wire.region);
    if (region == nullptr || region->owner != wire.endpoint || region->bytes.size() != wire.size)
      fail_peer(Errc::protocol, peer,
                "inproc import_region: rank " + std::to_string(peer) + "'s key names region " +
                    std::to_string(wire.region) + " of " + std::to_string(wire.size) +
                    " bytes, which that rank has not registered (or no longer)");
  }
  const Fabric::Region* region = nullptr;
  std::span<std::byte> bytes;
  {
    std::shared_lock lock(Fabric::instance().regions_mutex());
    region = Fabric::instance().find_region_locked(wire.region);
    if (region != nullptr) bytes = region->bytes;
  }
  return std::make_unique<InprocRemoteRegion>(peer, wire.region, static_cast<size_t>(wire.size), bytes);
}

}  // namespace pcoll::transport::inproc
