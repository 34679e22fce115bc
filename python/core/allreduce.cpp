// pcoll.Allreduce's methods and Python type (handle.hpp).
#include <algorithm>
#include <string>

#include "comm.hpp"
#include "handle.hpp"
#include "wait.hpp"

namespace pcoll_python {
namespace {

void require_open(const HandleCore& core, const char* where) {
  if (core.handle != nullptr) return;
  if (core.resumed)
    invalid_state(std::string(where) +
                  ": the allreduce was resumed on the survivors' communicator; use the handle resume() returned");
  const auto comm = core.comm.lock();
  if (comm == nullptr || comm->comm == nullptr)
    invalid_state(std::string(where) + ": the communicator is closed (comm.close() closed this allreduce with it)");
  invalid_state(std::string(where) + ": the allreduce is closed");
}

void require_idle(const HandleCore& core, const char* where) {
  if (core.pending)
    invalid_state(std::string(where) +
                  ": a round is still outstanding (from start() or an interrupted call); call wait() first");
}

std::string enum_name(const char* name, int value) { return name != nullptr ? name : std::to_string(value); }

py::list as_list(const uint64_t* values, size_t count) {
  py::list out(count);
  for (size_t i = 0; i < count; ++i) out[i] = py::int_(values[i]);
  return out;
}

}  // namespace

std::string op_name(int op) { return enum_name(pcoll_op_name(static_cast<pcoll_op_t>(op)), op); }
std::string mode_name(int mode) { return enum_name(pcoll_mode_name(static_cast<pcoll_mode_t>(mode)), mode); }
std::string late_name(int late) { return enum_name(pcoll_late_name(static_cast<pcoll_late_t>(late)), late); }

py::object Allreduce::run(const py::object& send, const py::object& recv) {
  HandleCore& c = *core_;
  require_open(c, "run");
  BusyGuard busy(c, "run");
  require_idle(c, "run");
  Pinned s = pin(send, "run", "send", c.args.dtype, c.args.count);
  Pinned r = pin(recv, "run", "recv", c.args.dtype, c.args.count);
  c.completed.reset();
  // Start and the first slice of the wait without taking the GIL back in between: one
  // hand-over per round that is over within a slice.
  RawInfo raw;
  Outcome outcome;
  bool over = false;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_start(c.handle, s.data, r.data));
    if (outcome.ok()) over = wait_slice(c, raw, outcome);
  }
  if (!outcome.ok() && !over) c.raise("run", outcome);  // the start failed
  // From here the round was started: its buffers must outlive it.
  c.pending = true;
  c.send = std::move(s);
  c.recv = std::move(r);
  if (!over) return finish_round(c, "run");
  if (!outcome.ok()) c.raise("run", outcome);
  c.pending = false;
  c.release_buffers();
  return raw.to_python();
}

void Allreduce::start(const py::object& send, const py::object& recv) {
  HandleCore& c = *core_;
  require_open(c, "start");
  BusyGuard busy(c, "start");
  require_idle(c, "start");
  Pinned s = pin(send, "start", "send", c.args.dtype, c.args.count);
  Pinned r = pin(recv, "start", "recv", c.args.dtype, c.args.count);
  c.completed.reset();
  Outcome outcome;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_start(c.handle, s.data, r.data));
  }
  if (!outcome.ok()) c.raise("start", outcome);
  c.pending = true;
  c.send = std::move(s);
  c.recv = std::move(r);
}

bool Allreduce::test() {
  HandleCore& c = *core_;
  require_open(c, "test");
  if (c.completed) return true;
  if (!c.pending) invalid_state("test: no round outstanding; call start() first");
  BusyGuard busy(c, "test");
  RawInfo raw;
  Outcome outcome;
  int done = 0;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_test(c.handle, &done, &raw.info));
    if (outcome.ok() && done != 0) raw.keep_mask(c.size);
  }
  if (!outcome.ok()) c.raise("test", outcome);
  if (done == 0) return false;
  c.pending = false;
  c.release_buffers();
  c.completed = std::move(raw);
  return true;
}

py::object Allreduce::wait() {
  HandleCore& c = *core_;
  require_open(c, "wait");
  if (c.completed) {
    py::object info = c.completed->to_python();
    c.completed.reset();
    return info;
  }
  if (!c.pending) invalid_state("wait: no round outstanding; call start() first");
  BusyGuard busy(c, "wait");
  return finish_round(c, "wait");
}

