// What a round reads and writes: numpy arrays, CPU torch tensors and other buffer-protocol
// objects, checked against the handle's dtype and count before they reach the engine, and
// kept referenced while a round may still use them.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>

#include <pcoll/pcoll.h>

namespace pcoll_python {

namespace py = pybind11;

struct ViewRelease {
  void operator()(Py_buffer* view) const;
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

// `obj` as the `role` ("send" or "recv") buffer of `where` ("run", "flush"...) for `count`
// elements of `dtype`; InvalidArgument naming the argument otherwise. GIL held.
Pinned pin(const py::object& obj, const char* where, const char* role, pcoll_dtype_t dtype, size_t count);

}  // namespace pcoll_python
