"""HiGHS through highspy (registry name ``"highs"``): a thin adapter on :mod:`.backend`.

The model is passed whole as arrays (``HighsLp`` in row-wise form through ``passModel``),
which is the fastest way in: no per-row Python calls. Rows are cleaned with
:func:`~.model.merge_duplicate_entries` first (highspy's ``addRows`` silently drops a row that
names a column twice), and every highspy call's returned status is checked.

HiGHS's default relative gap is ``1e-4``; here ``mip_rel_gap`` is the ``gap`` option (default
0: exact) and ``mip_abs_gap`` is ``1e-9`` times the magnitude of the costs. HiGHS checks its
own ``time_limit`` only between some phases, so interrupt callbacks stop its simplex, IPM and
MIP loops at the deadline.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ..._fdio import c_stdout_to
from ...errors import SolverError
from ..base import Capabilities, Option, check_bool, check_choice, check_int
from ..options import Deadline
from .backend import MILP_OPTIONS, MilpBackend, NativeResult
from .model import MilpModel, merge_duplicate_entries, objective_scale

__all__ = ["HiGHSSolver"]

logger = logging.getLogger(__name__)


def _check(status, what: str) -> None:
    import highspy
    if status == highspy.HighsStatus.kError:
        raise SolverError(f"highs: {what} failed (HighsStatus.kError)")
    if status == highspy.HighsStatus.kWarning:
        logger.debug("highs: %s returned a warning", what)


def _interrupt_at(h, deadline: float) -> None:
    """Interrupt HiGHS's simplex, IPM and MIP loops once ``deadline`` has passed."""
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


class HiGHSSolver(MilpBackend):
    """HiGHS through highspy (registry name ``"highs"``).

    Options (besides the common and MILP ones)
    ------------------------------------------
    highs_presolve : str
        HiGHS's own presolve, ``"on"`` (default) or ``"off"``.
    random_seed : int
    pass_warm_start : bool
        Hand the incumbent to HiGHS with ``setSolution`` (off by default: highspy 1.16 was
        seen reporting a user solution as optimal with a lower dual bound; the result check
        would raise on it).
    """

    name = "highs"
    package = "highspy"
    module = "highspy"
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=True, gap=True, warm_start=True)
    options = MILP_OPTIONS + (
        Option("highs_presolve", "on", check_choice("highs_presolve", ("on", "off"))),
        Option("random_seed", 0, check_int("random_seed")),
        Option("pass_warm_start", False, check_bool("pass_warm_start")),
    )

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:
        import highspy

        gap, threads = options["gap"], options["threads"]
        start, index, value = merge_duplicate_entries(model.row_start, model.row_index,
                                                      model.row_value)
        if options["verbose"]:
            h = highspy.Highs()
        else:
            with c_stdout_to(None):        # the banner is printed on construction
                h = highspy.Highs()
        h.setOptionValue("output_flag", bool(options["verbose"]))
        _check(h.setOptionValue("mip_rel_gap", float(gap)), "setting mip_rel_gap")
        scale = objective_scale(model.col_cost)
        col_cost = model.col_cost * scale
        big = float(np.abs(col_cost).max()) if model.n_cols else 1.0
        _check(h.setOptionValue("mip_abs_gap", 1e-9 * max(big, 1e-12)), "mip_abs_gap")
        _check(h.setOptionValue("mip_feasibility_tolerance", 1e-9),
               "mip_feasibility_tolerance")
        _check(h.setOptionValue("random_seed", int(options["random_seed"])), "random_seed")
        _check(h.setOptionValue("presolve", options["highs_presolve"]), "presolve")
        if threads is not None:
            _check(h.setOptionValue("threads", int(threads)), "setting threads")
            # HiGHS's thread pool is process-wide: run() fails with kError when it was
            # started with another thread count, so restart it for this run.
            highspy.Highs.resetGlobalScheduler(True)
        lp = highspy.HighsLp()
        lp.num_col_ = model.n_cols
        lp.num_row_ = model.n_rows
        lp.col_cost_ = col_cost
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
        lp.integrality_ = [highspy.HighsVarType.kInteger if b
                           else highspy.HighsVarType.kContinuous for b in model.col_integer]
        lp.offset_ = 0.0
        _check(h.passModel(lp), "passModel")
        if warm is not None and options["pass_warm_start"]:
            col = model.encode(warm)
            if col is not None:
                sol = highspy.HighsSolution()
                sol.col_value = list(col)
                sol.value_valid = True
                _check(h.setSolution(sol), "setSolution (warm start)")
        left = deadline.left()
        if left is not None:
            _check(h.setOptionValue("time_limit", float(left)), "setting time_limit")
            _interrupt_at(h, time.perf_counter() + left)
        t1 = time.perf_counter()
        _check(h.run(), "run")
        solve_seconds = time.perf_counter() - t1
        ms = h.getModelStatus()
        info = h.getInfo()
        M = highspy.HighsModelStatus
        has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
        bound = float(info.mip_dual_bound)
        if not math.isfinite(bound) or abs(bound) >= inf:
            bound = -math.inf
        bound /= scale
        return NativeResult(
            values=np.asarray(h.getSolution().col_value) if has_sol else None,
            claimed_optimal=ms == M.kOptimal, bound=bound, infeasible=ms == M.kInfeasible,
            native_status=h.modelStatusToString(ms), solve_seconds=solve_seconds,
            stats={"mip_nodes": int(info.mip_node_count), "solver_time_limit": left,
                   "cost_scale": scale})
