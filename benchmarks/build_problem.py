"""Time to build the Problem (configs, cost tables, memory) for zoo models on ABCI-like clusters.

Usage::

    python -m benchmarks.build_problem                      # resnet152, inception_v3; 4..256
    python -m benchmarks.build_problem --models resnet152 --devices 64 --batch 64

Prints one row per (model, devices): build seconds (the best of ``--repeat`` builds: the
machine is shared, the least disturbed run is the one to compare), Problem nodes / edges,
configurations per node (min / median / max), the total edge-table size, and the peak memory
the build allocates (``tracemalloc``'s peak over one more, untimed build: Python and numpy
allocations). Each build uses a fresh CostModel (no cache carried over). Target: resnet152 on
64 devices in under 2 s. Sizes beyond ``milp_parallel.costs.configs.SizeLimits`` are refused before
any allocation (``--max-devices`` etc. raise them).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from milp_parallel import clusters, models
from milp_parallel.costs.build import build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet152", "inception_v3"])
    ap.add_argument("--devices", nargs="+", type=int, default=[4, 16, 64, 256])
    ap.add_argument("--cluster", default="abci")
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--batch", type=int, default=None,
                    help="global batch (default: the model's, raised to the device count)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per row; the best is shown")
    ap.add_argument("--max-devices", type=int, default=None,
                    help="raise SizeLimits.max_devices (default 4096)")
    args = ap.parse_args()
    limits = {} if args.max_devices is None else {"max_devices": args.max_devices}
    head = (f"{'model':14s} {'devices':>7s} {'batch':>6s} {'seconds':>8s} {'nodes':>6s} "
            f"{'edges':>6s} {'K min/med/max':>15s} {'edge entries':>13s} {'peak MiB':>9s}")
    print(head)
    print("-" * len(head))
    for name in args.models:
        for n in args.devices:
            nodes = max(1, n // args.gpus_per_node)
            topo = clusters.get(args.cluster, nodes=nodes,
                                gpus_per_node=min(n, args.gpus_per_node))
            g = models.get(name)
            batch = args.batch or max(g.batch_size, n)
            g = g.with_batch_size(batch)
            sec = float("inf")
            for _ in range(max(1, args.repeat)):
                start = time.perf_counter()
                b = build(g, topo, **limits)
                sec = min(sec, time.perf_counter() - start)
            tracemalloc.start()
            build(g, topo, **limits)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            k = b.problem.n_configs
            kk = f"{int(k.min())}/{float(np.median(k)):g}/{int(k.max())}"
            print(f"{name:14s} {n:7d} {batch:6d} {sec:8.2f} {b.problem.n_nodes:6d} "
                  f"{b.problem.n_edges:6d} {kk:>15s} {b.edge_table_size():13d} {peak:9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
