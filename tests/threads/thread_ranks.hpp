// Ranks as threads: one job of P ranks run as P threads of this process, each with its own
// communicator made by pcoll_private_init_with_bootstrap over the in-process bootstrap
// (lib/bootstrap/include/bootstrap/inproc_store.hpp) and the provider PCOLL_PROVIDER names. The programs of
// tests/threads set PCOLL_PROVIDER=inproc unless it is already set (use_inproc_provider).
#pragma once

#include <functional>

#include <pcoll/pcoll.h>

namespace thread_ranks {

// PCOLL_PROVIDER=inproc unless the environment already names a provider. Call before any
// thread starts (it writes the environment).
void use_inproc_provider();

// Runs body(comm) on `size` threads, one per rank of a fresh job, and returns once every
// rank has finalized its communicator. A rank whose body throws (a failed REQUIRE) ends
// the process with exit status 1, naming the rank, as pcollrun ends a job when one rank
// fails: its peers would otherwise wait for it until their timeout.
void run(int size, const std::function<void(pcoll_comm_t* comm)>& body);

}  // namespace thread_ranks
