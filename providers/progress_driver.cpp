// ProgressDriver: the thread that keeps a transport progressing (peers' RMA and atomics on
// manual-progress providers) while the application computes.
#include "progress_driver.hpp"

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include "support/error.hpp"
#include "support/log.hpp"

namespace pcoll::transport {

namespace {

// Long enough that an idle driver wakes rarely, short enough that stop() is prompt even if
// a wake() were missed.
constexpr auto kWaitSlice = std::chrono::milliseconds(50);
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
  transport_.wake();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string ProgressDriver::error() const {
  std::lock_guard lock(error_mutex_);
  return error_;
}

void ProgressDriver::loop(int cpu) {
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
  while (running_.load(std::memory_order_acquire)) {
    try {
      transport_.wait(kWaitSlice, Transport::WaitFor::activity);
      if (!running_.load(std::memory_order_acquire)) break;
      transport_.progress();
      if (hook_) hook_();
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
