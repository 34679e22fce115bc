// The survivors' agreement on the failed set (survivor_agreement.hpp).
#include <collectives/survivor_agreement.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include <support/error.hpp>

namespace pcoll {

namespace {

bool holds(const std::vector<int>& ranks, int r) { return std::binary_search(ranks.begin(), ranks.end(), r); }

// The first entry of `ranks` that is not a rank of a job of `size` above the one before it,
// or -1 when the list is ascending and in range.
std::ptrdiff_t misplaced(const std::vector<int>& ranks, int size) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1])) return static_cast<std::ptrdiff_t>(i);
  return -1;
}

constexpr size_t kHeadBytes = 4 + 4 + 4 + 4 + 4 + 4;

template <typename T>
void put(std::vector<std::byte>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof value);
  std::memcpy(out.data() + at, &value, sizeof value);
}

template <typename T>
T take(std::span<const std::byte> bytes, size_t& at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  at += sizeof value;
  return value;
}

}  // namespace

std::vector<std::byte> encode(const SurvivorMessage& message) {
  std::vector<std::byte> out;
  out.reserve(kHeadBytes + 4 * (message.failed.size() + message.accepted.size()));
  put<uint32_t>(out, message.epoch);
  put<uint32_t>(out, static_cast<uint32_t>(message.kind));
  put<int32_t>(out, message.ballot);
  put<int32_t>(out, message.accepted_ballot);
  put<uint32_t>(out, static_cast<uint32_t>(message.failed.size()));
  put<uint32_t>(out, static_cast<uint32_t>(message.accepted.size()));
  for (const int r : message.failed) put<int32_t>(out, r);
  for (const int r : message.accepted) put<int32_t>(out, r);
  return out;
}

SurvivorMessage decode_survivor_message(std::span<const std::byte> bytes, int size, int sender) {
  const std::string from = "rank " + std::to_string(sender) + "'s survivor agreement message";
  if (bytes.size() < kHeadBytes)
    fail(Errc::protocol, from + " has " + std::to_string(bytes.size()) + " bytes, fewer than its " +
                             std::to_string(kHeadBytes) + "-byte head");
  size_t at = 0;
  SurvivorMessage message;
  message.epoch = take<uint32_t>(bytes, at);
  const auto kind = take<uint32_t>(bytes, at);
  if (kind > static_cast<uint32_t>(SurvivorMessage::Kind::commit))
    fail(Errc::protocol, from + " is of kind " + std::to_string(kind) + ", which is none (0-3)");
  message.kind = static_cast<SurvivorMessage::Kind>(kind);
  message.ballot = take<int32_t>(bytes, at);
  message.accepted_ballot = take<int32_t>(bytes, at);
  const auto failed = take<uint32_t>(bytes, at);
  const auto accepted = take<uint32_t>(bytes, at);
  if (message.ballot < 0 || message.ballot >= size || message.accepted_ballot < -1 || message.accepted_ballot >= size)
    fail(Errc::protocol, from + " names ballot " + std::to_string(message.ballot) + " and accepted ballot " +
                             std::to_string(message.accepted_ballot) + " in a job of " + std::to_string(size));
  if (failed > static_cast<uint32_t>(size) || accepted > static_cast<uint32_t>(size) ||
      bytes.size() != kHeadBytes + 4 * (static_cast<size_t>(failed) + accepted))
    fail(Errc::protocol, from + " lists " + std::to_string(failed) + " and " + std::to_string(accepted) + " ranks in " +
                             std::to_string(bytes.size()) + " bytes, in a job of " + std::to_string(size));
  for (auto* list : {&message.failed, &message.accepted}) {
    const uint32_t n = list == &message.failed ? failed : accepted;
    for (uint32_t i = 0; i < n; ++i) list->push_back(take<int32_t>(bytes, at));
    if (const std::ptrdiff_t bad = misplaced(*list, size); bad >= 0)
      fail(Errc::protocol, from + " lists rank " + std::to_string((*list)[static_cast<size_t>(bad)]) +
                               " out of order or outside a job of " + std::to_string(size));
  }
  return message;
}

SurvivorAgreement::SurvivorAgreement(int rank, int size, uint32_t epoch, Sink& sink)
    : rank_(rank), size_(size), epoch_(epoch), sink_(sink), failed_(static_cast<size_t>(size), false),
      proposals_(static_cast<size_t>(size)) {}

int SurvivorAgreement::coordinator() const {
  for (int r = 0; r < size_; ++r)
    if (alive(r)) return r;
  return -1;
}

std::vector<int> SurvivorAgreement::known_failed() const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r)
    if (!alive(r)) ranks.push_back(r);
  return ranks;
}

bool SurvivorAgreement::valid(const std::vector<int>& ranks) const { return misplaced(ranks, size_) < 0; }

void SurvivorAgreement::send(int peer, SurvivorMessage message) {
  message.epoch = epoch_;
  sink_.send(peer, message);
}

void SurvivorAgreement::start(const std::vector<int>& failed) {
  if (started_) return;
  started_ = true;
  for (const int r : failed)
    if (r >= 0 && r < size_) failed_[static_cast<size_t>(r)] = true;
  if (!alive(rank_)) excluded_ = true;
  std::vector<std::pair<int, SurvivorMessage>> early;
  early.swap(early_);
  step();
  for (const auto& [from, message] : early) on_message(from, message);
}

void SurvivorAgreement::on_failed(int peer) {
  if (peer < 0 || peer >= size_ || failed_[static_cast<size_t>(peer)]) return;
  failed_[static_cast<size_t>(peer)] = true;
  if (peer == rank_ && !decided_) excluded_ = true;
  step();
}

