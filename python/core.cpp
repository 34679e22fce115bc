// pcoll._core: the Python extension over pcoll's public C API (pcoll/pcoll.h) and nothing
// else. It owns the C objects, checks every buffer before it reaches the engine, releases
// the GIL around every call that can block, and waits for rounds in a loop that Ctrl-C can
// interrupt. Creation arguments are parsed and agreed on in pcoll/__init__.py; this module
// only exposes the C enums' names and values for that.
//
// Lifetimes: a communicator keeps the list of its open handles, so comm.close() can destroy
// them (collectively, in creation order) before pcoll_finalize. Nothing collective happens
// in a destructor: a garbage collector does not run at the same point on every rank, and a
// destroy or finalize is a barrier. An object dropped without close() is destroyed at
// comm.close(), or leaked at exit.
#include <pybind11/pybind11.h>

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pcoll/pcoll.h>

namespace py = pybind11;

namespace {

// --- Names of the C API's enums ------------------------------------------------------------

// One row per pcoll_dtype_t: what a buffer must look like to be one of them. Buffer-protocol
// formats are matched together with the item size (numpy's int64 is 'l' on LP64).
struct DtypeSpec {
  const char* name;
  pcoll_dtype_t value;
  size_t bytes;
  const char* formats;     // struct-module format characters accepted from the buffer protocol
  const char* torch_name;  // str(tensor.dtype)
};

constexpr DtypeSpec kDtypes[] = {
    {"float32", PCOLL_FLOAT32, 4, "f", "torch.float32"},
    {"float64", PCOLL_FLOAT64, 8, "d", "torch.float64"},
    {"int32", PCOLL_INT32, 4, "il", "torch.int32"},
    {"int64", PCOLL_INT64, 8, "lq", "torch.int64"},
    // numpy has no bfloat16: its raw bits as uint16 (as pcoll.hpp's bfloat16_bits).
    {"bfloat16", PCOLL_BFLOAT16, 2, "H", "torch.bfloat16"},
    {"float16", PCOLL_FLOAT16, 2, "e", "torch.float16"},
};

struct EnumName {
  const char* name;
  int value;
};
constexpr EnumName kOps[] = {{"sum", PCOLL_OP_SUM}, {"avg", PCOLL_OP_AVG}, {"min", PCOLL_OP_MIN}, {"max", PCOLL_OP_MAX}};
constexpr EnumName kModes[] = {{"sync", PCOLL_MODE_SYNC},
                               {"solo", PCOLL_MODE_SOLO},
                               {"majority", PCOLL_MODE_MAJORITY},
                               {"quorum", PCOLL_MODE_QUORUM}};
constexpr EnumName kLate[] = {{"carry", PCOLL_LATE_CARRY}, {"drop", PCOLL_LATE_DROP}};
constexpr EnumName kStatuses[] = {
    {"INVALID_ARGUMENT", PCOLL_ERR_INVALID_ARGUMENT}, {"INVALID_STATE", PCOLL_ERR_INVALID_STATE},
    {"MISMATCH", PCOLL_ERR_MISMATCH},                 {"TIMEOUT", PCOLL_ERR_TIMEOUT},
    {"PEER_FAILED", PCOLL_ERR_PEER_FAILED},           {"TRANSPORT", PCOLL_ERR_TRANSPORT},
    {"BOOTSTRAP", PCOLL_ERR_BOOTSTRAP},               {"UNSUPPORTED", PCOLL_ERR_UNSUPPORTED},
    {"NO_MEMORY", PCOLL_ERR_NO_MEMORY},               {"PROTOCOL", PCOLL_ERR_PROTOCOL},
    {"INTERNAL", PCOLL_ERR_INTERNAL},
};

const DtypeSpec* dtype_spec(int value) {
  for (const DtypeSpec& d : kDtypes)
    if (static_cast<int>(d.value) == value) return &d;
  return nullptr;
}

template <size_t N>
std::string name_of(const EnumName (&table)[N], int value) {
  for (const EnumName& e : table)
    if (e.value == value) return e.name;
  return std::to_string(value);  // a value newer than this table, passed through to C
}

// --- Errors -----------------------------------------------------------------------------------

// status -> exception class, registered by pcoll/errors.py. A raw reference on purpose: a
// static py::object would be released after the interpreter is gone.
PyObject* g_error_classes = nullptr;

[[noreturn]] void raise_status(int status, const std::string& message) {
  PyObject* cls = nullptr;
  if (g_error_classes != nullptr) {
    py::int_ key(status);
    cls = PyDict_GetItemWithError(g_error_classes, key.ptr());  // borrowed
  }
  if (cls == nullptr) cls = PyExc_RuntimeError;
  PyErr_SetString(cls, message.c_str());
  throw py::error_already_set();
}

[[noreturn]] void invalid_argument(const std::string& message) { raise_status(PCOLL_ERR_INVALID_ARGUMENT, message); }
[[noreturn]] void invalid_state(const std::string& message) { raise_status(PCOLL_ERR_INVALID_STATE, message); }

// A C call's outcome, captured on the calling thread (pcoll_last_error is per thread) while
// the GIL is released, and raised once it is held again.
struct Outcome {
  int status = PCOLL_SUCCESS;
  std::string message;
  void capture(int s) {
    status = s;
    if (s != PCOLL_SUCCESS) message = pcoll_last_error();
  }
};

// Statuses after which the communicator is unusable: collective clean-up would wait forever
// on a peer that is gone, so close() then only releases local resources.
bool fails_communicator(int status) {
  return status == PCOLL_ERR_TIMEOUT || status == PCOLL_ERR_PEER_FAILED || status == PCOLL_ERR_TRANSPORT ||
         status == PCOLL_ERR_PROTOCOL;
}

// --- Buffers ----------------------------------------------------------------------------------

struct ViewRelease {
  void operator()(Py_buffer* view) const {
    PyBuffer_Release(view);
    delete view;
  }
};

// Memory a round may still read or write: the object (and, for the buffer protocol, its
// export, which also stops numpy from resizing it) stays referenced until the round is over.
// Destroyed only with the GIL held.
struct Pinned {
  void* data = nullptr;
  py::object owner;
  std::unique_ptr<Py_buffer, ViewRelease> view;

