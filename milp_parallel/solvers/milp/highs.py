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
from ..result import Progress
from .backend import MILP_OPTIONS, MilpBackend, NativeResult
from .model import MilpModel, merge_duplicate_entries, objective_scale

__all__ = ["HiGHSSolver", "run_highs"]

logger = logging.getLogger(__name__)

#: Above this many columns, HiGHS's presolve probing is switched off under a time limit.
_PROBING_COLUMNS = 20_000
#: Above this many columns, a time-limited HiGHS runs in a process of its own, killed
#: this many seconds past the deadline (its start-up costs about half a second).
_ISOLATE_COLUMNS = 20_000
_KILL_GRACE_SECONDS = 0.5
#: Seconds kept after HiGHS stops for handing its answer back (pickled, in isolation).
_RETURN_SECONDS = 0.2


def _check(status, what: str) -> None:
    import highspy
    if status == highspy.HighsStatus.kError:
        raise SolverError(f"highs: {what} failed (HighsStatus.kError)")
    if status == highspy.HighsStatus.kWarning:
        logger.debug("highs: %s returned a warning", what)


def _callbacks(h, deadline: float | None, progress, to_problem, t0: float) -> None:
    """Interrupt HiGHS's simplex, IPM and MIP loops once ``deadline`` has passed, and report
    its MIP progress (primal and dual bounds, mapped by ``to_problem``) to ``progress``."""
    import highspy
    last = [-math.inf]

    def cb(callback_type, message, data_out, data_in, user_data):
        now = time.perf_counter()
        if data_in is not None and deadline is not None and now > deadline:
            data_in.user_interrupt = True
        if progress is not None and data_out is not None and now - last[0] > 0.1:
            primal = getattr(data_out, "mip_primal_bound", math.inf)
            dual = getattr(data_out, "mip_dual_bound", -math.inf)
            if primal is not None and dual is not None and abs(primal) < 1e300:
                last[0] = now
                progress(Progress("highs", now - t0, to_problem(primal),
                                  to_problem(dual) if abs(dual) < 1e300 else -math.inf))

    try:
        h.setCallback(cb, None)
        kinds = highspy.cb.HighsCallbackType
        wanted = [kinds.kCallbackMipInterrupt]
        if deadline is not None:
            wanted += [kinds.kCallbackSimplexInterrupt, kinds.kCallbackIpmInterrupt]
        if progress is not None:
            wanted += [kinds.kCallbackMipImprovingSolution]
        for kind in wanted:
            h.startCallback(kind)
    except (AttributeError, TypeError) as exc:   # another highspy API: its own limit only
        logger.debug("highs: no callbacks (%s)", exc)


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

    #: Handing a large model to an isolated HiGHS (pickling, a fresh process, HiGHS's load)
    #: before it looks at its limit (bert_base at 64 GPUs with a budget: 5.2e6 nonzeros,
    #: 1.5 s past a 1 s limit when started with a few milliseconds left).
    startup_seconds_per_nonzero = 3e-7

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:
        start, index, value = merge_duplicate_entries(model.row_start, model.row_index,
                                                      model.row_value)
        scale = objective_scale(model.col_cost)
        arrays = {"col_cost": model.col_cost * scale, "col_upper": model.col_upper,
                  "row_lower": model.row_lower, "row_upper": model.row_upper,
                  "start": start, "index": index, "value": value,
                  "integer": model.col_integer, "warm": None}
        if warm is not None and options["pass_warm_start"]:
            arrays["warm"] = model.encode(warm)
        left = deadline.left()
        settings = {k: options[k] for k in ("gap", "threads", "verbose", "random_seed",
                                            "highs_presolve")}
        # an absolute wall-clock deadline: an isolated child starts a second or so later
        # (interpreter, imports, the arrays), and must still be done before it is killed
        settings["deadline_epoch"] = None if left is None else time.time() + left
        settings["no_probing"] = left is not None and model.n_cols > _PROBING_COLUMNS
        isolate = left is not None and model.n_cols > _ISOLATE_COLUMNS
        stats = {"solver_time_limit": left, "cost_scale": scale, "isolated": isolate}
        if not isolate:
            settings["callback"] = options["callback"]
            settings["to_problem"] = lambda z: z / scale + model.offset
            settings["t0"] = deadline.start
            out = run_highs(arrays, settings)
        else:
            # HiGHS's presolve and simplex do not poll the clock or the interrupt callbacks
            # often enough on large models (12 s past a 5 s limit on 223k columns): run it in
            # a process of its own that is killed at the deadline.
            from ...isolation import RETURNED, run_isolated
            res = run_isolated(run_highs, arrays, settings,
                               kill_after=left + _KILL_GRACE_SECONDS)
            if res.status != RETURNED:
                if "killed" not in (res.error or ""):
                    raise SolverError(f"highs: the isolated HiGHS run failed: {res.error}")
                return NativeResult(None, False, -math.inf, False,
                                    "killed at the time limit", res.seconds,
                                    {**stats, "killed_at_time_limit": True})
            out = res.value
        stats["mip_nodes"] = out["nodes"]
        bound = out["bound"] / scale if math.isfinite(out["bound"]) else -math.inf
        return NativeResult(values=out["values"], claimed_optimal=out["optimal"], bound=bound,
                            infeasible=out["infeasible"], native_status=out["status"],
                            solve_seconds=out["seconds"], stats=stats)


