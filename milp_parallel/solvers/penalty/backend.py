"""The ``"penalty"`` backend: memory as per-node penalties, rounds of unconstrained solves.

For the interval memory model (IOPDDL's), where row generation on a MILP does not finish a
round on the large instances, memory becomes a soft term (:mod:`.weights`). Each round:

1. the unconstrained problem with the penalties in its node costs is solved by the inner
   solver (:mod:`.inner`: toulbar2 when installed, else our descent), on the contraction
   of the one-to-one edges (:mod:`~milp_parallel.solvers.contract`; a per-node penalty is
   a cost on its group's states, so nothing is lost) of the problem that
   :func:`~milp_parallel.solvers.reduce.reduce_problem` left;
2. the answer, expanded, narrows each node's bracket of weights (overflowing or not);
3. it is polished on the reduced problem by the local search's memory repair and its 1-opt
   and 2-opt moves (:class:`~milp_parallel.solvers.heuristics.LocalSearch`); the best
   feasible answer (fewest forbidden entries, then cost) is kept.

Status ``feasible`` (never ``optimal`` unless the bound meets the cost), ``infeasible``
when even the least memory of every node overflows, ``unknown`` without an answer. The
bound is the interval Lagrangian bound (:mod:`~milp_parallel.solvers.lagrangian`: MPLP
dual ascent with multipliers on the memory rows) on the contracted problem.

May import: ``problem``, ``solvers.base``, ``solvers.options``, ``solvers.result``,
``solvers.heuristics``, ``solvers.memory``, ``solvers.reduce``, ``solvers.contract``,
``solvers.dual``, ``solvers.lagrangian``, ``solvers.penalty``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ...problem import MEMORY_RTOL, Problem
from ..base import Capabilities, Option, Solver, check_choice, check_int, check_number
from ..contract import contract
from ..dual import DualAscent
from ..heuristics import LocalSearch, incumbent
from ..lagrangian import interval_lagrangian_bound
from ..memory import least_memory
from ..options import Deadline
from ..reduce import expand, reduce_problem
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
from .inner import INNER_SOLVERS, inner_solver
from .weights import Weights

__all__ = ["PenaltySolver"]

logger = logging.getLogger(__name__)

#: Share of the time left for the first incumbent (memory-first greedy and repair).
INCUMBENT_SHARE = 0.15
#: Share of the time left for the dual bound.
BOUND_SHARE = 0.05
#: Share of a round's seconds its polish may use (at least one second).
POLISH_SHARE = 0.5


class _Identity:
    """The contraction's interface when nothing contracts: every node its own group."""

    def __init__(self, problem: Problem):
        self.group = np.arange(problem.n_nodes)
        self.maps = [np.arange(k) for k in problem.n_configs]
        self.node_costs = [np.asarray(c, dtype=np.float64) for c in problem.node_costs]
        self.edges = np.asarray(problem.edges, dtype=np.int64).reshape(-1, 2)
        self.edge_costs = list(problem.edge_costs)
        self.n_groups = problem.n_nodes

    def expand(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a, dtype=np.int64)

    def restrict(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a, dtype=np.int64)


