"""The MILP of :mod:`milp_parallel.solvers.milp` solved with CBC through PuLP.

PuLP 3.x bundles a CBC binary (PuLP 4.x, which pip picks on Python >= 3.12, changed its API
and bundles none: pin ``pulp<4``). The MPS file is written here with numpy (building PuLP's
per-variable objects took seconds on 200k columns) and the bundled binary is run directly,
so that it can be stopped: CBC checks ``-sec`` only between phases (a 213k-column root LP ran
33 s past a 5 s limit), so one second past the limit it is killed and the warm start is the
answer. The status comes from the first line of CBC's solution file ("Optimal", "Stopped
on time - objective value ..." = an incumbent, "Infeasible", ...; PuLP's ``LpProblem.status``
calls a stopped run with an incumbent "Optimal"), and the proved lower bound from its log.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from ..errors import SolverError
from ..problem import Problem
from .base import Capabilities, Solver
from .milp import (MIN_SOLVER_SECONDS, MilpModel, build_milp, merge_duplicate_entries, check_options, finish_result,
                   out_of_time_result, time_left, trivial_result, validate_gap,
                   validate_time_limit)
from .result import SolveResult

__all__ = ["CBCSolver", "solve_cbc"]

logger = logging.getLogger(__name__)

_BOUND_RE = re.compile(r"^(?:Lower bound|Best possible):\s*(-?[0-9.eE+-]+|-?inf)", re.M)
#: Seconds CBC may run past its limit before it is stopped (it checks the limit only
#: between phases, e.g. not inside its root LP).
_KILL_GRACE_SECONDS = 1.0
_LOG_BOUND_RE = re.compile(r"best possible\s+(-?[0-9.eE+-]+)", re.I)


def _read_bound(log_text: str) -> float:
    """CBC's proved lower bound from its log (``-inf`` when it printed none)."""
    m = _BOUND_RE.findall(log_text)
    if m:
        try:
            return float(m[-1])
        except ValueError:
            pass
    m = _LOG_BOUND_RE.findall(log_text)
    if m:
        try:
            return float(m[-1])
        except ValueError:
            pass
    return -math.inf


def solve_cbc(problem: Problem, *, time_limit: float | None = None, threads: int | None = None,
              gap: float = 0.0, verbose: bool = False, warm_start=None, reductions=None,
              dominance_work_limit: float = 3e8) -> SolveResult:
    """Solve ``problem`` exactly (or to ``gap``) with PuLP's bundled CBC.

    Parameters
    ----------
    problem : Problem
    time_limit : float, optional
        Seconds for the whole solve (warm start, presolve, the PuLP model and CBC); CBC gets
        what is left after the PuLP model is built (``stats["solver_time_limit"]``).
    threads : int, optional
        CBC threads.
    gap : float
        Relative gap at which to stop (default 0: prove the optimum).
    verbose : bool
        Log CBC's output at INFO level.
    warm_start : sequence of int, optional
        A starting assignment (given to CBC as a MIP start when feasible).
    reductions : sequence of str, optional
        Presolve steps (default all).

    Returns
    -------
    SolveResult
        ``optimal`` only when CBC proved it (``sol_status`` 1); ``feasible`` with the bound
        read from CBC's log when stopped early; ``infeasible``; ``unknown``.

    Raises
    ------
    SolverError
        If CBC fails to run.
    """
    import pulp

    t0 = time.perf_counter()
    gap = validate_gap(gap)
    time_limit = validate_time_limit(time_limit)
    model, warm, _ = build_milp(problem, warm_start=warm_start, reductions=reductions,
                                dominance_work_limit=dominance_work_limit,
                                time_limit=time_limit, t0=t0)
    done = trivial_result(problem, model, "cbc", warm, t0)
    if done is not None:
        return done
    with warnings.catch_warnings():
        # PuLP 3.3 warns about its 4.0 API; 3.x is what bundles CBC.
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve(problem, model, warm, t0, time_limit=time_limit, threads=threads,
                      gap=gap, verbose=verbose)


def _names(prefix: str, n: int) -> np.ndarray:
    return np.char.add(prefix, np.arange(n).astype(str)) if n else np.zeros(0, dtype=str)


