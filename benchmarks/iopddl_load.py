"""Loading the IOPDDL contest instances: ``Problem.from_iopddl`` against plain ``json.load``.

For every instance of ``../shared/reference/iopddl/`` (skipped with a message when the folder
is absent), in one process and side by side: the seconds of plain ``json.loads`` of the
gunzipped file (the garbage collector on, as Python runs it; the file read and gunzip
included), and of ``Problem.from_iopddl`` (the same read, every check of the strict reader and
of ``Problem``'s validation, the parse's memory freed). Each is run ``--repeat`` times,
alternating, and the least time of each is kept: on a shared machine the least is the run the
other processes disturbed least, and the ratio of the two is what the issue's target reads
(issue 25 item 6: at most 1.5 on D).

Usage::

    python -m benchmarks.iopddl_load                   # every shared instance, 3 repeats
    python -m benchmarks.iopddl_load --instances D --repeat 5

Columns: instance, nodes, edges, entries (cost entries of nodes and edges), json_load_s,
from_iopddl_s, ratio, repeat, machine, date.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import gzip
import json
import time
from pathlib import Path

from benchmarks.instances import IOPDDL_DIR, RESULTS_DIR, machine
from milp_parallel.problem import Problem

DEFAULT_CSV = RESULTS_DIR / "iopddl_load.csv"
FIELDS = ("instance", "nodes", "edges", "entries", "json_load_s", "from_iopddl_s", "ratio",
          "repeat", "machine", "date")
LETTERS = ("A", "C", "D", "G", "K", "L", "M", "Q", "R", "S", "T", "U")


def _json_seconds(path: Path) -> float:
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        raw = f.read()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    seconds = time.perf_counter() - t0
    del doc
    return seconds


def _problem_seconds(path: Path) -> tuple[float, Problem]:
    gc.collect()
    t0 = time.perf_counter()
    problem = Problem.from_iopddl(path)
    return time.perf_counter() - t0, problem


def measure(path: Path, repeat: int) -> dict:
    """The least ``json.loads`` and ``from_iopddl`` seconds of ``repeat`` alternating runs."""
    plain, ours, problem = [], [], None
    for _ in range(repeat):
        plain.append(_json_seconds(path))
        problem = None
        seconds, problem = _problem_seconds(path)
        ours.append(seconds)
    entries = int(problem.n_configs.sum()) + sum(t.size for t in problem.edge_costs)
    return {"nodes": problem.n_nodes, "edges": problem.n_edges, "entries": entries,
            "json_load_s": min(plain), "from_iopddl_s": min(ours),
            "ratio": min(ours) / min(plain), "repeat": repeat}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instances", nargs="*", default=list(LETTERS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--folder", type=Path, default=IOPDDL_DIR)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"the IOPDDL instances are not available ({args.folder} is absent); nothing "
              "to run")
        return 0
    if args.repeat < 1 or set(args.instances) - set(LETTERS):
        ap.error(f"--repeat >= 1 and instances among {LETTERS}")
    stamp = {"machine": machine(), "date": datetime.date.today().isoformat()}
    print(f"machine: {stamp['machine']}; least of {args.repeat} alternating runs each")
    print(f"{'inst':<4} {'nodes':>6} {'edges':>7} {'entries':>9} {'json.load':>9} "
          f"{'from_iopddl':>11} {'ratio':>6}")
    rows = []
    for inst in args.instances:
        path = args.folder / f"asplos-2025-iopddl-{inst}.json.gz"
        if not path.exists():
            print(f"{inst}: {path} is absent; skipped")
            continue
        row = {"instance": inst, **measure(path, args.repeat), **stamp}
        rows.append(row)
        print(f"{inst:<4} {row['nodes']:>6} {row['edges']:>7} {row['entries']:>9} "
              f"{row['json_load_s']:>9.2f} {row['from_iopddl_s']:>11.2f} "
              f"{row['ratio']:>6.2f}", flush=True)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in row.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
