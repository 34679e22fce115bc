"""pcoll.torch: identical replicas, the distributed optimizer, torch.distributed's rendezvous,
the DDP hook, and a short training run that must learn."""

import math
import os
import random
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import pcoll
from pcoll.torch import DistributedOptimizer, PartialAllreduceHook, broadcast_parameters, init_process_group
from pcoll.torch import _Curvature, _HookMomentum, _StaleShare, _lower_opposed_momentum, _segment_sums
from pcoll.torch import _CURVATURE_FULL, _CURVATURE_QUIET, _curvature_gate, _lower_momentum_by_curvature
from conftest import digest, same_everywhere

torch.set_num_threads(1)
multi_rank = pytest.mark.skipif(int(os.environ.get("PCOLL_SIZE", "1")) < 2, reason="needs two ranks")


def mlp(seed, dtype=torch.float32):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dtype)


def state_digest(module):
    return digest(*[t.detach().reshape(-1).contiguous().view(torch.uint8).numpy() for t in module.state_dict().values()])


def test_broadcast_parameters_copies_root_bit_for_bit(comm):
    root = comm.size - 1
    model = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8))
    torch.manual_seed(comm.rank)
    with torch.no_grad():
        for t in model.state_dict().values():
            t.copy_(torch.randint(0, 100, t.shape).to(t.dtype))
        model[0].bias[0] = -0.0  # survives: the broadcast adds integers, not floats
    before = state_digest(model)
    broadcast_parameters(model, comm, root=root)
    assert same_everywhere(comm, state_digest(model))
    assert same_everywhere(comm, before if comm.rank == root else state_digest(model))
    assert str(model[0].bias[0].item()) == "-0.0"


@multi_rank
def test_broadcast_parameters_needs_the_same_root_everywhere(comm):
    with pytest.raises(pcoll.InvalidArgument, match="same root"):
        broadcast_parameters(mlp(0), comm, root=comm.rank % 2)


def test_step_averages_by_world_size(comm):
    P = comm.size
    model = mlp(0, torch.float64)
    broadcast_parameters(model, comm)
    weights = [p.detach().clone() for p in model.parameters()]
    with DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), model, comm, mode="sync") as opt:
        for p in model.parameters():
            p.grad.fill_(comm.rank + 1)  # .grad is a view into the flat buffer
        info = opt.step()
        assert info.fresh == P and opt.last_info is info and opt.fresh_fraction == 1.0
        weights = [w - (P + 1) / 2 for w in weights]  # the same float operation as SGD's
        for p, w in zip(model.parameters(), weights):
            assert torch.equal(p.detach(), w)
        # A .grad replaced behind the optimizer's back still goes through the round.
        opt.optimizer.zero_grad(set_to_none=True)
        for p in model.parameters():
            p.grad = torch.full_like(p, 2.0 * (comm.rank + 1))
        opt.step()
        for p, w in zip(model.parameters(), weights):
            assert torch.equal(p.detach(), w - (P + 1))


def test_parameters_of_several_dtypes_are_refused(comm):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    with pytest.raises(pcoll.InvalidArgument, match="several dtypes"):
        DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm)


@pytest.mark.parametrize("mode, steps", [("solo", 200), ("majority", 100)])
def test_replicas_stay_bitwise_identical_under_random_delays(comm, mode, steps):
    P = comm.size
    model = mlp(comm.rank)  # different on purpose: broadcast_parameters must fix it
    broadcast_parameters(model, comm)
    rng = random.Random(100 + comm.rank)
    torch.manual_seed(200 + comm.rank)
    x, y = torch.randn(256, 16), torch.randint(0, 4, (256,))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    late = 0
    with DistributedOptimizer(sgd, model, comm, mode=mode, seed=5) as opt:
        for step in range(steps):
            # One rank per step is slow, and everyone jitters: many rounds are partial.
            time.sleep((0.002 if step % P == comm.rank else 0) + rng.choice([0, 0, 0.0005]))
            batch = slice(step % 8 * 32, step % 8 * 32 + 32)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            info = opt.step()
            late += info.caller_late
        opt.flush()
        assert opt.steps == steps and opt.late_steps == late
        if P > 1:
            assert opt.fresh_fraction < 1.0  # the delays did make rounds partial
    assert same_everywhere(comm, state_digest(model))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def digits_shard(comm, seed=0):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    data = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2, random_state=seed)
    scaler = StandardScaler().fit(x_train)
    as_tensor = lambda a: torch.tensor(a, dtype=torch.float32)
    return (as_tensor(scaler.transform(x_train))[comm.rank::comm.size], torch.tensor(y_train)[comm.rank::comm.size],
            as_tensor(scaler.transform(x_test)), torch.tensor(y_test))