  // Forget the memory without releasing it: the engine may still write there.
  void leak() {
    owner.release();
    (void)view.release();
    data = nullptr;
  }
};

// What the buffer checks need from torch, looked up once torch is imported (a tensor cannot
// exist before): the Tensor type, torch.strided and the torch dtype of each pcoll dtype.
struct TorchTypes {
  PyObject* tensor = nullptr;
  PyObject* strided = nullptr;
  PyObject* dtypes[std::size(kDtypes)] = {};
};

const TorchTypes* torch_types() {
  static TorchTypes types;  // references kept for the life of the process
  if (types.tensor != nullptr) return &types;
  PyObject* modules = PyImport_GetModuleDict();  // borrowed
  PyObject* torch = PyDict_GetItemString(modules, "torch");
  if (torch == nullptr) return nullptr;
  TorchTypes found;
  found.tensor = PyObject_GetAttrString(torch, "Tensor");
  found.strided = PyObject_GetAttrString(torch, "strided");
  for (size_t i = 0; i < std::size(kDtypes); ++i)
    found.dtypes[i] = PyObject_GetAttrString(torch, kDtypes[i].torch_name + 6);  // after "torch."
  const bool complete = found.tensor != nullptr && found.strided != nullptr &&
                        std::all_of(std::begin(found.dtypes), std::end(found.dtypes), [](PyObject* d) { return d != nullptr; });
  if (!complete) {  // torch still importing: try again next time
    PyErr_Clear();
    Py_XDECREF(found.tensor);
    Py_XDECREF(found.strided);
    for (PyObject* d : found.dtypes) Py_XDECREF(d);
    return nullptr;
  }
  types = found;
  return &types;
}

bool is_writable_required(const char* role) { return std::strcmp(role, "send") != 0; }

// A CPU torch tensor through its Python attributes (no torch headers, no ABI coupling).
Pinned pin_tensor(const py::object& t, const TorchTypes& torch, const char* where, const char* role,
                  const DtypeSpec& dtype, size_t count) {
  if (!t.attr("is_cpu").cast<bool>())
    invalid_argument(std::string(where) + ": " + role + " is a tensor on " + std::string(py::str(t.attr("device"))) +
                     "; pcoll reduces host memory: pass a CPU tensor (tensor.cpu())");
  const py::object layout = t.attr("layout");
  if (layout.ptr() != torch.strided)
    invalid_argument(std::string(where) + ": " + role + " is a " + std::string(py::str(layout)) +
                     " tensor; pass a dense tensor");
  const py::object tdtype = t.attr("dtype");
  if (tdtype.ptr() != torch.dtypes[&dtype - kDtypes])
    invalid_argument(std::string(where) + ": " + role + " has dtype " + std::string(py::str(tdtype)) +
                     ", the allreduce is " + dtype.name + " (" + dtype.torch_name + ")");
  const auto numel = t.attr("numel")().cast<size_t>();
  if (numel != count)
    invalid_argument(std::string(where) + ": " + role + " has " + std::to_string(numel) + " elements, the allreduce has " +
                     std::to_string(count));
  if (!t.attr("is_contiguous")().cast<bool>())
    invalid_argument(std::string(where) + ": " + role + " is not contiguous; pass tensor.contiguous()");
  Pinned p;
  p.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<uintptr_t>());
  p.owner = t;
  return p;
}

std::string format_of(const Py_buffer& view) {
  return view.format != nullptr ? view.format : "B";
}

