"""train_imbalance: eager-SGD's claim measured on a real training job. P ranks train one
network on the digits data under the imbalance models of pcoll_imbalance, once per mode, and
report how soon each mode reaches a target test accuracy:

    build/tools/pcollrun -n 4 /usr/bin/python3 perf/train_imbalance.py --model paper --seeds 1,2,3
    build/tools/pcollrun -n 4 /usr/bin/python3 perf/train_imbalance.py --net resnet18 --via hook
    (PYTHONPATH=build/python, or pcoll installed for /usr/bin/python3)

Data: sklearn's digits (1797 8x8 images, 10 classes), split 80/20 by the seed, standardised
with the training split's statistics; the training split is sharded by rank. Each step a
rank draws a batch from its shard, and runs forward and backward on one thread (real
compute, not a sleep).

Networks (--net): mlp (default; 64-H-H-10, sized so that a step takes 10-20 ms here) and
torchvision's ResNet-18 and MobileNetV2, unmodified (10 classes, BatchNorm), on the digits
upsampled to 32x32 (bilinear) with the one channel repeated three times; nothing is
downloaded. The convolutional nets change the defaults to the setting where partial rounds
meet real training: batch 16, lr 0.05, --delay-at before-compute, D = 200 ms (ResNet-18) or
100 ms (MobileNetV2), 240 steps, accuracy every 20 steps, target 95%.

Paths (--via): optimizer (pcoll.torch.DistributedOptimizer, one round per step over all
gradients) or hook (torch DistributedDataParallel with pcoll.torch.PartialAllreduceHook,
one handle per bucket, buffers broadcast as DDP defaults).

Imbalance: the same models, draws and shared seed as pcoll_imbalance (perf/imbalance_model.cpp)
give every (step, rank) a step time T, with the compute C measured at the start (the slowest
rank's median, all ranks computing at once). A rank computes, and sleeps T - C on top when T
is longer, between its compute and its communication (--delay-at after-compute, the
default; under ddp a comm hook sleeps before the first bucket's allreduce). With
--delay-at before-compute the sleep comes first: where ranks share cores (more ranks than
cores), the others then compute on the cores the sleeper leaves, so a delayed sync step
takes about D + C/2 instead of the model's C + D, and sync pays only part of the delay.
Models: paper = two ranks drawn per step get C + D (D = --delay-factor x C, or
--delay-ms), lognormal (mean C), slowrank, trace:FILE (times x --trace-scale), none.

Modes: sync, solo, majority, quorum (pcoll, through --via; flushed at the end) and ddp
(torch DistributedDataParallel with its own gloo allreduce: what users run today). Every
mode starts from the same weights and sees the same batches and delays. The modes run one
after the other, in the given order for the first seed and rotated by one more for each
further seed (--order fixed keeps the given order), so that no mode always runs first or
last in its launch (steps of the same run differ by up to 40% from seed to seed here); each
JSON row says where its run came ("position").

Clock: from a barrier to the end of the last step (and the flush), slowest rank. Every
--eval-every steps rank 0 copies the weights (the copy is taken off its clock); they are
evaluated on the test split after the run, so evaluation never slows training. Replicas
are bitwise identical under pcoll (parameters; BatchNorm's running statistics are each
rank's own through the optimizer, and rank 0's broadcast at each forward through DDP), so
rank 0's copy is the model, evaluated in eval mode.

Reported per mode: wall time, ms per step, final test accuracy, time to the target accuracy
(default: sync's final accuracy minus 0.5 points), its speedup over sync, fresh fraction.
--json prints one object per (seed, mode) and, with several seeds, a median row per mode;
--plot FILE draws accuracy against wall time.
"""

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

import pcoll
import pcoll.torch as pt

