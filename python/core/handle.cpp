// A handle's state, its wait and its destruction (handle.hpp).
//
// A round is waited for in slices of pcoll_allreduce_timedwait, the library's own wait (it
// spins briefly, then sleeps until the engine moves, and probes a silent peer), with the GIL
// released during each slice. Between slices the waiting thread takes the GIL back and runs
// Python's signal handlers (PyErr_CheckSignals, a no-op outside the main thread): Ctrl-C
// raises KeyboardInterrupt with the round still outstanding, and a later wait() picks it up.
// No other thread ever waits for a round.
#include "handle.hpp"

#include <algorithm>

#include "wait.hpp"

namespace pcoll_python {

HandleCore::~HandleCore() {
  // Dropped with a round in flight (never closed, communicator gone): the engine may still
  // write into recv, so the memory is never given back.
  if (pending && handle != nullptr) {
    send.leak();
    recv.leak();
  }
}

void HandleCore::raise(const char* where, const Outcome& outcome) {
  if (fails_communicator(outcome.status))
    if (auto c = comm.lock()) c->failed = true;
  raise_outcome(where, outcome);
}

bool HandleCore::comm_failed() const {
  auto c = comm.lock();
  return c == nullptr || c->failed;
}

bool wait_slice(HandleCore& core, RawInfo& raw, Outcome& outcome) {
  int done = 0;
  outcome.capture(pcoll_allreduce_timedwait(core.handle, kWaitSliceUs, &done, &raw.info));
  if (!outcome.ok()) return true;
  if (done != 0) raw.keep_mask(core.size);
  return done != 0;
}

WaitEnd wait_for_round(HandleCore& core, RawInfo& raw, Outcome& outcome) {
  for (;;) {
    if (PyErr_CheckSignals() != 0) return WaitEnd::interrupted;
    bool over = false;
    {
      py::gil_scoped_release nogil;
      over = wait_slice(core, raw, outcome);
    }
    if (over) return outcome.ok() ? WaitEnd::done : WaitEnd::failed;
  }
}

py::object finish_round(HandleCore& core, const char* where) {
  RawInfo raw;
  Outcome outcome;
  const WaitEnd end = wait_for_round(core, raw, outcome);
  if (end == WaitEnd::interrupted) throw py::error_already_set();  // the round stays outstanding
  if (end == WaitEnd::failed) core.raise(where, outcome);
  core.pending = false;
  core.release_buffers();
  return raw.to_python();
}

namespace {

// Destroys the C handle. On a failed communicator pcoll_allreduce_destroy waits for nobody
// and only releases what is local; a round still in flight keeps its buffers for good.
void destroy_handle(HandleCore& core, const char* where) {
  pcoll_allreduce_t* h = core.handle;
  core.handle = nullptr;
  if (auto c = core.comm.lock()) {
    auto& list = c->handles;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == &core; }), list.end());
  }
  const bool failed = core.comm_failed();
  if (failed && core.pending) {
    core.send.leak();
    core.recv.leak();
  }
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_destroy(h));
  }
  // On a failed communicator destroy returns the failure, which was reported already.
  if (!outcome.ok() && !failed) core.raise(where, outcome);
}

}  // namespace

void close_handle(HandleCore& core) {
  if (core.handle == nullptr) return;
  BusyGuard busy(core, "close");
  if (core.pending && !core.comm_failed()) {
    try {
      (void)finish_round(core, "close");
    } catch (const py::error_already_set&) {
      if (!core.comm_failed()) throw;  // interrupted: stays open, the round outstanding
      // The communicator failed while waiting: release what can be released, report it.
      destroy_handle(core, "close");
      throw;
    }
  }
  core.completed.reset();
  destroy_handle(core, "close");
  core.pending = false;
  core.release_buffers();
}

}  // namespace pcoll_python
