// The pieces of a handle's calls shared by handle.cpp and allreduce.cpp: the wait in
// slices, and the guard against two threads in one handle.
#pragma once

#include <cstdint>
#include <string>

#include "errors.hpp"
#include "handle.hpp"
#include "round_info.hpp"

namespace pcoll_python {

// How long one slice of a wait lasts: the most a Ctrl-C waits to be noticed.
constexpr uint64_t kWaitSliceUs = 50000;

enum class WaitEnd { done, failed, interrupted };

// One slice of the wait, GIL released by the caller: true once the round is over or failed
// (outcome says which).
bool wait_slice(HandleCore& core, RawInfo& raw, Outcome& outcome);
// Waits for the outstanding round in slices, GIL held on entry and exit. On `interrupted` a
// signal handler's exception is set and the round is still outstanding.
WaitEnd wait_for_round(HandleCore& core, RawInfo& raw, Outcome& outcome);
// wait_for_round, then the round's info; raises on failure or interruption (the round then
// stays outstanding).
py::object finish_round(HandleCore& core, const char* where);

// A blocking call in progress on a handle: a second thread gets InvalidState instead of
// racing it in the C library.
class BusyGuard {
 public:
  BusyGuard(HandleCore& core, const char* where) : core_(core) {
    if (core.busy) invalid_state(std::string(where) + ": another thread is inside a call on this allreduce");
    core.busy = true;
  }
  ~BusyGuard() { core_.busy = false; }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  HandleCore& core_;
};

}  // namespace pcoll_python