class PenaltySolver(Solver):
    name = "penalty"
    package = None
    module = None
    capabilities = Capabilities(exact=False, memory_all_live=False, threads=False, gap=False)
    options = (
        Option("inner", "auto", check_choice("inner", ("auto",) + INNER_SOLVERS),
               "the unconstrained solver of each round (auto: toulbar2 if installed)"),
        Option("round_seconds", 3.0, check_number("round_seconds", 0.0, strict=True),
               "seconds per inner solve"),
        Option("max_rounds", 40, check_int("max_rounds", 1), "rounds at most"),
        Option("reduce", True, lambda v: bool(v), "reduce_problem first"),
        Option("seed", 0, check_int("seed"), "seed of the local search"),
    )

    def _solve(self, problem: Problem, options: dict[str, Any],
               deadline: Deadline) -> SolveResult:
        stats: dict = {}
        if problem.has_budget:
            least = least_memory(problem)
            if np.any(least > problem.memory_limit * (1 + MEMORY_RTOL)):
                stats["least_peak_memory"] = least
                return SolveResult(None, math.nan, INFEASIBLE, math.inf, math.inf,
                                   deadline.elapsed(), self.name, stats)
        red = reduce_problem(problem) if options["reduce"] and problem.n_nodes else None
        q = red.problem if red is not None else problem
        if red is not None:
            stats["reductions"] = {k: v for k, v in red.stats.items()
                                   if isinstance(v, (int, float))}
        warm = None
        if options["warm_start"] is not None:
            start = red.carry(options["warm_start"]) if red is not None else \
                options["warm_start"]
            warm = Incumbent.of(q, start, "user")
        if warm is None or warm.forbidden_entries:
            a, _ = incumbent(q, deadline=Deadline(_share(deadline, INCUMBENT_SHARE)),
                             seed=options["seed"])
            warm = best_incumbent(warm, Incumbent.of(q, a, "heuristic"))
        best, bound, infeasible = self._rounds(q, options, deadline, warm, stats)
        if best is None:
            if infeasible:
                return SolveResult(None, math.nan, INFEASIBLE, math.inf, math.inf,
                                   deadline.elapsed(), self.name, stats)
            return SolveResult(None, math.nan, UNKNOWN, -math.inf, math.inf,
                               deadline.elapsed(), self.name, stats)
        assignment = expand(red, best.assignment) if red is not None else best.assignment
        cost = float(problem.evaluate(assignment).cost)
        bound = min(bound, cost)
        status = OPTIMAL if relative_gap(cost, bound) <= OPTIMALITY_RTOL else FEASIBLE
        return SolveResult(assignment, cost, status, bound,
                           0.0 if status == OPTIMAL else relative_gap(cost, bound),
                           deadline.elapsed(), self.name, stats)

    def _rounds(self, q: Problem, options: dict[str, Any], deadline: Deadline,
                warm: Incumbent | None,
                stats: dict) -> tuple[Incumbent | None, float, bool]:
        """The penalty rounds: ``(best, lower bound, proved infeasible)``."""
        upper = warm.cost if warm is not None and not warm.forbidden_entries else math.inf
        con = contract(q, upper=upper, deadline=deadline) if q.n_nodes else None
        if con is None and warm is None and q.n_nodes and contract(q) is None:
            return None, -math.inf, True    # arc consistency emptied a domain: no finite cost
        if con is None:
            con = _Identity(q)
        else:
            stats["contracted"] = {"groups": con.n_groups, "states": con.n_states,
                                   "edges": int(con.edges.shape[0])}
        logger.debug("penalty: warm and contraction at %.1f s", deadline.elapsed())
        bound = self._bound(q, con, deadline, upper, stats)
        logger.debug("penalty: bound at %.1f s", deadline.elapsed())
        inner = inner_solver(options["inner"])
        loop = stats["penalty"] = {"inner": inner.name, "rounds": 0, "fitted": 0}
        interval = q.has_budget and q.intervals is not None
        ls = LocalSearch(q, seed=options["seed"])
        best = warm
        start_g = con.restrict(warm.assignment) if warm is not None else None
        if start_g is None or np.any(start_g < 0):
            start_g = np.array([int(np.argmin(c)) for c in con.node_costs], dtype=np.int64)
        weights = None
        if interval:
            ref = warm.cost if warm is not None else 1.0
            weights = Weights(q, start=10.0 * abs(ref) / max(1, q.n_nodes))
            loop["risky_nodes"] = int(weights.risky.sum())
        rounds = fitted = 0
        sec = options["round_seconds"]
        while rounds < options["max_rounds"]:
            left = deadline.left()
            if left is not None and left < 1.0 + (0.5 if rounds else 0.0):
                break
            secs = sec if left is None else max(1.0, min(sec, 0.6 * left))
            unary = [c.copy() for c in con.node_costs]
            if weights is not None:
                for v in np.nonzero(weights.lam > 0)[0]:
                    g = con.group[v]
                    unary[g] += weights.unary(int(v))[con.maps[v]]
            t0 = deadline.elapsed()
            sol = inner.solve(unary, con.edges, list(con.edge_costs), start_g, secs)
            t1 = deadline.elapsed()
            rounds += 1
            start_g = sol
            a = con.expand(sol)
            if weights is not None:
                fits_now = weights.update(a)
                fitted += fits_now
            else:
                fits_now = True
            found = self._polish(ls, q, a, deadline, max(1.0, POLISH_SHARE * secs))
            logger.debug("penalty round %d: inner %.1f s, polish %.1f s, fits %s, found %s",
                         rounds, t1 - t0, deadline.elapsed() - t1, fits_now,
                         None if found is None else f"{found.cost:.6g}")
            if found is not None and (best is None or found.key < best.key):
                logger.info("penalty round %d: %.6g", rounds, found.cost)
                if options["callback"] is not None:
                    options["callback"](Progress(self.name, deadline.elapsed(), found.cost,
                                                 bound))
            best = best_incumbent(best, found)
            if weights is None:
                break
        loop["rounds"], loop["fitted"] = rounds, fitted
        return best, bound, False

    @staticmethod
    def _polish(ls: LocalSearch, q: Problem, a: np.ndarray, deadline: Deadline,
                seconds: float) -> Incumbent | None:
        left = deadline.left()
        ls.deadline = Deadline(seconds if left is None else min(seconds, left))
        ls.set(a)
        if ls.over() and not ls.repair_memory():
            return None
        for _ in range(5):
            ls.descend()
            if not ls.descend_pairs() or ls.deadline.passed():
                break
        return Incumbent.of(q, ls.a, "penalty")

    @staticmethod
    def _bound(q: Problem, con, deadline: Deadline, upper: float, stats: dict) -> float:
        """The interval Lagrangian bound (:mod:`~milp_parallel.solvers.lagrangian`) for an
        interval budget, else dual ascent on the unconstrained contracted problem (every
        constrained answer is an unconstrained one); ``-inf`` when it cannot."""
        if any(not np.isfinite(c).any() for c in con.node_costs):
            return -math.inf
        share = Deadline(_share(deadline, BOUND_SHARE))
        if q.has_budget and q.intervals is not None:
            lag = interval_lagrangian_bound(q, contraction=con, deadline=share, upper=upper)
            stats["lagrangian"] = lag.stats()
            return float(lag.bound)
        unary = [np.asarray(c, dtype=np.float64) for c in con.node_costs]
        try:
            dual = DualAscent(unary, con.edges, list(con.edge_costs))
            return float(dual.run(sweeps=100, deadline=share))
        except (ValueError, FloatingPointError):
            return -math.inf


def _share(deadline: Deadline, fraction: float) -> float | None:
    left = deadline.left()
    return None if left is None else fraction * left