def test_a_short_solo_training_run_learns(comm):
    x, y, x_test, y_test = digits_shard(comm)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    broadcast_parameters(model, comm)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(comm.rank)
    with DistributedOptimizer(sgd, model, comm, mode="solo") as opt:
        for step in range(120):
            batch = torch.randint(0, len(x), (32,), generator=generator)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
        opt.flush()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    assert accuracy > 0.85, f"test accuracy {accuracy:.3f} after 120 steps (chance is 0.1)"


# --- staleness ----------------------------------------------------------------------------------

class RecordingSGD(torch.optim.SGD):
    """SGD that records the momentum each of its steps ran with."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self.momenta = []

    def step(self, closure=None):
        self.momenta.append(self.param_groups[0]["momentum"])
        return super().step(closure)


def test_stale_share_counts_last_rounds_late_ranks():
    Info = type("Info", (), {})
    share = _StaleShare(4)
    seen = []
    for fresh in (4, 1, 2, 4, 3, 0):
        info = Info()
        info.fresh = fresh
        seen.append(share.next(info))
    # Round by round: stale = ranks not fresh the round before; share = stale / (stale + fresh).
    assert seen == [0.0, 0.0, 3 / 5, 2 / 6, 0.0, 1 / 1]


@pytest.mark.parametrize("share, dampening", [(0.25, 0.0), (0.25, 0.5), (0.75, 0.0)])
def test_opposed_coordinates_lose_momentum_by_the_stale_share(share, dampening):
    p = torch.zeros(6, dtype=torch.float64, requires_grad=True)
    sgd = torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=dampening)
    buffer = torch.tensor([1.0, -2.0, 3.0, -4.0, 0.0, 5.0], dtype=torch.float64)
    sgd.state[p]["momentum_buffer"] = buffer.clone()
    grad = torch.tensor([0.5, 0.5, -0.5, -0.5, 1.0, 0.0], dtype=torch.float64)
    p.grad = grad.clone()
    _lower_opposed_momentum(sgd, share)
    sgd.step()
    k = min(1.0, 2 * share)
    opposed = torch.tensor([False, True, True, False, False, False])
    expected = torch.where(opposed, 0.9 * (1 - k) * buffer, 0.9 * buffer) + (1 - dampening) * grad
    assert torch.allclose(sgd.state[p]["momentum_buffer"], expected, rtol=1e-12, atol=1e-12)


def test_segment_sums_are_the_same_in_any_order_and_thread_count():
    torch.manual_seed(11)
    values = torch.randn(20000, dtype=torch.float64) * torch.logspace(-3, 3, 20000, dtype=torch.float64)
    ends = torch.tensor([1, 4000, 4001, 12000, 20000])
    sums = _segment_sums(values, ends)
    starts = [0] + ends[:-1].tolist()
    exact = [math.fsum(values[a:b].tolist()) for a, b in zip(starts, ends.tolist())]
    assert torch.allclose(sums, torch.tensor(exact, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    shuffled = values.clone()
    for a, b in zip(starts, ends.tolist()):
        shuffled[a:b] = values[a:b][torch.randperm(b - a)]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.equal(_segment_sums(shuffled, ends), sums)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(_segment_sums(torch.zeros(5, dtype=torch.float64), torch.tensor([2, 5])),
                       torch.zeros(2, dtype=torch.float64))


def test_curvature_is_measured_along_the_steps_with_a_stale_share():
    # Two tensors on quadratics of curvature 3 and 0.01, a share s of each round's gradient
    # taken at the weights before (exactly as a partial round mixes them): the secant
    # estimate gives each tensor's curvature back.
    torch.manual_seed(12)
    steep = torch.randn(5000, dtype=torch.float64)
    flat = torch.randn(300, dtype=torch.float64)
    curvature = _Curvature([steep, flat])
    h = torch.tensor([3.0, 0.01], dtype=torch.float64)
    share, lr, mu = 0.75, 0.02, 0.9
    previous = [steep.clone(), flat.clone()]
    velocity = [torch.zeros_like(steep), torch.zeros_like(flat)]
    for _ in range(40):
        grads = [(1 - share) * h[i] * w + share * h[i] * previous[i] for i, w in enumerate((steep, flat))]
        measured = curvature.update(share, grads)
        for i, w in enumerate((steep, flat)):
            previous[i] = w.clone()
            velocity[i] = mu * velocity[i] + grads[i]
            w -= lr * velocity[i]
    assert torch.allclose(measured, h, rtol=0.05)


def test_curvature_samples_at_most_its_share_of_each_tensor_and_follows_moved_storage():
    from pcoll.torch import _CURVATURE_SAMPLE
    sizes = [1, _CURVATURE_SAMPLE, _CURVATURE_SAMPLE + 1, 4 * _CURVATURE_SAMPLE + 1, 100000]
    tensors = [torch.randn(n) for n in sizes]
    curvature = _Curvature(tensors)
    counts = torch.diff(curvature.ends, prepend=torch.zeros(1, dtype=curvature.ends.dtype)).tolist()
    assert counts[:2] == [1, _CURVATURE_SAMPLE]
    assert all(0 < c <= _CURVATURE_SAMPLE for c in counts)
    first = curvature._sample(tensors, "params")
    tensors[3].mul_(2)                                   # in place: the kept views see it
    assert torch.equal(curvature._sample(tensors, "params")[counts[0] + counts[1] + counts[2]:][:counts[3]],
                       2 * first[counts[0] + counts[1] + counts[2]:][:counts[3]])
    tensors[4] = torch.full((100000,), 7.0)              # new storage: sampled afresh
    assert torch.equal(curvature._sample(tensors, "params")[-counts[4]:], torch.full((counts[4],), 7.0, dtype=torch.float64))


def test_curvature_gate_is_shut_inside_the_quiet_band_and_open_near_the_edge():
    # lr s h / (1 - mu): the share of the way to the unstable edge.
    mu, lr, share = 0.9, 0.1, 0.5
    h_at = lambda edge: edge * (1 - mu) / (lr * share)
    assert _curvature_gate(mu, lr, share, 0.0) == 0.0
    assert _curvature_gate(mu, lr, share, -1.0) == 0.0
    assert _curvature_gate(mu, lr, share, h_at(_CURVATURE_QUIET * 0.99)) == 0.0
    assert _curvature_gate(mu, lr, share, h_at((_CURVATURE_QUIET + _CURVATURE_FULL) / 2)) == pytest.approx(0.5)
    assert _curvature_gate(mu, lr, share, h_at(_CURVATURE_FULL)) == pytest.approx(1.0)
    assert _curvature_gate(mu, lr, share, h_at(5.0)) == 1.0
    assert _curvature_gate(1.0, lr, share, 10.0) == 0.0   # no momentum to lower


def test_curvature_rule_spares_a_flat_tensor_and_cuts_a_steep_ones_opposed_momentum():
    steep = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    middle = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    flat = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    sgd = torch.optim.SGD([steep, middle, flat], lr=0.1, momentum=0.9)
    curvature = _Curvature([steep, middle, flat])
    curvature.update(0.5, [torch.zeros(4, dtype=torch.float64)] * 3)
    # lr s h / (1 - mu) = 0.5 h: the edge's fraction is 5 (steep), halfway through the
    # gate's ramp (middle) and 5e-5 (flat).
    halfway = (_CURVATURE_QUIET + _CURVATURE_FULL) / 2
    curvature.num[:] = torch.tensor([10.0, 2 * halfway, 1e-4], dtype=torch.float64)
    curvature.den[:] = 1.0
    buffer = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    grad = torch.tensor([-0.5, -0.5, 0.5, 0.5], dtype=torch.float64)
    for p in (steep, middle, flat):
        sgd.state[p]["momentum_buffer"] = buffer.clone()
        p.grad = grad.clone()
    with torch.no_grad():
        _lower_momentum_by_curvature(sgd, 0.5, curvature, {})
    sgd.step()
    # The first update sees no step yet, so the sums stay; opposed's k = min(1, 2 x 0.5) = 1.
    opposed = torch.tensor([True, False, False, True])
    cut = torch.where(opposed, 0.0 * buffer, 0.9 * buffer) + grad
    assert torch.allclose(sgd.state[steep]["momentum_buffer"], cut, rtol=1e-12, atol=1e-12)
    half = torch.where(opposed, 0.45 * buffer, 0.9 * buffer) + grad
    assert torch.allclose(sgd.state[middle]["momentum_buffer"], half, rtol=1e-12, atol=1e-12)
    # Inside the quiet band the tensor's step is plain SGD's, bit for bit.
    assert torch.equal(sgd.state[flat]["momentum_buffer"], 0.9 * buffer + grad)


@pytest.mark.parametrize("staleness", ["auto", "opposed", "momentum", "curvature", "none"])
def test_staleness_rules_under_delays(comm, staleness):
    model = mlp(7)
    broadcast_parameters(model, comm)
    sgd = RecordingSGD(model.parameters(), lr=0.01, momentum=0.9)
    torch.manual_seed(500 + comm.rank)
    expected = []
    with DistributedOptimizer(sgd, model, comm, mode="solo", staleness=staleness) as opt:
        assert opt.staleness == ("curvature" if staleness == "auto" else staleness)
        for step in range(30):
            time.sleep(0.003 if step % comm.size == comm.rank else 0)
            opt.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
            opt.step()
            share = opt.last_stale_share
            assert 0.0 <= share <= 1.0
            # Only the momentum rule changes the group's momentum, and only for the step.
            expected.append(0.9 * (1.0 - share) if staleness == "momentum" and share > 0 else 0.9)
            assert sgd.param_groups[0]["momentum"] == 0.9
        assert sgd.momenta == expected
        if comm.size > 1:
            assert opt.fresh_fraction < 1.0
        opt.flush()
    assert same_everywhere(comm, state_digest(model))
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("weight_decay, rule", [(0.0, "opposed"), (5e-4, "opposed"), (5e-4, "momentum")])
def test_hook_reads_the_momentum_off_the_parameters_and_lowers_it(weight_decay, rule):
    # A bucket of two parameters under real SGD: the hook's correction must make the
    # optimizer's momentum buffer follow mu (1 - k) v + g + wd w where it corrects, as the
    # optimizer's own rule does, from the parameters alone.
    torch.manual_seed(3)
    # The short middle one falls between two sampled coordinates (stride 6).
    a = torch.randn(3000, dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3700, dtype=torch.float64, requires_grad=True)
    params = [a, c, b]
    sgd = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=weight_decay)
    slots = [(a, 0, 3000), (c, 3000, 2), (b, 3002, 3700)]
    momentum = _HookMomentum(slots, 6702, torch.float64, rule)
    share, mu = 0.3, 0.9
    opposed_only = rule == "opposed"
    k = min(1.0, 2 * share) if opposed_only else share
    corrected = []
    for step in range(8):
        buffer = torch.randn(6702, dtype=torch.float64)
        raw = buffer.clone()
        before = [sgd.state[p]["momentum_buffer"].clone() for p in params] if step else None
        weights = torch.cat([p.detach().clone() for p in params])
        with torch.no_grad():
            corrected.append(momentum.correct(buffer, share, rule))
        a.grad, c.grad, b.grad = buffer[:3000].clone(), buffer[3000:3002].clone(), buffer[3002:].clone()
        sgd.step()
        if corrected[-1]:
            v_before = torch.cat(before)
            lowered = (raw * v_before < 0) if opposed_only else torch.ones_like(raw, dtype=torch.bool)
            expected = torch.where(lowered, mu * (1 - k) * v_before, mu * v_before) + raw + weight_decay * weights
            v_after = torch.cat([sgd.state[p]["momentum_buffer"] for p in params])
            assert torch.allclose(v_after, expected, rtol=1e-6, atol=1e-9), step
    # The first two steps have no parameter steps to fit; from the third on, every step fits.
    assert corrected == [False, False] + [True] * 6


def test_hook_leaves_an_optimizer_it_cannot_read_alone():
    torch.manual_seed(4)
    a = torch.randn(2000, dtype=torch.float64, requires_grad=True)
    adam = torch.optim.Adam([a], lr=0.01)
    momentum = _HookMomentum([(a, 0, 2000)], 2000, torch.float64, "opposed")
    for _ in range(6):
        buffer = torch.randn(2000, dtype=torch.float64)
        raw = buffer.clone()
        with torch.no_grad():
            assert not momentum.correct(buffer, 0.5, "opposed")
        assert torch.equal(buffer, raw)
        a.grad = buffer
        adam.step()


def test_staleness_does_nothing_in_sync_mode(comm):
    model = mlp(8)
    broadcast_parameters(model, comm)
    sgd = RecordingSGD(model.parameters(), lr=0.01, momentum=0.9)
    with DistributedOptimizer(sgd, model, comm, mode="sync") as opt:
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
            opt.step()
            assert opt.last_stale_share == 0.0
    assert sgd.momenta == [0.9] * 3


def test_staleness_must_be_a_rule_and_the_same_everywhere(comm):
    model = mlp(9)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    bad = "bogus" if comm.rank == 0 else "auto"
    expected = pcoll.InvalidArgument if comm.rank == 0 else pcoll.Mismatch
    if comm.size == 1:
        expected = pcoll.InvalidArgument
    with pytest.raises(expected, match="staleness"):
        DistributedOptimizer(sgd, model, comm, staleness=bad)
    if comm.size > 1:
        differing = "none" if comm.rank == comm.size - 1 else "auto"
        with pytest.raises(pcoll.Mismatch, match="different staleness rules"):
            DistributedOptimizer(sgd, model, comm, staleness=differing)


# --- torch.distributed and DDP ------------------------------------------------------------------

@pytest.fixture(scope="module")
def process_group(comm):
    assert "MASTER_ADDR" not in os.environ and "MASTER_PORT" not in os.environ
    init_process_group(comm)
    yield
    dist.destroy_process_group()


def test_init_process_group_from_pcolls_bootstrap(comm, process_group):
    assert dist.get_rank() == comm.rank and dist.get_world_size() == comm.size
    t = torch.tensor([comm.rank + 1.0])
    dist.all_reduce(t)
    assert t.item() == comm.size * (comm.size + 1) / 2
    with pytest.raises(pcoll.InvalidState, match="already initialized"):
        init_process_group(comm)


def ddp_model(seed, **kwargs):
    # Small buckets: several in the first iteration; DDP's rebuild then merges them (its
    # first bucket may hold 1 MB), so the hook retires handles on the way.
    return DDP(mlp(seed), broadcast_buffers=False, bucket_cap_mb=0.001, **kwargs)


def test_ddp_hook_in_sync_mode_matches_ddps_own_allreduce(comm, process_group):
    reference, partial = ddp_model(1), ddp_model(1)
    hook = PartialAllreduceHook(comm, mode="sync")
    partial.register_comm_hook(hook, PartialAllreduceHook.hook)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (reference, partial)]
    torch.manual_seed(300 + comm.rank)
    for _ in range(5):
        x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
        for model, opt in zip((reference, partial), optimizers):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    for a, b in zip(reference.parameters(), partial.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert hook.last_info and all(i.fresh == comm.size for i in hook.last_info.values())
    hook.close()


def test_ddp_hook_in_solo_mode_keeps_replicas_identical(comm, process_group):
    model = ddp_model(2)
    hook = PartialAllreduceHook(comm, mode="solo")
    model.register_comm_hook(hook, PartialAllreduceHook.hook)
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(400 + comm.rank)
    for step in range(40):
        time.sleep(0.002 if step % comm.size == comm.rank else 0)
        x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
        sgd.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        sgd.step()
    sgd.zero_grad()
    hook.flush()
    sgd.step()
    hook.close()
    assert same_everywhere(comm, state_digest(model.module))


class FakeBucket:
    """What DDP hands a hook (dist.GradBucket), for layouts chosen by the test."""

    def __init__(self, index, params, last):
        self._index, self._params, self._last = index, params, last
        self._buffer = torch.cat([p.grad.reshape(-1) for p in params])
        self._views, offset = [], 0
        for p in params:
            self._views.append(self._buffer[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    def buffer(self): return self._buffer
    def index(self): return self._index
    def parameters(self): return self._params
    def gradients(self): return self._views
    def is_last(self): return self._last


def test_ddp_hook_rebuilt_buckets_lose_nothing(comm):
    P = comm.size
    a = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    hook = PartialAllreduceHook(comm, mode="solo")
    applied = {id(a): torch.zeros(3, dtype=torch.float64), id(b): torch.zeros(2, dtype=torch.float64)}
    iterations = 6
    for it in range(iterations):
        time.sleep(0.002 if it % P == comm.rank else 0)
        a.grad = torch.full((3,), comm.rank + 1.0, dtype=torch.float64)
        b.grad = torch.full((2,), comm.rank + 1.0, dtype=torch.float64)
        # First iteration: one bucket; then DDP's rebuild gives two, in the other order.
        layout = [[a, b]] if it == 0 else [[b], [a]]
        for index, params in enumerate(layout):
            bucket = FakeBucket(index, params, index == len(layout) - 1)
            result = PartialAllreduceHook.hook(hook, bucket).wait()
            for p, view in zip(params, result.split([p.numel() for p in params])):
                applied[id(p)] += view
    a.grad, b.grad = None, None
    hook.flush()
    hook.close()
    # Each rank sent rank+1 per element per iteration: on average (P+1)/2, all applied
    # (up to the rounding of the divisions by P).
    for p in (a, b):
        total = applied[id(p)] + (p.grad if p.grad is not None else 0)
        assert torch.allclose(total, torch.full_like(total, iterations * (P + 1) / 2), rtol=1e-12)
