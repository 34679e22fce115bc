"""Nothing is lost through the Python layer: with carry, the results of all rounds plus the
flush add up to the sum of everything every rank sent, in solo and majority rounds made
partial by random delays; with drop, exactly the late sends are missing."""

import random
import time

import numpy as np
import pytest

from conftest import digest, same_everywhere

ROUNDS = 40


def total_over_ranks(comm, value):
    vector = np.array([value], dtype=np.int64)
    with comm.allreduce(1, dtype="int64", op="sum", mode="sync") as ar:
        ar.run(vector, vector)
    return int(vector[0])


def partial_rounds(comm, mode, late, seed):
    """Runs ROUNDS rounds with random per-rank delays; returns (received, sent, fresh_sent, infos)."""
    rng = random.Random(seed * 1000 + comm.rank)
    received = sent = fresh_sent = 0
    infos = []
    with comm.allreduce(16, dtype="int64", op="sum", mode=mode, late=late, seed=seed) as ar:
        send = np.zeros(16, np.int64)
        recv = np.zeros(16, np.int64)
        for step in range(ROUNDS):
            time.sleep(rng.choice([0, 0, 0.0005, 0.002]))
            send[:] = [rng.randrange(-1000, 1000) for _ in range(16)]
            info = ar.run(send, recv)
            infos.append(info)
            received += int(recv.sum())
            sent += int(send.sum())
            if not info.caller_late:
                fresh_sent += int(send.sum())
        ar.flush(recv)
        received += int(recv.sum())
    return received, sent, fresh_sent, infos


@pytest.mark.parametrize("mode", ["solo", "majority", "sync"])
def test_carry_conserves_every_send(comm, mode):
    received, sent, _, infos = partial_rounds(comm, mode, "carry", seed=7)
    assert received == total_over_ranks(comm, sent)
    # Every rank learns the same fresh ranks for every round.
    assert same_everywhere(comm, digest(np.array([list(i.fresh_ranks) + [-1] * (comm.size - i.fresh)
                                                  for i in infos], dtype=np.int64)))
    for i in infos:
        assert i.fresh == len(i.fresh_ranks) and (i.caller_late == (comm.rank not in i.fresh_ranks))
    if mode == "sync":
        assert all(i.fresh == comm.size for i in infos)


@pytest.mark.parametrize("mode", ["solo", "majority"])
def test_drop_loses_exactly_the_late_sends(comm, mode):
    received, _, fresh_sent, _ = partial_rounds(comm, mode, "drop", seed=11)
    assert received == total_over_ranks(comm, fresh_sent)


@pytest.mark.skipif(__import__("os").environ.get("PCOLL_SIZE", "1") == "1", reason="needs two ranks")
def test_a_rank_that_sleeps_is_late_in_solo(comm):
    with comm.allreduce(4, dtype="int64", op="sum", mode="solo") as ar:
        buf = np.ones(4, np.int64)
        comm.barrier()
        if comm.rank == 0:
            time.sleep(0.2)  # the others start the round without rank 0's data
        info = ar.run(buf.copy(), buf)
        late_round = info
        ar.flush(buf)
    assert 0 not in late_round.fresh_ranks
    if comm.rank == 0:
        assert late_round.caller_late
