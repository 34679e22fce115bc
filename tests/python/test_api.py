"""The pcoll Python API, rule by rule (docs/python.md), at every P the suite is launched with."""

import os
import threading

import numpy as np
import pytest
import torch

import pcoll
from conftest import same_everywhere

NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64,
                "float16": np.float16}
multi_rank = pytest.mark.skipif(int(os.environ.get("PCOLL_SIZE", "1")) < 2, reason="needs two ranks")
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32,
                "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def test_comm_describes_the_job(comm):
    assert comm.size == int(os.environ["PCOLL_SIZE"])
    assert comm.rank == int(os.environ["PCOLL_RANK"])
    assert comm.provider and isinstance(comm.provider, str)
    assert comm.bootstrap == "pcollrun"
    assert f"rank={comm.rank}" in repr(comm)


def test_names_are_those_of_the_c_api():
    assert pcoll.MODES == ("sync", "solo", "majority", "quorum")
    assert pcoll.OPS == ("sum", "avg", "min", "max")
    assert set(pcoll.DTYPES) == {"float32", "float64", "int32", "int64", "bfloat16", "float16"}
    assert pcoll.LATE == ("carry", "drop")


@pytest.mark.parametrize("op", ["sum", "avg", "min", "max"])
@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_every_dtype_and_op_reduces_exactly(comm, dtype, op):
    P, r = comm.size, comm.rank
    # Small integers: exact in every dtype, and the avg of P*(r+1) is an integer.
    value = P * (r + 1)
    expected = {"sum": P * P * (P + 1) // 2, "avg": P * (P + 1) // 2, "min": P, "max": P * P}[op]
    send = torch.full((5,), value, dtype=TORCH_DTYPES[dtype])
    recv = torch.zeros(5, dtype=TORCH_DTYPES[dtype])
    with comm.allreduce(5, dtype=dtype, op=op, mode="sync") as ar:
        info = ar.run(send, recv)
    assert recv.tolist() == [expected] * 5
    assert info.fresh == P and info.fresh_ranks == tuple(range(P)) and not info.caller_late


@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPES))
def test_numpy_arrays_of_any_shape_are_buffers(comm, dtype):
    send = np.full((2, 3), comm.rank + 1, dtype=NUMPY_DTYPES[dtype])
    recv = np.zeros((3, 2), dtype=NUMPY_DTYPES[dtype])
    with comm.allreduce(6, dtype=dtype, op="sum", mode="sync") as ar:
        ar.run(send, recv)
    assert (recv == comm.size * (comm.size + 1) // 2).all()


def test_bfloat16_from_numpy_is_raw_bits_in_uint16(comm):
    bits = torch.full((4,), comm.rank + 1.0, dtype=torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    with comm.allreduce(4, dtype="bfloat16", op="max", mode="sync") as ar:
        ar.run(bits.copy(), bits)
    assert torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).tolist() == [float(comm.size)] * 4


def test_dtype_may_be_given_as_numpy_or_torch_dtype(comm):
    for dtype in (np.float64, np.dtype("float64"), torch.float64):
        with comm.allreduce(2, dtype=dtype) as ar:
            assert ar.dtype == "float64"


def test_recv_may_be_send(comm):
    buf = np.arange(8, dtype=np.int64) + comm.rank
    with comm.allreduce(8, dtype="int64", op="sum", mode="sync") as ar:
        ar.run(buf, buf)
    P = comm.size
    assert buf.tolist() == [P * i + P * (P - 1) // 2 for i in range(8)]


def test_round_info_is_a_named_tuple_and_rounds_count_up(comm):
    P = comm.size
    send, recv = np.ones(3, np.float32), np.zeros(3, np.float32)
    with comm.allreduce(3, mode="sync") as ar:
        infos = [ar.run(send, recv) for _ in range(3)]
    assert [i.round for i in infos] == [0, 1, 2]
    info = infos[-1]
    assert isinstance(info, pcoll.RoundInfo) and isinstance(info, tuple)
    assert tuple(info) == (info.round, info.initiator, info.fresh, info.caller_late, info.fresh_ranks)
    assert info.initiator == -1  # nobody initiates a synchronous round
    assert info.fresh_ranks == tuple(range(P)) and info.fresh == P
    assert "fresh_ranks=" in repr(info)
    with comm.allreduce(3, mode="solo") as ar:
        assert 0 <= ar.run(send, recv).initiator < P


def test_stats_count_the_rounds_and_who_was_fresh(comm):
    P = comm.size
    send, recv = np.ones(3, np.float32), np.zeros(3, np.float32)
    with comm.allreduce(3, mode="solo") as ar:
        assert ar.stats()["rounds"] <= 1  # a peer may have run round 0 without this rank
        infos = [ar.run(send, recv) for _ in range(4)]
        ar.flush(recv)
        s = ar.stats()
        closed = ar
    assert s["rounds"] == 5 and s["flushes"] == 1
    assert s["fresh_rounds"] == [sum(r in i.fresh_ranks for i in infos) for r in range(P)]
    assert [f + l for f, l in zip(s["fresh_rounds"], s["late_rounds"])] == [4] * P
    assert sum(s["fresh_histogram"]) == 4 and len(s["fresh_histogram"]) == P + 1
    assert s["registered_bytes"] > 0 and s["memory_bytes"] >= s["registered_bytes"] and s["blocked_s"] >= 0
    with pytest.raises(pcoll.InvalidState):
        closed.stats()


def test_start_test_wait(comm):
    send = np.full(4, comm.rank + 1, np.int32)
    recv = np.zeros(4, np.int32)
    with comm.allreduce(4, dtype="int32", op="sum", mode="sync") as ar:
        ar.start(send, recv)
        assert ar.pending
        while not ar.test():
            pass
        assert ar.test()  # stays done until wait() collects it
        info = ar.wait()
        assert info.round == 0 and not ar.pending
        assert (recv == comm.size * (comm.size + 1) // 2).all()
        with pytest.raises(pcoll.InvalidState, match="no round outstanding"):
            ar.wait()
        ar.start(send, recv)
        assert ar.wait().round == 1


def test_start_keeps_its_buffers_alive(comm):
    import gc
    import weakref
    with comm.allreduce(1000, dtype="float64", op="sum", mode="sync") as ar:
        recv = np.zeros(1000)
        send = np.ones(1000)
        watch = weakref.ref(send)
        ar.start(send, recv)
        del send
        gc.collect()
        assert watch() is not None  # held by the handle until the round is over
        ar.wait()
        gc.collect()
        assert watch() is None
    assert (recv == comm.size).all()


def test_flush_returns_what_was_carried(comm):
    P = comm.size
    with comm.allreduce(4, dtype="int64", op="sum", mode="solo") as ar:
        send, recv = np.ones(4, np.int64), np.zeros(4, np.int64)
        total = 0
        for _ in range(5):
            ar.run(send, recv)
            total += int(recv[0])
        info = ar.flush(recv)
        total += int(recv[0])
        assert info.round == 5 and not info.caller_late
    assert total == 5 * P


def test_close_is_idempotent_and_closed_handles_refuse_calls(comm):
    ar = comm.allreduce(2)
    assert not ar.closed
    ar.close()
    ar.close()
    assert ar.closed and "closed" in repr(ar)
    with pytest.raises(pcoll.InvalidState, match="closed"):
        ar.run(np.zeros(2, np.float32), np.zeros(2, np.float32))


def test_with_block_closes_on_clean_exit_only(comm):
    with comm.allreduce(2) as ar:
        pass
    assert ar.closed
    # On an exception the block leaves the handle open (closing is collective); every rank
    # raises here alike, so closing it afterwards lines up.
    with pytest.raises(RuntimeError):
        with comm.allreduce(2) as ar:
            raise RuntimeError("leaving the block")
    assert not ar.closed
    ar.close()


def test_run_in_a_thread_other_than_main(comm):
    results = []

    def worker():
        buf = np.ones(2, np.float32)
        with comm.allreduce(2, op="sum", mode="sync") as ar:
            results.append(ar.run(buf, buf))
        results.append(buf.tolist())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert results[1] == [float(comm.size)] * 2


# --- Errors -------------------------------------------------------------------------------------

def test_one_error_class_per_status():
    classes = [pcoll.InvalidArgument, pcoll.InvalidState, pcoll.Mismatch, pcoll.Timeout, pcoll.PeerFailed,
               pcoll.Transport, pcoll.Bootstrap, pcoll.Unsupported, pcoll.NoMemory, pcoll.Protocol, pcoll.Internal]
    assert sorted(c.status for c in classes) == list(range(1, 12))
    assert all(issubclass(c, pcoll.Error) for c in classes)
    assert issubclass(pcoll.InvalidArgument, ValueError)
    error = pcoll.Timeout("rank 3 did not answer")
    assert error.status == 4 and error.message == "rank 3 did not answer" and str(error) == error.message


@pytest.fixture
def handle(comm):
    """A float32 sum handle of 4 elements; the check after the test proves that no bad call
    reached the engine: its next round is still round 0."""
    ar = comm.allreduce(4, dtype="float32", op="sum", mode="sync")
    yield ar
    buf = np.ones(4, np.float32)
    assert ar.run(buf, buf).round == 0
    assert (buf == comm.size).all()
    ar.close()


GOOD = np.zeros(4, np.float32)


@pytest.mark.parametrize("send, recv, words", [
    (np.zeros(4, np.float64), GOOD, ["send", "float64", "float32"]),
    (GOOD, np.zeros(4, np.int32), ["recv", "int32"]),
    (np.zeros(5, np.float32), GOOD, ["send", "5 elements", "4"]),
    (GOOD, np.zeros(3, np.float32), ["recv", "3 elements"]),
    (np.zeros(8, np.float32)[::2], GOOD, ["send", "not contiguous"]),
    (GOOD, np.zeros((4, 2), np.float32)[:, 0], ["recv", "not contiguous"]),
    (np.zeros(4, ">f4"), GOOD, ["send"]),
    ([0.0] * 4, GOOD, ["send", "list"]),
    (GOOD, None, ["recv", "None"]),
    (torch.zeros(4, dtype=torch.float64), GOOD, ["send", "torch.float64"]),
    (GOOD, torch.zeros(2, 2).t(), ["recv", "not contiguous"]),
    (GOOD, torch.zeros(4, device="meta"), ["recv", "meta", "CPU tensor"]),
    (torch.zeros(4).to_sparse(), GOOD, ["send", "sparse", "dense"]),
])
def test_bad_buffers_raise_invalid_argument_naming_the_argument(handle, send, recv, words):
    for call in (lambda: handle.run(send, recv), lambda: handle.start(send, recv)):
        with pytest.raises(pcoll.InvalidArgument) as raised:
            call()
        assert raised.value.status == 1
        for word in words:
            assert word in str(raised.value)
    assert not handle.pending


def test_read_only_recv_is_refused_read_only_send_is_fine(handle, comm):
    frozen = np.ones(4, np.float32)
    frozen.setflags(write=False)
    with pytest.raises(pcoll.InvalidArgument, match="recv is read-only"):
        handle.run(GOOD, frozen)
    with pytest.raises(pcoll.InvalidArgument, match="recv is read-only"):
        handle.flush(frozen)
    with comm.allreduce(4, op="sum", mode="sync") as ar:
        out = np.zeros(4, np.float32)
        ar.run(frozen, out)
    assert (out == comm.size).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU in this build of torch")
def test_gpu_tensors_are_refused(handle):
    with pytest.raises(pcoll.InvalidArgument, match="CPU tensor"):
        handle.run(torch.zeros(4, device="cuda"), GOOD)


def test_round_outstanding_refuses_a_second_start(comm):
    with comm.allreduce(2, op="sum", mode="sync") as ar:
        buf = np.ones(2, np.float32)
        ar.start(buf, buf)
        for call in (lambda: ar.run(buf, buf), lambda: ar.start(buf, buf), lambda: ar.flush(buf)):
            with pytest.raises(pcoll.InvalidState, match="outstanding"):
                call()
        # close() finishes the outstanding round, then destroys.
    assert ar.closed and not ar.pending
    assert (buf == comm.size).all()


# --- Creation arguments: collective validation --------------------------------------------------

def test_bad_creation_argument_on_every_rank(comm):
    for kwargs, words in [({"mode": "fast"}, "mode 'fast' is not one of sync, solo, majority"),
                          ({"dtype": "complex64"}, "dtype 'complex64'"),
                          ({"op": "prod"}, "op 'prod'"),
                          ({"late": "never"}, "late 'never'"),
                          ({"count": -1}, "count = -1"),
                          ({"count": "8"}, "count must be an integer"),
                          ({"max_lag": -2}, "max_lag"),
                          ({"seed": 2**64}, "seed")]:
        args = {"count": 8, **kwargs}
        with pytest.raises(pcoll.InvalidArgument, match=words.replace("(", r"\(")):
            comm.allreduce(**args)


def test_quorum_mode_runs_with_its_k_and_grace(comm):
    P = comm.size
    for quorum, grace in ((0, 0), (1, 0), (P, 0), (P, 2000)):
        with comm.allreduce(4, dtype="int64", op="sum", mode="quorum", quorum=quorum, grace_us=grace) as ar:
            assert ar.mode == "quorum"
            assert ar.quorum == (quorum or P // 2 + 1)
            assert ar.grace_us == grace
            buf = np.ones(4, np.int64)
            total = np.zeros(4, np.int64)
            for _ in range(3):
                buf[:] = 1
                info = ar.run(buf, buf)
                assert info.fresh >= min(ar.quorum, P) or grace > 0
                total += buf
            ar.flush(buf)
            total += buf
            assert (total == 3 * P).all()  # carry + flush lose nothing


def test_quorum_arguments_are_checked(comm):
    with pytest.raises(pcoll.InvalidArgument, match="opts.quorum"):
        comm.allreduce(8, mode="quorum", quorum=comm.size + 1)
    with pytest.raises(pcoll.InvalidArgument, match="PCOLL_MODE_QUORUM only"):
        comm.allreduce(8, mode="solo", quorum=1)
    with pytest.raises(pcoll.InvalidArgument, match="grace_us"):
        comm.allreduce(8, mode="quorum", grace_us=-1)


def test_the_c_library_checks_the_agreed_values(comm):
    with pytest.raises(pcoll.InvalidArgument, match="max_lag"):
        comm.allreduce(8, max_lag=65)
    with pytest.raises(pcoll.InvalidArgument, match="mode 7"):
        comm.allreduce(8, mode=7)  # a number the C API does not (yet) have


def test_elastic_is_a_flag_and_resume_refuses_at_once_what_it_cannot_resume(comm):
    # A failure to resume from is test_exit.py's; here what is refused before anything
    # collective, on a healthy communicator, and the handle stays usable after each.
    with pytest.raises(pcoll.InvalidArgument, match="elastic must be True or False, got int"):
        comm.allreduce(8, elastic=1)
    if comm.size > 1:
        with pytest.raises(pcoll.Mismatch, match="elastic="):
            comm.allreduce(8, elastic=comm.rank == 0)
    buf = np.ones(8, np.int64)
    with comm.allreduce(8, dtype="int64", op="sum", mode="sync") as plain:
        assert plain.elastic is False
        with pytest.raises(pcoll.InvalidArgument, match="without opts.elastic"):
            plain.resume(comm, buf)
    with comm.allreduce(8, dtype="int64", op="sum", mode="sync", elastic=True) as ar:
        assert ar.elastic is True
        with pytest.raises(pcoll.InvalidArgument, match="not made by pcoll_comm_shrink"):
            ar.resume(comm, buf)
        with pytest.raises(pcoll.InvalidArgument, match="resume: recv has dtype float64"):
            ar.resume(comm, np.ones(8))
        with pytest.raises(pcoll.InvalidArgument, match="comm must be a pcoll.Comm"):
            ar.resume(None, buf)
        assert not ar.closed
        ar.run(buf, buf)
        assert (buf == comm.size).all()


@multi_rank
def test_bad_creation_argument_on_one_rank_fails_every_rank(comm):
    # The argument that did not parse enters the C library's one agreement as that rank's
    # error: every rank raises the same InvalidArgument, naming the rank and the argument.
    bad = comm.size - 1
    for kwargs in ({"mode": "fast"}, {"count": -1}, {"dtype": "complex64"}, {"seed": 2**64}):
        args = {"count": 8, "mode": "solo", **(kwargs if comm.rank == bad else {})}
        with pytest.raises(pcoll.InvalidArgument) as raised:
            comm.allreduce(**args)
        assert f"rank {bad}: {next(iter(kwargs))}" in str(raised.value)
    assert same_everywhere(comm, 4321)  # nothing is left half-agreed


@multi_rank
def test_different_creation_arguments_are_a_mismatch_on_every_rank(comm):
    with pytest.raises(pcoll.Mismatch, match=r"count=8 .* but rank 0 with count=9"):
        comm.allreduce(8 + (comm.rank == 0))
    with pytest.raises(pcoll.Mismatch, match=r"mode=solo .* but rank 0 with count=8 dtype=float32 op=avg mode=sync"):
        comm.allreduce(8, mode="sync" if comm.rank == 0 else "solo")
    with pytest.raises(pcoll.Mismatch, match="seed"):
        comm.allreduce(8, seed=comm.rank)


def test_creation_runs_no_extra_round(comm):
    # Creation is agreed once, in pcoll_allreduce_create: the package keeps no handle of its
    # own, so the handles a program makes are all the communicator has.
    assert not any(isinstance(value, pcoll.Allreduce) for value in vars(comm).values())


def test_communicator_still_works_after_refused_creations(comm):
    buf = np.ones(2, np.float32)
    with comm.allreduce(2, op="sum") as ar:
        ar.run(buf, buf)
        ar.flush(buf)
    assert same_everywhere(comm, 12345)
