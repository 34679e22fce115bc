// pcoll.RoundInfo (round_info.hpp).
#include "round_info.hpp"

namespace pcoll_python {
namespace {

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

}  // namespace

void RawInfo::keep_mask(int size) {
  fresh_ranks.clear();
  if (info.fresh_mask == nullptr) return;
  for (int r = 0; r < size; ++r)
    if ((info.fresh_mask[r / 64] >> (r % 64)) & 1u) fresh_ranks.push_back(r);
  info.fresh_mask = nullptr;
}

py::object RawInfo::to_python() const {
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

void add_round_info_type(py::module_& m) {
  g_round_info_type = PyStructSequence_NewType(&kRoundInfoDesc);
  if (g_round_info_type == nullptr) throw py::error_already_set();
  m.attr("RoundInfo") = py::handle(reinterpret_cast<PyObject*>(g_round_info_type));
}

}  // namespace pcoll_python
