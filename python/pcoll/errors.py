"""pcoll's exceptions: one class per PCOLL_ERR_* status of the C API, under pcoll.Error.

The extension raises these (it looks the class up by status), so `except pcoll.Timeout`
catches exactly what the C library reports as PCOLL_ERR_TIMEOUT.
"""

from . import _core


class Error(Exception):
    """A failed pcoll call: .status is the PCOLL_ERR_* code, .message says what and why."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


_STATUS = _core.STATUSES


class InvalidArgument(Error, ValueError):
    """A bad argument, buffer, option or environment variable."""
    status = _STATUS["INVALID_ARGUMENT"]


class InvalidState(Error):
    """A call made in the wrong order (e.g. run() while a round is outstanding)."""
    status = _STATUS["INVALID_STATE"]


class Mismatch(Error):
    """Ranks made different collective calls or passed different arguments."""
    status = _STATUS["MISMATCH"]


class Timeout(Error):
    """A peer did not answer within the timeout."""
    status = _STATUS["TIMEOUT"]


class PeerFailed(Error):
    """A peer died or reported a failure."""
    status = _STATUS["PEER_FAILED"]


class Transport(Error):
    """The provider (libfabric or UCX) failed."""
    status = _STATUS["TRANSPORT"]


class Bootstrap(Error):
    """The rendezvous of the ranks failed."""
    status = _STATUS["BOOTSTRAP"]


class Unsupported(Error):
    """The provider cannot do what was asked."""
    status = _STATUS["UNSUPPORTED"]


class NoMemory(Error):
    """Out of memory."""
    status = _STATUS["NO_MEMORY"]


class Protocol(Error):
    """Malformed data from a peer."""
    status = _STATUS["PROTOCOL"]


class Internal(Error):
    """A bug in pcoll."""
    status = _STATUS["INTERNAL"]


for _cls in (Error, InvalidArgument, InvalidState, Mismatch, Timeout, PeerFailed, Transport, Bootstrap,
             Unsupported, NoMemory, Protocol, Internal):
    _cls.__module__ = "pcoll"  # shown as pcoll.Timeout, where users catch it

BY_STATUS = {cls.status: cls for cls in (InvalidArgument, InvalidState, Mismatch, Timeout, PeerFailed,
                                         Transport, Bootstrap, Unsupported, NoMemory, Protocol, Internal)}
# Every status of the C API has its class: a new one there must get one here.
assert set(BY_STATUS) == set(_STATUS.values()), "pcoll.errors lacks a class for a PCOLL_ERR_* status"

_core._set_error_classes(BY_STATUS)
