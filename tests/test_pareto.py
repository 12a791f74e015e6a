"""The exact Pareto search under one binding budget (solvers/dp/pareto.py), and the budget
search that uses it after root fixing, against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_parallel.problem import MEMORY_RTOL, Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.dp.pareto import pareto_search
from milp_parallel.solvers.forbidden import lexicographic

from checks import same_answer
from strategies import problems

SHAPES = ("chain", "tree", "series_parallel")


@given(problem=problems(kinds=SHAPES, memory="all_live", budget=True, max_devices=1,
                        max_nodes=8, max_assignments=5000),
       use_upper=st.booleans(), lam=st.sampled_from([0.0, 0.1, 1.0, 10.0]))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pareto_search_equals_brute_force(problem, use_upper, lam):
    problem = lexicographic(problem).problem    # what the dp backend hands it (forbidden.py)
    exact = brute_force(problem)
    upper = exact.objective if use_upper and exact.status == "optimal" else math.inf
    budget = float(problem.memory_limit[0]) * (1 + MEMORY_RTOL)
    r = pareto_search(problem, 0, budget, upper=upper, lam=lam)
    assert r is not None                       # every shape here is OptCNN-reducible
    if exact.status == "infeasible":
        assert r.assignment is None
        return
    assert r.assignment is not None
    assert r.cost == pytest.approx(exact.objective, rel=1e-9, abs=1e-12)
    assert problem.evaluate(r.assignment).feasible


def test_pareto_search_refuses_what_needs_variable_elimination():
    edges = [(i, j) for i in range(4) for j in range(i + 1, 4)]           # K4: treewidth 3
    p = Problem([np.array([1.0, 2.0])] * 4, edges, [np.zeros((2, 2))] * len(edges),
                memory=[np.array([2.0, 1.0])] * 4, memory_limit=6.0)
    assert pareto_search(p, 0, 6.0) is None


@pytest.mark.parametrize("shrink", [True, False])
@given(problem=problems(kinds=SHAPES + ("partial_ktree",), memory="all_live", budget=True,
                        max_nodes=8, max_assignments=5000))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_budget_search_with_and_without_shrinking_equals_brute_force(shrink, problem):
    exact = brute_force(problem)
    r = solve_problem(problem, "dp", shrink=shrink)
    assert r.status == exact.status
    if exact.status == "optimal":
        assert same_answer(r, exact, 1e-9)


def test_a_join_that_would_end_past_the_deadline_is_not_started(monkeypatch):
    import milp_parallel.solvers.dp.pareto as pareto
    from milp_parallel.solvers.dp.engine import OutOfTime
    from milp_parallel.solvers.options import Deadline
    rng = np.random.default_rng(0)
    n, k = 8, 4
    p = Problem([rng.random(k) for _ in range(n)], [(i, i + 1) for i in range(n - 1)],
                [rng.random((k, k)) for _ in range(n - 1)],
                memory=[rng.random((k, 1)) for _ in range(n)], memory_limit=[2.0])
    assert pareto_search(p, 0, 2.0, deadline=Deadline(60.0)) is not None
    monkeypatch.setattr(pareto, "_SECONDS_PER_POINT", 1e3)    # every join "takes" hours
    with pytest.raises(OutOfTime):
        pareto_search(p, 0, 2.0, deadline=Deadline(60.0))
    assert pareto_search(p, 0, 2.0) is not None                # no deadline: no estimate
