// Memory regions: ucp_mem_map (allocating for allocate(), mapping the caller's memory for
// register_memory()), the remote-key blob peers exchange, and its validation on import.
//
// The blob's envelope is ucx_key.cpp's; here UCP packs the rkey that goes inside it.
#include <cstring>
#include <typeinfo>

#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

namespace {

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
  return encode_key(address, length, origin, rkey);
}

UcxLocalRegion::UcxLocalRegion(std::shared_ptr<UcxCore> core, ucp_mem_h memh,
                               std::span<std::byte> bytes)
    : LocalRegion(bytes), core_(std::move(core)), memh_(memh), bytes_(bytes) {
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
    : RemoteRegion(peer, bytes), core_(std::move(core)), peer_(peer), address_(address), bytes_(bytes), rkey_(rkey) {
  // Shared memory: UCX maps the peer's segment here (a peer on this host, memory from
  // allocate()), so the mailbox path can copy into it. Peers elsewhere: UNREACHABLE.
  std::unique_lock lock(core_->mutex);
  void* local = nullptr;
  if (rkey_ && core_->mailbox.is_open() && core_->may_map(peer_) &&
      ucp_rkey_ptr(rkey_, address_, &local) == UCS_OK)
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

std::unique_ptr<RemoteRegion> UcxTransport::do_import_region(int peer_rank,
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

// Both classes are final, so comparing the dynamic type is the whole check: cheaper than
// dynamic_cast's hierarchy walk, which showed in an 8-byte round trip's profile.
const UcxLocalRegion& UcxTransport::local(const LocalRegion& region) const {
  if (typeid(region) != typeid(UcxLocalRegion) ||
      static_cast<const UcxLocalRegion&>(region).core() != core_.get())
    invalid_argument("ucx: local region was not made by this transport");
  return static_cast<const UcxLocalRegion&>(region);
}

const UcxRemoteRegion& UcxTransport::remote(const RemoteRegion& region) const {
  if (typeid(region) != typeid(UcxRemoteRegion) ||
      static_cast<const UcxRemoteRegion&>(region).core() != core_.get())
    invalid_argument("ucx: remote region was not imported by this transport");
  return static_cast<const UcxRemoteRegion&>(region);
}

}  // namespace pcoll::transport::ucx
