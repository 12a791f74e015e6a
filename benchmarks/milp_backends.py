"""The MILP backends side by side (issue 17): HiGHS, CBC and CP-SAT (each model variant).

Usage::

    python -m benchmarks.milp_backends                         # every case, every variant
    python -m benchmarks.milp_backends --threads 2 --time-limit 120
    python -m benchmarks.milp_backends --cases chain-200x16 --variants cpsat:table cbc:tuned
    python -m benchmarks.milp_backends --presolve lite         # no dual/bound presolve steps

Cases (fixed seeds):

* ``resnet18@16``, ``resnet50@16``: zoo models on 16 GPUs of the ``abci`` preset, no budget.
* ``chain-200x16``: a chain of 200 layers x 16 strategies with **interval memory** in the
  style of Alpa's ILP (each tensor live from its layer until ``1 + L`` steps later, ``L``
  uniform in ``[1, 4]``) and a binding budget (halfway from the least peak to the peak of the
  unconstrained optimum); costs as in :func:`~benchmarks.instances.random_problem` (compute
  falls and memory rises with the strategy index, resharding 0 on the diagonal).
* ``dag-60x8``: a 60-node DAG x 8 strategies (every node consumes its predecessor and, with
  probability 0.5, one earlier node within 8 steps), each tensor live until its last consumer
  (at least ``1 + L`` steps, ``L`` uniform in ``[1, 12]``), budget as above.
* ``iopddl-G``: the contest instance (816 nodes, integer data, optimum 217,039), read from
  ``../shared/reference/iopddl`` or ``data/`` (:func:`~benchmarks.instances.iopddl_path`).

The chain and the DAG are :func:`~benchmarks.instances.interval_chain` and
:func:`~benchmarks.instances.interval_dag` (``benchmarks/solver_scaling.py --interval`` runs
them too). These are our own generators: the issues' chain and DAG (measured with Alpa's ILP
code) were not published with their seeds, so times here are not comparable with the issues'
figures row by row.

Variants: ``highs``, ``cbc`` (its default options), ``cbc:<name>`` (the option sets in
:data:`CBC_VARIANTS`), ``cpsat`` (its default model) and ``cpsat:<model>`` (each model of
:data:`milp_parallel.solvers.milp.cpsat.MODELS`), optionally with parameter sets of
:data:`CPSAT_PARAMETERS` (``cpsat:linear+lin2``). Every run is on the independent path:
``presolve="milp"`` (the MILP backends' default) unless ``--presolve lite`` (only the
``forbidden``, ``memory``, ``dominance`` and ``fold`` steps: the solver has to prove the
optimum itself; the ``dual`` step alone proves the zoo cases without a budget) or ``none``.

Rows (``case, solver, variant, threads, time_limit_s, wall_s, status, objective, bound, gap,
presolve, proof, machine, date``) are appended to the CSV (default
``benchmarks/results/milp_backends.csv``) as they come, and a table is printed at the end.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import logging
import math
import time
from pathlib import Path
from typing import Callable, Sequence

from benchmarks.instances import (
    RESULTS_DIR,
    interval_chain,
    interval_dag,
    iopddl_problem,
    machine,
    zoo_problem,
)
from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem

RESULTS = RESULTS_DIR / "milp_backends.csv"
FIELDS = ("case", "solver", "variant", "threads", "time_limit_s", "wall_s", "status",
          "objective", "bound", "gap", "presolve", "proof", "machine", "date")
LITE_REDUCTIONS = ("forbidden", "memory", "dominance", "fold")

#: CBC option sets measured (``cbc_options``); ``cbc`` alone runs the backend's default
#: (``cbc.DEFAULT_CBC_OPTIONS``), ``cbc:own`` CBC's own defaults.
CBC_VARIANTS: dict[str, str] = {
    "own": "",
    "nocuts": "-cuts off",
    "nopreprocess": "-preprocess off",
    "strong0": "-strong 0",
    "nocuts-strong0": "-cuts off -strong 0",
    "noheur": "-heuristicsOnOff off",
    "nocuts-noheur": "-cuts off -heuristicsOnOff off",
}

#: CP-SAT parameter sets measured (``cpsat:MODEL+NAME``, e.g. ``cpsat:linear+lin2``).
CPSAT_PARAMETERS: dict[str, str] = {
    "lin1": "linearization_level: 1",
    "lin2": "linearization_level: 2",
    "lin0": "linearization_level: 0",
    "nopresolve": "cp_model_presolve: false",
    "noprobing": "cp_model_probing_level: 0",
    "core": "optimize_with_core: true",
    "eager": "add_lp_constraints_lazily: false",
    "lin2eager": "linearization_level: 2 add_lp_constraints_lazily: false",
}


CASES: dict[str, Callable[[], Problem]] = {
    "resnet18@16": lambda: zoo_problem("resnet18", 16, False),
    "resnet50@16": lambda: zoo_problem("resnet50", 16, False),
    "chain-200x16": interval_chain,
    "dag-60x8": interval_dag,
    "iopddl-G": lambda: iopddl_problem("G"),
}


def default_variants() -> list[str]:
    from milp_parallel.solvers.milp.cpsat import MODELS
    return (["highs", "cbc"] + [f"cbc:{v}" for v in CBC_VARIANTS]
            + [f"cpsat:{m}" for m in MODELS])


def variant_options(spec: str) -> tuple[str, str, dict]:
    """``(solver, variant, options)`` of a variant name such as ``cpsat:table``."""
    solver, _, variant = spec.partition(":")
    opts: dict = {}
    if solver == "cbc" and variant:
        if variant not in CBC_VARIANTS:
            raise SystemExit(f"unknown CBC variant {variant!r}; known: {sorted(CBC_VARIANTS)}")
        opts["cbc_options"] = CBC_VARIANTS[variant]
    elif solver == "cpsat" and variant:
        model, *extras = variant.split("+")
        if model:
            opts["model"] = model
        for extra in extras:
            if extra not in CPSAT_PARAMETERS:
                raise SystemExit(f"unknown CP-SAT parameter set {extra!r}; known: "
                                 f"{sorted(CPSAT_PARAMETERS)}")
        if extras:
            opts["cpsat_parameters"] = " ".join(CPSAT_PARAMETERS[e] for e in extras)
    elif variant:
        raise SystemExit(f"{solver} has no variants")
    if solver == "cpsat" and "linearization_level" not in opts.get("cpsat_parameters", ""):
        # the label names the level that ran (the backend's default can change)
        from milp_parallel.solvers.milp.cpsat import DEFAULT_MODEL, LINEARIZATION_LEVEL
        variant = f"{variant or DEFAULT_MODEL}+lin{LINEARIZATION_LEVEL}"
    return solver, variant or "default", opts


def run(cases: Sequence[str], variants: Sequence[str], *, threads: int, time_limit: float,
        presolve: str, csv_path: Path | None, append: bool = False) -> list[dict]:
    """Solve every case with every variant; a row per pair, written as it comes."""
    stamp = {"machine": machine(), "date": datetime.datetime.now(datetime.timezone.utc)
             .strftime("%Y-%m-%d %H:%M"), "threads": threads, "time_limit_s": time_limit,
             "presolve": presolve}
    out = writer = None
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        new = not append or not csv_path.exists()
        out = open(csv_path, "w" if new else "a", newline="")
        writer = csv.DictWriter(out, fieldnames=FIELDS)
        if new:
            writer.writeheader()
    rows = []
    try:
        for name in cases:
            problem = CASES[name]()
            for spec in variants:
                solver, variant, opts = variant_options(spec)
                opts.update(time_limit=time_limit, threads=threads)
                if presolve == "lite":
                    opts["reductions"] = LITE_REDUCTIONS
                else:
                    opts["presolve"] = presolve
                t0 = time.perf_counter()
                row = {**stamp, "case": name, "solver": solver, "variant": variant}
                try:
                    r = solve_problem(problem, solver, **opts)
                    row.update(status=r.status, objective=r.objective, bound=r.bound,
                               gap=r.gap, proof=r.stats.get("proof") or "")
                except Exception as exc:   # noqa: BLE001 - report and go on
                    row["status"] = f"error: {type(exc).__name__}: {exc}"[:120]
                row["wall_s"] = round(time.perf_counter() - t0, 3)
                rows.append(row)
                print(_fmt(row), flush=True)
                if writer is not None:
                    writer.writerow({k: row.get(k, "") for k in FIELDS})
                    out.flush()
    finally:
        if out is not None:
            out.close()
    return rows


def _fmt(row: dict) -> str:
    def num(x, f="{:.8g}"):
        if x is None or x == "" or (isinstance(x, float) and math.isnan(x)):
            return "-"
        return f.format(x)
    return (f"{row['case']:<13} {row['solver']:<6} {row['variant']:<15} "
            f"{str(row['status'])[:40]:<10} {num(row.get('objective')):>14} "
            f"{num(row.get('bound')):>14} {num(row.get('gap'), '{:.2g}'):>8} "
            f"{num(row.get('wall_s'), '{:.2f}'):>8}")


def print_table(rows: list[dict]) -> None:
    print(f"{'case':<13} {'solver':<6} {'variant':<15} {'status':<10} {'objective':>14} "
          f"{'bound':>14} {'gap':>8} {'wall_s':>8}")
    for row in rows:
        print(_fmt(row))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--variants", nargs="+", default=None,
                    help="e.g. highs cbc cbc:nocuts cpsat cpsat:linear (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--presolve", choices=("milp", "lite", "none"), default="milp")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    ap.add_argument("--append", action="store_true", help="append to the CSV")
    ap.add_argument("--no-csv", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows = run(args.cases, args.variants or default_variants(), threads=args.threads,
               time_limit=args.time_limit, presolve=args.presolve,
               csv_path=None if args.no_csv else args.csv, append=args.append)
    print()
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
