// Unit tests of the fault-injection transport (providers/fault): PCOLL_FAULT's grammar
// and its errors, and each fault's effect on a loopback transport in this process, where
// what arrives and in which order is known exactly.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_transport.hpp"
#include <fault/fault_spec.hpp>
#include <fault/fault_transport.hpp>
#include <support/error.hpp>

using namespace pcoll;
using namespace pcoll::transport;
using namespace std::chrono_literals;

namespace {

// The message of the invalid_argument a spec gives, or "" when it parses.
std::string spec_error(const std::string& spec) {
  try {
    fault::parse_spec(spec);
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The shared fake (tests/helpers/fake_transport.hpp): every rank at once, so a test sees
// exactly what the decorator makes of a call.
using Loopback = pcoll::test::FakeTransport;

// A decorated loopback at rank 0 of 4, connected.
struct Rig {
  explicit Rig(const std::string& spec, std::chrono::milliseconds timeout = 1000ms) {
    auto inner = std::make_unique<Loopback>("loop");
    loop = inner.get();
    Options options;
    options.timeout = timeout;
    transport = std::make_unique<fault::FaultTransport>(std::move(inner), fault::parse_spec(spec), options);
    const std::vector<Bytes> addresses(4);
    transport->connect(0, addresses);
    peer = transport->import_region(1, {});
    region = transport->allocate(0);
  }
  // Everything delivered within `within`, in delivery order.
  std::vector<uint64_t> drain(std::chrono::milliseconds within = 100ms) {
    std::vector<uint64_t> got;
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      uint64_t values[16];
      const size_t n = transport->poll(values);
      got.insert(got.end(), values, values + n);
      if (n == 0) transport->wait(1ms, Transport::WaitFor::notification);
    }
    return got;
  }
  Loopback* loop = nullptr;
  std::unique_ptr<fault::FaultTransport> transport;
  std::unique_ptr<RemoteRegion> peer;
  std::unique_ptr<LocalRegion> region;
};

std::vector<uint64_t> sorted(std::vector<uint64_t> values) {
  std::sort(values.begin(), values.end());
  return values;
}

}  // namespace

TEST_CASE("PCOLL_FAULT: well-formed specs parse into their rules") {
  CHECK(fault::parse_spec("").empty());
  CHECK(fault::parse_spec("  ").empty());
  const auto rules = fault::parse_spec(
      "delay,ms=3,every=2; reorder,window=4,ms=2,seed=7 ;duplicate,mask=0xc000000000000000,match=0x8000000000000000;"
      "eagain,rank=1,at=10,ms=50,count=3,peer=2;access,rank=*;reset,on=connect;silent,rank=2,on=sigusr1;"
      "kill,rank=3,at=40;stop,rank=0;");
  REQUIRE(rules.size() == 9);
  CHECK(rules[0].action == fault::Action::delay);
  CHECK(rules[0].ms == 3ms);
  CHECK(rules[0].every == 2);
  CHECK(rules[1].window == 4);
  CHECK(rules[1].seed == 7);
  CHECK(rules[2].mask == 0xc000000000000000ULL);
  CHECK(rules[2].match == 0x8000000000000000ULL);
  CHECK(rules[3].rank == 1);
  CHECK(rules[3].at == 10);
  CHECK(rules[3].count == 3);
  CHECK(rules[3].peer == 2);
  CHECK_FALSE(rules[4].rank.has_value());
  CHECK(rules[4].count == 1);  // an injected error fires once unless count= says otherwise
  CHECK(rules[5].on == fault::Trigger::connect);
  CHECK(rules[5].count == 1);  // a reset happens once; the connection then stays down
  CHECK(rules[6].on == fault::Trigger::sigusr1);
  CHECK(rules[7].at == 40);
  CHECK(rules[8].action == fault::Action::stop);
}

TEST_CASE("PCOLL_FAULT: every malformed spec is an error naming the rule and what is wrong") {
  CHECK(contains(spec_error("explode"), "'explode' is not an action"));
  CHECK(contains(spec_error("delay"), "delay needs ms="));
  CHECK(contains(spec_error("reorder,ms=2"), "reorder needs window="));
  CHECK(contains(spec_error("eagain"), "eagain needs ms="));
  CHECK(contains(spec_error("delay,ms=1;;kill"), "rule 2 is empty"));
  CHECK(contains(spec_error("delay,ms=1;kill,window=3"), "rule 2 ('kill,window=3'): 'window' is not a key of kill"));
  CHECK(contains(spec_error("delay,ms"), "'ms' is not key=value"));
  CHECK(contains(spec_error("delay,ms="), "'ms' has no value"));
  CHECK(contains(spec_error("delay,ms=1,,"), "an empty field"));
  CHECK(contains(spec_error("delay,ms=1,ms=2"), "'ms' is given twice"));
  CHECK(contains(spec_error("delay,ms=fast"), "ms='fast' is not a number"));
  CHECK(contains(spec_error("delay,ms=0"), "ms=0 is out of range"));
  CHECK(contains(spec_error("kill,at=0"), "at=0 is out of range"));
  CHECK(contains(spec_error("reorder,window=1"), "window=1 is out of range"));
  CHECK(contains(spec_error("kill,rank=-1"), "rank='-1' is not a number"));
  CHECK(contains(spec_error("kill,on=later"), "on='later' is not start, connect or sigusr1"));
  CHECK(contains(spec_error("delay,ms=1,on=connect"), "on=connect is for silent, kill, stop and reset"));
  CHECK(contains(spec_error("kill,on=connect,at=3"), "at= does not apply"));
  CHECK(contains(spec_error("duplicate,mask=0xff"), "mask= needs match="));
  CHECK(contains(spec_error("duplicate,match=1"), "match= needs mask="));
  CHECK(contains(spec_error("duplicate,mask=0xf0,match=0x01"), "match= has bits outside mask="));
  CHECK(contains(spec_error("delay,ms=99999999999999999999999"), "out of range"));
  CHECK(contains(spec_error(",ms=1"), "names no action"));
  CHECK(contains(spec_error("explode"), "PCOLL_FAULT rule 1"));
}

TEST_CASE("PCOLL_FAULT: a rank or peer outside the job is refused at connect") {
  auto inner = std::make_unique<Loopback>("loop");
  fault::FaultTransport transport(std::move(inner), fault::parse_spec("kill,rank=4"), Options{});
  const std::vector<Bytes> addresses(4);
  try {
    transport.connect(0, addresses);
    FAIL("connect accepted rank=4 in a job of 4");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "rank=4 but the job has 4 ranks"));
  }
  CHECK_THROWS_WITH_AS(fault::check_ranks(fault::parse_spec("reset,peer=9"), 4), doctest::Contains("peer=9"), Error);
}

