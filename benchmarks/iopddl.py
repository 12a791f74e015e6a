"""The IOPDDL contest instances (ASPLOS/EuroSys 2025): our cost against the contest's entries.

Runs every instance of ``../shared/reference/iopddl/`` (the 12 shared of the contest's 25;
skipped with a message when the folder is absent) with each solver of ``--solvers`` at the
contest's time limit for that instance times ``--scale``. Each run is its own process
(:func:`milp_parallel.isolation.run_isolated`), killed at three times the limit plus
:data:`LOAD_ALLOWANCE` seconds. The clock starts before the file is read, as the contest's
did: the child loads the instance (``Problem.from_iopddl``), and the solver gets what is left
of the limit (the limit less the load) as its ``time_limit``. Rows are appended to the CSV as
they finish, so an interrupted run keeps what it did; ``--resume`` skips the (instance,
solver, time limit, threads) rows already in the CSV (a CSV written before the ``load_s`` column is
rewritten with the new header, its old rows' new columns empty: in those rows ``wall_s`` is
the solve alone, the load not counted).

Threads: ``--threads`` (default 1) goes to every solver. The contest machine had 8 cores
and 32 GB; this machine has the cores printed in the table header and the ``machine``
column (2 when this was written): a run with ``--threads 8`` here would only time-slice.
The comparison with the contest's entries is therefore on a quarter of its hardware or less.

Usage::

    python -m benchmarks.iopddl --scale 0.05 --instances G S           # a quick check
    python -m benchmarks.iopddl --scale 0.25 --solvers auto cpsat cbc highs
    python -m benchmarks.iopddl --resume                                # full limits

Columns: instance, nodes, edges, solver, threads, time_limit_s, load_s (importing the
package and reading the file into a Problem, in the child), wall_s (load and solve: from
before the read to the answer, in the child), peak_rss_mib (the child's peak resident
memory, loading included), status, cost, bound, gap, best_contest_cost (the least valid
entry of any team), winner_cost (team01's), ratio_to_best, ratio_to_winner, uses_sentinel
(an entry >= 1e18 chosen), sentinel_entries, held (wall_s, the load included, within limit
+ max(1 s, 5%)), note (model_skipped and errors), copies (how many copies of the same run
shared the machine: 1 alone; ``--beside N`` runs N more at once, each its own row; empty in
rows written before the column, which other work may have shared), machine, date.

Under load (issue 25.7: the answer must hold up when the machine is shared)::

    python -m benchmarks.iopddl --resume --solvers auto --threads 2 --beside 1
"""

from __future__ import annotations

import argparse
import csv
import datetime
import logging
import math
from pathlib import Path

from benchmarks.instances import IOPDDL_DIR, RESULTS_DIR, machine
from milp_parallel.isolation import RETURNED, run_isolated

DEFAULT_CSV = RESULTS_DIR / "iopddl.csv"
#: Contest time limits in seconds (``shared/reference/README.md``).
CONTEST_LIMITS = {"A": 60, "C": 60, "D": 60, "G": 120, "K": 180, "L": 180, "M": 180,
                  "Q": 240, "R": 240, "S": 240, "T": 240, "U": 300}
WINNER = "team01"
#: The least ``time_limit`` the solver gets when the load took (nearly) the whole limit.
MIN_SOLVE_SECONDS = 0.5
#: Seconds added to the hard kill (3 x the limit) for starting the child and loading.
LOAD_ALLOWANCE = 30.0
FIELDS = ("instance", "nodes", "edges", "solver", "threads", "time_limit_s", "load_s",
          "wall_s", "peak_rss_mib", "status", "cost", "bound", "gap", "best_contest_cost",
          "winner_cost", "ratio_to_best", "ratio_to_winner", "uses_sentinel",
          "sentinel_entries", "held", "note", "copies", "machine", "date")


def contest_results(folder: Path) -> dict[str, tuple[float, float]]:
    """Per instance letter: (least valid contest cost, the winner's cost); nan if none."""
    out: dict[str, tuple[float, float]] = {}
    path = folder / "contest-final-results.csv"
    if not path.exists():
        return out
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    for j, letter in enumerate(header[1:], start=1):
        costs, winner = [], math.nan
        for row in rows[1:]:
            if j < len(row) and row[j].strip():
                try:
                    c = float(row[j])
                except ValueError:
                    continue
                costs.append(c)
                if row[0].strip() == WINNER:
                    winner = c
        out[letter.strip()] = (min(costs) if costs else math.nan, winner)
    return out


