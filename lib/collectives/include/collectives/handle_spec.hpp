// A handle's creation arguments, the one path that checks them, reads the settings they
// depend on, and agrees them across ranks (the C API, pcoll.hpp and the Python package all
// create through it).
//
// Checking never throws for a bad argument: the first problem goes back to the caller,
// which enters it into the collective creation as this rank's error, so that every rank
// reports it naming this rank instead of one rank returning alone while the others wait.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <collectives/plan_table.hpp>
#include <pcoll/pcoll.h>
#include <transport/transport.hpp>

namespace pcoll {

class Comm;

struct HandleSpec {
  size_t count = 0;
  pcoll_dtype_t dtype = PCOLL_FLOAT32;
  pcoll_op_t op = PCOLL_OP_SUM;
  pcoll_mode_t mode{};  // the mode table's first row when defaulted
  pcoll_allreduce_opts_t opts{};  // defaults resolved: timeout_ms, the mode's own options
  size_t chunk_bytes = 0;         // pipelining chunk of large steps (PCOLL_CHUNK_BYTES)
  size_t pool_bytes = 0;          // landing pool per incoming exchange (PCOLL_POOL_BYTES)
  std::vector<PlanRule> plan_rules;  // PCOLL_PLAN_RULES, then the defaults of PCOLL_RD_MAX_BYTES
  bool flat_plan = false;         // PCOLL_PLAN=flat: never the direct plan
  std::string trace_dir;          // PCOLL_TRACE; empty: no round trace
  int64_t trace_clock_skew_ns = 0;  // PCOLL_TEST_CLOCK_SKEW_MS
  uint64_t kill_at_write = 0;       // PCOLL_TEST_KILL_AT_WRITE

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(opts.timeout_ms); }
};

// What a caller of pcoll_allreduce_create passed, as raw values (an FFI caller can pass
// any integer for an enum).
struct CreateRequest {
  size_t count = 0;
  int dtype = PCOLL_FLOAT32;
  int op = PCOLL_OP_SUM;
  int mode = 0;
  const pcoll_allreduce_opts_t* opts = nullptr;  // NULL: defaults
  bool handle_given = true;                      // the out pointer is not NULL
  std::string refused;                           // an argument the caller's binding refused
};

// The spec of `request` on a job of `ranks` whose communicator times out after
// `comm_timeout`; `problem` gets the first bad argument or setting (empty when none). A spec
// made with a problem is still well formed (defaults where arguments were bad), so that the
// collective creation can run and report it.
HandleSpec make_spec(const CreateRequest& request, int ranks, std::chrono::milliseconds comm_timeout,
                     std::string& problem);

// The arguments every rank must pass alike, as compared at creation, with the handle's id.
struct Signature {
  uint64_t count, dtype, op, mode, late, max_lag, sync_every, seed, quorum, grace_us, chunk_bytes, pool_bytes,
      plan_rules, handle, traced, flat_plan, elastic;  // plan_rules: plan_rules_digest
  uint64_t direct;  // the handle runs the direct plan here (set by the handle, not the spec)
  bool operator==(const Signature&) const = default;
};
Signature signature_of(const HandleSpec& spec, uint32_t handle);
// "count=4 dtype=float32 op=sum mode=solo ...", for messages and the debug log.
std::string describe(const Signature& signature);

// This rank's part of the creation: its local outcome (Errc value, 0 = fine) with the
// reason, its arguments, and its registration key.
struct CreationOffer {
  int status = 0;
  std::string problem;
  Signature signature{};
  transport::Bytes key;
};

// Collective over the communicator's agreement: every rank's key, in rank order, once every
// rank prepared its part and passed the same arguments. Otherwise throws the same error on
// every rank: first any rank's local failure (lowest rank first), then the first rank whose
// arguments differ from rank 0's (Errc::mismatch).
std::vector<transport::Bytes> agree_creation(Comm& comm, const CreationOffer& mine, std::chrono::milliseconds timeout);

}  // namespace pcoll
