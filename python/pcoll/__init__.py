"""pcoll: partial collectives (eager-SGD's solo and majority allreduce) for Python.

    import pcoll
    with pcoll.init() as comm:                      # pcollrun, srun, mpirun or PCOLL_*
        with comm.allreduce(n, dtype="float32", op="avg", mode="solo") as ar:
            info = ar.run(grad, grad)               # numpy arrays or CPU torch tensors

The buffers, rounds and errors are pcoll's C API (pcoll/pcoll.h) through the _core
extension; this module parses the creation arguments and closes what a program left open
when the interpreter exits (docs/python.md, "Lifetimes").
"""

import atexit
import operator
import signal
import sys
import threading

from . import _core
from .errors import (Error, InvalidArgument, InvalidState, Mismatch, Timeout, PeerFailed, Transport,
                     Bootstrap, Unsupported, NoMemory, Protocol, Internal)

__all__ = ["init", "Comm", "Allreduce", "RoundInfo", "DTYPES", "OPS", "MODES", "LATE",
           "Error", "InvalidArgument", "InvalidState", "Mismatch", "Timeout", "PeerFailed", "Transport",
           "Bootstrap", "Unsupported", "NoMemory", "Protocol", "Internal"]

__version__ = "%d.%d" % _core.VERSION

Allreduce = _core.Allreduce
RoundInfo = _core.RoundInfo

# Names accepted for the creation arguments, from the C API's enums.
DTYPES = tuple(_core.DTYPES)
OPS = tuple(_core.OPS)
MODES = tuple(_core.MODES)
LATE = tuple(_core.LATE)


def init():
    """Joins the job: the same bootstrap rules as pcoll_init (pcollrun, srun, mpirun, PCOLL_*)."""
    return Comm()


# Every communicator not yet closed, for _close_at_exit. Held strongly: a communicator the
# program dropped without close() still holds its endpoint, to be released at exit.
_open_comms = set()


def _close_at_exit():
    """Closes what the program left open when the interpreter exits, so that nothing of the
    provider's (shared-memory files in /dev/shm) outlives the process.

    A program that returned normally is closed as comm.close() would: collectively, the
    other ranks doing the same at their exit. One that ends on an uncaught exception
    (KeyboardInterrupt from Ctrl-C included; the interpreter then sets sys.last_value) may
    be the only rank leaving, so it leaves alone: its peers are told and get PeerFailed
    naming it, and nothing waits for them. A collective close that fails leaves alone too.
    """
    exception = getattr(sys, "last_value", None)
    for comm in list(_open_comms):
        if comm.closed:
            continue
        if exception is not None:
            comm._leave(f"the program ended with {type(exception).__name__}")
            continue
        try:
            comm.close()
        except BaseException as error:  # noqa: B036 - the interpreter is ending either way
            comm._leave(f"closing at exit failed: {error}")


atexit.register(_close_at_exit)


