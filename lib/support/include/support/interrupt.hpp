// The application's interrupt check: a binding whose language handles signals itself
// (Python: Ctrl-C raises KeyboardInterrupt, but only once the interpreter runs again) lets
// pcoll's blocking waits ask it, so that a signal stops pcoll_init, a collective creation,
// a destroy, a barrier or pcoll_finalize that waits for a peer, instead of only the call
// after it. The check belongs to the thread that installed it; the waits that ask it are
// the store client's (fd.hpp's wait_ready, under pcoll_init) and the agreement's.
#pragma once

namespace pcoll::interrupt {

// Returns nonzero when the waiting call should stop (it may run the language's signal
// handlers, which keep their exception for the binding to raise).
using Check = int (*)();

// Installs `check` for the calling thread (nullptr: none), forgetting an earlier request.
void set_check(Check check) noexcept;

// Whether this thread has a check installed.
bool installed() noexcept;

// Whether the check asked this thread's wait to stop. Asks it at most every 10 ms; once it
// said yes, stays yes until the next set_check.
bool requested();

}  // namespace pcoll::interrupt
