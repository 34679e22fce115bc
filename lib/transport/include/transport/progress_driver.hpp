// A thread that keeps a transport progressing while the application is busy elsewhere:
// some providers complete peers' RMA and atomics on this process only when it polls.
// It blocks in Transport::wait() when idle, so an idle driver costs almost no CPU.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <transport/transport.hpp>

namespace pcoll::transport {

class ProgressDriver {
 public:
  // Called on the driver thread after every wake-up, e.g. to consume notifications; returns
  // how long the driver may then wait for activity before calling it again (at most its
  // slice of 50 ms), for work due at a time rather than on an event. With no hook the driver
  // only progresses and leaves notifications queued for poll().
  using Hook = std::function<std::chrono::microseconds()>;

  // cpu >= 0 pins the thread to that logical CPU; -1 leaves it unpinned.
  explicit ProgressDriver(Transport& transport, Hook hook = {}, int cpu = -1);
  ~ProgressDriver();  // stops and joins
  ProgressDriver(const ProgressDriver&) = delete;
  ProgressDriver& operator=(const ProgressDriver&) = delete;

  void stop();

  // Parks the thread while some other thread drives the transport itself (an application
  // thread spinning in a wait): on a shared core the two would only take turns, and each
  // hand-over costs a scheduler slice. Counted: the thread resumes once every hold() has
  // been matched by a release(). release(true) resumes it at once (the holder is about to
  // sleep and relies on it); release(false) lets it resume within kResumeAfter, so that a
  // holder that comes back soon (the next round) does not pay a thread wake-up each time.
  void hold() { holds_.fetch_add(1, std::memory_order_acq_rel); }
  void release(bool resume_now);
  // The first error the thread hit (it keeps running and retries after a pause), or "".
  std::string error() const;

 private:
  void loop(int cpu);

  Transport& transport_;
  Hook hook_;
  std::atomic<bool> running_{true};
  std::atomic<int> holds_{0};
  std::mutex gate_mutex_;
  std::condition_variable gate_cv_;
  mutable std::mutex error_mutex_;
  std::string error_;
  std::thread thread_;
};

}  // namespace pcoll::transport