MODES = ("sync", "solo", "majority", "quorum", "ddp")
NETS = ("mlp", "resnet18", "mobilenetv2")
# The setting of the convolutional nets: (batch, lr, delay_ms, steps, eval_every, target).
CONV_DEFAULTS = {"resnet18": (16, 0.05, 200.0, 240, 20, 0.95), "mobilenetv2": (16, 0.05, 100.0, 240, 20, 0.95)}
USAGE_EXIT = 2


def usage_error(message):
    print(f"train_imbalance: {message}", file=sys.stderr)
    sys.exit(USAGE_EXIT)


# --- Imbalance models: a transcription of perf/imbalance_model.cpp -----------------------------

MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def draw(seed, step, stream):
    """Counter-based: (seed, step, stream) -> 64 bits, as lib/support/hash.hpp's hash3."""
    return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ stream)


def uniform01(bits):
    return ((bits >> 11) + 0.5) * 2.0 ** -53


def read_trace(path):
    """trace[step][rank] in ms from a CSV with the header step,rank,compute_ms."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        raise ValueError(f"trace file '{path}' cannot be read") from None
    if not lines or lines[0].replace(" ", "").strip() != "step,rank,compute_ms":
        raise ValueError(f"trace file '{path}': first line must be the header step,rank,compute_ms")
    cells = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            step, rank, ms = line.split(",")
            step, rank, ms = int(step), int(rank), float(ms)
            if step < 0 or rank < 0 or not ms >= 0 or math.isinf(ms):
                raise ValueError
        except ValueError:
            raise ValueError(f"trace file '{path}' line {number}: expected 'step,rank,compute_ms' with "
                             f"non-negative numbers, got '{line}'") from None
        if (step, rank) in cells:
            raise ValueError(f"trace file '{path}' line {number}: step {step} rank {rank} appears twice")
        cells[step, rank] = ms
    if not cells:
        raise ValueError(f"trace file '{path}' has a header but no rows")
    steps = max(s for s, _ in cells) + 1
    ranks = max(r for _, r in cells) + 1
    missing = [(s, r) for s in range(steps) for r in range(ranks) if (s, r) not in cells]
    if missing:
        raise ValueError(f"trace file '{path}' has no row for step {missing[0][0]} rank {missing[0][1]} "
                         f"(every step needs every rank)")
    return [[cells[s, r] for r in range(ranks)] for s in range(steps)]


def schedule(args, compute_ms, delay_ms, steps, ranks):
    """step_ms[step][rank]: how long each rank's step takes under the model."""
    ms = [[compute_ms] * ranks for _ in range(steps)]
    kind = args.model
    if kind == "paper":
        for s in range(steps):
            for stream in (1, 2):  # two draws; when they coincide one rank is delayed once
                ms[s][draw(args.seed_now, s, stream) % ranks] = compute_ms + delay_ms
    elif kind == "lognormal":
        mu = math.log(compute_ms) - args.sigma ** 2 / 2  # mean exp(mu + sigma^2/2) = C
        for s in range(steps):
            for r in range(ranks):
                u1 = uniform01(draw(args.seed_now, s, 2 * r + 10))
                u2 = uniform01(draw(args.seed_now, s, 2 * r + 11))
                z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
                ms[s][r] = math.exp(mu + args.sigma * z)
    elif kind == "slowrank":
        for s in range(steps):
            ms[s][args.slow_rank] = compute_ms * args.slow_factor
    elif kind == "trace":
        trace = args.trace
        for s in range(steps):
            ms[s] = [trace[s % len(trace)][r] * args.trace_scale for r in range(ranks)]
    return ms


def describe_model(args, compute_ms, delay_ms):
    c = f"C={compute_ms:.1f} ms measured"
    if args.model == "paper":
        return f"paper ({c}, two drawn ranks +D={delay_ms:.1f} ms per step)"
    if args.model == "lognormal":
        return f"lognormal (mean {c}, sigma {args.sigma:g})"
    if args.model == "slowrank":
        return f"slowrank ({c}, rank {args.slow_rank} x{args.slow_factor:g})"
    if args.model == "trace":
        return f"trace {args.trace_path} (x{args.trace_scale:g}; {c})"
    return f"none ({c} on every rank)"


