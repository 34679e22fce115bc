// Creation arguments: checks, settings, signature and the collective agreement of a handle
// (handle_spec.hpp).
#include <collectives/handle_spec.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include <collectives/agreement.hpp>
#include <collectives/collectives_settings.hpp>
#include <collectives/comm.hpp>
#include <collectives/enum_names.hpp>
#include <collectives/mode_table.hpp>
#include <support/error.hpp>
#include <support/support_settings.hpp>

namespace pcoll {
namespace {

constexpr size_t kMaxCount = size_t{1} << 40;
constexpr uint32_t kMaxLag = 64;

// A rank's handle description at creation: its local outcome (0 or an Errc), the
// signature, then its registration key (or, on failure, the reason).
constexpr size_t kDescriptionBytes = sizeof(int32_t) + sizeof(Signature);

// The settings a handle depends on, read from the environment; a bad one is a problem.
void read_settings(HandleSpec& spec, const std::function<void(bool, const std::string&)>& check) {
  try {
    if (spec.opts.timeout_ms == 0) spec.opts.timeout_ms = static_cast<uint32_t>(SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
    spec.chunk_bytes = CollectivesSettings::get_unsigned("PCOLL_CHUNK_BYTES");
    spec.pool_bytes = CollectivesSettings::get_unsigned("PCOLL_POOL_BYTES");
    if (spec.pool_bytes < 2 * spec.chunk_bytes)
      invalid_argument("PCOLL_POOL_BYTES=" + std::to_string(spec.pool_bytes) + " holds less than two chunks of "
                       "PCOLL_CHUNK_BYTES=" + std::to_string(spec.chunk_bytes) + "; raise it or lower PCOLL_CHUNK_BYTES");
    spec.plan_rules = plan_rules_from_settings();
    spec.flat_plan = CollectivesSettings::get_choice("PCOLL_PLAN") == "flat";
    spec.kill_at_write = CollectivesSettings::get_unsigned("PCOLL_TEST_KILL_AT_WRITE");
    if (const auto dir = CollectivesSettings::get_text("PCOLL_TRACE")) {
      std::error_code error;
      if (!std::filesystem::is_directory(*dir, error) || ::access(dir->c_str(), W_OK) != 0)
        invalid_argument("PCOLL_TRACE=" + *dir + " is not a directory this process can write to; "
                         "create it or unset PCOLL_TRACE");
      spec.trace_dir = *dir;
      spec.trace_clock_skew_ns = static_cast<int64_t>(CollectivesSettings::get_unsigned("PCOLL_TEST_CLOCK_SKEW_MS")) * 1000000;
    }
  } catch (const Error& e) {
    check(false, e.what());
  }
}

}  // namespace

HandleSpec make_spec(const CreateRequest& request, int ranks, std::chrono::milliseconds comm_timeout,
                     std::string& problem) {
  problem = request.refused;
  const auto check = [&](bool ok, const std::string& message) {
    if (!ok && problem.empty()) problem = message;
  };
  check(request.handle_given, "handle is NULL");
  const ModeRow* mode = find_mode(request.mode);
  check(mode != nullptr, "mode " + std::to_string(request.mode) + " is not a pcoll_mode_t (" +
                             name_list(mode_names()) + ")");
  const bool dtype_ok = name_of(dtype_names(), request.dtype) != nullptr;
  check(dtype_ok, "dtype " + std::to_string(request.dtype) + " is not a pcoll_dtype_t (PCOLL_FLOAT32 .. PCOLL_FLOAT16)");
  const bool op_ok = name_of(op_names(), request.op) != nullptr;
  check(op_ok, "op " + std::to_string(request.op) + " is not PCOLL_OP_SUM, _AVG, _MIN or _MAX");

  HandleSpec spec;
  spec.count = request.count;
  // Bad enums become defaults: the spec stays one the engine can prepare, and the problem
  // is what every rank reports.
  spec.dtype = dtype_ok ? static_cast<pcoll_dtype_t>(request.dtype) : PCOLL_FLOAT32;
  spec.op = op_ok ? static_cast<pcoll_op_t>(request.op) : PCOLL_OP_SUM;
  if (mode == nullptr) mode = &mode_table().front();
  spec.mode = mode->mode;
  pcoll_allreduce_opts_init(&spec.opts);
  if (request.opts != nullptr) {
    int late = 0;
    std::memcpy(&late, &request.opts->late, sizeof late);  // any int an FFI caller passed
    const bool late_ok = name_of(late_names(), late) != nullptr;
    check(late_ok, "opts.late = " + std::to_string(late) + " is not PCOLL_LATE_CARRY or PCOLL_LATE_DROP");
    if (late_ok) spec.opts = *request.opts;
  }
  check(spec.opts.elastic <= 1, "opts.elastic = " + std::to_string(spec.opts.elastic) +
                                    " is neither 0 nor 1 (1: the handle can be resumed after a failure)");
  check(spec.opts.max_lag <= kMaxLag, "opts.max_lag = " + std::to_string(spec.opts.max_lag) +
                                          " is above 64 (each unit of lag buffers one result)");
  const std::string mode_problem = mode->check_options(spec.opts, ranks);
  check(mode_problem.empty(), mode_problem);
  check(request.count <= kMaxCount, "count " + std::to_string(request.count) +
                                        " is above 2^40 elements, the largest vector a handle takes");
  read_settings(spec, check);
  if (spec.opts.timeout_ms == 0) spec.opts.timeout_ms = static_cast<uint32_t>(comm_timeout.count());
  return spec;
}

Signature signature_of(const HandleSpec& spec, uint32_t handle) {
  return Signature{spec.count, static_cast<uint64_t>(spec.dtype), static_cast<uint64_t>(spec.op),
                   static_cast<uint64_t>(spec.mode), static_cast<uint64_t>(spec.opts.late), spec.opts.max_lag,
                   spec.opts.sync_every, spec.opts.seed, spec.opts.quorum, spec.opts.grace_us, spec.chunk_bytes,
                   spec.pool_bytes, plan_rules_digest(spec.plan_rules), handle, spec.trace_dir.empty() ? 0u : 1u, spec.flat_plan ? 1u : 0u,
                   spec.opts.elastic, 0};
}

std::string describe(const Signature& s) {
  const auto name = [](std::span<const EnumName> table, uint64_t value) {
    const char* found = name_of(table, static_cast<int>(value));
    return found != nullptr ? std::string(found) : std::to_string(value);
  };
  return "count=" + std::to_string(s.count) + " dtype=" + name(dtype_names(), s.dtype) + " op=" +
         name(op_names(), s.op) + " mode=" + name(mode_names(), s.mode) + " late=" + name(late_names(), s.late) +
         " max_lag=" + std::to_string(s.max_lag) + " sync_every=" + std::to_string(s.sync_every) +
         " seed=" + std::to_string(s.seed) + " quorum=" + std::to_string(s.quorum) +
         " grace_us=" + std::to_string(s.grace_us) + " chunk_bytes=" + std::to_string(s.chunk_bytes) +
         " pool_bytes=" + std::to_string(s.pool_bytes) + " plan_rules=#" + std::to_string(s.plan_rules) + " (PCOLL_PLAN_RULES, PCOLL_RD_MAX_BYTES)" +
         " handle=" + std::to_string(s.handle) + " traced=" + std::to_string(s.traced) + " (PCOLL_TRACE) plan=" +
         (s.flat_plan ? "flat" : "auto") + " (PCOLL_PLAN) elastic=" + std::to_string(s.elastic) + " direct=" + std::to_string(s.direct) +
         " (1: every peer's memory maps here)";
}

std::vector<transport::Bytes> agree_creation(Comm& comm, const CreationOffer& mine, std::chrono::milliseconds timeout) {
  const std::string_view reason = mine.status == 0 ? std::string_view{} : std::string_view{mine.problem};
  const size_t payload = mine.status == 0 ? mine.key.size() : std::min(reason.size(), kAgreementBlobBytes - kDescriptionBytes);
  if (mine.status == 0 && kDescriptionBytes + payload > kAgreementBlobBytes)
    fail(Errc::unsupported, "this provider's registration key (" + std::to_string(mine.key.size()) +
                                " bytes) does not fit a handle description");
  std::vector<std::byte> blob(kDescriptionBytes + payload);
  const auto status32 = static_cast<int32_t>(mine.status);
  std::memcpy(blob.data(), &status32, sizeof status32);
  std::memcpy(blob.data() + sizeof(int32_t), &mine.signature, sizeof mine.signature);
  if (mine.status == 0) std::memcpy(blob.data() + kDescriptionBytes, mine.key.data(), payload);
  else std::memcpy(blob.data() + kDescriptionBytes, reason.data(), payload);
  const std::vector<std::vector<std::byte>> all =
      comm.agree(CallHeader{CallKind::create, 0, mine.signature.handle, 0}, blob, timeout);

  // Every rank reads the same blobs in the same order, so every rank reports the same error.
  for (size_t r = 0; r < all.size(); ++r) {
    const auto& theirs = all[r];
    if (theirs.size() < kDescriptionBytes)
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent a malformed handle description");
    int32_t status = 0;
    std::memcpy(&status, theirs.data(), sizeof status);
    if (status == 0) continue;
    const Errc code = status > 0 && status <= static_cast<int>(Errc::internal) ? static_cast<Errc>(status) : Errc::protocol;
    fail(code, "rank " + std::to_string(r) + ": " +
                   std::string(reinterpret_cast<const char*>(theirs.data()) + kDescriptionBytes,
                               theirs.size() - kDescriptionBytes));
  }
  const auto signature = [&](size_t r) {
    Signature s{};
    std::memcpy(&s, all[r].data() + sizeof(int32_t), sizeof s);
    return s;
  };
  const Signature first = signature(0);
  for (size_t r = 1; r < all.size(); ++r) {
    if (signature(r) == first) continue;
    fail(Errc::mismatch, "rank " + std::to_string(r) + " created the allreduce with " + describe(signature(r)) +
                             " but rank 0 with " + describe(first) + "; every rank must pass the same arguments");
  }
  std::vector<transport::Bytes> keys(all.size());
  for (size_t r = 0; r < all.size(); ++r) keys[r].assign(all[r].begin() + kDescriptionBytes, all[r].end());
  return keys;
}

}  // namespace pcoll
