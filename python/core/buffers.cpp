// Buffer checks and pinning (buffers.hpp). The dtype names come from the C API
// (pcoll_dtype_name); this file only knows how each dtype looks through the buffer protocol.
#include "buffers.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "errors.hpp"

namespace pcoll_python {

void ViewRelease::operator()(Py_buffer* view) const {
  PyBuffer_Release(view);
  delete view;
}

namespace {

// Buffer-protocol format characters accepted for `dtype`, matched together with the item
// size (numpy's int64 is 'l' on LP64). numpy has no bfloat16: its raw bits as uint16.
const char* formats_of(pcoll_dtype_t dtype) {
  switch (dtype) {
    case PCOLL_FLOAT32: return "f";
    case PCOLL_FLOAT64: return "d";
    case PCOLL_INT32: return "il";
    case PCOLL_INT64: return "lq";
    case PCOLL_BFLOAT16: return "H";
    case PCOLL_FLOAT16: return "e";
  }
  return "";
}

std::string name_of(pcoll_dtype_t dtype) {
  const char* name = pcoll_dtype_name(dtype);
  return name != nullptr ? name : std::to_string(static_cast<int>(dtype));
}

// What the buffer checks need from torch, looked up once torch is imported (a tensor cannot
// exist before): the Tensor type, torch.strided and torch's dtype of each pcoll dtype
// (torch.<pcoll name>).
struct TorchTypes {
  PyObject* tensor = nullptr;
  PyObject* strided = nullptr;
  std::vector<PyObject*> dtypes;  // by pcoll_dtype_t value
};

TorchTypes look_up_torch(PyObject* torch) {
  TorchTypes found;
  found.tensor = PyObject_GetAttrString(torch, "Tensor");
  found.strided = PyObject_GetAttrString(torch, "strided");
  for (int d = 0; pcoll_dtype_name(static_cast<pcoll_dtype_t>(d)) != nullptr; ++d)
    found.dtypes.push_back(PyObject_GetAttrString(torch, pcoll_dtype_name(static_cast<pcoll_dtype_t>(d))));
  return found;
}

const TorchTypes* torch_types() {
  static TorchTypes types;  // references kept for the life of the process
  if (types.tensor != nullptr) return &types;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (torch == nullptr) return nullptr;
  TorchTypes found = look_up_torch(torch);
  bool complete = found.tensor != nullptr && found.strided != nullptr;
  for (PyObject* d : found.dtypes) complete = complete && d != nullptr;
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

std::string prefix(const char* where, const char* role) { return std::string(where) + ": " + role; }

// A CPU torch tensor through its Python attributes (no torch headers, no ABI coupling).
Pinned pin_tensor(const py::object& t, const TorchTypes& torch, const char* where, const char* role,
                  pcoll_dtype_t dtype, size_t count) {
  if (!t.attr("is_cpu").cast<bool>())
    invalid_argument(prefix(where, role) + " is a tensor on " + std::string(py::str(t.attr("device"))) +
                     "; pcoll reduces host memory: pass a CPU tensor (tensor.cpu())");
  const py::object layout = t.attr("layout");
  if (layout.ptr() != torch.strided)
    invalid_argument(prefix(where, role) + " is a " + std::string(py::str(layout)) + " tensor; pass a dense tensor");
  const py::object tdtype = t.attr("dtype");
  if (tdtype.ptr() != torch.dtypes.at(static_cast<size_t>(dtype)))
    invalid_argument(prefix(where, role) + " has dtype " + std::string(py::str(tdtype)) + ", the allreduce is " +
                     name_of(dtype) + " (torch." + name_of(dtype) + ")");
  const auto numel = t.attr("numel")().cast<size_t>();
  if (numel != count)
    invalid_argument(prefix(where, role) + " has " + std::to_string(numel) + " elements, the allreduce has " +
                     std::to_string(count));
  if (!t.attr("is_contiguous")().cast<bool>())
    invalid_argument(prefix(where, role) + " is not contiguous; pass tensor.contiguous()");
  Pinned p;
  p.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<uintptr_t>());
  p.owner = t;
  return p;
}

std::string format_of(const Py_buffer& view) { return view.format != nullptr ? view.format : "B"; }

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

void check_view(const Py_buffer& view, const char* where, const char* role, pcoll_dtype_t dtype, size_t count) {
  // Native byte order only: '@', '=' and, on this little-endian ABI, '<'.
  const char* format = view.format != nullptr ? view.format : "B";
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  const size_t bytes = pcoll_dtype_size(dtype);
  const bool type_ok = format[0] != '\0' && format[1] == '\0' && std::strchr(formats_of(dtype), format[0]) != nullptr &&
                       static_cast<size_t>(view.itemsize) == bytes;
  if (!type_ok)
    invalid_argument(prefix(where, role) + " has dtype " + describe_format(view) + ", the allreduce is " + name_of(dtype) +
                     (dtype == PCOLL_BFLOAT16 ? " (raw bits in uint16, or a torch.bfloat16 tensor)" : ""));
  const size_t elements = static_cast<size_t>(view.len) / bytes;
  if (elements != count)
    invalid_argument(prefix(where, role) + " has " + std::to_string(elements) + " elements, the allreduce has " +
                     std::to_string(count));
  if (!PyBuffer_IsContiguous(&view, 'C'))
    invalid_argument(prefix(where, role) + " is not contiguous; pass numpy.ascontiguousarray(" + role + ")");
  if (view.readonly && std::strcmp(role, "send") != 0)
    invalid_argument(prefix(where, role) + " is read-only; the result is written there, pass a writable array");
}

// The buffer protocol (numpy arrays, memoryviews, array.array, bytearray...).
Pinned pin_buffer(const py::object& obj, const char* where, const char* role, pcoll_dtype_t dtype, size_t count) {
  std::unique_ptr<Py_buffer, ViewRelease> view(new Py_buffer{});
  if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_RECORDS_RO) != 0) {
    delete view.release();
    PyErr_Clear();
    invalid_argument(prefix(where, role) + " must be a numpy array, a CPU torch tensor or another buffer of " +
                     name_of(dtype) + "; got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  check_view(*view, where, role, dtype, count);
  Pinned p;
  p.data = view->buf;
  p.owner = obj;
  p.view = std::move(view);
  return p;
}

}  // namespace

Pinned pin(const py::object& obj, const char* where, const char* role, pcoll_dtype_t dtype, size_t count) {
  if (obj.is_none()) invalid_argument(prefix(where, role) + " is None; pass an array of " + name_of(dtype));
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

}  // namespace pcoll_python