def solve_one(path: str, solver: str, limit: float, threads: int) -> dict:
    """In the child: load and solve within ``limit`` seconds counted from before the read
    (the solver gets the limit less the load), report."""
    import resource
    import time

    t0 = time.perf_counter()
    from milp_parallel.problem import Problem
    from milp_parallel.solvers import solve_problem
    from milp_parallel.solvers.milp.backend import sentinel_entries
    problem = Problem.from_iopddl(path)
    load = time.perf_counter() - t0
    r = solve_problem(problem, solver, time_limit=max(limit - load, MIN_SOLVE_SECONDS),
                      threads=threads)
    wall = time.perf_counter() - t0
    bad = sentinel_entries(problem, r.assignment) if r.assignment is not None else 0
    feasible = r.assignment is not None and problem.evaluate(r.assignment).feasible
    return {"nodes": problem.n_nodes, "edges": problem.n_edges, "load_s": load, "wall_s": wall,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "status": r.status, "cost": r.objective, "bound": r.bound, "gap": r.gap,
            "sentinel_entries": bad, "feasible": feasible,
            "note": str(r.stats.get("model_skipped") or r.stats.get("auto") or "")}


def upgrade_header(csv_path: Path) -> None:
    """Rewrite ``csv_path`` with :data:`FIELDS` as its header when it has other columns (a
    CSV from before a column was added): each old row keeps its values, new columns empty."""
    if not csv_path.exists():
        return
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) == FIELDS:
            return
        rows = list(reader)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, restval="", extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _ratio(cost: float, ref: float) -> float:
    return cost / ref if math.isfinite(cost) and math.isfinite(ref) and ref > 0 else math.nan


def done_keys(csv_path: Path) -> set[tuple[str, str, str, str, str]]:
    """(instance, solver, time limit, threads, copies) of the rows already in ``csv_path``
    (``auto`` with ``--threads 2`` runs the portfolio: another row than ``auto`` with one
    thread; a row without ``copies`` counts as one copy)."""
    if not csv_path.exists():
        return set()
    with open(csv_path, newline="") as f:
        return {(r["instance"], r["solver"], f"{float(r['time_limit_s']):g}",
                 str(r.get("threads") or 1), str(r.get("copies") or 1))
                for r in csv.DictReader(f) if r.get("time_limit_s")}


