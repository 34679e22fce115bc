// The partial allreduce engine: one handle's rounds from activation to result.
//
// Round t's contribution of this rank is carry + sendbuf_t when the application posted
// round t before the engine joined it, else the carry alone (the late sendbuf_t is folded
// into the carry when it arrives). Each contribution is followed by 2P flag elements
// (fresh flags, then initiator flags) that are reduced with the same op as the data, so
// every rank learns who was fresh and who initiated from the result itself, and all
// ranks agree on it without another message.
#include <collectives/allreduce.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include <sched.h>

#include <collectives/activation.hpp>
#include <collectives/comm.hpp>
#include <collectives/dtype.hpp>
#include <collectives/enum_names.hpp>
#include <collectives/reduce_kernels.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {
namespace {

using Clock = std::chrono::steady_clock;

// Flag element value: op(mark, 0) must be the mark and op(0, 0) zero, for every op.
double flag_mark(pcoll_op_t op) { return op == PCOLL_OP_MIN ? -1.0 : 1.0; }

void store_flag(pcoll_dtype_t acc_dtype, std::byte* at, double value) {
  switch (acc_dtype) {
    case PCOLL_FLOAT32: { const float v = static_cast<float>(value); std::memcpy(at, &v, sizeof v); break; }
    case PCOLL_FLOAT64: std::memcpy(at, &value, sizeof value); break;
    case PCOLL_INT32: { const auto v = static_cast<int32_t>(value); std::memcpy(at, &v, sizeof v); break; }
    case PCOLL_INT64: { const auto v = static_cast<int64_t>(value); std::memcpy(at, &v, sizeof v); break; }
    default: fail(Errc::internal, "no flag encoding for the accumulation type");
  }
}

bool load_flag(pcoll_dtype_t acc_dtype, const std::byte* at) {
  switch (acc_dtype) {
    case PCOLL_FLOAT32: { float v; std::memcpy(&v, at, sizeof v); return v != 0.0f; }
    case PCOLL_FLOAT64: { double v; std::memcpy(&v, at, sizeof v); return v != 0.0; }
    case PCOLL_INT32: { int32_t v; std::memcpy(&v, at, sizeof v); return v != 0; }
    case PCOLL_INT64: { int64_t v; std::memcpy(&v, at, sizeof v); return v != 0; }
    default: return false;
  }
}

// Carries accumulate sums for avg: the division by P happens once, in the result.
pcoll_op_t carry_op(pcoll_op_t op) { return op == PCOLL_OP_AVG ? PCOLL_OP_SUM : op; }

bool overlap(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return bytes != 0 && x < y + bytes && y < x + bytes;
}

// Elements converted at a time when a result is handed over in place.
constexpr size_t kScratchElems = 16384;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The configuration every rank must agree on, as compared at creation.
struct Signature {
  uint64_t count, dtype, op, mode, late, max_lag, sync_every, seed, quorum, grace_us, chunk_bytes, pool_bytes,
      rd_max_bytes, handle, traced;
  bool operator==(const Signature&) const = default;
};
// A rank's handle description at creation: its local outcome (0 or an Errc), the
// signature, then its registration key (or, on failure, the reason).
constexpr size_t kDescriptionBytes = sizeof(int32_t) + sizeof(Signature);

std::chrono::milliseconds timeout_for(const AllreduceConfig& config) {
  return std::chrono::milliseconds(config.opts.timeout_ms);
}

std::string describe(const Signature& s) {
  return "count=" + std::to_string(s.count) + " dtype=" +
         dtype_name(static_cast<pcoll_dtype_t>(s.dtype)) + " op=" +
         op_name(static_cast<pcoll_op_t>(s.op)) + " mode=" + std::to_string(s.mode) +
         " late=" + std::to_string(s.late) + " max_lag=" + std::to_string(s.max_lag) +
         " sync_every=" + std::to_string(s.sync_every) + " seed=" + std::to_string(s.seed) +
         " quorum=" + std::to_string(s.quorum) + " grace_us=" + std::to_string(s.grace_us) +
         " chunk_bytes=" + std::to_string(s.chunk_bytes) + " pool_bytes=" + std::to_string(s.pool_bytes) +
         " rd_max_bytes=" + std::to_string(s.rd_max_bytes) + " handle=" + std::to_string(s.handle) +
         " traced=" + std::to_string(s.traced) + " (PCOLL_TRACE)";
}

}  // namespace

