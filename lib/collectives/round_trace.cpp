// Round trace ring and its Chrome trace-event writer (round_trace.hpp).
#include <collectives/round_trace.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {
namespace {

const char* event_name(TraceEvent kind) {
  switch (kind) {
    case TraceEvent::post: return "post";
    case TraceEvent::post_flush: return "flush";
    case TraceEvent::join: return "join";
    case TraceEvent::activation_sent: return "activation sent";
    case TraceEvent::activation_received: return "activation received";
    case TraceEvent::step_start: return "step";
    case TraceEvent::step_end: return "step";
    case TraceEvent::complete: return "complete";
    case TraceEvent::deliver: return "deliver";
    case TraceEvent::arrival: return "arrival";
  }
  return "?";
}

const char* arg_name(TraceEvent kind) {
  switch (kind) {
    case TraceEvent::post: return "engine_joined";
    case TraceEvent::join: return "fresh";
    case TraceEvent::activation_received: return "from";
    case TraceEvent::step_start:
    case TraceEvent::step_end: return "step";
    case TraceEvent::complete: return "initiator";
    case TraceEvent::deliver: return "caller_late";
    case TraceEvent::arrival: return "arrived";
    default: return nullptr;
  }
}

}  // namespace

RoundTrace::RoundTrace(std::string directory, int64_t clock_skew_ns)
    : directory_(std::move(directory)), clock_skew_ns_(clock_skew_ns), events_(kCapacity) {}

int64_t RoundTrace::now_ns() const {
  if (clock_ != nullptr) return clock_() + clock_skew_ns_;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         clock_skew_ns_;
}

std::string RoundTrace::write(const Header& header) const {
  const std::string path = directory_ + "/pcoll-trace.rank" + std::to_string(header.rank) + ".handle" +
                           std::to_string(header.handle) + ".json";
  std::ofstream out(path);
  if (!out) fail(Errc::invalid_argument, "cannot write the round trace " + path + " (PCOLL_TRACE)");
  const uint64_t kept = std::min<uint64_t>(next_, kCapacity);
  out << "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"pcoll_trace\":1,\"rank\":" << header.rank
      << ",\"size\":" << header.size << ",\"handle\":" << header.handle << ",\"mode\":\"" << header.mode
      << "\",\"clock_offset_ns\":" << header.clock_offset_ns << ",\"events\":" << kept
      << ",\"dropped_events\":" << (next_ - kept) << ",\"capacity\":" << kCapacity << "},\n\"traceEvents\":[\n";
  out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << header.rank << ",\"args\":{\"name\":\"rank "
      << header.rank << "\"}}";
  char ts[32];
  for (uint64_t i = next_ - kept; i < next_; ++i) {
    const Event& e = events_[i % kCapacity];
    // Microseconds (the format's unit) with nanosecond digits, on this rank's clock: the
    // report subtracts clock_offset_ns to put every rank on rank 0's.
    std::snprintf(ts, sizeof ts, "%lld.%03lld", static_cast<long long>(e.t_ns / 1000),
                  static_cast<long long>(e.t_ns % 1000));
    const char* phase = e.kind == TraceEvent::step_start ? "B" : e.kind == TraceEvent::step_end ? "E" : "i";
    out << ",\n{\"name\":\"" << event_name(e.kind) << "\",\"ph\":\"" << phase << "\"";
    if (phase[0] == 'i') out << ",\"s\":\"t\"";
    out << ",\"pid\":" << header.rank << ",\"tid\":" << header.handle << ",\"ts\":" << ts
        << ",\"args\":{\"round\":" << e.round;
    if (const char* name = arg_name(e.kind)) out << ",\"" << name << "\":" << e.arg;
    if (e.kind == TraceEvent::complete) out << ",\"fresh\":" << e.arg2;
    out << "}}";
  }
  out << "\n]}\n";
  out.close();
  if (!out) fail(Errc::invalid_argument, "cannot write the round trace " + path + " (PCOLL_TRACE)");
  return path;
}

void TraceObserver::write() noexcept {
  try {
    const std::string path = trace_.write(header_);
    log::debug("round trace of handle " + std::to_string(header_.handle) + " written to " + path);
  } catch (const std::exception& e) {
    log::warn(std::string("round trace not written: ") + e.what());
  }
}

int64_t estimate_offset(const std::vector<int64_t>& mine, const std::vector<int64_t>& root) {
  std::vector<int64_t> d;
  for (size_t k = 0; k < std::min(mine.size(), root.size()); ++k) d.push_back(mine[k] - root[k]);
  if (d.empty()) return 0;
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

}  // namespace pcoll
