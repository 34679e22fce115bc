// The application's interrupt check (interrupt.hpp): one per thread, asked at a bounded rate.
#include <support/interrupt.hpp>

#include <chrono>

namespace pcoll::interrupt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kAskEvery = std::chrono::milliseconds(10);

// Documented globals: the calling thread's check, when it was last asked, and its answer.
thread_local Check t_check = nullptr;
thread_local Clock::time_point t_asked{};
thread_local bool t_requested = false;

}  // namespace

void set_check(Check check) noexcept {
  t_check = check;
  t_asked = {};
  t_requested = false;
}

bool installed() noexcept { return t_check != nullptr; }

bool requested() {
  if (t_requested || t_check == nullptr) return t_requested;
  const auto now = Clock::now();
  if (now - t_asked < kAskEvery) return false;
  t_asked = now;
  t_requested = t_check() != 0;
  return t_requested;
}

}  // namespace pcoll::interrupt
