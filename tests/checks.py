"""Assertions shared by the tests that compare a solver with an exact answer."""

from __future__ import annotations


def same(a: float, b: float, rtol: float = 1e-6) -> bool:
    """``a`` and ``b`` agree to ``rtol`` (relative to the larger, at least ``1e-9``)."""
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-9)


def check_against(result, exact, problem) -> None:
    """``result`` proves what the exact answer ``exact`` (brute force or the DP) says:
    infeasible alike, or optimal with the same objective, a feasible assignment that costs
    what it claims on the original problem, and a bound that does not exceed it."""
    if exact.status == "infeasible":
        assert result.status == "infeasible", result
        assert result.assignment is None
        return
    assert result.status == "optimal", (result, exact)
    assert same(result.objective, exact.objective), (result, exact)
    ev = problem.evaluate(result.assignment)
    assert ev.feasible
    assert ev.cost == result.objective          # re-evaluated on the original problem
    assert result.bound <= result.objective * (1 + 1e-9) + 1e-12
    assert result.gap <= 1e-6
