"""The MILP of :mod:`milp_parallel.solvers.milp` solved with CBC through PuLP.

PuLP 3.x bundles a CBC binary (PuLP 4.x, which pip picks on Python >= 3.12, changed its API
and bundles none: pin ``pulp<4``). PuLP writes an MPS file and runs CBC; its
``LpProblem.status`` says "Optimal" even for a time-limited run that merely holds an
incumbent, so the status here comes from ``sol_status`` (1 optimal, 2 integer feasible,
0 no solution, -1 infeasible) and the proved lower bound is read from CBC's log.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import time
import warnings
from typing import Any

import numpy as np

from ..errors import SolverError
from ..problem import Problem
from .base import Capabilities, Solver
from .milp import (MIN_SOLVER_SECONDS, build_milp, check_options, finish_result,
                   out_of_time_result, time_left, trivial_result, validate_gap,
                   validate_time_limit)
from .result import SolveResult

__all__ = ["CBCSolver", "solve_cbc"]

logger = logging.getLogger(__name__)

_BOUND_RE = re.compile(r"^(?:Lower bound|Best possible):\s*(-?[0-9.eE+-]+|-?inf)", re.M)
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
        # PuLP 3.3 warns about its 4.0 API on every variable; 3.x is what bundles CBC.
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve(pulp, problem, model, warm, t0, time_limit=time_limit, threads=threads,
                      gap=gap, verbose=verbose)


def _solve(pulp, problem, model, warm, t0, *, time_limit, threads, gap, verbose):
    prob = pulp.LpProblem("milp_parallel", pulp.LpMinimize)
    cols = [pulp.LpVariable(f"c{i}", lowBound=0, upBound=1,
                            cat=pulp.LpBinary if model.col_integer[i] else pulp.LpContinuous)
            for i in range(model.n_cols)]
    prob += pulp.LpAffineExpression(
        [(cols[i], float(c)) for i, c in enumerate(model.col_cost) if c != 0]) + 0.0
    for r, (idx, val, lo, hi) in enumerate(model.rows()):
        expr = pulp.LpAffineExpression([(cols[int(i)], float(v)) for i, v in zip(idx, val)])
        if lo == hi:
            prob += pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{r}", hi)
        else:
            if np.isfinite(hi):
                prob += pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{r}", hi)
            if np.isfinite(lo):
                prob += pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{r}l", lo)
    use_warm = False
    if warm is not None:
        col = model.encode(warm)
        if col is not None:
            for var, v in zip(cols, col):
                var.setInitialValue(float(v))
            use_warm = True
    left = time_left(t0, time_limit)
    if left is not None and left < MIN_SOLVER_SECONDS:
        return out_of_time_result(problem, model, "cbc", warm, t0)
    fd, log_path = tempfile.mkstemp(prefix="milp_parallel_cbc_", suffix=".log")
    os.close(fd)
    try:
        cmd = pulp.PULP_CBC_CMD(msg=False, timeLimit=left, threads=threads,
                                gapRel=gap, warmStart=use_warm, logPath=log_path)
        t1 = time.perf_counter()
        try:
            prob.solve(cmd)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"cbc: PuLP could not run CBC ({exc})") from None
        solve_seconds = time.perf_counter() - t1
        with open(log_path, encoding="utf-8", errors="replace") as f:
            log_text = f.read()
    finally:
        try:
            os.remove(log_path)
        except OSError:
            pass
    if verbose:
        logger.info("CBC log:\n%s", log_text)
    sol = prob.sol_status
    native = f"status={pulp.LpStatus.get(prob.status, prob.status)}, " \
             f"sol_status={pulp.LpSolution.get(sol, sol)}"
    claimed = sol == pulp.LpSolutionOptimal
    infeasible = sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible
    has_sol = sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    values = None
    if has_sol:
        values = np.array([v.varValue if v.varValue is not None else 0.0 for v in cols])
    # A proved optimum: CBC's own proof (it may use the integrality of the objective); the
    # log's "best possible" lines are from the search, not the final bound.
    bound = float(values @ model.col_cost) if claimed and values is not None \
        else _read_bound(log_text)
    return finish_result(problem, model, "cbc", values=values, claimed_optimal=claimed,
                         bound=bound, infeasible=infeasible and not has_sol,
                         native_status=native, seconds=time.perf_counter() - t0,
                         solve_seconds=solve_seconds, warm=warm,
                         extra_stats={"solver_time_limit": left})


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
