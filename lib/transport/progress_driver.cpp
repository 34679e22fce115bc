// ProgressDriver: the thread that keeps a transport progressing (peers' RMA and atomics on
// manual-progress providers) while the application computes.
#include <transport/progress_driver.hpp>

#include <algorithm>

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll::transport {

namespace {

// Long enough that an idle driver wakes rarely, short enough that stop() is prompt even if
// a wake() were missed.
constexpr auto kWaitSlice = std::chrono::milliseconds(50);
// How soon a parked thread notices a release(false).
constexpr auto kResumeAfter = std::chrono::microseconds(200);
// After an error, pause so a persistent failure does not turn into a busy loop of errors.
constexpr auto kErrorPause = std::chrono::milliseconds(10);

}  // namespace

ProgressDriver::ProgressDriver(Transport& transport, Hook hook, int cpu)
    : transport_(transport), hook_(std::move(hook)) {
  thread_ = std::thread([this, cpu] { loop(cpu); });
}

ProgressDriver::~ProgressDriver() { stop(); }

void ProgressDriver::stop() {
  running_.store(false, std::memory_order_release);
  {
    std::lock_guard lock(gate_mutex_);
  }
  gate_cv_.notify_all();
  transport_.wake();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void ProgressDriver::release(bool resume_now) {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) != 1 || !resume_now) return;
  {
    // Under the mutex so the thread between its check and its sleep cannot miss it.
    std::lock_guard lock(gate_mutex_);
  }
  gate_cv_.notify_one();
}

std::string ProgressDriver::error() const {
  std::lock_guard lock(error_mutex_);
  return error_;
}

void ProgressDriver::loop(int cpu) {
  log::set_rank(transport_.rank());  // this thread's log lines carry its transport's rank
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<size_t>(cpu), &set);
    if (int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0) {
      std::lock_guard lock(error_mutex_);
      error_ = "progress thread: cannot pin to CPU " + std::to_string(cpu) +
               " (PCOLL_PROGRESS_CPU): " + std::strerror(rc);
      log::warn(error_);
    }
  }
  std::chrono::microseconds slice = kWaitSlice;
  while (running_.load(std::memory_order_acquire)) {
    if (holds_.load(std::memory_order_acquire) > 0) {
      std::unique_lock lock(gate_mutex_);
      gate_cv_.wait_for(lock, kResumeAfter, [this] {
        return holds_.load(std::memory_order_acquire) == 0 || !running_.load(std::memory_order_acquire);
      });
      continue;
    }
    try {
      transport_.wait(slice, Transport::WaitFor::activity);
      if (!running_.load(std::memory_order_acquire)) break;
      if (holds_.load(std::memory_order_acquire) > 0) continue;  // the holder drives
      transport_.progress();
      slice = kWaitSlice;
      if (hook_) slice = std::clamp<std::chrono::microseconds>(hook_(), std::chrono::microseconds(0), kWaitSlice);
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(error_mutex_);
        if (error_.empty()) {
          error_ = e.what();
          log::warn(std::string("progress thread: ") + e.what());
        }
      }
      std::this_thread::sleep_for(kErrorPause);
    }
  }
}

}  // namespace pcoll::transport
