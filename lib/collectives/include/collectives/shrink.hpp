// Shrinking a failed communicator to its survivors (docs/design.md, "Shrinking to the
// survivors"): the survivors agree on the failed set (Comm::agree_on_survivors), then set up
// a communicator of their own, ranked 0..n-1 in the order of their old ranks, with a
// transport endpoint of its own. Its setup runs the ordinary communicator setup over a
// bootstrap whose collectives travel through the old communicator's survivors' channel,
// so that no launcher service (which may fail its collectives while a rank is lost) is
// needed, and no traffic of the old communicator can reach the new one: old and new
// endpoints are different, which is how old and new traffic are told apart on every
// notification width.
#pragma once

#include <memory>

#include <collectives/comm.hpp>

namespace pcoll {

// Collective over the live ranks of the failed `comm`. Throws what agree_on_survivors and
// the new communicator's setup throw; `comm` stays failed, and a shrink that failed (a
// survivor died during it) may be tried again.
std::unique_ptr<Comm> shrink(Comm& comm);

}  // namespace pcoll