# --- Data and model ---------------------------------------------------------------------------

def load_digits_split(seed, rank, size, net="mlp"):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    data = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2,
                                                        random_state=seed, stratify=data.target)
    scaler = StandardScaler().fit(x_train)

    def images(a):
        x = torch.tensor(scaler.transform(a), dtype=torch.float32)
        if net == "mlp":
            return x
        # 8x8 -> 32x32x3: what an ImageNet-style network takes, made from the digits alone.
        x = nn.functional.interpolate(x.view(-1, 1, 8, 8), size=(32, 32), mode="bilinear", align_corners=False)
        return x.repeat(1, 3, 1, 1).contiguous()

    return (images(x_train)[rank::size], torch.tensor(y_train)[rank::size], images(x_test), torch.tensor(y_test))


def make_model(args, seed):
    torch.manual_seed(seed)
    if args.net == "mlp":
        return nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                             nn.Linear(args.hidden, 10))
    import torchvision
    if args.net == "resnet18":
        return torchvision.models.resnet18(num_classes=10)
    return torchvision.models.mobilenet_v2(num_classes=10)


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return sum((model(x[i:i + 256]).argmax(1) == y[i:i + 256]).sum().item()
                   for i in range(0, len(x), 256)) / len(x)


class Batches:
    """The same sequence of batches for every mode: a generator reset per run."""

    def __init__(self, x, y, batch, seed, rank):
        self.x, self.y, self.batch = x, y, batch
        self.generator = torch.Generator().manual_seed(seed * 1000 + rank)

    def next(self):
        index = torch.randint(0, len(self.x), (self.batch,), generator=self.generator)
        return self.x[index], self.y[index]


def measure_compute_ms(comm, args, x, y):
    """The slowest rank's median step compute, all ranks computing at once as in training."""
    model = make_model(args, 0)
    batches = Batches(x, y, args.batch, 0, comm.rank)
    times = []
    comm.barrier()
    for _ in range(args.calibration_steps):
        bx, by = batches.next()
        start = time.perf_counter()
        model.zero_grad()
        nn.functional.cross_entropy(model(bx), by).backward()
        times.append((time.perf_counter() - start) * 1e3)
    return max_over_ranks(comm, [statistics.median(times)])[0]


def max_over_ranks(comm, values):
    vector = np.array(values, dtype=np.float64)
    with comm.allreduce(len(values), dtype="float64", op="max", mode="sync") as ar:
        ar.run(vector, vector)
    return vector.tolist()


def state_digest(module):
    """CRC of the parameters (BatchNorm's running statistics are each rank's own)."""
    import zlib
    h = 0
    for t in module.parameters():
        h = zlib.crc32(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes(), h)
    return h


def identical_everywhere(comm, value):
    vector = np.array([value, -value], dtype=np.int64)
    with comm.allreduce(2, dtype="int64", op="max", mode="sync") as ar:
        ar.run(vector, vector)
    return int(vector[0]) == -int(vector[1])


# --- One training run ---------------------------------------------------------------------------

def run_order(modes, index, order):
    """The order the modes train in for the index-th seed: as given ("fixed"), or rotated by
    the seed's index ("rotate", the default), so that over several seeds each mode runs
    early and late in its launch alike."""
    if order == "fixed" or not modes:
        return list(modes)
    shift = index % len(modes)
    return list(modes[shift:]) + list(modes[:shift])


