// pcoll._core.Comm (comm.hpp).
#include "comm.hpp"

#include <cstring>
#include <vector>

#include <pybind11/stl.h>

#include <pcoll/private.h>

namespace pcoll_python {

Comm::Comm(Comm* shrink_of) : state_(std::make_shared<CommState>()) {
  if (shrink_of != nullptr) shrink_of->require_open("shrink");
  Outcome outcome;
  pcoll_comm_t* comm = nullptr;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(shrink_of != nullptr ? pcoll_comm_shrink(shrink_of->state_->comm, &comm) : pcoll_init(&comm));
  }
  if (!outcome.ok()) raise_outcome(shrink_of != nullptr ? "shrink" : "init", outcome);
  state_->comm = comm;
  state_->rank = pcoll_comm_rank(comm);
  state_->size = pcoll_comm_size(comm);
  state_->provider = pcoll_comm_provider(comm);
  state_->bootstrap = pcoll_comm_bootstrap(comm);
}

void Comm::require_open(const char* where) const {
  if (state_->comm == nullptr) invalid_state(std::string(where) + ": the communicator is closed");
}

void Comm::raise(const char* where, const Outcome& outcome) {
  if (fails_communicator(outcome.status)) state_->failed = true;
  raise_outcome(where, outcome);
}

Allreduce Comm::create(const CreateArgs& a) {
  require_open("allreduce");
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  // Enum values are copied as ints: one the C library does not know is its to report.
  std::memcpy(&opts.late, &a.late, sizeof a.late);
  opts.max_lag = a.max_lag;
  opts.sync_every = a.sync_every;
  opts.seed = a.seed;
  opts.timeout_ms = a.timeout_ms;
  opts.quorum = a.quorum;
  opts.grace_us = a.grace_us;
  opts.elastic = a.elastic ? 1 : 0;
  pcoll_dtype_t dtype;
  pcoll_op_t op;
  pcoll_mode_t mode;
  std::memcpy(&dtype, &a.dtype, sizeof a.dtype);
  std::memcpy(&op, &a.op, sizeof a.op);
  std::memcpy(&mode, &a.mode, sizeof a.mode);
  pcoll_allreduce_t* handle = nullptr;
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_create(state_->comm, a.count, dtype, op, mode, &opts, &handle));
  }
  if (!outcome.ok()) raise("allreduce", outcome);
  // The k the library resolved a default 0 to (pcoll.h: floor(P/2) + 1).
  const bool default_quorum = a.mode == PCOLL_MODE_QUORUM && a.quorum == 0;
  return adopt(handle, HandleArgs{a.count, dtype, a.op, a.mode, a.late, a.max_lag, a.sync_every,
                                  default_quorum ? static_cast<uint32_t>(state_->size / 2 + 1) : a.quorum,
                                  a.grace_us, a.elastic});
}

Allreduce Comm::adopt(pcoll_allreduce_t* handle, const HandleArgs& args) {
  auto core = std::make_shared<HandleCore>();
  core->handle = handle;
  core->comm = state_;
  core->size = state_->size;
  core->args = args;
  state_->handles.push_back(core);
  return Allreduce(core);
}

void Comm::create_refused(uint64_t count, const std::string& problem) {
  require_open("allreduce");
  pcoll_allreduce_t* handle = nullptr;
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_private_allreduce_create_refused(state_->comm, count, problem.c_str(), &handle));
  }
  if (outcome.ok()) {  // cannot be: the refusal is this rank's own
    if (handle != nullptr) (void)pcoll_allreduce_destroy(handle);
    raise_status(PCOLL_ERR_INTERNAL, "allreduce: a refused creation succeeded (" + problem + ")");
  }
  raise("allreduce", outcome);
}

std::vector<int> Comm::failed_ranks() const {
  require_open("failed_ranks");
  std::vector<int> ranks(static_cast<size_t>(state_->size));  // a rank is named at most once
  int n = 0;
  Outcome outcome;
  outcome.capture(pcoll_comm_failed_ranks(state_->comm, ranks.data(), static_cast<int>(ranks.size()), &n));
  if (!outcome.ok()) raise_outcome("failed_ranks", outcome);
  ranks.resize(static_cast<size_t>(n));
  return ranks;
}

void Comm::barrier() {
  require_open("barrier");
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_barrier(state_->comm));
  }
  if (!outcome.ok()) raise("barrier", outcome);
}

void Comm::close() {
  if (state_->comm == nullptr) return;
  while (!state_->handles.empty()) {
    std::shared_ptr<HandleCore> core = state_->handles.front();
    if (core->busy) invalid_state("close: another thread is inside a call on one of this communicator's allreduces");
    close_handle(*core);
  }
  finalize();
}

void Comm::leave(const std::string& reason) {
  if (state_->comm == nullptr) return;
  Outcome outcome;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_private_comm_abandon(state_->comm, reason.c_str()));
  }
  state_->failed = true;  // from here nothing waits for a peer
  for (const std::shared_ptr<HandleCore>& core : std::vector(state_->handles)) {
    // A daemon thread still inside a wait on it: destroying the handle under that thread
    // would free what it uses, so the handle (and with it the communicator) stays.
    if (!core->busy) close_handle(*core);
  }
  finalize();
}

void Comm::finalize() {
  pcoll_comm_t* comm = state_->comm;
  state_->comm = nullptr;
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_finalize(comm));
  }
  // A failed communicator's finalize returns the failure, which was reported already.
  if (!outcome.ok() && !state_->failed) raise_outcome("close", outcome);
}

void add_comm_type(py::module_& m) {
  py::class_<Comm>(m, "Comm")
      .def(py::init<Comm*>(), py::arg("shrink_of") = nullptr)
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def_property_readonly("provider", &Comm::provider)
      .def_property_readonly("bootstrap", &Comm::bootstrap)
      .def_property_readonly("closed", &Comm::closed)
      .def_property_readonly("failed_ranks", &Comm::failed_ranks)
      .def(
          "_create",
          [](Comm& c, uint64_t count, int dtype, int op, int mode, int late, uint32_t max_lag, uint32_t sync_every,
             uint64_t seed, uint32_t timeout_ms, uint32_t quorum, uint32_t grace_us, bool elastic) {
            return c.create(CreateArgs{count, dtype, op, mode, late, max_lag, sync_every, seed, timeout_ms, quorum,
                                       grace_us, elastic});
          },
          py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("mode"), py::arg("late"), py::arg("max_lag"),
          py::arg("sync_every"), py::arg("seed"), py::arg("timeout_ms"), py::arg("quorum"), py::arg("grace_us"),
          py::arg("elastic").noconvert())
      .def("_create_refused", &Comm::create_refused, py::arg("count"), py::arg("problem"))
      .def("_leave", &Comm::leave, py::arg("reason"))
      .def("barrier", &Comm::barrier)
      .def("close", &Comm::close);
}

}  // namespace pcoll_python