def run(instances: list[str], solvers: list[str], scale: float, threads: int,
        csv_path: Path, resume: bool, folder: Path = IOPDDL_DIR, beside: int = 0
        ) -> list[dict]:
    """Run every (instance, solver) pair, with ``beside`` more copies of each at the same
    time; append each row to ``csv_path`` as it finishes."""
    from concurrent.futures import ThreadPoolExecutor
    copies = 1 + int(beside)
    contest = contest_results(folder)
    stamp = {"machine": machine(), "date": datetime.date.today().isoformat()}
    skip = done_keys(csv_path) if resume else set()
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    if resume:
        upgrade_header(csv_path)
    new_file = not csv_path.exists() or not resume
    rows: list[dict] = []
    print(f"machine: {stamp['machine']} (the contest machine had 8 cores, 32 GB); "
          f"threads per solver: {threads}; limits: contest x {scale:g}")
    head = (f"{'inst':<4} {'solver':<6} {'limit':>6} {'load':>5} {'wall':>7} {'MiB':>6} "
            f"{'status':<9} "
            f"{'cost':>12} {'gap':>7} {'x best':>8} {'x winner':>8} sentinel held")
    print(head)
    with open(csv_path, "w" if new_file else "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            w.writeheader()
        for inst in instances:
            path = folder / f"asplos-2025-iopddl-{inst}.json.gz"
            if not path.exists():
                print(f"{inst}: {path} is absent; skipped")
                continue
            limit = round(CONTEST_LIMITS[inst] * scale, 3)
            best, winner = contest.get(inst, (math.nan, math.nan))
            for solver in solvers:
                if (inst, solver, f"{limit:g}", str(threads), str(copies)) in skip:
                    print(f"{inst:<4} {solver:<6} {limit:>6g}  (in the CSV; skipped)")
                    continue
                # every copy its own process, all started together
                with ThreadPoolExecutor(copies) as pool:
                    runs = list(pool.map(lambda _: run_isolated(
                        "benchmarks.iopddl:solve_one", str(path), solver, limit, threads,
                        kill_after=3 * limit + LOAD_ALLOWANCE), range(copies)))
                for res in runs:
                    row = {"instance": inst, "solver": solver, "threads": threads,
                           "time_limit_s": limit, "best_contest_cost": best,
                           "winner_cost": winner, "copies": copies, **stamp}
                    _fill(row, res, limit, best, winner)
                    rows.append(row)
                    w.writerow({k: _fmt(row.get(k, "")) for k in FIELDS})
                    f.flush()
                    print(_line(row), flush=True)
    return rows


def _fill(row: dict, res, limit: float, best: float, winner: float) -> None:
    """The row's measured columns from one isolated run."""
    if res.status == RETURNED:
        v = res.value
        row.update({k: v[k] for k in ("nodes", "edges", "load_s", "wall_s", "peak_rss_mib",
                                      "status", "cost", "bound", "gap", "sentinel_entries",
                                      "note")})
        row["uses_sentinel"] = v["sentinel_entries"] > 0
        row["ratio_to_best"] = _ratio(v["cost"], best)
        row["ratio_to_winner"] = _ratio(v["cost"], winner)
        row["held"] = v["wall_s"] <= limit + max(1.0, 0.05 * limit)
        if math.isfinite(v["cost"]) and not v["feasible"]:
            row["note"] = (row["note"] + "; ASSIGNMENT INFEASIBLE").strip("; ")
    else:
        row.update({"status": res.status, "wall_s": res.seconds, "held": False,
                    "note": res.error.splitlines()[-1][:200] if res.error else ""})


def _fmt(x):
    if isinstance(x, float):
        return f"{x:.10g}"
    return x


def _line(r: dict) -> str:
    def num(x, spec):
        return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "-"
    return (f"{r['instance']:<4} {r['solver']:<6} {r['time_limit_s']:>6g} "
            f"{num(r.get('load_s'), '5.1f')} {num(r.get('wall_s'), '7.1f')} "
            f"{num(r.get('peak_rss_mib'), '6.0f')} "
            f"{str(r.get('status', ''))[:9]:<9} {num(r.get('cost'), '12.4g')} "
            f"{num(r.get('gap'), '7.3f')} {num(r.get('ratio_to_best'), '8.3f')} "
            f"{num(r.get('ratio_to_winner'), '8.3f')} "
            f"{'YES' if r.get('uses_sentinel') else 'no':<8} "
            f"{'yes' if r.get('held') else 'NO'}  {r.get('note', '')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="*", default=sorted(CONTEST_LIMITS),
                    help="instance letters (default: all 12 shared)")
    ap.add_argument("--solvers", nargs="*", default=["auto", "highs", "cbc", "cpsat"])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="time limit = contest limit x scale (default 1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per solver (default 1; this machine's cores are printed)")
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--resume", action="store_true",
                    help="append to the CSV, skipping (instance, solver, limit, threads) rows "
                         "in it (without it the CSV is rewritten)")
    ap.add_argument("--folder", type=Path, default=IOPDDL_DIR)
    ap.add_argument("--beside", type=int, default=0,
                    help="run this many more copies of each run at the same time, each its "
                         "own row (robustness under load; default 0: alone)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not args.folder.is_dir():
        print(f"the IOPDDL instances are not available ({args.folder} is absent); nothing "
              "to run")
        return 0
    unknown = [i for i in args.instances if i not in CONTEST_LIMITS]
    if unknown or not args.scale > 0 or args.threads < 1 or args.beside < 0:
        ap.error(f"instances must be among {sorted(CONTEST_LIMITS)} (got {unknown}), "
                 "--scale > 0, --threads >= 1, --beside >= 0")
    run(args.instances, args.solvers, args.scale, args.threads, args.csv, args.resume,
        args.folder, args.beside)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
