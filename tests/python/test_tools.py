"""The Python tools: perf/train_imbalance.py (bad arguments, its copy of the imbalance
models, a short run of every mode) and tests/python/run_latency.py. Run directly, not under
pcollrun: each test launches its own job (PCOLL_TEST_PCOLLRUN, set by meson)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "perf" / "train_imbalance.py"
LATENCY = ROOT / "tests" / "python" / "run_latency.py"
TRACE = ROOT / "perf" / "testdata" / "trace_3ranks.csv"
PCOLLRUN = os.environ.get("PCOLL_TEST_PCOLLRUN")
# A small, fast configuration: the tests check behaviour, not speed.
SMALL = ["--hidden", "32", "--batch", "16", "--calibration-steps", "3", "--eval-every", "5"]


def launch(ranks, *args, timeout=150):
    if not PCOLLRUN:
        pytest.skip("PCOLL_TEST_PCOLLRUN is not set (run through meson test)")
    return subprocess.run([PCOLLRUN, "-n", str(ranks), "--timeout-ms", "20000", sys.executable, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def train_module():
    if "train_imbalance" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_imbalance", TRAIN)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["train_imbalance"] = module
    return sys.modules["train_imbalance"]


@pytest.mark.parametrize("args, words", [
    (["--model", "gaussian"], "--model 'gaussian'"),
    (["--modes", "sync,fast"], "'fast' is not one of"),
    (["--modes", "solo,solo"], "listed twice"),
    (["--modes", "solo"], "give --target"),
    (["--seeds", "1,x"], "--seeds"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--delay-factor", "-1"], "--delay-factor"),
    (["--delay-at", "middle"], "--delay-at"),
    (["--target", "95"], "--target is an accuracy between 0 and 1"),
    (["--net", "vgg"], "--net 'vgg'"),
    (["--via", "pipe"], "--via 'pipe'"),
    (["--staleness", "some"], "--staleness 'some'"),
    (["--model", f"trace:{TRACE.parent / 'no_such_file.csv'}"], "cannot be read"),
    (["--model", f"trace:{TRACE.parent / 'trace_malformed.csv'}"], "line"),
])
def test_train_imbalance_refuses_bad_arguments_before_starting(args, words, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_imbalance", *map(str, args)])
    with pytest.raises(SystemExit) as exited:
        train_module().parse_args()  # what main() runs before pcoll.init()
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


def test_train_imbalance_models_are_pcoll_imbalances():
    t = train_module()
    assert t.splitmix64(0) == 0xE220A8397B1DCDAF  # splitmix64's first output from seed 0
    args = type("Args", (), {"model": "paper", "seed_now": 42})()
    ms = t.schedule(args, 20.0, 16.0, steps=200, ranks=4)
    for row in ms:
        delayed = [r for r in range(4) if row[r] == 36.0]
        assert 1 <= len(delayed) <= 2 and all(v in (20.0, 36.0) for v in row)
    args.model, args.sigma = "lognormal", 0.5
    values = [v for row in t.schedule(args, 20.0, 0.0, steps=2000, ranks=4) for v in row]
    assert abs(sum(values) / len(values) - 20.0) < 1.0  # the mean is C
    args.model = "trace"
    args.trace, args.trace_scale = t.read_trace(TRACE), 2.0
    ms = t.schedule(args, 20.0, 0.0, steps=len(args.trace) + 1, ranks=3)
    assert ms[0] == [2 * v for v in args.trace[0]] and ms[-1] == ms[0]  # steps wrap around


def test_train_imbalance_short_run_of_every_mode(tmp_path):
    png = tmp_path / "accuracy.png"
    done = launch(2, TRAIN, "--steps", "30", "--modes", "sync,solo,majority,ddp", "--json", "--plot", png, *SMALL)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in rows] == ["sync", "solo", "majority", "ddp"]
    assert [r["position"] for r in rows] == [0, 1, 2, 3]  # the first seed runs them as given
    for r in rows:
        assert r["P"] == 2 and r["steps"] == 30 and r["replicas_identical"]
        assert r["final_accuracy"] > 0.3  # chance is 0.1
        assert 0 < r["fresh_fraction"] <= 1 and r["wall_s"] > 0
    assert rows[0]["speedup_to_target"] == 1.0 and rows[0]["time_to_target_s"] is not None
    assert png.stat().st_size > 10000


def test_train_imbalance_rotates_the_modes_from_seed_to_seed():
    tool = train_module()
    modes = ["sync", "solo", "majority"]
    assert [tool.run_order(modes, index, "rotate") for index in range(4)] == [
        ["sync", "solo", "majority"], ["solo", "majority", "sync"], ["majority", "sync", "solo"],
        ["sync", "solo", "majority"]]
    assert tool.run_order(modes, 2, "fixed") == modes
    assert tool.run_order(["sync"], 5, "rotate") == ["sync"]


def test_train_imbalance_convolutional_nets_through_the_hook_and_the_optimizer():
    # A smoke run: torchvision's nets on the upsampled digits, every pcoll mode through DDP's
    # comm hook and through the optimizer; replicas' parameters identical, curves complete.
    pytest.importorskip("torchvision")
    for net, via, modes in (("mobilenetv2", "hook", "sync,solo,quorum,ddp"), ("resnet18", "optimizer", "majority")):
        done = launch(2, TRAIN, "--net", net, "--via", via, "--modes", modes, "--steps", "3", "--eval-every", "3",
                      "--calibration-steps", "1", "--target", "0.05", "--json", "--json-curves")
        assert done.returncode == 0, done.stdout + done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert [r["mode"] for r in rows] == modes.split(",")
        for r in rows:
            assert r["net"] == net and r["via"] == via and r["replicas_identical"], r
            assert r["batch"] == 16 and r["lr"] == 0.05 and r["delay_at"] == "before-compute"
            assert [step for step, _, _ in r["curve"]] == [0, 3] and 0 <= r["final_accuracy"] <= 1
            assert 0 < r["fresh_fraction"] <= 1


def test_train_imbalance_delay_shows_in_every_mode_at_either_placement():
    # Two ranks, paper model: every step has a drawn rank, so a sync or DDP step cannot be
    # shorter than D (for DDP after the compute, only its comm hook can put the sleep there).
    for where in ("after-compute", "before-compute"):
        done = launch(2, TRAIN, "--steps", "10", "--modes", "sync,ddp", "--delay-ms", "40", "--delay-at", where,
                      "--json", *SMALL)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert [r["mode"] for r in rows] == ["sync", "ddp"] and all(r["delay_at"] == where for r in rows)
        for r in rows:
            assert r["ms_per_step"] >= 40, (where, r)


@pytest.mark.parametrize("args, words", [
    (["--cores", "0"], "--cores must be at least 1"),
    (["--steps", "2"], "--steps at least 4"),
    (["--delay-factor", "-1"], "--delay-factor -1 must be a non-negative number"),
    (["--delay-factor", "nan"], "--delay-factor nan must be a non-negative number"),
])
def test_core_sharing_model_refuses_bad_arguments(args, words):
    done = subprocess.run([sys.executable, str(ROOT / "perf" / "core_sharing_model.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and words in done.stderr, done.stderr


def test_core_sharing_model():
    spec = importlib.util.spec_from_file_location("core_sharing_model", ROOT / "perf" / "core_sharing_model.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    step = {(mode, after, cores): model.simulate(mode, 1, after, 4, cores, 300, 0.8, 1)
            for mode in ("sync", "solo") for after in (False, True) for cores in (2, 4)}
    # A core per rank: where the sleep goes does not matter, and a drawn step is C + D.
    for mode in ("sync", "solo"):
        assert step[mode, False, 4] == pytest.approx(step[mode, True, 4], rel=0.02)
    assert step["sync", True, 4] == pytest.approx(1.8, rel=0.02)
    # Two cores: sleeping before the compute hides part of the delay from sync.
    assert step["sync", False, 2] < step["sync", True, 2] - 0.3
    assert step["solo", False, 2] < step["sync", False, 2] and step["solo", True, 2] < step["sync", True, 2]


def test_train_imbalance_trace_model_and_seed_medians(tmp_path):
    done = launch(2, TRAIN, "--steps", "10", "--modes", "solo,majority", "--target", "0.2", "--seeds", "1,2",
                  "--model", f"trace:{TRACE}", "--trace-scale", "0.5", *SMALL)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"trace {TRACE}" in lines[0]
    assert sum(1 for line in lines if line.split()[:1] == ["median"]) == 2


def test_run_latency_smoke():
    done = launch(2, LATENCY, "-n", "50", "-w", "5", "--modes", "sync,solo")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")][1:]
    assert [r[1] for r in rows] == ["sync", "solo"] and all(float(r[3]) > 0 for r in rows)