Allreduce::Allreduce(Comm& comm, const AllreduceConfig& config, const std::string& invalid_argument_here)
    : comm_(comm), transport_(comm.transport()), codec_(comm.codec()), config_(config),
      region_(nullptr, RegionRelease{&comm}) {
  rank_ = comm.rank();
  size_ = comm.size();
  // Everything that can fail on one rank alone is settled before the collective part and
  // its outcome travels with this rank's description: a bad argument or a failed
  // allocation on any rank becomes the same error on every rank, never a rank that returns
  // while the others wait for it.
  int status = 0;
  std::string problem = invalid_argument_here;
  if (!problem.empty()) {
    status = static_cast<int>(Errc::invalid_argument);
  } else {
    try {
      prepare();
    } catch (const Error& e) {
      status = static_cast<int>(e.code());
      problem = e.what();
    } catch (const std::bad_alloc&) {
      status = static_cast<int>(Errc::out_of_memory);
      problem = "out of memory for a handle of " + std::to_string(config.count) + " elements";
    }
  }

  {
    std::lock_guard lock(comm.engine_mutex());
    id_ = comm.add_handle(this);
  }
  // Collective part: agree on the outcome and the configuration, and swap registration
  // keys, in one agreement (over the transport: a straggler keeps the others waiting
  // while its engine answers, a dead rank is named within the timeout).
  const Signature mine{config.count, static_cast<uint64_t>(config.dtype),
                       static_cast<uint64_t>(config.op), static_cast<uint64_t>(config.mode),
                       static_cast<uint64_t>(config.opts.late), config.opts.max_lag,
                       config.opts.sync_every, config.opts.seed, config.opts.quorum, config.opts.grace_us,
                       config.chunk_bytes, config.pool_bytes,
                       config.rd_max_bytes, id_, config.trace_dir.empty() ? 0u : 1u};
  const transport::Bytes key = status == 0 ? region_->remote_key() : transport::Bytes{};
  const std::string_view payload_text = status == 0 ? std::string_view{} : std::string_view{problem};
  const size_t payload = status == 0 ? key.size() : std::min(payload_text.size(), kAgreementBlobBytes - kDescriptionBytes);
  std::vector<std::byte> blob(kDescriptionBytes + payload);
  const auto status32 = static_cast<int32_t>(status);
  std::memcpy(blob.data(), &status32, sizeof status32);
  std::memcpy(blob.data() + sizeof(int32_t), &mine, sizeof mine);
  if (status == 0) std::memcpy(blob.data() + kDescriptionBytes, key.data(), payload);
  else std::memcpy(blob.data() + kDescriptionBytes, payload_text.data(), payload);
  std::vector<std::vector<std::byte>> all;
  try {
    if (blob.size() > kAgreementBlobBytes)
      fail(Errc::unsupported, "this provider's registration key (" + std::to_string(key.size()) +
                                  " bytes) does not fit a handle description");
    all = comm.agree(blob, timeout_for(config));
  } catch (...) {
    std::lock_guard lock(comm.engine_mutex());
    comm.remove_handle(id_);
    throw;
  }
  // Every rank reads the same blobs in the same order, so every rank reports the same
  // error: first any rank's local failure (lowest rank first), then the first rank whose
  // arguments differ from rank 0's.
  std::string mismatch;
  Errc agreed_failure = Errc::ok;
  for (int r = 0; r < size_ && agreed_failure == Errc::ok; ++r) {
    const auto& theirs_blob = all[static_cast<size_t>(r)];
    int32_t their_status = 0;
    if (theirs_blob.size() >= kDescriptionBytes) std::memcpy(&their_status, theirs_blob.data(), sizeof their_status);
    if (theirs_blob.size() < kDescriptionBytes) {
      agreed_failure = Errc::protocol;
      mismatch = "rank " + std::to_string(r) + " sent a malformed handle description";
    } else if (their_status != 0) {
      agreed_failure = their_status > 0 && their_status <= static_cast<int>(Errc::internal) ? static_cast<Errc>(their_status)
                                                                                            : Errc::protocol;
      mismatch = "rank " + std::to_string(r) + ": " +
                 std::string(reinterpret_cast<const char*>(theirs_blob.data()) + kDescriptionBytes,
                             theirs_blob.size() - kDescriptionBytes);
    }
  }
  Signature first{};
  if (agreed_failure == Errc::ok) std::memcpy(&first, all[0].data() + sizeof(int32_t), sizeof first);
  for (int r = 1; r < size_ && agreed_failure == Errc::ok; ++r) {
    Signature theirs{};
    std::memcpy(&theirs, all[static_cast<size_t>(r)].data() + sizeof(int32_t), sizeof theirs);
    if (!(theirs == first)) {
      agreed_failure = Errc::mismatch;
      mismatch = "rank " + std::to_string(r) + " created the allreduce with " + describe(theirs) +
                 " but rank 0 with " + describe(first) + "; every rank must pass the same arguments";
    }
  }
  if (agreed_failure != Errc::ok) {
    std::lock_guard lock(comm.engine_mutex());
    comm.remove_handle(id_);
    fail(agreed_failure, mismatch);
  }
  try {
    peers_.resize(size_);
    for (int r = 0; r < size_; ++r) {
      // A failure known here may be a peer that has left, its memory gone: UCX 1.13 crashes
      // unpacking the key of shared memory that no longer exists (docs/reliability.md). A
      // leaving rank waits until every survivor has heard of the failure, so checking before
      // each import leaves no key of a departed rank to unpack but in a window of
      // microseconds.
      comm.check_failed();
      peers_[r] = transport_.import_region(r, std::span<const std::byte>(all[r]).subspan(kDescriptionBytes));
    }
  } catch (const Error& e) {
    // The peers go on with a handle this rank cannot serve: fail the communicator so that
    // they hear of it instead of waiting for this rank's data.
    std::lock_guard lock(comm.engine_mutex());
    comm.remove_handle(id_);
    comm.mark_failed(e.rank(), e.what());
    throw;
  }
  {
    std::lock_guard lock(comm.engine_mutex());
    ++epoch_;
    ready_ = true;
  }
  if (trace_) estimate_clock_offset();
  log::debug("allreduce handle " + std::to_string(id_) + ": " + describe(mine) + ", " +
             algorithm_name(plan_.algorithm) + ", " + std::to_string(plan_.steps.size()) +
             " steps");
}

