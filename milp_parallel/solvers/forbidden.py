"""Forbidden entries, exactly: the reduction every solver runs behind.

An entry at or above :attr:`~milp_parallel.Problem.forbidden_cost` (``1e18`` by default, the
IOPDDL contest's "effectively forbidden" cost) but below ``inf`` is *counted, not added*: an
assignment's cost is the pair ``(forbidden entries, allowed cost)`` and assignments compare
lexicographically. Adding ``1e18`` to small costs in float64 erases them (``1e18 + 6 ==
1e18 + 58``), and a solver that sees such a coefficient loses its tolerances, so no solver
ever sees one.

:func:`lexicographic` (the ``apply`` of the reduction) replaces every forbidden entry by a
marker ``M`` just above every difference two assignments' allowed costs can have::

    M = 2 ** (floor(log2(1 + span)) + 1),  span = sum_t (max(max_t, 0) - min(min_t, 0))

over the node and edge tables ``t``, ``max_t`` / ``min_t`` the largest and least allowed entry
(neither forbidden nor ``inf``). Then for any two assignments ``a``, ``b`` with ``k_a < k_b``
forbidden entries, ``k_a M + r_a < k_b M + r_b``: the plain minimum of the copy is the
lexicographic minimum of the original, its costs are of the size of the allowed costs (no
precision is lost), and every solver, presolve step, bound and optimality test of the copy is
lexicographic without knowing it. The copy's ``forbidden_cost`` is ``M``, so the heuristics
still avoid those entries first, and applying the reduction again changes nothing.

:func:`restore` (the ``invert``) re-evaluates the answer on the original problem: the same
assignment and status; objective, forbidden count and allowed cost from the original; the
copy's bound stays a valid lower bound on the original's objective (each forbidden entry of
the original costs at least ``M``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidProblemError
from ..problem import FORBIDDEN_COST, Problem
from .result import OPTIMAL, SolveResult, relative_gap

__all__ = ["Lexicographic", "lexicographic", "restore", "marker"]


@dataclass(frozen=True)
class Lexicographic:
    """The result of :func:`lexicographic`.

    Attributes
    ----------
    problem : Problem
        The copy the solver sees (the original itself when it has no forbidden entry).
    original : Problem
    marker : float or None
        ``M``, the cost of one forbidden entry in the copy (``None``: nothing was replaced).
    """

    problem: Problem
    original: Problem
    marker: float | None


def _flat(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Every node and edge table in one array, and the tables' sizes."""
    tables = problem.node_costs + problem.edge_costs
    sizes = np.fromiter((t.size for t in tables), dtype=np.int64, count=len(tables))
    return np.concatenate([t.ravel() for t in tables]), sizes


def _marker(flat: np.ndarray, sizes: np.ndarray, forbidden: float) -> float:
    starts = np.cumsum(sizes) - sizes
    allowed = flat < forbidden                # neither forbidden nor inf (nor NaN)
    hi = np.maximum.reduceat(np.where(allowed, flat, -math.inf), starts)
    lo = np.minimum.reduceat(np.where(allowed, flat, math.inf), starts)
    some = hi > -math.inf                     # tables with an allowed entry
    span = math.fsum((np.maximum(hi[some], 0.0) - np.minimum(lo[some], 0.0)).tolist())
    return float(2.0 ** (math.floor(math.log2(1.0 + span)) + 1))


def marker(problem: Problem) -> float:
    """``M``: a power of two above every difference of two assignments' allowed costs."""
    flat, sizes = _flat(problem)
    return _marker(flat, sizes, problem.forbidden_cost)


def lexicographic(problem: Problem) -> Lexicographic:
    """The copy of ``problem`` in which each forbidden entry costs :func:`marker` ``M``.

    Raises
    ------
    InvalidProblemError
        When the allowed costs are so large that ``M`` would reach ``1e18`` (then float64
        cannot tell a forbidden entry from the sum of allowed ones): rescale the costs.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([9.0, 3.0]), np.array([0.0, 0.0])], [(0, 1)],
    ...             [np.array([[1e18, 16.0], [1e18, 6.0]])])
    >>> lex = lexicographic(p)
    >>> lex.marker, lex.problem.edge_costs[0].tolist()
    (32.0, [[32.0, 16.0], [32.0, 6.0]])
    """
    cached = problem._cache.get("lexicographic")    # the tables are immutable: once each
    if cached is None:
        cached = problem._cache["lexicographic"] = _lexicographic(problem)
    return cached


def _lexicographic(problem: Problem) -> Lexicographic:
    if not problem.has_forbidden_entries:
        return Lexicographic(problem, problem, None)
    f = problem.forbidden_cost
    flat, sizes = _flat(problem)
    m = _marker(flat, sizes, f)
    bad = (flat >= f) & (flat < math.inf)
    if m == f and np.all(flat[bad] == f):
        return Lexicographic(problem, problem, None)     # already a lexicographic copy
    if m >= FORBIDDEN_COST:
        raise InvalidProblemError(
            f"the allowed costs of two assignments can differ by up to {m:.3g}, too close to "
            f"the forbidden marker {f:.3g} for float64 to keep both apart; rescale the costs "
            "(e.g. to microseconds instead of picoseconds)")
    swapped = np.where(bad, m, flat)
    ends = np.cumsum(sizes).tolist()
    tables = problem.node_costs + problem.edge_costs
    pieces = [swapped[b - t.size:b].reshape(t.shape) for b, t in zip(ends, tables)]
    n = problem.n_nodes
    copy = problem.with_costs(pieces[:n], pieces[n:], forbidden_cost=m)
    copy._cache["lexicographic"] = Lexicographic(copy, copy, None)
    return Lexicographic(copy, problem, m)


def restore(lex: Lexicographic, result: SolveResult) -> SolveResult:
    """``result`` (of ``lex.problem``) as a result of ``lex.original``."""
    stats = dict(result.stats)
    if result.assignment is None:
        if lex.marker is not None:
            stats["forbidden_marker"] = lex.marker
        return dataclasses.replace(result, stats=stats)
    if lex.marker is None:
        return result
    ev = lex.original.evaluate(result.assignment)
    stats["forbidden_entries"] = ev.forbidden_entries
    stats["forbidden_marker"] = lex.marker
    stats["sentinel_entries"] = ev.forbidden_entries
    objective = ev.cost
    bound = objective if result.status == OPTIMAL else min(result.bound, objective)
    gap = 0.0 if result.status == OPTIMAL else relative_gap(objective, bound)
    return dataclasses.replace(result, objective=objective, bound=bound, gap=gap,
                               forbidden_entries=ev.forbidden_entries,
                               allowed_cost=ev.allowed_cost, stats=stats)
