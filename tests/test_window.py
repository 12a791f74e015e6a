"""The exact search under interval budgets (``milp_parallel.solvers.dp.window``): equal to
brute force, refusing what it cannot take with the reason, honest under time limits, and the
cross-check of a MILP backend on an interval budget."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_parallel.errors import ProblemTooLargeError, UnsupportedProblemError
from milp_parallel.plan.crosscheck import AGREED, cross_check
from milp_parallel.problem import Problem
from milp_parallel.solvers import get_solver, solve_problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.dp.window import _cliques, window_search, window_width
from milp_parallel.solvers.memory import interval_cliques

from checks import check_against
from strategies import problems


@given(problems(memory="intervals", budget=True, max_nodes=7, max_assignments=3000))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_dp_on_interval_budgets_equals_brute_force(p):
    assert get_solver("dp").accepts(p) is None
    check_against(solve_problem(p, "dp"), brute_force(p), p)


@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6)), min_size=1, max_size=25))
def test_the_lowest_and_highest_live_node_of_every_clique(spans):
    iv = np.array([(a, a + d) for a, d in spans])
    _, _, lo, hi = _cliques(Problem([np.zeros(1)] * len(spans), [], [],
                                    memory=[np.zeros((1, 1))] * len(spans), intervals=iv))
    for j, t in enumerate(interval_cliques(iv).tolist()):
        live = np.nonzero((iv[:, 0] <= t) & (t < iv[:, 1]))[0]
        assert (lo[j], hi[j]) == (live.min(), live.max())


def _chain(n: int, k: int, life: int, seed: int = 0, share: float = 0.5) -> Problem:
    """A chain whose node ``i``'s tensor lives ``life`` steps, compute falling and memory
    rising with the configuration, and a budget ``share`` of the way up from the least."""
    rng = np.random.default_rng(seed)
    node = [rng.uniform(1, 2, k) * np.linspace(1, 0.2, k) for _ in range(n)]
    mem = [(rng.uniform(1, 2, k) * np.linspace(0.2, 1, k))[:, None] for _ in range(n)]
    edges = [(i, i + 1) for i in range(n - 1)]
    tabs = [rng.uniform(0, 0.3, (k, k)) for _ in edges]
    iv = [(i, i + life) for i in range(n)]
    least = sum(sorted(float(m.min()) for m in mem)[-life:])
    most = sum(sorted(float(m.max()) for m in mem)[-life:])
    return Problem(node, edges, tabs, memory=mem, intervals=iv,
                   memory_limit=[least + share * (most - least)])


def test_a_chain_with_short_lived_tensors_is_proved_and_agrees_with_highs():
    p = _chain(40, 6, 3)
    assert window_width(p) == 3
    r = solve_problem(p, "dp")
    assert r.status == "optimal" and p.evaluate(r.assignment).feasible
    h = solve_problem(p, "highs")
    assert h.status == "optimal"
    assert r.objective == pytest.approx(h.objective, rel=1e-9)
    # the budget binds: without it the optimum is cheaper
    assert solve_problem(p.with_memory_limit(None), "dp").objective < r.objective - 1e-9


def test_a_milp_answer_on_an_interval_budget_is_cross_checked_by_the_exact_search():
    p = _chain(30, 5, 3, seed=1)
    r = solve_problem(p, "highs")
    cc, _ = cross_check(p, r)
    assert cc.checker == "dp" and cc.outcome == AGREED, cc


def test_too_wide_a_window_is_refused_with_the_width():
    p = _chain(40, 6, 30)                                   # tensors live 30 steps
    why = get_solver("dp").accepts(p)
    assert why is not None and "span 30 consecutive" in why
    with pytest.raises(UnsupportedProblemError, match="span 30"):
        solve_problem(p, "dp")
    with pytest.raises(ProblemTooLargeError, match="max_table_size"):
        solve_problem(_chain(40, 6, 3), "dp", max_table_size=100)


def test_a_tiny_time_limit_gives_an_honest_status():
    p = _chain(200, 12, 4)                                  # 12^4 = 20,736-entry tables
    r = solve_problem(p, "dp", time_limit=1e-3)
    assert r.status in ("feasible", "unknown")
    if r.status == "feasible":
        assert p.evaluate(r.assignment).feasible and r.gap > 0


def test_an_infeasible_budget_is_proved_infeasible():
    p = _chain(10, 3, 2)
    tight = p.with_memory_limit([0.01])
    assert solve_problem(tight, "dp").status == "infeasible"
    assert brute_force(tight).status == "infeasible"


def test_window_search_example_reads_back_the_assignment():
    p = _chain(12, 3, 2, seed=4)
    cost, a = window_search(p)
    ev = p.evaluate(a)
    assert ev.feasible and ev.cost == pytest.approx(cost)
    assert cost == pytest.approx(brute_force(p).objective)
