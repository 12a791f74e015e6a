"""Executed plans: the measured step time of the program a plan emits, beside its prediction.

Run from the repository root (about 5-10 minutes on a 2-core machine)::

    .venv/bin/python -m benchmarks.executed_plans --csv benchmarks/results/executed_plans.csv

For each world size (2 and 4 processes of gloo, 1 thread each) it calibrates this machine
(``milp_parallel.measure.calibrate``: collectives, device, the all-reduce / compute overlap),
profiles every tile the models' configurations need, timed by that many processes at once
(``profile_concurrently``), measures the layer-wise program's own time per layer and per
step on two chains of tiny layers (``milp_parallel.runtime.overhead``), and solves each model
on that topology with that profile and that overhead (``mp.solve(..., solver="dp")``, Adam's
state). It then runs the plan's program
(``mp.verify_plan(..., timed_steps=N)``: one audited step, then ``N`` plain ones) and writes

``model, world, plan, measured_s, predicted_s, simulated_s, max_rel_error, machine, date``

``measured_s`` is the median over ``--rounds`` runs of the program of the slowest rank's
median of its plain steps, ``predicted_s`` the plan's
separable objective and ``simulated_s`` its step simulator's time. The models are the CNN
test models of ``benchmarks.verify_plan``: a residual CNN, one with batch-norms and a
two-layer head, and a two-layer MLP. Target (issue 26.3): simulated within 20% of measured.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib
import os

import numpy as np
import torch

import milp_parallel as mp
from benchmarks.instances import machine
from benchmarks.verify_plan import CASES
from milp_parallel.costs import CostModel
from milp_parallel.measure.calibrate import calibrate, profile_concurrently
from milp_parallel.runtime.overhead import measure_program_overhead

#: model class name -> input shape (the whole batch)
MODELS = {cls: shape for cls, shape, _, _ in CASES.values()}
FIELDS = ("model", "world", "plan", "measured_s", "predicted_s", "simulated_s",
          "max_rel_error", "machine", "date")


def run_world(world: int, steps: int, repeats: int, rounds: int = 3) -> list[dict]:
    """Calibrate ``world`` processes, then solve, run and time every model's plan."""
    topo, report = calibrate(None, world_size=world, threads=1)
    overlap = float(report["overlap_efficiency"])
    over = measure_program_overhead(topo, world_size=world)
    print(f"world {world}: the program's own time {over.layer_seconds * 1e6:.1f} us per layer, "
          f"{over.step_seconds * 1e6:.1f} us per step", flush=True)
    rows = []
    for cls_name, shape in MODELS.items():
        cls = getattr(importlib.import_module("benchmarks.verify_plan"), cls_name)
        torch.manual_seed(0)
        module, x = cls(), torch.randn(*shape)
        graph = mp.from_torch(module, x)
        table = profile_concurrently(graph, topo, world_size=world, threads=1,
                                     repeats=repeats)
        # the layer-wise runtime copies each gradient into its bucket once, and normalizes a
        # batch-norm split by samples or space by the whole batch's statistics
        cm = CostModel(topo, profile=table, sync_overlap=overlap, bucket_copies=1,
                       batchnorm_stats="sync", layer_overhead_seconds=over.layer_seconds,
                       step_overhead_seconds=over.step_seconds)
        plan = mp.solve(graph, topo, solver="dp", cross_check=False, cost_model=cm)
        row = {"model": cls_name, "world": world}
        try:
            # the plan's program run ``rounds`` times (the machine's speed drifts between
            # runs seconds apart): the median of the slowest rank's step medians
            audits = [mp.verify_plan(plan, module, x, world_size=world, timed_steps=steps)
                      for _ in range(max(1, rounds))]
        except mp.errors.PlanMismatchError as exc:     # recorded; the others still run
            print(f"{cls_name:<6} world {world}: not runnable: {exc}", flush=True)
            rows.append({**row, "plan": f"not runnable: {exc}",
                         "predicted_s": float(plan.step_seconds),
                         "simulated_s": float(plan.simulated_step_seconds)})
            continue
        # the configurations the plan uses, with how many layers take each
        used: dict[str, int] = {}
        for lc in plan.layers:
            if lc.op != "input":
                used[lc.config] = used.get(lc.config, 0) + 1
        rows.append({**row, "plan": ", ".join(f"{c} x{k}" for c, k in used.items()),
                     "measured_s": float(np.median([max(a.step_seconds) for a in audits])),
                     "predicted_s": float(plan.step_seconds),
                     "simulated_s": float(plan.simulated_step_seconds),
                     "max_rel_error": max(float(a.max_rel_error) for a in audits)})
        r = rows[-1]
        print(f"{cls_name:<6} world {world}: measured {r['measured_s'] * 1e3:8.2f} ms, "
              f"predicted {r['predicted_s'] * 1e3:8.2f} ms "
              f"({100 * (r['predicted_s'] / r['measured_s'] - 1):+.0f}%), simulated "
              f"{r['simulated_s'] * 1e3:8.2f} ms "
              f"({100 * (r['simulated_s'] / r['measured_s'] - 1):+.0f}%); plan {r['plan']}",
              flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", help="write the rows to this CSV file")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--steps", type=int, default=100, help="timed plain steps per plan")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each plan's program (the median is kept)")
    ap.add_argument("--repeats", type=int, default=10, help="profile repeats per tile")
    args = ap.parse_args()
    print(f"load average before: {' / '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rows = []
    for world in (int(w) for w in args.worlds.split(",")):
        rows += run_world(world, args.steps, args.repeats, args.rounds)
    print(f"load average after: {' / '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.csv:
        stamp = {"machine": machine(), "date": datetime.date.today().isoformat()}
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            for r in rows:
                w.writerow({**r, **stamp})


if __name__ == "__main__":
    main()