// The part of construction that involves this rank only: checks, plan, memory.
void Allreduce::prepare() {
  const AllreduceConfig& config = config_;
  check_dtype(config.dtype);
  check_op(config.op);
  acc_dtype_ = accumulation_dtype(config.dtype);
  acc_elem_bytes_ = wire_element_bytes(config.dtype);
  user_elem_bytes_ = element_bytes(config.dtype);
  total_elems_ = config.count + 2 * static_cast<size_t>(size_);
  timeout_ = timeout_for(config);

  // The threshold is about the caller's vector: a 64 KiB gradient stays on recursive
  // doubling at the default, whatever the 2P flag elements add.
  const ReduceAlgorithm algorithm = choose_algorithm(size_, acc_bytes(config.count), config.rd_max_bytes);
  const size_t chunk_elems = chunk_elems_for(total_elems_, config.chunk_bytes, acc_elem_bytes_, codec_.max_chunks());
  // The landing pool of one exchange: PCOLL_POOL_BYTES worth of chunks, at least two.
  const size_t pool_chunks = std::max<size_t>(2, config.pool_bytes / acc_bytes(chunk_elems));
  plan_ = make_plan(algorithm, size_, rank_, total_elems_, chunk_elems, pool_chunks);
  if (plan_.tag_count > codec_.max_tags())
    fail(Errc::unsupported, "a reduction plan over " + std::to_string(size_) + " ranks needs " +
                                std::to_string(plan_.tag_count) + " exchange tags; " + codec_.describe() +
                                " number at most " + std::to_string(codec_.max_tags()));
  // A last step that receives and reduces the whole vector (recursive doubling without a
  // fold-in post step) produces final values chunk by chunk: they are converted into the
  // application's buffer while still in cache instead of in a second pass at the end.
  for (size_t i = plan_.steps.size(); i-- > 0;) {
    const Step& step = plan_.steps[i];
    if (!step.receives()) continue;
    if (step.reduces() && step.recv->offset == 0 && step.recv->count == total_elems_) final_step_ = i;
    break;
  }
  send_step_of_tag_.assign(plan_.tag_count, -1);
  for (size_t i = 0; i < plan_.steps.size(); ++i)
    if (plan_.steps[i].sends()) send_step_of_tag_[plan_.steps[i].tag] = static_cast<int>(i);
  credit_.assign(plan_.tag_count, 0);
  sent_.assign(plan_.tag_count, 0);

  // Registered: what peers write into, the work buffer and the landing pool. The carry and
  // late callers' results need no registration and exist only while needed.
  work_bytes_ = (acc_bytes(total_elems_) + 63) / 64 * 64;
  landing_bytes_ = (acc_bytes(plan_.landing_elems()) + 63) / 64 * 64;
  if (config.mode == PCOLL_MODE_QUORUM) {
    if (!transport_.capabilities().remote_atomics)
      fail(Errc::unsupported, "PCOLL_MODE_QUORUM counts arrivals with 64-bit remote atomics, which provider " +
                                  transport_.capabilities().name + " does not have; use solo or majority here, "
                                  "or a provider with atomics (pcoll_info: atomics)");
    // Round t's counter lives on rank t mod P, in word (t / P) mod W; W rounds of a rank
    // share nothing while one is still counted ("Quorum" in docs/design.md says why this W).
    counter_words_ = (static_cast<size_t>(config.opts.max_lag) + 2 + static_cast<size_t>(size_) - 1) /
                     static_cast<size_t>(size_);
  }
  region_.reset(transport_.allocate(work_bytes_ + landing_bytes_ + counter_words_ * sizeof(uint64_t)).release());
  // Room to hand a result over in place (recvbuf == sendbuf) a piece at a time.
  scratch_.resize(acc_bytes(std::min(config.count, kScratchElems)));

  for (auto& per_parity : arrivals_) {
    per_parity.resize(plan_.tag_count);
    for (const Step& step : plan_.steps) {
      if (!step.receives()) continue;
      per_parity[step.tag].seen.assign(step.recv->chunk_count(), 0);
      per_parity[step.tag].done.assign(step.recv->chunk_count(), 0);
    }
  }
  ring_.resize(static_cast<size_t>(config.opts.max_lag) + 2);
  late_by_round_.assign(ring_.size(), false);
  const auto ranks = static_cast<size_t>(size_);
  stats_.fresh_rounds.assign(ranks, 0);
  stats_.late_rounds.assign(ranks, 0);
  stats_.longest_late_run.assign(ranks, 0);
  stats_.fresh_histogram.assign(ranks + 1, 0);
  late_run_.assign(ranks, 0);
  if (!config.trace_dir.empty()) trace_ = std::make_unique<RoundTrace>(config.trace_dir, config.trace_clock_skew_ns);
  stats_.registered_bytes = region_->bytes().size();
  stats_.memory_bytes = stats_.registered_bytes + scratch_.size();
}

void Allreduce::RegionRelease::operator()(transport::LocalRegion* region) const {
  std::unique_ptr<transport::LocalRegion> owned(region);
  if (comm != nullptr) comm->release_region(std::move(owned));
}

Allreduce::~Allreduce() {
  {
    std::lock_guard lock(comm_.engine_mutex());
    comm_.remove_handle(id_);
  }
  if (trace_) write_trace();
}

// Collective, traced handles only: every rank reads its trace clock right after each of a
// few barriers; the median difference to rank 0's readings is this rank's clock offset,
// recorded in the trace file (good to about the spread of a barrier's exits).
void Allreduce::estimate_clock_offset() {
  constexpr int kSamples = 7;
  std::vector<int64_t> mine(kSamples);
  for (int k = 0; k < kSamples; ++k) {
    comm_.barrier(timeout_);
    mine[static_cast<size_t>(k)] = trace_->now_ns();
  }
  std::vector<std::byte> blob(sizeof(int64_t) * kSamples);
  std::memcpy(blob.data(), mine.data(), blob.size());
  const auto all = comm_.agree(blob, timeout_);
  std::vector<int64_t> root(kSamples);
  if (all[0].size() != blob.size()) fail(Errc::protocol, "rank 0 sent a malformed clock sample");
  std::memcpy(root.data(), all[0].data(), blob.size());
  clock_offset_ns_ = estimate_offset(mine, root);
}

void Allreduce::write_trace() noexcept {
  try {
    const RoundTrace::Header header{rank_, size_, id_, name_of(mode_names(), config_.mode), clock_offset_ns_};
    const std::string path = trace_->write(header);
    log::debug("round trace of handle " + std::to_string(id_) + " written to " + path);
  } catch (const std::exception& e) {
    log::warn(std::string("round trace not written: ") + e.what());
  }
}

// --- Round kinds and the conditions to join ---------------------------------------------

bool Allreduce::is_sync_round(uint64_t round) const {
  if (config_.mode == PCOLL_MODE_SYNC) return true;
  const uint32_t every = config_.opts.sync_every;
  return every != 0 && (round + 1) % every == 0;
}

bool Allreduce::lag_allows(uint64_t round) const {
  // Join round t only once the application has called run(t - max_lag).
  const uint64_t lag = config_.opts.max_lag;
  return round < lag || app_next_ >= round - lag + 1;
}

bool Allreduce::can_join(uint64_t round) {
  const bool posted = app_next_ > round;
  const bool flush = posted_ && posted_->round == round && posted_->flush;
  if (flush || is_sync_round(round)) return posted;
  if (round < activated_) return lag_allows(round);
  if (!posted) return false;
  // The application posted a round nobody has activated yet.
  bool starts = false;
  switch (config_.mode) {
    case PCOLL_MODE_SOLO: starts = true; break;
    case PCOLL_MODE_MAJORITY: starts = majority_initiator(round) == rank_; break;
    case PCOLL_MODE_QUORUM:
      starts = quorum_reached_ == round || (grace_round_ == round && Clock::now() >= grace_deadline_);
      break;
    default: break;
  }
  if (starts) initiate(round);
  return starts;
}