// "float64" for numpy's 'd': the name a user knows the array by, where there is one.
std::string describe_format(const Py_buffer& view) {
  std::string format = format_of(view);
  if (!format.empty() && std::strchr("@=<", format[0]) != nullptr) format.erase(0, 1);
  const std::string bits = std::to_string(8 * view.itemsize);
  if (format.size() == 1) {
    const char c = format[0];
    if (c == 'f' || c == 'd' || c == 'e') return "float" + bits;
    if (std::strchr("bhilq", c) != nullptr) return "int" + bits;
    if (std::strchr("BHILQ", c) != nullptr) return "uint" + bits;
    if (c == '?') return "bool";
  }
  return "buffer format '" + format_of(view) + "'";
}

// The buffer protocol (numpy arrays, memoryviews, array.array, bytearray...).
Pinned pin_buffer(const py::object& obj, const char* where, const char* role, const DtypeSpec& dtype, size_t count) {
  std::unique_ptr<Py_buffer, ViewRelease> view(new Py_buffer{});
  if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_RECORDS_RO) != 0) {
    delete view.release();
    PyErr_Clear();
    invalid_argument(std::string(where) + ": " + role + " must be a numpy array, a CPU torch tensor or another buffer of " +
                     dtype.name + "; got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  // Native byte order only: '@', '=' and, on this little-endian ABI, '<'.
  const char* format = view->format != nullptr ? view->format : "B";
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  const bool type_ok = format[0] != '\0' && format[1] == '\0' && std::strchr(dtype.formats, format[0]) != nullptr &&
                       static_cast<size_t>(view->itemsize) == dtype.bytes;
  if (!type_ok)
    invalid_argument(std::string(where) + ": " + role + " has dtype " + describe_format(*view) + ", the allreduce is " +
                     dtype.name +
                     (dtype.value == PCOLL_BFLOAT16 ? " (raw bits in uint16, or a torch.bfloat16 tensor)" : ""));
  const size_t elements = static_cast<size_t>(view->len) / dtype.bytes;
  if (elements != count)
    invalid_argument(std::string(where) + ": " + role + " has " + std::to_string(elements) +
                     " elements, the allreduce has " + std::to_string(count));
  if (!PyBuffer_IsContiguous(view.get(), 'C'))
    invalid_argument(std::string(where) + ": " + role + " is not contiguous; pass numpy.ascontiguousarray(" + role + ")");
  if (view->readonly && is_writable_required(role))
    invalid_argument(std::string(where) + ": " + role + " is read-only; the result is written there, pass a writable array");
  Pinned p;
  p.data = view->buf;
  p.owner = obj;
  p.view = std::move(view);
  return p;
}

Pinned pin(const py::object& obj, const char* where, const char* role, const DtypeSpec& dtype, size_t count) {
  if (obj.is_none()) invalid_argument(std::string(where) + ": " + role + " is None; pass an array of " + dtype.name);
  // numpy arrays first: no torch lookup on their path.
  if (!PyObject_CheckBuffer(obj.ptr())) {
    if (const TorchTypes* torch = torch_types()) {
      const int is_tensor = PyObject_IsInstance(obj.ptr(), torch->tensor);
      if (is_tensor < 0) throw py::error_already_set();
      if (is_tensor == 1) return pin_tensor(obj, *torch, where, role, dtype, count);
    }
  }
  return pin_buffer(obj, where, role, dtype, count);
}

// --- Round info ----------------------------------------------------------------------------------

// RoundInfo is a struct sequence (a named tuple made in C): one allocation per round, no
// type lookups, and it prints with its field names.
PyTypeObject* g_round_info_type = nullptr;

PyStructSequence_Field kRoundInfoFields[] = {
    {"round", "0-based number of the round this result belongs to"},
    {"initiator", "the rank that activated the round; -1 in a synchronous round or a flush"},
    {"fresh", "how many ranks contributed fresh data to the round"},
    {"caller_late", "True if this rank's send missed the round: it is carried into the next"},
    {"fresh_ranks", "the ranks whose data was fresh, ascending"},
    {nullptr, nullptr},
};
PyStructSequence_Desc kRoundInfoDesc = {"pcoll.RoundInfo", "What one round was: who contributed fresh data, who started it.",
                                        kRoundInfoFields, 5};

// pcoll_round_info_t's fresh_mask is only valid until the next call on the handle, so it is
// copied out right after the call, before the GIL is taken back.
struct RawInfo {
  pcoll_round_info_t info{};
  std::vector<int> fresh_ranks;

  void keep_mask(int size) {
    fresh_ranks.clear();
    if (info.fresh_mask == nullptr) return;
    for (int r = 0; r < size; ++r)
      if ((info.fresh_mask[r / 64] >> (r % 64)) & 1u) fresh_ranks.push_back(r);
    info.fresh_mask = nullptr;
  }
  py::object to_python() const {
    PyObject* ranks = PyTuple_New(static_cast<Py_ssize_t>(fresh_ranks.size()));
    if (ranks == nullptr) throw py::error_already_set();
    for (size_t i = 0; i < fresh_ranks.size(); ++i) PyTuple_SET_ITEM(ranks, i, PyLong_FromLong(fresh_ranks[i]));
    PyObject* out = PyStructSequence_New(g_round_info_type);
    if (out == nullptr) {
      Py_DECREF(ranks);
      throw py::error_already_set();
    }
    PyStructSequence_SetItem(out, 0, PyLong_FromUnsignedLongLong(info.round));
    PyStructSequence_SetItem(out, 1, PyLong_FromLong(info.initiator));
    PyStructSequence_SetItem(out, 2, PyLong_FromLong(info.fresh));
    PyStructSequence_SetItem(out, 3, PyBool_FromLong(info.caller_late));
    PyStructSequence_SetItem(out, 4, ranks);
    return py::reinterpret_steal<py::object>(out);
  }
};

// --- Waiting ----------------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

// Most rounds are over within a millisecond: the caller polls pcoll_allreduce_test that long
// (a few-cycle pause between polls at first, then yielding: on a crowded node the ranks it
// waits for may need this CPU). A round still running then, typically one waiting for a
// straggler, is waited for by the library's own pcoll_allreduce_wait, which sleeps until the
// engine moves and probes a silent peer, on a helper thread, because nothing can interrupt
// it: the caller meanwhile sleeps on a condition variable and wakes up to run Python's
// signal handlers. (Handing over after 50 us instead made 38 KB rounds at P=4 on two cores
// take twice as long: each hand-over is two more thread wake-ups.)
constexpr auto kBusyPoll = std::chrono::microseconds(5);
constexpr auto kPollBudget = std::chrono::microseconds(1000);
// How often a waiting main thread takes the GIL back to run signal handlers (Ctrl-C).
constexpr auto kSignalEvery = std::chrono::milliseconds(5);

unsigned long g_main_thread = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The helper thread of one handle: sits in pcoll_allreduce_wait for a round handed over by
// begin() until it is over, then keeps the outcome until collect(). Calls on a handle never
// overlap: while a round is handed over, only this thread touches the C handle.
class Waiter {
 public:
  Waiter(pcoll_allreduce_t* handle, int size) : handle_(handle), size_(size), thread_([this] { loop(); }) {}
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  void begin() {
    std::lock_guard lock(mutex_);
    handed_ = true;
    done_ = false;
    changed_.notify_all();
  }
  // Whether a round was handed over and its outcome not yet collected.
  bool handed() {
    std::lock_guard lock(mutex_);
    return handed_;
  }
  // Up to `timeout` for the handed-over round; true once it is over.
  bool await(std::chrono::microseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done_; });
  }
  void collect(RawInfo& raw, Outcome& outcome) {
    std::lock_guard lock(mutex_);
    raw = std::move(raw_);
    outcome = std::move(outcome_);
    handed_ = done_ = false;
  }
  // Only when nothing is handed over.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    thread_.join();
  }
  // The thread may stay blocked in the C library for good (the communicator is being
  // dropped with a round in flight): let it, and never free what it uses.
  static void abandon(std::unique_ptr<Waiter> waiter) {
    waiter->thread_.detach();
    (void)waiter.release();
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || (handed_ && !done_ && !running_); });
      if (stopping_) return;
      running_ = true;
      lock.unlock();
      RawInfo raw;
      Outcome outcome;
      outcome.capture(pcoll_allreduce_wait(handle_, &raw.info));
      if (outcome.status == PCOLL_SUCCESS) raw.keep_mask(size_);
      lock.lock();
      raw_ = std::move(raw);
      outcome_ = std::move(outcome);
      running_ = false;
      done_ = true;
      changed_.notify_all();
    }
  }

  pcoll_allreduce_t* const handle_;
  const int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool handed_ = false, running_ = false, done_ = false, stopping_ = false;
  RawInfo raw_;
  Outcome outcome_;
  std::thread thread_;  // last: starts once the rest is ready
};