def train(comm, args, mode, seed, data, sleep_ms):
    """Trains from scratch; returns the run's record (rank 0's is complete)."""
    x, y, x_test, y_test = data
    model = make_model(args, seed)
    batches = Batches(x, y, args.batch, seed, comm.rank)
    sgd_args = dict(lr=args.lr, momentum=args.momentum)
    after_compute = args.delay_at == "after-compute"
    pending_sleep = [0.0]  # seconds a comm hook sleeps before this step's first bucket
    pcoll_options = dict(mode=mode, max_lag=args.max_lag, seed=seed, quorum=args.quorum)
    hook = None
    through_ddp = mode == "ddp" or args.via == "hook"

    def sleep_first(reduce):
        # DDP communicates inside backward: the delay goes in front of the first bucket's
        # allreduce (the hook is otherwise unchanged).
        def delayed(state, bucket):
            if pending_sleep[0] > 0:
                time.sleep(pending_sleep[0])
                pending_sleep[0] = 0.0
            return reduce(state, bucket)
        return delayed

    if through_ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        trained = DDP(model)  # broadcasts rank 0's weights; buffers at every forward, as DDP defaults
        optimizer = torch.optim.SGD(trained.parameters(), **sgd_args)
        if mode == "ddp":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            if after_compute:
                trained.register_comm_hook(None, sleep_first(default_hooks.allreduce_hook))
        else:
            hook = pt.PartialAllreduceHook(comm, staleness=args.staleness, **pcoll_options)
            trained.register_comm_hook(hook, sleep_first(pt.PartialAllreduceHook.hook) if after_compute
                                       else pt.PartialAllreduceHook.hook)
    else:
        pt.broadcast_parameters(model, comm)
        trained = model
        optimizer = pt.DistributedOptimizer(torch.optim.SGD(model.parameters(), **sgd_args), model, comm,
                                            staleness=args.staleness, **pcoll_options)
    snapshots = []  # (step, seconds on rank 0's clock, weights)
    off_clock = 0.0
    fresh_total = 0.0  # through the hook: each step's fresh ranks, averaged over its buckets
    stale_total = 0.0  # each round's share of gradients one step late (through the hook: over buckets)
    corrected_total = 0.0  # through the hook: the share of buckets whose optimizer momentum it could read
    loss_fn = nn.functional.cross_entropy
    comm.barrier()
    start = time.perf_counter()
    for step in range(args.steps):
        if step % args.eval_every == 0 and comm.rank == 0:
            taken = time.perf_counter()
            snapshots.append((step, taken - start - off_clock, copy.deepcopy(model.state_dict())))
            off_clock += time.perf_counter() - taken
        delay = sleep_ms[step] * 1e-3
        if delay > 0 and not after_compute:
            time.sleep(delay)
        bx, by = batches.next()
        trained.train()
        optimizer.zero_grad()
        if through_ddp and after_compute:
            pending_sleep[0] = delay  # set every step: the hook clears it once slept
        loss_fn(trained(bx), by).backward()
        if delay > 0 and after_compute and not through_ddp:
            time.sleep(delay)
        optimizer.step()
        if hook is not None:
            fresh_total += statistics.fmean(info.fresh for info in hook.last_info.values())
            stale_total += statistics.fmean(hook.last_stale_share.values())
            corrected_total += statistics.fmean(hook.momentum_known.values()) if hook.momentum_known else 0.0
        elif mode != "ddp":
            stale_total += optimizer.last_stale_share
    if hook is not None:
        optimizer.zero_grad()
        hook.flush()
        if any(p.grad is not None and bool(torch.count_nonzero(p.grad)) for p in model.parameters()):
            optimizer.step()
    elif mode != "ddp":
        optimizer.flush()
    elapsed = time.perf_counter() - start - off_clock
    wall = max_over_ranks(comm, [elapsed])[0]
    if mode == "ddp":
        fresh_fraction = 1.0
    elif hook is not None:
        fresh_fraction = fresh_total / (args.steps * comm.size)
    else:
        fresh_fraction = optimizer.fresh_fraction
    record = {"mode": mode, "seed": seed, "steps": args.steps, "wall_s": wall,
              "ms_per_step": wall / args.steps * 1e3, "fresh_fraction": fresh_fraction,
              "stale_share": stale_total / args.steps,
              "hook_momentum_known": corrected_total / args.steps if hook is not None else None,
              "replicas_identical": identical_everywhere(comm, state_digest(model))}
    if hook is not None:
        hook.close()
    elif mode != "ddp":
        optimizer.close()
    if comm.rank == 0:
        snapshots.append((args.steps, wall, copy.deepcopy(model.state_dict())))
        curve = []
        probe = make_model(args, seed)
        for step, seconds, weights in snapshots:
            probe.load_state_dict(weights)
            curve.append((step, seconds, accuracy(probe, x_test, y_test)))
        record["curve"] = curve
        record["final_accuracy"] = curve[-1][2]
    return record


