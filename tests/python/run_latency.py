"""Round latency of pcoll's Python binding, timed like perf/pcoll_allreduce (mean, p50, p99
of the per-round maximum over ranks), so the two can be run side by side:

    build/tools/pcollrun -n 2 build/perf/pcoll_allreduce --mode sync -b 8 -e 8 -n 20000 -w 2000
    PYTHONPATH=build/python build/tools/pcollrun -n 2 /usr/bin/python3 tests/python/run_latency.py \
        --modes sync -b 8 -n 20000 -w 2000

Each timed call is one ar.run(send, recv) from Python: argument checks, the GIL hand-over
and the binding's interruptible wait loop are all inside the time.
"""

import argparse
import time

import numpy as np

import pcoll


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="sync,solo,majority", help="comma-separated pcoll modes")
    parser.add_argument("-b", "--bytes", type=int, default=8, help="message size in bytes (float32 sum)")
    parser.add_argument("-n", "--iters", type=int, default=10000, help="timed rounds per mode")
    parser.add_argument("-w", "--warmup", type=int, default=1000, help="untimed rounds first")
    parser.add_argument("--torch", action="store_true", help="CPU torch tensors instead of numpy arrays")
    args = parser.parse_args()

    with pcoll.init() as comm:
        count = max(1, args.bytes // 4)
        if args.torch:
            import torch
            send, recv = torch.ones(count), torch.zeros(count)
        else:
            send, recv = np.ones(count, dtype=np.float32), np.zeros(count, dtype=np.float32)
        if comm.rank == 0:
            print(f"# pcoll Python run(): P={comm.size}, provider {comm.provider}, {args.iters} rounds "
                  f"(+{args.warmup} warmup), {'torch' if args.torch else 'numpy'} buffers")
            print(f"{'size':>8} {'mode':>9} {'time(us)':>10} {'p50':>10} {'p99':>10}")
        for mode in args.modes.split(","):
            times = np.zeros(args.iters, dtype=np.float64)
            with comm.allreduce(count, dtype="float32", op="sum", mode=mode) as ar, \
                    comm.allreduce(args.iters, dtype="float64", op="max", mode="sync") as slowest:
                comm.barrier()
                clock = time.perf_counter_ns
                for t in range(args.warmup + args.iters):
                    start = clock()
                    ar.run(send, recv)
                    elapsed = clock() - start
                    if t >= args.warmup:
                        times[t - args.warmup] = elapsed * 1e-3
                ar.flush(recv)
                slowest.run(times, times)
            if comm.rank == 0:
                print(f"{count * 4:>8} {mode:>9} {times.mean():>10.2f} {np.percentile(times, 50):>10.2f} "
                      f"{np.percentile(times, 99):>10.2f}", flush=True)


if __name__ == "__main__":
    main()
