// The partial allreduce engine: one handle's rounds from activation to result.
//
// Round t's contribution of this rank is carry + sendbuf_t when the application posted
// round t before the engine joined it, else the carry alone (the late sendbuf_t is folded
// into the carry when it arrives). Each contribution is followed by 2P flag elements
// (fresh flags, then initiator flags) that are reduced with the same op as the data, so
// every rank learns who was fresh and who initiated from the result itself, and all
// ranks agree on it without another message.
#include "allreduce.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include <sched.h>

#include "activation.hpp"
#include "comm.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "log.hpp"
#include "reduce_kernels.hpp"

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

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The configuration every rank must agree on, as compared at creation.
struct Signature {
  uint64_t count, dtype, op, mode, late, max_lag, sync_every, seed, chunk_bytes, rd_max_bytes, handle, traced;
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
         " chunk_bytes=" + std::to_string(s.chunk_bytes) +
         " rd_max_bytes=" + std::to_string(s.rd_max_bytes) + " handle=" + std::to_string(s.handle) +
         " traced=" + std::to_string(s.traced) + " (PCOLL_TRACE)";
}

}  // namespace

Allreduce::Allreduce(Comm& comm, const AllreduceConfig& config, const std::string& invalid_argument_here)
    : comm_(comm), transport_(comm.transport()), config_(config) {
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
                       config.opts.sync_every, config.opts.seed, config.chunk_bytes,
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
    for (int r = 0; r < size_; ++r)
      peers_[r] = transport_.import_region(r, std::span<const std::byte>(all[r]).subspan(kDescriptionBytes));
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
  plan_ = make_plan(algorithm, size_, rank_, total_elems_,
                    chunk_elems_for(total_elems_, config.chunk_bytes, acc_elem_bytes_));
  if (plan_.tag_count > kMaxSlots) fail(Errc::unsupported, "too many ranks for one reduction plan");
  // A last step that receives and reduces the whole vector (recursive doubling without a
  // fold-in post step) produces final values chunk by chunk: they are converted into the
  // application's buffer while still in cache instead of in a second pass at the end.
  for (size_t i = plan_.steps.size(); i-- > 0;) {
    const Step& step = plan_.steps[i];
    if (!step.receives()) continue;
    if (step.reduces() && step.recv->offset == 0 && step.recv->count == total_elems_) final_step_ = i;
    break;
  }

  work_bytes_ = (acc_bytes(total_elems_) + 63) / 64 * 64;
  slot_bytes_ = (acc_bytes(plan_.landing_elems()) + 63) / 64 * 64;
  region_ = transport_.allocate(2 * work_bytes_ + 2 * slot_bytes_);

  carry_.resize(acc_bytes(config.count));
  fill_identity(config.dtype, config.op, carry_.data(), config.count);
  for (auto& per_parity : arrivals_) {
    per_parity.resize(plan_.tag_count);
    for (const Step& step : plan_.steps)
      if (step.receives()) per_parity[step.tag].seen.assign(step.recv->chunk_count(), 0);
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
  stats_.memory_bytes = stats_.registered_bytes + carry_.size();
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
    static constexpr const char* kModes[] = {"sync", "solo", "majority"};
    const RoundTrace::Header header{rank_, size_, id_, kModes[config_.mode], clock_offset_ns_};
    const std::string path = trace_->write(header);
    log::debug("round trace of handle " + std::to_string(id_) + " written to " + path);
  } catch (const std::exception& e) {
    log::warn(std::string("round trace not written: ") + e.what());
  }
}

std::byte* Allreduce::work(uint64_t round) const {
  return region_->bytes().data() + (round & 1) * work_bytes_;
}

std::byte* Allreduce::slots(uint64_t round) const {
  return region_->bytes().data() + 2 * work_bytes_ + (round & 1) * slot_bytes_;
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
  if (config_.mode == PCOLL_MODE_SOLO ||
      majority_initiator(round) == rank_) {
    initiate(round);
    return true;
  }
  return false;
}