def time_to(curve, target):
    return next((seconds for _, seconds, acc in curve if acc >= target - 1e-9), None)


def steps_to(curve, target):
    return next((step for step, _, acc in curve if acc >= target - 1e-9), None)


# --- Reporting ---------------------------------------------------------------------------------

def report(comm, args, compute_ms, delay_ms, records_by_seed):
    rows = []
    for seed, records in records_by_seed:
        sync = next((r for r in records if r["mode"] == "sync"), None)
        target = args.target if args.target is not None else (
            sync["final_accuracy"] - args.target_margin if sync else None)
        sync_ttt = time_to(sync["curve"], target) if sync and target is not None else None
        for r in records:
            ttt = time_to(r["curve"], target) if target is not None else None
            rows.append({"tool": "train_imbalance", "P": comm.size, "provider": comm.provider,
                         "model": args.model_name, "net": args.net, "via": args.via, "lr": args.lr,
                         "momentum": args.momentum, "batch": args.batch, "staleness": args.staleness,
                         "delay_at": args.delay_at, "seed": seed, "mode": r["mode"],
                         "steps": r["steps"],
                         "compute_ms": round(compute_ms, 3), "delay_ms": round(delay_ms, 3),
                         "wall_s": round(r["wall_s"], 4), "ms_per_step": round(r["ms_per_step"], 3),
                         "final_accuracy": round(r["final_accuracy"], 5),
                         "target_accuracy": None if target is None else round(target, 5),
                         "time_to_target_s": None if ttt is None else round(ttt, 4),
                         "steps_to_target": steps_to(r["curve"], target) if target is not None else None,
                         "speedup_to_target": (round(sync_ttt / ttt, 4) if ttt and sync_ttt else None),
                         "fresh_fraction": round(r["fresh_fraction"], 4), "stale_share": round(r["stale_share"], 4),
                         "hook_momentum_known": r["hook_momentum_known"], "position": r["position"],
                         "replicas_identical": r["replicas_identical"], "curve": r["curve"]})
    summary = []
    if len(records_by_seed) > 1:
        for mode in args.modes:
            mine = [row for row in rows if row["mode"] == mode]
            med = lambda key: (statistics.median([row[key] for row in mine])
                               if all(row[key] is not None for row in mine) else None)
            summary.append({"tool": "train_imbalance", "P": comm.size, "provider": comm.provider,
                            "model": args.model_name, "net": args.net, "via": args.via, "lr": args.lr,
                            "momentum": args.momentum, "batch": args.batch, "staleness": args.staleness,
                            "delay_at": args.delay_at, "seed": "median", "mode": mode,
                            "steps": args.steps,
                            "seeds": [row["seed"] for row in mine],
                            **{key: med(key) for key in ("wall_s", "ms_per_step", "final_accuracy",
                                                         "target_accuracy", "time_to_target_s", "steps_to_target",
                                                         "speedup_to_target", "fresh_fraction", "stale_share")},
                            "replicas_identical": all(row["replicas_identical"] for row in mine)})
    if args.json:
        for row in rows + summary:
            print(json.dumps({k: v for k, v in row.items() if k != "curve" or args.json_curves}))
    else:
        fmt = lambda v, spec: "-" if v is None else format(v, spec)
        print(f"{'seed':>6} {'mode':>9} {'wall(s)':>8} {'ms/step':>8} {'final(%)':>9} {'target(%)':>9} "
              f"{'to_target(s)':>12} {'speedup':>8} {'fresh':>6} {'identical':>9}")
        for row in rows + summary:
            acc = lambda key: None if row[key] is None else 100 * row[key]
            print(f"{row['seed']:>6} {row['mode']:>9} {fmt(row['wall_s'], '8.3f')} {fmt(row['ms_per_step'], '8.2f')} "
                  f"{fmt(acc('final_accuracy'), '9.2f')} {fmt(acc('target_accuracy'), '9.2f')} "
                  f"{fmt(row['time_to_target_s'], '12.3f')} {fmt(row['speedup_to_target'], '8.3f')} "
                  f"{fmt(row['fresh_fraction'], '6.3f')} {'yes' if row['replicas_identical'] else 'NO':>9}")
    sys.stdout.flush()
    if args.plot:
        plot(args, rows, compute_ms, delay_ms, comm.size)
    return rows