void SurvivorAgreement::on_message(int from, const SurvivorMessage& message) {
  if (from < 0 || from >= size_ || from == rank_ || message.epoch != epoch_ || !valid(message.failed)) return;
  if (!started_) {
    early_.emplace_back(from, message);  // replayed by start()
    return;
  }
  using Kind = SurvivorMessage::Kind;
  switch (message.kind) {
    case Kind::commit:
      if (!decided_ && !excluded_) commit(message.failed, coordinator() == rank_, from);
      return;
    case Kind::propose:
      on_proposal(from, message);
      return;
    case Kind::decide:
      if (message.ballot != from || decided_ || excluded_ || coordinator() != from) return;
      accepted_ballot_ = from;
      accepted_ = message.failed;
      {
        SurvivorMessage ack;
        ack.kind = Kind::ack;
        ack.ballot = from;
        send(from, ack);
      }
      return;
    case Kind::ack:
      if (message.ballot != rank_ || phase_ != Phase::deciding || decided_ || excluded_ || coordinator() != rank_) return;
      acks_.insert(from);
      step();
      return;
  }
}

void SurvivorAgreement::on_proposal(int from, const SurvivorMessage& message) {
  using Kind = SurvivorMessage::Kind;
  if (message.accepted_ballot >= size_ || (message.accepted_ballot >= 0 && !valid(message.accepted))) return;
  if (decided_) {
    // Whoever still proposes missed the commit: it gets ours.
    SurvivorMessage answer;
    answer.kind = Kind::commit;
    answer.ballot = rank_;
    answer.failed = *decided_;
    send(from, answer);
    return;
  }
  if (excluded_) return;
  // What the proposer knows to have failed is failed: every live rank hears of it.
  for (const int r : message.failed) failed_[static_cast<size_t>(r)] = true;
  if (!alive(rank_)) {
    excluded_ = true;
    return;
  }
  if (message.ballot != rank_) {
    step();
    return;
  }
  proposals_[static_cast<size_t>(from)] =
      Proposal{message.failed, message.accepted_ballot, message.accepted_ballot >= 0 ? message.accepted : std::vector<int>{}};
  if (phase_ == Phase::deciding && alive(from) && !holds(deciding_, from)) {
    // A rank that proposes again after the decision went out gets it again.
    SurvivorMessage decision;
    decision.kind = Kind::decide;
    decision.ballot = rank_;
    decision.failed = deciding_;
    send(from, decision);
  }
  step();
}

void SurvivorAgreement::commit(const std::vector<int>& failed, bool tell_everyone, int told_by) {
  decided_ = failed;
  if (holds(failed, rank_)) excluded_ = true;
  SurvivorMessage message;
  message.kind = SurvivorMessage::Kind::commit;
  message.ballot = rank_;
  message.failed = failed;
  if (tell_everyone) {
    // Every rank that may wait on this one: the live ones and those that proposed to it.
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && (alive(r) || proposals_[static_cast<size_t>(r)])) send(r, message);
  }
  told_coordinator_ = tell_everyone ? rank_ : told_by;
  step();
}

void SurvivorAgreement::step() {
  if (!started_) return;
  const int c = coordinator();
  if (decided_) {
    // A coordinator that takes over after this rank committed learns the commit from it.
    if (c >= 0 && c != rank_ && c != told_coordinator_) {
      told_coordinator_ = c;
      SurvivorMessage message;
      message.kind = SurvivorMessage::Kind::commit;
      message.ballot = rank_;
      message.failed = *decided_;
      send(c, message);
    }
    return;
  }
  if (excluded_ || c < 0) return;
  if (c != rank_) {
    if (proposed_to_ != c) {
      proposed_to_ = c;
      SurvivorMessage proposal;
      proposal.kind = SurvivorMessage::Kind::propose;
      proposal.ballot = c;
      proposal.failed = known_failed();
      proposal.accepted_ballot = accepted_ballot_;
      proposal.accepted = accepted_;
      send(c, proposal);
    }
    return;
  }
  if (phase_ == Phase::collecting) {
    proposals_[static_cast<size_t>(rank_)] = Proposal{known_failed(), accepted_ballot_, accepted_};
    for (int r = 0; r < size_; ++r)
      if (alive(r) && !proposals_[static_cast<size_t>(r)]) return;
    // The decision a past coordinator may have committed, else what everyone knows.
    int best = -1;
    std::vector<int> choice = known_failed();
    for (int r = 0; r < size_; ++r) {
      const auto& p = proposals_[static_cast<size_t>(r)];
      if (alive(r) && p && p->accepted_ballot > best) {
        best = p->accepted_ballot;
        choice = p->accepted;
      }
    }
    phase_ = Phase::deciding;
    deciding_ = choice;
    accepted_ballot_ = rank_;
    accepted_ = choice;
    acks_.clear();
    SurvivorMessage decision;
    decision.kind = SurvivorMessage::Kind::decide;
    decision.ballot = rank_;
    decision.failed = choice;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && alive(r) && !holds(choice, r)) send(r, decision);
  }
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && alive(r) && !holds(deciding_, r) && !acks_.count(r)) return;
  commit(deciding_, true);
}

std::vector<int> SurvivorAgreement::awaited() const {
  std::vector<int> ranks;
  if (!started_ || excluded_ || decided_) return ranks;
  const int c = coordinator();
  if (c != rank_) {
    if (c >= 0) ranks.push_back(c);
    return ranks;
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !alive(r)) continue;
    if (phase_ == Phase::collecting ? !proposals_[static_cast<size_t>(r)]
                                    : !holds(deciding_, r) && !acks_.count(r))
      ranks.push_back(r);
  }
  return ranks;
}

}  // namespace pcoll