enum class WaitEnd { done, failed, interrupted };

bool in_main_thread() { return PyThread_get_thread_ident() == g_main_thread; }

// --- Communicator and handles ------------------------------------------------------------------------

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

struct HandleCore {
  pcoll_allreduce_t* handle = nullptr;  // null once closed
  std::weak_ptr<CommState> comm;
  int size = 1;
  size_t count = 0;
  const DtypeSpec* dtype = nullptr;
  int op = 0, mode = 0, late = 0;
  uint32_t max_lag = 1, sync_every = 0, quorum = 0, grace_us = 0;
  bool pending = false;  // a round was started and its result not yet handed out
  bool busy = false;     // a thread is inside a blocking call on this handle
  std::optional<RawInfo> completed;  // seen done by test(), not yet returned by wait()
  Pinned send, recv;
  std::unique_ptr<Waiter> waiter;  // made at the first round that outlasts kPollBudget

  ~HandleCore() {
    // Dropped with a round in flight (never closed, communicator gone): the engine may still
    // write into recv, so the memory is never given back.
    if (pending && handle != nullptr) {
      send.leak();
      recv.leak();
    }
    if (waiter && waiter->handed()) Waiter::abandon(std::move(waiter));
    else if (waiter) waiter->stop();
  }

  void note(int status) {
    if (!fails_communicator(status)) return;
    if (auto c = comm.lock()) c->failed = true;
  }
  bool comm_failed() const {
    auto c = comm.lock();
    return c == nullptr || c->failed;
  }
  void release_buffers() {
    send = Pinned{};
    recv = Pinned{};
  }
};

