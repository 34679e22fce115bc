// What pcoll needs of a libfabric provider, written once: the mode and mr_mode bits it can
// honour (the hints ofi_fabric.cpp asks fi_getinfo with) and the check every fi_getinfo
// entry passes before pcoll commits to it. Atomics are not among the needs: the engine's
// handles use none, so a provider without them is opened with Capabilities::remote_atomics
// false. Pure over struct fi_info (no libfabric calls), so tests/unit/test_ofi_requirements.cpp
// checks it on entries shaped like those verbs, efa, cxi and psm3 report.
#pragma once

#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace pcoll::transport::ofi {

// mr_mode bits whose rules ofi_mr.cpp and ofi_domain.cpp follow: descriptors for every local
// buffer (LOCAL), raw keys with their base address (RAW), virtual or offset addressing
// (VIRT_ADDR), keys from the provider (PROV_KEY), MRs bound to the endpoint and enabled
// (ENDPOINT), and registrations backed by pages (ALLOCATED: allocate() zeroes its memory).
inline constexpr uint64_t kHandledMrMode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                           FI_MR_PROV_KEY | FI_MR_ENDPOINT;

// Mode bits pcoll honours: every operation context begins with a struct fi_context2
// (ofi_context.hpp), which is also an array of two fi_context; every IO vector pcoll passes
// has one entry, so FI_ASYNC_IOV asks nothing of it; every local buffer is registered and
// its descriptor passed, which is what the older FI_LOCAL_MR asks.
inline constexpr uint64_t kHonouredMode = FI_CONTEXT | FI_CONTEXT2 | FI_ASYNC_IOV | FI_LOCAL_MR;

// write_notify's value travels as remote CQ data: 32-bit notifications need 4 bytes of it.
inline constexpr size_t kMinCqDataBytes = 4;
// notify() is an 8-byte fi_inject.
inline constexpr size_t kMinInjectBytes = sizeof(uint64_t);

// Empty when the entry offers what pcoll needs (FI_EP_RDM, FI_MSG and FI_RMA, remote CQ data
// of at least 4 bytes, inject of at least 8 bytes, no mr_mode or mode bit outside the sets
// above); otherwise why not, naming the attribute, its value and what pcoll needs.
std::string unusable_because(const fi_info& entry);

// "FI_MR_MMU_NOTIFY, FI_MR_RMA_EVENT"; unnamed bits in hexadecimal.
std::string mr_mode_names(uint64_t bits);
// "FI_RX_CQ_DATA, FI_MSG_PREFIX"; unnamed bits in hexadecimal.
std::string mode_names(uint64_t bits);

}  // namespace pcoll::transport::ofi
