/* A program as a user writes it against the installed C API: one rank, one sum round. */
#include <pcoll/pcoll.h>
#include <stdio.h>

int main(void) {
  pcoll_comm_t *comm = NULL;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) {
    fprintf(stderr, "pcoll_init: %s\n", pcoll_last_error());
    return 1;
  }
  pcoll_allreduce_t *h = NULL;
  int in[4] = {1, 2, 3, 4}, out[4] = {0};
  if (pcoll_allreduce_create(comm, 4, PCOLL_INT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, NULL, &h) != PCOLL_SUCCESS ||
      pcoll_allreduce_run(h, in, out, NULL) != PCOLL_SUCCESS) {
    fprintf(stderr, "allreduce: %s\n", pcoll_last_error());
    return 1;
  }
  const int ranks = pcoll_comm_size(comm);
  pcoll_allreduce_destroy(h);
  pcoll_finalize(comm);
  if (out[0] != ranks * 1 || out[3] != ranks * 4) {
    fprintf(stderr, "wrong result %d %d\n", out[0], out[3]);
    return 1;
  }
  printf("hello_pcoll: ok on %s\n", ranks == 1 ? "one rank" : "several ranks");
  return 0;
}