void Allreduce::initiate(uint64_t round) {
  for (const int child : activation::tree_children(rank_, rank_, size_))
    transport_.notify(child, encode(NoticeKind::activation, id_, static_cast<uint32_t>(rank_), round));
  activated_ = std::max(activated_, round + 1);
  initiated_current_ = true;
  trace(TraceEvent::activation_sent, round, rank_);
}

// --- Engine side --------------------------------------------------------------------------

void Allreduce::on_notice(const Notice& notice) {
  if (notice.kind == NoticeKind::activation) {
    const int root = static_cast<int>(notice.detail);
    if (root >= size_)
      fail(Errc::protocol, "activation for handle " + std::to_string(id_) + " names root rank " +
                               std::to_string(root) + " of a job of " + std::to_string(size_));
    const uint64_t round = widen_round(notice.round32, joined_);
    // Forward every (round, root) along root's tree even when already joined: ranks below
    // may have heard from no other root.
    for (const int child : activation::tree_children(rank_, root, size_))
      transport_.notify(child, encode(NoticeKind::activation, id_, static_cast<uint32_t>(root), round));
    if (round > joined_ + 1)
      fail(Errc::protocol, "activation for round " + std::to_string(round) + " of handle " +
                               std::to_string(id_) + " while this rank is at round " +
                               std::to_string(joined_));
    activated_ = std::max(activated_, round + 1);
    trace(TraceEvent::activation_received, round, root);
    return;
  }
  // Data: new only for the active round or the next one. A notice for a completed round
  // can only be a duplicate of one already counted (no peer writes a round it finished
  // before we did): ignored.
  const uint64_t round = widen_round(notice.round32, completed_);
  if (round < completed_) {
    ++duplicates_;
    return;
  }
  if (round > completed_ + 1)
    fail(Errc::protocol, "data for round " + std::to_string(round) + " of handle " +
                             std::to_string(id_) + " while this rank is at round " +
                             std::to_string(completed_));
  const uint32_t tag = notice.tag();
  if (tag >= plan_.tag_count)
    fail(Errc::protocol, "data for handle " + std::to_string(id_) + " with exchange tag " +
                             std::to_string(tag) + " (this plan has " +
                             std::to_string(plan_.tag_count) + ")");
  Arrivals& arrivals = arrivals_[round & 1][tag];
  const uint32_t chunk = notice.chunk();
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
  // Our writes of two rounds ago may still read this parity's work buffer; writes up to
  // the inject size were copied when posted, larger ones must complete first.
  if (large_writes_pending_) {
    transport_.flush();
    large_writes_pending_ = false;
  }
  std::byte* acc = work(round);
  const size_t count = config_.count;
  const bool fresh = posted_ && posted_->round == round;
  const bool flush = fresh && posted_->flush;
  if (fresh && !flush) {
    to_accumulator(config_.dtype, posted_->sendbuf, acc, count);
    if (!carry_empty_) reduce_into(config_.dtype, config_.op, acc, carry_.data(), count);
  } else if (count > 0) {
    std::memcpy(acc, carry_.data(), acc_bytes(count));
  }
  const bool carry_was_empty = carry_empty_;
  if (!carry_empty_) {
    fill_identity(config_.dtype, config_.op, carry_.data(), count);
    carry_empty_ = true;
  }
  std::byte* flags = acc + acc_bytes(count);
  std::memset(flags, 0, acc_bytes(2 * static_cast<size_t>(size_)));
  const double mark = flag_mark(config_.op);
  if (fresh) store_flag(acc_dtype_, flags + acc_bytes(rank_), mark);
  if (initiated_current_) store_flag(acc_dtype_, flags + acc_bytes(size_ + rank_), mark);
  late_by_round_[round % ring_.size()] = !fresh;
  active_flush_ = flush;
  trace(TraceEvent::join, round, fresh ? 1 : 0);
  step_traced_ = false;
  if (flush && !carry_was_empty) ++stats_.flushes_carried;
  step_ = 0;
  sent_ = false;
  flushed_ = false;
  processed_ = 0;
  early_delivered_ = 0;
  ++joined_;
  ++epoch_;
}

