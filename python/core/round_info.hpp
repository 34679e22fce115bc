// pcoll.RoundInfo: what one round was, as a struct sequence (a named tuple made in C: one
// allocation per round, no type lookups, printed with its field names).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include <pcoll/pcoll.h>

namespace pcoll_python {

namespace py = pybind11;

// pcoll_round_info_t's fresh_mask is only valid until the next call on the handle, so it is
// copied out right after the call, before the GIL is taken back.
struct RawInfo {
  pcoll_round_info_t info{};
  std::vector<int> fresh_ranks;

  void keep_mask(int size);
  py::object to_python() const;  // GIL held
};

// Makes the RoundInfo type and adds it to the module.
void add_round_info_type(py::module_& m);

}  // namespace pcoll_python