// Quorum mode, the application has just posted `round` (lock held; released while the
// atomic is in flight): one fetch-add on the round's counter tells this rank how many
// ranks have posted it, itself included. Every rank counts every round, sync and flush
// rounds too, so that the counter word holds P arrivals per round that used it before.
void Allreduce::count_arrival(std::unique_lock<std::mutex>& lock, uint64_t round) {
  const auto ranks = static_cast<uint64_t>(size_);
  const int host = static_cast<int>(round % ranks);
  const uint64_t uses = round / ranks;  // rounds hosted by that rank before this one
  const size_t word = static_cast<size_t>(uses % counter_words_);
  const uint64_t before = ranks * (uses / counter_words_);  // arrivals of earlier rounds on the word
  const size_t offset = work_bytes_ + landing_bytes_ + word * sizeof(uint64_t);
  lock.unlock();
  uint64_t old = 0;
  std::optional<Error> failed;
  try {
    old = transport_.fetch_add(*peers_[static_cast<size_t>(host)], offset, 1);
  } catch (const Error& e) {
    failed = e;
  }
  lock.lock();
  if (failed) comm_.fail_locked(*failed, {}, host);
  if (old < before || old - before >= ranks)
    fail(Errc::protocol, "the arrival counter of round " + std::to_string(round) + " of handle " +
                             std::to_string(id_) + " on rank " + std::to_string(host) + " reads " +
                             std::to_string(old) + ", outside " + std::to_string(before) + ".." +
                             std::to_string(before + ranks - 1));
  const uint64_t arrived = old - before + 1;
  trace(TraceEvent::arrival, round, static_cast<int32_t>(arrived));
  if (is_sync_round(round) || (posted_ && posted_->flush)) return;
  if (arrived == config_.opts.quorum) quorum_reached_ = round;
  if (arrived == 1 && config_.opts.grace_us > 0 && arrived < config_.opts.quorum) {
    grace_round_ = round;
    grace_deadline_ = Clock::now() + std::chrono::microseconds(config_.opts.grace_us);
  }
  ++epoch_;
}

std::optional<std::chrono::steady_clock::time_point> Allreduce::next_deadline_locked() const {
  // Once the grace has passed, the round starts at the engine's next move (can_join).
  if (grace_round_ == joined_ && activated_ <= joined_ && Clock::now() < grace_deadline_) return grace_deadline_;
  return std::nullopt;
}

void Allreduce::initiate(uint64_t round) {
  for (const int child : activation::tree_children(rank_, rank_, size_))
    transport_.notify(child, codec_.activation(id_, static_cast<uint32_t>(rank_), round));
  activated_ = std::max(activated_, round + 1);
  initiated_current_ = true;
  trace(TraceEvent::activation_sent, round, rank_);
}

// --- Engine side --------------------------------------------------------------------------

void Allreduce::on_notice(const Notice& notice) {
  switch (notice.kind) {
    case NoticeKind::data: return on_data(notice);
    case NoticeKind::credit: return on_credit(notice);
    case NoticeKind::activation: break;
    default: fail(Errc::internal, "a control message was routed to allreduce handle " + std::to_string(id_));
  }
  const int root = static_cast<int>(notice.rank);
  if (root >= size_)
    fail(Errc::protocol, "activation for handle " + std::to_string(id_) + " names root rank " +
                             std::to_string(root) + " of a job of " + std::to_string(size_));
  const uint64_t round = codec_.widen_round(notice.round, joined_);
  // Forward every (round, root) along root's tree even when already joined: ranks below
  // may have heard from no other root.
  for (const int child : activation::tree_children(rank_, root, size_))
    transport_.notify(child, codec_.activation(id_, static_cast<uint32_t>(root), round));
  if (round > joined_ + 1)
    fail(Errc::protocol, "activation for round " + std::to_string(round) + " of handle " +
                             std::to_string(id_) + " while this rank is at round " +
                             std::to_string(joined_));
  activated_ = std::max(activated_, round + 1);
  trace(TraceEvent::activation_received, round, root);
}

void Allreduce::on_data(const Notice& notice) {
  // New only for the active round or the next one. A notice for a completed round can
  // only be a duplicate of one already counted (no peer writes a round it finished before
  // we did): ignored.
  const uint64_t round = codec_.widen_round(notice.round, completed_);
  if (round < completed_) {
    ++duplicates_;
    return;
  }
  if (round > completed_ + 1)
    fail(Errc::protocol, "data for round " + std::to_string(round) + " of handle " +
                             std::to_string(id_) + " while this rank is at round " +
                             std::to_string(completed_));
  const uint32_t tag = notice.tag;
  if (tag >= plan_.tag_count)
    fail(Errc::protocol, "data for handle " + std::to_string(id_) + " with exchange tag " +
                             std::to_string(tag) + " (this plan has " +
                             std::to_string(plan_.tag_count) + ")");
  Arrivals& arrivals = arrivals_[round & 1][tag];
  const uint32_t chunk = notice.chunk;
  if (chunk >= arrivals.seen.size())
    fail(Errc::protocol, "chunk " + std::to_string(chunk) + " of exchange " + std::to_string(tag) +
                             " of handle " + std::to_string(id_) + " has only " +
                             std::to_string(arrivals.seen.size()) + " chunks");
  if (arrivals.seen[chunk]) {
    ++duplicates_;
    return;
  }
  arrivals.seen[chunk] = 1;
  arrivals.order.push_back(chunk);
  ++epoch_;
}

// The receiver of our sends into one of its landing slots reduced chunks below
// `chunk` of round `round`: those positions may be written again.
void Allreduce::on_credit(const Notice& notice) {
  const uint32_t tag = notice.tag;
  const int index = tag < send_step_of_tag_.size() ? send_step_of_tag_[tag] : -1;
  if (index < 0 || plan_.steps[static_cast<size_t>(index)].send->lands_in_result())
    fail(Errc::protocol, "credit for exchange " + std::to_string(tag) + " of handle " + std::to_string(id_) +
                             ", which sends nothing into a landing slot from this rank");
  const Transfer& send = *plan_.steps[static_cast<size_t>(index)].send;
  const uint64_t round = codec_.widen_round(notice.round, completed_);
  if (notice.chunk >= send.chunk_count())
    fail(Errc::protocol, "credit for chunk " + std::to_string(notice.chunk) + " of exchange " +
                             std::to_string(tag) + " of handle " + std::to_string(id_) + ", which has " +
                             std::to_string(send.chunk_count()) + " chunks");
  const uint64_t reduced = send.sequence(round, notice.chunk);
  if (reduced > sent_[tag])
    fail(Errc::protocol, "credit for " + std::to_string(reduced) + " chunks of exchange " + std::to_string(tag) +
                             " of handle " + std::to_string(id_) + ", of which this rank sent " +
                             std::to_string(sent_[tag]));
  if (reduced <= credit_[tag]) return;  // a duplicate, or overtaken by a later credit
  credit_[tag] = reduced;
  ++epoch_;
}

