// The modes of a handle, one row each: the mode's checks of its creation options and the
// start policy that runs its rounds. A new mode is one policy file and one row here; no
// other code branches on PCOLL_MODE_*.
#pragma once

#include <memory>
#include <span>
#include <string>

#include <collectives/start_policy.hpp>
#include <pcoll/pcoll.h>

namespace pcoll {

struct ModeRow {
  pcoll_mode_t mode;
  // Checks the options that are the mode's own (quorum, grace_us) and fills in their
  // defaults for a job of `ranks`: the first problem, or "" when they are fine.
  std::string (*check_options)(pcoll_allreduce_opts_t& opts, int ranks);
  // The options of a handle resumed on `ranks` survivors (a quorum above it is capped).
  void (*fit_options)(pcoll_allreduce_opts_t& opts, int ranks);
  // Whether its handles need 64-bit remote atomics (quorum counts arrivals with them).
  bool needs_remote_atomics;
  std::unique_ptr<StartPolicy> (*make_policy)(const PolicyContext& context);
};

std::span<const ModeRow> mode_table();
// The row of `mode`, or nullptr for a value outside the enum.
const ModeRow* find_mode(int mode);

// Each policy file's row functions (mode_table.cpp lists them).
std::unique_ptr<StartPolicy> make_sync_policy(const PolicyContext& context);
std::unique_ptr<StartPolicy> make_solo_policy(const PolicyContext& context);
std::unique_ptr<StartPolicy> make_majority_policy(const PolicyContext& context);
std::unique_ptr<StartPolicy> make_quorum_policy(const PolicyContext& context);
std::string check_quorum_options(pcoll_allreduce_opts_t& opts, int ranks);
void fit_quorum_options(pcoll_allreduce_opts_t& opts, int ranks);
// The modes without options of their own refuse the quorum's, and keep theirs on resume.
std::string refuse_quorum_options(pcoll_allreduce_opts_t& opts, int ranks);
void keep_options(pcoll_allreduce_opts_t& opts, int ranks);

}  // namespace pcoll
