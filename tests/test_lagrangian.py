"""The interval Lagrangian bound (milp_parallel/solvers/lagrangian) against brute force on
small interval budgets with forbidden (1e18) entries, directly and on a contraction."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_penalty import _problem

from milp_parallel import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.contract import contract
from milp_parallel.solvers.lagrangian import interval_lagrangian_bound


def _optimum(p: Problem) -> float:
    r = solve_problem(p, "brute")
    return r.objective if r.status == "optimal" else math.inf


@pytest.mark.parametrize("squeeze", [0.2, 0.5, 0.8])
@pytest.mark.parametrize("seed", range(10))
def test_never_above_the_constrained_optimum(seed, squeeze):
    p = _problem(seed, squeeze=squeeze)
    opt = _optimum(p)
    r = interval_lagrangian_bound(p)
    assert r.bound <= opt + 1e-6 * max(1.0, abs(opt))
    assert r.bound >= r.unconstrained - 1e-9 * max(1.0, abs(r.unconstrained))


def test_memory_lifts_it_above_every_unconstrained_answer():
    # three nodes live together; the cheap configurations cannot all fit
    p = Problem([np.array([0.0, 6.0])] * 3, [], [], memory=[np.array([3.0, 1.0])] * 3,
                memory_limit=5.0, intervals=[[0, 3]] * 3)
    r = interval_lagrangian_bound(p)
    assert r.unconstrained == 0.0
    assert r.bound > 6.0 - 1e-6                  # at least one node must take the dear one
    assert r.bound <= _optimum(p) + 1e-6         # 12: two of them must


def test_lifts_most_random_cases():
    lifted = 0
    for seed in range(12):
        r = interval_lagrangian_bound(_problem(seed, squeeze=0.2))
        lifted += r.bound > r.unconstrained + 1e-6
    assert lifted >= 6


def test_an_impossible_budget_is_proved_infeasible():
    p = Problem([np.array([0.0, 1.0])] * 2, [], [], memory=[np.array([3.0, 2.0])] * 2,
                memory_limit=3.0, intervals=[[0, 2]] * 2)
    r = interval_lagrangian_bound(p)
    assert r.infeasible and r.bound == math.inf


@pytest.mark.parametrize("seed", range(6))
def test_on_a_contraction_it_bounds_the_optimum(seed):
    p = _problem(seed, squeeze=0.3)
    opt = _optimum(p)
    con = contract(p)
    if con is None:
        pytest.skip("nothing to contract")
    r = interval_lagrangian_bound(p, contraction=con)
    assert r.bound <= opt + 1e-6 * max(1.0, abs(opt))


def test_the_penalty_backend_reports_it():
    p = _problem(3, squeeze=0.3)
    r = solve_problem(p, "penalty", round_seconds=1, max_rounds=3)
    lag = r.stats["lagrangian"]
    assert lag["bound"] >= lag["unconstrained"]
    assert r.bound <= _optimum(p) + 1e-6
