"""Exhaustive enumeration: the reference every other solver is tested against.

Every assignment is enumerated in mixed-radix order, in chunks, and evaluated with numpy
(node costs, edge costs, memory per device under either memory model, exactly as
:meth:`Problem.evaluate <milp_parallel.Problem.evaluate>` does). Only for tiny instances: the
default limit is ``2e6`` assignments.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from typing import Any

import numpy as np

from ..errors import ProblemTooLargeError
from ..problem import MEMORY_RTOL, Problem
from .base import Capabilities, Option, Solver, check_int, check_number
from .options import Deadline
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolveResult

__all__ = ["BruteForceSolver", "brute_force", "DEFAULT_MAX_ASSIGNMENTS"]

logger = logging.getLogger(__name__)

#: Default refusal threshold on the number of assignments ``prod(K_v)``.
DEFAULT_MAX_ASSIGNMENTS = 2_000_000


def _n_assignments(problem: Problem) -> float:
    """``prod(K_v)`` as a float (it may not fit an int64)."""
    return float(np.prod(problem.n_configs.astype(np.float64)))


def _interval_live(problem: Problem) -> np.ndarray:
    """``(n, T)`` 0/1 matrix: node ``v`` is live at the ``t``-th distinct start time."""
    iv = problem.intervals
    live = iv[:, 1] > iv[:, 0]
    times = np.unique(iv[live, 0])
    return ((iv[:, 0:1] <= times[None, :]) & (times[None, :] < iv[:, 1:2])).astype(np.float64)


def brute_force(problem: Problem, *, max_assignments: float = DEFAULT_MAX_ASSIGNMENTS,
                chunk_size: int = 1 << 15, time_limit: float | None = None) -> SolveResult:
    """Enumerate every assignment of ``problem`` and return the best feasible one.

    Parameters
    ----------
    problem : Problem
        Any problem: with or without memory, all-live or interval memory model, any budget.
    max_assignments : float
        Refuse when ``prod(K_v)`` exceeds this (default ``2e6``).
    chunk_size : int
        Assignments evaluated per numpy batch (bounds memory use: about
        ``chunk_size * n_nodes`` integers).
    time_limit : float, optional
        Seconds; when it runs out, the best assignment so far is returned as ``feasible`` (or
        ``unknown`` when none was found yet).

    Returns
    -------
    SolveResult
        ``optimal`` with the first (in mixed-radix order, node 0 most significant) assignment
        of least cost among the feasible ones (fewest forbidden entries first, then the cost
        of the rest: see :mod:`~milp_parallel.solvers.forbidden`), or ``infeasible``
        (``assignment`` None). The
        stats hold ``n_assignments``, ``n_finite_cost`` (assignments without a forbidden
        choice), and, with memory tables, ``least_peak_memory`` (per device, the least peak
        any assignment of finite cost reaches; the least over all assignments when every
        assignment is forbidden).

    Raises
    ------
    ProblemTooLargeError
        If ``prod(K_v) > max_assignments``.

    Examples
    --------
    >>> import numpy as np
    >>> from milp_parallel import Problem
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> r = brute_force(p)
    >>> r.status, r.objective, r.assignment.tolist()
    ('optimal', 2.5, [1, 1])
    """
    t0 = time.perf_counter()
    total = _n_assignments(problem)
    if total > max_assignments:
        raise ProblemTooLargeError(
            f"brute force would enumerate {total:.3g} assignments (the product of the "
            f"{problem.n_nodes} nodes' configuration counts), above max_assignments="
            f"{max_assignments:.3g}; use solver='dp' (exact graph search) or a MILP solver "
            "('highs', 'cbc', 'cpsat'), or raise max_assignments")
    total = int(total)
    n = problem.n_nodes
    k = problem.n_configs
    # Mixed radix: node 0 most significant.
    strides = np.ones(n, dtype=np.int64)
    for v in range(n - 2, -1, -1):
        strides[v] = strides[v + 1] * k[v + 1]
    eu, ev = problem.edges[:, 0], problem.edges[:, 1]
    mem = problem.memory
    has_mem = mem is not None
    limit = problem.memory_limit
    live = _interval_live(problem) if has_mem and problem.intervals is not None else None
    if has_mem:
        d = problem.n_devices
        least_peak_finite = np.full(d, np.inf)
        least_peak_any = np.full(d, np.inf)

    best_key = (math.inf, math.inf)
    best_idx = -1
    forbidden = problem.forbidden_cost
    n_finite = 0
    timed_out = False
    chunk_size = max(1, int(chunk_size))
    for start in range(0, total, chunk_size):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            timed_out = True
            break
        idx = np.arange(start, min(start + chunk_size, total), dtype=np.int64)
        a = (idx[:, None] // strides[None, :]) % k[None, :]          # (m, n)
        # forbidden entries are counted, the rest added (the lexicographic order)
        cost = np.zeros(idx.size)
        count = np.zeros(idx.size, dtype=np.int64)
        for x in itertools.chain((c[a[:, v]] for v, c in enumerate(problem.node_costs)),
                                 (t[a[:, eu[e]], a[:, ev[e]]]
                                  for e, t in enumerate(problem.edge_costs))):
            bad = (x >= forbidden) & (x < math.inf)
            count += bad
            cost += np.where(bad, 0.0, x)
        finite = np.isfinite(cost)
        n_finite += int(finite.sum())
        ok = finite
        if has_mem:
            use = np.stack([mem[v][a[:, v]] for v in range(n)], axis=1)  # (m, n, D)
            if live is None:
                peak = use.sum(axis=1)                                   # (m, D)
            elif live.shape[1] == 0:
                peak = np.zeros((idx.size, d))
            else:
                peak = np.einsum("mnd,nt->mtd", use, live).max(axis=1)   # (m, D)
            least_peak_any = np.minimum(least_peak_any, peak.min(axis=0))
            if finite.any():
                least_peak_finite = np.minimum(least_peak_finite, peak[finite].min(axis=0))
            if limit is not None:
                ok = ok & np.all(peak <= limit * (1 + MEMORY_RTOL), axis=1)
        if ok.any():
            cand = np.nonzero(ok)[0]
            i = int(cand[np.lexsort((cost[cand], count[cand]))[0]])
            if (int(count[i]), float(cost[i])) < best_key:
                best_key = (int(count[i]), float(cost[i]))
                best_idx = int(idx[i])

    stats: dict[str, Any] = {"n_assignments": total, "n_finite_cost": n_finite,
                             "timed_out": timed_out}
    if has_mem:
        least = least_peak_finite if n_finite else least_peak_any
        stats["least_peak_memory"] = least
    seconds = time.perf_counter() - t0
    if best_idx < 0:
        status = UNKNOWN if timed_out else INFEASIBLE
        return SolveResult(assignment=None, objective=math.nan, status=status,
                           bound=-math.inf if timed_out else math.inf,
                           gap=math.inf, seconds=seconds, solver="brute", stats=stats)
    assignment = (best_idx // strides) % k
    ev = problem.evaluate(assignment)
    objective = ev.cost
    stats["forbidden_entries"] = ev.forbidden_entries
    if timed_out:
        return SolveResult(assignment=assignment, objective=objective, status=FEASIBLE,
                           bound=-math.inf, gap=math.inf, seconds=seconds, solver="brute",
                           stats=stats, forbidden_entries=ev.forbidden_entries,
                           allowed_cost=ev.allowed_cost)
    return SolveResult(assignment=assignment, objective=objective, status=OPTIMAL,
                       bound=objective, gap=0.0, seconds=seconds, solver="brute", stats=stats,
                       forbidden_entries=ev.forbidden_entries, allowed_cost=ev.allowed_cost)


class BruteForceSolver(Solver):
    """Exhaustive enumeration (registry name ``"brute"``); see :func:`brute_force`.

    Exact for every memory model. Options: ``max_assignments`` (default ``2e6``) and
    ``chunk_size``; ``threads``, ``gap`` and ``warm_start`` do not apply (noted in
    ``stats["ignored_options"]``).
    """

    name = "brute"
    package = None
    module = None
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=True,
                                time_limit=True, threads=False, gap=False, warm_start=False)
    options = (
        Option("max_assignments", DEFAULT_MAX_ASSIGNMENTS,
               check_number("max_assignments", 1.0)),
        Option("chunk_size", 1 << 15, check_int("chunk_size", 1)),
    )

    def _solve(self, problem: Problem, options: dict[str, Any],
               deadline: Deadline) -> SolveResult:
        """Solve by enumeration (raises ProblemTooLargeError above ``max_assignments``)."""
        return brute_force(problem, max_assignments=options["max_assignments"],
                           chunk_size=options["chunk_size"],
                           time_limit=deadline.left() if deadline.time_limit else None)