def plot(args, rows, compute_ms, delay_ms, size):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"sync": "tab:blue", "solo": "tab:red", "majority": "tab:green", "quorum": "tab:purple", "ddp": "black"}
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(8, 5))
    seeds = list(dict.fromkeys(row["seed"] for row in rows))
    for row in rows:
        style = styles[seeds.index(row["seed"]) % len(styles)]
        seconds = [s for _, s, _ in row["curve"]]
        accs = [100 * a for _, _, a in row["curve"]]
        label = row["mode"] if row["seed"] == seeds[0] else None
        ax.plot(seconds, accs, style, color=colors.get(row["mode"], "gray"), label=label, linewidth=1.2)
    targets = [row["target_accuracy"] for row in rows if row["target_accuracy"] is not None]
    if targets:
        ax.axhline(100 * statistics.median(targets), color="gray", linewidth=0.8, linestyle="--")
    lows = [100 * a for row in rows for _, _, a in row["curve"][len(row["curve"]) // 4:]]
    ax.set_ylim(max(0, min(lows) - 2) if lows else 0, 100)
    ax.set_xlabel("wall time (s), evaluation excluded")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"digits, {args.net} via {args.via}, P={size}, {args.model_name}, C={compute_ms:.1f} ms"
                 + (f", D={delay_ms:.1f} ms" if args.model == "paper" else "")
                 + f"; seeds {', '.join(map(str, seeds))} (line styles)", fontsize=9)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)