TEST_CASE("without rules the decorator passes every value through once, in order") {
  Rig rig("");
  CHECK(rig.transport->capabilities().name == "fault+loop");
  for (uint64_t v = 1; v <= 50; ++v) rig.transport->notify(1, v);
  std::vector<uint64_t> expected;
  for (uint64_t v = 1; v <= 50; ++v) expected.push_back(v);
  CHECK(rig.drain(20ms) == expected);
}

TEST_CASE("duplicate returns matching values twice and leaves the others alone") {
  Rig rig("duplicate,mask=0x1,match=0x1");  // odd values only
  for (uint64_t v = 1; v <= 6; ++v) rig.transport->notify(1, v);
  CHECK(rig.drain(20ms) == std::vector<uint64_t>{1, 1, 2, 3, 3, 4, 5, 5, 6});
}

TEST_CASE("duplicate honours at, every and count") {
  Rig rig("duplicate,at=2,every=2,count=2");
  for (uint64_t v = 1; v <= 8; ++v) rig.transport->notify(1, v);
  CHECK(rig.drain(20ms) == std::vector<uint64_t>{1, 2, 2, 3, 4, 4, 5, 6, 7, 8});
}

TEST_CASE("delay holds a value for its time and lets the others pass") {
  Rig rig("delay,ms=60,mask=0xff,match=7");
  const auto sent = std::chrono::steady_clock::now();
  for (uint64_t v = 5; v <= 9; ++v) rig.transport->notify(1, v);
  uint64_t values[8];
  std::vector<uint64_t> first(values, values + rig.transport->poll(values));
  CHECK(first == std::vector<uint64_t>{5, 6, 8, 9});
  std::vector<uint64_t> later;
  while (later.empty()) {
    rig.transport->wait(100ms, Transport::WaitFor::notification);
    later.assign(values, values + rig.transport->poll(values));
  }
  CHECK(std::chrono::steady_clock::now() - sent >= 60ms);
  CHECK(later == std::vector<uint64_t>{7});
}

