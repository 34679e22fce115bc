"""PyTorch on pcoll: a distributed optimizer over one partial allreduce of all gradients,
identical replicas at the start, torch.distributed's rendezvous from pcoll's bootstrap,
and a DDP communication hook.

    comm = pcoll.init()
    broadcast_parameters(model, comm)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, comm, mode="solo")
    for x, y in batches:
        opt.zero_grad(); loss_fn(model(x), y).backward(); info = opt.step()
    opt.flush()

CPU tensors only (pcoll reduces host memory).
"""

import datetime
import math
import operator
import socket
import struct
import zlib

import numpy as np
import torch
import torch.distributed

from . import DTYPES, InvalidArgument, InvalidState, Bootstrap, Mismatch

__all__ = ["DistributedOptimizer", "broadcast_parameters", "init_process_group", "PartialAllreduceHook"]

def _dtype_name(dtype, what):
    """pcoll's name of a torch dtype: torch.float32 is "float32" (the C API's names)."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InvalidArgument(f"{what} has dtype {dtype}, which pcoll cannot reduce "
                              f"(it reduces {', '.join('torch.' + d for d in DTYPES)})")
    return name


# What a partial round's stale share s does to the update (docs/python.md, "Staleness").
# s is the share of the round's gradients that are one step late: the carries of the
# ranks that were late in the round before. Stale gradient acts as extra momentum, and
# with SGD momentum 0.9 it leaves far less room for the learning rate than a synchronous
# round (docs/python.md derives it), so a partial round lowers momentum where the update
# shows that it overshoots:
#   opposed: where the round's gradient opposes the momentum buffer (their product is
#     negative: that coordinate is overshooting), the momentum of that coordinate is
#     lowered to mu (1 - min(1, 2 s)) for this step; elsewhere it stays mu. SGD and its
#     variants with a momentum buffer (dampening, nesterov, weight decay) only.
#   momentum: every param group's momentum (SGD's momentum, Adam's beta1) is lowered to
#     mu (1 - s) for this step: simpler, and also for Adam, but it cuts the step where
#     nothing overshoots, which slows a network that was not near the edge.
#   curvature: opposed, in each tensor only as far as its measured curvature h brings it
#     near the edge where the stale share makes it unstable (lr s h near 1 - mu); nothing
#     inside a quiet band far from it (_curvature_gate).
#   none: nothing; the wrapped optimizer sees the round's average as it is.
#   auto: curvature.
STALENESS = ("auto", "none", "opposed", "momentum", "curvature")
_STALENESS_AUTO = "curvature"
_OPPOSED_GAIN = 2.0  # the stale share at which an opposed coordinate loses all its momentum: 1/2


def _agree_on_staleness(comm, staleness, what):
    """Collective: the rule every rank passed. A value that is not a rule raises
    InvalidArgument on its rank and Mismatch on the others, as do different rules: every
    rank raises, none waits."""
    valid = staleness in STALENESS if isinstance(staleness, str) else False
    code = STALENESS.index(staleness) + 1 if valid else 0
    same = True
    if comm.size > 1:
        vector = torch.tensor([code, -code], dtype=torch.int64)
        with comm.allreduce(2, dtype="int64", op="max", mode="sync") as ar:
            ar.run(vector, vector)
        same = int(vector[0]) == -int(vector[1])
    if not valid:
        raise InvalidArgument(f"{what}: staleness={staleness!r} is not one of {', '.join(map(repr, STALENESS))}")
    if not same:
        raise Mismatch(f"{what}: the ranks passed different staleness rules (this rank {staleness!r}); "
                       "every rank must pass the same one")
    return _STALENESS_AUTO if staleness == "auto" else staleness


class _StaleShare:
    """The share of a round's contributions that are one step late, from the rounds' info
    alone (equal on every rank): a rank that was not fresh in round t - 1 contributes its
    gradient of that step to round t, with the fresh ranks' gradients of this one."""

    def __init__(self, size):
        self.size = size
        self.late_before = 0   # ranks not fresh in the previous round: their carry is in this one

    def next(self, info):
        stale = self.late_before
        total = stale + info.fresh
        self.late_before = self.size - info.fresh
        return stale / total if total else 0.0


