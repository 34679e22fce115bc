// Unit tests of the routed transport (providers/routed): over two recording transports
// in this process, every peer's traffic goes through the transport of its place, each inner
// transport is connected to exactly the ranks it serves, and malformed addresses and keys
// are refused naming the rank.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_transport.hpp"
#include <routed/routed_transport.hpp>
#include <support/error.hpp>

using namespace pcoll;
using namespace pcoll::transport;
using namespace std::chrono_literals;

namespace {

// Each half of the routed transport is the shared fake (tests/helpers/fake_transport.hpp).
using Recorder = pcoll::test::FakeTransport;
std::unique_ptr<Recorder> recorder(const std::string& name) {
  auto fake = std::make_unique<Recorder>(name, /*partial_connect=*/true);
  fake->caps.notify_bits = name == "net" ? 32 : 64;
  return fake;
}

struct Job {
  Recorder* shm = nullptr;
  Recorder* net = nullptr;
  std::unique_ptr<routed::RoutedTransport> transport;
};

// Rank `me` of a job whose ranks live on `hosts` (a host name per rank).
Job make(int me, const std::vector<std::string>& hosts, std::vector<Bytes>* addresses = nullptr) {
  Job job;
  auto shm = recorder("shm");
  auto net = recorder("net");
  job.shm = shm.get();
  job.net = net.get();
  job.transport = std::make_unique<routed::RoutedTransport>(std::move(shm), std::move(net),
                                                            hosts[static_cast<size_t>(me)], "ofi:shm+net");
  if (addresses != nullptr) {
    // Every rank's address, as its own routed transport would make it.
    addresses->clear();
    for (size_t r = 0; r < hosts.size(); ++r) {
      routed::RoutedTransport other(recorder("shm"), recorder("net"), hosts[r],
                                    "ofi:shm+net");
      addresses->push_back(other.address());
    }
  }
  return job;
}

}  // namespace

TEST_CASE("ranks on this host go through the local transport, the others through the network") {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  std::vector<Bytes> addresses;
  Job job = make(0, hosts, &addresses);
  job.transport->connect(0, addresses);
  // Each inner transport is given exactly the ranks it serves (and itself).
  REQUIRE(job.shm->connected.size() == 4);
  CHECK_FALSE(job.shm->connected[0].empty());
  CHECK_FALSE(job.shm->connected[1].empty());
  CHECK(job.shm->connected[2].empty());
  CHECK(job.shm->connected[3].empty());
  CHECK_FALSE(job.net->connected[0].empty());
  CHECK(job.net->connected[1].empty());
  CHECK_FALSE(job.net->connected[2].empty());
  CHECK_FALSE(job.net->connected[3].empty());

  auto mine = job.transport->allocate(64);
  CHECK(job.shm->registered == 1);  // the network's memory, registered with shm too
  std::vector<std::unique_ptr<RemoteRegion>> peers;
  for (int r = 0; r < 4; ++r) peers.push_back(job.transport->import_region(r, mine->remote_key()));
  for (int r = 1; r < 4; ++r) {
    job.transport->write(*mine, 0, *peers[static_cast<size_t>(r)], 0, 8);
    job.transport->write_notify(*mine, 0, *peers[static_cast<size_t>(r)], 0, 8, 7);
    job.transport->notify(r, 9);
    job.transport->fetch_add(*peers[static_cast<size_t>(r)], 0, 1);
    job.transport->compare_swap(*peers[static_cast<size_t>(r)], 0, 0, 1);
  }
  for (const int peer : job.shm->touched) CHECK(peer == 1);
  for (const int peer : job.net->touched) CHECK((peer == 2 || peer == 3));
  CHECK(job.shm->touched.size() == 6);   // write, write_notify (+its notify), notify, two atomics
  CHECK(job.net->touched.size() == 12);
  job.transport->flush();
  CHECK(job.shm->flushes == 1);
  CHECK(job.net->flushes == 1);
  // What the job can count on is what both carry.
  CHECK(job.transport->capabilities().notify_bits == 32);
  CHECK(job.transport->capabilities().name == "ofi:shm+net");
}