// Waits for the outstanding round of `core`; called without the GIL, which it takes back
// only to run signal handlers. On `interrupted` the handler's exception (KeyboardInterrupt
// for Ctrl-C) is set on this thread and the round is still outstanding: handed over to the
// waiter thread, which the next call picks up.
WaitEnd wait_for_round(HandleCore& core, bool check_signals, RawInfo& raw, Outcome& outcome) {
  if (!core.waiter || !core.waiter->handed()) {
    const auto started = Clock::now();
    for (unsigned polls = 0;; ++polls) {
      int done = 0;
      outcome.capture(pcoll_allreduce_test(core.handle, &done, &raw.info));
      if (outcome.status != PCOLL_SUCCESS) return WaitEnd::failed;
      if (done != 0) {
        raw.keep_mask(core.size);
        return WaitEnd::done;
      }
      // A clock read can cost as much as a poll in a VM: every 8th poll looks.
      if (polls % 8 != 0) {
        cpu_relax();
        continue;
      }
      const auto waited = Clock::now() - started;
      if (waited >= kPollBudget) break;
      if (waited < kBusyPoll) cpu_relax();
      else sched_yield();
    }
    if (!core.waiter) core.waiter = std::make_unique<Waiter>(core.handle, core.size);
    core.waiter->begin();
  }
  for (;;) {
    if (core.waiter->await(check_signals ? kSignalEvery : std::chrono::milliseconds(1000))) {
      core.waiter->collect(raw, outcome);
      return outcome.status == PCOLL_SUCCESS ? WaitEnd::done : WaitEnd::failed;
    }
    if (check_signals) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) return WaitEnd::interrupted;
    }
  }
}

class Allreduce;

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

void require_open(const HandleCore& core, const char* where) {
  if (core.handle == nullptr) invalid_state(std::string(where) + ": the allreduce is closed");
}

// Waits for the outstanding round (GIL held on entry and exit) and hands out its info.
py::object finish_round(HandleCore& core, const char* where) {
  RawInfo raw;
  Outcome outcome;
  WaitEnd end;
  const bool signals = in_main_thread();
  {
    py::gil_scoped_release nogil;
    end = wait_for_round(core, signals, raw, outcome);
  }
  if (end == WaitEnd::interrupted) throw py::error_already_set();  // the round stays outstanding
  if (end == WaitEnd::failed) {
    core.note(outcome.status);
    raise_status(outcome.status, std::string(where) + ": " + outcome.message);
  }
  core.pending = false;
  core.release_buffers();
  return raw.to_python();
}

void destroy_handle(HandleCore& core, const char* where) {
  pcoll_allreduce_t* h = core.handle;
  core.handle = nullptr;
  if (auto c = core.comm.lock()) {
    auto& list = c->handles;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == &core; }), list.end());
  }
  if (core.comm_failed()) {
    // pcoll_allreduce_destroy ends in a barrier the dead peer would never reach.
    if (core.pending) {
      core.send.leak();
      core.recv.leak();
    }
    if (core.waiter && core.waiter->handed()) Waiter::abandon(std::move(core.waiter));
    return;
  }
  if (core.waiter) {
    py::gil_scoped_release nogil;
    core.waiter->stop();  // idle: the round is over
    core.waiter.reset();
  }
  Outcome outcome;
  {
    py::gil_scoped_release nogil;
    outcome.capture(pcoll_allreduce_destroy(h));
  }
  if (outcome.status != PCOLL_SUCCESS) {
    core.note(outcome.status);
    raise_status(outcome.status, std::string(where) + ": " + outcome.message);
  }
}

