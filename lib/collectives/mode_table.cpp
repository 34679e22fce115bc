// The mode table: each mode's option checks and start policy (mode_table.hpp).
#include <collectives/mode_table.hpp>

#include <collectives/enum_names.hpp>

namespace pcoll {
namespace {

constexpr EnumName kNames[] = {{PCOLL_MODE_SYNC, "sync"}, {PCOLL_MODE_SOLO, "solo"},
                               {PCOLL_MODE_MAJORITY, "majority"}, {PCOLL_MODE_QUORUM, "quorum"}};

// The first row is the default, for a creation whose mode argument was refused.
constexpr ModeRow kModes[] = {
    {PCOLL_MODE_SYNC, refuse_quorum_options, keep_options, false, make_sync_policy},
    {PCOLL_MODE_SOLO, refuse_quorum_options, keep_options, false, make_solo_policy},
    {PCOLL_MODE_MAJORITY, refuse_quorum_options, keep_options, false, make_majority_policy},
    {PCOLL_MODE_QUORUM, check_quorum_options, fit_quorum_options, true, make_quorum_policy},
};

}  // namespace

std::span<const ModeRow> mode_table() { return kModes; }

std::span<const EnumName> mode_names() { return kNames; }

const ModeRow* find_mode(int mode) {
  for (const ModeRow& row : kModes)
    if (static_cast<int>(row.mode) == mode) return &row;
  return nullptr;
}

std::string refuse_quorum_options(pcoll_allreduce_opts_t& opts, int /*ranks*/) {
  if (opts.quorum == 0 && opts.grace_us == 0) return {};
  return "opts.quorum = " + std::to_string(opts.quorum) + " and opts.grace_us = " + std::to_string(opts.grace_us) +
         " are for PCOLL_MODE_QUORUM only; leave them 0";
}

void keep_options(pcoll_allreduce_opts_t& /*opts*/, int /*ranks*/) {}

}  // namespace pcoll
