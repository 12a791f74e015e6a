"""The k best distinct assignments of a problem (Lawler-Murty), through the public solver API.

:func:`k_best` enumerates assignments in increasing objective by Lawler-Murty partitioning,
with nothing but the public solver API: a partition of the assignment space fixes some nodes
to one configuration and forbids some configurations of others, which a derived
:class:`~milp_parallel.problem.Problem` expresses by setting the excluded node costs to
``inf`` (forbidden); :func:`~milp_parallel.solvers.solve_problem` finds the best assignment
of each partition. After the ``i``-th best assignment ``a`` (found in partition ``(F, X)``),
its partition is split into one child per free node ``v_j``: ``v_1 .. v_(j-1)`` fixed to
``a``'s choices and ``a_(v_j)`` forbidden for ``v_j``; every other assignment of the partition
lies in exactly one child. Children are solved lazily (queued at their parent's objective, a
lower bound, and solved when they come first), so a few solves suffice when the next best
assignments differ from the optimum in few nodes.

``solve(..., rerank=k)`` simulates each of them and keeps the fastest (the separable
objective the solver optimizes is an approximation; the simulator sees the overlap and
concurrency it misses). May import: ``problem``, ``errors`` and ``solvers`` only.

Examples
--------
>>> import numpy as np
>>> from milp_parallel import Problem
>>> p = Problem([np.array([0.0, 1.0, 4.0]), np.array([0.0, 2.0, 5.0])], [(0, 1)],
...             [np.zeros((3, 3))])
>>> [(s.objective, s.assignment) for s in k_best(p, 4)]
[(0.0, (0, 0)), (1.0, (1, 0)), (2.0, (0, 1)), (3.0, (1, 1))]
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np

from ..errors import InvalidProblemError
from ..problem import Problem
from .result import FEASIBLE, OPTIMAL
from .solve import solve_problem

__all__ = ["Solution", "k_best", "restricted"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Solution:
    """One assignment and its objective (the ``i``-th best, in :func:`k_best`'s order)."""

    objective: float
    assignment: tuple[int, ...]


def restricted(problem: Problem, fixed: Mapping[int, int], forbidden: Mapping[int, set]
               ) -> Problem | None:
    """``problem`` with nodes fixed to one configuration and configurations forbidden
    (their node costs set to ``inf``); ``None`` when a node has nothing left."""
    costs = []
    for v, c in enumerate(problem.node_costs):
        c = np.array(c, dtype=float)
        if v in fixed:
            keep = c[fixed[v]]
            c[:] = math.inf
            c[fixed[v]] = keep
        for k in forbidden.get(v, ()):
            c[k] = math.inf
        if not np.isfinite(c).any():
            return None
        costs.append(c)
    return Problem(costs, problem.edges, problem.edge_costs, memory=problem.memory,
                   memory_limit=problem.memory_limit, intervals=problem.intervals,
                   node_names=problem.node_names, config_labels=problem.config_labels)


def _solve(problem: Problem, fixed, forbidden, solver: str, options) -> Solution | None:
    sub = restricted(problem, fixed, forbidden)
    if sub is None:
        return None
    res = solve_problem(sub, solver, **options)
    if res.assignment is None or res.status not in (OPTIMAL, FEASIBLE):
        return None
    a = tuple(int(x) for x in res.assignment)
    ev = problem.evaluate(a)
    if not (ev.feasible and math.isfinite(ev.cost)):
        return None
    if res.status != OPTIMAL:
        logger.warning("k_best: the solver did not prove a partition's optimum; the order of "
                       "the assignments it returns may not be exact")
    return Solution(float(ev.cost), a)


def k_best(problem: Problem, k: int, *, solver: str = "dp", first: Any = None,
           max_enumerated: int | None = None, **options: Any) -> list[Solution]:
    """The ``k`` best distinct assignments of ``problem``, best first.

    With a memory budget, the assignments are enumerated on the problem without it (much
    faster to solve) and those over the budget skipped: the ``k`` best feasible assignments
    are the first ``k`` feasible ones of that order. When more than ``max_enumerated``
    assignments are skipped (a tightly binding budget), the enumeration restarts on the
    problem with its budget.

    Parameters
    ----------
    problem : Problem
    k : int
        How many (fewer when the problem has fewer feasible assignments).
    solver : str, default "dp"
        The solver of each partition (exact, so the order is exact).
    first : sequence of int, optional
        The optimum, when already known (saves a solve).
    max_enumerated : int, optional
        See above (default ``20 * k + 100``).
    **options
        Passed to :func:`~milp_parallel.solvers.solve_problem`.

    Returns
    -------
    list of Solution

    Raises
    ------
    InvalidProblemError
        When ``k`` is not a positive integer.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidProblemError(f"k must be a positive integer, got {k!r}")
    if problem.has_budget:
        cap = 20 * int(k) + 100 if max_enumerated is None else int(max_enumerated)
        free = problem.with_memory_limit(None)
        out: list[Solution] = []
        for sol in _murty(free, solver, None, options):
            if problem.evaluate(sol.assignment).feasible:
                out.append(sol)
                if len(out) == k:
                    return out
            elif cap <= 0:
                logger.info("k_best: the budget binds; enumerating with it")
                return list(itertools.islice(_murty(problem, solver, first, options), k))
            else:
                cap -= 1
        return out
    return list(itertools.islice(_murty(problem, solver, first, options), k))


def _murty(problem: Problem, solver: str, first: Any, options) -> Iterator[Solution]:
    """All assignments of ``problem`` in increasing objective (Lawler-Murty, lazily)."""
    tie = itertools.count()
    heap: list = []
    if first is not None:
        a = tuple(int(x) for x in first)
        ev = problem.evaluate(a)
        root = Solution(float(ev.cost), a) if ev.feasible else None
    else:
        root = _solve(problem, {}, {}, solver, options)
    if root is None:
        return
    heapq.heappush(heap, (root.objective, next(tie), root, {}, {}))
    n = problem.n_nodes
    while heap:
        obj, _, sol, fixed, forbidden = heapq.heappop(heap)
        if sol is None:                 # a child queued at its parent's bound: solve it now
            sol = _solve(problem, fixed, forbidden, solver, options)
            if sol is not None:
                heapq.heappush(heap, (sol.objective, next(tie), sol, fixed, forbidden))
            continue
        yield sol
        # split the partition around sol: child j fixes the free nodes before j to sol's
        # choices and forbids sol's choice at free node j
        fix = dict(fixed)
        for v in range(n):
            if v in fixed:
                continue
            if problem.n_configs[v] - len(forbidden.get(v, ())) > 1:
                forb = {u: set(x) for u, x in forbidden.items()}
                forb.setdefault(v, set()).add(sol.assignment[v])
                heapq.heappush(heap, (obj, next(tie), None, dict(fix), forb))
            fix[v] = sol.assignment[v]