// close(): finishes an outstanding round first (interruptibly: on Ctrl-C the handle stays
// open and the round outstanding), then destroys the handle collectively.
void close_handle(HandleCore& core) {
  if (core.handle == nullptr) return;
  BusyGuard busy(core, "close");
  if (core.pending && !core.comm_failed()) {
    try {
      (void)finish_round(core, "close");
    } catch (const py::error_already_set& e) {
      if (core.handle != nullptr && !core.comm_failed()) throw;  // interrupted: stays open
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

class Allreduce {
 public:
  explicit Allreduce(std::shared_ptr<HandleCore> core) : core_(std::move(core)) {}

  py::object run(const py::object& send, const py::object& recv) {
    HandleCore& c = *core_;
    require_open(c, "run");
    BusyGuard busy(c, "run");
    require_idle(c, "run");
    Pinned s = pin(send, "run", "send", *c.dtype, c.count);
    Pinned r = pin(recv, "run", "recv", *c.dtype, c.count);
    c.completed.reset();
    // Start and wait without taking the GIL back in between: one hand-over per round.
    RawInfo raw;
    Outcome outcome;
    WaitEnd end = WaitEnd::failed;
    bool started = false;
    const bool signals = in_main_thread();
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_allreduce_start(c.handle, s.data, r.data));
      started = outcome.status == PCOLL_SUCCESS;
      if (started) end = wait_for_round(c, signals, raw, outcome);
    }
    if (!started) {
      c.note(outcome.status);
      raise_status(outcome.status, "run: " + outcome.message);
    }
    // From here the round was started: its buffers must outlive it.
    c.pending = true;
    c.send = std::move(s);
    c.recv = std::move(r);
    if (end == WaitEnd::interrupted) throw py::error_already_set();
    if (end == WaitEnd::failed) {
      c.note(outcome.status);
      raise_status(outcome.status, "run: " + outcome.message);
    }
    c.pending = false;
    c.release_buffers();
    return raw.to_python();
  }

  void start(const py::object& send, const py::object& recv) {
    HandleCore& c = *core_;
    require_open(c, "start");
    BusyGuard busy(c, "start");
    require_idle(c, "start");
    Pinned s = pin(send, "start", "send", *c.dtype, c.count);
    Pinned r = pin(recv, "start", "recv", *c.dtype, c.count);
    c.completed.reset();
    Outcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_allreduce_start(c.handle, s.data, r.data));
    }
    if (outcome.status != PCOLL_SUCCESS) {
      c.note(outcome.status);
      raise_status(outcome.status, "start: " + outcome.message);
    }
    c.pending = true;
    c.send = std::move(s);
    c.recv = std::move(r);
  }

  bool test() {
    HandleCore& c = *core_;
    require_open(c, "test");
    if (c.completed) return true;
    if (!c.pending) invalid_state("test: no round outstanding; call start() first");
    BusyGuard busy(c, "test");
    RawInfo raw;
    Outcome outcome;
    if (c.waiter && c.waiter->handed()) {  // an interrupted wait left the round to the waiter
      bool over = false;
      {
        py::gil_scoped_release nogil;
        over = c.waiter->await(std::chrono::microseconds(0));
      }
      if (!over) return false;
      c.waiter->collect(raw, outcome);
      if (outcome.status != PCOLL_SUCCESS) {
        c.note(outcome.status);
        raise_status(outcome.status, "test: " + outcome.message);
      }
      c.pending = false;
      c.release_buffers();
      c.completed = std::move(raw);
      return true;
    }
    int done = 0;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_allreduce_test(c.handle, &done, &raw.info));
      if (outcome.status == PCOLL_SUCCESS && done != 0) raw.keep_mask(c.size);
    }
    if (outcome.status != PCOLL_SUCCESS) {
      c.note(outcome.status);
      raise_status(outcome.status, "test: " + outcome.message);
    }
    if (done == 0) return false;
    c.pending = false;
    c.release_buffers();
    c.completed = std::move(raw);
    return true;
  }

  py::object wait() {
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

  py::object flush(const py::object& recv) {
    HandleCore& c = *core_;
    require_open(c, "flush");
    BusyGuard busy(c, "flush");
    require_idle(c, "flush");
    Pinned r = pin(recv, "flush", "recv", *c.dtype, c.count);
    c.completed.reset();
    RawInfo raw;
    Outcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_allreduce_flush(c.handle, r.data, &raw.info));
      if (outcome.status == PCOLL_SUCCESS) raw.keep_mask(c.size);
    }
    if (outcome.status != PCOLL_SUCCESS) {
      c.note(outcome.status);
      raise_status(outcome.status, "flush: " + outcome.message);
    }
    return raw.to_python();
  }

  // pcoll_allreduce_stats as a dict (docs/observability.md); local and quick, so the GIL
  // stays held: that also keeps two threads from sharing the handle's arrays.
  py::dict stats() const {
    const HandleCore& c = *core_;
    require_open(c, "stats");
    pcoll_allreduce_stats_t raw{};
    raw.size = sizeof raw;
    const int status = pcoll_allreduce_stats(c.handle, &raw);
    if (status != PCOLL_SUCCESS) raise_status(status, std::string("stats: ") + pcoll_last_error());
    const auto n = static_cast<size_t>(raw.nranks);
    auto list = [](const uint64_t* values, size_t count) {
      py::list out(count);
      for (size_t i = 0; i < count; ++i) out[i] = py::int_(values[i]);
      return out;
    };
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
    out["fresh_rounds"] = list(raw.fresh_rounds, n);
    out["late_rounds"] = list(raw.late_rounds, n);
    out["longest_late_run"] = list(raw.longest_late_run, n);
    out["fresh_histogram"] = list(raw.fresh_histogram, n + 1);
    return out;
  }

  void close() { close_handle(*core_); }

  Allreduce& enter() {
    require_open(*core_, "with");
    return *this;
  }
  // Only a clean exit closes: closing is collective, and a rank leaving the block on an
  // exception may be the only one doing so.
  bool exit(const py::object& exc_type, const py::object&, const py::object&) {
    if (exc_type.is_none()) close();
    return false;
  }

  const HandleCore& core() const { return *core_; }

  std::string repr() const {
    const HandleCore& c = *core_;
    return "<pcoll.Allreduce count=" + std::to_string(c.count) + " dtype=" + c.dtype->name + " op=" +
           name_of(kOps, c.op) + " mode=" + name_of(kModes, c.mode) +
           (c.handle == nullptr ? " closed" : c.pending ? " pending" : "") + ">";
  }

 private:
  static void require_idle(const HandleCore& c, const char* where) {
    if (c.pending)
      invalid_state(std::string(where) +
                    ": a round is still outstanding (from start() or an interrupted call); call wait() first");
  }
  std::shared_ptr<HandleCore> core_;
};

