"""OR-Tools CP-SAT (registry name ``"cpsat"``): a thin adapter on :mod:`.backend`.

CP-SAT works over integers, so the float model is scaled:

* **memory rows** (per row, by a power of two ``s``): coefficients rounded **up**, the budget
  rounded **down**, so every CP-SAT-feasible assignment is feasible for the float problem.
  When the data are integers (IOPDDL) ``s = 1`` and nothing is rounded. Otherwise ``s`` makes
  the row's largest sum about ``2**40``, and the rounding can only exclude assignments whose
  usage is within about ``n_row_nodes * 2**-40`` (relative) of the budget: CP-SAT's
  "optimal" is then optimal among the others (``stats["memory_rounded"]`` says so).
* **costs** are scaled by one power of two ``s`` (so the largest possible objective is about
  ``2**50``) and rounded to the nearest integer; with integer costs ``s = 1`` and nothing is
  rounded. With rounding, every assignment's scaled cost is off by at most ``N/2`` (``N`` =
  free nodes + edges left: the terms of one assignment), so the bound given back is CP-SAT's
  bound minus that, divided by ``s``: a proved bound for the float problem.
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

from ...errors import SolverError
from ..base import Capabilities, Option, check_int
from ..options import Deadline
from .backend import MILP_OPTIONS, MilpBackend, NativeResult
from .model import MilpModel

__all__ = ["CPSATSolver", "scale_costs", "scale_memory_row"]

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


class CPSATSolver(MilpBackend):
    """OR-Tools CP-SAT (registry name ``"cpsat"``).

    Options (besides the common and MILP ones)
    ------------------------------------------
    random_seed : int
    """

    name = "cpsat"
    package = "ortools"
    module = "ortools"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=True, gap=True, warm_start=True)
    options = MILP_OPTIONS + (Option("random_seed", 0, check_int("random_seed")),)

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:
        from ortools.sat.python import cp_model

        gap, threads = options["gap"], options["threads"]
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
        prm.log_search_progress = bool(options["verbose"])
        prm.random_seed = int(options["random_seed"])
        prm.relative_gap_limit = float(gap)
        if gap == 0:
            prm.absolute_gap_limit = 0.0 if not cost_exact else 0.5
        left = deadline.left()
        if left is not None:
            prm.max_time_in_seconds = float(left)
        if threads is not None:
            prm.num_workers = int(threads)
        t1 = time.perf_counter()
        st = solver.solve(m)
        solve_seconds = time.perf_counter() - t1
        if st == cp_model.MODEL_INVALID:
            raise SolverError(f"cpsat: CP-SAT rejected the model: {m.validate()}")
        values = None
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # The response lists every variable's value in creation order (``cols`` were
            # made first): one array copy instead of a Python call per column.
            raw = np.asarray(solver.response_proto.solution, dtype=float)
            if raw.size >= len(cols) and cols[0].index == 0 \
                    and cols[-1].index == len(cols) - 1:
                values = raw[:len(cols)]
            else:
                values = np.array([solver.value(v) for v in cols], dtype=float)
        n_terms = red.free_nodes.size + len(red.edge_costs)
        bound = -math.inf
        if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            b = float(solver.best_objective_bound)
            if math.isfinite(b):
                bound = (b - (0.0 if cost_exact else 0.5 * n_terms)) / s
        return NativeResult(
            values=values, claimed_optimal=st == cp_model.OPTIMAL, bound=bound,
            infeasible=st == cp_model.INFEASIBLE, native_status=solver.status_name(st),
            solve_seconds=solve_seconds,
            stats={"cost_scale": s, "cost_rounded": not cost_exact,
                   "memory_rounded": not memory_exact, "solver_time_limit": left})
