// pcoll._core.Comm: a communicator, the creation of its handles, and its two ways out:
// close() (collective) and leave() (local, for an interpreter that exits without close()).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handle.hpp"

namespace pcoll_python {

namespace py = pybind11;

// The creation arguments as pcoll/__init__.py parsed them.
struct CreateArgs {
  uint64_t count = 0;
  int dtype = 0, op = 0, mode = 0, late = 0;
  uint32_t max_lag = 1, sync_every = 0;
  uint64_t seed = 0;
  uint32_t timeout_ms = 0, quorum = 0, grace_us = 0;
  bool elastic = false;
};

class Comm {
 public:
  // pcoll_init; or, given `shrink_of`, pcoll_comm_shrink of that failed communicator.
  explicit Comm(Comm* shrink_of = nullptr);

  int rank() const { return state_->rank; }
  int size() const { return state_->size; }
  const std::string& provider() const { return state_->provider; }
  const std::string& bootstrap() const { return state_->bootstrap; }
  bool closed() const { return state_->comm == nullptr; }
  // pcoll_comm_failed_ranks: the ranks known to have failed, ascending.
  std::vector<int> failed_ranks() const;

  // pcoll_allreduce_create with the parsed arguments; the C library agrees them across ranks.
  Allreduce create(const CreateArgs& args);
  // The creation on a rank whose arguments did not parse: `problem` enters the one
  // agreement as this rank's error, so every rank raises InvalidArgument naming this rank.
  [[noreturn]] void create_refused(uint64_t count, const std::string& problem);
  void barrier();
  // A C handle made on this communicator (by create, or by pcoll_allreduce_resume) as a
  // Python object, listed among its open handles.
  Allreduce adopt(pcoll_allreduce_t* handle, const HandleArgs& args);
  // The state a handle of this communicator holds; resume reads its C communicator.
  const std::shared_ptr<CommState>& state() const { return state_; }
  // Collective: closes the open handles in creation order (the same on every rank), then
  // finalizes. Idempotent.
  void close();
  // Local: tells the peers this rank is gone (they get PeerFailed), then releases the
  // handles and the communicator without waiting for anyone. Idempotent.
  void leave(const std::string& reason);

 private:
  void require_open(const char* where) const;
  [[noreturn]] void raise(const char* where, const Outcome& outcome);
  void finalize();

  std::shared_ptr<CommState> state_;
};

void add_comm_type(py::module_& m);

}  // namespace pcoll_python
