"""Ctrl-C in a blocking call: KeyboardInterrupt is raised, the round stays outstanding, and a
later wait() completes it or close() finishes and releases it. Rank 0 is interrupted while
the last rank sleeps, so its round cannot complete before the signal."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import pcoll

pytestmark = pytest.mark.skipif(int(os.environ.get("PCOLL_SIZE", "1")) < 2, reason="needs two ranks")

LATE_S = 1.0       # how long the last rank keeps the round from completing
INTERRUPT_S = 0.2  # when rank 0 gets its signal


def sigint_soon():
    """A real SIGINT (what Ctrl-C sends) to this process, from another thread."""
    timer = threading.Timer(INTERRUPT_S, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_in_run_leaves_the_round_outstanding_and_wait_completes_it(comm):
    last = comm.size - 1
    with comm.allreduce(4, dtype="int64", op="sum", mode="sync") as ar:
        buf = np.ones(4, np.int64)
        comm.barrier()
        if comm.rank == 0:
            started = time.monotonic()
            sigint_soon()
            with pytest.raises(KeyboardInterrupt):
                ar.run(buf, buf)
            assert time.monotonic() - started < LATE_S * 0.8, "the wait did not notice the signal in time"
            assert ar.pending
            with pytest.raises(pcoll.InvalidState, match="outstanding"):
                ar.run(buf, buf)
            info = ar.wait()
        else:
            if comm.rank == last:
                time.sleep(LATE_S)
            info = ar.run(buf, buf)
        assert info.round == 0 and not ar.pending
        assert (buf == comm.size).all()
        # The handle goes on as usual.
        buf[:] = 1
        assert ar.run(buf, buf).round == 1 and (buf == comm.size).all()


def test_a_signal_handlers_exception_in_wait_then_close_finishes_the_round(comm):
    last = comm.size - 1
    ar = comm.allreduce(4, dtype="int64", op="sum", mode="sync")
    send, recv = np.ones(4, np.int64), np.zeros(4, np.int64)
    comm.barrier()
    if comm.rank == 0:
        class Stop(Exception):
            pass

        def on_alarm(signum, frame):
            raise Stop()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        try:
            ar.start(send, recv)
            signal.setitimer(signal.ITIMER_REAL, INTERRUPT_S)
            with pytest.raises(Stop):
                ar.wait()
        finally:
            signal.signal(signal.SIGALRM, previous)
        assert ar.pending and not ar.closed
        ar.close()  # waits for the last rank, then destroys
    else:
        if comm.rank == last:
            time.sleep(LATE_S)
        ar.run(send, recv)
        ar.close()
    assert ar.closed and not ar.pending
    assert (recv == comm.size).all()


def threads_now():
    return len(os.listdir("/proc/self/task"))


def test_ctrl_c_in_wait_keeps_the_round_for_a_later_wait(comm):
    last = comm.size - 1
    with comm.allreduce(4, dtype="int64", op="sum", mode="sync") as ar:
        send, recv = np.ones(4, np.int64), np.zeros(4, np.int64)
        comm.barrier()
        if comm.rank == 0:
            ar.start(send, recv)
            sigint_soon()
            with pytest.raises(KeyboardInterrupt):
                ar.wait()
            assert ar.pending
            info = ar.wait()
        else:
            if comm.rank == last:
                time.sleep(LATE_S)
            info = ar.run(send, recv)
        assert info.round == 0 and not ar.pending
        assert (recv == comm.size).all()


def test_a_wait_starts_no_thread(comm):
    # A wait is the calling thread's own loop over timed waits: the process has the same
    # threads while a rank waits for a straggler as before the wait began. A first round on
    # another handle starts whatever the engine itself starts.
    last = comm.size - 1
    buf = np.ones(4, np.int64)
    with comm.allreduce(4, dtype="int64", op="sum", mode="sync") as warm:
        warm.run(buf, buf)
    with comm.allreduce(4, dtype="int64", op="sum", mode="sync") as ar:
        comm.barrier()
        if comm.rank == 0:
            before = threads_now()
            during = []
            previous = signal.signal(signal.SIGALRM, lambda signum, frame: during.append(threads_now()))
            try:
                signal.setitimer(signal.ITIMER_REAL, INTERRUPT_S)
                ar.run(buf, buf)
            finally:
                signal.signal(signal.SIGALRM, previous)
            assert during == [before], f"{before} threads before the wait, {during} during it"
            assert threads_now() == before
        else:
            if comm.rank == last:
                time.sleep(LATE_S)
            ar.run(buf, buf)
