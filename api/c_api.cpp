// The C API of include/pcoll/pcoll.h: argument checks, C++ exceptions turned into status
// codes plus a per-thread message, and ownership (handles keep their communicator alive).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <api/foreign_bootstrap.hpp>
#include <api/settings_catalog.hpp>
#include <bootstrap/bootstrap.hpp>
#include <collectives/allreduce.hpp>
#include <collectives/comm.hpp>
#include <collectives/dtype.hpp>
#include <collectives/enum_names.hpp>
#include <collectives/handle_spec.hpp>
#include <collectives/shrink.hpp>
#include <pcoll/pcoll.h>
#include <pcoll/private.h>
#include <registry/registry.hpp>
#include <support/error.hpp>
#include <support/interrupt.hpp>
#include <support/log.hpp>

struct pcoll_comm {
  std::shared_ptr<pcoll::Comm> comm;
};

struct pcoll_allreduce {
  std::shared_ptr<pcoll::Comm> comm;
  std::unique_ptr<pcoll::Allreduce> handle;
  pcoll::RoundInfo info;  // backs pcoll_round_info_t::fresh_mask until the next call
  mutable pcoll::AllreduceStats stats;  // backs pcoll_allreduce_stats_t's arrays until the next call
};

namespace {

thread_local std::string t_last_error;  // documented per-thread state of pcoll_last_error()

int set_error(int status, const std::string& message) {
  t_last_error = message;
  return status;
}

// Runs `body`, mapping exceptions to a status and the thread's last error.
template <typename Body>
int guarded(const char* function, Body&& body) {
  try {
    body();
    return PCOLL_SUCCESS;
  } catch (const pcoll::Error& error) {
    return set_error(static_cast<int>(error.code()), std::string(function) + ": " + error.what());
  } catch (const std::bad_alloc&) {
    return set_error(PCOLL_ERR_NO_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& error) {
    return set_error(PCOLL_ERR_INTERNAL, std::string(function) + ": " + error.what());
  }
}

void export_info(const pcoll::RoundInfo& in, pcoll_round_info_t* out) {
  if (out == nullptr) return;
  out->round = in.round;
  out->initiator = in.initiator;
  out->fresh = in.fresh;
  out->caller_late = in.caller_late ? 1 : 0;
  out->fresh_mask = in.fresh_mask.data();
}

void require(bool ok, const std::string& message) {
  if (!ok) pcoll::invalid_argument(message);
}

// The integer an enum argument holds. FFI callers can pass any int; loading an
// out-of-range value through the enum type is undefined in C++, copying its bytes is not.
template <typename Enum>
int raw_value(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw = 0;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

}  // namespace

namespace pcoll {
namespace {

// pcoll_init() and pcoll_private_init_with_bootstrap(): a communicator over `boot`, its
// transport chosen by the provider registry.
int init_with_bootstrap(std::unique_ptr<bootstrap::Bootstrap> boot, pcoll_comm_t** comm) {
  return guarded("pcoll_init", [&] {
    require(comm != nullptr, "comm is NULL");
    *comm = nullptr;
    auto made = std::make_unique<pcoll_comm>();
    // A typo such as PCOLL_TIMEOUT would otherwise go unnoticed; only this layer sees every
    // component's rows.
    log::set_rank(boot->rank());
    settings::warn_unknown_variables(settings::catalog());
    made->comm = std::make_shared<Comm>(
        std::move(boot), [](const transport::Options& options) { return providers::create("", options); });
    *comm = made.release();
  });
}

}  // namespace
}  // namespace pcoll

namespace {

int create_allreduce(const char* function, pcoll_comm_t* comm, const pcoll::CreateRequest& request,
                     pcoll_allreduce_t** handle) {
  return guarded(function, [&] {
    require(comm != nullptr, "comm is NULL");
    if (handle != nullptr) *handle = nullptr;
    // A bad argument does not return early: the collective creation reports the first bad
    // argument of any rank on every rank (a rank that returned alone would leave the
    // others waiting for it).
    std::string problem;
    const pcoll::HandleSpec spec = pcoll::make_spec(request, comm->comm->size(), comm->comm->timeout(), problem);
    comm->comm->check_failed();
    auto made = std::make_unique<pcoll_allreduce>();
    made->comm = comm->comm;
    made->handle = std::make_unique<pcoll::Allreduce>(*comm->comm, spec, problem);
    *handle = made.release();
  });
}

// pcoll_*_from_name: the value of `name` in `table`, or an error naming the accepted ones.
template <typename Enum>
int enum_from_name(const char* function, std::span<const pcoll::EnumName> table, const char* kind,
                   const char* name, Enum* value) {
  return guarded(function, [&] {
    require(value != nullptr, "value is NULL");
    require(name != nullptr, std::string(kind) + " name is NULL");
    const auto found = pcoll::value_of(table, name);
    require(found.has_value(), std::string(kind) + " '" + name + "' is not one of " + pcoll::name_list(table));
    *value = static_cast<Enum>(*found);
  });
}

}  // namespace

extern "C" {

void pcoll_allreduce_opts_init(pcoll_allreduce_opts_t* opts) {
  if (opts == nullptr) return;
  opts->late = PCOLL_LATE_CARRY;
  opts->max_lag = 1;
  opts->sync_every = 0;
  opts->seed = 0x70636f6c6cULL;
  opts->timeout_ms = 0;  // 0: PCOLL_TIMEOUT_MS or 30000, resolved at creation
  opts->quorum = 0;      // 0: floor(P/2) + 1, resolved at creation
  opts->grace_us = 0;
  opts->elastic = 0;
}

int pcoll_init(pcoll_comm_t** comm) {
  std::unique_ptr<pcoll::bootstrap::Bootstrap> boot;
  const int status = guarded("pcoll_init", [&] {
    require(comm != nullptr, "comm is NULL");
    boot = pcoll::bootstrap::from_environment();
  });
  if (status != PCOLL_SUCCESS) return status;
  return pcoll::init_with_bootstrap(std::move(boot), comm);
}

int pcoll_private_init_with_bootstrap(const pcoll_private_bootstrap_t* callbacks, pcoll_comm_t** comm) {
  std::unique_ptr<pcoll::bootstrap::Bootstrap> boot;
  const int status = guarded("pcoll_init", [&] {
    require(callbacks != nullptr, "bootstrap callbacks are NULL");
    try {
      boot = pcoll::bootstrap::make_foreign(*callbacks);
    } catch (...) {
      if (callbacks->destroy != nullptr) callbacks->destroy(callbacks->context);
      throw;
    }
  });
  if (status != PCOLL_SUCCESS) return status;
  return pcoll::init_with_bootstrap(std::move(boot), comm);
}

int pcoll_private_set_error(int status, const char* message) {
  return set_error(status, message != nullptr ? message : "");
}

void pcoll_private_set_interrupt_check(int (*check)(void)) { pcoll::interrupt::set_check(check); }

int pcoll_private_comm_abandon(pcoll_comm_t* comm, const char* reason) {
  return guarded("pcoll_private_comm_abandon", [&] {
    require(comm != nullptr, "comm is NULL");
    pcoll::Comm& c = *comm->comm;
    std::lock_guard lock(c.engine_mutex());
    c.mark_failed(c.rank(), "rank " + std::to_string(c.rank()) + " left the job without closing its communicator" +
                                (reason != nullptr && *reason != '\0' ? std::string(" (") + reason + ")" : ""));
  });
}

int pcoll_comm_rank(const pcoll_comm_t* comm) { return comm == nullptr ? -1 : comm->comm->rank(); }
int pcoll_comm_size(const pcoll_comm_t* comm) { return comm == nullptr ? -1 : comm->comm->size(); }

const char* pcoll_comm_provider(const pcoll_comm_t* comm) {
  return comm == nullptr ? "" : comm->comm->provider().c_str();
}

const char* pcoll_comm_bootstrap(const pcoll_comm_t* comm) {
  return comm == nullptr ? "" : comm->comm->bootstrap_name().c_str();
}

int pcoll_comm_failed_ranks(const pcoll_comm_t* comm, int* ranks, int max, int* n) {
  return guarded("pcoll_comm_failed_ranks", [&] {
    require(comm != nullptr, "comm is NULL");
    require(n != nullptr, "n is NULL");
    require(max >= 0, "max is " + std::to_string(max) + "; it must be >= 0");
    require(ranks != nullptr || max == 0, "ranks is NULL and max is " + std::to_string(max));
    const std::vector<int> failed = comm->comm->failed_ranks();
    std::copy_n(failed.begin(), std::min(failed.size(), static_cast<size_t>(max)), ranks);
    *n = static_cast<int>(failed.size());
  });
}

int pcoll_comm_shrink(pcoll_comm_t* comm, pcoll_comm_t** survivors) {
  return guarded("pcoll_comm_shrink", [&] {
    require(comm != nullptr, "comm is NULL");
    require(survivors != nullptr, "survivors is NULL");
    *survivors = nullptr;
    auto made = std::make_unique<pcoll_comm>();
    made->comm = pcoll::shrink(*comm->comm);
    *survivors = made.release();
  });
}

int pcoll_allreduce_resume(pcoll_allreduce_t* old_handle, pcoll_comm_t* survivors, void* recvbuf, int* delivered,
                           pcoll_round_info_t* info, pcoll_allreduce_t** resumed) {
  return guarded("pcoll_allreduce_resume", [&] {
    require(old_handle != nullptr, "old_handle is NULL");
    require(survivors != nullptr, "survivors is NULL");
    require(delivered != nullptr, "delivered is NULL");
    require(resumed != nullptr, "resumed is NULL");
    *resumed = nullptr;
    *delivered = 0;
    auto made = std::make_unique<pcoll_allreduce>();
    made->comm = survivors->comm;
    pcoll::Allreduce::Resumed out = pcoll::Allreduce::resume(*old_handle->handle, *survivors->comm, recvbuf);
    made->handle = std::move(out.handle);
    made->info = std::move(out.info);
    *delivered = out.delivered ? 1 : 0;
    if (out.delivered) export_info(made->info, info);
    // The old handle goes; its memory stays registered with its failed communicator until
    // that is finalized (Comm::release_region).
    delete old_handle;
    *resumed = made.release();
  });
}

int pcoll_comm_grow(pcoll_comm_t* comm, pcoll_comm_t** grown) {
  return guarded("pcoll_comm_grow", [&] {
    require(comm != nullptr, "comm is NULL");
    require(grown != nullptr, "grown is NULL");
    *grown = nullptr;
    pcoll::fail(pcoll::Errc::unsupported,
                "admitting new ranks into a communicator is not built yet; a communicator keeps the ranks it "
                "started with (docs/reliability.md, \"Known limits\")");
  });
}

int pcoll_barrier(pcoll_comm_t* comm) {
  return guarded("pcoll_barrier", [&] {
    require(comm != nullptr, "comm is NULL");
    comm->comm->check_failed();
    comm->comm->barrier(pcoll::CallHeader{pcoll::CallKind::barrier}, comm->comm->timeout());
  });
}

int pcoll_finalize(pcoll_comm_t* comm) {
  std::unique_ptr<pcoll_comm> owned(comm);
  return guarded("pcoll_finalize", [&] {
    require(comm != nullptr, "comm is NULL");
    // Nobody tears down its endpoint while a peer may still be talking to it.
    owned->comm->begin_leaving();
    if (!owned->comm->failed()) owned->comm->barrier(pcoll::CallHeader{pcoll::CallKind::finalize}, owned->comm->timeout());
    // A communicator that failed before (a peer, a mismatch another rank reported) still
    // goes, and its failure is returned: finalize is a collective call like the others.
    std::optional<pcoll::Error> failure;
    try {
      owned->comm->check_failed();
    } catch (const pcoll::Error& error) {
      failure = error;
    }
    owned.reset();
    if (failure) throw *failure;
  });
}


int pcoll_allreduce_create(pcoll_comm_t* comm, size_t count, pcoll_dtype_t dtype, pcoll_op_t op,
                           pcoll_mode_t mode, const pcoll_allreduce_opts_t* opts,
                           pcoll_allreduce_t** handle) {
  pcoll::CreateRequest request;
  request.count = count;
  request.dtype = raw_value(dtype);
  request.op = raw_value(op);
  request.mode = raw_value(mode);
  request.opts = opts;
  request.handle_given = handle != nullptr;
  return create_allreduce("pcoll_allreduce_create", comm, request, handle);
}

int pcoll_private_allreduce_create_refused(pcoll_comm_t* comm, size_t count, const char* invalid_here,
                                           pcoll_allreduce_t** handle) {
  pcoll::CreateRequest request;
  request.count = count;
  request.handle_given = handle != nullptr;
  request.refused = invalid_here != nullptr && *invalid_here != '\0' ? invalid_here : "an argument was refused";
  return create_allreduce("pcoll_allreduce_create", comm, request, handle);
}

int pcoll_allreduce_start(pcoll_allreduce_t* h, const void* sendbuf, void* recvbuf) {
  return guarded("pcoll_allreduce_start", [&] {
    require(h != nullptr, "handle is NULL");
    h->handle->start(sendbuf, recvbuf);
  });
}

int pcoll_allreduce_test(pcoll_allreduce_t* h, int* done, pcoll_round_info_t* info) {
  return guarded("pcoll_allreduce_test", [&] {
    require(h != nullptr, "handle is NULL");
    require(done != nullptr, "done is NULL");
    *done = h->handle->test(&h->info) ? 1 : 0;
    if (*done) export_info(h->info, info);
  });
}

int pcoll_allreduce_wait(pcoll_allreduce_t* h, pcoll_round_info_t* info) {
  return guarded("pcoll_allreduce_wait", [&] {
    require(h != nullptr, "handle is NULL");
    h->handle->wait(&h->info);
    export_info(h->info, info);
  });
}

int pcoll_allreduce_run(pcoll_allreduce_t* h, const void* sendbuf, void* recvbuf,
                        pcoll_round_info_t* info) {
  return guarded("pcoll_allreduce_run", [&] {
    require(h != nullptr, "handle is NULL");
    h->handle->start(sendbuf, recvbuf);
    h->handle->wait(&h->info);
    export_info(h->info, info);
  });
}

int pcoll_allreduce_timedwait(pcoll_allreduce_t* h, uint64_t timeout_us, int* done, pcoll_round_info_t* info) {
  return guarded("pcoll_allreduce_timedwait", [&] {
    require(h != nullptr, "handle is NULL");
    require(done != nullptr, "done is NULL");
    *done = 0;
    // Beyond a day a deadline is as good as none, and the clock arithmetic stays in range.
    const auto timeout = std::chrono::microseconds(std::min<uint64_t>(timeout_us, uint64_t{86400} * 1000000));
    *done = h->handle->wait_until(&h->info, std::chrono::steady_clock::now() + timeout) ? 1 : 0;
    if (*done) export_info(h->info, info);
  });
}

int pcoll_allreduce_flush(pcoll_allreduce_t* h, void* recvbuf, pcoll_round_info_t* info) {
  return guarded("pcoll_allreduce_flush", [&] {
    require(h != nullptr, "handle is NULL");
    h->handle->flush(recvbuf, &h->info);
    export_info(h->info, info);
  });
}

int pcoll_allreduce_destroy(pcoll_allreduce_t* h) {
  std::unique_ptr<pcoll_allreduce> owned(h);
  return guarded("pcoll_allreduce_destroy", [&] {
    require(h != nullptr, "handle is NULL");
    owned->handle->destroy();
  });
}

int pcoll_allreduce_stats(const pcoll_allreduce_t* h, pcoll_allreduce_stats_t* stats) {
  return guarded("pcoll_allreduce_stats", [&] {
    require(h != nullptr, "handle is NULL");
    require(stats != nullptr, "stats is NULL");
    require(stats->size >= offsetof(pcoll_allreduce_stats_t, nranks) + sizeof(int),
            "stats->size is " + std::to_string(stats->size) +
                "; set it to sizeof(pcoll_allreduce_stats_t) before the call");
    // The arrays are the handle's, like fresh_mask: valid until the next call on it.
    auto& kept = h->stats;
    h->handle->stats(kept);
    pcoll_allreduce_stats_t all{};
    all.nranks = static_cast<int>(kept.fresh_rounds.size());
    all.rounds = kept.rounds;
    all.flushes = kept.flushes;
    all.flushes_carried = kept.flushes_carried;
    all.rounds_initiated = kept.rounds_initiated;
    all.rounds_while_computing = kept.rounds_while_computing;
    all.blocked_ns = kept.blocked_ns;
    all.bytes_written = kept.bytes_written;
    all.memory_bytes = kept.memory_bytes;
    all.registered_bytes = kept.registered_bytes;
    all.fresh_rounds = kept.fresh_rounds.data();
    all.late_rounds = kept.late_rounds.data();
    all.longest_late_run = kept.longest_late_run.data();
    all.fresh_histogram = kept.fresh_histogram.data();
    all.plan = h->handle->plan_name();
    all.bytes_read = kept.bytes_read;
    all.bytes_network = kept.bytes_network;
    all.messages_network = kept.messages_network;
    all.memory_traffic_bytes = kept.memory_traffic_bytes;
    // A caller built against an older, shorter struct gets the fields it knows.
    all.size = std::min(stats->size, sizeof all);
    std::memcpy(stats, &all, all.size);
  });
}

int pcoll_allreduce_majority_initiator(const pcoll_allreduce_t* h, uint64_t round) {
  int initiator = -1;
  const int status = guarded("pcoll_allreduce_majority_initiator", [&] {
    require(h != nullptr, "handle is NULL");
    initiator = h->handle->majority_initiator(round);
  });
  return status == PCOLL_SUCCESS ? initiator : -1;
}

const char* pcoll_dtype_name(pcoll_dtype_t dtype) { return pcoll::name_of(pcoll::dtype_names(), raw_value(dtype)); }
const char* pcoll_op_name(pcoll_op_t op) { return pcoll::name_of(pcoll::op_names(), raw_value(op)); }
const char* pcoll_mode_name(pcoll_mode_t mode) { return pcoll::name_of(pcoll::mode_names(), raw_value(mode)); }
const char* pcoll_late_name(pcoll_late_t late) { return pcoll::name_of(pcoll::late_names(), raw_value(late)); }

int pcoll_dtype_from_name(const char* name, pcoll_dtype_t* value) {
  return enum_from_name("pcoll_dtype_from_name", pcoll::dtype_names(), "dtype", name, value);
}
int pcoll_op_from_name(const char* name, pcoll_op_t* value) {
  return enum_from_name("pcoll_op_from_name", pcoll::op_names(), "op", name, value);
}
int pcoll_mode_from_name(const char* name, pcoll_mode_t* value) {
  return enum_from_name("pcoll_mode_from_name", pcoll::mode_names(), "mode", name, value);
}
int pcoll_late_from_name(const char* name, pcoll_late_t* value) {
  return enum_from_name("pcoll_late_from_name", pcoll::late_names(), "late", name, value);
}

size_t pcoll_dtype_size(pcoll_dtype_t dtype) {
  return pcoll::name_of(pcoll::dtype_names(), raw_value(dtype)) != nullptr ? pcoll::element_bytes(dtype) : 0;
}

const char* pcoll_strerror(int status) {
  if (status < 0 || status > PCOLL_ERR_INTERNAL) return "unknown pcoll status";
  return pcoll::errc_name(static_cast<pcoll::Errc>(status));
}

const char* pcoll_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
