// A bootstrap given as C callbacks (include/pcoll/private.h): how libpcoll_mpi
// hands its MPI bootstrap to the library without any C++ type crossing the boundary.
#pragma once

#include <memory>

#include <bootstrap/bootstrap.hpp>
#include <pcoll/private.h>

namespace pcoll::bootstrap {

std::unique_ptr<Bootstrap> make_foreign(const pcoll_private_bootstrap_t& callbacks);

}  // namespace pcoll::bootstrap
