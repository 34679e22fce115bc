"""What a Python job leaves behind when it ends without comm.close(): nothing. A program
that returns is closed at exit, one stopped by Ctrl-C leaves alone (its peers are told), and
neither leaves a shared-memory file in /dev/shm. Each job runs on ofi:shm (16 MiB of
/dev/shm per rank) in a mount namespace of its own with a private /dev/shm, so other jobs
on the machine neither disturb the count nor are disturbed. Run directly, not under
pcollrun: each test launches its own job (PCOLL_TEST_PCOLLRUN, set by meson)."""

import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

PCOLLRUN = os.environ.get("PCOLL_TEST_PCOLLRUN")
RANKS = 3
LAST_ROUND = 12  # the resumed handle's flush is this round

PREAMBLE = """
import os, signal, sys
import numpy as np
import pcoll
comm = pcoll.init()
ar = comm.allreduce(1024, dtype="float32", op="sum", mode="sync")
buf = np.ones(1024, np.float32)
"""

# Counts the files in the private /dev/shm before and after the job, on one line each.
SHELL = ('mount -t tmpfs pcoll_test /dev/shm && ls -A /dev/shm | wc -l && '
         '"$@" > "$JOB_LOG" 2>&1; echo $?; ls -A /dev/shm | wc -l; ls -A /dev/shm >&2')


# The ranks started by hand (PCOLL_RANK, PCOLL_ROOT...), not by pcollrun, which would end
# the other ranks as soon as one exits with an error.
MANUAL = ('for rank in $(seq 0 $((PCOLL_SIZE - 1))); do PCOLL_RANK=$rank "$@" & done; '
          'status=0; for rank in $(seq 1 $PCOLL_SIZE); do wait -n || status=$?; done; exit $status')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(tmp_path, body, manual=False, ranks=RANKS, timeout_ms=20000):
    """(exit status of the job, files before, files after, job output)."""
    if not PCOLLRUN:
        pytest.skip("PCOLL_TEST_PCOLLRUN is not set (run through meson test)")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private /dev/shm")
    script = tmp_path / "job.py"
    script.write_text(PREAMBLE + textwrap.dedent(body))
    log = tmp_path / "job.log"
    environment = {**os.environ, "PCOLL_PROVIDER": "ofi:shm", "JOB_LOG": str(log)}
    if manual:
        environment.update(PCOLL_SIZE=str(ranks), PCOLL_ROOT=f"127.0.0.1:{free_port()}", PCOLL_JOB_KEY="exit-test",
                           PCOLL_TIMEOUT_MS=str(timeout_ms))
        launcher = ["bash", "-c", MANUAL, "bash"]
    else:
        launcher = [PCOLLRUN, "-n", str(ranks), "--timeout-ms", str(timeout_ms)]
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", SHELL, "sh",
               *launcher, sys.executable, str(script)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, env=environment)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"no private /dev/shm here: {done.stderr.strip()}")
    before, status, after = (int(line) for line in done.stdout.split())
    return status, before, after, log.read_text() + done.stderr


def test_a_program_that_returns_without_close_leaves_nothing_in_dev_shm(tmp_path):
    status, before, after, output = job(tmp_path, """
        ar.run(buf, buf)
        assert (buf == comm.size).all()
        print("returning without close", flush=True)
    """)
    assert status == 0, output
    assert before == 0 and after == 0, output
    assert output.count("returning without close") == RANKS, output


def test_ctrl_c_leaves_nothing_in_dev_shm(tmp_path):
    # Rank 0 sends SIGINT to pcollrun, as Ctrl-C does; pcollrun forwards it to every rank,
    # which raises KeyboardInterrupt in the middle of its rounds.
    status, before, after, output = job(tmp_path, """
        for step in range(1000000):
            if step == 20 and comm.rank == 0:
                os.kill(os.getppid(), signal.SIGINT)
            ar.run(buf, buf)
            buf[:] = 1
    """)
    assert status != 0, output
    assert before == 0 and after == 0, output
    assert "KeyboardInterrupt" in output and "RuntimeError" not in output, output


