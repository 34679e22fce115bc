// The shared wait loop (providers/util/include/util/wait_loop.hpp) over a fake provider whose fd is an
// eventfd nobody signals: the wake-up rules both providers rely on, one case per rule.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <support/error.hpp>
#include <support/fd.hpp>
#include <util/wait_loop.hpp>

using namespace std::chrono_literals;
using pcoll::transport::WaitKind;
using pcoll::transport::WaitLoop;
using pcoll::transport::WaitTuning;
using Clock = std::chrono::steady_clock;

namespace {

// A provider with nothing to progress: it counts passes, always lets a waiter sleep on its
// (silent) fd unless told to refuse, and holds one "notification" flag.
class FakeProvider final : public WaitLoop::Hooks {
 public:
  explicit FakeProvider(bool with_fd, WaitTuning tuning = slow_tuning())
      : fd_(with_fd ? pcoll::open_eventfd(pcoll::Errc::internal, "test") : pcoll::Fd()),
        loop(*this, fd_.get(), tuning, "fake") {}

  // A sleeper that is not woken stays asleep for seconds: lateness shows as a failed check.
  static WaitTuning slow_tuning() {
    WaitTuning t;
    t.max_sleep = 5s;
    return t;
  }

  unsigned progress_pass() override {
    passes.fetch_add(1);
    return 0;
  }
  bool arm() override { return !refuse_arm; }

  // Waits for the notification flag, as Transport::wait(notification) does.
  bool wait_notification(Clock::duration timeout, WaitKind kind = WaitKind::notification) {
    std::unique_lock lock(mutex);
    return loop.wait(lock, [this] { return queued; }, Clock::now() + timeout, kind, 0us);
  }
  // Another thread's progress found events (with or without a notification).
  void progress_found(bool notification) {
    std::lock_guard lock(mutex);
    queued = queued || notification;
    loop.on_progress(queued);
  }
  void wake() {
    std::lock_guard lock(mutex);
    loop.wake();
  }

  std::atomic<unsigned> passes{0};
  bool refuse_arm = false;
  bool queued = false;
  std::mutex mutex;

 private:
  pcoll::Fd fd_;

 public:
  WaitLoop loop;
};

template <class Fn>
Clock::duration time_of(Fn&& fn) {
  const auto start = Clock::now();
  fn();
  return Clock::now() - start;
}

}  // namespace

TEST_CASE("a wait ends when its condition holds, or at the deadline with false") {
  FakeProvider p(true);
  p.queued = true;
  CHECK(p.wait_notification(1s));
  p.queued = false;
  bool result = true;
  const auto took = time_of([&] { result = p.wait_notification(30ms); });
  CHECK_FALSE(result);
  CHECK(took >= 30ms);
  CHECK(took < 2s);
}

TEST_CASE("a wake() before any wait ends the next wait at once, and only that one") {
  FakeProvider p(true);
  p.wake();
  bool result = false;
  CHECK(time_of([&] { result = p.wait_notification(5s); }) < 1s);
  CHECK(result);
  CHECK_FALSE(p.wait_notification(20ms));
}

TEST_CASE("a wake() ends a sleeping wait, and is used up by it") {
  FakeProvider p(true);
  std::thread waker([&] {
    std::this_thread::sleep_for(50ms);
    p.wake();
  });
  bool result = false;
  CHECK(time_of([&] { result = p.wait_notification(10s, WaitKind::activity); }) < 3s);
  waker.join();
  CHECK(result);
  CHECK_FALSE(p.wait_notification(20ms));
}

TEST_CASE("an operation wait is not ended by wake(), which stays pending for the next wait") {
  FakeProvider p(true);
  p.wake();
  CHECK_FALSE(p.wait_notification(20ms, WaitKind::operation));
  CHECK(p.wait_notification(20ms));
}

TEST_CASE("a notification queued by another thread wakes a sleeping notification waiter") {
  FakeProvider p(true);
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    p.progress_found(true);
  });
  bool result = false;
  CHECK(time_of([&] { result = p.wait_notification(10s); }) < 3s);
  other.join();
  CHECK(result);
}

TEST_CASE("progress without a notification leaves a notification sleeper asleep") {
  FakeProvider p(true);
  std::thread waiter([&] { p.wait_notification(10s); });
  std::this_thread::sleep_for(100ms);  // asleep on the fd by now
  const unsigned before = p.passes.load();
  p.progress_found(false);
  std::this_thread::sleep_for(100ms);
  CHECK(p.passes.load() == before);  // it did not wake to progress again
  p.progress_found(true);
  waiter.join();
}

TEST_CASE("any progress wakes an activity or operation sleeper") {
  for (WaitKind kind : {WaitKind::activity, WaitKind::operation}) {
    FakeProvider p(true);
    std::thread waiter([&] { p.wait_notification(10s, kind); });
    std::this_thread::sleep_for(100ms);
    const unsigned before = p.passes.load();
    p.progress_found(false);
    const auto until = Clock::now() + 3s;
    while (p.passes.load() == before && Clock::now() < until) std::this_thread::sleep_for(1ms);
    CHECK(p.passes.load() > before);
    p.progress_found(true);
    waiter.join();
  }
}

TEST_CASE("waiters beyond the sleeper sleep on the condition variable and are woken too") {
  FakeProvider p(true);
  std::atomic<int> done{0};
  std::thread a([&] { done += p.wait_notification(10s) ? 1 : 0; });
  std::thread b([&] { done += p.wait_notification(10s) ? 1 : 0; });
  std::this_thread::sleep_for(100ms);
  const auto took = time_of([&] {
    p.progress_found(true);
    a.join();
    b.join();
  });
  CHECK(done.load() == 2);
  CHECK(took < 3s);
}

TEST_CASE("without a provider fd, a waiter backs off and is woken by progress") {
  FakeProvider p(false);
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    p.progress_found(true);
  });
  bool result = false;
  CHECK(time_of([&] { result = p.wait_notification(10s); }) < 3s);
  other.join();
  CHECK(result);
  // Back-off sleeps, not a spin: at most a few passes per millisecond.
  CHECK(p.passes.load() < 500);
}

TEST_CASE("a provider that keeps refusing to arm gets pauses, not a spin, past the limit") {
  WaitTuning tuning = FakeProvider::slow_tuning();
  tuning.arm_refusals_before_pause = 16;
  tuning.first_backoff = 1ms;
  FakeProvider p(true, tuning);
  p.refuse_arm = true;
  CHECK_FALSE(p.wait_notification(100ms));
  // 16 quick refusals, then about one pass per millisecond.
  CHECK(p.passes.load() < 16 + 2 * 100 + 50);
}