def write_mps(model: MilpModel, path: str) -> None:
    """Write the model as an MPS file for CBC (vectorised; values with 17 digits).

    Columns are ``C<j>``, rows ``R<i>``; the ``x`` columns (first, contiguous) sit between
    integer markers and get ``BV`` bounds, the ``y`` columns ``UP 1``.
    """
    n_cols, n_rows = model.n_cols, model.n_rows
    start, index, value = merge_duplicate_entries(model.row_start, model.row_index,
                                                  model.row_value)
    row_of = np.repeat(np.arange(n_rows), np.diff(start))
    order = np.lexsort((row_of, index))               # column-major
    col_names, row_names = _names("C", n_cols), _names("R", n_rows)
    kind = np.where(model.row_lower == model.row_upper, "E",
                    np.where(np.isfinite(model.row_upper), "L", "G"))
    rhs = np.where(kind == "G", model.row_lower, model.row_upper)
    # Entries: objective first per column, then the matrix, sorted by column.
    obj_cols = np.nonzero(model.col_cost != 0)[0]
    ent_col = np.concatenate([obj_cols, index[order]])
    ent_row = np.concatenate([np.full(obj_cols.size, "OBJ"), row_names[row_of[order]]])
    ent_val = np.concatenate([model.col_cost[obj_cols], value[order]])
    srt = np.argsort(ent_col, kind="stable")
    ent_col, ent_row, ent_val = ent_col[srt], ent_row[srt], ent_val[srt]
    lines = [f"    {c:<8}  {r:<8}  {v!r}\n" for c, r, v in
             zip(col_names[ent_col].tolist(), ent_row.tolist(), ent_val.tolist())]
    n_x = model.n_x
    split = int(np.searchsorted(ent_col, n_x))
    with open(path, "w") as f:
        f.write("NAME          MILPPARALLEL\nROWS\n N  OBJ\n")
        f.write("".join(f" {k}  {r:<8}\n" for k, r in zip(kind.tolist(), row_names.tolist())))
        f.write("COLUMNS\n")
        if n_x:
            f.write("    MARK      'MARKER'                 'INTORG'\n")
        f.write("".join(lines[:split]))
        if n_x:
            f.write("    MARK      'MARKER'                 'INTEND'\n")
        f.write("".join(lines[split:]))
        # A column in no row and without cost still has to be declared.
        seen = np.zeros(n_cols, dtype=bool)
        seen[ent_col] = True
        f.write("".join(f"    {c:<8}  OBJ       0\n" for c in col_names[~seen].tolist()))
        f.write("RHS\n")
        nz = np.nonzero(rhs != 0)[0]
        f.write("".join(f"    RHS       {row_names[i]:<8}  {float(rhs[i])!r}\n" for i in nz))
        f.write("BOUNDS\n")
        f.write("".join(f" BV BND       {c:<8}\n" for c in col_names[:n_x].tolist()))
        f.write("".join(f" UP BND       {c:<8}  1\n" for c in col_names[n_x:].tolist()))
        f.write("ENDATA\n")


def _write_start(model: MilpModel, col: np.ndarray, path: str) -> None:
    names = _names("C", model.n_cols)
    with open(path, "w") as f:
        f.write("Stopped on time - objective value 0\n")
        f.write("".join(f"{i:>7} {n} {float(v)!r} 0\n"
                        for i, (n, v) in enumerate(zip(names.tolist(), col.tolist()))))


def _read_solution(path: str, n_cols: int) -> tuple[str, np.ndarray | None]:
    """CBC's solution file: its first line, and the column values (``None`` without)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().splitlines()
    except OSError:
        return "no solution file", None
    if not text:
        return "empty solution file", None
    head = text[0].strip()
    values = np.zeros(n_cols)
    for line in text[1:]:
        parts = line.split()
        if parts and parts[0] == "**":
            parts = parts[1:]
        if len(parts) >= 3 and parts[1].startswith("C"):
            try:
                values[int(parts[1][1:])] = float(parts[2])
            except ValueError:
                continue
    return head, values


def _solve(problem, model, warm, t0, *, time_limit, threads, gap, verbose):
    import pulp

    cbc_path = pulp.PULP_CBC_CMD().path
    tmp = tempfile.mkdtemp(prefix="milp_parallel_cbc_")
    mps, sol, mst = (os.path.join(tmp, n) for n in ("model.mps", "model.sol", "start.mst"))
    try:
        write_mps(model, mps)
        args = [cbc_path, mps]
        if warm is not None:
            col = model.encode(warm)
            if col is not None:
                _write_start(model, col, mst)
                args += ["-mips", mst]
        left = time_left(t0, time_limit)
        if left is not None:
            if left < MIN_SOLVER_SECONDS:
                return out_of_time_result(problem, model, "cbc", warm, t0)
            args += ["-sec", repr(float(left)), "-timeMode", "elapsed"]
        args += ["-ratio", repr(float(gap))]
        if threads is not None:
            args += ["-threads", str(int(threads))]
        args += ["-solve", "-solution", sol]
        t1 = time.perf_counter()
        killed = False
        try:
            # CBC checks its limit only between phases (its root LP can run for long past
            # it): past the limit plus a grace period it is stopped, and the warm start
            # is the answer.
            grace = None if left is None else left + _KILL_GRACE_SECONDS
            proc = subprocess.run(args, capture_output=True, text=True, timeout=grace,
                                  cwd=tmp)
            log_text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            killed = True
            log_text = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) \
                else (exc.stdout or "")
        except OSError as exc:
            raise SolverError(f"cbc: could not run CBC at {cbc_path} ({exc})") from None
        solve_seconds = time.perf_counter() - t1
        head, values = (("killed at the time limit", None) if killed
                        else _read_solution(sol, model.n_cols))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        logger.info("CBC log:\n%s", log_text)
    word = head.split()[0] if head else ""
    claimed = word == "Optimal"
    infeasible = word == "Infeasible" or head.startswith("Integer infeasible")
    has_sol = values is not None and (claimed or "objective value" in head) and not infeasible
    if not has_sol:
        values = None
    if not killed and not head:
        raise SolverError(f"cbc: CBC gave no answer; its log ends with: {log_text[-300:]}")
    # A proved optimum: CBC's own proof (it may use the integrality of the objective); the
    # log's "best possible" lines are from the search, not the final bound.
    bound = float(values @ model.col_cost) if claimed and values is not None \
        else _read_bound(log_text)
    stats = {"solver_time_limit": left, "killed_at_time_limit": killed}
    return finish_result(problem, model, "cbc", values=values, claimed_optimal=claimed,
                         bound=bound, infeasible=infeasible and not has_sol,
                         native_status=head, seconds=time.perf_counter() - t0,
                         solve_seconds=solve_seconds, warm=warm, extra_stats=stats)


class CBCSolver(Solver):
    """CBC through PuLP (registry name ``"cbc"``); see :func:`solve_cbc`."""

    name = "cbc"
    package = "pulp"
    module = "pulp"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True)

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        check_options(self.name, options, set())
        return solve_cbc(problem, **options)
