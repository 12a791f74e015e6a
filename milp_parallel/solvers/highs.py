"""The MILP of :mod:`milp_parallel.solvers.milp` solved with HiGHS through highspy.

The model is passed whole as arrays (``HighsLp`` in row-wise form through ``passModel``),
which is the fastest way in: no per-row Python calls. Rows are cleaned with
:func:`~milp_parallel.solvers.milp.merge_duplicate_entries` first (highspy's ``addRows``
silently drops a row that names a column twice; ``passModel`` is given clean rows too), and
every highspy call's returned status is checked.

HiGHS's default relative gap is ``1e-4``; here ``mip_rel_gap`` is the ``gap`` option (default
0: exact) and ``mip_abs_gap`` is ``1e-9`` times the magnitude of the costs.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from .._fdio import c_stdout_to
from ..errors import SolverError
from ..problem import Problem
from .base import Capabilities, Solver
from .milp import (MIN_SOLVER_SECONDS, build_milp, check_options, finish_result,
                   merge_duplicate_entries, out_of_time_result, time_left, trivial_result,
                   validate_gap, validate_time_limit)
from .result import SolveResult

__all__ = ["HiGHSSolver", "solve_highs"]

logger = logging.getLogger(__name__)


def _check(status, what: str) -> None:
    import highspy
    if status == highspy.HighsStatus.kError:
        raise SolverError(f"highs: {what} failed (HighsStatus.kError)")
    if status == highspy.HighsStatus.kWarning:
        logger.debug("highs: %s returned a warning", what)


def _interrupt_at(h, deadline: float) -> None:
    """Interrupt HiGHS's simplex, IPM and MIP loops once ``deadline`` has passed.

    HiGHS checks its own ``time_limit`` only between some phases (a run with 58 s left went
    on for 75 s); its interrupt callbacks are polled inside the loops.
    """
    import highspy

    def cb(callback_type, message, data_out, data_in, user_data):
        if data_in is not None and time.perf_counter() > deadline:
            data_in.user_interrupt = True

    try:
        h.setCallback(cb, None)
        kinds = highspy.cb.HighsCallbackType
        for kind in (kinds.kCallbackSimplexInterrupt, kinds.kCallbackIpmInterrupt,
                     kinds.kCallbackMipInterrupt):
            h.startCallback(kind)
    except (AttributeError, TypeError) as exc:   # another highspy API: its own limit only
        logger.debug("highs: no interrupt callbacks (%s)", exc)


def solve_highs(problem: Problem, *, time_limit: float | None = None, threads: int | None = None,
                gap: float = 0.0, verbose: bool = False, warm_start=None, reductions=None,
                dominance_work_limit: float = 3e8, presolve: str = "on",
                random_seed: int = 0, pass_warm_start: bool = False) -> SolveResult:
    """Solve ``problem`` exactly (or to ``gap``) with HiGHS.

    Parameters
    ----------
    problem : Problem
    time_limit : float, optional
        Seconds for the whole solve: warm start, presolve and formulation included; HiGHS
        gets what is left (``stats["solver_time_limit"]``). When nothing is left the warm
        start comes back as ``feasible`` (or ``unknown`` without one).
    threads : int, optional
        HiGHS threads (its MIP search is mostly serial; 1 is often fastest).
    gap : float
        Relative gap at which to stop (default 0: prove the optimum).
    verbose : bool
        Print HiGHS's log.
    warm_start : sequence of int, optional
        A starting assignment (used when feasible).
    reductions : sequence of str, optional
        Presolve steps (default all); see :func:`~milp_parallel.solvers.milp.presolve`.
    presolve : str
        HiGHS's own presolve, ``"on"`` or ``"off"``.
    random_seed : int
        HiGHS's seed.
    pass_warm_start : bool
        Hand the warm start to HiGHS with ``setSolution`` (off by default: see the comment in
        the code about a wrong "optimal" seen with highspy 1.16; the status check of
        :func:`~milp_parallel.solvers.milp.finish_result` catches it either way).

    Returns
    -------
    SolveResult
        ``optimal`` only when HiGHS proved it; ``feasible`` with bound and gap when stopped
        early with an incumbent; ``infeasible`` with ``stats["least_peak_memory"]``;
        ``unknown`` otherwise.
    """
    import highspy

    t0 = time.perf_counter()
    gap = validate_gap(gap)
    time_limit = validate_time_limit(time_limit)
    model, warm, _ = build_milp(problem, warm_start=warm_start, reductions=reductions,
                                dominance_work_limit=dominance_work_limit,
                                time_limit=time_limit, t0=t0)
    done = trivial_result(problem, model, "highs", warm, t0)
    if done is not None:
        return done
    start, index, value = merge_duplicate_entries(model.row_start, model.row_index,
                                                  model.row_value)
    if verbose:
        h = highspy.Highs()
    else:
        with c_stdout_to(None):        # the banner is printed on construction
            h = highspy.Highs()
    h.setOptionValue("output_flag", bool(verbose))
    _check(h.setOptionValue("mip_rel_gap", float(gap)), "setting mip_rel_gap")
    cost_scale = float(np.abs(model.col_cost).max()) if model.n_cols else 1.0
    _check(h.setOptionValue("mip_abs_gap", 1e-9 * max(cost_scale, 1e-12)), "mip_abs_gap")
    _check(h.setOptionValue("mip_feasibility_tolerance", 1e-9), "mip_feasibility_tolerance")
    _check(h.setOptionValue("random_seed", int(random_seed)), "random_seed")
    _check(h.setOptionValue("presolve", presolve), "presolve")
    if threads is not None:
        _check(h.setOptionValue("threads", int(threads)), "setting threads")
        # HiGHS's thread pool is process-wide: run() fails with kError when it was started
        # with another thread count, so restart it for this run.
        highspy.Highs.resetGlobalScheduler(True)

    lp = highspy.HighsLp()
    lp.num_col_ = model.n_cols
    lp.num_row_ = model.n_rows
    lp.col_cost_ = model.col_cost
    lp.col_lower_ = np.zeros(model.n_cols)
    lp.col_upper_ = model.col_upper
    inf = highspy.kHighsInf
    lp.row_lower_ = np.where(np.isfinite(model.row_lower), model.row_lower, -inf)
    lp.row_upper_ = np.where(np.isfinite(model.row_upper), model.row_upper, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = index.astype(np.int32)
    lp.a_matrix_.value_ = value
    lp.a_matrix_.num_col_ = model.n_cols
    lp.a_matrix_.num_row_ = model.n_rows
    lp.integrality_ = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous
                       for b in model.col_integer]
    lp.offset_ = 0.0
    _check(h.passModel(lp), "passModel")
    # highspy 1.16: after setSolution, HiGHS (with its presolve on) was seen to report
    # kOptimal for the user's solution while its dual bound was lower (a 10-node
    # problem: objective 52, bound 49, true optimum 49). The warm start therefore is not
    # handed to HiGHS unless asked (``pass_warm_start=True``); it still sets the upper
    # bound of the presolve's bound step and stays the fallback incumbent.
    if warm is not None and pass_warm_start:
        col = model.encode(warm)
        if col is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(col)
            sol.value_valid = True
            _check(h.setSolution(sol), "setSolution (warm start)")
    left = time_left(t0, time_limit)
    if left is not None:
        if left < MIN_SOLVER_SECONDS:
            return out_of_time_result(problem, model, "highs", warm, t0)
        _check(h.setOptionValue("time_limit", float(left)), "setting time_limit")
        _interrupt_at(h, time.perf_counter() + left)
    t1 = time.perf_counter()
    _check(h.run(), "run")
    solve_seconds = time.perf_counter() - t1
    ms = h.getModelStatus()
    info = h.getInfo()
    M = highspy.HighsModelStatus
    claimed = ms == M.kOptimal
    infeasible = ms == M.kInfeasible
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value) if has_sol else None
    bound = float(info.mip_dual_bound)
    if not math.isfinite(bound) or abs(bound) >= inf:
        bound = -math.inf
    native = h.modelStatusToString(ms)
    return finish_result(problem, model, "highs", values=values, claimed_optimal=claimed,
                         bound=bound, infeasible=infeasible, native_status=native,
                         seconds=time.perf_counter() - t0, solve_seconds=solve_seconds,
                         warm=warm, extra_stats={"mip_nodes": int(info.mip_node_count),
                                      "solver_time_limit": left})


class HiGHSSolver(Solver):
    """HiGHS through highspy (registry name ``"highs"``); see :func:`solve_highs`."""

    name = "highs"
    package = "highspy"
    module = "highspy"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True)

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        check_options(self.name, options, {"presolve", "random_seed", "pass_warm_start"})
        return solve_highs(problem, **options)