def test_an_uncaught_exception_on_one_rank_is_peer_failed_naming_it_on_the_others(tmp_path):
    # Rank 1 ends on an exception while the others wait in a sync round for it: at exit it
    # tells them it left, so they raise PeerFailed naming it long before the 20 s timeout.
    status, before, after, output = job(tmp_path, """
        import time
        if comm.rank == 1:
            time.sleep(0.5)  # the others are in their round by then
            raise RuntimeError("rank 1 gives up")
        started = time.monotonic()
        assert comm.failed_ranks == []
        try:
            ar.run(buf, buf)
        except pcoll.PeerFailed as error:
            print(f"rank {comm.rank} after {time.monotonic() - started:.1f} s: {error}", flush=True)
            assert "rank 1" in str(error) and time.monotonic() - started < 10
            assert comm.failed_ranks == [1], comm.failed_ranks
            print(f"rank {comm.rank} lists {comm.failed_ranks}", flush=True)
    """, manual=True)
    assert status != 0, output  # rank 1's
    assert "RuntimeError: rank 1 gives up" in output, output
    for rank in (0, 2):
        assert f"rank {rank} after" in output, output
        assert f"rank {rank} lists [1]" in output, output
    assert before == 0 and after == 0, output


def test_the_survivors_of_a_rank_that_left_shrink_and_go_on(tmp_path):
    # As above, rank 1 ends on an exception; the others shrink to a communicator of two and
    # run exact rounds on it. Shrinking a communicator that has not failed is refused.
    status, before, after, output = job(tmp_path, """
        import time
        try:
            comm.shrink()
        except pcoll.InvalidState as error:
            assert "no failure was reported" in str(error), error
        else:
            raise AssertionError("shrink of a healthy communicator succeeded")
        if comm.rank == 1:
            time.sleep(0.5)
            raise RuntimeError("rank 1 gives up")
        try:
            ar.run(buf, buf)
        except pcoll.PeerFailed:
            pass
        survivors = comm.shrink()
        assert (survivors.size, survivors.rank) == (2, 0 if comm.rank == 0 else 1), survivors
        again = survivors.allreduce(1024, dtype="float32", op="sum", mode="sync")
        mine = np.full(1024, comm.rank + 1, np.float32)
        out = np.zeros(1024, np.float32)
        again.run(mine, out)
        assert (out == 1 + 3).all(), out[:4]
        survivors.close()
        comm.close()
        print(f"rank {comm.rank} went on as {survivors.rank} of {survivors.size}", flush=True)
    """, manual=True)
    assert status != 0, output  # rank 1's
    assert "rank 0 went on as 0 of 2" in output and "rank 2 went on as 1 of 2" in output, output
    assert before == 0 and after == 0, output


# The job of the test below; SCENARIO ("solo" or "lagging") and LAST are prepended.
RESUME_JOB = """
    import hashlib, re, time
    N, MARKER, VICTIM = 4096, 1 << 40, 2
    mode = "solo"
    if SCENARIO == "lagging":
        # Read at creation: rank 2 dies instead of the last write of round 5 (two writes a
        # round: recursive doubling at P = 4), so the survivor that write was for has not
        # completed round 5 when the others have.
        mode = "sync"
        os.environ.update(PCOLL_PLAN="flat", PCOLL_PLAN_RULES="recursive_doubling:0-inf")
        if comm.rank == VICTIM:
            os.environ["PCOLL_TEST_KILL_AT_WRITE"] = "12"
    el = comm.allreduce(N, dtype="int64", op="sum", mode=mode, timeout_ms=2000, elastic=True)
    plain = comm.allreduce(8, dtype="int64", op="sum", mode="sync")
    assert el.elastic and not plain.elastic
    submitted, collected = np.zeros(N, np.int64), np.zeros(N, np.int64)
    digest, collected_rounds = hashlib.sha256(), []
    send, recv = np.zeros(N, np.int64), np.zeros(N, np.int64)

    def contribution(call):
        return (comm.rank + 1) * 1009 + call * 7 + np.arange(N, dtype=np.int64) % 97

    def collect(result, info):
        assert info.round == len(collected_rounds), (info.round, collected_rounds)
        collected_rounds.append(info.round)
        collected[:] += result
        digest.update(result.tobytes())

    call = 0
    try:
        for call in range(1000):
            if call == 5 and comm.rank == VICTIM and SCENARIO == "solo":
                time.sleep(0.02)  # the others' partial rounds may run without it first
                os.kill(os.getpid(), signal.SIGKILL)
            send[:] = MARKER if comm.rank == VICTIM else contribution(call)
            collect(recv, el.run(send, recv))
            submitted += send
        raise AssertionError("no failure")
    except (pcoll.PeerFailed, pcoll.Timeout) as error:
        # A run whose round started (pending) posted its send: resume delivers or carries it.
        if el.pending:
            submitted += send
        print(f"rank {comm.rank} call {call} failed, pending {el.pending}: {error}", flush=True)
    survivors = comm.shrink()
    for handle, where, word in ((plain, survivors, "elastic"), (el, comm, "pcoll_comm_shrink")):
        try:
            handle.resume(where, np.zeros(handle.count, np.int64))
        except pcoll.InvalidArgument as error:
            assert word in str(error), error
        else:
            raise AssertionError("a resume that should be refused succeeded")
    assert not el.closed
    resumed, delivered, info = el.resume(survivors, recv)
    assert el.closed and resumed.elastic and (resumed.mode, resumed.count) == (mode, N)
    try:
        el.run(send, recv)
    except pcoll.InvalidState as error:
        assert "resumed" in str(error), error
    else:
        raise AssertionError("the spent handle ran")
    if delivered:
        if mode == "sync":
            assert info.fresh_ranks == (0, 1, 2, 3), info  # the old ranks
        collect(recv, info)
    else:
        assert info is None
    print(f"rank {comm.rank} resumed as {survivors.rank} of {survivors.size}: delivered {delivered}, "
          f"next round {len(collected_rounds)}", flush=True)
    while len(collected_rounds) < LAST:
        call += 1
        send[:] = contribution(call)
        submitted += send
        collect(recv, resumed.run(send, recv))
    collect(recv, resumed.flush(recv))
    # What the survivors submitted, summed over them in one more round.
    with survivors.allreduce(N, dtype="int64", op="sum", mode="sync") as total:
        theirs = np.zeros(N, np.int64)
        total.run(submitted, theirs)
    dead = collected - theirs
    assert (dead >= 0).all() and (dead % MARKER == 0).all(), (collected[:4], theirs[:4])
    print(f"RESULT {survivors.rank} {digest.hexdigest()} {collected_rounds} {int(dead[0] // MARKER)} END",
          flush=True)
    survivors.close()
    comm.close()
"""