TEST_CASE("notifications of both transports are polled, and a waiter sees a local one while the network is idle") {
  const std::vector<std::string> hosts = {"a", "a", "b"};
  std::vector<Bytes> addresses;
  Job job = make(0, hosts, &addresses);
  job.transport->connect(0, addresses);
  job.transport->notify(1, 11);  // lands in the shm recorder's queue
  job.transport->notify(2, 22);  // in the network's
  uint64_t values[4] = {};
  CHECK(job.transport->poll(values) == 2);
  CHECK(((values[0] == 11 && values[1] == 22) || (values[0] == 22 && values[1] == 11)));
  std::thread later([&] {
    std::this_thread::sleep_for(20ms);
    job.transport->notify(1, 33);
  });
  const auto started = std::chrono::steady_clock::now();
  CHECK(job.transport->wait(2s, Transport::WaitFor::notification));
  CHECK(std::chrono::steady_clock::now() - started < 1s);
  later.join();
  CHECK(job.transport->poll(values) == 1);
  CHECK(values[0] == 33);
}

// A post or flush of one part that waits (a full queue) must keep the other part moving:
// around a ring of ranks whose successors alternate between the host and the network, each
// part progressing only itself while it waited left every rank waiting on the next
// (netns.sh, two hosts of two ranks in blocks, under load: the heartbeat's pings to the ring
// successor found their queues full for 10 s).
TEST_CASE("while one part waits, it progresses the other, and the hook the routed transport was given") {
  Job job = make(0, {"a", "a", "b"});
  REQUIRE(job.shm->wait_hook);
  REQUIRE(job.net->wait_hook);
  job.shm->wait_hook();
  CHECK(job.net->progressed == 1);
  CHECK(job.shm->progressed == 0);
  job.net->wait_hook();
  CHECK(job.shm->progressed == 1);
  int outer = 0;
  job.transport->set_wait_hook([&] { ++outer; });
  job.shm->wait_hook();
  job.net->wait_hook();
  CHECK(outer == 2);
  CHECK(job.net->progressed == 2);
  CHECK(job.shm->progressed == 2);
}

TEST_CASE("a rank alone on its host routes every peer through the network") {
  const std::vector<std::string> hosts = {"a", "b", "b"};
  std::vector<Bytes> addresses;
  make(0, hosts, &addresses);  // every rank's address
  auto net = recorder("net");
  Recorder* network = net.get();
  routed::RoutedTransport alone(nullptr, std::move(net), hosts[0], "ofi:shm+net");
  alone.connect(0, addresses);
  auto mine = alone.allocate(64);
  auto peer = alone.import_region(2, mine->remote_key());
  alone.write(*mine, 0, *peer, 0, 8);
  REQUIRE(network->touched.size() == 1);
  CHECK(network->touched[0] == 2);
}

TEST_CASE("malformed or foreign addresses and keys are refused naming the rank") {
  const std::vector<std::string> hosts = {"a", "a"};
  std::vector<Bytes> addresses;
  Job job = make(0, hosts, &addresses);
  std::vector<Bytes> foreign = addresses;
  foreign[1] = Bytes{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}};
  try {
    job.transport->connect(0, foreign);
    FAIL("a foreign address was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::mismatch);
    CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  }
  Job other = make(0, hosts);
  std::vector<Bytes> truncated = addresses;
  truncated[1].resize(truncated[1].size() - 3);
  CHECK_THROWS_AS(other.transport->connect(0, truncated), Error);
  Job good = make(0, hosts);
  good.transport->connect(0, addresses);
  const Bytes bad_key = {std::byte{9}, std::byte{9}};
  try {
    good.transport->import_region(1, bad_key);
    FAIL("a malformed key was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::protocol);
    CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  }
}
