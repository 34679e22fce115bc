// Matching the collective calls of the ranks (call_match.hpp).
#include <collectives/call_match.hpp>

#include <algorithm>

#include <collectives/notification.hpp>

namespace pcoll {
namespace {

const char* kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::none: return "no collective call";
    case CallKind::create: return "create";
    case CallKind::destroy: return "destroy";
    case CallKind::barrier: return "barrier";
    case CallKind::finalize: return "finalize";
    case CallKind::clock_sample: return "the clock sample of creating traced handle";
    case CallKind::resume: return "resume";
  }
  return "an unknown collective call";
}

std::string rounds_text(uint64_t rounds) { return std::to_string(rounds) + (rounds == 1 ? " round" : " rounds"); }

std::string rank_text(int rank) { return "rank " + std::to_string(rank); }

// The same call apart from the rounds (a destroy's rounds are compared on their own).
bool same_call(const CallHeader& a, const CallHeader& b) { return a.kind == b.kind && a.handle == b.handle; }

std::optional<std::string> table_mismatch(int self, int other, const CallRecord& mine, const CallRecord& theirs) {
  const size_t slots = std::max(mine.table.size(), theirs.table.size());
  for (size_t slot = 0; slot < slots; ++slot) {
    const RoundsEntry a = slot < mine.table.size() ? mine.table[slot] : RoundsEntry{};
    const RoundsEntry b = slot < theirs.table.size() ? theirs.table[slot] : RoundsEntry{};
    if (a.handle == b.handle && a.rounds_low == b.rounds_low) continue;
    const std::string call = describe_call(mine.header);
    if (a.handle != b.handle) {
      const uint32_t handle = a.handle != RoundsEntry::kNoHandle ? a.handle : b.handle;
      const bool self_has = a.handle == handle;
      return rank_text(self_has ? other : self) + " called " + call + " without handle " + std::to_string(handle) +
             ", which " + rank_text(self_has ? self : other) + " has (create or destroy calls differ)";
    }
    return rank_text(other) + " called " + call + " after posting " + rounds_text(b.rounds_low) + " (run or flush) of handle " +
           std::to_string(a.handle) + " while " + rank_text(self) + " called it after " + rounds_text(a.rounds_low);
  }
  return std::nullopt;
}

}  // namespace

std::string describe_call(const CallHeader& header) {
  std::string text = kind_name(header.kind);
  if (header.kind == CallKind::create || header.kind == CallKind::destroy || header.kind == CallKind::clock_sample ||
      header.kind == CallKind::resume)
    text += " of handle " + std::to_string(header.handle);
  if (header.kind == CallKind::destroy) text += " after " + rounds_text(header.rounds);
  return text;
}

std::optional<uint64_t> rounds_in(const RoundsTable& table, uint32_t handle, uint64_t reference) {
  for (const RoundsEntry& entry : table)
    if (entry.handle == handle) return NoticeCodec::widen(entry.rounds_low, 32, reference);
  return std::nullopt;
}

std::optional<std::string> agreement_mismatch(int self, std::span<const CallRecord> records) {
  const CallRecord& mine = records[static_cast<size_t>(self)];
  for (size_t r = 0; r < records.size(); ++r) {
    const int other = static_cast<int>(r);
    if (other == self) continue;
    const CallRecord& theirs = records[r];
    if (!same_call(theirs.header, mine.header) || theirs.header.rounds != mine.header.rounds)
      return rank_text(other) + " called " + describe_call(theirs.header) + " while " + rank_text(self) + " called " +
             describe_call(mine.header);
  }
  // Survivors come out of a failure at different rounds of their handles (the call the
  // failure interrupted, docs/design.md "Resuming a handle"): resume compares calls only.
  if (mine.header.kind == CallKind::resume) return std::nullopt;
  for (size_t r = 0; r < records.size(); ++r) {
    if (static_cast<int>(r) == self) continue;
    if (auto found = table_mismatch(self, static_cast<int>(r), mine, records[r])) return found;
  }
  return std::nullopt;
}

std::optional<std::string> waiting_round_mismatch(int self, uint32_t handle, uint64_t round, bool flush, int peer,
                                                  const CallRecord& theirs) {
  const std::optional<uint64_t> posted = rounds_in(theirs.table, handle, round);
  // The peer posted this round before its agreement: it joins the round, which completes.
  if (posted && *posted > round) return std::nullopt;
  return rank_text(peer) + " called " + describe_call(theirs.header) + " while " + rank_text(self) + " called " +
         (flush ? "flush" : "run") + " of handle " + std::to_string(handle) + " (round " + std::to_string(round) + ")" +
         (posted ? "" : ", a handle that " + rank_text(peer) + " does not have");
}

}  // namespace pcoll
