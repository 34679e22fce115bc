// Names pcoll gives the files a provider creates in /dev/shm (libfabric's shm endpoints),
// and their removal once the process that made them is gone. A process killed by a signal
// cannot unlink its own files: pcollrun removes those of each rank it reaps, and the next
// process that opens such a provider on this host removes those of departed processes.
//
// A name is "pcoll_<pid namespace>_<pid>_<random>": the pid namespace keeps a process of
// another container that shares /dev/shm, whose pid means nothing here, from being taken
// for departed.
#pragma once

#include <sys/types.h>

#include <string>

namespace pcoll::shm_names {

// A fresh name for a file of this process: the prefix above with a random part.
std::string make_name();

// Removes this user's files of process `pid` (of this pid namespace) from /dev/shm; returns
// how many.
int remove_of_process(pid_t pid);

// Removes this user's files of every process of this pid namespace that no longer exists.
int remove_of_departed();

}  // namespace pcoll::shm_names
