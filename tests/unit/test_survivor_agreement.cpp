// The survivors' agreement on the failed set (collectives/survivor_agreement.hpp) over a
// simulated network: messages delivered in any order, ranks that die before or during the
// agreement (their failure heard by every live rank some time later, as the failure
// detector's notices make it), live ranks named failed by another (a broken link), and
// ranks that begin at different moments. Every schedule must end with every survivor
// committed to the same set, holding only failed ranks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <collectives/survivor_agreement.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

struct Flight {
  int from, to;
  SurvivorMessage message;
};

class Network;

struct Port final : SurvivorAgreement::Sink {
  Network* net = nullptr;
  int rank = 0;
  void send(int peer, const SurvivorMessage& message) override;
};

class Network {
 public:
  Network(int size, uint32_t seed) : size_(size), rng_(seed), ports_(static_cast<size_t>(size)) {
    for (int r = 0; r < size; ++r) {
      ports_[static_cast<size_t>(r)].net = this;
      ports_[static_cast<size_t>(r)].rank = r;
      ranks_.push_back(std::make_unique<SurvivorAgreement>(r, size, 7, ports_[static_cast<size_t>(r)]));
    }
    dead_.assign(static_cast<size_t>(size), false);
    named_.assign(static_cast<size_t>(size), false);
    started_.assign(static_cast<size_t>(size), false);
  }

  void post(int from, int to, const SurvivorMessage& message) {
    ++messages_;
    flights_.push_back({from, to, message});
  }

  // `r` dies: it takes no further part; every live rank hears of it later.
  void kill(int r) {
    if (dead_[static_cast<size_t>(r)]) return;
    dead_[static_cast<size_t>(r)] = true;
    for (int y = 0; y < size_; ++y)
      if (!dead_[static_cast<size_t>(y)]) news_.push_back({y, r});
  }
  // `r`, alive, is named failed (a broken link): every live rank hears of it, `r` too.
  void name(int r) {
    if (named_[static_cast<size_t>(r)] || dead_[static_cast<size_t>(r)]) return;
    named_[static_cast<size_t>(r)] = true;
    for (int y = 0; y < size_; ++y)
      if (!dead_[static_cast<size_t>(y)]) news_.push_back({y, r});
  }
  void begin(int r, const std::vector<int>& known) {
    started_[static_cast<size_t>(r)] = true;
    ranks_[static_cast<size_t>(r)]->start(known);
  }

  // Delivers one pending message or piece of news, chosen at random; false when none is left.
  bool deliver_one() {
    const size_t total = flights_.size() + news_.size();
    if (total == 0) return false;
    const size_t pick = std::uniform_int_distribution<size_t>(0, total - 1)(rng_);
    if (pick < flights_.size()) {
      const Flight flight = flights_[pick];
      flights_.erase(flights_.begin() + static_cast<std::ptrdiff_t>(pick));
      if (!dead_[static_cast<size_t>(flight.to)]) ranks_[static_cast<size_t>(flight.to)]->on_message(flight.from, flight.message);
    } else {
      const auto [to, about] = news_[pick - flights_.size()];
      news_.erase(news_.begin() + static_cast<std::ptrdiff_t>(pick - flights_.size()));
      if (!dead_[static_cast<size_t>(to)]) ranks_[static_cast<size_t>(to)]->on_failed(about);
    }
    return true;
  }

  SurvivorAgreement& at(int r) { return *ranks_[static_cast<size_t>(r)]; }
  bool dead(int r) const { return dead_[static_cast<size_t>(r)]; }
  bool named(int r) const { return named_[static_cast<size_t>(r)]; }
  bool started(int r) const { return started_[static_cast<size_t>(r)]; }
  bool survivor(int r) const { return !dead(r) && !named(r); }
  int size() const { return size_; }
  std::mt19937& rng() { return rng_; }
  long messages() const { return messages_; }