void Allreduce::advance_locked() {
  if (!ready_) return;
  for (;;) {
    if (joined_ > completed_) {
      if (!run_steps()) return;
      complete_round();
      continue;
    }
    if (!can_join(joined_)) return;
    join(joined_);
  }
}

void Allreduce::join(uint64_t round) {
  // A result the application has not collected yet moves out of the work buffer now.
  if (work_holds_ == WorkHolds::result) move_result_out();
  settle_sends();
  std::byte* acc = work();
  const size_t count = config_.count;
  const bool fresh = posted_ && posted_->round == round;
  const bool flush = fresh && posted_->flush;
  // The contribution: the carry (in the work buffer already, or spilled), plus the sendbuf
  // when the application posted this round in time.
  const bool had_carry = carry_in_work_ || !spill_.empty();
  if (fresh && !flush) {
    if (carry_in_work_) {
      reduce_user_into(config_.dtype, carry_op(config_.op), acc, posted_->sendbuf, count);
    } else {
      to_accumulator(config_.dtype, posted_->sendbuf, acc, count);
    }
  } else if (!carry_in_work_) {
    fill_identity(config_.dtype, config_.op, acc, count);
  }
  if (!spill_.empty()) {
    reduce_into(config_.dtype, config_.op, acc, spill_.data(), count);
    release(spill_);
  }
  carry_in_work_ = false;
  work_holds_ = WorkHolds::round;
  std::byte* flags = acc + acc_bytes(count);
  std::memset(flags, 0, acc_bytes(2 * static_cast<size_t>(size_)));
  const double mark = flag_mark(config_.op);
  if (fresh) store_flag(acc_dtype_, flags + acc_bytes(rank_), mark);
  if (initiated_current_) store_flag(acc_dtype_, flags + acc_bytes(size_ + rank_), mark);
  late_by_round_[round % ring_.size()] = !fresh;
  active_flush_ = flush;
  trace(TraceEvent::join, round, fresh ? 1 : 0);
  step_traced_ = false;
  if (flush && had_carry) ++stats_.flushes_carried;
  step_ = 0;
  posted_chunks_ = 0;
  settled_chunks_ = 0;
  processed_ = 0;
  deferred_.clear();
  early_delivered_ = 0;
  ++joined_;
  ++epoch_;
}

bool Allreduce::post_sends(const Step& step) {
  const uint64_t round = completed_;
  const Transfer& send = *step.send;
  const size_t chunks = send.chunk_count();
  if (posted_chunks_ == chunks) return true;
  const transport::RemoteRegion& peer = *peers_[step.peer];
  // A chunk that lands in the peer's slot may go once its ring position is free: every
  // chunk of round - 2 is reduced there (reduce_plan.hpp, Transfer), and whatever the
  // peer's credits say beyond that.
  uint64_t free_below = UINT64_MAX;
  if (!send.lands_in_result()) {
    const uint64_t reduced = std::max<uint64_t>(round == 0 ? 0 : send.sequence(round - 1, 0), credit_[step.tag]);
    free_below = reduced + send.slot_depth;
  }
  if (acc_bytes(send.chunk(0).count) > transport_.capabilities().inject_bytes) large_writes_pending_ = true;
  for (; posted_chunks_ < chunks; ++posted_chunks_) {
    if (send.sequence(round, posted_chunks_) >= free_below) break;
    const Chunk chunk = send.chunk(posted_chunks_);
    const size_t target = send.lands_in_result() ? acc_bytes(chunk.offset)
                                                 : work_bytes_ + acc_bytes(send.landing_offset(round, chunk.index));
    transport_.write_notify(*region_, acc_bytes(chunk.offset), peer, target, acc_bytes(chunk.count),
                            codec_.data(id_, step.tag, chunk.index, round));
    stats_.bytes_written += acc_bytes(chunk.count);
  }
  if (!send.lands_in_result()) sent_[step.tag] = send.sequence(round, posted_chunks_);
  return posted_chunks_ == chunks;
}

// Handles the chunks of this step that arrived: reduces those that land in a slot (each
// once its range is no longer the source of our own send), counts those that land in the
// result, and tells a windowed sender which positions are free again.
bool Allreduce::reduce_arrivals(const Step& step) {
  const uint64_t round = completed_;
  const Transfer& recv = *step.recv;
  Arrivals& arrivals = arrivals_[round & 1][step.tag];
  const size_t chunks = recv.chunk_count();
  if (arrivals.handled == chunks) return true;
  if (recv.lands_in_result()) {
    arrivals.handled = arrivals.order.size();
    return arrivals.handled == chunks;
  }
  // Recursive doubling reduces the range it sends: chunk c only after our chunk c went,
  // and, above the inject size, completed.
  const bool own_source = step.sends() && ranges_overlap(*step.send, recv);
  const bool large = acc_bytes(recv.chunk(0).count) > transport_.capabilities().inject_bytes;
  const size_t before = arrivals.handled;
  const auto try_reduce = [&](uint32_t c) {
    if (own_source) {
      if (c >= posted_chunks_) return false;
      if (large && c >= settled_chunks_) {
        transport_.flush();
        settled_chunks_ = posted_chunks_;
        large_writes_pending_ = false;
      }
    }
    const Chunk chunk = recv.chunk(c);
    reduce_into(config_.dtype, config_.op, work() + acc_bytes(chunk.offset),
                landing() + acc_bytes(recv.landing_offset(round, c)), chunk.count);
    if (step_ == final_step_) deliver_chunk(round, chunk.offset, chunk.count);
    arrivals.done[c] = 1;
    while (arrivals.prefix < chunks && arrivals.done[arrivals.prefix]) ++arrivals.prefix;
    ++arrivals.handled;
    return true;
  };
  if (!deferred_.empty())
    std::erase_if(deferred_, [&](uint32_t c) { return try_reduce(c); });
  for (; processed_ < arrivals.order.size(); ++processed_) {
    const uint32_t c = arrivals.order[processed_];
    if (!try_reduce(c)) deferred_.push_back(c);
  }
  if (arrivals.handled != before && recv.windowed()) send_credit(step, arrivals.handled == chunks);
  return arrivals.handled == chunks;
}

// Credits go out a quarter ring at a time, and when the round's chunks are all reduced
// (then the sender may fill the ring with the next round's).
void Allreduce::send_credit(const Step& step, bool finished) {
  Arrivals& arrivals = arrivals_[completed_ & 1][step.tag];
  const size_t quarter = std::max<size_t>(1, step.recv->slot_depth / 4);
  if (!finished && arrivals.prefix - arrivals.credited < quarter) return;
  arrivals.credited = arrivals.prefix;
  const uint64_t value = finished ? codec_.credit(id_, step.tag, 0, completed_ + 1)
                                  : codec_.credit(id_, step.tag, static_cast<uint32_t>(arrivals.prefix), completed_);
  transport_.notify(step.peer, value);
}

