"""The MILP of :mod:`milp_parallel.solvers.milp` solved with OR-Tools CP-SAT.

CP-SAT works over integers, so the float model is scaled:

* **memory rows** (per row, by a power of two ``s``): coefficients rounded **up**, the budget
  rounded **down**, so every CP-SAT-feasible assignment is feasible for the float problem.
  When the data are integers (IOPDDL) ``s = 1`` and nothing is rounded. Otherwise ``s`` makes
  the row's largest sum about ``2**40``, and the rounding can only exclude assignments whose
  usage is within about ``n_row_nodes * 2**-40`` (relative) of the budget: CP-SAT's
  "optimal" is then optimal among the others (``stats["memory_rounded"]`` says so).
* **costs** are scaled by one power of two ``s`` (so the largest possible objective is about
  ``2**50``) and rounded to the nearest integer; with integer costs ``s = 1`` and nothing is
  rounded. With rounding, every assignment's scaled cost is off by at most
  ``N/2`` (``N`` = free nodes + edges left: the terms of one assignment), so the bound given
  back is CP-SAT's bound minus that, divided by ``s``: a proved bound for the float problem.
  The answer is re-evaluated on the float problem; the status is ``optimal`` only when that
  bound is within :data:`~milp_parallel.solvers.milp.OPTIMALITY_RTOL` of the objective.
* ``y`` becomes Boolean (with integral ``x`` the marginal constraints force ``y`` integral).

OR-Tools 9.15's CP-SAT can certify a wrong optimum on linear rows over exactly-one groups with
large coefficients (or-tools issue 5293): the offending presolve step is switched off with
``presolve_inclusion_work_limit = 0``.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ..errors import SolverError
from ..problem import Problem
from .base import Capabilities, Solver
from .milp import (MIN_SOLVER_SECONDS, build_milp, check_options, finish_result,
                   out_of_time_result, time_left, trivial_result, validate_gap,
                   validate_time_limit)
from .result import SolveResult

__all__ = ["CPSATSolver", "solve_cpsat", "scale_costs", "scale_memory_row"]

logger = logging.getLogger(__name__)

_COST_BITS = 50
_MEMORY_BITS = 40


def _is_integral(a: np.ndarray) -> bool:
    return bool(np.all(a == np.round(a)))


def scale_costs(costs: np.ndarray, max_total: float) -> tuple[np.ndarray, float, bool]:
    """Integer costs for CP-SAT.

    Parameters
    ----------
    costs : numpy.ndarray
        Float objective coefficients (finite, ``>= 0``).
    max_total : float
        The largest objective any assignment can have (sets the scale).

    Returns
    -------
    tuple
        ``(integer costs, scale s, exact)``: ``int_costs ~= s * costs``; ``exact`` when no
        rounding happened.

    Examples
    --------
    >>> scale_costs(np.array([3.0, 5.0]), 8.0)
    (array([3, 5]), 1.0, True)
    """
    if costs.size == 0:
        return costs.astype(np.int64), 1.0, True
    if _is_integral(costs) and max_total <= 2.0 ** _COST_BITS:
        return costs.astype(np.int64), 1.0, True
    s = 2.0 ** min(_COST_BITS - math.ceil(math.log2(max(max_total, 1e-300))), 900)
    scaled = costs * s
    out = np.round(scaled)
    return out.astype(np.int64), s, bool(np.all(out == scaled))


def scale_memory_row(coefs: np.ndarray, rhs: float) -> tuple[np.ndarray, int, bool]:
    """Integer memory row ``coefs . x <= rhs`` such that integer-feasible implies feasible.

    Coefficients are rounded up and the budget down, after scaling both by one power of two.

    Returns
    -------
    tuple
        ``(integer coefs, integer rhs, exact)``.

    Examples
    --------
    >>> c, r, exact = scale_memory_row(np.array([0.3, 0.7]), 1.0)
    >>> bool(np.all(c / 2.0**40 >= [0.3, 0.7])), r <= 2**40, exact
    (True, True, False)
    """
    total = float(coefs.sum())
    big = max(total, rhs, 1e-300)
    if _is_integral(coefs) and float(rhs).is_integer() and big <= 2.0 ** _COST_BITS:
        return coefs.astype(np.int64), int(rhs), True
    s = 2.0 ** min(_MEMORY_BITS - math.ceil(math.log2(big)), 900)
    c = np.ceil(coefs * s)
    r = math.floor(rhs * s)
    exact = bool(np.all(c == coefs * s)) and r == rhs * s
    return c.astype(np.int64), int(r), exact


def solve_cpsat(problem: Problem, *, time_limit: float | None = None, threads: int | None = None,
                gap: float = 0.0, verbose: bool = False, warm_start=None, reductions=None,
                dominance_work_limit: float = 3e8, random_seed: int = 0) -> SolveResult:
    """Solve ``problem`` exactly (or to ``gap``) with CP-SAT.

    Parameters
    ----------
    problem : Problem
    time_limit : float, optional
        Seconds for the whole solve (warm start, presolve, the CP-SAT model); CP-SAT gets
        what is left as ``max_time_in_seconds`` (``stats["solver_time_limit"]``).
    threads : int, optional
        ``num_workers`` (CP-SAT's default: all cores).
    gap : float
        ``relative_gap_limit`` (default 0: prove the optimum).
    verbose : bool
        CP-SAT's search log.
    warm_start : sequence of int, optional
        Given to CP-SAT as a hint when feasible.
    reductions : sequence of str, optional
        Presolve steps (default all).
    random_seed : int

    Returns
    -------
    SolveResult
        Stats add ``cost_scale``, ``cost_rounded``, ``memory_rounded``.

    Raises
    ------
    SolverError
        If CP-SAT calls the model invalid.
    """
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    gap = validate_gap(gap)
    time_limit = validate_time_limit(time_limit)
    model, warm, _ = build_milp(problem, warm_start=warm_start, reductions=reductions,
                                dominance_work_limit=dominance_work_limit,
                                time_limit=time_limit, t0=t0)
    done = trivial_result(problem, model, "cpsat", warm, t0)
    if done is not None:
        return done
    red = model.reduced
    # Largest objective: per node its dearest config, per edge its dearest pair.
    max_total = sum(float(red.node_costs[v].max()) for v in red.free_nodes)
    max_total += sum(float(t[np.isfinite(t)].max()) for t in red.edge_costs
                     if np.isfinite(t).any())
    icost, s, cost_exact = scale_costs(model.col_cost, max_total)

    m = cp_model.CpModel()
    cols = [m.new_bool_var(f"c{i}") for i in range(model.n_cols)]
    memory_exact = True
    n_fixed_rows = model.n_onehot + model.n_marginal
    for r, (idx, val, lo, hi) in enumerate(model.rows()):
        vs = [cols[int(i)] for i in idx]
        if r < model.n_onehot:
            m.add_exactly_one(vs)
        elif r < n_fixed_rows:
            m.add(cp_model.LinearExpr.weighted_sum(vs, [int(v) for v in val]) == 0)
        else:
            c, rhs, exact = scale_memory_row(val, hi)
            memory_exact &= exact
            m.add(cp_model.LinearExpr.weighted_sum(vs, [int(x) for x in c]) <= rhs)
    nz = np.nonzero(icost)[0]
    m.minimize(cp_model.LinearExpr.weighted_sum([cols[int(i)] for i in nz],
                                                [int(icost[i]) for i in nz]))
    if warm is not None:
        col = model.encode(warm)
        if col is not None:
            for var, v in zip(cols, col):
                m.add_hint(var, int(round(v)))
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.presolve_inclusion_work_limit = 0      # or-tools issue 5293
    prm.log_search_progress = bool(verbose)
    prm.random_seed = int(random_seed)
    prm.relative_gap_limit = float(gap)
    if gap == 0:
        prm.absolute_gap_limit = 0.0 if not cost_exact else 0.5
    left = time_left(t0, time_limit)
    if left is not None:
        if left < MIN_SOLVER_SECONDS:
            return out_of_time_result(problem, model, "cpsat", warm, t0)
        prm.max_time_in_seconds = float(left)
    if threads is not None:
        prm.num_workers = int(threads)
    t1 = time.perf_counter()
    st = solver.solve(m)
    solve_seconds = time.perf_counter() - t1
    if st == cp_model.MODEL_INVALID:
        raise SolverError(f"cpsat: CP-SAT rejected the model: {m.validate()}")
    claimed = st == cp_model.OPTIMAL
    infeasible = st == cp_model.INFEASIBLE
    values = None
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # The response lists every variable's value in creation order (``cols`` were made
        # first): one array copy instead of a Python call per column (0.5 s on 200k).
        raw = np.asarray(solver.response_proto.solution, dtype=float)
        if raw.size >= len(cols) and all(c.index == i for i, c in
                                         ((0, cols[0]), (len(cols) - 1, cols[-1]))):
            values = raw[:len(cols)]
        else:
            values = np.array([solver.value(v) for v in cols], dtype=float)
    n_terms = red.free_nodes.size + len(red.edge_costs)
    bound = -math.inf
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        b = float(solver.best_objective_bound)
        if math.isfinite(b):
            bound = (b - (0.0 if cost_exact else 0.5 * n_terms)) / s
    if claimed and not memory_exact:
        logger.info("cpsat: memory rows were rounded (up by at most 2**-40 relative); "
                    "optimal among assignments not within that of the budget")
    return finish_result(problem, model, "cpsat", values=values, claimed_optimal=claimed,
                         bound=bound, infeasible=infeasible, native_status=solver.status_name(st),
                         seconds=time.perf_counter() - t0, solve_seconds=solve_seconds,
                         warm=warm, extra_stats={"cost_scale": s, "cost_rounded": not cost_exact,
                                                 "memory_rounded": not memory_exact,
                                                 "solver_time_limit": left})


class CPSATSolver(Solver):
    """OR-Tools CP-SAT (registry name ``"cpsat"``); see :func:`solve_cpsat`."""

    name = "cpsat"
    package = "ortools"
    module = "ortools"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True)

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        check_options(self.name, options, {"random_seed"})
        return solve_cpsat(problem, **options)