 private:
  struct News {
    int to, about;
  };
  int size_;
  std::mt19937 rng_;
  std::vector<Port> ports_;
  std::vector<std::unique_ptr<SurvivorAgreement>> ranks_;
  std::vector<Flight> flights_;
  std::vector<News> news_;
  std::vector<bool> dead_, named_, started_;
  long messages_ = 0;
};

void Port::send(int peer, const SurvivorMessage& message) {
  // Through the bytes a transport would carry.
  if (!net->dead(rank)) net->post(rank, peer, decode_survivor_message(encode(message), net->size(), rank));
}

// One random schedule: some ranks dead before anyone begins, the others beginning at random
// moments, and ranks dying or being named while the agreement runs. Returns "" when every
// rule held, else what broke.
std::string run_schedule(int size, uint32_t seed) {
  Network net(size, seed);
  auto& rng = net.rng();
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  std::vector<int> dead_before;
  for (int r = 0; r < size; ++r)
    if (size > 1 && chance(0.25)) {
      net.kill(r);
      dead_before.push_back(r);
    }
  const int later_faults = std::uniform_int_distribution<int>(0, 3)(rng);
  int faults = 0;
  long steps = 0;
  while (true) {
    // A rank that has not begun begins now and then, knowing some of the dead ranks.
    std::vector<int> waiting;
    for (int r = 0; r < size; ++r)
      if (!net.started(r) && !net.dead(r)) waiting.push_back(r);
    if (!waiting.empty() && chance(0.3)) {
      const int r = waiting[std::uniform_int_distribution<size_t>(0, waiting.size() - 1)(rng)];
      std::vector<int> known;
      for (const int d : dead_before)
        if (chance(0.5)) known.push_back(d);
      net.begin(r, known);
      continue;
    }
    if (faults < later_faults && chance(0.05)) {
      std::vector<int> live;
      for (int r = 0; r < size; ++r)
        if (net.survivor(r)) live.push_back(r);
      if (live.size() > 1) {
        const int r = live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
        if (chance(0.7)) net.kill(r); else net.name(r);
      }
      ++faults;
      continue;
    }
    if (!net.deliver_one() && waiting.empty()) break;
    if (++steps > 200000) return "no end after 200000 deliveries";
  }
  std::optional<std::vector<int>> agreed;
  for (int r = 0; r < size; ++r) {
    const auto& decided = net.at(r).decided();
    if (net.survivor(r) && (!decided || net.at(r).excluded()))
      return "survivor " + std::to_string(r) + (decided ? " excluded itself" : " did not decide");
    if (net.named(r) && !net.dead(r) && !net.at(r).excluded() && !(decided && std::count(decided->begin(), decided->end(), r) == 0))
      return "named rank " + std::to_string(r) + " neither excluded nor kept";
    if (!decided) continue;
    if (agreed && *agreed != *decided) return "ranks decided different sets";
    agreed = *decided;
  }
  if (!agreed) return "";  // nobody survived
  for (const int r : *agreed)
    if (!net.dead(r) && !net.named(r)) return "the set holds rank " + std::to_string(r) + ", which did not fail";
  for (const int r : dead_before)
    if (std::count(agreed->begin(), agreed->end(), r) == 0) return "the set misses rank " + std::to_string(r) + ", dead from the start";
  return "";
}

}  // namespace

TEST_CASE("a rank dead from the start: every survivor commits to it, through the lowest live rank") {
  Network net(4, 1);
  net.kill(3);
  for (int r = 0; r < 3; ++r) net.begin(r, r == 1 ? std::vector<int>{3} : std::vector<int>{});
  // Rank 0 coordinates, and waits on rank 3 until it hears that it is dead.
  CHECK(net.at(0).coordinator() == 0);
  CHECK(net.at(1).awaited() == std::vector<int>{0});
  while (net.deliver_one()) {
  }
  for (int r = 0; r < 3; ++r) {
    REQUIRE(net.at(r).decided());
    CHECK(*net.at(r).decided() == std::vector<int>{3});
    CHECK_FALSE(net.at(r).excluded());
    CHECK(net.at(r).awaited().empty());
  }
}

