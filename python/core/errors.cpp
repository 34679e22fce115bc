// The status-to-exception mapping of pcoll._core (errors.hpp).
#include "errors.hpp"

#include <pcoll/pcoll.h>
#include <pcoll/private.h>

namespace pcoll_python {
namespace {

// A raw reference on purpose: a static py::object would be released after the interpreter
// is gone.
PyObject* g_error_classes = nullptr;

}  // namespace

void Outcome::capture(int s) {
  status = s;
  if (s != PCOLL_SUCCESS) message = pcoll_last_error();
}

void set_error_classes(const py::dict& classes) {
  Py_XDECREF(g_error_classes);
  g_error_classes = classes.ptr();
  Py_INCREF(g_error_classes);
}

void raise_status(int status, const std::string& message) {
  // A signal handler's exception, raised while the call waited (InterruptibleCall): that
  // is the call's error (KeyboardInterrupt), not the status it ended with.
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  PyObject* cls = nullptr;
  if (g_error_classes != nullptr) {
    py::int_ key(status);
    cls = PyDict_GetItemWithError(g_error_classes, key.ptr());  // borrowed
  }
  if (cls == nullptr) cls = PyExc_RuntimeError;
  // Made here rather than left to pybind11's normalization: a signal handler that runs in
  // the class's __init__ (Ctrl-C just then) raises its own exception, which then wins.
  PyObject* error = PyObject_CallFunction(cls, "s", message.c_str());
  if (error != nullptr) {
    PyErr_SetObject(cls, error);
    Py_DECREF(error);
  }
  throw py::error_already_set();
}

namespace {

int python_signal_raised() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0 ? 1 : 0;  // the handler's exception stays set
}

}  // namespace

InterruptibleCall::InterruptibleCall() { pcoll_private_set_interrupt_check(python_signal_raised); }
InterruptibleCall::~InterruptibleCall() { pcoll_private_set_interrupt_check(nullptr); }

void invalid_argument(const std::string& message) { raise_status(PCOLL_ERR_INVALID_ARGUMENT, message); }
void invalid_state(const std::string& message) { raise_status(PCOLL_ERR_INVALID_STATE, message); }

bool fails_communicator(int status) {
  return status == PCOLL_ERR_TIMEOUT || status == PCOLL_ERR_PEER_FAILED || status == PCOLL_ERR_TRANSPORT ||
         status == PCOLL_ERR_PROTOCOL;
}

}  // namespace pcoll_python