py::object Allreduce::flush(const py::object& recv) {
  HandleCore& c = *core_;
  require_open(c, "flush");
  BusyGuard busy(c, "flush");
  require_idle(c, "flush");
  Pinned r = pin(recv, "flush", "recv", c.args.dtype, c.args.count);
  c.completed.reset();
  RawInfo raw;
  Outcome outcome;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_flush(c.handle, r.data, &raw.info));
    if (outcome.ok()) raw.keep_mask(c.size);
  }
  if (!outcome.ok()) c.raise("flush", outcome);
  return raw.to_python();
}

// pcoll_allreduce_resume. The old handle's pinned buffers (an interrupted round's send and
// recv) stay referenced until the call returns: resume reads the send (carried) and the
// recv (a result that landed there) of that round. After a success every survivor has
// left the old rounds (resume is collective over all of them) and the old communicator's
// engine no longer knows the handle, so they are released, not leaked as a destroy on a
// failed communicator leaks a round in flight.
py::tuple Allreduce::resume(const py::object& comm, const py::object& recv) {
  HandleCore& c = *core_;
  require_open(c, "resume");
  if (!py::isinstance<Comm>(comm))
    invalid_argument("resume: comm must be a pcoll.Comm (from shrink()), got " +
                     std::string(py::str(py::type::of(comm).attr("__name__"))));
  Comm& survivors = comm.cast<Comm&>();
  const std::shared_ptr<CommState> state = survivors.state();
  if (state->comm == nullptr) invalid_state("resume: the survivors' communicator is closed");
  BusyGuard busy(c, "resume");
  Pinned r = pin(recv, "resume", "recv", c.args.dtype, c.args.count);
  RawInfo raw;
  int delivered = 0;
  pcoll_allreduce_t* resumed = nullptr;
  Outcome outcome;
  InterruptibleCall interruptible;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_resume(c.handle, state->comm, r.data, &delivered, &raw.info, &resumed));
    // The interrupted round's fresh mask is over the old ranks.
    if (outcome.ok() && delivered != 0) raw.keep_mask(c.size);
  }
  if (!outcome.ok()) {
    // A survivor died during the call: it is the survivors' communicator that failed. The
    // old handle is as it was (pcoll.h), for another shrink and resume.
    if (fails_communicator(outcome.status)) state->failed = true;
    raise_outcome("resume", outcome);
  }
  // The old C handle was freed by the call: this object is spent.
  if (auto old_comm = c.comm.lock()) {
    auto& list = old_comm->handles;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == &c; }), list.end());
  }
  c.handle = nullptr;
  c.resumed = true;
  c.pending = false;
  c.completed.reset();
  c.release_buffers();
  HandleArgs args = c.args;
  // The library caps a quorum larger than the survivors at their number (pcoll.h).
  args.quorum = std::min(args.quorum, static_cast<uint32_t>(state->size));
  Allreduce fresh = survivors.adopt(resumed, args);
  py::object info = delivered != 0 ? raw.to_python() : py::none();
  return py::make_tuple(std::move(fresh), delivered != 0, std::move(info));
}

// pcoll_allreduce_stats as a dict (docs/observability.md); local and quick, so the GIL
// stays held: that also keeps two threads from sharing the handle's arrays.
py::dict Allreduce::stats() const {
  const HandleCore& c = *core_;
  require_open(c, "stats");
  pcoll_allreduce_stats_t raw{};
  raw.size = sizeof raw;
  Outcome outcome;
  outcome.capture(pcoll_allreduce_stats(c.handle, &raw));
  if (!outcome.ok()) raise_outcome("stats", outcome);
  const auto n = static_cast<size_t>(raw.nranks);
  py::dict out;
  out["rounds"] = raw.rounds;
  out["flushes"] = raw.flushes;
  out["flushes_carried"] = raw.flushes_carried;
  out["rounds_initiated"] = raw.rounds_initiated;
  out["rounds_while_computing"] = raw.rounds_while_computing;
  out["blocked_s"] = static_cast<double>(raw.blocked_ns) * 1e-9;
  out["bytes_written"] = raw.bytes_written;
  out["memory_bytes"] = raw.memory_bytes;
  out["registered_bytes"] = raw.registered_bytes;
  out["fresh_rounds"] = as_list(raw.fresh_rounds, n);
  out["late_rounds"] = as_list(raw.late_rounds, n);
  out["longest_late_run"] = as_list(raw.longest_late_run, n);
  out["fresh_histogram"] = as_list(raw.fresh_histogram, n + 1);
  out["plan"] = raw.plan != nullptr ? raw.plan : "";
  out["bytes_read"] = raw.bytes_read;
  out["bytes_network"] = raw.bytes_network;
  out["messages_network"] = raw.messages_network;
  out["memory_traffic_bytes"] = raw.memory_traffic_bytes;
  return out;
}

