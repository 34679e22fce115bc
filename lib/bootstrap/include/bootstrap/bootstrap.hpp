// Bootstrap: who am I, how many are we, and exchange of small byte blobs (addresses, keys)
// before the transport is connected. Implementations: pcollrun's TCP store and the manual
// PCOLL_ROOT store (tcp_store.cpp); PMIx, PMI2 and MPI come as further implementations of
// the same interface.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pcoll::bootstrap {

using Blob = std::vector<std::byte>;

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Human name for logs and pcoll_info: "pcollrun", "manual", "pmix", "pmi2", "mpi".
  virtual std::string name() const = 0;
  // Collective: every rank passes its blob (sizes may differ) and receives all blobs in
  // rank order. A rank that does not take part within the timeout gives every waiting
  // rank Errc::timeout naming the missing rank(s).
  virtual std::vector<Blob> allgather(std::span<const std::byte> mine) = 0;
  virtual void barrier() = 0;
  // The job has failed (a peer died or stopped answering): nobody is to be waited for any
  // more. A bootstrap whose destructor synchronises the ranks (the manual store's final
  // barrier) skips that: a stopped peer would keep it waiting forever.
  virtual void abandon() {}
  // Whether the ranks are the survivors of another communicator (pcoll_comm_shrink), with
  // ranks numbered afresh.
  virtual bool of_survivors() const { return false; }
};

// Picks the bootstrap from the environment (PCOLL_BOOTSTRAP forces one): PMIx
// (PMIX_NAMESPACE), PMI2 (PMI_FD), pcollrun / manual store (PCOLL_ROOT + PCOLL_RANK +
// PCOLL_SIZE), else a single-rank job. Errors name the variable that was wrong.
std::unique_ptr<Bootstrap> from_environment();

// A job of one rank: allgather returns the caller's blob.
std::unique_ptr<Bootstrap> make_single();

// Scheduler backends (lib/bootstrap/pmix.cpp, pmi2.cpp), compiled when PCOLL_HAVE_PMIX /
// PCOLL_HAVE_PMI2 (pcoll_config.h) are 1. They throw Errc::bootstrap with the reason when
// the launcher's service cannot be reached.
std::unique_ptr<Bootstrap> make_pmix();
std::unique_ptr<Bootstrap> make_pmi2();

}  // namespace pcoll::bootstrap
