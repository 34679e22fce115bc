// Opening the fabric, domain, CQ, AV and endpoint for the chosen provider, finding out
// whether it has 64-bit remote atomics, and describing it in Capabilities.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <ofi/ofi_requirements.hpp>
#include <ofi/ofi_settings.hpp>
#include <ofi/ofi_transport.hpp>
#include <support/log.hpp>

namespace pcoll::transport::ofi {

void FreeDeleter::operator()(void* p) const noexcept { std::free(p); }

OfiTransport::OfiTransport(ProviderInfo provider, const Options& options)
    : provider_(std::move(provider)), options_(options) {
  const fi_info* info = provider_.info.get();
  mr_mode_ = info->domain_attr->mr_mode;
  mr_key_bytes_ = info->domain_attr->mr_key_size;
  inject_bytes_ = info->tx_attr->inject_size;
  cq_data_bytes_ = std::min<size_t>(8, info->domain_attr->cq_data_size);
  // Tests lower it to what verbs and EFA report, so the 32-bit notification path runs here.
  if (const auto lowered = OfiSettings::raw("PCOLL_TEST_OFI_CQ_DATA_SIZE")) {
    const auto bytes = OfiSettings::parse_unsigned("PCOLL_TEST_OFI_CQ_DATA_SIZE", *lowered);
    if (bytes != 4 && bytes != 8)
      invalid_argument("PCOLL_TEST_OFI_CQ_DATA_SIZE=" + *lowered + " is neither 4 nor 8");
    cq_data_bytes_ = std::min<size_t>(cq_data_bytes_, bytes);
  }
  value_mask_ = cq_data_bytes_ >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * cq_data_bytes_)) - 1;
  max_write_bytes_ = info->ep_attr->max_msg_size;
  open_objects();
  check_atomics();
  fill_capabilities();
  post_receives();
  log::debug("ofi: opened " + caps_.provider + " on " + caps_.domain + ", mode " + mode_names(info->mode) +
             ", mr_mode " + mr_mode_names(static_cast<unsigned>(info->domain_attr->mr_mode)) +
             (caps_.remote_atomics ? ", 64-bit atomics" : ", no atomics: " + atomics_missing_));
}

OfiTransport::~OfiTransport() {
  // The endpoint goes first, before the contexts it may still hold (posted receives, writes
  // and atomics in flight) are destroyed: a provider that keeps state in them (FI_CONTEXT)
  // may touch them while it cancels what is outstanding.
  std::lock_guard lock(mutex_);
  ep_.reset();
}

void OfiTransport::open_objects() {
  fi_info* info = provider_.info.get();
  fid_fabric* fabric = nullptr;
  if (int rc = fi_fabric(info->fabric_attr, &fabric, nullptr); rc != 0) fail_fi("fi_fabric", rc);
  fabric_.reset(fabric);

  fid_domain* domain = nullptr;
  if (int rc = fi_domain(fabric_.get(), info, &domain, nullptr); rc != 0)
    fail_fi("fi_domain(" + std::string(info->domain_attr->name) + ")", rc);
  domain_.reset(domain);

  // A CQ with an fd to sleep on where the provider has one (tcp;ofi_rxm, sockets); shm
  // refuses FI_WAIT_FD and then wait() spins briefly and backs off instead.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = 0;  // provider default, sized for its tx + rx queues
  cq_attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr) == 0) {
    int fd = -1;
    if (fi_control(&cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
      fd_wait_ = true;
      cq_fd_ = fd;
    }
  }
  if (!fd_wait_) {
    if (cq != nullptr) fi_close(&cq->fid);
    cq = nullptr;
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (int rc = fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr); rc != 0) fail_fi("fi_cq_open", rc);
  }
  cq_.reset(cq);

  fi_av_attr av_attr{};
  av_attr.type = info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info->domain_attr->av_type;
  fid_av* av = nullptr;
  if (int rc = fi_av_open(domain_.get(), &av_attr, &av, nullptr); rc != 0) fail_fi("fi_av_open", rc);
  av_.reset(av);

  fid_ep* ep = nullptr;
  if (int rc = fi_endpoint(domain_.get(), info, &ep, nullptr); rc != 0) fail_fi("fi_endpoint", rc);
  ep_.reset(ep);
  if (int rc = fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV); rc != 0)
    fail_fi("fi_ep_bind(cq)", rc);
  if (int rc = fi_ep_bind(ep_.get(), &av_->fid, 0); rc != 0) fail_fi("fi_ep_bind(av)", rc);
  if (int rc = fi_enable(ep_.get()); rc != 0) fail_fi("fi_enable", rc);

  open_wait_loop();

  // Scratch: atomic operand/compare/result words, then the notify receive buffers.
  const size_t scratch_bytes = kAtomicSlots * 3 * sizeof(uint64_t) + kRecvSlots * sizeof(uint64_t);
  const size_t page = 4096;
  scratch_memory_.reset(static_cast<std::byte*>(std::aligned_alloc(page, (scratch_bytes + page - 1) / page * page)));
  if (!scratch_memory_) fail(Errc::out_of_memory, "ofi: cannot allocate the scratch region");
  std::memset(scratch_memory_.get(), 0, scratch_bytes);
  fid_mr* mr = nullptr;
  const uint64_t key = (mr_mode_ & FI_MR_PROV_KEY) ? 0 : next_requested_key();
  if (int rc = fi_mr_reg(domain_.get(), scratch_memory_.get(), scratch_bytes,
                         FI_READ | FI_WRITE | FI_SEND | FI_RECV, 0, key, 0, &mr, nullptr);
      rc != 0)
    fail_fi("fi_mr_reg(scratch)", rc);
  scratch_mr_.reset(mr);
  if (mr_mode_ & FI_MR_ENDPOINT) {
    if (int rc = fi_mr_bind(mr, &ep_->fid, 0); rc != 0) fail_fi("fi_mr_bind(scratch)", rc);
    if (int rc = fi_mr_enable(mr); rc != 0) fail_fi("fi_mr_enable(scratch)", rc);
  }
  scratch_desc_ = fi_mr_desc(mr);

  auto* words = reinterpret_cast<uint64_t*>(scratch_memory_.get());
  atomic_slots_.resize(kAtomicSlots);
  for (size_t i = 0; i < kAtomicSlots; ++i) atomic_slots_[i].words = words + 3 * i;
  recv_slots_.resize(kRecvSlots);
  for (size_t i = 0; i < kRecvSlots; ++i) recv_slots_[i].value = words + 3 * kAtomicSlots + i;
  pending_reposts_.reserve(kRecvSlots);
}

