// Registered memory: LocalRegion (fi_mr_reg, honouring every mr_mode bit) and the key blob
// peers turn into a RemoteRegion. The blob's layout and its validation are ofi_key.cpp's.
//
// What each mr_mode bit (fi_mr(3)) asks, and where it is done:
// - FI_MR_LOCAL: every local buffer handed to libfabric is registered and its descriptor
//   passed: a write's source (this region's desc), atomic operand/compare/result words and
//   notify receive buffers (the scratch region, ofi_domain.cpp). notify()'s fi_inject takes
//   no descriptor: an inject buffer is copied before the call returns.
// - FI_MR_PROV_KEY: no requested key; the key comes from fi_mr_key (after fi_mr_enable).
// - FI_MR_ENDPOINT: each MR is bound to the endpoint (fi_mr_bind, flags 0) and enabled
//   before its key or descriptor is read; the endpoint was enabled first.
// - FI_MR_RAW: the raw key (FI_GET_RAW_MR) and the base address reported with it travel in
//   the blob; the importer maps them with fi_mr_map_raw and unmaps the key when the
//   RemoteRegion goes, before the domain closes.
// - FI_MR_VIRT_ADDR: remote addresses are the registration's virtual address + offset;
//   without it, 0-based offsets. The blob says which, and the importer checks it agrees.
// - FI_MR_ALLOCATED: allocate() writes zeros over all its pages before registering them, as
//   do the engine's regions (all from allocate()); register_memory() takes memory its
//   caller owns, which must be backed by pages already (transport.hpp).
#include <cstdlib>
#include <cstring>

#include <ofi/ofi_key.hpp>
#include <ofi/ofi_transport.hpp>

namespace pcoll::transport::ofi {

OfiLocalRegion::OfiLocalRegion(OfiTransport& transport, std::span<std::byte> memory,
                               std::unique_ptr<std::byte, FreeDeleter> owned)
    : LocalRegion(memory), provider_lock_(transport.mutex_), owned_(std::move(owned)), memory_(memory) {
  const uint64_t mr_mode = transport.mr_mode();
  // libfabric rejects empty registrations; a zero-length region registers a private word
  // so that its key stays valid (bounds checks refuse every access but 0-byte ones).
  if (memory.empty() && !owned_) {
    owned_.reset(static_cast<std::byte*>(std::calloc(1, sizeof(uint64_t))));
    if (!owned_) fail(Errc::out_of_memory, "ofi: cannot allocate an empty region");
  }
  void* reg_base = memory.empty() ? static_cast<void*>(owned_.get()) : memory.data();
  const size_t reg_bytes = memory.empty() ? sizeof(uint64_t) : memory.size();
  reg_base_ = static_cast<std::byte*>(reg_base);

  uint64_t requested_key = 0;
  fid_mr* mr = nullptr;
  {
    std::lock_guard lock(transport.mutex_);
    if (!(mr_mode & FI_MR_PROV_KEY)) requested_key = transport.next_requested_key();
    const uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (int rc = fi_mr_reg(transport.domain(), reg_base, reg_bytes, access, 0, requested_key, 0,
                           &mr, nullptr);
        rc != 0)
      fail_fi("fi_mr_reg(" + std::to_string(memory.size()) + " bytes)", rc);
    mr_.reset(mr);
    if (mr_mode & FI_MR_ENDPOINT) {
      if (int rc = fi_mr_bind(mr, &transport.endpoint()->fid, 0); rc != 0) fail_fi("fi_mr_bind", rc);
      if (int rc = fi_mr_enable(mr); rc != 0) fail_fi("fi_mr_enable", rc);
    }
  }
  desc_ = fi_mr_desc(mr);

  Bytes raw_key;
  uint64_t key = 0;
  if (mr_mode & FI_MR_RAW) {
    size_t raw_bytes = transport.mr_key_bytes();
    raw_key.resize(raw_bytes);
    uint64_t raw_base = 0;
    struct fi_mr_raw_attr attr{};
    attr.base_addr = &raw_base;
    attr.raw_key = reinterpret_cast<uint8_t*>(raw_key.data());
    attr.key_size = &raw_bytes;
    if (int rc = fi_control(&mr->fid, FI_GET_RAW_MR, &attr); rc != 0) fail_fi("FI_GET_RAW_MR", rc);
    raw_key.resize(raw_bytes);
    // The peer's fi_mr_map_raw needs this base address with the raw key; the 64-bit key
    // field is free under FI_MR_RAW (the mapped key comes from fi_mr_map_raw), so it rides there.
    key = raw_base;
  } else {
    key = fi_mr_key(mr);
    if (key == FI_KEY_NOTAVAIL) fail(Errc::transport, "fi_mr_key: no key for a registration");
  }

  const bool virt = (mr_mode & FI_MR_VIRT_ADDR) != 0;
  KeyHeader header{kKeyMagic, transport.my_rank_or_unknown(), virt ? kFlagVirtAddr : 0u,
                   static_cast<uint32_t>(raw_key.size()),
                   virt ? reinterpret_cast<uint64_t>(reg_base) : 0, memory.size(), key};
  key_blob_.resize(sizeof header + raw_key.size());
  std::memcpy(key_blob_.data(), &header, sizeof header);
  if (!raw_key.empty()) std::memcpy(key_blob_.data() + sizeof header, raw_key.data(), raw_key.size());
}

OfiLocalRegion::~OfiLocalRegion() {
  std::lock_guard lock(provider_lock_);
  mr_.reset();
}

OfiRemoteRegion::~OfiRemoteRegion() {
  if (!raw_mapped_) return;
  std::lock_guard lock(provider_lock_);
  fi_mr_unmap_key(domain_, key_);
}

std::unique_ptr<LocalRegion> OfiTransport::allocate(size_t bytes) {
  const size_t page = 4096;
  const size_t rounded = (bytes + page - 1) / page * page;
  std::unique_ptr<std::byte, FreeDeleter> memory;
  if (rounded > 0) {
    memory.reset(static_cast<std::byte*>(std::aligned_alloc(page, rounded)));
    if (!memory) fail(Errc::out_of_memory, "ofi: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(memory.get(), 0, rounded);
  }
  std::span<std::byte> span(memory.get(), bytes);
  return std::make_unique<OfiLocalRegion>(*this, span, std::move(memory));
}

std::unique_ptr<LocalRegion> OfiTransport::register_memory(std::span<std::byte> memory) {
  return std::make_unique<OfiLocalRegion>(*this, memory, nullptr);
}

std::unique_ptr<RemoteRegion> OfiTransport::do_import_region(int peer, std::span<const std::byte> key) {
  const KeyModes modes{.virt_addr = (mr_mode_ & FI_MR_VIRT_ADDR) != 0, .raw = (mr_mode_ & FI_MR_RAW) != 0};
  const KeyEnvelope envelope = parse_key(key, peer, modes);
  const uint64_t base = envelope.base;
  uint64_t mr_key = envelope.mr_key;
  bool mapped = false;
  if (!envelope.raw_key.empty()) {
    std::lock_guard lock(mutex_);
    auto* raw = const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(envelope.raw_key.data()));
    if (int rc = fi_mr_map_raw(domain_.get(), envelope.raw_base(), raw, envelope.raw_key.size(), &mr_key, 0);
        rc != 0)
      fail_fi("fi_mr_map_raw(rank " + std::to_string(peer) + ")", rc);
    mapped = true;
  }
  return std::make_unique<OfiRemoteRegion>(domain_.get(), mutex_, peer, base, envelope.bytes, mr_key, mapped);
}

}  // namespace pcoll::transport::ofi
