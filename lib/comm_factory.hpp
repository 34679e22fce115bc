// Creating a communicator from a bootstrap the caller already has (MPI, tests). Used by
// pcoll_init() with bootstrap::from_environment() and by pcoll_init_mpi() (pcoll/mpi.h).
#pragma once

#include <memory>

#include "bootstrap/bootstrap.hpp"
#include "pcoll/pcoll.h"

namespace pcoll {

// Same contract as pcoll_init(): returns a PCOLL_* status, sets pcoll_last_error().
int init_with_bootstrap(std::unique_ptr<bootstrap::Bootstrap> boot, pcoll_comm_t** comm);

}  // namespace pcoll