# --- Command line ------------------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(prog="train_imbalance", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="paper", help="paper (default), lognormal, slowrank, trace:FILE, none")
    parser.add_argument("--modes", default="sync,solo,majority,ddp",
                        help="comma-separated from sync,solo,majority,quorum,ddp (default sync,solo,majority,ddp)")
    parser.add_argument("--net", default="mlp", help="mlp (default), resnet18, mobilenetv2 (torchvision's)")
    parser.add_argument("--via", default="optimizer", help="how pcoll's modes train: optimizer "
                        "(DistributedOptimizer, default) or hook (DDP with PartialAllreduceHook)")
    parser.add_argument("--staleness", default="auto",
                        help=f"pcoll.torch's staleness rule: {', '.join(pt.STALENESS)} (default auto)")
    parser.add_argument("--order", choices=("rotate", "fixed"), default="rotate",
                        help="the modes' order within a seed: rotated by the seed's index (default) or as given")
    parser.add_argument("--quorum", type=int, default=0, help="quorum mode: k (default 0: floor(P/2) + 1)")
    parser.add_argument("--steps", type=int, help="training steps per mode (default 300; conv nets 240)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds; each runs every mode (default 1)")
    parser.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers (default 256)")
    parser.add_argument("--batch", type=int, help="batch per rank per step (default 64; conv nets 16)")
    parser.add_argument("--lr", type=float, help="SGD learning rate (default 0.02; conv nets 0.05)")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    parser.add_argument("--max-lag", type=int, default=1, help="pcoll handle option (default 1)")
    parser.add_argument("--delay-at", choices=("after-compute", "before-compute"),
                        help="where a step's delay sleeps: between compute and communication (default; "
                             "conv nets: before-compute) or before the compute")
    parser.add_argument("--delay-factor", type=float, help="paper: D = factor x C (default 0.8)")
    parser.add_argument("--delay-ms", type=float,
                        help="paper: D in ms instead of a factor of C (conv nets: 200 ms ResNet-18, 100 ms MobileNetV2)")
    parser.add_argument("--compute-ms", type=float,
                        help="C for the models instead of measuring it (the compute itself stays real)")
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal: sigma of the log (default 0.5)")
    parser.add_argument("--slow-rank", type=int, default=0, help="slowrank: the slow rank (default 0)")
    parser.add_argument("--slow-factor", type=float, default=2.0, help="slowrank: its slowdown (default 2)")
    parser.add_argument("--trace-scale", type=float, default=1.0, help="trace: multiplies the file's times")
    parser.add_argument("--eval-every", type=int, help="steps between weight snapshots (default 5; conv nets 20)")
    parser.add_argument("--calibration-steps", type=int, default=30, help="steps that measure C (default 30)")
    parser.add_argument("--target", type=float,
                        help="target accuracy in [0, 1] (default: sync's final - margin; conv nets 0.95)")
    parser.add_argument("--target-margin", type=float, default=0.005, help="default 0.005 (0.5 points)")
    parser.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    parser.add_argument("--json-curves", action="store_true", help="with --json: include the accuracy curves")
    parser.add_argument("--plot", metavar="FILE", help="PNG of test accuracy against wall time")
    args = parser.parse_args()

    if args.net not in NETS:
        usage_error(f"--net '{args.net}' is not one of {', '.join(NETS)}")
    if args.via not in ("optimizer", "hook"):
        usage_error(f"--via '{args.via}' is not one of optimizer, hook")
    if args.staleness not in pt.STALENESS:
        usage_error(f"--staleness '{args.staleness}' is not one of {', '.join(pt.STALENESS)}")
    if args.quorum < 0:
        usage_error("--quorum must be non-negative")
    batch, lr, delay_ms, steps, eval_every, target = CONV_DEFAULTS.get(args.net, (64, 0.02, None, 300, 5, None))
    conv = args.net != "mlp"
    for name, value in (("batch", batch), ("lr", lr), ("steps", steps), ("eval_every", eval_every)):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if conv and args.delay_ms is None and args.delay_factor is None:
        args.delay_ms = delay_ms
    if args.delay_factor is None:
        args.delay_factor = 0.8
    if args.delay_at is None:
        args.delay_at = "before-compute" if conv else "after-compute"
    if conv and args.target is None:
        args.target = target
    args.modes = args.modes.split(",")
    for mode in args.modes:
        if mode not in MODES:
            usage_error(f"--modes: '{mode}' is not one of {', '.join(MODES)}")
    if len(set(args.modes)) != len(args.modes):
        usage_error("--modes: a mode is listed twice")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        usage_error(f"--seeds '{args.seeds}' is not a comma-separated list of integers")
    if any(s < 0 for s in args.seeds):
        usage_error("--seeds must be non-negative")
    args.model_name = args.model
    if args.model.startswith("trace:") and len(args.model) > 6:
        args.trace_path = args.model[6:]
        args.model = "trace"
        try:
            args.trace = read_trace(args.trace_path)
        except ValueError as error:
            usage_error(str(error))
    elif args.model not in ("paper", "lognormal", "slowrank", "none"):
        usage_error(f"--model '{args.model}' is not one of paper, lognormal, slowrank, trace:FILE, none")
    for name, low in (("steps", 1), ("hidden", 1), ("batch", 1), ("eval_every", 1), ("calibration_steps", 1),
                      ("max_lag", 1)):
        if getattr(args, name) < low:
            usage_error(f"--{name.replace('_', '-')} must be at least {low}")
    for name in ("delay_factor", "delay_ms", "compute_ms", "sigma", "slow_factor", "trace_scale", "lr",
                 "momentum", "target_margin"):
        value = getattr(args, name)
        if value is not None and not (value >= 0 and math.isfinite(value)):
            usage_error(f"--{name.replace('_', '-')} must be a non-negative number")
    if args.target is not None and not 0 <= args.target <= 1:
        usage_error("--target is an accuracy between 0 and 1")
    if args.target is None and "sync" not in args.modes:
        usage_error("without sync in --modes there is no default target: give --target")
    return args


