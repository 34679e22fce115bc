// A killed process leaves its libfabric shm endpoint name (by default "<pid>:<uid>:<index>")
// in /dev/shm; a later process that draws the same pid must still start. The test plays
// the later process: it creates the stale name for its own pid, then starts a one-rank
// communicator on ofi:shm, which must succeed.
#include <pcoll/pcoll.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main() {
  setenv("PCOLL_BOOTSTRAP", "single", 1);
  setenv("PCOLL_PROVIDER", "ofi:shm", 1);
  char stale[64];
  std::snprintf(stale, sizeof stale, "/%d:%u:0", static_cast<int>(getpid()), static_cast<unsigned>(getuid()));
  const int fd = shm_open(stale, O_CREAT | O_RDWR, 0600);
  if (fd < 0) {
    std::perror("shm_open");
    return 2;
  }
  close(fd);
  pcoll_comm_t* comm = nullptr;
  const int rc = pcoll_init(&comm);
  if (rc != PCOLL_SUCCESS) std::fprintf(stderr, "shm_stale_name_check: pcoll_init: %s\n", pcoll_last_error());
  else pcoll_finalize(comm);
  shm_unlink(stale);
  if (rc == PCOLL_SUCCESS) std::printf("shm_stale_name_check: started despite a stale /dev/shm%s\n", stale);
  return rc == PCOLL_SUCCESS ? 0 : 1;
}
