// The UCP worker: creation with wake-up support, its address blob, and the active-message
// handlers that turn incoming notifications into queued values and take connect()'s hello
// and ready messages.
#include <algorithm>
#include <cstring>

#include <support/log.hpp>
#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

namespace {

// A message with the wrong header or data size: a delivery error for the next poll().
void report_malformed(UcxCore* core, const char* what, size_t header_bytes, size_t data_bytes) {
  core->defer_delivery_error(Error(Errc::protocol, std::string("ucx: a malformed ") + what + " arrived (" +
                                                       std::to_string(header_bytes) + " header bytes, " +
                                                       std::to_string(data_bytes) + " data bytes)"));
}

// notify(): the header is the value.
ucs_status_t on_notify(void* arg, const void* header, size_t header_bytes, void*,
                       size_t data_bytes, const ucp_am_recv_param_t*) {
  auto* core = static_cast<UcxCore*>(arg);
  if (header_bytes != sizeof(uint64_t) || data_bytes != 0) {
    report_malformed(core, "notification", header_bytes, data_bytes);
    return UCS_OK;
  }
  uint64_t value = 0;
  std::memcpy(&value, header, sizeof value);
  core->enqueue_notification(value);
  return UCS_OK;
}

// connect(), first phase: a peer's hello, with its mailbox key (ucx_mailbox.cpp) if it has
// one. Rendezvous is refused: keys are small.
ucs_status_t on_hello(void* arg, const void* header, size_t header_bytes, void* data,
                      size_t data_bytes, const ucp_am_recv_param_t* param) {
  auto* core = static_cast<UcxCore*>(arg);
  std::array<uint64_t, 2> fields{};
  if (header_bytes != sizeof fields || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    log::error("ucx: dropped a malformed connection hello (" + std::to_string(header_bytes) +
               " header bytes)");
    return UCS_OK;
  }
  std::memcpy(fields.data(), header, sizeof fields);
  core->take_hello(static_cast<int>(std::min<uint64_t>(fields[0], INT32_MAX)), fields[1],
                   std::span(static_cast<const std::byte*>(data), data_bytes));
  return UCS_OK;
}

// connect(), second phase: the peer has heard from every rank and needs nothing more of us.
ucs_status_t on_ready(void* arg, const void* header, size_t header_bytes, void*, size_t,
                      const ucp_am_recv_param_t*) {
  auto* core = static_cast<UcxCore*>(arg);
  uint64_t rank = 0;
  if (header_bytes != sizeof rank) {
    log::error("ucx: dropped a malformed connection ready (" + std::to_string(header_bytes) +
               " header bytes)");
    return UCS_OK;
  }
  std::memcpy(&rank, header, sizeof rank);
  core->take_ready(static_cast<int>(std::min<uint64_t>(rank, INT32_MAX)));
  return UCS_OK;
}

// Wakes a receiver that slept on its mailbox; the values are in the rings already.
ucs_status_t on_kick(void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
  return UCS_OK;
}

void on_rendezvous_received(void* request, ucs_status_t status, size_t, void* user_data) {
  std::unique_ptr<RecvOp> op(static_cast<RecvOp*>(user_data));
  if (status == UCS_OK)
    op->core->enqueue_notification(op->value);
  else
    op->core->defer_delivery_error(
        Error(Errc::transport, std::string("ucx: receiving write_notify data failed: ") + ucs_status_string(status)));
  ucp_request_free(request);
}

// write_notify(): the data lands at the address in the header, then the value is queued, so
// a value is never seen before its bytes.
ucs_status_t on_write_notify(void* arg, const void* header, size_t header_bytes, void* data,
                             size_t data_bytes, const ucp_am_recv_param_t* param) {
  auto* core = static_cast<UcxCore*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  std::array<uint64_t, 2> fields{};
  if (header_bytes != sizeof fields) {
    core->defer_delivery_error(Error(Errc::protocol, "ucx: a malformed write_notify arrived (" +
                                                         std::to_string(header_bytes) + " header bytes)"));
    return rendezvous ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  std::memcpy(fields.data(), header, sizeof fields);
  const uintptr_t address = static_cast<uintptr_t>(fields[0]);
  const uint64_t value = fields[1];
  if (!core->contains_local_range(address, data_bytes)) {
    core->defer_delivery_error(Error(Errc::protocol, "ucx: a write_notify of " + std::to_string(data_bytes) +
                                                         " bytes arrived aimed outside every registered region"));
    return rendezvous ? UCS_ERR_INVALID_PARAM : UCS_OK;
  }
  if (!rendezvous) {
    std::memcpy(reinterpret_cast<void*>(address), data, data_bytes);
    core->enqueue_notification(value);
    return UCS_OK;
  }
  // Large message: UCP fetches the data straight into the target region.
  auto op = std::make_unique<RecvOp>(RecvOp{core, value});
  ucp_request_param_t recv_param{};
  recv_param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  recv_param.cb.recv_am = on_rendezvous_received;
  recv_param.user_data = op.get();
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(core->worker.get(), data,
                                                  reinterpret_cast<void*>(address), data_bytes,
                                                  &recv_param);
  if (request == nullptr) {
    core->enqueue_notification(value);
  } else if (UCS_PTR_IS_ERR(request)) {
    core->defer_delivery_error(Error(Errc::transport, std::string("ucx: receiving write_notify data failed: ") +
                                                          ucs_status_string(UCS_PTR_STATUS(request))));
  } else {
    op.release();  // owned by on_rendezvous_received
  }
  // The descriptor now belongs to ucp_am_recv_data_nbx.
  return UCS_OK;
}

// An atomic request (ucx:tcp, ucx_atomic.cpp): run here, answered after progress returns.
ucs_status_t on_atomic(void* arg, const void* header, size_t header_bytes, void*, size_t data_bytes,
                       const ucp_am_recv_param_t*) {
  auto* core = static_cast<UcxCore*>(arg);
  AtomicRequest request{};
  if (header_bytes != sizeof request || data_bytes != 0) {
    report_malformed(core, "atomic request", header_bytes, data_bytes);
    return UCS_OK;
  }
  std::memcpy(&request, header, sizeof request);
  core->run_atomic_request(request);
  return UCS_OK;
}

ucs_status_t on_atomic_reply(void* arg, const void* header, size_t header_bytes, void*, size_t data_bytes,
                             const ucp_am_recv_param_t*) {
  auto* core = static_cast<UcxCore*>(arg);
  std::array<uint64_t, 2> fields{};
  if (header_bytes != sizeof fields || data_bytes != 0) {
    report_malformed(core, "atomic reply", header_bytes, data_bytes);
    return UCS_OK;
  }
  std::memcpy(fields.data(), header, sizeof fields);
  core->take_atomic_reply(fields[0], fields[1]);
  return UCS_OK;
}

void set_handler(ucp_worker_h worker, unsigned id, ucp_am_recv_callback_t callback,
                 UcxCore* core) {
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                     UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.id = id;
  param.flags = UCP_AM_FLAG_WHOLE_MSG;
  param.cb = callback;
  param.arg = core;
  const ucs_status_t status = ucp_worker_set_am_recv_handler(worker, &param);
  if (status != UCS_OK) fail_status(Errc::transport, "registering an active-message handler", status);
}

}  // namespace

void UcxCore::create_worker() {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Our own mutex serialises all calls; UCS_THREAD_MODE_MULTI would add a second lock.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h raw_worker = nullptr;
  ucs_status_t status = ucp_worker_create(context.get(), &params, &raw_worker);
  if (status != UCS_OK) fail_status(Errc::transport, "ucp_worker_create", status);
  worker.reset(raw_worker);

  status = ucp_worker_get_efd(worker.get(), &worker_fd);
  if (status != UCS_OK) fail_status(Errc::transport, "ucp_worker_get_efd", status);
  wait_loop.emplace(static_cast<WaitLoop::Hooks&>(*this), worker_fd, wait_tuning(), "ucx");

  ucp_address_t* raw_address = nullptr;
  size_t address_bytes = 0;
  status = ucp_worker_get_address(worker.get(), &raw_address, &address_bytes);
  if (status != UCS_OK) fail_status(Errc::transport, "ucp_worker_get_address", status);
  const auto* first = reinterpret_cast<const std::byte*>(raw_address);
  worker_address.assign(first, first + address_bytes);
  ucp_worker_release_address(worker.get(), raw_address);

  set_handler(worker.get(), am_notify, on_notify, this);
  set_handler(worker.get(), am_write_notify, on_write_notify, this);
  set_handler(worker.get(), am_hello, on_hello, this);
  set_handler(worker.get(), am_kick, on_kick, this);
  set_handler(worker.get(), am_ready, on_ready, this);
  set_handler(worker.get(), am_atomic, on_atomic, this);
  set_handler(worker.get(), am_atomic_reply, on_atomic_reply, this);
}

}  // namespace pcoll::transport::ucx
