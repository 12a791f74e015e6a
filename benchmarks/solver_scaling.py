"""MILP backends (highs, cbc, cpsat) and the dp on the same problems: time, status, objective.

Usage::

    python -m benchmarks.solver_scaling                       # G + random cases, every backend
    python -m benchmarks.solver_scaling --quick               # smaller random cases
    python -m benchmarks.solver_scaling --solvers highs cbc --time-limit 60 --csv out.csv
    python -m benchmarks.solver_scaling --no-random           # IOPDDL G only
    python -m benchmarks.solver_scaling --interval --append   # interval chain and DAG
    python -m benchmarks.solver_scaling --zoo --models resnet50 --devices 16 \
        --solvers auto dp highs cbc cpsat --time-limit 60 --csv zoo.csv

Cases:

* ``iopddl-G``: the contest instance (816 nodes, interval memory, budget), from the shared
  folder or the copy in ``data/`` (:func:`benchmarks.instances.iopddl_path`; or ``--g PATH``).
* ``chain-N-K`` / ``sp-N-K``: random chains and series-parallel graphs (seed 0) with ``N``
  nodes and ``K`` configurations per node, without a budget and with a binding all-live
  budget (30% of the way from the least to the largest total memory, ``+budget``;
  :func:`benchmarks.instances.random_problem`).

* ``--zoo``: every zoo model (or ``--models``) at ``--devices`` (default 4 16 64) on the
  ``abci`` preset, without a budget (``MODEL-N``) and with a binding one (``MODEL-N+budget``:
  halfway between the least memory of the most loaded device and the unconstrained
  optimum's peak there, :func:`benchmarks.instances.zoo_problem`; skipped when it cannot
  bind). ``problem_seconds`` is the time to build the problem (and, for ``+budget``,
  to find the unconstrained optimum that sets the budget).

Other cases plug in through :func:`run_cases`: give it ``(name, builder)`` pairs where the
builder returns a :class:`~milp_parallel.Problem` (e.g. zoo models built for a cluster)::

    from benchmarks.solver_scaling import run_cases, print_table
    rows = run_cases([("resnet50-16gpu", lambda: make_problem(...))], ["highs", "dp"])

Each row: machine, date, case, solver, status, objective, bound, gap, total seconds, build
seconds (incumbent + presolve + formulation), solve seconds (the solver itself), model size,
and how the answer was proved (``proof``: the solver, or the presolve's dual bound). The table
is printed and written as CSV (``--csv``, default ``benchmarks/results/solver_scaling.csv``),
a row at a time so an interrupted run keeps what it measured. ``solvers/auto.py`` cites rows
of the committed CSV for each of its rules.
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from benchmarks.instances import (
    RESULTS_DIR,
    interval_chain,
    interval_dag,
    iopddl_path,
    machine,
    random_problem,
    zoo_problem,
)
from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem

RESULTS = RESULTS_DIR / "solver_scaling.csv"
FIELDS = ("machine", "date", "case", "solver", "status", "objective", "bound", "gap",
          "seconds", "build_seconds", "solve_seconds", "proof", "variables", "rows", "nodes",
          "configs", "problem_seconds", "time_limit")

ZOO_MODELS = ("lenet5", "alexnet", "vgg16", "vgg19", "resnet18", "resnet34", "resnet50",
              "resnet101", "resnet152", "inception_v3", "densenet121", "mobilenet_v2",
              "cosmoflow", "bert_base")


def default_cases(quick: bool, g_path: Path | None, random: bool = True
                  ) -> list[tuple[str, Callable[[], Problem]]]:
    cases: list[tuple[str, Callable[[], Problem]]] = []
    if g_path is not None and g_path.exists():
        cases.append(("iopddl-G", lambda: Problem.from_iopddl(g_path)))
    if random:
        sizes = [(100, 16), (200, 32)] if quick else [(200, 32), (300, 64), (160, 200)]
        for kind in ("chain", "sp"):
            for n, k in sizes:
                for budget in (False, True):
                    name = f"{kind}-{n}-{k}" + ("+budget" if budget else "")
                    cases.append((name, lambda kind=kind, n=n, k=k, budget=budget:
                                  random_problem(kind, n, k, budget=budget)))
    return cases


def interval_cases() -> list[tuple[str, Callable[[], Problem]]]:
    """The Alpa-style interval-budget chain and DAG that ``benchmarks/milp_backends.py`` runs
    too (``--interval``)."""
    return [("chain-200x16", interval_chain), ("dag-60x8", interval_dag)]


def zoo_cases(models: Sequence[str], devices: Sequence[int],
              budgets: Sequence[bool] = (False, True)
              ) -> list[tuple[str, Callable[[], Problem | None]]]:
    """``(name, builder)`` pairs for :func:`run_cases` (see ``--zoo``)."""
    return [(f"{m}-{n}" + ("+budget" if b else ""),
             lambda m=m, n=n, b=b: zoo_problem(m, n, b))
            for m in models for n in devices for b in budgets]


def run_cases(cases: Iterable[tuple[str, Callable[[], Problem]]], solvers: Sequence[str], *,
              time_limit: float | None = None, threads: int | None = 1,
              csv_path: str | Path | None = None, append: bool = False) -> list[dict]:
    """Solve every case with every solver; one row (dict with :data:`FIELDS`) per pair.

    A solver that refuses a case (e.g. dp on an interval budget) gets a row with its error.
    With ``csv_path``, rows are appended to it as they come (the file is started anew,
    unless ``append`` and it exists).
    """
    import datetime
    stamp = {"machine": machine(), "date": datetime.date.today().isoformat(),
             "time_limit": time_limit}
    writer = None
    if csv_path is not None:
        Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
        fresh = not (append and Path(csv_path).exists())
        out = open(csv_path, "w" if fresh else "a", newline="")
        writer = csv.DictWriter(out, fieldnames=FIELDS)
        if fresh:
            writer.writeheader()
    rows = []
    for name, build in cases:
        tp = time.perf_counter()
        problem = build()
        problem_seconds = time.perf_counter() - tp
        if problem is None:
            print(f"{name}: skipped (the budget cannot bind)", flush=True)
            continue
        for solver in solvers:
            opts = {}
            if time_limit is not None:
                opts["time_limit"] = time_limit
            if threads is not None and solver in ("highs", "cbc", "cpsat", "auto"):
                opts["threads"] = threads
            t0 = time.perf_counter()
            try:
                r = solve_problem(problem, solver, **opts)
            except Exception as exc:   # report and go on with the next solver
                rows.append({**stamp, "case": name, "solver": solver,
                             "status": f"error: {type(exc).__name__}: {exc}"[:80],
                             "seconds": time.perf_counter() - t0})
                if writer:
                    writer.writerow({k: rows[-1].get(k, "") for k in FIELDS})
                    out.flush()
                continue
            rows.append({
                **stamp, "proof": r.stats.get("proof", "") or "",
                "case": name, "solver": r.stats.get("auto", "") and f"auto={r.solver}"
                or solver, "status": r.status,
                "objective": r.objective, "bound": r.bound, "gap": r.gap,
                "seconds": r.seconds,
                "build_seconds": r.stats.get("build_seconds", ""),
                "solve_seconds": r.stats.get("solve_seconds", ""),
                "variables": r.stats.get("variables", ""), "rows": r.stats.get("rows", ""),
                "nodes": problem.n_nodes, "configs": int(problem.n_configs.sum()),
                "problem_seconds": problem_seconds})
            print(_fmt(rows[-1]), flush=True)
            if writer:
                writer.writerow({k: rows[-1].get(k, "") for k in FIELDS})
                out.flush()
    if writer:
        out.close()
    return rows


def _fmt(row: dict) -> str:
    def num(x, f="{:.6g}"):
        if x is None or x == "":
            return "-"
        if isinstance(x, float) and math.isnan(x):
            return "-"
        return f.format(x) if isinstance(x, (int, float)) else str(x)
    return (f"{row['case']:<22} {row['solver']:<6} {row['status']:<10} "
            f"{num(row.get('objective')):>12} {num(row.get('bound')):>12} "
            f"{num(row.get('gap'), '{:.2g}'):>8} {num(row.get('seconds'), '{:.2f}'):>8} "
            f"{num(row.get('build_seconds'), '{:.2f}'):>7} "
            f"{num(row.get('solve_seconds'), '{:.2f}'):>7} {num(row.get('variables')):>8} "
            f"{num(row.get('problem_seconds'), '{:.2f}'):>7}")


def print_table(rows: list[dict]) -> None:
    print(f"{'case':<22} {'solver':<6} {'status':<10} {'objective':>12} {'bound':>12} "
          f"{'gap':>8} {'seconds':>8} {'build':>7} {'solve':>7} {'vars':>8} {'problem':>7}")
    for row in rows:
        print(_fmt(row))


def write_csv(rows: list[dict], path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in FIELDS})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--solvers", nargs="+", default=["highs", "cbc", "cpsat", "dp"])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-random", action="store_true", help="IOPDDL G only")
    ap.add_argument("--no-g", action="store_true", help="random cases only")
    ap.add_argument("--g", type=Path, default=iopddl_path("G"))
    ap.add_argument("--csv", default=str(RESULTS))
    ap.add_argument("--append", action="store_true",
                    help="add rows to an existing --csv instead of starting it anew")
    ap.add_argument("--zoo", action="store_true", help="zoo models on 'abci' instead")
    ap.add_argument("--interval", action="store_true",
                    help="the interval-budget chain and DAG of milp_backends.py instead")
    ap.add_argument("--models", nargs="+", default=list(ZOO_MODELS))
    ap.add_argument("--devices", nargs="+", type=int, default=[4, 16, 64])
    ap.add_argument("--budget", choices=("both", "none", "binding"), default="both",
                    help="zoo cases without a budget, with a binding one, or both")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.interval:
        cases = interval_cases()
    elif args.zoo:
        budgets = {"both": (False, True), "none": (False,), "binding": (True,)}[args.budget]
        cases = zoo_cases(args.models, args.devices, budgets)
    else:
        cases = default_cases(args.quick, None if args.no_g else args.g, not args.no_random)
    rows = run_cases(cases, args.solvers, time_limit=args.time_limit, threads=args.threads,
                     csv_path=args.csv, append=args.append)
    print()
    print_table(rows)
    print(f"\nwrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
