// The endpoint's address blob and connect(): inserting every rank's address into the AV
// (an empty address: a rank this endpoint does not reach, left out).
//
// Address blob: magic (u32), length of the provider name (u32), provider name, fi_getname
// bytes. The provider name lets connect() report ranks that chose a different provider
// (different PCOLL_PROVIDER) instead of failing obscurely inside fi_av_insert.
#include <cstring>

#include <ofi/ofi_transport.hpp>
#include <support/log.hpp>

namespace pcoll::transport::ofi {

namespace {

uint32_t get_u32(std::span<const std::byte> in, size_t at) {
  uint32_t value = 0;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

}  // namespace

Bytes OfiTransport::address() const {
  std::lock_guard lock(mutex_);
  size_t name_bytes = 0;
  fi_getname(&ep_->fid, nullptr, &name_bytes);  // asks for the size (-FI_ETOOSMALL)
  if (name_bytes == 0) fail(Errc::transport, "fi_getname returned an empty address");
  Bytes name(name_bytes);
  if (int rc = fi_getname(&ep_->fid, name.data(), &name_bytes); rc != 0) fail_fi("fi_getname", rc);
  name.resize(name_bytes);

  // Built with one resize + memcpy (g++ 12 warns falsely on repeated vector inserts).
  const uint32_t header[2] = {kAddressMagic, static_cast<uint32_t>(caps_.provider.size())};
  Bytes blob(sizeof header + caps_.provider.size() + name.size());
  std::memcpy(blob.data(), header, sizeof header);
  std::memcpy(blob.data() + sizeof header, caps_.provider.data(), caps_.provider.size());
  std::memcpy(blob.data() + sizeof header + caps_.provider.size(), name.data(), name.size());
  return blob;
}

void OfiTransport::do_connect(int my_rank, std::span<const Bytes> addresses) {
  std::lock_guard lock(mutex_);
  if (!peers_.empty()) fail(Errc::invalid_state, "ofi: connect() called twice");
  const int ranks = static_cast<int>(addresses.size());
  if (my_rank < 0 || my_rank >= ranks)
    invalid_argument("ofi: connect(): rank " + std::to_string(my_rank) + " outside a job of " +
                     std::to_string(ranks));
  std::vector<fi_addr_t> peers(addresses.size(), FI_ADDR_NOTAVAIL);
  for (int r = 0; r < ranks; ++r) {
    std::span<const std::byte> blob(addresses[r]);
    // A rank this transport does not reach (a routed transport's other half serves it).
    if (blob.empty() && r != my_rank) continue;
    if (blob.size() < 8 || get_u32(blob, 0) != kAddressMagic ||
        get_u32(blob, 4) > blob.size() - 8)
      fail(Errc::protocol, "ofi: the address of rank " + std::to_string(r) +
                               " is not a pcoll libfabric address (" +
                               std::to_string(blob.size()) + " bytes); do all ranks use ofi?");
    const size_t prov_bytes = get_u32(blob, 4);
    const std::string prov(reinterpret_cast<const char*>(blob.data() + 8), prov_bytes);
    if (prov != caps_.provider)
      fail(Errc::mismatch, "ofi: rank " + std::to_string(r) + " uses libfabric provider '" + prov +
                               "' but rank " + std::to_string(my_rank) + " uses '" +
                               caps_.provider + "'; set the same PCOLL_PROVIDER on every rank");
    const auto name = blob.subspan(8 + prov_bytes);
    if (name.empty())
      fail(Errc::protocol, "ofi: the address of rank " + std::to_string(r) + " is empty");
    const int inserted = fi_av_insert(av_.get(), name.data(), 1, &peers[r], 0, nullptr);
    if (inserted != 1)
      fail(Errc::transport, fi_message("fi_av_insert(rank " + std::to_string(r) + ")",
                                       inserted < 0 ? inserted : -FI_EINVAL));
  }
  peers_ = std::move(peers);
  rank_ = my_rank;
  peer_failure_.assign(addresses.size(), std::string());
  buckets_.resize(2 * addresses.size());
  for (size_t i = 0; i < buckets_.size(); ++i)
    buckets_[i].peer = static_cast<int>(i % addresses.size());
}

}  // namespace pcoll::transport::ofi
