// Resuming an elastic handle on the survivors of a failure (allreduce.hpp, Allreduce::resume;
// docs/design.md, "Resuming a handle").
//
// Every rank of an allreduce contributes to every round, so a round that completed on any
// rank holds the contribution of every rank, survivors included. Survivors are at most one
// round apart: a rank completes round t only once every rank joined it, so every rank has
// completed t - 1. With C the most rounds any survivor completed (R = C - 1 the last round),
// a survivor that completed C - 1 rounds (it joined round C - 1, whose result it lacks) gets
// that result from the lowest survivor that has it; the round C that a survivor may have
// joined completed nowhere, so its contribution goes back into the carry. Nothing of the old
// handle is changed until every collective step succeeded: a second failure leaves it as
// it was, to be resumed again.
#include <collectives/allreduce.hpp>

#include <algorithm>
#include <cstring>
#include <optional>

#include <collectives/comm.hpp>
#include <collectives/dtype.hpp>
#include <collectives/mode_table.hpp>
#include <support/copy.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {
namespace {

// One survivor's part of the resume agreement.
struct ResumeRecord {
  uint64_t old_handle = 0;  // the handle's id on the old communicator
  uint64_t old_size = 0;    // the old communicator's size
  uint64_t completed = 0;   // rounds completed there
  uint64_t joined = 0;      // rounds joined there
  int64_t last_initiator = -1;  // the last completed round's info, when completed > 0
  int64_t last_fresh = 0;
};

// The steps of the resume agreement (CallHeader::rounds), so that a rank one step behind
// is a mismatch, never a blob read as another step's.
enum ResumeStep : uint64_t { kRecords = 1, kResultLanded = 2, kInstalled = 3 };

size_t mask_words(uint64_t ranks) { return static_cast<size_t>((ranks + 63) / 64); }

}  // namespace

