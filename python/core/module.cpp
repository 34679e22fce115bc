// pcoll._core: the Python extension over pcoll's public C API (pcoll/pcoll.h, plus the
// binding entries of pcoll/private.h) and nothing else. Its parts, one file each: errors
// (status -> exception), buffers (checks and pinning), round_info (pcoll.RoundInfo), handle
// and allreduce (pcoll.Allreduce and its interruptible wait), comm (the communicator).
// Creation arguments are parsed in pcoll/__init__.py and agreed by the C library.
#include <pybind11/pybind11.h>

#include <pcoll/pcoll.h>

#include "comm.hpp"
#include "errors.hpp"
#include "handle.hpp"
#include "round_info.hpp"

namespace py = pybind11;

namespace {

// name -> value of one of the C API's enums, from its own names (pcoll_*_name).
template <typename Enum>
py::dict names_of(const char* (*name_of)(Enum)) {
  py::dict d;
  for (int v = 0;; ++v) {
    const char* name = name_of(static_cast<Enum>(v));
    if (name == nullptr) return d;
    d[name] = v;
  }
}

py::dict statuses() {
  constexpr std::pair<const char*, int> kStatuses[] = {
      {"INVALID_ARGUMENT", PCOLL_ERR_INVALID_ARGUMENT}, {"INVALID_STATE", PCOLL_ERR_INVALID_STATE},
      {"MISMATCH", PCOLL_ERR_MISMATCH},                 {"TIMEOUT", PCOLL_ERR_TIMEOUT},
      {"PEER_FAILED", PCOLL_ERR_PEER_FAILED},           {"TRANSPORT", PCOLL_ERR_TRANSPORT},
      {"BOOTSTRAP", PCOLL_ERR_BOOTSTRAP},               {"UNSUPPORTED", PCOLL_ERR_UNSUPPORTED},
      {"NO_MEMORY", PCOLL_ERR_NO_MEMORY},               {"PROTOCOL", PCOLL_ERR_PROTOCOL},
      {"INTERNAL", PCOLL_ERR_INTERNAL},
  };
  py::dict d;
  for (const auto& [name, value] : kStatuses) d[name] = value;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pcoll's C API for Python: use the pcoll package, not this module";
  m.attr("DTYPES") = names_of(pcoll_dtype_name);
  m.attr("OPS") = names_of(pcoll_op_name);
  m.attr("MODES") = names_of(pcoll_mode_name);
  m.attr("LATE") = names_of(pcoll_late_name);
  m.attr("STATUSES") = statuses();
  m.attr("VERSION") = py::make_tuple(PCOLL_VERSION_MAJOR, PCOLL_VERSION_MINOR);
  m.def("_set_error_classes", &pcoll_python::set_error_classes);
  m.def("strerror", [](int status) { return std::string(pcoll_strerror(status)); });
  pcoll_python::add_round_info_type(m);
  pcoll_python::add_allreduce_type(m);
  pcoll_python::add_comm_type(m);
}