bool Allreduce::run_steps() {
  const uint64_t round = completed_;
  while (step_ < plan_.steps.size()) {
    const Step& step = plan_.steps[step_];
    if (!step_traced_) {
      trace(TraceEvent::step_start, round, static_cast<int32_t>(step_));
      step_traced_ = true;
    }
    const bool sent = !step.sends() || post_sends(step);
    const bool received = !step.receives() || reduce_arrivals(step);
    if (!sent || !received) return false;
    trace(TraceEvent::step_end, round, static_cast<int32_t>(step_));
    step_traced_ = false;
    ++step_;
    posted_chunks_ = 0;
    settled_chunks_ = 0;
    processed_ = 0;
    deferred_.clear();
    ++epoch_;
  }
  return true;
}

void Allreduce::deliver_chunk(uint64_t round, size_t first, size_t elems) {
  if (!posted_ || posted_->round != round || posted_->delivered || posted_->recvbuf == nullptr) return;
  // A late sendbuf in the same memory still has to go into the carry at completion.
  if (pending_late_ != nullptr &&
      overlap(pending_late_, posted_->recvbuf, user_elem_bytes_ * config_.count))
    return;
  if (first >= config_.count) return;  // the flag elements stay in the work buffer
  const size_t n = std::min(elems, config_.count - first);
  from_accumulator(config_.dtype, config_.op, size_, work() + acc_bytes(first),
                   static_cast<std::byte*>(posted_->recvbuf) + user_elem_bytes_ * first, n);
  early_delivered_ += n;
}

void Allreduce::fill_info(uint64_t round, RoundInfo& info) {
  const std::byte* flags = work() + acc_bytes(config_.count);
  info.round = round;
  info.fresh = 0;
  info.initiator = -1;
  info.fresh_mask.assign((static_cast<size_t>(size_) + 63) / 64, 0);
  for (int r = 0; r < size_; ++r) {
    if (load_flag(acc_dtype_, flags + acc_bytes(r))) {
      info.fresh_mask[r / 64] |= uint64_t{1} << (r % 64);
      ++info.fresh;
    }
    if (load_flag(acc_dtype_, flags + acc_bytes(size_ + r))) {
      // Majority: only the drawn rank may start a round; anything else is a broken peer.
      if (config_.mode == PCOLL_MODE_MAJORITY && r != majority_initiator(round))
        fail(Errc::protocol, "rank " + std::to_string(r) + " initiated round " + std::to_string(round) +
                                 " of majority handle " + std::to_string(id_) + ", but rank " +
                                 std::to_string(majority_initiator(round)) + " was drawn");
      if (info.initiator < 0) info.initiator = r;
    }
  }
  info.caller_late = late_by_round_[round % ring_.size()];
}

void Allreduce::complete_round() {
  const uint64_t round = completed_;
  Completed& slot = ring_[round % ring_.size()];
  // The ring holds max_lag + 2 rounds; bounded lag keeps the engine within max_lag + 1
  // rounds of the application, so the slot's previous round has been handed over.
  const bool still_needed = slot.round != UINT64_MAX &&
                            (slot.round >= app_next_ || (posted_ && posted_->round == slot.round));
  if (still_needed)
    fail(Errc::internal, "result ring overrun at round " + std::to_string(round));
  slot.round = round;
  fill_info(round, slot.info);
  count_round(slot.info);
  trace(TraceEvent::complete, round, slot.info.initiator, slot.info.fresh);
  for (Arrivals& tag : arrivals_[round & 1]) tag.clear();
  initiated_current_ = false;
  ++completed_;
  ++epoch_;
  // The application waits for this round: the result goes straight into its buffer (and
  // a late sendbuf it posted meanwhile into the carry). Otherwise it stays in the work
  // buffer for the application to collect.
  work_holds_ = WorkHolds::result;
  if (posted_ && posted_->round == round) {
    const void* late = pending_late_;
    pending_late_ = nullptr;
    hand_over_result(posted_->recvbuf, late);
    posted_->delivered = true;
  }
}

void Allreduce::count_round(const RoundInfo& info) {
  ++stats_.rounds;
  if (initiated_current_) ++stats_.rounds_initiated;
  if (waiters_ == 0) ++stats_.rounds_while_computing;
  if (active_flush_) {
    ++stats_.flushes;
    return;
  }
  ++stats_.fresh_histogram[static_cast<size_t>(info.fresh)];
  for (size_t r = 0; r < late_run_.size(); ++r) {
    if ((info.fresh_mask[r / 64] >> (r % 64)) & 1u) {
      ++stats_.fresh_rounds[r];
      late_run_[r] = 0;
    } else {
      ++stats_.late_rounds[r];
      stats_.longest_late_run[r] = std::max(stats_.longest_late_run[r], ++late_run_[r]);
    }
  }
}

void Allreduce::stats(AllreduceStats& out) const {
  std::lock_guard lock(comm_.engine_mutex());
  out = stats_;
}

// --- Application side ---------------------------------------------------------------------

// --- The carry and the results -----------------------------------------------------------

void Allreduce::settle_sends() {
  if (!large_writes_pending_) return;
  transport_.flush();
  large_writes_pending_ = false;
}

void Allreduce::release(std::vector<std::byte>& buffer) {
  count_memory(-static_cast<std::ptrdiff_t>(buffer.capacity()));
  std::vector<std::byte>().swap(buffer);
}