class Comm {
 public:
  Comm() : state_(std::make_shared<CommState>()) {
    Outcome outcome;
    pcoll_comm_t* comm = nullptr;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_init(&comm));
    }
    if (outcome.status != PCOLL_SUCCESS) raise_status(outcome.status, "init: " + outcome.message);
    state_->comm = comm;
    state_->rank = pcoll_comm_rank(comm);
    state_->size = pcoll_comm_size(comm);
    state_->provider = pcoll_comm_provider(comm);
    state_->bootstrap = pcoll_comm_bootstrap(comm);
  }

  int rank() const { return state_->rank; }
  int size() const { return state_->size; }
  const std::string& provider() const { return state_->provider; }
  const std::string& bootstrap() const { return state_->bootstrap; }
  bool closed() const { return state_->comm == nullptr; }

  // Creation with values already agreed on by every rank (pcoll/__init__.py).
  Allreduce create(uint64_t count, int dtype, int op, int mode, int late, uint32_t max_lag, uint32_t sync_every,
                   uint64_t seed, uint32_t timeout_ms, uint32_t quorum, uint32_t grace_us) {
    require_open("allreduce");
    const DtypeSpec* spec = dtype_spec(dtype);
    if (spec == nullptr) invalid_argument("allreduce: dtype " + std::to_string(dtype) + " is not a pcoll dtype");
    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    // Enum values are copied as ints: one the C library does not know is its to report.
    std::memcpy(&opts.late, &late, sizeof late);
    opts.max_lag = max_lag;
    opts.sync_every = sync_every;
    opts.seed = seed;
    opts.timeout_ms = timeout_ms;
    opts.quorum = quorum;
    opts.grace_us = grace_us;
    pcoll_op_t c_op;
    pcoll_mode_t c_mode;
    std::memcpy(&c_op, &op, sizeof op);
    std::memcpy(&c_mode, &mode, sizeof mode);
    pcoll_allreduce_t* handle = nullptr;
    Outcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_allreduce_create(state_->comm, count, spec->value, c_op, c_mode, &opts, &handle));
    }
    if (outcome.status != PCOLL_SUCCESS) {
      if (fails_communicator(outcome.status)) state_->failed = true;
      raise_status(outcome.status, "allreduce: " + outcome.message);
    }
    auto core = std::make_shared<HandleCore>();
    core->handle = handle;
    core->comm = state_;
    core->size = state_->size;
    core->count = count;
    core->dtype = spec;
    core->op = op;
    core->mode = mode;
    core->late = late;
    core->max_lag = max_lag;
    core->sync_every = sync_every;
    // The k the library resolved a default 0 to (pcoll.h: floor(P/2) + 1).
    core->quorum = mode == PCOLL_MODE_QUORUM && quorum == 0 ? static_cast<uint32_t>(state_->size / 2 + 1) : quorum;
    core->grace_us = grace_us;
    state_->handles.push_back(core);
    return Allreduce(core);
  }

  void barrier() {
    require_open("barrier");
    Outcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_barrier(state_->comm));
    }
    if (outcome.status != PCOLL_SUCCESS) {
      if (fails_communicator(outcome.status)) state_->failed = true;
      raise_status(outcome.status, "barrier: " + outcome.message);
    }
  }

  // Collective: closes the open handles in creation order (the same on every rank), then
  // finalizes. Idempotent.
  void close() {
    if (state_->comm == nullptr) return;
    while (!state_->handles.empty()) {
      std::shared_ptr<HandleCore> core = state_->handles.front();
      if (core->busy) invalid_state("close: another thread is inside a call on one of this communicator's allreduces");
      close_handle(*core);
    }
    pcoll_comm_t* comm = state_->comm;
    state_->comm = nullptr;
    Outcome outcome;
    {
      py::gil_scoped_release nogil;
      outcome.capture(pcoll_finalize(comm));
    }
    if (outcome.status != PCOLL_SUCCESS) raise_status(outcome.status, "close: " + outcome.message);
  }

 private:
  void require_open(const char* where) const {
    if (state_->comm == nullptr) invalid_state(std::string(where) + ": the communicator is closed");
  }

  std::shared_ptr<CommState> state_;
};

