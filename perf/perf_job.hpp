// What the perf tools share: starting the job (MPI bootstrap under mpirun when built with
// MPI, else pcoll_init() from pcollrun / the environment), cross-rank reductions of their
// measurements, command-line value parsing with exit status 2 on bad input, and the
// clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include <pcoll/pcoll.h>

namespace pcoll::perf {

// What a perf tool measures: one of pcoll's modes, or MPI_Allreduce as the anchor.
enum class Mode { sync, solo, majority, quorum, mpi };

inline const char* mode_name(Mode m) {
  switch (m) {
    case Mode::sync: return "sync";
    case Mode::solo: return "solo";
    case Mode::majority: return "majority";
    case Mode::quorum: return "quorum";
    case Mode::mpi: return "mpi";
  }
  return "?";
}

// A mode with its options, as the tools name it: "sync", "solo", "majority", "mpi",
// "quorum" (the library's default k), "quorum:K", "quorum:K:GRACE_US".
struct ModeSpec {
  Mode mode = Mode::sync;
  uint32_t quorum = 0;    // quorum: ranks that start a round; 0: the library's default
  uint32_t grace_us = 0;  // quorum: 0 waits for the quorum
  bool operator==(const ModeSpec&) const = default;

  std::string name() const;
  pcoll_mode_t pcoll_mode() const;                // not for mpi
  void apply(pcoll_allreduce_opts_t& opts) const;  // quorum and grace into handle options
};

// The spec `text` names; throws perf::Error(PCOLL_ERR_INVALID_ARGUMENT) saying what is wrong.
ModeSpec parse_mode_spec(const std::string& text);

using Clock = std::chrono::steady_clock;
constexpr int kUsageExit = 2;

// Prints "tool: message" and the usage text to stderr and exits with kUsageExit.
[[noreturn]] void usage_error(const char* tool, const std::string& message, const char* usage);

// Byte count with optional K/M/G suffix (binary), in [min, max]; else usage_error.
uint64_t parse_bytes(const char* tool, const char* usage, const std::string& text, const char* flag,
                     uint64_t min, uint64_t max);
uint64_t parse_uint(const char* tool, const char* usage, const std::string& text, const char* flag,
                    uint64_t min, uint64_t max);
double parse_double(const char* tool, const char* usage, const std::string& text, const char* flag,
                    double min, double max);

// Throws perf::Error(status, "what: pcoll_last_error()") when `status` is not success.
void check(int status, const char* what);

// One process of a perf job.
class Job {
 public:
  // Under mpirun (OMPI_COMM_WORLD_SIZE set) in an MPI build: MPI_Init_thread and
  // pcoll_init_mpi(MPI_COMM_WORLD); otherwise pcoll_init(). Throws perf::Error.
  Job(int* argc, char*** argv);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  pcoll_comm_t* comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool has_mpi() const { return mpi_; }  // MPI_Allreduce baselines are available
  std::string launcher() const;          // "mpi", "pcollrun", "single", ...
  std::string provider() const;

  // Element-wise max / sum over ranks, in place (MPI when present, else a sync handle).
  void max_over_ranks(std::span<double> values);
  void sum_over_ranks(std::span<double> values);
  void barrier();

 private:
  void reduce_over_ranks(std::span<double> values, pcoll_op_t op);

  pcoll_comm_t* comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
};

}  // namespace pcoll::perf
