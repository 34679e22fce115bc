// The survivors' agreement on the failed set (docs/design.md, "Agreeing on the failed
// set"): after a failure, the live ranks of a communicator agree on one set of failed ranks,
// even when more ranks fail while they agree, as the first step of shrinking to a
// communicator of the survivors.
//
// A state machine: it owns no thread, clock or transport. Whoever drives it feeds it this
// rank's failure news (on_failed: a rank named failed by this rank's failure detector or a
// peer's failure notice, which every live rank then hears), the messages of its peers, and
// sends what it asks for through its Sink; it pings the ranks awaited() names, so that a
// rank that dies while it is waited on is named. Tests drive it with a simulated network
// (tests/unit/test_survivor_agreement.cpp).
//
// The protocol, in ballots numbered by coordinator rank: a rank's coordinator is the lowest
// rank it does not know to have failed, which only grows. Every rank proposes to its
// coordinator the ranks it knows to have failed and the last decision it accepted; the
// coordinator waits for a proposal from every rank it does not know to have failed, then
// decides: the decision with the highest ballot any proposal carries (one that may have
// been committed), else the union of what they know. It sends the decision, waits for an
// acknowledgement from every live rank outside it, and then commits it. A rank accepts a
// decision only from its current coordinator, and commits on the commit of any. Ranks
// that committed answer later proposals and a new coordinator with the commit, so a rank
// that missed it, or a coordinator that took over, learns the same set. Once committed, a
// set that holds a rank that has since died stays the answer (the next failure shrinks
// again); a rank inside the set, alive, learns from the commit that it was excluded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

namespace pcoll {

struct SurvivorMessage {
  enum class Kind : uint8_t { propose, decide, ack, commit };
  Kind kind = Kind::propose;
  uint32_t epoch = 0;   // which shrink of the communicator's line this belongs to
  int ballot = -1;      // the coordinator's rank
  // propose: the ranks the sender knows to have failed; decide, commit: the decision.
  std::vector<int> failed;
  // propose only: the decision the sender accepted last (ballot -1: none).
  int accepted_ballot = -1;
  std::vector<int> accepted;
};

// The message as bytes (little-endian): epoch u32, kind u8, three zero bytes, ballot i32,
// accepted_ballot i32, the two lists' lengths u32 each, then their ranks as i32. decode
// throws Error(Errc::protocol) naming what is wrong for a peer's bytes that are not such a
// message of a job of `size` ranks (lists ascending, ranks in range, lengths that fit).
std::vector<std::byte> encode(const SurvivorMessage& message);
SurvivorMessage decode_survivor_message(std::span<const std::byte> bytes, int size, int sender);

class SurvivorAgreement {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void send(int peer, const SurvivorMessage& message) = 0;
  };

  SurvivorAgreement(int rank, int size, uint32_t epoch, Sink& sink);

  // Begins with the ranks this rank knows to have failed (Comm::failed_ranks).
  void start(const std::vector<int>& failed);
  // `peer` was named failed (this rank's detection, or a peer's notice); this rank itself
  // when another rank named it: it is then excluded and takes no further part.
  void on_failed(int peer);
  // A peer's message. Messages of another epoch, or that make no sense here (a rank out of
  // range, a ballot that is not the sender's), are ignored.
  void on_message(int from, const SurvivorMessage& message);

  // The ranks this rank waits on now (to be pinged, so that a dead one is named).
  std::vector<int> awaited() const;
  // The agreed failed set, ascending, once committed here.
  const std::optional<std::vector<int>>& decided() const { return decided_; }
  // Named failed by another rank, or inside the agreed set: this rank is not a survivor.
  bool excluded() const { return excluded_; }
  int coordinator() const;

 private:
  struct Proposal {
    std::vector<int> failed;
    int accepted_ballot = -1;
    std::vector<int> accepted;
  };
  enum class Phase { collecting, deciding };

  void on_proposal(int from, const SurvivorMessage& message);
  void step();
  // Commits `failed`; a coordinator tells every rank that may wait on it, a rank told by
  // `told_by` tells only a later coordinator (step()).
  void commit(const std::vector<int>& failed, bool tell_everyone, int told_by = -1);
  void send(int peer, SurvivorMessage message);
  bool alive(int r) const { return !failed_[static_cast<size_t>(r)]; }
  std::vector<int> known_failed() const;
  bool valid(const std::vector<int>& ranks) const;

  int rank_;
  int size_;
  uint32_t epoch_;
  Sink& sink_;
  bool started_ = false;
  bool excluded_ = false;
  std::vector<bool> failed_;   // [rank]: known to have failed
  // The participant's side.
  int proposed_to_ = -1;       // the coordinator this rank last proposed to
  int accepted_ballot_ = -1;
  std::vector<int> accepted_;
  std::optional<std::vector<int>> decided_;
  int told_coordinator_ = -1;  // after deciding: the coordinator that knows our commit
  std::vector<std::pair<int, SurvivorMessage>> early_;   // arrived before start()
  // The coordinator's side (coordinator() == rank_).
  Phase phase_ = Phase::collecting;
  std::vector<std::optional<Proposal>> proposals_;   // [rank], this ballot's
  std::vector<int> deciding_;                        // the decision sent, in phase deciding
  std::set<int> acks_;
};

}  // namespace pcoll
