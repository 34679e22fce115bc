// pcoll.Allreduce: a persistent allreduce handle of a communicator, its rounds, and the wait
// that Ctrl-C can interrupt.
//
// Lifetimes: a communicator keeps the list of its open handles, so comm.close() can destroy
// them (collectively, in creation order) before pcoll_finalize. Nothing collective happens
// in a destructor: a garbage collector does not run at the same point on every rank, and a
// destroy or finalize is a barrier. A handle dropped without close() is destroyed at
// comm.close(), or when the interpreter exits (comm.hpp).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pcoll/pcoll.h>

#include "buffers.hpp"
#include "errors.hpp"
#include "round_info.hpp"

namespace pcoll_python {

namespace py = pybind11;

struct HandleCore;

struct CommState {
  pcoll_comm_t* comm = nullptr;
  int rank = 0;
  int size = 1;
  std::string provider;
  std::string bootstrap;
  bool failed = false;  // a call reported a dead peer or transport: no collective clean-up
  std::vector<std::shared_ptr<HandleCore>> handles;  // open handles in creation order
};

// The creation arguments in effect, as the properties show them.
struct HandleArgs {
  size_t count = 0;
  pcoll_dtype_t dtype = PCOLL_FLOAT32;
  int op = 0, mode = 0, late = 0;
  uint32_t max_lag = 1, sync_every = 0, quorum = 0, grace_us = 0;
  bool elastic = false;
};

struct HandleCore {
  pcoll_allreduce_t* handle = nullptr;  // null once closed
  std::weak_ptr<CommState> comm;
  int size = 1;
  HandleArgs args;
  bool pending = false;  // a round was started and its result not yet handed out
  bool busy = false;     // a thread is inside a blocking call on this handle
  bool resumed = false;  // resume() freed the C handle: it goes on in the object resume returned
  std::optional<RawInfo> completed;  // seen done by test(), not yet returned by wait()
  Pinned send, recv;

  ~HandleCore();
  // A failed outcome of `where`: notes a communicator failure, raises the exception.
  [[noreturn]] void raise(const char* where, const Outcome& outcome);
  bool comm_failed() const;
  void release_buffers() {
    send = Pinned{};
    recv = Pinned{};
  }
};

// close(): finishes an outstanding round first (interruptibly: on Ctrl-C the handle stays
// open and the round outstanding), then destroys the handle collectively; on a failed
// communicator only locally.
void close_handle(HandleCore& core);

class Allreduce {
 public:
  explicit Allreduce(std::shared_ptr<HandleCore> core) : core_(std::move(core)) {}

  py::object run(const py::object& send, const py::object& recv);
  void start(const py::object& send, const py::object& recv);
  bool test();
  py::object wait();
  py::object flush(const py::object& recv);
  py::dict stats() const;
  // pcoll_allreduce_resume on `comm`, a pcoll.Comm shrunk from this handle's communicator:
  // (the new handle, delivered, the interrupted round's info or None). On success this
  // object is spent; on failure it stays as it was.
  py::tuple resume(const py::object& comm, const py::object& recv);
  void close() { close_handle(*core_); }
  Allreduce& enter();
  bool exit(const py::object& exc_type, const py::object&, const py::object&);
  std::string repr() const;

  const HandleCore& core() const { return *core_; }

 private:
  std::shared_ptr<HandleCore> core_;
};

// The names of the C API's enums, or the number for a value newer than the library's names.
std::string op_name(int op);
std::string mode_name(int mode);
std::string late_name(int late);

void add_allreduce_type(py::module_& m);

}  // namespace pcoll_python