def _momentum_of(group):
    if "momentum" in group:
        return group["momentum"], lambda g, m: g.__setitem__("momentum", m)
    if "betas" in group:
        return group["betas"][0], lambda g, m: g.__setitem__("betas", (m, g["betas"][1]))
    return None, None


def _step_with_lower_momentum(optimizer, share):
    """optimizer.step() with every group's momentum mu at mu (1 - share), then restored."""
    saved = []
    for group in optimizer.param_groups:
        mu, put = _momentum_of(group)
        if mu:
            saved.append((group, mu, put))
            put(group, mu * (1.0 - share))
    try:
        optimizer.step()
    finally:
        for group, mu, put in saved:
            put(group, mu)


_CHUNK = 1 << 16  # elements per pass of the opposed rule: its scratch stays in cache


def _lower_opposed_momentum(optimizer, share, scratch=None, gate=None):
    """Before optimizer.step(): where a gradient opposes its momentum buffer b, subtracts
    mu k b / (1 - dampening) from it (k = min(1, 2 share), times gate(p, group) where a
    gate is given), so that the buffer's update b <- mu b + (1 - dampening) g becomes
    mu (1 - k) b + (1 - dampening) g there. Elementwise only, so the same on every rank
    whatever the thread count; in place, in chunks through `scratch` (a dict of per-dtype
    buffers kept between calls)."""
    k = min(1.0, _OPPOSED_GAIN * share)
    scratch = {} if scratch is None else scratch
    for group in optimizer.param_groups:
        mu = group.get("momentum", 0.0)
        dampening = group.get("dampening", 0.0)
        if not mu or dampening >= 1.0:
            continue
        alpha = mu * k / (1.0 - dampening)
        for p in group["params"]:
            buffer = optimizer.state.get(p, {}).get("momentum_buffer")
            grad = p.grad
            if buffer is None or grad is None or grad.is_sparse or not grad.is_contiguous():
                continue
            factor = gate(p, group) if gate is not None else 1.0
            if factor <= 0.0:
                continue
            room = scratch.get(grad.dtype)
            if room is None:
                room = scratch[grad.dtype] = torch.empty(_CHUNK, dtype=grad.dtype)
            g, b = grad.view(-1), buffer.view(-1)
            for start in range(0, g.numel(), _CHUNK):
                gs, bs = g[start:start + _CHUNK], b[start:start + _CHUNK]
                opposed = room[:gs.numel()]
                torch.mul(gs, bs, out=opposed)
                opposed.lt_(0)  # 1 where the gradient opposes the momentum, else 0
                gs.addcmul_(bs, opposed, value=-alpha * factor)


_CURVATURE_SAMPLE = 1024  # coordinates per parameter tensor the curvature rule measures, at most
_CURVATURE_MEMORY = 0.9   # decay of its running sums: about ten steps
# The gate, in fractions of the way to the unstable edge (lr s h = 1 - mu): shut below
# _CURVATURE_QUIET (where a network trained well inside its stable range, such as the digits
# MLP at lr 0.02, keeps nearly all its tensors), fully open from _CURVATURE_FULL on
# (where most of MobileNetV2's and ResNet-18's weights sit at lr 0.05), linear between.
_CURVATURE_QUIET = 0.1
_CURVATURE_FULL = 0.25


def _segment_sums(products, ends):
    """Sums of consecutive segments of a float64 vector (segment i ends before ends[i]), the
    same on every rank whatever the thread count or summation order: the products are
    scaled by one power of two (from the largest magnitude, an exact reduction) and
    truncated to int64, whose running sum is exact; a segment's sum is the difference of two
    running sums. Products below 2^-42 or so of the largest count as 0."""
    products = torch.nan_to_num(products, nan=0.0, posinf=0.0, neginf=0.0)
    largest = float(products.abs().max()) if products.numel() else 0.0
    if largest == 0.0:
        return torch.zeros(len(ends), dtype=torch.float64)
    # |scaled| < 2^(62 - log2(n + 1)): the running sum never overflows int64.
    exponent = 62 - math.ceil(math.log2(products.numel() + 1)) - math.frexp(largest)[1]
    running = torch.ldexp(products, torch.tensor(float(exponent), dtype=torch.float64)).to(torch.int64).cumsum(0)
    at_ends = running[ends - 1]
    sums = at_ends - torch.cat([torch.zeros(1, dtype=torch.int64), at_ends[:-1]])
    return torch.ldexp(sums.to(torch.float64), torch.tensor(float(-exponent), dtype=torch.float64))