Allreduce& Allreduce::enter() {
  require_open(*core_, "with");
  return *this;
}

// Only a clean exit closes: closing is collective, and a rank leaving the block on an
// exception may be the only one doing so.
bool Allreduce::exit(const py::object& exc_type, const py::object&, const py::object&) {
  if (exc_type.is_none()) close();
  return false;
}

std::string Allreduce::repr() const {
  const HandleCore& c = *core_;
  return "<pcoll.Allreduce count=" + std::to_string(c.args.count) + " dtype=" + pcoll_dtype_name(c.args.dtype) +
         " op=" + op_name(c.args.op) + " mode=" + mode_name(c.args.mode) +
         (c.resumed ? " resumed" : c.handle == nullptr ? " closed" : c.pending ? " pending" : "") + ">";
}

void add_allreduce_type(py::module_& m) {
  py::class_<Allreduce>(m, "Allreduce", "A persistent allreduce handle; made by Comm.allreduce().")
      .def("run", &Allreduce::run, py::arg("send"), py::arg("recv"),
           "One round: contribute send (or carry it if the round already ran) and get the round's result in recv.")
      .def("start", &Allreduce::start, py::arg("send"), py::arg("recv"))
      .def("test", &Allreduce::test)
      .def("wait", &Allreduce::wait)
      .def("flush", &Allreduce::flush, py::arg("recv"))
      .def("resume", &Allreduce::resume, py::arg("comm"), py::arg("recv"),
           "After a failure, the same allreduce on the survivors: (handle, delivered, info).\n\n"
           "Collective over `comm`, made by shrink() from this handle's communicator; the handle must\n"
           "have been created with elastic=True. Every survivor's carry moves into the new handle, and\n"
           "the call the failure interrupted is settled: if its round completed on some survivor,\n"
           "`recv` gets that round's result, delivered is True and info is its RoundInfo, whose\n"
           "fresh_ranks are the OLD ranks; otherwise delivered is False, info None, its send is carried\n"
           "and the next call is that round again. Rounds a survivor completed and did not collect\n"
           "come back from its next calls; the first new round is the one after the last any survivor\n"
           "completed. On success this object is spent (its calls raise InvalidState) and the\n"
           "returned handle belongs to `comm`; on failure (PeerFailed: a survivor died meanwhile)\n"
           "this object stays as it was, for another shrink and resume. A handle without elastic, or\n"
           "a communicator not shrunk from its own, raises InvalidArgument.")
      .def("close", &Allreduce::close)
      .def("stats", &Allreduce::stats, "Counters of this handle since creation (docs/observability.md).")
      .def("__enter__", &Allreduce::enter, py::return_value_policy::reference)
      .def("__exit__", &Allreduce::exit)
      .def("__repr__", &Allreduce::repr)
      .def_property_readonly("count", [](const Allreduce& a) { return a.core().args.count; })
      .def_property_readonly("dtype", [](const Allreduce& a) { return std::string(pcoll_dtype_name(a.core().args.dtype)); })
      .def_property_readonly("op", [](const Allreduce& a) { return op_name(a.core().args.op); })
      .def_property_readonly("mode", [](const Allreduce& a) { return mode_name(a.core().args.mode); })
      .def_property_readonly("late", [](const Allreduce& a) { return late_name(a.core().args.late); })
      .def_property_readonly("max_lag", [](const Allreduce& a) { return a.core().args.max_lag; })
      .def_property_readonly("sync_every", [](const Allreduce& a) { return a.core().args.sync_every; })
      .def_property_readonly("quorum", [](const Allreduce& a) { return a.core().args.quorum; })
      .def_property_readonly("grace_us", [](const Allreduce& a) { return a.core().args.grace_us; })
      .def_property_readonly("elastic", [](const Allreduce& a) { return a.core().args.elastic; })
      .def_property_readonly("closed", [](const Allreduce& a) { return a.core().handle == nullptr; })
      .def_property_readonly("pending", [](const Allreduce& a) { return a.core().pending; });
}

}  // namespace pcoll_python