Allreduce::Resumed Allreduce::resume(Allreduce& old, Comm& survivors, void* recvbuf) {
  // Misuse is refused before anything collective: every survivor that makes the same call
  // refuses it alike (a survivor that resumes while another does not is named by the
  // others' timeout).
  std::string problem;
  if (old.spec_.opts.elastic == 0)
    problem = "handle " + std::to_string(old.id_) + " was created without opts.elastic = 1, so it kept nothing to "
              "resume from; create it again on the survivors' communicator instead";
  else if (!survivors.shrunk_from(old.comm_.serial()))
    problem = "the communicator passed was not made by pcoll_comm_shrink from handle " + std::to_string(old.id_) +
              "'s communicator (or from the survivors of its survivors)";
  else if (recvbuf == nullptr && old.spec_.count > 0)
    problem = "recvbuf is NULL but count is " + std::to_string(old.spec_.count);
  if (!problem.empty()) invalid_argument(problem);

  // What the old handle holds that resume needs, read under its communicator's lock (its
  // engine stands still: the communicator failed).
  std::optional<Posted> posted;
  const void* pending_late = nullptr;
  uint64_t app_next = 0;
  ResumeRecord mine;
  {
    std::lock_guard lock(old.comm_.engine_mutex());
    posted = old.posted_;
    pending_late = old.pending_late_;
    app_next = old.app_next_;
    mine.old_handle = old.id_;
    mine.old_size = static_cast<uint64_t>(old.size_);
    mine.completed = old.completed_;
    mine.joined = old.joined_;
    if (old.completed_ > 0) {
      const RoundInfo& last = old.memory_->completed(old.completed_ - 1).info;
      mine.last_initiator = last.initiator;
      mine.last_fresh = last.fresh;
    }
  }

  HandleSpec spec = old.spec_;
  find_mode(spec.mode)->fit_options(spec.opts, survivors.size());
  std::unique_ptr<Allreduce> made(new Allreduce(survivors, spec, {}, ForResume{}));
  Allreduce& fresh = *made;
  const auto step = [&](ResumeStep which, std::span<const std::byte> blob) {
    return survivors.agree(CallHeader{CallKind::resume, 0, fresh.id_, which}, blob, fresh.timeout_);
  };

  // 1. Where every survivor stands.
  std::vector<std::byte> blob(sizeof mine);
  std::memcpy(blob.data(), &mine, sizeof mine);
  const auto blobs = step(kRecords, blob);
  std::vector<ResumeRecord> records(blobs.size());
  for (size_t r = 0; r < blobs.size(); ++r) {
    if (blobs[r].size() != sizeof(ResumeRecord))
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent a malformed resume record");
    std::memcpy(&records[r], blobs[r].data(), sizeof(ResumeRecord));
  }
  uint64_t rounds = 0;  // C: the most rounds any survivor completed
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].old_handle != mine.old_handle || records[r].old_size != mine.old_size)
      fail(Errc::mismatch, "rank " + std::to_string(r) + " resumed handle " + std::to_string(records[r].old_handle) +
                               " of a communicator of " + std::to_string(records[r].old_size) + " ranks while rank " +
                               std::to_string(survivors.rank()) + " resumed handle " + std::to_string(mine.old_handle) +
                               " of " + std::to_string(mine.old_size));
    rounds = std::max(rounds, records[r].completed);
  }
  int source = -1;  // the lowest survivor that completed round C - 1
  std::vector<int> behind;  // survivors that joined round C - 1 and did not complete it
  for (size_t r = 0; r < records.size(); ++r) {
    const ResumeRecord& record = records[r];
    if (record.completed == rounds && source < 0) source = static_cast<int>(r);
    if (record.completed == rounds) continue;
    if (record.completed + 1 != rounds || record.joined != rounds)
      fail(Errc::protocol, "rank " + std::to_string(r) + " completed " + std::to_string(record.completed) +
                               " rounds and joined " + std::to_string(record.joined) + " while another completed " +
                               std::to_string(rounds) + ": survivors cannot be more than one round apart");
    behind.push_back(static_cast<int>(r));
  }
  const bool lagging = std::find(behind.begin(), behind.end(), survivors.rank()) != behind.end();

  // 2. The result of round C - 1, from the source to the survivors that lack it, through
  // their new handle's registered memory: the result in the user's type, then its fresh mask.
  const size_t result_bytes = element_bytes(spec.dtype) * spec.count;
  const size_t mask_offset = (result_bytes + 7) / 8 * 8;
  const size_t words = mask_words(mine.old_size);
  std::vector<std::byte> last_result;
  RoundInfo last_info;
  if (!behind.empty()) {
    const ResumeRecord& from = records[static_cast<size_t>(source)];
    if (mask_offset + words * 8 > fresh.memory_->registered_bytes())
      fail(Errc::unsupported, "the result of round " + std::to_string(rounds - 1) + " and its fresh mask (" +
                                  std::to_string(mask_offset + words * 8) + " bytes) do not fit the resumed handle's " +
                                  std::to_string(fresh.memory_->registered_bytes()) + " registered bytes");
    if (survivors.rank() == source) {
      std::lock_guard lock(survivors.engine_mutex());
      std::byte* stage = fresh.memory_->work();
      {
        std::lock_guard old_lock(old.comm_.engine_mutex());
        const std::vector<std::byte>& kept = old.memory_->last_result();
        if (kept.size() != result_bytes) fail(Errc::internal, "an elastic handle kept no result to resume from");
        copy_bytes(stage, kept.data(), result_bytes);
        const std::vector<uint64_t>& mask = old.memory_->completed(rounds - 1).info.fresh_mask;
        std::vector<uint64_t> padded(words, 0);
        std::copy_n(mask.begin(), std::min(mask.size(), words), padded.begin());
        std::memcpy(stage + mask_offset, padded.data(), words * 8);
      }
      for (const int peer : behind)
        fresh.transport_.write(fresh.memory_->region(), 0, *fresh.peers_[static_cast<size_t>(peer)], 0,
                               mask_offset + words * 8);
      fresh.transport_.flush();
    }
    step(kResultLanded, {});
    if (lagging) {
      const std::byte* landed = fresh.memory_->work();
      last_result.assign(landed, landed + result_bytes);
      last_info.round = rounds - 1;
      last_info.initiator = static_cast<int>(from.last_initiator);
      last_info.fresh = static_cast<int>(from.last_fresh);
      last_info.fresh_mask.resize(words);
      std::memcpy(last_info.fresh_mask.data(), landed + mask_offset, words * 8);
    }
  }

  // 3. Settle this survivor's part, from the old handle's state (read, not changed).
  Resumed out;
  std::vector<std::byte> carry;
  std::vector<std::pair<uint64_t, std::pair<RoundInfo, std::vector<std::byte>>>> uncollected;
  {
    std::lock_guard old_lock(old.comm_.engine_mutex());
    HandleMemory& memory = *old.memory_;
    if (!lagging && rounds > 0) {
      last_result = memory.last_result();
      last_info = memory.completed(rounds - 1).info;
    } else if (lagging) {
      last_info.caller_late = memory.late(rounds - 1);
    }
    // The round this survivor joined and that completed nowhere goes back into the carry.
    const bool joined_unfinished = mine.joined > mine.completed && mine.completed == rounds;
    carry = memory.carry_for_resume(joined_unfinished);
    // A late sendbuf the application posted for the round the engine runs: as at its end.
    if (mine.joined > mine.completed && pending_late != nullptr) memory.fold_into(carry, pending_late);
    if (posted) {
      const uint64_t round = posted->round;
      if (round < rounds) {
        out.delivered = true;
        out.info = round + 1 == rounds ? last_info : memory.completed(round).info;
        if (posted->flush) out.info.caller_late = false;
        if (result_bytes > 0) {
          if (posted->delivered) {
            if (recvbuf != posted->recvbuf) std::memmove(recvbuf, posted->recvbuf, result_bytes);
          } else {
            copy_bytes(recvbuf, last_result.data(), result_bytes);
          }
        }
        app_next = round + 1;
      } else {
        // That round did not happen: its sendbuf is carried unless it is already, in the
        // round's contribution (posted in time) or as its late sendbuf (posted after the
        // engine joined); the application's next call is that round again.
        const bool carried = joined_unfinished && round == mine.completed;
        if (!posted->flush && !carried) memory.fold_into(carry, posted->sendbuf);
        app_next = round;
      }
    }
    for (uint64_t round = app_next; round < rounds; ++round) {
      if (round + 1 == rounds) {
        uncollected.push_back({round, {last_info, last_result}});
        continue;
      }
      const HandleMemory::Completed& slot = memory.completed(round);
      if (slot.round != round || slot.result.size() != result_bytes)
        fail(Errc::internal, "the result of round " + std::to_string(round) + " was not kept for resume");
      uncollected.push_back({round, {slot.info, slot.result}});
    }
  }

  // 4. The new handle starts at round C, with this carry and the results not yet collected.
  {
    std::lock_guard lock(survivors.engine_mutex());
    fresh.first_round_ = rounds;
    fresh.completed_ = rounds;
    fresh.joined_ = rounds;
    fresh.activated_ = rounds;
    fresh.policy_->begin_at(rounds);
    fresh.memory_->install_carry(carry);
    for (auto& [round, kept] : uncollected) fresh.memory_->install_result(round, kept.first, std::move(kept.second));
    if (!last_result.empty() && rounds > 0) {
      // What a later resume hands on if this handle fails before its next round completes.
      fresh.memory_->install_last_result(rounds - 1, std::move(last_result), last_info);
    }
  }
  // 5. Nobody starts round C before every survivor has its rounds set: a notice of round C
  // is read against them.
  step(kInstalled, {});
  {
    std::lock_guard lock(survivors.engine_mutex());
    fresh.app_next_ = app_next;
    fresh.ready_ = true;
  }
  log::info("resume: handle " + std::to_string(mine.old_handle) + " goes on as handle " + std::to_string(fresh.id_) +
            " of " + std::to_string(survivors.size()) + " ranks at round " + std::to_string(rounds) +
            (out.delivered ? "; the interrupted call's round was delivered" : ""));
  out.handle = std::move(made);
  return out;
}

}  // namespace pcoll