class _StridedSample:
    """Fixed strided coordinates of a list of tensors (one slice of each), as one float64
    vector. The views are kept while the tensors stay where they lie (a view holds its
    storage, so an address that did not change is the same memory): a net of many small
    tensors pays the slicing once, not every step."""

    def __init__(self, slices):
        self.slices = slices
        self._kept = {}   # which -> (where the tensors lay, their sampled views)

    def __call__(self, tensors, which):
        where = [(t.data_ptr(), t.numel()) if t.is_contiguous() else None for t in tensors]
        kept = self._kept.get(which)
        if kept is not None and kept[0] == where:
            views = kept[1]
        else:
            views = [t.detach().reshape(-1)[cut] for t, cut in zip(tensors, self.slices)]
            if None not in where:
                self._kept[which] = (where, views)
        return torch.cat(views).to(torch.float64) if views else torch.zeros(0, dtype=torch.float64)


class _Curvature:
    """Each parameter tensor's curvature along its recent steps, from the rounds' averaged
    gradients: a secant estimate on a fixed sample of the tensor's coordinates.

    With a share s of round t's gradient taken at w_{t-1}, r_t - r_{t-1} is about
    H ((1 - s) d_t + s d_{t-1}) (d_t = w_t - w_{t-1}) plus minibatch noise. The noise of
    r_t and r_{t-1} is independent of d_{t-1} (SGD built w_{t-1} before either), so
    <r_t - r_{t-1}, d_{t-1}> / <(1 - s) d_t + s d_{t-1}, d_{t-1}>, each a running sum,
    estimates the curvature h along the direction the tensor has been moving in: without
    the noise's bias, and dominated by a direction that grows, the one to damp. Every
    tensor's sample lives in one vector, so a step costs a few passes over it."""

    def __init__(self, params):
        self.params = params
        self.strides = [-(-p.numel() // _CURVATURE_SAMPLE) or 1 for p in params]
        sizes = [-(-p.numel() // stride) for p, stride in zip(params, self.strides)]
        self.ends = torch.cumsum(torch.tensor(sizes), 0)   # where each tensor's sample ends
        self.w = self.d = self.r = None
        self.num = torch.zeros(len(params), dtype=torch.float64)
        self.den = torch.zeros(len(params), dtype=torch.float64)
        self._sample = _StridedSample([slice(None, None, stride) for stride in self.strides])

    def update(self, share, grads=None):
        """Takes this step's parameters and averaged gradients (the parameters' .grad unless
        given); returns each tensor's h (0 while there is not enough history, or where the
        sums give no positive one)."""
        grads = [p.grad for p in self.params] if grads is None else grads
        w, r = self._sample(self.params, "params"), self._sample(grads, "grads")
        d = w - self.w if self.w is not None else None
        if d is not None and self.d is not None:
            self.num.mul_(_CURVATURE_MEMORY).add_(_segment_sums((r - self.r) * self.d, self.ends))
            self.den.mul_(_CURVATURE_MEMORY).add_(_segment_sums((d * (1.0 - share) + self.d * share) * self.d, self.ends))
        self.w, self.d, self.r = w, d, r
        h = self.num / self.den
        return torch.where((self.num > 0) & (self.den > 0) & torch.isfinite(h), h, torch.zeros_like(h))


def _curvature_gate(mu, lr, share, h):
    """How much of the opposed rule a tensor of curvature h gets: a stale share s adds
    about lr s h to its momentum, which stays stable while that is below 1 - mu
    (docs/python.md, "Staleness"). The gate is 0 while lr s h / (1 - mu) is below
    _CURVATURE_QUIET, 1 from _CURVATURE_FULL, linear between."""
    if not (h > 0.0 and mu < 1.0):
        return 0.0
    edge = lr * share * h / (1.0 - mu)
    return min(1.0, max(0.0, (edge - _CURVATURE_QUIET) / (_CURVATURE_FULL - _CURVATURE_QUIET)))


def _lower_momentum_by_curvature(optimizer, share, curvature, scratch):
    """Before optimizer.step(): the opposed rule (_lower_opposed_momentum), in each tensor
    only as far as its measured curvature (_Curvature) brings it near the edge where the
    stale share makes it unstable (_curvature_gate); tensors that move where the loss is
    flat keep their momentum. The curvature is updated every step, stale or not, so that
    it is known when a stale round comes."""
    h = dict(zip(map(id, curvature.params), curvature.update(share).tolist()))
    if share > 0:
        _lower_opposed_momentum(optimizer, share, scratch, gate=lambda p, group: _curvature_gate(
            group["momentum"], group.get("lr", 0.0), share, h.get(id(p), 0.0)))

def _unique(tensors):
    seen, out = set(), []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


class DistributedOptimizer:
    """Wraps a torch optimizer: step() averages all gradients in one partial allreduce round,
    then steps the wrapped optimizer.

    The gradients live in one flat buffer (each parameter's .grad is a view into it), so one
    round per step carries every layer and every layer has the same staleness. The round's
    op is avg, a division by the world size, not by the number of fresh ranks: with carry a
    late gradient arrives in the next round, and every gradient enters the optimizer exactly
    once, with weight 1/P.

    staleness (default "auto", the same on every rank or Mismatch everywhere) is what the
    optimizer does with a partial round, after the round: with "none" it steps on the
    round's average as it is. With "opposed", where a coordinate's averaged gradient
    opposes its momentum buffer (that coordinate overshoots) the momentum of that
    coordinate is lowered to mu (1 - min(1, 2 s)) for the step, s being the share of the
    round's gradients that are one step late (.last_stale_share); every gradient still
    enters the momentum buffer once with weight 1/P, but the momentum it builds up in an
    overshooting coordinate decays faster. "auto" is "curvature": "opposed" in each
    parameter tensor only as far as its measured curvature h brings lr s h near the
    1 - mu at which the stale share makes its momentum unstable (nothing where lr s h is
    below a tenth of 1 - mu, all of it from a quarter), so a network trained well inside
    its stable range keeps its momentum. "momentum" lowers every group's momentum to
    mu (1 - s) for the step. Nothing changes in sync mode, with late="drop" (nothing is
    stale) or in a round with nothing stale. Every rank applies the same round results and
    the same elementwise correction, so replicas that start identical
    (broadcast_parameters) stay bitwise identical.
    """

    def __init__(self, optimizer, module, comm, mode="solo", max_lag=1, sync_every=0, seed=0, late="carry",
                 timeout_ms=None, quorum=0, grace_us=0, staleness="auto"):
        self.optimizer = optimizer
        self.comm = comm
        params = _unique(p for p in module.parameters() if p.requires_grad)
        if not params:
            raise InvalidArgument("DistributedOptimizer: the module has no parameter that requires a gradient")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1:
            raise InvalidArgument("DistributedOptimizer: the parameters have several dtypes "
                                  f"({', '.join(sorted(map(str, dtypes)))}); one flat gradient needs one")
        dtype = params[0].dtype
        name = _dtype_name(dtype, "DistributedOptimizer: the parameters")
        self.staleness = _agree_on_staleness(comm, staleness, "DistributedOptimizer")
        for p in params:
            if p.device.type != "cpu":
                raise InvalidArgument(f"DistributedOptimizer: a parameter is on {p.device}; pcoll reduces host memory")
        total = sum(p.numel() for p in params)
        self._flat = torch.zeros(total, dtype=dtype)
        # (parameter, offset, numel). The views themselves are not kept here: autograd adds
        # into a .grad in place only while nothing else holds a reference to it.
        self._slots = []
        offset = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                view = self._flat[offset:offset + n].view_as(p)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view
                self._slots.append((p, offset, n))
                offset += n
        self._element_bytes = self._flat.element_size()
        self._base = self._flat.data_ptr()
        self._allreduce = comm.allreduce(total, dtype=name, op="avg", mode=mode, max_lag=max_lag,
                                         sync_every=sync_every, seed=seed, late=late, timeout_ms=timeout_ms,
                                         quorum=quorum, grace_us=grace_us)
        # Nothing is ever stale in sync mode, nor with late="drop" (late gradients are gone).
        self._stale = _StaleShare(comm.size) if mode != "sync" and late != "drop" else None
        self._scratch = {}
        self._curvature = _Curvature(params) if self.staleness == "curvature" else None
        self.last_info = None
        self.last_stale_share = 0.0
        self.steps = 0
        self.fresh_total = 0   # sum of info.fresh over steps
        self.late_steps = 0    # steps in which this rank's gradient was carried

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    @property
    def fresh_fraction(self):
        """Fresh contributions / (steps * P) so far: 1.0 is a synchronous run."""
        return self.fresh_total / (self.steps * self.comm.size) if self.steps else 1.0

    def zero_grad(self, set_to_none=False):
        """Zeroes the flat gradient. The .grad views stay (set_to_none is ignored for that)."""
        del set_to_none
        self._flat.zero_()

    def _collect(self):
        # Puts back any .grad that is not the flat buffer's view (zero_grad(set_to_none=True)
        # on the wrapped optimizer, or a user assignment): its values move into the buffer.
        for p, offset, n in self._slots:
            grad = p.grad
            if grad is not None and grad.data_ptr() == self._base + offset * self._element_bytes:
                continue
            view = self._flat[offset:offset + n].view_as(p)
            with torch.no_grad():
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
            p.grad = view

    def step(self, closure=None):
        """One round over all gradients (averaged in place), then the wrapped optimizer's step.
        Returns the round's pcoll.RoundInfo (also kept in .last_info)."""
        if closure is not None:
            raise InvalidArgument("DistributedOptimizer.step: closures are not supported (one round per step)")
        self._collect()
        info = self._allreduce.run(self._flat, self._flat)
        self.last_info = info
        self.steps += 1
        self.fresh_total += info.fresh
        self.late_steps += info.caller_late
        share = self._stale.next(info) if self._stale is not None else 0.0
        self.last_stale_share = share
        if self.staleness == "momentum" and share > 0:
            _step_with_lower_momentum(self.optimizer, share)
            return info
        if self.staleness == "opposed" and share > 0:
            _lower_opposed_momentum(self.optimizer, share, self._scratch)
        if self.staleness == "curvature" and self._stale is not None:
            _lower_momentum_by_curvature(self.optimizer, share, self._curvature, self._scratch)
        self.optimizer.step()
        return info

    def flush(self):
        """At the end of training: a synchronous round of every carried gradient, applied with
        one more step of the wrapped optimizer (skipped when nothing was carried: the result
        is all zeros on every rank alike). Returns the flush round's info."""
        self._collect()
        info = self._allreduce.flush(self._flat)
        if bool(torch.count_nonzero(self._flat)):
            self.optimizer.step()
        self._flat.zero_()
        return info

    def close(self):
        """Collective: destroys the allreduce handle."""
        self._allreduce.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.close()
        return False


def _module_tensors(module):
    return _unique(list(module.parameters()) + list(module.buffers()))


def broadcast_parameters(module, comm, root=0):
    """Collective: copies rank `root`'s parameters and buffers to every rank, bit for bit.

    A synchronous int64 sum over the tensors' bytes in which the other ranks add zeros (an
    integer sum, so -0.0 and NaN payloads survive). `root` must be the same on every rank;
    each rank also contributes root + 1 in a slot of its own, so a disagreement is an error
    on every rank.
    """
    tensors = [t for t in _module_tensors(module)]
    for t in tensors:
        if t.device.type != "cpu":
            raise InvalidArgument(f"broadcast_parameters: a tensor is on {t.device}; pcoll reduces host memory")
    layout, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        layout.append((t, offset, nbytes))
        offset += (nbytes + 7) // 8 * 8  # 8-byte aligned, so each slice can be viewed as its dtype
    words = offset // 8
    size = comm.size
    flat = torch.zeros(words + size, dtype=torch.int64)
    raw = flat.view(torch.uint8)
    mine = comm.rank == root
    if mine:
        for t, start, nbytes in layout:
            raw[start:start + nbytes].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
    try:
        root_number = operator.index(root)
    except TypeError:
        root_number = -1
    flat[words + comm.rank] = root_number + 1 if 0 <= root_number < size else 0
    with comm.allreduce(words + size, dtype="int64", op="sum", mode="sync") as ar:
        ar.run(flat, flat)
    roots = flat[words:].tolist()
    if any(r != roots[0] for r in roots) or not 1 <= roots[0] <= size:
        raise InvalidArgument(f"broadcast_parameters: the ranks passed root = {[r - 1 for r in roots]}; "
                              f"every rank must pass the same root, between 0 and {size - 1}")
    if not mine:
        with torch.no_grad():
            for t, start, nbytes in layout:
                t.copy_(raw[start:start + nbytes].view(t.dtype).view(t.shape))


def _ipv4_of_this_host():
    """This host's IPv4 address as others may reach it, or None."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
    return None if address.startswith("127.") else address


def init_process_group(comm, backend="gloo", timeout=datetime.timedelta(minutes=5)):
    """Collective: torch.distributed.init_process_group with pcoll's ranks, no MASTER_ADDR.

    Rank 0 starts a torch TCPStore on a free port; its address reaches the others in one
    pcoll allreduce (int64 max: every rank's host name hash, and rank 0's IPv4 and port).
    When all ranks run on one host they connect to 127.0.0.1.
    """
    if torch.distributed.is_initialized():
        raise InvalidState("init_process_group: torch.distributed is already initialized")
    rank, size = comm.rank, comm.size
    if size == 1:
        store = torch.distributed.HashStore()
    else:
        store = None
        address, port = -1, -1
        if rank == 0:
            store = torch.distributed.TCPStore("0.0.0.0", 0, size, True, timeout=timeout, wait_for_workers=False)
            port = store.port
            ipv4 = _ipv4_of_this_host()
            if ipv4 is not None:
                address = struct.unpack("!I", socket.inet_aton(ipv4))[0]
        host = zlib.crc32(socket.gethostname().encode())
        vector = torch.tensor([host, -host, address, port], dtype=torch.int64)
        with comm.allreduce(4, dtype="int64", op="max", mode="sync") as ar:
            ar.run(vector, vector)
        one_host = int(vector[0]) == -int(vector[1])
        address, port = int(vector[2]), int(vector[3])
        if one_host:
            host_address = "127.0.0.1"
        elif address >= 0:
            host_address = socket.inet_ntoa(struct.pack("!I", address))
        else:
            raise Bootstrap("init_process_group: the ranks run on several hosts and rank 0's host name does not "
                            "resolve to an address the others can reach; fix its entry in /etc/hosts or DNS")
        if rank != 0:
            store = torch.distributed.TCPStore(host_address, port, size, False, timeout=timeout)
    torch.distributed.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=timeout)


_SAMPLE = 1024  # coordinates of a bucket the hook fits the optimizer's step on


def _exact_dot(a, b):
    """sum(a * b) of float64 numpy vectors, correctly rounded: the same on every rank
    whatever the thread count or summation order."""
    return math.fsum((a * b).tolist())


class _HookMomentum:
    """What a comm hook needs to apply a staleness rule to one bucket without seeing the
    optimizer: the optimizer's momentum, read off the parameters from step to step.

    Under SGD with momentum (w <- w - lr v, v <- mu v + g + wd w) the parameters' step
    d_t = w_t - w_{t-1} is -lr v_{t-1}, and d_{t+1} = mu d_t - lr g_t - lr wd w_t exactly
    (up to rounding) in every coordinate. A least-squares fit of (mu, lr, lr wd) on a fixed
    sample of coordinates, in float64 with correctly rounded sums, gives mu / lr, the same
    on every rank; then mu v_{t-1} = -(mu / lr) d_t, and lowering the momentum of a
    coordinate by a factor k is adding k (mu / lr) d_t to its gradient. Where the fit does
    not hold (another optimizer, a changed learning rate, the first steps) nothing is
    corrected that step."""

    def __init__(self, slots, numel, dtype, rule):
        self.slots = slots
        self.curvature = _Curvature([p for p, _, _ in slots]) if rule == "curvature" else None
        self.previous = torch.empty(numel, dtype=dtype)   # the parameters at the last step
        self.have_previous = False
        stride = max(1, numel // _SAMPLE)
        cuts = []   # per slot: the sampled offsets inside that parameter
        for p, offset, n in slots:
            first = -(-offset // stride) * stride
            cuts.append(slice(min(first - offset, n), n, stride))  # none in a short one
        self._strided = _StridedSample(cuts)
        self.w = None      # sample of the parameters at the last step
        self.step = None   # sample of the step that led there (d_t)
        self.grad = None   # sample of the gradient the hook returned then
        self.scratch = torch.empty(_CHUNK, dtype=dtype)

    def _sample(self, tensors, which):
        return self._strided(tensors, which).numpy()

    def _fit(self, step):
        """(mu, lr) from d_t = mu d_{t-1} - lr g_{t-1} - lr wd w_{t-1}, or None."""
        if self.step is None or len(step) < 8:
            return None
        columns = (self.step, -self.grad, -self.w)
        a = np.array([[_exact_dot(x, y) for y in columns] for x in columns])
        b = np.array([_exact_dot(x, step) for x in columns])
        try:
            mu, lr, lr_wd = np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            return None
        scale = _exact_dot(step, step)
        if not (0.0 < mu < 1.0 and lr > 0.0 and scale > 0.0):
            return None
        residual = step - (mu * self.step - lr * self.grad - lr_wd * self.w)
        if _exact_dot(residual, residual) > 1e-6 * scale:
            return None  # not SGD with momentum, or its learning rate changed
        return mu, lr

    def correct(self, buffer, share, rule):
        """Applies `rule` to the bucket's averaged gradient (in `buffer`): "opposed" adds
        k (mu / lr) d_t where the gradient opposes the momentum, "momentum" everywhere, and
        "curvature" does as "opposed" with k times each tensor's _curvature_gate. Returns
        whether the optimizer's momentum could be read this step (whether a stale round is
        corrected)."""
        params = [p.detach() for p, _, _ in self.slots]
        grads = [buffer[offset:offset + n] for _, offset, n in self.slots]
        h = self.curvature.update(share, grads).tolist() if self.curvature is not None else None
        w = self._sample(params, "params")
        step = w - self.w if self.w is not None else None
        fit = self._fit(step) if step is not None else None
        alphas = [0.0] * len(self.slots)
        if fit is not None and share > 0:
            mu, lr = fit
            k = share if rule == "momentum" else min(1.0, _OPPOSED_GAIN * share)
            gates = [_curvature_gate(mu, lr, share, h_t) for h_t in h] if h is not None else [1.0] * len(self.slots)
            alphas = [k * gate * mu / lr for gate in gates]
        for p, (_, offset, n), alpha in zip(params, self.slots, alphas):
            previous = self.previous[offset:offset + n]
            if alpha > 0:
                g, now = buffer[offset:offset + n], p.reshape(-1)
                for start in range(0, n, _CHUNK):
                    gs, ws, ps = g[start:start + _CHUNK], now[start:start + _CHUNK], previous[start:start + _CHUNK]
                    delta = ps.neg_().add_(ws)          # d_t, in the place of w_{t-1}
                    if rule in ("opposed", "curvature"):
                        mask = self.scratch[:gs.numel()]
                        torch.mul(gs, delta, out=mask)
                        mask.gt_(0)                     # g . d > 0: g opposes v = -d / lr
                        gs.addcmul_(delta, mask, value=alpha)
                    else:
                        gs.add_(delta, alpha=alpha)
            previous.copy_(p.reshape(-1))
        self.have_previous = True
        self.w, self.step = w, step
        self.grad = self._sample(grads, "grads")
        return fit is not None


class _Bucket:
    """One DDP bucket's persistent allreduce, with the layout it was made for."""

    def __init__(self, allreduce, key, slots, size=None, numel=0, dtype=None, rule="none"):
        self.allreduce = allreduce
        self.key = key        # (numel, dtype, parameter ids): what makes the handle reusable
        self.slots = slots    # [(parameter, offset, numel)] in the bucket's flat buffer
        self.stale = _StaleShare(size) if size is not None else None
        self.momentum = _HookMomentum(slots, numel, dtype, rule) if size is not None and rule != "none" else None


class PartialAllreduceHook:
    """DDP communication hook: each gradient bucket is averaged by a persistent pcoll
    allreduce of its own (keyed by bucket index), in the given mode.

        model = DDP(model, broadcast_buffers=False)
        hook = PartialAllreduceHook(comm, mode="solo")
        model.register_comm_hook(hook, PartialAllreduceHook.hook)

    The hook runs the round in the calling (autograd) thread and returns a completed
    torch.futures.Future. DDP rebuilds its buckets after the first iteration; a bucket whose
    layout changed gets a new handle, and the old one is flushed first: what it carried is
    added to those parameters' gradients when they next pass through a bucket, so no
    gradient is lost. Every rank sees buckets in the same order, so handle creation (a
    collective) lines up.

    .last_info maps bucket index to that bucket's latest RoundInfo. At the end of training,
    flush() adds every carried gradient to the parameters' .grad (zero them before, step
    after).

    staleness (default "auto", agreed across ranks like DistributedOptimizer's) applies the
    optimizer's rule per bucket, from what a hook sees: the bucket's stale share from its
    rounds' info, and the optimizer's momentum read off the bucket's parameters from step to
    step (an exact fit of SGD with momentum and weight decay; _HookMomentum). Where that fit
    holds, lowering a coordinate's momentum by a factor k is adding k (mu / lr) d to its
    gradient, d being the parameters' last step; elsewhere (another optimizer, a learning
    rate that just changed, the first two steps) the bucket's gradient is left as it is that
    step, and .momentum_known[index] says which. It keeps a copy of the bucket's parameters
    (one more vector per bucket).
    """

    def __init__(self, comm, mode="solo", max_lag=1, sync_every=0, seed=0, late="carry", timeout_ms=None,
                 quorum=0, grace_us=0, staleness="auto"):
        self.comm = comm
        self._options = dict(mode=mode, max_lag=max_lag, sync_every=sync_every, seed=seed, late=late,
                             timeout_ms=timeout_ms, quorum=quorum, grace_us=grace_us)
        self.staleness = _agree_on_staleness(comm, staleness, "PartialAllreduceHook")
        self._partial = mode != "sync" and late != "drop"   # can a round hold stale gradient?
        self.last_stale_share = {}   # bucket index -> the stale share of its latest round
        self.momentum_known = {}     # bucket index -> whether the optimizer's momentum could be read
        self._buckets = {}
        self._carried = {}   # id(parameter) -> (parameter, averaged gradient a retired handle carried)
        self.last_info = {}

    @staticmethod
    def hook(state, bucket):
        return state._reduce(bucket)

    def _layout(self, bucket, buffer):
        base, size = buffer.data_ptr(), buffer.element_size()
        slots = [(p, (g.data_ptr() - base) // size, g.numel()) for p, g in zip(bucket.parameters(), bucket.gradients())]
        key = (buffer.numel(), buffer.dtype, tuple(id(p) for p, _, _ in slots))
        return key, slots

    def _retire(self, index):
        old = self._buckets.pop(index)
        flat = torch.zeros(old.key[0], dtype=old.key[1])
        old.allreduce.flush(flat)
        old.allreduce.close()
        for p, offset, n in old.slots:
            piece = flat[offset:offset + n]
            if bool(torch.count_nonzero(piece)):
                self._carried[id(p)] = (p, piece.clone())

    def _reduce(self, bucket):
        buffer = bucket.buffer()
        index = bucket.index()
        key, slots = self._layout(bucket, buffer)
        current = self._buckets.get(index)
        if current is not None and current.key != key:
            self._retire(index)
            current = None
        if current is None:
            name = _dtype_name(buffer.dtype, "PartialAllreduceHook: a gradient bucket")
            allreduce = self.comm.allreduce(buffer.numel(), dtype=name, op="avg", **self._options)
            current = self._buckets[index] = _Bucket(allreduce, key, slots, self.comm.size if self._partial else None,
                                                     buffer.numel(), buffer.dtype, self.staleness)
        info = current.allreduce.run(buffer, buffer)
        self.last_info[index] = info
        share = current.stale.next(info) if current.stale is not None else 0.0
        self.last_stale_share[index] = share
        if current.momentum is not None:
            with torch.no_grad():
                self.momentum_known[index] = current.momentum.correct(buffer, share, self.staleness)
        if self._carried:
            for p, offset, n in current.slots:
                entry = self._carried.pop(id(p), None)
                if entry is not None:
                    buffer[offset:offset + n].add_(entry[1])
        if bucket.is_last():
            # Fewer buckets after a rebuild: the handles of the vanished ones are retired too.
            for stale in [i for i in self._buckets if i > index]:
                self._retire(stale)
        future = torch.futures.Future()
        future.set_result(buffer)
        return future

    def flush(self):
        """Collective: adds what every bucket's handle (and a retired one) still carries to
        the parameters' .grad."""
        for index in sorted(self._buckets):
            self._retire(index)
        with torch.no_grad():
            for p, piece in self._carried.values():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.add_(piece.view_as(p))
        self._carried.clear()

    def close(self):
        """Collective: destroys the bucket handles (without applying what they carry)."""
        for index in sorted(self._buckets):
            self._buckets.pop(index).allreduce.close()
