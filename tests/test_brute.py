"""Brute force against a plain itertools loop over Problem.evaluate, and its refusals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings

from milp_parallel import Problem, solve_problem
from milp_parallel.errors import InvalidOptionError, ProblemTooLargeError
from milp_parallel.solvers.brute import BruteForceSolver, brute_force

from checks import same
from strategies import problems

EXAMPLE = "data/iopddl_example.json"


def _reference(p: Problem):
    """The first best feasible assignment in itertools.product order, by Problem.evaluate's
    key (fewest forbidden entries, then the cost of the rest)."""
    best = None
    for a in itertools.product(*[range(int(k)) for k in p.n_configs]):
        ev = p.evaluate(a)
        if ev.feasible and (best is None or ev.key < best[0]):
            best = (ev.key, a)
    return best


@given(problems(max_assignments=400))
@settings(max_examples=120, deadline=None)
def test_brute_matches_evaluate_loop(p):
    r = brute_force(p, chunk_size=37)          # a chunk size that splits the enumeration
    ref = _reference(p)
    if ref is None:
        assert r.status == "infeasible" and r.assignment is None
        assert math.isnan(r.objective)
    else:
        assert r.status == "optimal"
        assert r.key[0] == ref[0][0] and same(r.key[1], ref[0][1], 1e-12)
        assert p.evaluate(r.assignment).key == p.evaluate(ref[1]).key
        assert r.bound == r.objective and r.gap == 0.0


def test_iopddl_example_optimum():
    p = Problem.from_iopddl(EXAMPLE)
    r = solve_problem(p, "brute")
    assert r.status == "optimal"
    assert r.objective == 445
    assert r.assignment.tolist() == [0, 0, 2, 1, 0]
    assert p.evaluate(r.assignment).feasible


def test_iopddl_example_without_budget_is_cheaper():
    p = Problem.from_iopddl(EXAMPLE).with_memory_limit(None)
    r = solve_problem(p, "brute")
    assert r.status == "optimal" and r.objective < 445
    costs = [p.evaluate(a).cost for a in itertools.product(*[range(k) for k in p.n_configs])]
    assert r.objective == min(costs)


def test_budget_too_small_is_infeasible_with_least_memory():
    p = Problem.from_iopddl(EXAMPLE)
    least = float(brute_force(p).stats["least_peak_memory"][0])
    tight = p.with_memory_limit(least * 0.99)
    r = brute_force(tight)
    assert r.status == "infeasible" and r.assignment is None
    assert r.stats["least_peak_memory"][0] == pytest.approx(least)
    assert brute_force(p.with_memory_limit(least)).status == "optimal"


def test_all_forbidden_is_infeasible():
    p = Problem([np.array([np.inf, 1.0]), np.array([1.0])], [(0, 1)],
                [np.array([[0.0], [np.inf]])])
    r = brute_force(p)
    assert r.status == "infeasible"
    assert r.stats["n_finite_cost"] == 0


def test_too_large_names_size_and_alternatives():
    p = Problem([np.zeros(10)] * 7, [], [])
    with pytest.raises(ProblemTooLargeError, match=r"1e\+07.*dp"):
        brute_force(p)
    small = Problem([np.zeros(10)] * 3, [], [])
    with pytest.raises(ProblemTooLargeError, match="max_assignments=999"):
        solve_problem(small, "brute", max_assignments=999)
    r = solve_problem(small, "brute", max_assignments=1000)
    assert r.status == "optimal" and r.objective == 0.0 and r.stats["n_assignments"] == 1000


def test_unknown_option_is_rejected():
    p = Problem([np.zeros(2)], [], [])
    with pytest.raises(InvalidOptionError, match="max_assigments"):
        BruteForceSolver().solve(p, max_assigments=3)
    assert BruteForceSolver().solve(p, threads=2, time_limit=10).status == "optimal"