def _reclaim_signal_handlers():
    """Puts the interpreter's handlers of SIGINT and SIGTERM back in place.

    libfabric links psm's libinfinipath, which on load installs handlers of its own for
    both: SIGINT then exits the process instead of raising KeyboardInterrupt, and SIGTERM
    (how launchers stop a job) can hang in its exit path. Python still knows what it had
    installed (its trampoline for SIGINT, the default for SIGTERM); setting that again
    undoes the library's change. Other signals (UCX's crash handlers) are left alone.
    Only the main thread may set handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for number in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(number)
        if handler is not None:
            signal.signal(number, handler)


_reclaim_signal_handlers()


def _integer(name, value, high, low=0):
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not a bool")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not low <= number < high:
        raise ValueError(f"{name} = {number} is outside {low}..{high - 1}")
    return number


def _flag(name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def _enum(name, value, table, numbers_too):
    if isinstance(value, str):
        if value in table:
            return table[value]
        raise ValueError(f"{name} {value!r} is not one of {', '.join(table)}")
    if name == "dtype":
        # torch.float32 and numpy.float32 / numpy.dtype("float32") name a dtype too.
        text = str(value)
        if text.startswith("torch.") and text[6:] in table:
            return table[text[6:]]
        named = getattr(value, "__name__", None) or getattr(value, "name", None)
        if named in table:
            return table[named]
    if numbers_too and isinstance(value, int) and not isinstance(value, bool):
        # A value of the C enum this package has no name for yet: pcoll_allreduce_create judges it.
        return _integer(name, value, 2**31, -2**31)
    raise TypeError(f"{name} must be one of {', '.join(table)}, got {value!r}")


def _to_c(count, dtype, op, mode, late, max_lag, sync_every, seed, timeout_ms, quorum, grace_us, elastic):
    """(values, problem): the arguments as the C API's values, and what is wrong with the
    first one that is not one (None when they all parse)."""
    parsers = (
        lambda: _integer("count", count, 2**62),
        lambda: _enum("dtype", dtype, _core.DTYPES, False),
        lambda: _enum("op", op, _core.OPS, True),
        lambda: _enum("mode", mode, _core.MODES, True),
        lambda: _enum("late", late, _core.LATE, True),
        lambda: _integer("max_lag", max_lag, 2**32),
        lambda: _integer("sync_every", sync_every, 2**32),
        lambda: _integer("seed", seed, 2**64),
        lambda: 0 if timeout_ms is None else _integer("timeout_ms", timeout_ms, 2**32),
        lambda: _integer("quorum", quorum, 2**32),
        lambda: _integer("grace_us", grace_us, 2**32),
        lambda: _flag("elastic", elastic),
    )
    values, problem = [], None
    for parse in parsers:
        try:
            values.append(parse())
        except (TypeError, ValueError) as error:
            problem = problem or str(error)
            values.append(0)
    return values, problem


class Comm(_core.Comm):
    """A communicator: every rank of the job. Made by pcoll.init()."""

    def __init__(self, _shrink_of=None):
        super().__init__(_shrink_of)
        _reclaim_signal_handlers()  # in case pcoll_init loaded more providers
        _open_comms.add(self)

    def shrink(self):
        """The survivors of a failure, as a new communicator. Collective over the live ranks.

        Call it after a call raised PeerFailed (or Timeout): the survivors agree on the
        failed ranks (also when more fail meanwhile) and get a communicator of their own,
        ranked 0..n-1 in the order of their old ranks. This communicator stays failed;
        close it when done. Its handles do not move by themselves: one created with
        elastic=True goes on with ar.resume(survivors, recv); others are created again on the
        new communicator. Raises PeerFailed on a rank the others named failed, InvalidState
        where no failure was reported.
        """
        return Comm(_shrink_of=self)

    def allreduce(self, count, dtype="float32", op="avg", mode="solo", max_lag=1, sync_every=0, seed=0,
                  late="carry", timeout_ms=None, quorum=0, grace_us=0, elastic=False):
        """Creates a persistent allreduce handle of `count` elements. Collective.

        mode="quorum" starts a round once `quorum` ranks posted it (0: a majority,
        floor(P/2)+1), or `grace_us` after the first arrival when that is not 0.

        elastic=True keeps what ar.resume(survivors, recv) needs to move the handle onto the
        survivors of a failure (the last round's result and the running round's
        contribution: up to about two more vectors, counted in stats()["memory_bytes"]).

        The arguments are agreed once, by pcoll_allreduce_create: a bad argument on any
        rank raises InvalidArgument on every rank naming that rank, and different arguments
        raise Mismatch on every rank. An argument that is not even a value of the C API
        (mode="fast", count=-1) enters that agreement as this rank's error.
        """
        values, problem = _to_c(count, dtype, op, mode, late, max_lag, sync_every, seed, timeout_ms, quorum,
                                 grace_us, elastic)
        if problem is not None:
            self._create_refused(values[0], problem)
        return self._create(*values)

    def close(self):
        """Closes the open handles in creation order, then the communicator. Collective; idempotent."""
        super().close()
        _open_comms.discard(self)

    def _leave(self, reason):
        super()._leave(reason)
        _open_comms.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        # Only a clean exit closes: closing is collective, and a rank leaving on an
        # exception may be the only one doing so (its exit then ends the job).
        if exc_type is None:
            self.close()
        return False

    def __repr__(self):
        state = " closed" if self.closed else ""
        return (f"<pcoll.Comm rank={self.rank} size={self.size} provider={self.provider!r} "
                f"bootstrap={self.bootstrap!r}{state}>")
