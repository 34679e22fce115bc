// quorum: a round starts once k of the P ranks posted it (synchronous SGD with backup
// workers, decentralised), counted with one remote fetch-add per rank and round; with a
// grace, the first rank to post also starts it grace_us after it posted. A rank whose
// count says it starts nothing joins at once (joins_when_posted). docs/design.md,
// "Counting arrivals", says why the counters are laid out as they are.
#include <algorithm>
#include <string>

#include <collectives/mode_table.hpp>
#include <support/error.hpp>

namespace pcoll {
namespace {

constexpr uint32_t kMaxGraceUs = 60000000;

class QuorumPolicy final : public StartPolicy {
 public:
  explicit QuorumPolicy(const PolicyContext& context)
      : StartPolicy(context),
        // Round t's counter lives on rank t mod P, in word (t / P) mod W; W rounds of a rank
        // share nothing while one is still counted.
        words_((static_cast<size_t>(context.opts.max_lag) + 2 + static_cast<size_t>(context.size) - 1) /
               static_cast<size_t>(context.size)) {}

  bool starts(uint64_t round, PolicyClock::time_point now) override {
    return reached_ == round || (grace_round_ == round && now >= grace_deadline_);
  }
  bool starts_by_time(uint64_t round) const override { return reached_ != round && grace_round_ == round; }

  // Its arrival was counted, was not the k-th and runs no grace: it will not start the round.
  bool joins_when_posted(uint64_t round) const override {
    return counted_ == round && reached_ != round && grace_round_ != round;
  }

  size_t counter_words() const override { return words_; }
  void begin_at(uint64_t round) override { first_round_ = round; }

  std::optional<ArrivalCounter> arrival_counter(uint64_t round) const override {
    const auto ranks = static_cast<uint64_t>(context().size);
    const uint64_t counted = round - first_round_;  // the counters start at zero here
    const uint64_t uses = counted / ranks;  // rounds hosted by that rank before this one
    return ArrivalCounter{static_cast<int>(counted % ranks), static_cast<size_t>(uses % words_),
                          ranks * (uses / words_)};
  }

  uint64_t arrival_counted(uint64_t round, uint64_t old, bool counts, PolicyClock::time_point now) override {
    const auto ranks = static_cast<uint64_t>(context().size);
    const ArrivalCounter counter = *arrival_counter(round);
    if (old < counter.before || old - counter.before >= ranks)
      fail(Errc::protocol, "the arrival counter of round " + std::to_string(round) + " of handle " +
                               std::to_string(context().handle) + " on rank " + std::to_string(counter.host) +
                               " reads " + std::to_string(old) + ", outside " + std::to_string(counter.before) +
                               ".." + std::to_string(counter.before + ranks - 1));
    const uint64_t arrived = old - counter.before + 1;
    if (!counts) return arrived;
    counted_ = round;
    const uint32_t quorum = context().opts.quorum;
    if (arrived == quorum) reached_ = round;
    if (arrived == 1 && context().opts.grace_us > 0 && arrived < quorum) {
      grace_round_ = round;
      grace_deadline_ = now + std::chrono::microseconds(context().opts.grace_us);
    }
    return arrived;
  }

  std::optional<PolicyClock::time_point> deadline(uint64_t next_round, uint64_t activated,
                                                  PolicyClock::time_point now) const override {
    // Once the grace has passed, the round starts at the engine's next move (starts()).
    if (grace_round_ == next_round && activated <= next_round && now < grace_deadline_) return grace_deadline_;
    return std::nullopt;
  }

 private:
  size_t words_;
  uint64_t first_round_ = 0;  // begin_at
  // The round this rank's arrival completed the quorum of, and the round whose grace this
  // rank runs (it arrived first) with its deadline. UINT64_MAX: none.
  uint64_t reached_ = UINT64_MAX;
  uint64_t grace_round_ = UINT64_MAX;
  uint64_t counted_ = UINT64_MAX;  // the last round whose arrival this rank counted
  PolicyClock::time_point grace_deadline_{};
};

}  // namespace

std::unique_ptr<StartPolicy> make_quorum_policy(const PolicyContext& context) {
  return std::make_unique<QuorumPolicy>(context);
}

std::string check_quorum_options(pcoll_allreduce_opts_t& opts, int ranks) {
  if (opts.quorum == 0) opts.quorum = static_cast<uint32_t>(ranks / 2 + 1);
  if (opts.quorum > static_cast<uint32_t>(ranks))
    return "opts.quorum = " + std::to_string(opts.quorum) + " is more than the job's " + std::to_string(ranks) +
           " ranks (1.." + std::to_string(ranks) + ", or 0 for a majority)";
  if (opts.grace_us > kMaxGraceUs) return "opts.grace_us = " + std::to_string(opts.grace_us) + " is above 60 s";
  return {};
}

void fit_quorum_options(pcoll_allreduce_opts_t& opts, int ranks) {
  opts.quorum = std::min(opts.quorum, static_cast<uint32_t>(ranks));
}

}  // namespace pcoll
