"""Shared fixtures of the pcoll Python suites. Every rank of a pcollrun job runs the same
pytest session, so the tests run in the same order everywhere and their collective calls
line up; `-x` makes a rank that fails exit at once, which ends the whole job."""

import zlib

import numpy as np
import pytest

import pcoll


@pytest.fixture(scope="session")
def comm():
    c = pcoll.init()
    # Left open on purpose: comm.close() must close what the program did not.
    forgotten = c.allreduce(3, dtype="int32", op="sum", mode="solo")
    yield c
    c.close()
    assert forgotten.closed, "comm.close() left an allreduce handle open"
    c.close()  # idempotent


def same_everywhere(comm, value):
    """Whether an int (e.g. a hash) is the same on every rank: one sync max round of (v, -v)."""
    vector = np.array([value, -value], dtype=np.int64)
    with comm.allreduce(2, dtype="int64", op="max", mode="sync") as ar:
        ar.run(vector, vector)
    return int(vector[0]) == -int(vector[1])


def digest(*arrays):
    """A 63-bit digest of the arrays' bytes."""
    h = 0
    for a in arrays:
        h = zlib.crc32(np.ascontiguousarray(a).tobytes(), h)
    return h