void Allreduce::post_sends(const Step& step) {
  const uint64_t round = completed_;
  const Transfer& send = *step.send;
  const transport::RemoteRegion& peer = *peers_[step.peer];
  // Byte offsets in the registered region, the same on both ends (allreduce.hpp: region_).
  const size_t work_base = (round & 1) * work_bytes_;
  const size_t landing_base = 2 * work_bytes_ + (round & 1) * slot_bytes_;
  if (acc_bytes(send.chunk(0).count) > transport_.capabilities().inject_bytes) large_writes_pending_ = true;
  const size_t chunks = send.chunk_count();
  for (size_t i = 0; i < chunks; ++i) {
    const Chunk chunk = send.chunk(i);
    const size_t target = send.lands_in_result() ? work_base + acc_bytes(chunk.offset)
                                                 : landing_base + acc_bytes(chunk.landing_offset);
    transport_.write_notify(*region_, work_base + acc_bytes(chunk.offset), peer, target, acc_bytes(chunk.count),
                            encode_data(id_, step.tag, chunk.index, round));
    stats_.bytes_written += acc_bytes(chunk.count);
  }
}

bool Allreduce::run_steps() {
  const uint64_t round = completed_;
  while (step_ < plan_.steps.size()) {
    const Step& step = plan_.steps[step_];
    if (!step_traced_) {
      trace(TraceEvent::step_start, round, static_cast<int32_t>(step_));
      step_traced_ = true;
    }
    if (step.sends() && !sent_) {
      post_sends(step);
      sent_ = true;
    }
    if (step.receives()) {
      const Transfer& recv = *step.recv;
      const bool reduces = !recv.lands_in_result();
      const auto& arrived = arrivals_[round & 1][step.tag].order;
      const size_t chunks = recv.chunk_count();
      if (reduces && processed_ < arrived.size() && !flushed_ && step.sends() &&
          ranges_overlap(*step.send, recv) &&
          acc_bytes(step.send->count) > transport_.capabilities().inject_bytes) {
        // The range we are about to reduce into is still the source of our own write.
        transport_.flush();
        flushed_ = true;
        large_writes_pending_ = false;
      }
      while (processed_ < arrived.size()) {
        const uint32_t c = arrived[processed_];
        if (c >= chunks)
          fail(Errc::protocol, "chunk " + std::to_string(c) + " of exchange " +
                                   std::to_string(step.tag) + " has only " +
                                   std::to_string(chunks) + " chunks");
        if (reduces) {
          const Chunk chunk = recv.chunk(c);
          reduce_into(config_.dtype, config_.op, work(round) + acc_bytes(chunk.offset),
                      slots(round) + acc_bytes(chunk.landing_offset), chunk.count);
          if (step_ == final_step_) deliver_chunk(round, chunk.offset, chunk.count);
        }
        ++processed_;
      }
      if (processed_ < chunks) return false;
      if (arrived.size() > chunks)
        fail(Errc::protocol, "exchange " + std::to_string(step.tag) + " of round " +
                                 std::to_string(round) + " received " +
                                 std::to_string(arrived.size()) + " chunks, expected " +
                                 std::to_string(chunks));
    }
    trace(TraceEvent::step_end, round, static_cast<int32_t>(step_));
    step_traced_ = false;
    ++step_;
    sent_ = false;
    flushed_ = false;
    processed_ = 0;
    ++epoch_;
  }
  return true;
}

void Allreduce::deliver_chunk(uint64_t round, size_t first, size_t elems) {
  if (!posted_ || posted_->round != round || posted_->delivered || posted_->recvbuf == nullptr) return;
  if (first >= config_.count) return;  // the flag elements stay in the work buffer
  const size_t n = std::min(elems, config_.count - first);
  from_accumulator(config_.dtype, config_.op, size_, work(round) + acc_bytes(first),
                   static_cast<std::byte*>(posted_->recvbuf) + user_elem_bytes_ * first, n);
  early_delivered_ += n;
}

