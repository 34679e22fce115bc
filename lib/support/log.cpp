// PCOLL_LOG levels. The threshold is read once; the rank prefix is set after bootstrap.
#include <support/log.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>

#include <support/support_settings.hpp>

namespace pcoll::log {
namespace {

constexpr int kNoRank = -1;
constexpr int kSeveralRanks = -2;
// Documented globals: the process's rank for log prefixes (kSeveralRanks once ranks of a
// job run as threads of this process), and the calling thread's own rank.
std::atomic<int> g_rank{kNoRank};
thread_local int t_rank = kNoRank;

Level read_threshold() {
  const std::string value = SupportSettings::get_choice("PCOLL_LOG");
  if (value == "error") return Level::error;
  if (value == "info") return Level::info;
  if (value == "debug") return Level::debug;
  if (value == "trace") return Level::trace;
  return Level::warn;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::error: return "error";
    case Level::warn: return "warn";
    case Level::info: return "info";
    case Level::debug: return "debug";
    case Level::trace: return "trace";
  }
  return "?";
}

}  // namespace

Level threshold() {
  static const Level level = read_threshold();
  return level;
}

// Logging must never throw, or a thread that only logs (the store's server, a progress
// thread) dies of a rank's bad setting: an invalid PCOLL_LOG is reported by pcoll_init (and
// refused by pcollrun), and logs as warn until then.
bool enabled(Level level) {
  Level limit = Level::warn;
  try {
    limit = threshold();
  } catch (...) {
  }
  return static_cast<int>(level) <= static_cast<int>(limit);
}

void set_rank(int rank) {
  t_rank = rank < 0 ? kNoRank : rank;
  if (rank < 0) return;
  int seen = kNoRank;
  if (!g_rank.compare_exchange_strong(seen, rank, std::memory_order_relaxed) && seen != rank)
    g_rank.store(kSeveralRanks, std::memory_order_relaxed);
}

void write(Level level, const std::string& message) {
  if (!enabled(level)) return;
  const int rank = t_rank != kNoRank ? t_rank : g_rank.load(std::memory_order_relaxed);
  if (rank >= 0)
    std::fprintf(stderr, "pcoll[%d] %s: %s\n", rank, level_name(level), message.c_str());
  else
    std::fprintf(stderr, "pcoll %s: %s\n", level_name(level), message.c_str());
}

}  // namespace pcoll::log