void OfiTransport::check_atomics() {
  // 64-bit fetch-add and compare-swap make remote_atomics; swap and max are emulated with
  // compare-swap where absent. Without them the transport still opens: the atomics then
  // throw (ofi_atomic.cpp), and the engine's handles use none.
  const std::string prov = provider_.info->fabric_attr->prov_name ? provider_.info->fabric_attr->prov_name : "?";
  caps_.remote_atomics = false;
  if ((provider_.info->caps & FI_ATOMIC) == 0) {
    atomics_missing_ = prov + " was opened without FI_ATOMIC (" +
                       (provider_.no_atomics.empty() ? std::string("fi_getinfo offers none") : provider_.no_atomics) + ")";
    return;
  }
  size_t count = 0;
  if (fi_fetch_atomicvalid(ep_.get(), FI_UINT64, FI_SUM, &count) != 0 || count < 1) {
    atomics_missing_ = prov + " has no 64-bit fetching FI_SUM (fi_fetch_atomicvalid)";
    return;
  }
  if (fi_compare_atomicvalid(ep_.get(), FI_UINT64, FI_CSWAP, &count) != 0 || count < 1) {
    atomics_missing_ = prov + " has no 64-bit FI_CSWAP (fi_compare_atomicvalid)";
    return;
  }
  caps_.remote_atomics = true;
  caps_.max_atomic_count = count;
  native_swap_ = fi_fetch_atomicvalid(ep_.get(), FI_UINT64, FI_ATOMIC_WRITE, &count) == 0 && count >= 1;
  caps_.native_atomic_max = fi_fetch_atomicvalid(ep_.get(), FI_UINT64, FI_MAX, &count) == 0 && count >= 1;
}

void OfiTransport::fill_capabilities() {
  const fi_info* info = provider_.info.get();
  caps_.name = provider_.selector;
  caps_.provider = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
  caps_.domain = info->domain_attr->name ? info->domain_attr->name : "?";
  caps_.inject_bytes = inject_bytes_;
  caps_.max_write_bytes = max_write_bytes_;
  // notify() carries 64 bits in a message; write_notify carries cq_data_size bytes, and a
  // value is one or the other: only the bits both carry are promised.
  caps_.notify_bits = static_cast<unsigned>(cq_data_bytes_ * 8);
  caps_.target_progress = info->domain_attr->data_progress == FI_PROGRESS_MANUAL;
  caps_.wait_object = fd_wait_;
  caps_.partial_connect = true;
}

void OfiTransport::post_receives() {
  std::lock_guard lock(mutex_);
  for (auto& slot : recv_slots_) repost_receive_locked(slot);
}

uint64_t OfiTransport::next_requested_key() {
  // Keys only need to be unique within this process's domain.
  return next_key_++;
}

}  // namespace pcoll::transport::ofi