void Allreduce::fill_info(uint64_t round, RoundInfo& info) {
  const std::byte* flags = work(round) + acc_bytes(config_.count);
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
  // The ring holds max_lag + 2 results; bounded lag keeps the engine within max_lag + 1
  // rounds of the application, so the slot's previous round has been handed over.
  const bool still_needed = slot.round != UINT64_MAX &&
                            (slot.round >= app_next_ || (posted_ && posted_->round == slot.round));
  if (still_needed)
    fail(Errc::internal, "result ring overrun at round " + std::to_string(round));
  slot.round = round;
  fill_info(round, slot.info);
  count_round(slot.info);
  trace(TraceEvent::complete, round, slot.info.initiator, slot.info.fresh);
  const std::byte* acc = work(round);
  if (posted_ && posted_->round == round && !posted_->delivered) {
    if (posted_->recvbuf != nullptr && early_delivered_ != config_.count)
      from_accumulator(config_.dtype, config_.op, size_, acc, posted_->recvbuf, config_.count);
    posted_->delivered = true;
    slot.result.clear();
  } else {
    if (slot.result.capacity() == 0) stats_.memory_bytes += user_elem_bytes_ * config_.count;
    slot.result.resize(user_elem_bytes_ * config_.count);
    from_accumulator(config_.dtype, config_.op, size_, acc, slot.result.data(), config_.count);
  }
  for (Arrivals& tag : arrivals_[round & 1]) tag.clear();
  initiated_current_ = false;
  ++completed_;
  ++epoch_;
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

void Allreduce::add_late_sendbuf(const void* sendbuf) {
  if (config_.opts.late == PCOLL_LATE_DROP || config_.count == 0) return;
  const pcoll_op_t carry_op = config_.op == PCOLL_OP_AVG ? PCOLL_OP_SUM : config_.op;
  reduce_user_into(config_.dtype, carry_op, carry_.data(), sendbuf, config_.count);
  carry_empty_ = false;
}

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
  if (posted_->late) add_late_sendbuf(sendbuf);
  trace(TraceEvent::post, round, posted_->late ? 1 : 0);
  if (round < completed_) {
    // The round already completed without us: hand over its buffered result now.
    const Completed& slot = ring_[round % ring_.size()];
    if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
    if (recvbuf != nullptr && !slot.result.empty()) std::memcpy(recvbuf, slot.result.data(), slot.result.size());
    posted_->delivered = true;
  }
  comm_.drive_locked();
}

bool Allreduce::deliver_if_ready_locked(RoundInfo* info) {
  if (!posted_) fail(Errc::invalid_state, "no round outstanding: call pcoll_allreduce_start first");
  const uint64_t round = posted_->round;
  if (completed_ <= round) return false;
  const Completed& slot = ring_[round % ring_.size()];
  if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
  if (!posted_->delivered && posted_->recvbuf != nullptr && !slot.result.empty())
    std::memcpy(posted_->recvbuf, slot.result.data(), slot.result.size());
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

void Allreduce::wait_for_round(RoundInfo* info) {
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
    if (deliver_if_ready_locked(info)) return;
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
      comm_.sleep_locked(lock, std::chrono::milliseconds(std::clamp<int64_t>(timeout_.count() / 8, 1, 100)));
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

void Allreduce::flush(void* recvbuf, RoundInfo* info) {
  if (recvbuf == nullptr && config_.count > 0)
    invalid_argument("pcoll_allreduce_flush: recvbuf is NULL but count is " + std::to_string(config_.count));
  {
    std::lock_guard lock(comm_.engine_mutex());
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
    comm_.drive_locked();
  }
  wait_for_round(info);
}

void Allreduce::destroy() {
  // The contract (pcoll.h): destroy always frees the handle. A round still outstanding is
  // waited for first (its peers need this rank's part); then every rank's writes into
  // this handle's memory are fenced by a barrier before the memory is deregistered. On a
  // failed communicator there is nobody to wait for: the memory is released at once.
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