// The work buffer holds the result of round completed_ - 1: converted into `recvbuf`
// (what early delivery has not written yet), and the work buffer becomes the carry, with
// `late_sendbuf` in it if the application posted that round late. recvbuf may be
// late_sendbuf: then each piece of the sendbuf is read before its result is written.
void Allreduce::hand_over_result(void* recvbuf, const void* late_sendbuf) {
  const size_t count = config_.count;
  if (config_.opts.late == PCOLL_LATE_DROP) late_sendbuf = nullptr;
  auto* out = static_cast<std::byte*>(recvbuf);
  const auto* in = static_cast<const std::byte*>(late_sendbuf);
  if (late_sendbuf != nullptr && count > 0) settle_sends();  // the carry overwrites the work buffer
  if (late_sendbuf == nullptr || count == 0) {
    if (out != nullptr && early_delivered_ != count)
      from_accumulator(config_.dtype, config_.op, size_, work(), out, count);
  } else if (!overlap(in, out, user_elem_bytes_ * count)) {
    if (out != nullptr && early_delivered_ != count)
      from_accumulator(config_.dtype, config_.op, size_, work(), out, count);
    to_accumulator(config_.dtype, late_sendbuf, work(), count);
  } else {
    const size_t piece = scratch_.size() / acc_elem_bytes_;
    for (size_t first = 0; first < count; first += piece) {
      const size_t n = std::min(piece, count - first);
      to_accumulator(config_.dtype, in + user_elem_bytes_ * first, scratch_.data(), n);
      from_accumulator(config_.dtype, config_.op, size_, work() + acc_bytes(first), out + user_elem_bytes_ * first, n);
      std::memcpy(work() + acc_bytes(first), scratch_.data(), acc_bytes(n));
    }
  }
  carry_in_work_ = late_sendbuf != nullptr && count > 0;
  work_holds_ = WorkHolds::carry;
}

// The engine needs the work buffer for the next round while the application has not
// collected the previous one (it lags, which max_lag >= 2 allows): that result moves out.
void Allreduce::move_result_out() {
  Completed& slot = ring_[(completed_ - 1) % ring_.size()];
  slot.result.resize(user_elem_bytes_ * config_.count);
  count_memory(static_cast<std::ptrdiff_t>(slot.result.capacity()));
  from_accumulator(config_.dtype, config_.op, size_, work(), slot.result.data(), config_.count);
  carry_in_work_ = false;
  work_holds_ = WorkHolds::carry;
}

// A late sendbuf whose round is over: into the carry, in the work buffer when that holds
// the carry, else spilled until the next join.
void Allreduce::add_to_carry(const void* sendbuf) {
  if (config_.opts.late == PCOLL_LATE_DROP || config_.count == 0) return;
  const size_t count = config_.count;
  if (work_holds_ == WorkHolds::carry) {
    settle_sends();
    if (carry_in_work_) reduce_user_into(config_.dtype, carry_op(config_.op), work(), sendbuf, count);
    else to_accumulator(config_.dtype, sendbuf, work(), count);
    carry_in_work_ = true;
    return;
  }
  if (spill_.empty()) {
    spill_.resize(acc_bytes(count));
    count_memory(static_cast<std::ptrdiff_t>(spill_.capacity()));
    to_accumulator(config_.dtype, sendbuf, spill_.data(), count);
  } else {
    reduce_user_into(config_.dtype, carry_op(config_.op), spill_.data(), sendbuf, count);
  }
}

// --- Application side ---------------------------------------------------------------------

void Allreduce::start(const void* sendbuf, void* recvbuf) {
  if (sendbuf == nullptr && config_.count > 0)
    invalid_argument("pcoll_allreduce_start: sendbuf is NULL but count is " + std::to_string(config_.count));
  if (recvbuf == nullptr && config_.count > 0)
    invalid_argument("pcoll_allreduce_start: recvbuf is NULL but count is " + std::to_string(config_.count));
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  if (posted_)
    fail(Errc::invalid_state, "pcoll_allreduce_start: round " + std::to_string(posted_->round) +
                                  " is still outstanding; call pcoll_allreduce_wait first");
  const uint64_t round = app_next_++;
  posted_ = Posted{round, sendbuf, recvbuf, round < joined_, false, false};
  trace(TraceEvent::post, round, posted_->late ? 1 : 0);
  if (round == completed_ && round < joined_) {
    // The active round started without us: our sendbuf joins the carry once it completes
    // (until then the round is outstanding, so the buffer stays ours).
    pending_late_ = sendbuf;
  } else if (round < completed_) {
    // The round already completed without us: hand over its result now.
    const Completed& slot = ring_[round % ring_.size()];
    if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
    if (work_holds_ == WorkHolds::result && round + 1 == completed_) {
      hand_over_result(recvbuf, sendbuf);
    } else {
      Completed& moved = ring_[round % ring_.size()];
      if (moved.result.size() != user_elem_bytes_ * config_.count)
        fail(Errc::internal, "result of round " + std::to_string(round) + " is neither buffered nor in the work buffer");
      add_to_carry(sendbuf);  // first: recvbuf may be sendbuf
      if (recvbuf != nullptr && !moved.result.empty()) std::memcpy(recvbuf, moved.result.data(), moved.result.size());
      release(moved.result);
    }
    posted_->delivered = true;
  }
  if (config_.mode == PCOLL_MODE_QUORUM) count_arrival(lock, round);
  comm_.drive_locked();
}

bool Allreduce::deliver_if_ready_locked(RoundInfo* info) {
  if (!posted_) fail(Errc::invalid_state, "no round outstanding: call pcoll_allreduce_start first");
  const uint64_t round = posted_->round;
  if (completed_ <= round) return false;
  const Completed& slot = ring_[round % ring_.size()];
  if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
  if (!posted_->delivered) fail(Errc::internal, "round " + std::to_string(round) + " completed undelivered");
  if (info != nullptr) {
    *info = slot.info;
    if (posted_->flush) info->caller_late = false;
  }
  trace(TraceEvent::deliver, round, posted_->late ? 1 : 0);
  posted_.reset();
  return true;
}

bool Allreduce::test(RoundInfo* info) {
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  // A round this call completes was waited for, not computed over (stats_).
  struct Polling {
    int& waiters;
    explicit Polling(int& w) : waiters(w) { ++waiters; }
    ~Polling() { --waiters; }
  } polling{waiters_};
  comm_.drive_locked();
  if (deliver_if_ready_locked(info)) return true;
  probe_locked(Clock::now());
  return false;
}

void Allreduce::probe_locked(Clock::time_point now) {
  if (!ready_) return;
  if (epoch_ != probe_epoch_) {
    probe_epoch_ = epoch_;
    probe_moved_at_ = now;
    return;
  }
  const int peer = awaited_peer();
  if (peer < 0 || peer == rank_) return;
  const auto probe_after = std::min<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(1000));
  if (now - probe_moved_at_ > probe_after) comm_.watch_locked(peer, timeout_);
}

int Allreduce::majority_initiator(uint64_t round) const {
  return activation::majority_initiator(config_.opts.seed, id_, round, size_);
}

