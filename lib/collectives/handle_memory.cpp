// The memory of one handle: contributions, carry, results (handle_memory.hpp).
#include <collectives/handle_memory.hpp>

#include <algorithm>
#include <cstring>

#include <collectives/dtype.hpp>
#include <collectives/handle_spec.hpp>
#include <collectives/reduce_kernels.hpp>
#include <support/copy.hpp>
#include <support/error.hpp>

namespace pcoll {
namespace {

// Elements converted at a time when a result is handed over in place.
constexpr size_t kScratchElems = 16384;

// Carries accumulate sums for avg: the division by P happens once, in the result.
pcoll_op_t carry_op(pcoll_op_t op) { return op == PCOLL_OP_AVG ? PCOLL_OP_SUM : op; }

bool overlap(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return bytes != 0 && x < y + bytes && y < x + bytes;
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? UINT64_MAX : product;
}

uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t rounded_to_line(uint64_t bytes) { return bytes > UINT64_MAX - 63 ? UINT64_MAX : (bytes + 63) / 64 * 64; }

}  // namespace

uint64_t HandleMemory::footprint(const HandleSpec& spec, int ranks, size_t landing_elems, size_t counter_words) {
  const uint64_t acc = wire_element_bytes(spec.dtype);
  const uint64_t flag_words = RoundFlags(ranks, acc).words();
  const uint64_t work = rounded_to_line(saturating_mul(saturating_add(spec.count, flag_words), acc));
  const uint64_t landing = rounded_to_line(saturating_mul(landing_elems, acc));
  const uint64_t scratch = saturating_mul(std::min<uint64_t>(spec.count, kScratchElems), acc);
  // An elastic handle keeps a contribution (accumulation type) and a result (user type).
  const uint64_t elastic = spec.opts.elastic != 0 ? saturating_mul(spec.count, acc + element_bytes(spec.dtype)) : 0;
  return saturating_add(saturating_add(saturating_add(work, landing), elastic),
                        saturating_add(saturating_mul(counter_words, 8), scratch));
}

HandleMemory::HandleMemory(transport::Transport& transport, const HandleSpec& spec, int rank, int ranks,
                           size_t landing_elems, size_t counter_words, WriteSettler& settler)
    : spec_(spec), rank_(rank), ranks_(ranks), settler_(settler), flags_(ranks, wire_element_bytes(spec.dtype)) {
  acc_elem_bytes_ = wire_element_bytes(spec.dtype);
  user_elem_bytes_ = element_bytes(spec.dtype);
  total_elems_ = spec.count + flags_.words();
  // Registered: what peers write into, the work buffer and the landing pool (and what a
  // mode counts with). The carry and late callers' results need no registration.
  work_bytes_ = (acc_bytes(total_elems_) + 63) / 64 * 64;
  landing_bytes_ = (acc_bytes(landing_elems) + 63) / 64 * 64;
  region_ = transport.allocate(work_bytes_ + landing_bytes_ + counter_words * sizeof(uint64_t));
  // Room to hand a result over in place (recvbuf == sendbuf) a piece at a time.
  scratch_.resize(acc_bytes(std::min(spec.count, kScratchElems)));
  ring_.resize(static_cast<size_t>(spec.opts.max_lag) + 2);
  late_by_round_.assign(ring_.size(), false);
}

void HandleMemory::contribute(const void* sendbuf, bool fresh, bool initiated, bool flush) {
  settler_.settle_writes_from_work();
  std::byte* acc = work();
  const size_t count = spec_.count;
  if (sendbuf != nullptr) {
    if (carry_in_work_) {
      reduce_user_into(spec_.dtype, carry_op(spec_.op), acc, sendbuf, count);
      traffic_ += folded_into_acc(count);
    } else {
      to_accumulator(spec_.dtype, sendbuf, acc, count);
      traffic_ += into_acc(count);
    }
  } else if (!carry_in_work_) {
    fill_identity(spec_.dtype, spec_.op, acc, count);
    traffic_ += acc_bytes(count);
  }
  if (!spill_.empty()) {
    reduce_into(spec_.dtype, spec_.op, acc, spill_.data(), count);
    traffic_ += 3 * acc_bytes(count);
    std::vector<std::byte>().swap(spill_);
  }
  carry_in_work_ = false;
  holds_ = Holds::round;
  early_delivered_ = 0;
  // What resume carries if this round never completes anywhere (late = drop carries nothing).
  if (spec_.opts.elastic != 0 && spec_.opts.late != PCOLL_LATE_DROP) {
    joined_contribution_.resize(acc_bytes(count));
    copy_bytes(joined_contribution_.data(), acc, acc_bytes(count));
    traffic_ += 2 * acc_bytes(count);
  }
  // A flush names itself in the flush words: a round some ranks flush and others run is a
  // mismatch (Allreduce::fill_info).
  flags_.write(acc + acc_bytes(count), rank_, fresh, initiated, flush);
  traffic_ += acc_bytes(flags_.words());
}

void HandleMemory::deliver_early(void* recvbuf, const void* pending_late, size_t first, size_t elems) {
  if (recvbuf == nullptr) return;
  // A late sendbuf in the same memory still has to go into the carry at completion.
  if (pending_late != nullptr && overlap(pending_late, recvbuf, user_elem_bytes_ * spec_.count)) return;
  if (first >= spec_.count) return;  // the flag elements stay in the work buffer
  const size_t n = std::min(elems, spec_.count - first);
  from_accumulator(spec_.dtype, spec_.op, ranks_, work() + acc_bytes(first),
                   static_cast<std::byte*>(recvbuf) + user_elem_bytes_ * first, n);
  traffic_ += out_of_acc(n);
  early_delivered_ += n;
}

void HandleMemory::hand_over_result(void* recvbuf, const void* late_sendbuf) {
  const size_t count = spec_.count;
  if (spec_.opts.late == PCOLL_LATE_DROP) late_sendbuf = nullptr;
  auto* out = static_cast<std::byte*>(recvbuf);
  const auto* in = static_cast<const std::byte*>(late_sendbuf);
  if (late_sendbuf != nullptr && count > 0) settler_.settle_writes_from_work();  // the carry overwrites it
  const bool convert = out != nullptr && early_delivered_ != count;
  if (late_sendbuf == nullptr || count == 0) {
    if (convert) from_accumulator(spec_.dtype, spec_.op, ranks_, work(), out, count);
    traffic_ += convert ? out_of_acc(count) : 0;
  } else if (!overlap(in, out, user_elem_bytes_ * count)) {
    if (convert) from_accumulator(spec_.dtype, spec_.op, ranks_, work(), out, count);
    to_accumulator(spec_.dtype, late_sendbuf, work(), count);
    traffic_ += (convert ? out_of_acc(count) : 0) + into_acc(count);
  } else {
    const size_t piece = scratch_.size() / acc_elem_bytes_;
    for (size_t first = 0; first < count; first += piece) {
      const size_t n = std::min(piece, count - first);
      to_accumulator(spec_.dtype, in + user_elem_bytes_ * first, scratch_.data(), n);
      from_accumulator(spec_.dtype, spec_.op, ranks_, work() + acc_bytes(first), out + user_elem_bytes_ * first, n);
      copy_bytes(work() + acc_bytes(first), scratch_.data(), acc_bytes(n));
      traffic_ += into_acc(n) + out_of_acc(n) + 2 * acc_bytes(n);
    }
  }
  carry_in_work_ = late_sendbuf != nullptr && count > 0;
  holds_ = Holds::carry;
}

void HandleMemory::move_result_out(uint64_t round) {
  Completed& slot = completed(round);
  slot.result.resize(user_elem_bytes_ * spec_.count);
  from_accumulator(spec_.dtype, spec_.op, ranks_, work(), slot.result.data(), spec_.count);
  traffic_ += out_of_acc(spec_.count);
  carry_in_work_ = false;
  holds_ = Holds::carry;
}

void HandleMemory::hand_over_moved(uint64_t round, void* recvbuf, const void* late_sendbuf) {
  Completed& moved = completed(round);
  if (moved.result.size() != user_elem_bytes_ * spec_.count)
    fail(Errc::internal, "result of round " + std::to_string(round) + " is neither buffered nor in the work buffer");
  add_to_carry(late_sendbuf);  // first: recvbuf may be the sendbuf
  if (recvbuf != nullptr && !moved.result.empty()) {
    copy_bytes(recvbuf, moved.result.data(), moved.result.size());
    traffic_ += 2 * moved.result.size();
  }
  std::vector<std::byte>().swap(moved.result);
}

void HandleMemory::add_to_carry(const void* sendbuf) {
  if (spec_.opts.late == PCOLL_LATE_DROP || spec_.count == 0) return;
  const size_t count = spec_.count;
  if (holds_ == Holds::carry) {
    settler_.settle_writes_from_work();
    if (carry_in_work_) reduce_user_into(spec_.dtype, carry_op(spec_.op), work(), sendbuf, count);
    else to_accumulator(spec_.dtype, sendbuf, work(), count);
    traffic_ += carry_in_work_ ? folded_into_acc(count) : into_acc(count);
    carry_in_work_ = true;
    return;
  }
  if (spill_.empty()) {
    spill_.resize(acc_bytes(count));
    to_accumulator(spec_.dtype, sendbuf, spill_.data(), count);
    traffic_ += into_acc(count);
  } else {
    reduce_user_into(spec_.dtype, carry_op(spec_.op), spill_.data(), sendbuf, count);
    traffic_ += folded_into_acc(count);
  }
}

void HandleMemory::round_completed() {
  holds_ = Holds::result;
  if (spec_.opts.elastic == 0) return;
  last_result_.resize(user_elem_bytes_ * spec_.count);
  from_accumulator(spec_.dtype, spec_.op, ranks_, work(), last_result_.data(), spec_.count);
  traffic_ += out_of_acc(spec_.count);
}

std::vector<std::byte> HandleMemory::carry_for_resume(bool active_round) const {
  std::vector<std::byte> carry;
  if (spec_.opts.late == PCOLL_LATE_DROP || spec_.count == 0) return carry;
  const size_t bytes = acc_bytes(spec_.count);
  if (active_round && joined_contribution_.size() == bytes) carry = joined_contribution_;
  else if (!active_round && holds_ == Holds::carry && carry_in_work_) carry.assign(work(), work() + bytes);
  if (!spill_.empty()) {
    if (carry.empty()) carry = spill_;
    else reduce_into(spec_.dtype, carry_op(spec_.op), carry.data(), spill_.data(), spec_.count);
  }
  return carry;
}

void HandleMemory::fold_into(std::vector<std::byte>& carry, const void* sendbuf) const {
  if (spec_.opts.late == PCOLL_LATE_DROP || spec_.count == 0 || sendbuf == nullptr) return;
  if (carry.empty()) {
    carry.resize(acc_bytes(spec_.count));
    to_accumulator(spec_.dtype, sendbuf, carry.data(), spec_.count);
  } else {
    reduce_user_into(spec_.dtype, carry_op(spec_.op), carry.data(), sendbuf, spec_.count);
  }
}

void HandleMemory::install_carry(const std::vector<std::byte>& carry) {
  holds_ = Holds::carry;
  carry_in_work_ = false;
  if (carry.empty()) return;
  if (carry.size() != acc_bytes(spec_.count)) fail(Errc::internal, "a resumed carry of the wrong size");
  copy_bytes(work(), carry.data(), carry.size());
  carry_in_work_ = true;
}

void HandleMemory::install_result(uint64_t round, const RoundInfo& info, std::vector<std::byte> result) {
  if (result.size() != user_elem_bytes_ * spec_.count) fail(Errc::internal, "a resumed result of the wrong size");
  Completed& slot = completed(round);
  slot.round = round;
  slot.info = info;
  slot.result = std::move(result);
  set_late(round, info.caller_late);
}

void HandleMemory::install_last_result(uint64_t round, std::vector<std::byte> result, const RoundInfo& info) {
  last_result_ = std::move(result);
  Completed& slot = completed(round);
  if (slot.round == round) return;  // installed with its result (not collected yet)
  slot.round = round;
  slot.info = info;
  set_late(round, info.caller_late);
}

uint64_t HandleMemory::memory_bytes() const {
  uint64_t bytes = registered_bytes() + scratch_.size() + spill_.capacity() + joined_contribution_.capacity() +
                   last_result_.capacity();
  for (const Completed& slot : ring_) bytes += slot.result.capacity();
  return bytes;
}

}  // namespace pcoll
