"""The flow every MILP backend shares (a template method), and the mapping of its answer.

:class:`MilpBackend` owns the steps; a backend (HiGHS, CBC, CP-SAT) writes only
:meth:`MilpBackend._native`, the call of its solver on the arrays of a
:class:`~.model.MilpModel`, returning a :class:`NativeResult`:

1. **incumbent**: the user's ``warm_start`` when it is feasible, else
   :func:`~milp_parallel.solvers.heuristics.incumbent` (no exact search is involved);
   *contraction*: when the model would be too big to build (``max_nonzeros``), or when
   contracting the one-to-one edges leaves at most a tenth of the nodes, the problem is
   solved contracted instead (:mod:`.contracted`: the same steps on the contracted problem,
   with interval memory rows generated as they bind), option ``contract``;
2. **presolve** (:mod:`.presolve`) within :data:`PRESOLVE_TIME_SHARE` of the time left;
3. **formulate** (:func:`.model.formulate`);
4. the **solver**, given what is left of ``time_limit``;
5. the **answer mapped back** (:func:`finish_result`): decoded, re-evaluated on the original
   problem, and checked. Nothing is repaired in secret: a solver that claims infeasibility
   while a feasible assignment is known, returns an assignment that violates the problem, or
   proves a bound above the cost of a known feasible assignment raises
   :class:`~milp_parallel.errors.SolverError` naming the backend and both numbers. The status
   is ``optimal`` only when a proved bound (the solver's, or the presolve's LP-dual bound)
   is within :data:`~milp_parallel.solvers.result.OPTIMALITY_RTOL` of the objective.

``presolve`` chooses what may run before the solver: ``"milp"`` (default: the MILP-side
steps of :data:`.presolve.REDUCTIONS`), ``"dp"`` (adds the exact search's incumbent and
min-marginal fixing, :data:`.presolve.DP_REDUCTIONS`: faster on some problems, but then the
answer is no longer independent of the exact search; never used by a cross-check), or
``"none"`` (only what the model needs: forbidden entries and rows that cannot bind, and no
incumbent: the solver's own strength).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import SolverError
from ...problem import Problem
from ..base import Option, Solver, check_choice, check_number
from ..heuristics import incumbent
from ..memory import interval_cliques, least_memory
from ..options import Deadline
from ..result import (
    FEASIBLE,
    INFEASIBLE,
    OPTIMAL,
    OPTIMALITY_RTOL,
    UNKNOWN,
    Incumbent,
    Progress,
    SolveResult,
    best_incumbent,
    relative_gap,
)
from .contracted import CONTRACT_MODES, solve_contracted
from .model import MilpModel, formulate
from .presolve import DEFAULT_DOMINANCE_WORK, DP_REDUCTIONS, REDUCTIONS, presolve

__all__ = ["MilpBackend", "NativeResult", "finish_result", "PRESOLVE_TIME_SHARE",
           "INCUMBENT_TIME_SHARE", "MIN_SOLVER_SECONDS", "PRESOLVE_MODES",
           "DEFAULT_MAX_NONZEROS", "estimate_nonzeros", "sentinel_entries", "trivial_bound"]

logger = logging.getLogger(__name__)

#: Share of the time limit the incumbent heuristic may use (at least
#: :data:`INCUMBENT_MIN_SECONDS`, or 30% of a shorter limit: without an incumbent a short
#: run has nothing to return).
INCUMBENT_TIME_SHARE = 0.1
INCUMBENT_MIN_SECONDS = 2.0
#: When the model is too big to build, the heuristic gets this many seconds (or its share of
#: the limit, if more) before the contraction starts from its answer.
TOO_BIG_INCUMBENT_SECONDS = 5.0
#: ... but never more than this share of the time left: the contraction (about a second on
#: the largest IOPDDL instances) and the answer's evaluation need the rest.
TOO_BIG_INCUMBENT_MAX_SHARE = 0.6
#: Largest model (estimated constraint-matrix nonzeros, :func:`estimate_nonzeros`) the
#: backends build by default. Beyond it presolve and formulation alone take minutes and many
#: GiB (IOPDDL instance S: 3.3e8 memory-row entries, 6.8 GB before the model existed), so the
#: backend returns its heuristic incumbent (``feasible``, or ``unknown`` without one) and says
#: so in ``stats["model_skipped"]``; the option ``max_nonzeros`` raises the limit.
DEFAULT_MAX_NONZEROS = 3e7
#: Share of the time left (after the incumbent) that the optional presolve work may use;
#: the rest goes to the formulation and the solver.
PRESOLVE_TIME_SHARE = 0.3
#: Under this many seconds left, the solver is not started (its start-up alone costs more).
MIN_SOLVER_SECONDS = 0.05
PRESOLVE_MODES = ("milp", "dp", "none")


def _check_reductions(value: Any) -> tuple:
    from ...errors import InvalidOptionError
    if isinstance(value, str) or not all(isinstance(x, str) for x in value):
        raise InvalidOptionError(f"reductions must be a sequence of step names from "
                                 f"{REDUCTIONS + DP_REDUCTIONS}, got {value!r}")
    unknown = set(value) - set(REDUCTIONS) - set(DP_REDUCTIONS)
    if unknown:
        raise InvalidOptionError(f"unknown reductions {sorted(unknown)}; known: "
                                 f"{REDUCTIONS + DP_REDUCTIONS}")
    return tuple(value)


#: Options of every MILP backend, besides the common ones.
MILP_OPTIONS = (
    Option("presolve", "milp", check_choice("presolve", PRESOLVE_MODES),
           "what runs before the solver: 'milp' (default), 'dp' or 'none'"),
    Option("reductions", None, _check_reductions,
           "the presolve steps to run (default: those of the presolve mode)"),
    Option("dominance_work_limit", DEFAULT_DOMINANCE_WORK,
           check_number("dominance_work_limit", 0.0), "comparisons the dominance step may do"),
    Option("max_nonzeros", DEFAULT_MAX_NONZEROS, check_number("max_nonzeros", 0.0),
           "largest model (estimated nonzeros) to build; beyond it the problem is solved "
           "contracted, or the heuristic incumbent is returned"),
    Option("contract", "auto", check_choice("contract", CONTRACT_MODES),
           "solve the problem with its one-to-one edges contracted: 'auto' (when the model "
           "is too big, or when at most a tenth of the nodes are left), 'on' or 'off'"),
)


def estimate_nonzeros(problem: Problem) -> int:
    """Constraint-matrix nonzeros of the unreduced MILP, counted without building it.

    Each edge pair gives a ``y`` column in two marginal rows; each configuration an ``x``
    column in its one-hot row, its edges' marginal rows and, where its memory varies, every
    memory row that holds the node (one per maximal live set and device). Vectorized; a
    fraction of a second on the largest IOPDDL instances.

    Examples
    --------
    >>> p = Problem([np.zeros(2)] * 2, [(0, 1)], [np.zeros((2, 2))])
    >>> estimate_nonzeros(p)
    16
    """
    k = np.asarray(problem.n_configs, dtype=np.int64)
    pairs = sum(int(t.size) for t in problem.edge_costs)
    deg = np.bincount(np.asarray(problem.edges, dtype=np.int64).reshape(-1),
                      minlength=problem.n_nodes) if problem.n_edges else np.zeros_like(k)
    total = 2 * pairs + int((k * (1 + deg)).sum())
    if not problem.has_budget:
        return total
    varying = np.array([int((m.max(axis=0) > m.min(axis=0)).sum()) for m in problem.memory],
                       dtype=np.int64)
    if problem.intervals is None:
        return total + int((k * varying).sum())
    iv = problem.intervals
    times = interval_cliques(iv)
    live = iv[:, 1] > iv[:, 0]
    first = np.where(live, np.searchsorted(times, iv[:, 0]), 0)
    stop = np.maximum(np.where(live, np.searchsorted(times, iv[:, 1]), 0), first)
    return total + int(((stop - first) * k * varying).sum())


def sentinel_entries(problem: Problem, assignment: np.ndarray | None) -> int:
    """How many entries chosen by ``assignment`` are forbidden (at or above the problem's
    ``forbidden_cost``, IOPDDL's "effectively forbidden"); 0 without an assignment."""
    if assignment is None:
        return 0
    return int(problem.evaluate(np.asarray(assignment, dtype=np.int64)).forbidden_entries)


def trivial_bound(problem: Problem) -> float:
    """A lower bound on every assignment: each node's and each edge's least entry, summed
    (memory ignored). Cheap and weak: what is known when no model is built."""
    lb = sum(float(c.min()) for c in problem.node_costs if c.size)
    lb += sum(float(t.min()) for t in problem.edge_costs if t.size)
    return lb if math.isfinite(lb) else -math.inf


@dataclass
class NativeResult:
    """What a backend's solver call returns (in the model's terms, offset excluded).

    Attributes
    ----------
    values : numpy.ndarray or None
        Column values of the solver's best solution (``None`` without one).
    claimed_optimal : bool
        The solver says it proved optimality (to the requested gap).
    bound : float
        The solver's proved lower bound on the model's objective (``-inf`` when unknown).
    infeasible : bool
        The solver proved the model infeasible.
    native_status : str
        The solver's own words.
    solve_seconds : float
    stats : dict
    """

    values: np.ndarray | None
    claimed_optimal: bool
    bound: float
    infeasible: bool
    native_status: str
    solve_seconds: float
    stats: dict = field(default_factory=dict)


class MilpBackend(Solver):
    """Template of the MILP backends; subclasses implement :meth:`_native`."""

    options = MILP_OPTIONS
    #: Seconds per constraint-matrix nonzero the backend needs before its solver checks
    #: the time limit (writing and reading a file, building and loading a model that the
    #: solver does not interrupt); with less time left the solver is not started and the
    #: incumbent is the answer.
    startup_seconds_per_nonzero: float = 0.0

    def _native(self, model: MilpModel, warm: np.ndarray | None, options: dict[str, Any],
                deadline: Deadline) -> NativeResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def _solve(self, problem: Problem, options: dict[str, Any],
               deadline: Deadline) -> SolveResult:
        mode = options["presolve"]
        steps = options["reductions"]
        if steps is None:
            steps = {"milp": REDUCTIONS, "dp": REDUCTIONS + DP_REDUCTIONS,
                     "none": ("forbidden",)}[mode]
        # 1. incumbent
        inc, inc_stats = None, {}
        user = options["warm_start"]
        if user is not None:
            inc = Incumbent.of(problem, problem.check_assignment(user), "user")
            if inc is None:
                logger.info("%s: the warm start is not feasible; ignoring it", self.name)
        nnz = estimate_nonzeros(problem)
        too_big = nnz > options["max_nonzeros"]
        if too_big:
            logger.info("%s: the model would have about %.3g nonzeros (limit %.3g, option "
                        "max_nonzeros); solving it contracted (or returning the heuristic's "
                        "answer)", self.name, nnz, options["max_nonzeros"])
        if too_big and (inc is None or inc.forbidden_entries > 0):
            # The original model will not be built: the heuristic's answer is what the
            # contraction starts from, or the answer (with a margin for its evaluation).
            left = deadline.left()
            share = None if left is None else Deadline(
                min(TOO_BIG_INCUMBENT_MAX_SHARE * left,
                    max(INCUMBENT_TIME_SHARE * left, TOO_BIG_INCUMBENT_SECONDS)))
            found, inc_stats = incumbent(problem, deadline=share)
            inc = best_incumbent(Incumbent.of(problem, found, "heuristic"), inc)
        elif inc is None and mode != "none":
            tl = deadline.time_limit
            share = None if tl is None else Deadline(
                max(INCUMBENT_TIME_SHARE * tl, min(INCUMBENT_MIN_SECONDS, 0.5 * tl)))
            found, inc_stats = incumbent(problem, deadline=share)
            inc = Incumbent.of(problem, found, "heuristic")
        t_inc = deadline.elapsed()
        # Whether the exact search ran (then the exact search cannot be this answer's check).
        exact = mode == "dp" or bool(set(steps) & set(DP_REDUCTIONS))
        base = {"presolve": mode, "used_exact_search": exact,
                "warm_start_source": inc.source if inc is not None else "none",
                "incumbent_seconds": t_inc, "estimated_nonzeros": nnz,
                "incumbent_bad_entries": inc_stats.get("bad_entries")}
        if (options["contract"] != "off" and inc is not None and mode != "none"
                and inc.forbidden_entries == 0 and not deadline.passed()):
            out = solve_contracted(self._solve, self.name, problem, options, deadline, inc,
                                   required=too_big, stats=base)
            if out is not None:
                return out
        if too_big:
            logger.warning("%s: the model would have about %.3g nonzeros (limit %.3g, option "
                           "max_nonzeros) and does not contract: returning the heuristic's "
                           "answer", self.name, nnz, options["max_nonzeros"])
            stats = {**base, "model_skipped": f"about {nnz:.3g} nonzeros > max_nonzeros "
                                              f"{options['max_nonzeros']:.3g}"}
            if inc is not None and not deadline.passed():
                # no contraction: the rest of the time polishes the heuristic's answer
                left = deadline.left()
                share = None if left is None else Deadline(max(0.0, 0.97 * left - 0.3))
                found, _ = incumbent(problem, deadline=share, start=inc.assignment)
                inc = best_incumbent(Incumbent.of(problem, found, "heuristic"), inc)
            return _heuristic_result(problem, self.name, inc, deadline, stats)
        # 2. presolve, 3. formulate
        red = presolve(problem, warm_start=None if inc is None else inc.assignment,
                       reductions=steps,
                       dominance_work_limit=options["dominance_work_limit"],
                       deadline=Deadline(None) if deadline.time_limit is None else
                       Deadline(PRESOLVE_TIME_SHARE * (deadline.left() or 0.0)))
        # presolve hands back the incumbent it kept (the exact search's, with presolve="dp")
        source = "dp" if red.stats.get("warm_start_source") == "dp" else (
            inc.source if inc is not None else "none")
        inc = Incumbent.of(problem, red.warm_start, source)
        t_pre = deadline.elapsed()
        model = formulate(red)
        t_form = deadline.elapsed()
        stats = {**base, "warm_start_source": source, "presolve_seconds": t_pre - t_inc,
                 "formulate_seconds": t_form - t_pre, "build_seconds": t_form}
        stats.update(model.stats())
        if options["callback"] is not None and not red.infeasible:
            options["callback"](Progress(self.name, deadline.elapsed(), red.upper_bound,
                                         red.lower_bound))
        if red.infeasible:
            stats["least_peak_memory"] = least_memory(problem)
            return finish_result(problem, model, self.name, NativeResult(
                None, False, math.inf, True, "presolve: " + red.reason, 0.0), inc,
                deadline, stats, proof="presolve")
        if model.n_cols == 0:
            a = red.fixed.copy()
            ev = problem.evaluate(a)
            return finish_result(problem, model, self.name, NativeResult(
                np.zeros(0), ev.feasible, ev.cost - model.offset, not ev.feasible,
                "presolve: solved (every configuration but one removed)", 0.0),
                inc, deadline, stats, proof="presolve")
        left = deadline.left()
        startup = self.startup_seconds_per_nonzero * model.row_index.size
        if left is not None and left < MIN_SOLVER_SECONDS + startup:
            stats["time_limit_reached"] = True
            why = "time limit reached before the solver ran" + (
                f" ({left:.2f} s left; loading {model.row_index.size:,} nonzeros into "
                f"{self.name} takes about {startup:.2f} s)" if startup > 0 else "")
            return finish_result(problem, model, self.name, NativeResult(
                None, False, -math.inf, False, why, 0.0, {"solver_time_limit": 0.0}), inc,
                deadline, stats)
        native = self._native(model, None if inc is None else inc.assignment, options,
                              deadline)
        native.stats.setdefault("solver_time_limit", left)
        return finish_result(problem, model, self.name, native, inc, deadline, stats)


def _heuristic_result(problem: Problem, solver: str, inc: Incumbent | None,
                      deadline: Deadline, stats: dict) -> SolveResult:
    """The answer when no model is built: the incumbent, ``feasible`` (``unknown`` without
    one), with the trivial bound."""
    bound = trivial_bound(problem)
    stats = dict(stats)
    stats["solver_bound"] = -math.inf
    stats["sentinel_entries"] = 0 if inc is None else inc.forbidden_entries
    if inc is None:
        return SolveResult(assignment=None, objective=math.nan, status=UNKNOWN, bound=bound,
                           gap=math.inf, seconds=deadline.elapsed(), solver=solver,
                           stats=stats)
    cost = inc.cost
    bound = min(bound, cost)
    return SolveResult(assignment=inc.assignment, objective=cost,
                       status=FEASIBLE, bound=bound, gap=relative_gap(cost, bound),
                       seconds=deadline.elapsed(), solver=solver, stats=stats)


def finish_result(problem: Problem, model: MilpModel, solver: str, native: NativeResult,
                  inc: Incumbent | None, deadline: Deadline, stats: dict, *,
                  proof: str = "solver") -> SolveResult:
    """Map a backend's raw answer to a :class:`SolveResult` on the original problem.

    Raises
    ------
    SolverError
        When the solver contradicts what is known: it claims infeasibility while a feasible
        assignment is known, returns an assignment that is not feasible on the problem, or
        proves a lower bound above the cost of a known feasible assignment.
    """
    stats = dict(stats)
    stats.update(native.stats)
    stats["solve_seconds"] = native.solve_seconds
    stats["native_status"] = native.native_status
    red = model.reduced
    if native.infeasible:
        if inc is not None:
            raise SolverError(
                f"{solver}: the solver claims the problem is infeasible ({native.native_status})"
                f", but a feasible assignment of cost {inc.cost!r} is known")
        stats.setdefault("least_peak_memory", least_memory(problem))
        return SolveResult(assignment=None, objective=math.nan, status=INFEASIBLE,
                           bound=math.inf, gap=math.inf, seconds=deadline.elapsed(),
                           solver=solver, stats=stats)
    found = None
    if native.values is not None:
        a = model.decode(native.values)
        found = Incumbent.of(problem, a, "solver")
        if found is None:
            ev = problem.evaluate(a)
            raise SolverError(
                f"{solver}: the solver's assignment is not feasible on the problem (cost "
                f"{ev.cost!r}, peak memory {ev.peak_memory!r}, budget "
                f"{problem.memory_limit!r}); native status {native.native_status!r}")
        stats["solver_objective"] = found.cost
    # The better of the solver's answer and the incumbent it started from: fewer forbidden
    # entries first, then cost (a time-limited run may return something worse than what it
    # was given, or an answer with a forbidden entry).
    best = best_incumbent(found, inc)
    best_cost = best.cost if best is not None else math.inf
    stats["sentinel_entries"] = 0 if best is None else best.forbidden_entries
    if best is not None and best.forbidden_entries:
        logger.info("%s: the answer uses %d forbidden entries (it is optimal only if no "
                    "assignment uses fewer: see its status)", solver, best.forbidden_entries)
    bound = native.bound + model.offset if np.isfinite(native.bound) else native.bound
    if (np.isfinite(bound) and float(model.offset).is_integer()
            and np.all(model.col_cost == np.round(model.col_cost))):
        bound = float(math.ceil(bound - 1e-6))     # integer costs: the bound rounds up
    scale = max(abs(best_cost), 1e-12) if math.isfinite(best_cost) else 1.0
    if math.isfinite(bound) and math.isfinite(best_cost) \
            and bound > best_cost + OPTIMALITY_RTOL * scale:
        raise SolverError(
            f"{solver}: the solver proved a lower bound of {bound!r}, above the cost "
            f"{best_cost!r} of a feasible assignment it was given or found; native status "
            f"{native.native_status!r}")
    solver_bound = bound
    if math.isfinite(red.lower_bound):
        bound = max(bound, red.lower_bound) if math.isfinite(bound) else red.lower_bound
        if math.isfinite(best_cost) and bound > best_cost:
            bound = best_cost      # the dual bound's rounding slack (at most its tolerance)
    stats["solver_bound"] = solver_bound
    stats["presolve_bound"] = red.lower_bound
    if best is None:
        return SolveResult(assignment=None, objective=math.nan, status=UNKNOWN,
                           bound=bound, gap=math.inf, seconds=deadline.elapsed(),
                           solver=solver, stats=stats)
    proved = math.isfinite(bound) and best_cost - bound <= OPTIMALITY_RTOL * scale
    status = OPTIMAL if proved else FEASIBLE
    if proved and not (native.claimed_optimal and math.isfinite(solver_bound)
                       and best_cost - solver_bound <= OPTIMALITY_RTOL * scale):
        proof = "presolve"
    stats["proof"] = proof if status == OPTIMAL else None
    gap = 0.0 if status == OPTIMAL else relative_gap(best_cost, bound)
    return SolveResult(assignment=best.assignment, objective=best_cost,
                       status=status, bound=bound if status != OPTIMAL else best_cost,
                       gap=gap, seconds=deadline.elapsed(), solver=solver, stats=stats)