template <size_t N>
py::dict names_of(const EnumName (&table)[N]) {
  py::dict d;
  for (const EnumName& e : table) d[e.name] = e.value;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pcoll's C API for Python: use the pcoll package, not this module";
  g_main_thread = PyThread_get_thread_ident();
  {
    // The interpreter's main thread, which may not be the one importing this module.
    py::object main = py::module_::import("threading").attr("main_thread")();
    g_main_thread = main.attr("ident").cast<unsigned long>();
  }

  py::dict dtypes;
  for (const DtypeSpec& d : kDtypes) dtypes[d.name] = static_cast<int>(d.value);
  m.attr("DTYPES") = dtypes;
  m.attr("OPS") = names_of(kOps);
  m.attr("MODES") = names_of(kModes);
  m.attr("LATE") = names_of(kLate);
  m.attr("STATUSES") = names_of(kStatuses);
  m.attr("VERSION") = py::make_tuple(PCOLL_VERSION_MAJOR, PCOLL_VERSION_MINOR);

  m.def("_set_error_classes", [](const py::dict& classes) {
    Py_XDECREF(g_error_classes);
    g_error_classes = classes.ptr();
    Py_INCREF(g_error_classes);
  });
  m.def("strerror", [](int status) { return std::string(pcoll_strerror(status)); });

  g_round_info_type = PyStructSequence_NewType(&kRoundInfoDesc);
  if (g_round_info_type == nullptr) throw py::error_already_set();
  m.attr("RoundInfo") = py::handle(reinterpret_cast<PyObject*>(g_round_info_type));

  py::class_<Allreduce>(m, "Allreduce", "A persistent allreduce handle; made by Comm.allreduce().")
      .def("run", &Allreduce::run, py::arg("send"), py::arg("recv"),
           "One round: contribute send (or carry it if the round already ran) and get the round's result in recv.")
      .def("start", &Allreduce::start, py::arg("send"), py::arg("recv"))
      .def("test", &Allreduce::test)
      .def("wait", &Allreduce::wait)
      .def("flush", &Allreduce::flush, py::arg("recv"))
      .def("close", &Allreduce::close)
      .def("stats", &Allreduce::stats, "Counters of this handle since creation (docs/observability.md).")
      .def("__enter__", &Allreduce::enter, py::return_value_policy::reference)
      .def("__exit__", &Allreduce::exit)
      .def("__repr__", &Allreduce::repr)
      .def_property_readonly("count", [](const Allreduce& a) { return a.core().count; })
      .def_property_readonly("dtype", [](const Allreduce& a) { return std::string(a.core().dtype->name); })
      .def_property_readonly("op", [](const Allreduce& a) { return name_of(kOps, a.core().op); })
      .def_property_readonly("mode", [](const Allreduce& a) { return name_of(kModes, a.core().mode); })
      .def_property_readonly("late", [](const Allreduce& a) { return name_of(kLate, a.core().late); })
      .def_property_readonly("max_lag", [](const Allreduce& a) { return a.core().max_lag; })
      .def_property_readonly("sync_every", [](const Allreduce& a) { return a.core().sync_every; })
      .def_property_readonly("quorum", [](const Allreduce& a) { return a.core().quorum; })
      .def_property_readonly("grace_us", [](const Allreduce& a) { return a.core().grace_us; })
      .def_property_readonly("closed", [](const Allreduce& a) { return a.core().handle == nullptr; })
      .def_property_readonly("pending", [](const Allreduce& a) { return a.core().pending; });

  py::class_<Comm>(m, "Comm")
      .def(py::init<>())
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def_property_readonly("provider", &Comm::provider)
      .def_property_readonly("bootstrap", &Comm::bootstrap)
      .def_property_readonly("closed", &Comm::closed)
      .def("_create", &Comm::create, py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("mode"),
           py::arg("late"), py::arg("max_lag"), py::arg("sync_every"), py::arg("seed"), py::arg("timeout_ms"),
           py::arg("quorum") = 0, py::arg("grace_us") = 0)
      .def("barrier", &Comm::barrier)
      .def("close", &Comm::close);
}