@pytest.mark.parametrize("scenario", ["solo", "lagging"])
def test_the_survivors_of_a_killed_rank_resume_an_elastic_handle_and_lose_nothing(tmp_path, scenario):
    # P = 4, an elastic int64 sum handle; rank 2 is SIGKILLed in the middle of the rounds:
    # "solo", by itself before its sixth call while the others are in their rounds;
    # "lagging" (sync), by the library instead of its last write of round 5. The survivors
    # shrink, resume the handle (settling the call the failure interrupted), run to round
    # 12, flush, and check exactly: what they collected is what they submitted (sends carried
    # through the failure included) plus whole multiples of MARKER, which only the dead rank
    # contributes and the survivors' own sums never reach; each collects rounds 0..12 once,
    # with the same results everywhere. Resuming a handle without elastic, or on a
    # communicator not shrunk from its own, is refused by name and leaves the handle usable.
    body = f"SCENARIO, LAST = {scenario!r}, {LAST_ROUND}\n" + textwrap.dedent(RESUME_JOB)
    status, _, _, output = job(tmp_path, body, manual=True, ranks=4, timeout_ms=5000)
    assert status != 0, output  # rank 2's SIGKILL
    # Lines of the ranks may interleave in the log: each RESULT ends with END.
    results = re.findall(r"RESULT (\d) (\w+ \[[\d, ]*\] \d+) END", output)
    assert sorted(rank for rank, _ in results) == ["0", "1", "2"], output
    assert len({tail for _, tail in results}) == 1, output
    assert f"{list(range(LAST_ROUND + 1))}" in results[0][1], output
    for rank in (0, 1, 3):
        assert f"rank {rank} resumed as" in output, output
    if scenario == "lagging":
        assert "delivered True" in output, output  # the survivor a round behind got it from resume


def test_calls_after_comm_close_say_the_communicator_is_closed(tmp_path):
    status, _, after, output = job(tmp_path, """
        comm.close()
        for call in (lambda: comm.allreduce(4), lambda: ar.run(buf, buf), comm.barrier):
            try:
                call()
            except pcoll.InvalidState as error:
                assert "the communicator is closed" in str(error), error
                print("refused:", error, flush=True)
            else:
                raise AssertionError("a call after comm.close() succeeded")
    """)
    assert status == 0, output
    assert output.count("refused:") == 3 * RANKS, output
    assert "allreduce is closed" not in output, output
    assert after == 0, output