def run_highs(arrays: dict, settings: dict) -> dict:
    """Build and run one HiGHS model from arrays (in this process or an isolated one).

    Returns
    -------
    dict
        ``values`` (or ``None``), ``optimal``, ``infeasible``, ``time_limit`` (it stopped
        at the time limit: its own or the interrupt at the deadline), ``bound`` (HiGHS's
        dual bound on the scaled objective, ``-inf`` when none), ``status`` (HiGHS's
        words), ``nodes``, ``seconds``.
    """
    import highspy

    if settings["verbose"]:
        h = highspy.Highs()
    else:
        with c_stdout_to(None):        # the banner is printed on construction
            h = highspy.Highs()
    h.setOptionValue("output_flag", bool(settings["verbose"]))
    cost = arrays["col_cost"]
    n_cols, n_rows = cost.size, arrays["row_lower"].size
    _check(h.setOptionValue("mip_rel_gap", float(settings["gap"])), "setting mip_rel_gap")
    big = float(np.abs(cost).max()) if n_cols else 1.0
    _check(h.setOptionValue("mip_abs_gap", 1e-9 * max(big, 1e-12)), "mip_abs_gap")
    _check(h.setOptionValue("mip_feasibility_tolerance", 1e-9), "mip_feasibility_tolerance")
    _check(h.setOptionValue("random_seed", int(settings["random_seed"])), "random_seed")
    _check(h.setOptionValue("presolve", settings["highs_presolve"]), "presolve")
    if settings["no_probing"]:
        # HiGHS's presolve probing polls neither callbacks nor its clock often: on a
        # 211k-column model it ran 9 s past a 5.6 s limit. Off under a time limit.
        _check(h.setOptionValue("presolve_rule_off", 1 << 15), "presolve_rule_off")
    if settings["threads"] is not None:
        _check(h.setOptionValue("threads", int(settings["threads"])), "setting threads")
        # HiGHS's thread pool is process-wide: run() fails with kError when it was
        # started with another thread count, so restart it for this run.
        highspy.Highs.resetGlobalScheduler(True)
    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n_cols)
    lp.col_upper_ = arrays["col_upper"]
    inf = highspy.kHighsInf
    lp.row_lower_ = np.where(np.isfinite(arrays["row_lower"]), arrays["row_lower"], -inf)
    lp.row_upper_ = np.where(np.isfinite(arrays["row_upper"]), arrays["row_upper"], inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = arrays["start"].astype(np.int32)
    lp.a_matrix_.index_ = arrays["index"].astype(np.int32)
    lp.a_matrix_.value_ = arrays["value"]
    lp.a_matrix_.num_col_ = n_cols
    lp.a_matrix_.num_row_ = n_rows
    lp.integrality_ = [highspy.HighsVarType.kInteger if b
                       else highspy.HighsVarType.kContinuous for b in arrays["integer"]]
    lp.offset_ = 0.0
    _check(h.passModel(lp), "passModel")
    if arrays["warm"] is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(arrays["warm"])
        sol.value_valid = True
        _check(h.setSolution(sol), "setSolution (warm start)")
    left = None
    if settings["deadline_epoch"] is not None:
        # what is left now, less the time to hand the answer back
        left = max(0.01, settings["deadline_epoch"] - time.time() - _RETURN_SECONDS)
        _check(h.setOptionValue("time_limit", float(left)), "setting time_limit")
    callback = settings.get("callback")
    if left is not None or callback is not None:
        _callbacks(h, None if left is None else time.perf_counter() + left, callback,
                   settings.get("to_problem", lambda z: z), settings.get("t0", 0.0))
    t1 = time.perf_counter()
    _check(h.run(), "run")
    seconds = time.perf_counter() - t1
    ms = h.getModelStatus()
    info = h.getInfo()
    M = highspy.HighsModelStatus
    has_sol = info.primal_solution_status == 2  # kSolutionStatusFeasible
    bound = float(info.mip_dual_bound)
    if not math.isfinite(bound) or abs(bound) >= inf:
        bound = -math.inf
    return {"values": np.asarray(h.getSolution().col_value) if has_sol else None,
            "optimal": ms == M.kOptimal, "infeasible": ms == M.kInfeasible,
            "time_limit": ms in (M.kTimeLimit, M.kInterrupt), "bound": bound,
            "status": h.modelStatusToString(ms), "nodes": int(info.mip_node_count),
            "seconds": seconds}