TEST_CASE("reorder releases a window in another order, and a partial window after its hold time") {
  Rig rig("reorder,window=4,ms=30,seed=3");
  for (uint64_t v = 1; v <= 6; ++v) rig.transport->notify(1, v);
  uint64_t values[8];
  std::vector<uint64_t> first(values, values + rig.transport->poll(values));
  REQUIRE(first.size() == 4);
  CHECK(first != std::vector<uint64_t>{1, 2, 3, 4});
  CHECK(sorted(first) == std::vector<uint64_t>{1, 2, 3, 4});
  // 5 and 6 wait for two more or for 30 ms.
  CHECK(rig.transport->poll(values) == 0);
  const auto rest = rig.drain(80ms);
  CHECK(rest == std::vector<uint64_t>{6, 5});
}

TEST_CASE("every value comes back exactly once under delay and reorder together") {
  Rig rig("delay,ms=2,every=3;reorder,window=5,ms=3");
  std::vector<uint64_t> sent;
  for (uint64_t v = 1; v <= 500; ++v) {
    rig.transport->notify(1, v);
    sent.push_back(v);
  }
  const auto got = rig.drain(150ms);
  CHECK(got != sent);
  CHECK(sorted(got) == sent);
}

TEST_CASE("reset fails the operation at its count naming the peer, and every later one to it") {
  Rig rig("reset,at=3,peer=1");
  rig.transport->notify(1, 1);
  rig.transport->notify(2, 2);  // another peer: not counted
  rig.transport->notify(1, 3);
  try {
    rig.transport->write_notify(*rig.region, 0, *rig.peer, 0, 0, 4);
    FAIL("the third operation to rank 1 was not reset");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::peer_failed);
    CHECK(e.rank() == 1);
    CHECK(contains(e.what(), "to rank 1: connection reset by peer (injected by PCOLL_FAULT rule 'reset,at=3,peer=1'"));
  }
  CHECK_THROWS_AS(rig.transport->notify(1, 5), Error);
  rig.transport->notify(2, 6);  // other peers are fine
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{1, 2, 3, 6});
}

TEST_CASE("a remote access error drops the write and surfaces at the next poll, once") {
  Rig rig("access,at=2");
  rig.transport->write_notify(*rig.region, 0, *rig.peer, 0, 0, 1);
  rig.transport->write_notify(*rig.region, 0, *rig.peer, 0, 0, 2);  // dropped
  uint64_t values[4];
  try {
    rig.transport->poll(values);
    FAIL("the access error was not reported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::transport);
    CHECK(e.rank() == 1);
    CHECK(contains(e.what(), "remote access error"));
  }
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{1});
}

TEST_CASE("an EAGAIN burst shorter than the timeout only delays; a longer one fails naming the peer") {
  {
    Rig rig("eagain,ms=40");
    const auto start = std::chrono::steady_clock::now();
    rig.transport->notify(1, 7);
    CHECK(std::chrono::steady_clock::now() - start >= 40ms);
    CHECK(rig.drain(10ms) == std::vector<uint64_t>{7});
  }
  {
    Rig rig("eagain,ms=5000", 50ms);
    try {
      rig.transport->notify(3, 7);
      FAIL("an EAGAIN burst past the timeout did not fail");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::timeout);
      CHECK(e.rank() == 3);
      CHECK(contains(e.what(), "stayed full for 50 ms"));
    }
  }
}

TEST_CASE("a silent rank swallows everything from its operation count on, in and out") {
  Rig rig("silent,at=3");
  rig.transport->notify(1, 1);
  rig.transport->notify(1, 2);
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{1, 2});
  rig.transport->notify(1, 3);  // the third operation: silence starts here
  rig.transport->write(*rig.region, 0, *rig.peer, 0, 0);
  rig.transport->flush();
  CHECK(rig.loop->writes == 0);
  CHECK(rig.loop->flushes == 0);
  rig.loop->notify(0, 4);  // arriving from a peer
  CHECK(rig.drain(10ms).empty());
}

TEST_CASE("rules aimed at another rank leave this one alone") {
  Rig rig("duplicate,rank=1;silent,rank=2;reset,rank=3");
  for (uint64_t v = 1; v <= 3; ++v) rig.transport->notify(1, v);
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{1, 2, 3});
}

TEST_CASE("on=sigusr1 arms a rule when the process gets SIGUSR1") {
  Rig rig("duplicate,on=sigusr1");
  rig.transport->notify(1, 1);
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{1});
  ::raise(SIGUSR1);
  rig.transport->notify(1, 2);
  CHECK(rig.drain(10ms) == std::vector<uint64_t>{2, 2});
}
