// pcoll._core's errors: a C call's outcome, and the one place where a PCOLL_ERR_* status
// becomes the exception of its class (pcoll/errors.py registers the classes at import).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace pcoll_python {

namespace py = pybind11;

// A C call's outcome, captured on the calling thread (pcoll_last_error is per thread) while
// the GIL is released, and raised once it is held again.
struct Outcome {
  int status = 0;
  std::string message;
  void capture(int s);
  bool ok() const { return status == 0; }
};

// status -> exception class, from pcoll/errors.py.
void set_error_classes(const py::dict& classes);

// Sets the exception of `status`'s class with `message` and throws error_already_set. GIL held.
[[noreturn]] void raise_status(int status, const std::string& message);
// A failed outcome as "where: <the C library's message>".
[[noreturn]] inline void raise_outcome(const char* where, const Outcome& outcome) {
  raise_status(outcome.status, std::string(where) + ": " + outcome.message);
}
[[noreturn]] void invalid_argument(const std::string& message);
[[noreturn]] void invalid_state(const std::string& message);

// For the span of a C call that may wait for peers (init, create, destroy, barrier,
// finalize): pcoll's waits ask Python's signal handlers every 10 ms, so that Ctrl-C ends
// the call (the C status is then PCOLL_ERR_INVALID_STATE, and raise_status raises the
// handler's KeyboardInterrupt instead). Outside the main thread the check finds nothing.
class InterruptibleCall {
 public:
  InterruptibleCall();
  ~InterruptibleCall();
  InterruptibleCall(const InterruptibleCall&) = delete;
  InterruptibleCall& operator=(const InterruptibleCall&) = delete;
};

// Statuses after which the communicator is unusable: collective clean-up would wait forever
// on a peer that is gone, so close() then only releases local resources.
bool fails_communicator(int status);

}  // namespace pcoll_python
