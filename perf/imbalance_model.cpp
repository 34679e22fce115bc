// Schedules of pcoll_imbalance: paper (two ranks drawn per step get +D), lognormal,
// slowrank, trace replay and none.
#include "imbalance_model.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "perf_error.hpp"
#include "perf_hash.hpp"

namespace pcoll::perf {
namespace {

double uniform01(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1p-53; }

std::string format_ms(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

std::string ImbalanceModel::name() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::paper: return "paper";
    case Kind::lognormal: return "lognormal";
    case Kind::slowrank: return "slowrank";
    case Kind::trace: return "trace:" + trace_path;
  }
  return "?";
}

std::string ImbalanceModel::description() const {
  switch (kind) {
    case Kind::none: return "none (C=" + format_ms(compute_ms) + " ms on every rank)";
    case Kind::paper:
      return "paper (C=" + format_ms(compute_ms) + " ms, two drawn ranks +D=" + format_ms(delay_ms) + " ms per step)";
    case Kind::lognormal: return "lognormal (mean " + format_ms(compute_ms) + " ms, sigma " + format_ms(sigma) + ")";
    case Kind::slowrank:
      return "slowrank (C=" + format_ms(compute_ms) + " ms, rank " + std::to_string(slow_rank) + " x" +
             format_ms(slow_factor) + ")";
    case Kind::trace: return "trace " + trace_path + " (x" + format_ms(trace_scale) + ")";
  }
  return "?";
}

std::vector<std::vector<double>> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) invalid_argument("trace file '" + path + "' cannot be read");
  std::string line;
  if (!std::getline(in, line)) invalid_argument("trace file '" + path + "' is empty (expected header step,rank,compute_ms)");
  std::string header;
  for (char ch : line)
    if (ch != ' ' && ch != '\r') header += ch;
  if (header != "step,rank,compute_ms")
    invalid_argument("trace file '" + path + "': first line must be the header step,rank,compute_ms, got '" + line + "'");
  std::map<uint64_t, std::map<uint64_t, double>> cells;
  uint64_t max_step = 0, max_rank = 0;
  for (size_t number = 2; std::getline(in, line); ++number) {
    if (line.empty() || line == "\r") continue;
    std::istringstream fields(line);
    unsigned long long step = 0, rank = 0;
    double ms = 0;
    char c1 = 0, c2 = 0;
    std::string rest;
    if (!(fields >> step >> c1 >> rank >> c2 >> ms) || c1 != ',' || c2 != ',' || (fields >> rest && rest != "\r") ||
        !std::isfinite(ms) || ms < 0 || line.find('-') != std::string::npos)
      invalid_argument("trace file '" + path + "' line " + std::to_string(number) +
                       ": expected 'step,rank,compute_ms' with non-negative numbers, got '" + line + "'");
    if (step > 1000000 || rank > 65535)
      invalid_argument("trace file '" + path + "' line " + std::to_string(number) + ": step or rank out of range");
    if (!cells[step].emplace(rank, ms).second)
      invalid_argument("trace file '" + path + "' line " + std::to_string(number) + ": step " + std::to_string(step) +
                       " rank " + std::to_string(rank) + " appears twice");
    max_step = std::max<uint64_t>(max_step, step);
    max_rank = std::max<uint64_t>(max_rank, rank);
  }
  if (cells.empty()) invalid_argument("trace file '" + path + "' has a header but no rows");
  std::vector<std::vector<double>> trace(max_step + 1, std::vector<double>(max_rank + 1, 0.0));
  for (uint64_t s = 0; s <= max_step; ++s)
    for (uint64_t r = 0; r <= max_rank; ++r) {
      const auto row = cells.find(s);
      if (row == cells.end() || !row->second.contains(r))
        invalid_argument("trace file '" + path + "' has no row for step " + std::to_string(s) + " rank " +
                         std::to_string(r) + " (every step needs every rank)");
      trace[s][r] = row->second.at(r);
    }
  return trace;
}

std::vector<std::vector<double>> make_schedule(const ImbalanceModel& m, uint64_t steps, int ranks) {
  const size_t P = static_cast<size_t>(ranks);
  std::vector<std::vector<double>> ms(steps, std::vector<double>(P, m.compute_ms));
  switch (m.kind) {
    case ImbalanceModel::Kind::none: break;
    case ImbalanceModel::Kind::paper:
      for (uint64_t s = 0; s < steps; ++s) {
        // Two draws with the shared seed; when they coincide one rank is delayed (once).
        const size_t a = draw(m.seed, s, 1) % P;
        const size_t b = draw(m.seed, s, 2) % P;
        ms[s][a] = m.compute_ms + m.delay_ms;
        ms[s][b] = m.compute_ms + m.delay_ms;
      }
      break;
    case ImbalanceModel::Kind::lognormal: {
      // mean of exp(N(mu, sigma^2)) is exp(mu + sigma^2/2) = C.
      const double mu = std::log(m.compute_ms) - m.sigma * m.sigma / 2;
      for (uint64_t s = 0; s < steps; ++s)
        for (size_t r = 0; r < P; ++r) {
          // Box-Muller from two uniforms of this (step, rank).
          const double u1 = uniform01(draw(m.seed, s, 2 * r + 10));
          const double u2 = uniform01(draw(m.seed, s, 2 * r + 11));
          const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
          ms[s][r] = std::exp(mu + m.sigma * z);
        }
      break;
    }
    case ImbalanceModel::Kind::slowrank:
      if (m.slow_rank >= ranks)
        invalid_argument("--slow-rank " + std::to_string(m.slow_rank) + " is not a rank of this job (P=" +
                         std::to_string(ranks) + ")");
      for (uint64_t s = 0; s < steps; ++s) ms[s][static_cast<size_t>(m.slow_rank)] = m.compute_ms * m.slow_factor;
      break;
    case ImbalanceModel::Kind::trace: {
      const auto trace = read_trace(m.trace_path);
      if (trace.front().size() < P)
        invalid_argument("trace file '" + m.trace_path + "' has ranks 0.." + std::to_string(trace.front().size() - 1) +
                         " but the job has P=" + std::to_string(ranks) + " ranks");
      for (uint64_t s = 0; s < steps; ++s)
        for (size_t r = 0; r < P; ++r) ms[s][r] = trace[s % trace.size()][r] * m.trace_scale;
      break;
    }
  }
  return ms;
}

}  // namespace pcoll::perf
