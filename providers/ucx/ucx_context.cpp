// UCX provider entry point: maps the selector variant ("", "shm", "tcp") to a UCP
// configuration, creates the UCP context and fills in the capabilities.
#include <signal.h>
#include <ucs/debug/debug.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <support/env.hpp>
#include <support/log.hpp>
#include <support/topology.hpp>
#include <ucx/ucx_settings.hpp>
#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

namespace {

struct VariantConfig {
  const char* tls;          // UCX_TLS for this variant; nullptr keeps the user's UCX_TLS
  std::string description;  // Capabilities::provider
  // Same-host peers may take the mailbox: every selector but one that names a network
  // transport, whose suites must test that transport for every peer.
  bool mailbox;
};

VariantConfig variant_config(const std::string& variant) {
  // cma joins posix/sysv so that memory the caller registers (not allocated by UCX, so not
  // in a shared segment) still gets zero-copy one-sided puts and large-message rendezvous.
  if (variant == "shm") return {"posix,sysv,cma,self", "posix,sysv,cma,self", true};
  if (variant == "tcp") return {"tcp,self", "tcp,self", false};
  if (variant.empty()) {
    const auto user_tls = env::get("UCX_TLS");
    return {nullptr, user_tls.value_or("all"), true};
  }
  invalid_argument("PCOLL_PROVIDER='ucx:" + variant +
                   "' is not a UCX variant; use ucx (UCX_TLS decides), ucx:shm or ucx:tcp");
}

void modify(ucp_config_t* config, const char* name, const char* value) {
  const ucs_status_t status = ucp_config_modify(config, name, value);
  if (status != UCS_OK)
    fail_status(Errc::transport, std::string("setting UCX_") + name + "=" + value, status);
}

// Sets UCX_<name> unless the user already set it in the environment.
void default_to(ucp_config_t* config, const char* name, const char* value) {
  const std::string env_name = std::string("UCX_") + name;
  if (!std::getenv(env_name.c_str())) modify(config, name, value);
}

}  // namespace

[[noreturn]] void fail_status(Errc code, const std::string& what, ucs_status_t status) {
  fail(code, "ucx: " + what + ": " + ucs_status_string(status));
}

[[noreturn]] void fail_peer_status(Errc code, int peer_rank, const std::string& what,
                                   ucs_status_t status) {
  fail_peer(code, peer_rank, "ucx: " + what + ": " + ucs_status_string(status));
}

Errc errc_for_peer_status(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
      return Errc::peer_failed;
    default:
      return Errc::transport;
  }
}

// From the moment libucs is loaded (whatever provider the job then uses) it catches SIGHUP,
// UCX_DEBUG_SIGNO's default, to print debug state: a rank given SIGHUP by its launcher or a
// closing terminal ran on instead of stopping. Unless the user asked for that signal, HUP
// gets its previous handler back (the default: terminate) when pcoll is loaded.
[[maybe_unused]] const bool kHangupReleased = [] {
  if (std::getenv("UCX_DEBUG_SIGNO") == nullptr) ucs_debug_disable_signal(SIGHUP);
  return true;
}();

