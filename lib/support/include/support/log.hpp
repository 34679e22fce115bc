// Leveled logging to stderr, controlled by PCOLL_LOG=error|warn|info|debug|trace
// (settings.hpp). Each line carries the rank once it is known.
#pragma once

#include <string>

namespace pcoll::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

// Reads PCOLL_LOG; throws Error(invalid_argument) on an unknown level.
Level threshold();
// Whether `level` is logged; never throws (an invalid PCOLL_LOG logs as warn).
bool enabled(Level level);
// The rank in the calling thread's log lines (a communicator sets it on the thread that
// creates it and on its progress thread). Other threads print the process's rank when the
// process holds one rank, and none when its ranks are threads (tests/threads).
void set_rank(int rank);
void write(Level level, const std::string& message);

inline void error(const std::string& m) { write(Level::error, m); }
inline void warn(const std::string& m) { write(Level::warn, m); }
inline void info(const std::string& m) { if (enabled(Level::info)) write(Level::info, m); }
inline void debug(const std::string& m) { if (enabled(Level::debug)) write(Level::debug, m); }

}  // namespace pcoll::log