int Allreduce::awaited_peer() const {
  if (joined_ > completed_ && step_ < plan_.steps.size()) return plan_.steps[step_].peer;
  if (config_.mode == PCOLL_MODE_MAJORITY && !is_sync_round(joined_) && joined_ >= activated_)
    return majority_initiator(joined_);
  return -1;
}

bool Allreduce::wait_for_round(RoundInfo* info, std::optional<Clock::time_point> deadline) {
  const auto probe_after = std::min<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(1000));
  // While spinning we drive the engine and the progress thread is parked; asleep, it is
  // the other way round.
  struct Driving {
    Comm& comm;
    bool on = false;
    void set(bool want, bool resume_now = true) {
      if (want == on) return;
      if (want) comm.hold_progress(); else comm.release_progress(resume_now);
      on = want;
    }
    // The round is done and the application will likely be back for the next one soon.
    ~Driving() { set(false, false); }
  } driving{comm_};
  // When this waiter last saw the engine move. The clock is read once per change and every
  // kClockEvery idle polls: in a VM a clock read can cost as much as the poll itself.
  constexpr unsigned kClockEvery = 16;
  auto moved_at = Clock::now();
  bool spinning = true;
  std::unique_lock lock(comm_.engine_mutex());
  // Counts this call as a waiter and its time as blocked; ends before the lock is released.
  struct Waiting {
    Allreduce& handle;
    Clock::time_point since;
    Waiting(Allreduce& h, Clock::time_point t) : handle(h), since(t) { ++handle.waiters_; }
    ~Waiting() {
      --handle.waiters_;
      handle.stats_.blocked_ns +=
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
    }
  } waiting{*this, moved_at};
  uint64_t seen = epoch_;  // written under the engine lock by whoever drives the engine
  for (unsigned idle = 0;; ++idle) {
    comm_.check_failed();
    comm_.drive_locked();
    if (deliver_if_ready_locked(info)) return true;
    if (deadline && idle % kClockEvery == 0 && Clock::now() >= *deadline) return false;
    if (epoch_ != seen) {
      seen = epoch_;
      moved_at = Clock::now();
      idle = 0;
      spinning = true;
    } else if (idle % kClockEvery == 0) {
      const auto now = Clock::now();
      const int peer = awaited_peer();
      // Only a waiter that heard nothing for a while asks whether the peer is alive.
      if (peer >= 0 && peer != rank_ && now - moved_at > probe_after) comm_.watch_locked(peer, timeout_);
      // Spin while the round moves: within the spin budget of the start of the wait or of
      // the engine's last step, so a large round that keeps receiving is driven here to
      // the end, and a wait for a late peer goes to sleep soon.
      spinning = now < moved_at + comm_.spin_budget();
    }
    if (spinning) {
      driving.set(true);
      // A short pause between polls (a long one adds microseconds to every round). Yield
      // only when the node is oversubscribed: then the rank we wait for may need this
      // CPU; otherwise a yield can hand the core to unrelated work for a whole slice.
      lock.unlock();
      if (comm_.yield_when_spinning()) {
        sched_yield();
      } else {
        for (int i = 0; i < 4; ++i) cpu_relax();
      }
      lock.lock();
    } else {
      driving.set(false);
      auto nap = std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::milliseconds(std::clamp<int64_t>(timeout_.count() / 8, 1, 100)));
      if (const auto due = next_deadline_locked())  // a grace that ends before
        nap = std::clamp(std::chrono::duration_cast<std::chrono::microseconds>(*due - Clock::now()),
                         std::chrono::microseconds(0), nap);
      if (deadline)  // the caller's own deadline
        nap = std::clamp(std::chrono::duration_cast<std::chrono::microseconds>(*deadline - Clock::now()),
                         std::chrono::microseconds(0), nap);
      comm_.sleep_locked(lock, nap);
      idle = kClockEvery - 1;  // look at the clock again after every sleep
    }
  }
}

void Allreduce::wait(RoundInfo* info) {
  {
    std::lock_guard lock(comm_.engine_mutex());
    if (!posted_) fail(Errc::invalid_state, "pcoll_allreduce_wait: no round outstanding; call pcoll_allreduce_start first");
  }
  wait_for_round(info);
}

bool Allreduce::wait_until(RoundInfo* info, Clock::time_point deadline) {
  {
    std::lock_guard lock(comm_.engine_mutex());
    if (!posted_) fail(Errc::invalid_state, "pcoll_allreduce_timedwait: no round outstanding; call pcoll_allreduce_start first");
  }
  return wait_for_round(info, deadline);
}

void Allreduce::flush(void* recvbuf, RoundInfo* info) {
  if (recvbuf == nullptr && config_.count > 0)
    invalid_argument("pcoll_allreduce_flush: recvbuf is NULL but count is " + std::to_string(config_.count));
  {
    std::unique_lock lock(comm_.engine_mutex());
    comm_.check_failed();
    if (posted_)
      fail(Errc::invalid_state, "pcoll_allreduce_flush: round " + std::to_string(posted_->round) +
                                    " is still outstanding; call pcoll_allreduce_wait first");
    const uint64_t round = app_next_;
    if (round < joined_)
      fail(Errc::invalid_state, "pcoll_allreduce_flush: round " + std::to_string(round) +
                                    " was already started by another rank's run; every rank must "
                                    "call flush at the same round");
    ++app_next_;
    posted_ = Posted{round, nullptr, recvbuf, false, true, false};
    trace(TraceEvent::post_flush, round);
    if (config_.mode == PCOLL_MODE_QUORUM) count_arrival(lock, round);
    comm_.drive_locked();
  }
  wait_for_round(info);
}

void Allreduce::destroy() {
  // The contract (pcoll.h): destroy always frees the handle. A round still outstanding is
  // waited for first (its peers need this rank's part); then every rank's writes into
  // this handle's memory are fenced by a barrier before the memory is deregistered. On a
  // failed communicator there is nobody to wait for: the memory stays registered until
  // pcoll_finalize (Comm::release_region).
  if (comm_.failed()) return;
  bool outstanding = false;
  {
    std::lock_guard lock(comm_.engine_mutex());
    outstanding = posted_.has_value();
  }
  if (outstanding) wait_for_round(nullptr);
  {
    std::lock_guard lock(comm_.engine_mutex());
    try {
      if (large_writes_pending_) transport_.flush();
    } catch (const Error& error) {
      // A write of the last round failed: its target waits for it, tell everyone.
      comm_.fail_locked(error);
    }
  }
  comm_.barrier(timeout_);
}

}  // namespace pcoll
