// The check of an fi_getinfo entry against what pcoll needs (ofi_requirements.hpp).
#include <ofi/ofi_requirements.hpp>

#include <cstdio>

namespace pcoll::transport::ofi {

namespace {

struct NamedBit {
  uint64_t bit;
  const char* name;
};

// Spelled out rather than through fi_tostr(), whose buffer is shared by every thread.
constexpr NamedBit kMrModeNames[] = {
    {FI_MR_BASIC, "FI_MR_BASIC"},         {FI_MR_SCALABLE, "FI_MR_SCALABLE"},
    {FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
    {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
    {FI_MR_HMEM, "FI_MR_HMEM"},           {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"},
};

constexpr NamedBit kModeNames[] = {
    {FI_CONTEXT, "FI_CONTEXT"},
    {FI_MSG_PREFIX, "FI_MSG_PREFIX"},
    {FI_ASYNC_IOV, "FI_ASYNC_IOV"},
    {FI_RX_CQ_DATA, "FI_RX_CQ_DATA"},
    {FI_LOCAL_MR, "FI_LOCAL_MR"},
    {FI_NOTIFY_FLAGS_ONLY, "FI_NOTIFY_FLAGS_ONLY"},
    {FI_RESTRICTED_COMP, "FI_RESTRICTED_COMP"},
    {FI_CONTEXT2, "FI_CONTEXT2"},
    {FI_BUFFERED_RECV, "FI_BUFFERED_RECV"},
};

template <size_t N>
std::string names(uint64_t bits, const NamedBit (&table)[N]) {
  std::string out;
  auto add = [&out](const std::string& name) { out += (out.empty() ? "" : ", ") + name; };
  for (const NamedBit& named : table) {
    if ((bits & named.bit) == 0) continue;
    add(named.name);
    bits &= ~named.bit;
  }
  if (bits != 0) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(bits));
    add(hex);
  }
  return out.empty() ? std::string("none") : out;
}

}  // namespace

std::string mr_mode_names(uint64_t bits) { return names(bits, kMrModeNames); }
std::string mode_names(uint64_t bits) { return names(bits, kModeNames); }

std::string unusable_because(const fi_info& entry) {
  if (entry.ep_attr == nullptr || entry.domain_attr == nullptr || entry.tx_attr == nullptr)
    return "fi_getinfo returned an entry without endpoint, domain or transmit attributes";
  if (entry.ep_attr->type != FI_EP_RDM)
    return "endpoint type " + std::to_string(entry.ep_attr->type) +
           " is not FI_EP_RDM (pcoll needs reliable unconnected endpoints)";
  if ((entry.caps & FI_MSG) == 0 || (entry.caps & FI_RMA) == 0)
    return std::string("no ") + ((entry.caps & FI_RMA) == 0 ? "FI_RMA" : "FI_MSG") +
           " (pcoll needs FI_MSG for notify() and FI_RMA for writes)";
  if (entry.domain_attr->cq_data_size < kMinCqDataBytes)
    return "remote CQ data of " + std::to_string(entry.domain_attr->cq_data_size) +
           " bytes (cq_data_size; write_notify needs at least " + std::to_string(kMinCqDataBytes) + ")";
  if (entry.tx_attr->inject_size < kMinInjectBytes)
    return "inject size " + std::to_string(entry.tx_attr->inject_size) + " bytes (notify() injects " +
           std::to_string(kMinInjectBytes) + ")";
  const auto mr_mode = static_cast<uint64_t>(static_cast<unsigned>(entry.domain_attr->mr_mode));
  if (const uint64_t unhandled = mr_mode & ~kHandledMrMode; unhandled != 0)
    return "asks for mr_mode " + mr_mode_names(unhandled) + ", which pcoll does not implement (it handles " +
           mr_mode_names(kHandledMrMode) + ")";
  if (const uint64_t unhonoured = entry.mode & ~kHonouredMode; unhonoured != 0)
    return "asks for mode " + mode_names(unhonoured) + ", which pcoll cannot honour (it honours " +
           mode_names(kHonouredMode) + ")";
  return {};
}

}  // namespace pcoll::transport::ofi