void UcxCore::create_context() {
  const VariantConfig vc = variant_config(variant);

  ucp_config_t* raw_config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &raw_config);
  if (status != UCS_OK) fail_status(Errc::transport, "reading the UCX configuration", status);
  ConfigPtr config(raw_config);

  if (vc.tls) modify(config.get(), "TLS", vc.tls);
  mailbox_wanted = vc.mailbox;
  // tcp gives UCP no remote memory access: a put would be UCP's own software protocol
  // (ucx_rma.cpp says why write_notify avoids it).
  software_rma = variant == "tcp";
  if (const auto rank = UcxSettings::raw("PCOLL_TEST_UCX_UNMAPPED_RANK"))
    unmapped_rank = static_cast<int>(UcxSettings::parse_unsigned("PCOLL_TEST_UCX_UNMAPPED_RANK", *rank));
  // The NIC closest to this process (hwloc) or PCOLL_NIC, unless the user set UCX_NET_DEVICES.
  const std::string nic = std::getenv("UCX_NET_DEVICES") ? "" : topology::ucx_net_devices(variant);
  if (!nic.empty()) modify(config.get(), "NET_DEVICES", nic.c_str());
  // posix/sysv only advertise peer-failure handling (keepalive by pid) when asked; without
  // it UCP refuses them for endpoints in UCP_ERR_HANDLING_MODE_PEER. Set only where they are
  // loaded: UCX warns about settings nothing consumed.
  if (variant != "tcp") default_to(config.get(), "MM_ERROR_HANDLING", "y");
  // UCX's default keepalive round (20 s) would find a dead peer only after our 30 s
  // operation timeout; a 1 s round costs one tiny message per peer per second.
  default_to(config.get(), "KEEPALIVE_INTERVAL", "1s");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  params.name = "pcoll";

  ucp_context_h raw_context = nullptr;
  status = ucp_init(&params, config.get(), &raw_context);
  if (status != UCS_OK)
    fail_status(Errc::unsupported,
                "ucp_init for PCOLL_PROVIDER=ucx" + (variant.empty() ? "" : ":" + variant) +
                    " (UCX_TLS=" + vc.description + "; check `ucx_info -d`)",
                status);
  context.reset(raw_context);

  caps.name = variant.empty() ? "ucx" : "ucx:" + variant;
  caps.provider = vc.description;
  caps.domain = variant == "shm" ? "memory" : !nic.empty() ? nic : env::get("UCX_NET_DEVICES").value_or("all");
  caps.inject_bytes = kInjectBytes;
  caps.max_write_bytes = size_t{1} << 30;  // UCP fragments internally; keep single ops bounded
  caps.max_atomic_count = 1;
  caps.notify_bits = 64;
  // On shm, writes and atomics on allocate()d memory are CPU copies and CPU atomics on the
  // shared segment: truly one-sided. tcp (and whatever UCX picks) runs RMA and atomics at
  // the target in software. Either way notifications are active messages and atomics on
  // register_memory() regions are emulated, both delivered by the target's progress.
  caps.target_progress = variant != "shm";
  // UCP_FEATURE_AMO64 made the context: UCP runs 64-bit atomics on every transport, in
  // software at the target where the hardware has none.
  caps.remote_atomics = true;
  caps.native_atomic_max = false;
  caps.wait_object = true;
}

UcxCore::UcxCore(const std::string& variant_in, const Options& options_in)
    : options(options_in), variant(variant_in) {
  create_context();
  create_worker();
}

UcxCore::~UcxCore() {
  // Explicit order, all under the lock: endpoints first (force close completes their
  // outstanding requests, whose callbacks touch the peers and the send-op pool), then the
  // worker, then the context. Only after that may members the callbacks use go away:
  // implicit member destruction would free the pool and the queues before the worker.
  std::unique_lock lock(mutex);
  mailbox.close();  // its rkeys before the endpoints, its memory before the context
  close_endpoints();
  // UCX 1.13 asserts (self.c "params->memh") when ucp_worker_destroy purges a request that
  // never completed, e.g. an atomic that timed out on a silent peer. Leak the worker and the
  // context in that rare case rather than abort the process.
  const bool stuck = std::any_of(abandoned_ops.begin(), abandoned_ops.end(),
                                 [](const std::unique_ptr<BlockingOp>& op) { return !op->done; });
  if (stuck) {
    log::debug("ucx: leaking the UCP worker: an operation that timed out is still pending");
    (void)worker.release();
    (void)context.release();
    return;
  }
  worker.reset();
  context.reset();
}

UcxTransport::UcxTransport(const std::string& variant, const Options& options)
    : core_(std::make_shared<UcxCore>(variant, options)) {}

UcxTransport::~UcxTransport() {
  // Best effort: let posted operations reach their targets before the endpoints close, but
  // never hang on a dead peer.
  try {
    if (core_->my_rank >= 0 && !abandoned_)
      flush_within(std::min(core_->options.timeout, std::chrono::milliseconds(2000)));
  } catch (const Error& e) {
    log::debug(std::string("ucx: flush at shutdown: ") + e.what());
  }
}

namespace {
std::unique_ptr<Transport> create_ucx(const std::string& variant, const Options& options) {
  return std::make_unique<UcxTransport>(variant, options);
}
}  // namespace

const ProviderDescriptor& descriptor() {
  static const ProviderDescriptor ucx{"ucx", "UCX (UCP): posix/sysv shared memory, tcp, rc/dc/ud",
                                      {"", "shm", "tcp"}, create_ucx};
  return ucx;
}

}  // namespace pcoll::transport::ucx