TEST_CASE("the coordinator dies: the next live rank takes over, and a rank that committed keeps its set") {
  Network net(5, 2);
  net.kill(4);
  for (int r = 0; r < 4; ++r) net.begin(r, {4});
  // Deliver until rank 0 has committed, then kill it before the rest hear its commit.
  while (!net.at(0).decided() && net.deliver_one()) {
  }
  REQUIRE(net.at(0).decided());
  net.kill(0);
  while (net.deliver_one()) {
  }
  for (int r = 1; r < 4; ++r) {
    REQUIRE(net.at(r).decided());
    CHECK(*net.at(r).decided() == *net.at(0).decided());
  }
}

TEST_CASE("a live rank named failed learns that it is excluded; the others agree without it") {
  Network net(4, 3);
  for (int r = 0; r < 4; ++r) net.begin(r, {});
  net.name(2);
  while (net.deliver_one()) {
  }
  CHECK(net.at(2).excluded());
  for (const int r : {0, 1, 3}) {
    REQUIRE(net.at(r).decided());
    CHECK(*net.at(r).decided() == std::vector<int>{2});
  }
}

TEST_CASE("messages of another epoch, out of range or out of order are ignored") {
  Network net(3, 4);
  SurvivorMessage bogus;
  bogus.kind = SurvivorMessage::Kind::commit;
  bogus.epoch = 7;
  bogus.failed = {2, 1};  // not ascending
  net.begin(0, {});
  net.at(0).on_message(1, bogus);
  bogus.failed = {5};      // no such rank
  net.at(0).on_message(1, bogus);
  bogus.failed = {1};
  bogus.epoch = 8;         // another shrink's
  net.at(0).on_message(1, bogus);
  net.at(0).on_message(9, bogus);
  CHECK_FALSE(net.at(0).decided());
}

TEST_CASE("a message survives its bytes, and a peer's bytes that are no message are refused by name") {
  SurvivorMessage m;
  m.kind = SurvivorMessage::Kind::propose;
  m.epoch = 3;
  m.ballot = 1;
  m.failed = {0, 4};
  m.accepted_ballot = 0;
  m.accepted = {4};
  const std::vector<std::byte> bytes = encode(m);
  const SurvivorMessage back = decode_survivor_message(bytes, 5, 2);
  CHECK(back.kind == m.kind);
  CHECK(back.epoch == 3);
  CHECK(back.ballot == 1);
  CHECK(back.failed == m.failed);
  CHECK(back.accepted_ballot == 0);
  CHECK(back.accepted == m.accepted);
  auto refused = [](std::vector<std::byte> b, int size) {
    try {
      decode_survivor_message(b, size, 2);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::protocol);
      return std::string(e.what());
    }
    return std::string();
  };
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    CHECK(refused(std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut)), 5) != "");
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  CHECK(refused(longer, 5).find("rank 2's survivor agreement message") != std::string::npos);
  CHECK(refused(bytes, 4).find("outside a job of 4") != std::string::npos);   // rank 4 of 4
  std::vector<std::byte> kind = bytes;
  kind[4] = std::byte{9};
  CHECK(refused(kind, 5).find("kind 9") != std::string::npos);
  SurvivorMessage unordered = m;
  unordered.failed = {4, 0};
  CHECK(refused(encode(unordered), 5).find("out of order") != std::string::npos);
  SurvivorMessage ballot = m;
  ballot.ballot = 7;
  CHECK(refused(encode(ballot), 5).find("ballot 7") != std::string::npos);
}

TEST_CASE("every schedule ends with the survivors agreed on one set of failed ranks") {
  long schedules = 0;
  for (int size = 1; size <= 9; ++size)
    for (uint32_t seed = 0; seed < 3000; ++seed) {
      const std::string broke = run_schedule(size, seed * 1000003u + static_cast<uint32_t>(size));
      INFO("P = " << size << ", seed " << seed);
      CHECK(broke == "");
      ++schedules;
    }
  CHECK(schedules == 9 * 3000);
}
