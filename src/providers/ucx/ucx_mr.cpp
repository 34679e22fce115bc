// Memory regions: ucp_mem_map (allocating for allocate(), mapping the caller's memory for
// register_memory()), the remote-key blob peers exchange, and its validation on import.
//
// Blob layout (little-endian host order, all ranks run on the same architecture):
//   u32 magic 'PCXK' | u16 version | u16 reserved 0 | u64 address | u64 length |
//   u64 origin (fingerprint of the owner's worker address) | u32 rkey bytes | u32 reserved 0 |
//   u64 FNV-1a of everything else | packed UCP rkey
// The checksum catches truncated or corrupted blobs before UCP parses the packed key, which
// it does not validate; the origin catches a key imported as another rank's.
#include <cstring>

#include "ucx_transport.hpp"

namespace pcoll::transport::ucx {

namespace {

constexpr uint32_t kKeyMagic = 0x4b584350;  // "PCXK"
constexpr uint16_t kKeyVersion = 1;

struct KeyHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint64_t address;
  uint64_t length;
  uint64_t origin;
  uint32_t rkey_bytes;
  uint32_t reserved1;
  uint64_t checksum;
};
static_assert(sizeof(KeyHeader) == 48);

uint64_t fnv1a(std::span<const std::byte> bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (std::byte b : bytes) {
    hash ^= static_cast<uint64_t>(b);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

uint64_t address_fingerprint(std::span<const std::byte> worker_address) {
  return fnv1a(worker_address);
}

namespace {

uint64_t key_checksum(KeyHeader header, std::span<const std::byte> rkey) {
  header.checksum = 0;
  const uint64_t hash = fnv1a(std::as_bytes(std::span(&header, 1)));
  return fnv1a(rkey, hash);
}

struct RkeyBufferDeleter {
  void operator()(void* buffer) const noexcept { ucp_rkey_buffer_release(buffer); }
};

}  // namespace

Bytes pack_key(ucp_context_h context, ucp_mem_h memh, uint64_t address, size_t length,
               uint64_t origin) {
  std::unique_ptr<void, RkeyBufferDeleter> rkey_buffer;
  size_t rkey_bytes = 0;
  if (memh) {
    void* raw = nullptr;
    const ucs_status_t status = ucp_rkey_pack(context, memh, &raw, &rkey_bytes);
    if (status != UCS_OK) fail_status(Errc::transport, "ucp_rkey_pack", status);
    rkey_buffer.reset(raw);
  }
  const auto rkey = std::span(static_cast<const std::byte*>(rkey_buffer.get()), rkey_bytes);
  KeyHeader header{kKeyMagic, kKeyVersion, 0, address, length, origin,
                   static_cast<uint32_t>(rkey_bytes), 0, 0};
  header.checksum = key_checksum(header, rkey);
  Bytes blob(sizeof header + rkey_bytes);
  std::memcpy(blob.data(), &header, sizeof header);
  if (rkey_bytes) std::memcpy(blob.data() + sizeof header, rkey.data(), rkey_bytes);
  return blob;
}

KeyView decode_key(std::span<const std::byte> key, const std::string& who) {
  KeyHeader header{};
  if (key.size() < sizeof header)
    fail(Errc::protocol, "ucx: " + who + " is " + std::to_string(key.size()) +
                             " bytes, shorter than its " + std::to_string(sizeof header) +
                             "-byte header");
  std::memcpy(&header, key.data(), sizeof header);
  if (header.magic != kKeyMagic || header.version != kKeyVersion)
    fail(Errc::protocol, "ucx: " + who + " is not a UCX provider key (magic/version mismatch; "
                         "do all ranks use the same PCOLL_PROVIDER and pcoll version?)");
  const auto rkey = key.subspan(sizeof header);
  if (rkey.size() != header.rkey_bytes || header.reserved0 != 0 || header.reserved1 != 0 ||
      (header.length > 0) != (header.rkey_bytes > 0))
    fail(Errc::protocol, "ucx: " + who + " has inconsistent lengths (" +
                             std::to_string(key.size()) + " bytes, rkey " +
                             std::to_string(header.rkey_bytes) + " bytes)");
  if (header.checksum != key_checksum(header, rkey))
    fail(Errc::protocol, "ucx: " + who + " is corrupted (checksum mismatch)");
  if (header.address + header.length < header.address)
    fail(Errc::protocol, "ucx: " + who + " describes a region that wraps the address space");
  return KeyView{header.address, header.length, header.origin, rkey};
}

UcxLocalRegion::UcxLocalRegion(std::shared_ptr<UcxCore> core, ucp_mem_h memh,
                               std::span<std::byte> bytes)
    : core_(std::move(core)), memh_(memh), bytes_(bytes) {
  key_ = pack_key(core_->context.get(), memh_, reinterpret_cast<uintptr_t>(bytes_.data()),
                  bytes_.size(), address_fingerprint(core_->worker_address));
  if (!bytes_.empty()) core_->add_local_range(reinterpret_cast<uintptr_t>(bytes_.data()), bytes_.size());
}

UcxLocalRegion::~UcxLocalRegion() {
  std::unique_lock lock(core_->mutex);
  if (!bytes_.empty()) core_->remove_local_range(reinterpret_cast<uintptr_t>(bytes_.data()));
  if (memh_) ucp_mem_unmap(core_->context.get(), memh_);
}

UcxRemoteRegion::UcxRemoteRegion(std::shared_ptr<UcxCore> core, int peer, uint64_t address,
                                 size_t bytes, ucp_rkey_h rkey)
    : core_(std::move(core)), peer_(peer), address_(address), bytes_(bytes), rkey_(rkey) {
  // Shared memory: UCX maps the peer's segment here, so the mailbox can store into it.
  std::unique_lock lock(core_->mutex);
  void* local = nullptr;
  if (rkey_ && core_->mailbox.is_open() && ucp_rkey_ptr(rkey_, address_, &local) == UCS_OK)
    mapped_ = static_cast<std::byte*>(local);
}

UcxRemoteRegion::~UcxRemoteRegion() {
  if (!rkey_) return;
  std::unique_lock lock(core_->mutex);
  ucp_rkey_destroy(rkey_);
}

std::unique_ptr<LocalRegion> UcxTransport::map_memory(void* address, size_t bytes, bool allocate) {
  if (bytes == 0)
    return std::make_unique<UcxLocalRegion>(core_, nullptr, std::span<std::byte>{});
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = address;
  params.length = bytes;
  params.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
  ucp_mem_h memh = nullptr;
  std::unique_lock lock(core_->mutex);
  ucs_status_t status = ucp_mem_map(core_->context.get(), &params, &memh);
  if (status != UCS_OK)
    fail_status(status == UCS_ERR_NO_MEMORY ? Errc::out_of_memory : Errc::transport,
                std::string(allocate ? "allocating " : "registering ") + std::to_string(bytes) +
                    " bytes (ucp_mem_map)",
                status);
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(memh, &attr);
  if (status != UCS_OK || attr.length < bytes) {
    ucp_mem_unmap(core_->context.get(), memh);
    fail_status(Errc::transport, "ucp_mem_query", status == UCS_OK ? UCS_ERR_NO_MEMORY : status);
  }
  auto* first = static_cast<std::byte*>(attr.address);
  if (allocate) std::memset(first, 0, bytes);  // md allocators do not all promise zeroed pages
  try {
    // Constructed under the lock: it packs the rkey and records the address range.
    return std::make_unique<UcxLocalRegion>(core_, memh, std::span(first, bytes));
  } catch (...) {
    ucp_mem_unmap(core_->context.get(), memh);
    throw;
  }
}

std::unique_ptr<LocalRegion> UcxTransport::allocate(size_t bytes) {
  return map_memory(nullptr, bytes, true);
}

std::unique_ptr<LocalRegion> UcxTransport::register_memory(std::span<std::byte> memory) {
  return map_memory(memory.data(), memory.size(), false);
}

std::unique_ptr<RemoteRegion> UcxTransport::import_region(int peer_rank,
                                                          std::span<const std::byte> key) {
  check_connected("import_region");
  const std::string who = "remote key from rank " + std::to_string(peer_rank);
  const KeyView header = decode_key(key, who);
  std::unique_lock lock(core_->mutex);
  Peer& p = core_->peer(peer_rank);
  if (header.origin != p.address_fingerprint)
    fail(Errc::protocol, "ucx: " + who + " was made by another process (keys are per rank: "
                         "import rank r's key as peer r)");
  core_->check_peer(p);
  ucp_rkey_h rkey_handle = nullptr;
  if (!header.rkey.empty()) {
    const ucs_status_t status = ucp_ep_rkey_unpack(p.ep, header.rkey.data(), &rkey_handle);
    if (status != UCS_OK) fail_status(Errc::protocol, "unpacking the " + who, status);
  }
  lock.unlock();
  try {
    return std::make_unique<UcxRemoteRegion>(core_, peer_rank, header.address,
                                             static_cast<size_t>(header.length), rkey_handle);
  } catch (...) {
    lock.lock();
    if (rkey_handle) ucp_rkey_destroy(rkey_handle);
    throw;
  }
}

const UcxLocalRegion& UcxTransport::local(const LocalRegion& region) const {
  const auto* r = dynamic_cast<const UcxLocalRegion*>(&region);
  if (!r || r->core() != core_.get())
    invalid_argument("ucx: local region was not made by this transport");
  return *r;
}

const UcxRemoteRegion& UcxTransport::remote(const RemoteRegion& region) const {
  const auto* r = dynamic_cast<const UcxRemoteRegion*>(&region);
  if (!r || r->core() != core_.get())
    invalid_argument("ucx: remote region was not imported by this transport");
  return *r;
}

}  // namespace pcoll::transport::ucx
