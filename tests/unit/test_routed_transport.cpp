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

#include <routed/routed_transport.hpp>
#include <support/error.hpp>

using namespace pcoll;
using namespace pcoll::transport;
using namespace std::chrono_literals;

namespace {

// Records what it is asked to do; a notification to any peer lands in its own queue.
class Recorder final : public Transport {
 public:
  struct Region final : LocalRegion, RemoteRegion {
    Region(int peer, std::string origin)
        : LocalRegion({memory, sizeof memory}), RemoteRegion(peer, sizeof memory), origin(std::move(origin)) {}
    Bytes remote_key() const override {
      return Bytes(reinterpret_cast<const std::byte*>(origin.data()),
                   reinterpret_cast<const std::byte*>(origin.data()) + origin.size());
    }
    std::string origin;  // the transport that made it, and for imports the key it came from
    std::byte memory[64] = {};
  };

  explicit Recorder(std::string name) : name_(std::move(name)) {
    caps_.name = name_;
    caps_.provider = name_;
    caps_.partial_connect = true;
    caps_.notify_bits = name_ == "net" ? 32 : 64;
  }

  const Capabilities& capabilities() const override { return caps_; }
  Bytes address() const override {
    const std::string a = name_ + "-address";
    return Bytes(reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(a.data()) + a.size());
  }
  void do_connect(int my_rank, std::span<const Bytes> addresses) override {
    rank_ = my_rank;
    connected.assign(addresses.begin(), addresses.end());
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(connected.size()); }
  std::unique_ptr<LocalRegion> allocate(size_t) override { return std::make_unique<Region>(rank_, name_); }
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte>) override {
    ++registered;
    return std::make_unique<Region>(rank_, name_);
  }
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override {
    return std::make_unique<Region>(peer, std::string(reinterpret_cast<const char*>(key.data()), key.size()));
  }
  void do_write(const LocalRegion& src, size_t, const RemoteRegion& dst, size_t, size_t) override {
    CHECK(dynamic_cast<const Region&>(src).origin == name_);  // the half of this transport
    touched.push_back(dst.peer());
  }
  void do_write_notify(const LocalRegion& src, size_t, const RemoteRegion& dst, size_t, size_t, uint64_t value) override {
    CHECK(dynamic_cast<const Region&>(src).origin == name_);
    touched.push_back(dst.peer());
    notify(dst.peer(), value);
  }
  void do_notify(int peer, uint64_t value) override {
    touched.push_back(peer);
    std::lock_guard lock(mutex_);
    queue_.push_back(value);
  }
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t, uint64_t) override { return touched.push_back(dst.peer()), 0; }
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t, uint64_t, uint64_t) override {
    return touched.push_back(dst.peer()), 0;
  }
  uint64_t do_swap(const RemoteRegion& dst, size_t, uint64_t) override { return touched.push_back(dst.peer()), 0; }
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t, uint64_t) override { return touched.push_back(dst.peer()), 0; }
  void flush() override { ++flushes; }
  void progress() override {}
  size_t poll(std::span<uint64_t> out) override {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (; n < out.size() && !queue_.empty(); ++n) {
      out[n] = queue_.front();
      queue_.pop_front();
    }
    return n;
  }
  bool wait(std::chrono::microseconds timeout, WaitFor) override {
    const auto until = std::chrono::steady_clock::now() + timeout;
    do {
      {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) return true;
      }
      std::this_thread::sleep_for(20us);
    } while (std::chrono::steady_clock::now() < until);
    return false;
  }
  void wake() override {}

  std::vector<Bytes> connected;
  std::vector<int> touched;
  int flushes = 0;
  int registered = 0;

 private:
  std::string name_;
  Capabilities caps_;
  int rank_ = -1;
  std::mutex mutex_;
  std::deque<uint64_t> queue_;
};

struct Job {
  Recorder* shm = nullptr;
  Recorder* net = nullptr;
  std::unique_ptr<routed::RoutedTransport> transport;
};

// Rank `me` of a job whose ranks live on `hosts` (a host name per rank).
Job make(int me, const std::vector<std::string>& hosts, std::vector<Bytes>* addresses = nullptr) {
  Job job;
  auto shm = std::make_unique<Recorder>("shm");
  auto net = std::make_unique<Recorder>("net");
  job.shm = shm.get();
  job.net = net.get();
  job.transport = std::make_unique<routed::RoutedTransport>(std::move(shm), std::move(net),
                                                            hosts[static_cast<size_t>(me)], "ofi:shm+net");
  if (addresses != nullptr) {
    // Every rank's address, as its own routed transport would make it.
    addresses->clear();
    for (size_t r = 0; r < hosts.size(); ++r) {
      routed::RoutedTransport other(std::make_unique<Recorder>("shm"), std::make_unique<Recorder>("net"), hosts[r],
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

TEST_CASE("a rank alone on its host routes every peer through the network") {
  const std::vector<std::string> hosts = {"a", "b", "b"};
  std::vector<Bytes> addresses;
  make(0, hosts, &addresses);  // every rank's address
  auto net = std::make_unique<Recorder>("net");
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
