"""Assertions shared by the tests that compare a solver with an exact answer.

:func:`exact_optimum` is an enumeration written here, independent of the package's own
evaluation: forbidden entries (``>= 1e18``) are counted, not added, and the rest summed with
``math.fsum``, so it can tell ``1e18 + 6`` from ``1e18 + 58``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

#: Entries at or above this (and below inf) are counted, not added.
FORBIDDEN = 1e18


def same(a: float, b: float, rtol: float = 1e-6) -> bool:
    """``a`` and ``b`` agree to ``rtol`` (relative to the larger, at least ``1e-9``)."""
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-9)


def same_answer(a, b, rtol: float = 1e-6) -> bool:
    """Two results (or evaluations) with the same key: as many forbidden entries, and the
    same cost of the rest to ``rtol`` (their plain objectives may differ: ``1e18`` vs
    ``3e18`` are both one forbidden entry)."""
    return a.forbidden_entries == b.forbidden_entries and same(a.allowed_cost, b.allowed_cost,
                                                               rtol)


@dataclass(frozen=True)
class Exact:
    """The lexicographic optimum by enumeration (``key`` ``None``: infeasible)."""

    key: tuple[int, float] | None
    n_assignments: int


def exact_key(problem, assignment) -> tuple[int, float] | None:
    """``(forbidden entries, exact cost of the rest)`` of one assignment (``None``: it makes an
    impossible choice or breaks the memory budget)."""
    a = [int(x) for x in assignment]
    vals = [float(c[a[v]]) for v, c in enumerate(problem.node_costs)]
    vals += [float(t[a[u], a[w]]) for (u, w), t in zip(problem.edges, problem.edge_costs)]
    if any(math.isinf(x) for x in vals):
        return None
    if problem.memory_limit is not None:
        use = np.array([problem.memory[v][a[v]] for v in range(problem.n_nodes)])  # (n, D)
        limit = problem.memory_limit * (1 + 1e-9)
        if problem.intervals is None:
            if np.any(use.sum(axis=0) > limit):
                return None
        else:
            iv = problem.intervals
            for t in set(int(s) for s in iv[:, 0]):
                live = (iv[:, 0] <= t) & (t < iv[:, 1])
                if np.any(use[live].sum(axis=0) > limit):
                    return None
    bad = [x >= FORBIDDEN for x in vals]
    return (sum(bad), math.fsum(x for x, b in zip(vals, bad) if not b))


def exact_optimum(problem) -> Exact:
    """Enumerate every assignment of a tiny problem (see the module docstring)."""
    best = None
    n = 0
    for a in itertools.product(*[range(int(k)) for k in problem.n_configs]):
        n += 1
        key = exact_key(problem, a)
        if key is not None and (best is None or key < best):
            best = key
    return Exact(best, n)


def check_exact(result, problem, rtol: float = 1e-6) -> None:
    """``result`` proves the lexicographic optimum that :func:`exact_optimum` enumerates:
    infeasible alike, or optimal with the same count of forbidden entries, the same cost of the
    rest, an assignment that has that key, and an honest bound and gap."""
    exact = exact_optimum(problem)
    if exact.key is None:
        assert result.status == "infeasible", (result, exact)
        assert result.assignment is None
        return
    assert result.status == "optimal", (result, exact)
    key = exact_key(problem, result.assignment)
    assert key is not None, (result, "the answer is not feasible")
    assert key[0] == exact.key[0], (result, key, exact)
    assert same(key[1], exact.key[1], rtol), (result, key, exact)
    assert result.forbidden_entries == key[0], (result, key)
    assert same(result.allowed_cost, key[1], rtol), (result, key)
    assert result.bound <= result.objective * (1 + 1e-9) + 1e-12
    assert result.gap <= 1e-6


def check_against(result, exact, problem) -> None:
    """``result`` proves what the exact answer ``exact`` (brute force or the DP) says:
    infeasible alike, or optimal with the same key (forbidden entries, then cost), a feasible
    assignment that costs what it claims on the original problem, and a bound that does not
    exceed it."""
    if exact.status == "infeasible":
        assert result.status == "infeasible", result
        assert result.assignment is None
        return
    assert result.status == "optimal", (result, exact)
    assert same_answer(result, exact), (result, exact)
    ev = problem.evaluate(result.assignment)
    assert ev.feasible
    assert ev.cost == result.objective          # re-evaluated on the original problem
    assert ev.forbidden_entries == result.forbidden_entries
    assert same(ev.allowed_cost, result.allowed_cost, 1e-12)
    assert result.bound <= result.objective * (1 + 1e-9) + 1e-12
    assert result.gap <= 1e-6
