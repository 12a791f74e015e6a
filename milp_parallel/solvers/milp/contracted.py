"""A MILP backend on the contracted problem, with the memory rows generated as they bind.

When one-to-one edges join many nodes into groups (:mod:`milp_parallel.solvers.contract`:
IOPDDL's 28,000-63,000-node instances become a few hundred to a few thousand groups), the
backend solves the contracted problem instead of the original, with its own solver.

* **No budget, or the all-live model**: the contracted problem is exact (every device keeps
  its row); its optimum expands to an optimum of the original.
* **Interval model**: the rows (one per device and maximal live set; tens of thousands on
  the large instances, with up to 3e8 entries) are *generated*. The contracted problem with
  a subset of the rows is a relaxation: its proved bound bounds the original, and its answer
  expands to an assignment that either fits every row (then, when the relaxation was solved
  to optimality, it is optimal for the original) or overflows some; the worst row of each
  overflowing run (:func:`~milp_parallel.solvers.contract.violated_rows`) joins the
  relaxation, and the next round solves it again. Each round's answer is also repaired on
  the original problem by the local search's memory moves
  (:class:`~milp_parallel.solvers.heuristics.LocalSearch`), which gives a feasible
  assignment of almost the relaxation's cost while the rows are still being found; the run
  is proved optimal as soon as the best feasible cost meets the best relaxation bound.

The incumbent (heuristic or the user's) sets which entries are forbidden; it is always
representable in the contracted problem and warm-starts every round. Nothing here uses the
exact graph search.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np

from ...problem import Problem
from ..contract import Contraction, contract, violated_rows
from ..heuristics import LocalSearch
from ..options import Deadline
from ..result import (
    FEASIBLE,
    OPTIMAL,
    OPTIMALITY_RTOL,
    Incumbent,
    SolveResult,
    best_incumbent,
    relative_gap,
)

#: ``solve_sub(problem, options, deadline) -> SolveResult``: the backend's own solve of a
#: (contracted) problem, handed in so that this module does not import the backend.
SolveSub = Callable[[Problem, dict, Deadline], SolveResult]

__all__ = ["solve_contracted", "CONTRACT_MODES", "MIN_SHRINK", "ROWS_PER_ROUND",
           "REPAIR_TIME_SHARE", "FIRST_ROUND_TIME_SHARE", "MIN_ROUND_SECONDS",
           "ROUND_SECONDS_PER_STATE"]

logger = logging.getLogger(__name__)

#: ``contract`` option: ``"auto"`` (when the model is too big to build, or when contraction
#: leaves at most :data:`MIN_SHRINK` of the nodes), ``"on"`` (whenever it shrinks the
#: problem at all) or ``"off"``.
CONTRACT_MODES = ("auto", "on", "off")
#: ``"auto"`` contracts a problem that fits the model limits only when at most this share of
#: its nodes is left as groups.
MIN_SHRINK = 0.1
#: Rows added to the relaxation per round (the worst of each overflowing run).
ROWS_PER_ROUND = 32
#: A round is started only with at least this many seconds left, plus
#: :data:`ROUND_SECONDS_PER_STATE` per state of the contraction: building the contracted
#: problem, the backend's fixed steps, expanding and repairing the answer do not look at the
#: clock (IOPDDL T: 538,000 states, about 1.5 s before the solver starts).
MIN_ROUND_SECONDS = 0.5
ROUND_SECONDS_PER_STATE = 3e-6
#: Share of the time left that a round's repair on the original problem may use.
REPAIR_TIME_SHARE = 0.1
#: Share of the time left that the first round (no rows yet) may use: its optimum ignores
#: memory and typically overflows it several times over, so what it is needed for is the
#: first rows, not a proof.
FIRST_ROUND_TIME_SHARE = 0.3


def solve_contracted(solve_sub: SolveSub, name: str, problem: Problem,
                     options: dict[str, Any], deadline: Deadline, warm: Incumbent, *,
                     required: bool, stats: dict) -> SolveResult | None:
    """Solve ``problem`` through its contraction with a backend's own solver.

    ``solve_sub`` is that backend's solve of one contracted problem (:data:`SolveSub`) and
    ``name`` its registry name: the contraction is a reduction (apply: :func:`contract`,
    invert: :meth:`Contraction.expand`) that this function drives.

    ``warm`` is the incumbent (feasible, no forbidden entry). Returns ``None`` when
    contraction does not apply (it failed, or shrinks too little and is not ``required``),
    so that the caller goes on with the original problem.
    """
    con = contract(problem, upper=warm.cost, deadline=deadline)
    if con is None:
        return None
    shrink = con.n_groups / max(problem.n_nodes, 1)
    if con.n_groups >= problem.n_nodes or (not required and options["contract"] == "auto"
                                           and shrink > MIN_SHRINK):
        return None
    stats = {**stats, "contracted": {"groups": con.n_groups, "states": con.n_states,
                                     "edges": int(con.edges.shape[0]),
                                     "seconds": round(deadline.elapsed(), 3)}}
    if not problem.has_budget or problem.intervals is None:
        return _exact(solve_sub, name, con, options, deadline, warm, stats)
    return _rows(solve_sub, name, con, options, deadline, warm, stats)


def _sub_options(options: dict[str, Any], con: Contraction, start: Incumbent,
                 problem: Problem) -> dict[str, Any]:
    sub = dict(options)
    sub["contract"] = "off"
    r = Incumbent.of(problem, con.restrict(start.assignment), start.source)
    sub["warm_start"] = None if r is None else r.assignment
    return sub


def _round_fits(con: Contraction, deadline: Deadline) -> bool:
    """Whether the time left holds one more round (:data:`MIN_ROUND_SECONDS`)."""
    left = deadline.left()
    return left is None or left >= MIN_ROUND_SECONDS + ROUND_SECONDS_PER_STATE * con.n_states


def _exact(solve_sub: SolveSub, name: str, con: Contraction, options: dict[str, Any],
           deadline: Deadline, warm: Incumbent, stats: dict) -> SolveResult:
    """Without interval rows the contracted problem is exact: solve it once."""
    problem = con.original
    if not _round_fits(con, deadline):
        out = dict(stats)
        out["time_limit_reached"] = True
        return _result(name, warm, -math.inf, deadline, out)
    sub = con.problem()
    res = solve_sub(sub, _sub_options(options, con, warm, sub), deadline)
    best = warm
    if res.assignment is not None:
        best = best_incumbent(Incumbent.of(problem, con.expand(res.assignment),
                                           "contracted"), warm)
    bound = min(res.bound, best.cost) if math.isfinite(res.bound) else res.bound
    out = dict(res.stats)
    out.update(stats)
    return _result(name, best, bound, deadline, out)


def _rows(solve_sub: SolveSub, name: str, con: Contraction, options: dict[str, Any],
          deadline: Deadline, warm: Incumbent, stats: dict) -> SolveResult:
    """Row generation over the interval model's memory rows (module docstring)."""
    problem = con.original
    best = warm
    bound = -math.inf
    rows = np.zeros((0, 2), dtype=np.int64)
    rounds: list[dict] = []
    proved = False
    last: dict = {}
    capped = False
    while not deadline.passed() and _round_fits(con, deadline):
        sub = con.problem(rows)
        left = deadline.left()
        round_deadline = deadline
        if left is not None and not rounds:
            round_deadline = Deadline(FIRST_ROUND_TIME_SHARE * left)
        res = solve_sub(sub, _sub_options(options, con, best, sub), round_deadline)
        capped = round_deadline is not deadline and res.status != OPTIMAL
        last = res.stats
        if math.isfinite(res.bound):
            bound = max(bound, res.bound)
        info = {"rows": int(rows.shape[0]), "status": res.status,
                "objective": res.objective, "bound": res.bound,
                "seconds": round(deadline.elapsed(), 3)}
        rounds.append(info)
        if res.assignment is None:
            break
        a = con.expand(res.assignment)
        fits = Incumbent.of(problem, a, "contracted")
        if fits is not None:
            best = best_incumbent(best, fits)
            proved = res.status == OPTIMAL
        else:
            repaired = _repair(problem, a, deadline)
            info["repaired"] = None if repaired is None else repaired.cost
            best = best_incumbent(best, repaired)
        if proved or best.cost - bound <= OPTIMALITY_RTOL * max(abs(best.cost), 1e-12):
            proved = True
            break
        if fits is not None:     # an unfinished relaxation's answer that fits: no row to add
            if capped:
                continue        # the same relaxation again, with all the time left
            break
        new = violated_rows(problem, a, limit=ROWS_PER_ROUND,
                            exclude={tuple(x) for x in rows.tolist()})
        if new.shape[0] == 0:
            break
        rows = np.concatenate([rows, new])
    out = dict(last)
    out.update(stats)
    out["row_generation"] = {"rounds": rounds, "rows": int(rows.shape[0])}
    if proved:
        bound = best.cost
    return _result(name, best, min(bound, best.cost), deadline, out)


def _repair(problem: Problem, a: np.ndarray, deadline: Deadline) -> Incumbent | None:
    """The local search's memory repair and descent from ``a`` (a share of the time left)."""
    left = deadline.left()
    ls = LocalSearch(problem, Deadline(None if left is None else REPAIR_TIME_SHARE * left))
    ls.set(a)
    if not ls.repair_memory():
        return None
    ls.descend(20)
    return Incumbent.of(problem, ls.a.copy(), "repaired")


def _result(solver: str, best: Incumbent, bound: float, deadline: Deadline,
            stats: dict) -> SolveResult:
    cost = best.cost
    proved = math.isfinite(bound) and cost - bound <= OPTIMALITY_RTOL * max(abs(cost), 1e-12)
    stats["proof"] = "contracted" if proved else None
    return SolveResult(assignment=best.assignment, objective=cost,
                       status=OPTIMAL if proved else FEASIBLE,
                       bound=cost if proved else bound,
                       gap=0.0 if proved else relative_gap(cost, bound),
                       seconds=deadline.elapsed(), solver=solver, stats=stats)
