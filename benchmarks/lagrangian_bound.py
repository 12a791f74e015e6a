"""The interval Lagrangian bound against the memory-blind dual bound on IOPDDL instances.

For each instance: the MPLP bound at zero multipliers (memory ignored) and the Lagrangian
bound (:func:`~milp_parallel.solvers.lagrangian.interval_lagrangian_bound`) within
``--seconds``, with the best contest entry's cost as the step target, and both gaps to that
cost. Run: ``python -m benchmarks.lagrangian_bound M K``.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from milp_parallel.problem import Problem
from milp_parallel.solvers.lagrangian import interval_lagrangian_bound
from milp_parallel.solvers.options import Deadline

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT.parent / "shared" / "reference" / "iopddl"
RESULTS = ROOT / "benchmarks" / "results" / "iopddl.csv"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("instances", nargs="+")
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    with open(RESULTS, newline="") as f:
        best = {r["instance"]: float(r["best_contest_cost"]) for r in csv.DictReader(f)}
    print("instance | memory-blind bound | Lagrangian bound | best entry | gap before | "
          "gap now | s")
    for name in args.instances:
        p = Problem.from_iopddl(FOLDER / f"asplos-2025-iopddl-{name}.json.gz")
        t = time.perf_counter()
        r = interval_lagrangian_bound(p, deadline=Deadline(args.seconds), upper=best[name])
        s = time.perf_counter() - t
        b = best[name]
        print(f"{name} | {r.unconstrained:.4g} | {r.bound:.4g} | {b:.4g} | "
              f"{1 - r.unconstrained / b:.1%} | {1 - r.bound / b:.1%} | {s:.1f}", flush=True)


if __name__ == "__main__":
    main()
