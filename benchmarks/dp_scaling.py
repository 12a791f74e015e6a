"""How the dp solver's time grows with nodes and configurations (chains, series-parallel).

Usage::

    python -m benchmarks.dp_scaling            # nodes 100, 1000, 10000 x configs 8, 32, 128
    python -m benchmarks.dp_scaling --quick    # nodes 100, 1000 x configs 8, 32
    python -m benchmarks.dp_scaling --nodes 100 300 --configs 16 64 --budget

Random costs (seed 0). ``chain``: a path (eliminated by leaf eliminations, O(C^2) each).
``series_parallel``: Inception/ResNet-like blocks (a fork node, 2-3 branches of 1-2 nodes, a
join node), eliminated by node eliminations (O(C^3) each) and edge eliminations.

A case whose edge tables would not fit in ``--max-gib`` of memory, or whose time predicted
from the previous node count exceeds ``--max-case-seconds``, is measured on the first block
of nodes that fits and scaled linearly in nodes; such rows are marked ``est.`` and left out of
the fits. Prints one row per case (seconds, per-node microseconds, the stats), then the
growth exponents fitted by log-log least squares: in nodes (expected close to 1) and in
configurations (expected about 2 for chains, about 3 for series-parallel graphs).

With ``--budget`` it also times the all-live memory budget search (one device, budget at 30%
between the least and the largest total memory) on the smaller cases. ``--budget-only`` skips
the unconstrained table.

With ``--zoo`` it times the budget search on zoo models (``--models``, ``--devices``, cluster
``optcnn``) with a binding budget: halfway between the least memory any assignment needs and
the unconstrained optimum's peak, on the binding device (the one whose least memory is largest,
usually device 0; the same budget on every device; :func:`benchmarks.instances.zoo_problem`).
``--compare highs`` also times that MILP backend on the same problems.

For reference, OptCNN reported 0.4 s for Inception-v3 (102 layers, 4 GPUs) with its search.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from benchmarks.instances import chain_edges, series_parallel_edges, zoo_problem
from milp_parallel import Problem, solve_problem

GRAPHS = {"chain": chain_edges, "series_parallel": series_parallel_edges}


def make_problem(kind: str, n: int, k: int, seed: int = 0, budget: float | None = None
                 ) -> Problem:
    rng = np.random.default_rng(seed)
    edges = GRAPHS[kind](n, rng)
    node_costs = [rng.random(k) for _ in range(n)]
    edge_costs = [rng.random((k, k)) for _ in edges]
    if budget is None:
        return Problem(node_costs, edges, edge_costs)
    mem = [rng.uniform(0, 100, size=k) for _ in range(n)]
    lo = sum(m.min() for m in mem)
    hi = sum(m.max() for m in mem)
    return Problem(node_costs, edges, edge_costs, memory=mem,
                   memory_limit=lo + budget * (hi - lo))


def edges_per_node(kind: str) -> float:
    return 1.0 if kind == "chain" else 1.4


def time_case(kind: str, n: int, k: int, budget: float | None = None, repeat: int = 1):
    p = make_problem(kind, n, k, budget=budget)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = solve_problem(p, "dp")
        best = min(best, time.perf_counter() - t0)
    assert r.status == "optimal", r
    return best, r


def fit_exponent(xs, ys) -> float:
    if len(xs) < 2:
        return math.nan
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", nargs="+", type=int, default=None)
    ap.add_argument("--configs", nargs="+", type=int, default=None)
    ap.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    ap.add_argument("--quick", action="store_true", help="nodes 100, 1000; configs 8, 32")
    ap.add_argument("--max-gib", type=float, default=1.0,
                    help="largest edge-table memory built for one case (GiB)")
    ap.add_argument("--max-case-seconds", type=float, default=15.0,
                    help="above this predicted time a case is measured on fewer nodes")
    ap.add_argument("--budget", action="store_true",
                    help="also time the memory-budget search (50 x 8, 100 x 32; 60 s limit)")
    ap.add_argument("--budget-only", action="store_true",
                    help="only the memory-budget cases (implies --budget)")
    ap.add_argument("--zoo", action="store_true",
                    help="time the budget search on zoo models with a binding budget")
    ap.add_argument("--models", nargs="+",
                    default=["lenet5", "alexnet", "vgg16", "inception_v3", "resnet50"])
    ap.add_argument("--devices", nargs="+", type=int, default=[4, 16])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--compare", nargs="*", default=[],
                    help="other solvers to time on the zoo problems (e.g. highs)")
    args = ap.parse_args()
    if args.zoo:
        zoo_budget(args.models, args.devices, args.time_limit, args.compare)
        return
    if args.budget_only:
        budget_cases(args.graphs, args.time_limit)
        return
    nodes = args.nodes or ([100, 1000] if args.quick else [100, 1000, 10000])
    configs = args.configs or ([8, 32] if args.quick else [8, 32, 128])

    head = (f"{'graph':16s} {'nodes':>6s} {'K':>4s} {'seconds':>9s} {'us/node':>9s} "
            f"{'leaf':>6s} {'node':>6s} {'edge':>6s} {'left':>5s}  note")
    print(head)
    print("-" * len(head))
    measured: dict[tuple[str, int], dict[int, float]] = {}
    t_all = time.perf_counter()
    for kind in args.graphs:
        for k in configs:
            prev = None
            for n in sorted(nodes):
                bytes_needed = n * edges_per_node(kind) * k * k * 8 * 2
                n_run, note = n, ""
                predicted = prev[1] * n / prev[0] if prev else 0.0
                if bytes_needed > args.max_gib * 2**30 or predicted > args.max_case_seconds:
                    n_run = max(100, int(n * min(args.max_gib * 2**30 / bytes_needed,
                                                 args.max_case_seconds / max(predicted, 1e-9))))
                    note = f"est.: measured on {n_run} nodes, scaled x{n / n_run:.1f}"
                sec, r = time_case(kind, n_run, k, repeat=3 if n_run <= 1000 and k <= 32 else 1)
                if n_run != n:
                    sec = sec * n / n_run
                else:
                    measured.setdefault((kind, k), {})[n] = sec
                prev = (n, sec)
                s = r.stats
                print(f"{kind:16s} {n:6d} {k:4d} {sec:9.4f} {sec / n * 1e6:9.1f} "
                      f"{s['leaf_eliminations']:6d} {s['node_eliminations']:6d} "
                      f"{s['edge_eliminations']:6d} {s['nodes_left']:5d}  {note}", flush=True)

    print("\ngrowth exponents (log-log least squares over measured rows)")
    for kind in args.graphs:
        for k in configs:
            pts = measured.get((kind, k), {})
            e = fit_exponent(list(pts), list(pts.values()))
            print(f"  {kind:16s} K={k:<4d} time ~ nodes^{e:.2f}")
        for n in nodes:
            xs = [k for k in configs if n in measured.get((kind, k), {})]
            ys = [measured[(kind, k)][n] for k in xs]
            e = fit_exponent(xs, ys)
            print(f"  {kind:16s} n={n:<6d} time ~ configs^{e:.2f}")

    if args.budget:
        budget_cases(args.graphs, args.time_limit)
    print(f"\ntotal {time.perf_counter() - t_all:.1f} s")


def budget_cases(graphs, time_limit: float) -> None:
    print("\nmemory budget (1 device, 30% between least and largest total memory)")
    print(f"{'graph':16s} {'nodes':>6s} {'K':>4s} {'seconds':>9s} {'dp runs':>8s} "
          f"{'B&B nodes':>9s}  status objective")
    for kind in graphs:
        for n, k in [(50, 8), (100, 32)]:
            t0 = time.perf_counter()
            r = solve_problem(make_problem(kind, n, k, budget=0.3), "dp",
                              time_limit=time_limit)
            print(f"{kind:16s} {n:6d} {k:4d} {time.perf_counter() - t0:9.3f} "
                  f"{r.stats['dp_runs']:8d} {r.stats['branch_nodes']:9d}  {r.status} "
                  f"{r.objective:.10g}", flush=True)


def zoo_budget(models, devices, time_limit: float, compare) -> None:
    print(f"zoo models on 'optcnn' with a binding budget (time limit {time_limit:g} s)")
    print(f"{'model':14s} {'dev':>4s} {'nodes':>6s} {'maxK':>5s} {'solver':>7s} "
          f"{'seconds':>9s} {'status':>9s} {'objective':>14s} {'gap':>9s} {'B&B':>7s}")
    for model in models:
        for n_dev in devices:
            p = zoo_problem(model, n_dev, True, cluster="optcnn")
            if p is None:
                print(f"{model:14s} {n_dev:4d}  the budget cannot bind (free optimum = least)")
                continue
            for solver in ["dp", *compare]:
                t0 = time.perf_counter()
                r = solve_problem(p, solver, time_limit=time_limit)
                sec = time.perf_counter() - t0
                print(f"{model:14s} {n_dev:4d} {p.n_nodes:6d} {int(p.n_configs.max()):5d} "
                      f"{solver:>7s} {sec:9.3f} {r.status:>9s} {r.objective:14.8g} "
                      f"{r.gap:9.2g} {r.stats.get('branch_nodes', ''):>7}", flush=True)


if __name__ == "__main__":
    main()