def main():
    args = parse_args()
    torch.set_num_threads(1)  # one thread per rank: P ranks share the host's cores
    comm = pcoll.init()
    if args.model == "slowrank" and args.slow_rank >= comm.size:
        if comm.rank == 0:
            print(f"train_imbalance: --slow-rank {args.slow_rank} is not a rank of this job (P={comm.size})",
                  file=sys.stderr)
        sys.exit(USAGE_EXIT)
    if args.model == "trace" and len(args.trace[0]) < comm.size:
        if comm.rank == 0:
            print(f"train_imbalance: trace file '{args.trace_path}' has ranks 0..{len(args.trace[0]) - 1} but the "
                  f"job has P={comm.size} ranks", file=sys.stderr)
        sys.exit(USAGE_EXIT)
    if "ddp" in args.modes or args.via == "hook":
        pt.init_process_group(comm)

    data0 = load_digits_split(args.seeds[0], comm.rank, comm.size, args.net)
    compute_ms = args.compute_ms if args.compute_ms is not None else measure_compute_ms(comm, args, *data0[:2])
    delay_ms = args.delay_ms if args.delay_ms is not None else args.delay_factor * compute_ms
    if comm.rank == 0 and not args.json:
        print(f"# train_imbalance: P={comm.size}, provider {comm.provider}, bootstrap {comm.bootstrap}, "
              f"{args.steps} steps per mode, model {describe_model(args, compute_ms, delay_ms)}")
        net = f"MLP 64-{args.hidden}-{args.hidden}-10" if args.net == "mlp" else args.net
        print(f"# {net} via {args.via}, batch {args.batch} per rank, SGD lr {args.lr:g} "
              f"momentum {args.momentum:g}, max_lag {args.max_lag}, delay {args.delay_at}; target: "
              + (f"{100 * args.target:.2f}%" if args.target is not None
                 else f"sync's final accuracy - {100 * args.target_margin:g} points"))
        sys.stdout.flush()

    records_by_seed = []
    for index, seed in enumerate(args.seeds):
        args.seed_now = seed
        data = data0 if seed == args.seeds[0] else load_digits_split(seed, comm.rank, comm.size, args.net)
        step_ms = schedule(args, compute_ms, delay_ms, args.steps, comm.size)
        sleep_ms = [max(0.0, row[comm.rank] - compute_ms) for row in step_ms]
        order = run_order(args.modes, index, args.order)
        done = {}
        for position, mode in enumerate(order):
            done[mode] = train(comm, args, mode, seed, data, sleep_ms)
            done[mode]["position"] = position  # where in this seed's sequence it ran
        records_by_seed.append((seed, [done[mode] for mode in args.modes]))
    if comm.rank == 0:
        report(comm, args, compute_ms, delay_ms, records_by_seed)
    # Every rank knows (the check is collective): differing replicas fail the run.
    broken = [r for _, records in records_by_seed for r in records if not r["replicas_identical"]]
    if broken and comm.rank == 0:
        print(f"train_imbalance: replicas differ after {len(broken)} run(s)", file=sys.stderr)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    comm.close()
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
