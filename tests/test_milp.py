"""The MILP formulation and its presolve (milp_parallel.solvers.milp): every reduction keeps
the optimum, the model's pieces are right, and the helpers do what they say."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from milp_parallel.problem import Problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.forbidden import lexicographic
from milp_parallel.solvers.heuristics import incumbent
from milp_parallel.solvers.memory import least_memory
from milp_parallel.solvers.milp import (
    DP_REDUCTIONS,
    REDUCTIONS,
    formulate,
    merge_duplicate_entries,
    presolve,
)
from milp_parallel.solvers.milp.cpsat import scale_costs, scale_memory_row
from milp_parallel.solvers.options import Deadline

from strategies import problems


def initial_assignment(problem, warm_start=None):
    """The MILP backends' incumbent: the user's when feasible, else the heuristic's."""
    if warm_start is not None and problem.evaluate(warm_start).feasible:
        return np.asarray(warm_start), "user"
    a, _ = incumbent(problem)
    return a, ("heuristic" if a is not None else "none")


@given(problem=problems(max_nodes=6, max_assignments=1500, inf=False, forbidden=True,
                        max_devices=1))
@settings(max_examples=60, deadline=None)
def test_the_heuristic_finds_a_budget_that_needs_forbidden_entries_on_one_device(problem):
    """With forbidden entries the heuristic's starts prefer good configurations; its last
    start is the least memory itself, which fits whenever anything does on one device (with
    several devices no single assignment is least on all, and the MILP finds it instead)."""
    a, _ = incumbent(problem)
    if brute_force(problem).status == "optimal":
        assert a is not None and problem.evaluate(a).feasible


def _passed() -> Deadline:
    import time as _time
    return Deadline(1e-9, start=_time.perf_counter() - 1.0)


def _reduced_optimum(red):
    """Brute force over the reduced problem: (best cost, best original assignment)."""
    if red.infeasible:
        return math.inf, None
    free = [int(v) for v in red.free_nodes]
    best, best_a = math.inf, None
    for combo in itertools.product(*[range(red.configs[v].size) for v in free]):
        local = dict(zip(free, combo))
        if not red.local_feasible(local):
            continue
        c = red.local_cost(local)
        if c < best:
            best, best_a = c, red.expand(local)
    return best, best_a


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)


@pytest.mark.parametrize("steps", [(), *[(s,) for s in REDUCTIONS], REDUCTIONS])
@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=25, deadline=None)
def test_each_reduction_keeps_the_optimum(steps, problem):
    problem = lexicographic(problem).problem    # what presolve works on (forbidden.py)
    exact = brute_force(problem)
    warm, _ = initial_assignment(problem)
    red = presolve(problem, warm_start=warm, reductions=steps)
    best, best_a = _reduced_optimum(red)
    if exact.status == "infeasible":
        assert best == math.inf
        return
    assert _close(best, exact.objective), (steps, best, exact.objective)
    ev = problem.evaluate(best_a)
    assert ev.feasible
    assert _close(ev.cost, exact.objective)
    # Every feasible reduced choice is feasible on the original, at the same cost.
    if warm is not None and red.warm_start is not None:
        assert problem.evaluate(red.warm_start).feasible
        assert red.upper_bound <= problem.evaluate(warm).cost * (1 + 1e-12)


@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=40, deadline=None)
def test_reduced_choices_cost_the_same_on_the_original(problem):
    problem = lexicographic(problem).problem    # what presolve works on (forbidden.py)
    warm, _ = initial_assignment(problem)
    red = presolve(problem, warm_start=warm)
    if red.infeasible:
        return
    free = [int(v) for v in red.free_nodes]
    for i, combo in enumerate(itertools.product(*[range(red.configs[v].size) for v in free])):
        if i > 200:
            break
        local = dict(zip(free, combo))
        a = red.expand(local)
        ev = problem.evaluate(a)
        cost = red.local_cost(local)
        if math.isinf(cost):      # an excluded pair (forbidden, or removed by a sound step)
            continue
        assert _close(cost, ev.cost)
        if red.local_feasible(local):
            assert ev.feasible


@given(problem=problems(max_nodes=6, max_assignments=1500, inf=False))
@settings(max_examples=40, deadline=None)
def test_least_memory_matches_brute_force(problem):
    if problem.memory is None:
        assert least_memory(problem) is None
        return
    exact = brute_force(problem)
    got = least_memory(problem)
    if problem.intervals is not None or problem.n_devices == 1:
        np.testing.assert_allclose(got, exact.stats["least_peak_memory"], rtol=1e-12)
    else:   # per device the least may come from different assignments
        assert np.all(got <= exact.stats["least_peak_memory"] * (1 + 1e-12))


@given(problem=problems(max_nodes=6, max_assignments=1500, inf=False, forbidden=False))
@settings(max_examples=40, deadline=None)
def test_initial_assignment_is_feasible_whenever_anything_is(problem):
    a, source = initial_assignment(problem)
    exact = brute_force(problem)
    if a is None:
        assert exact.status == "infeasible"
    else:
        assert problem.evaluate(a).feasible
        assert source == "heuristic"
    if exact.status == "optimal":
        assert a is not None
        a2, source2 = initial_assignment(problem, warm_start=exact.assignment)
        assert source2 == "user" and np.array_equal(a2, exact.assignment)


def test_merge_duplicate_entries_sums_repeated_columns():
    start = np.array([0, 3, 5, 5])
    index = np.array([4, 1, 4, 2, 2])
    value = np.array([1.0, 2.0, 3.0, -1.0, 1.0])
    s, i, v = merge_duplicate_entries(start, index, value)
    assert s.tolist() == [0, 2, 2, 2]      # row 1's entries cancel, row 2 is empty
    assert i.tolist() == [1, 4]
    assert v.tolist() == [2.0, 4.0]


def test_formulation_has_marginal_rows_and_no_inf_pairs():
    inf = math.inf
    p = Problem([np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0])], [(0, 1)],
                [np.array([[0.0, inf], [2.0, 1.0], [5.0, 0.5]])])
    red = presolve(p, reductions=())
    m = formulate(red)
    assert m.n_x == 5
    assert m.n_cols == 5 + 5                  # the inf pair has no y column
    assert m.n_onehot == 2 and m.n_marginal == 5 and m.n_memory == 0
    # Each marginal row: y's of one config minus that config's x, equal to 0.
    for idx, val, lo, hi in list(m.rows())[2:]:
        assert lo == hi == 0
        assert sorted(val.tolist()).count(-1.0) == 1
    col = m.encode([0, 0])
    assert col is not None and col @ m.col_cost == 1.0 + 1.0 + 0.0
    assert m.decode(col).tolist() == [0, 0]
    assert m.encode([0, 1]) is None          # the forbidden pair


def test_interval_rows_drop_subsets_and_nonbinding_rows():
    # Node 0 live on [0, 10), node 1 on [0, 5), node 2 on [5, 10): rows at t=0 {0,1} and
    # t=5 {0,2}; a third node live on [0, 10) makes both rows supersets of nothing else.
    mem = [np.array([4.0, 1.0]), np.array([4.0, 1.0]), np.array([1.0, 1.0])]
    p = Problem([np.array([0.0, 5.0]), np.array([0.0, 5.0]), np.array([0.0, 0.0])], [],
                [], memory=mem, memory_limit=6.0, intervals=[(0, 10), (0, 5), (5, 10)])
    red = presolve(p, reductions=("memory",))
    # The row at t=5 ({0, 2}): node 2 has constant memory, node 0 fits either way (4+1<=6)
    # so it cannot bind; the row at t=0 ({0, 1}: 4+4 > 6) stays.
    assert len(red.rows) == 1
    assert set(red.rows[0].nodes.tolist()) == {0, 1}
    assert red.rows[0].rhs == pytest.approx(6.0 * (1 + 1e-9) - 2.0)


def test_two_node_rows_become_forbidden_pairs():
    p = Problem([np.array([0.0, 5.0]), np.array([0.0, 5.0])], [(0, 1)], [np.zeros((2, 2))],
                memory=[np.array([4.0, 1.0]), np.array([4.0, 1.0])], memory_limit=6.0,
                intervals=[(0, 10), (0, 10)])
    red = presolve(p, reductions=("memory",))
    assert red.rows == ()
    assert np.isinf(red.edge_costs[0][0, 0]) and np.isfinite(red.edge_costs[0]).sum() == 3
    assert red.stats["memory_pairs"] == 1


def test_bound_step_removes_huge_costs_only_with_a_cheaper_feasible_assignment():
    big = 1e18
    p = Problem([np.array([1.0, big]), np.array([2.0, 3.0])], [(0, 1)],
                [np.array([[0.0, 1.0], [0.0, 0.0]])])
    red = presolve(p, reductions=("bound",))           # no warm start: nothing removed
    assert red.configs[0].tolist() == [0, 1]
    red = presolve(p, warm_start=[0, 1], reductions=("bound",))
    assert red.configs[0].tolist() == [0]
    assert red.stats["bound_configs"] >= 1


def test_dominated_configs_are_dropped_with_ties_kept_once():
    p = Problem([np.array([1.0, 1.0, 2.0]), np.array([0.0, 0.0])], [(0, 1)],
                [np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 3.0]])])
    red = presolve(p, reductions=("dominance",))
    assert red.configs[0].tolist() == [0]
    assert red.stats["dominated_configs"] >= 2


@given(coefs=st.lists(st.floats(0, 1e12), min_size=1, max_size=20),
       frac=st.floats(0, 1.2), pick=st.integers(0, 2**20))
# a subnormal usage beside huge ones underflowed the scale to 0, admitting it at rhs 0
@example(coefs=[99511627777.0, 1e12, 5e-324], frac=0.0, pick=0)
@settings(max_examples=100, deadline=None)
def test_cpsat_memory_scaling_keeps_feasibility(coefs, frac, pick):
    c = np.array(coefs)
    rhs = float(c.sum() * frac)
    ic, irhs, exact = scale_memory_row(c, rhs)
    rng = np.random.default_rng(pick)
    for _ in range(20):
        x = rng.random(c.size) < 0.5
        if int(ic[x].sum()) <= irhs:                     # CP-SAT-feasible ...
            assert float(c[x].sum()) <= rhs * (1 + 1e-12)   # ... implies feasible


@given(costs=st.lists(st.floats(0, 1e9), min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_cpsat_cost_scaling_error_is_bounded(costs):
    c = np.array(costs)
    ic, s, exact = scale_costs(c, float(c.sum()))
    assert np.all(np.abs(ic - c * s) <= 0.5)
    if exact:
        assert np.array_equal(ic, c * s)
    assert float(np.abs(ic).sum()) < 2.0 ** 62


@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_presolve_cut_by_a_passed_deadline_keeps_the_optimum(problem):
    """With the deadline already passed only the mandatory steps run; still exact."""
    problem = lexicographic(problem).problem    # what presolve works on (forbidden.py)
    exact = brute_force(problem)
    warm = None if exact.assignment is None else exact.assignment
    red = presolve(problem, warm_start=warm, deadline=_passed())
    if exact.status == "infeasible":
        return
    assert not red.infeasible
    assert red.stats["rounds"] == 1
    assert red.stats.get("presolve_cut") or red.stats["rounds"] == 1
    # Only forbidden configurations and rows that cannot bind went: the optimum stays
    # representable, with the same cost in the reduced model.
    model = formulate(red)
    col = model.encode(exact.assignment)
    assert col is not None
    cost = float(col @ model.col_cost) + model.offset
    assert abs(cost - exact.objective) <= 1e-9 * max(1.0, abs(exact.objective))


def test_greedy_warm_start_repairs_a_start_that_overflows_a_device():
    # Node 0: config 0 is cheapest and has the least total memory but overflows device 1;
    # config 1 spreads its memory and fits. The warm start has to find config 1.
    p = Problem([np.array([0.0, 1.0]), np.array([0.0])], [(0, 1)], [np.zeros((2, 1))],
                memory=[np.array([[0.0, 10.0], [6.0, 6.0]]), np.zeros((1, 2))],
                memory_limit=8.0)
    a, source = initial_assignment(p)
    assert source == "heuristic"
    assert a is not None and p.evaluate(a).feasible
    assert a.tolist() == [1, 0]


@given(problem=problems(max_nodes=5, max_assignments=800, budget=False))
@settings(max_examples=30, deadline=None)
def test_dp_marginal_step_without_budget_keeps_exactly_the_optimal_configurations(problem):
    """With presolve="dp" and no budget the incumbent is the DP optimum: a configuration
    stays iff some optimal assignment uses it (brute-force enumeration)."""
    problem = lexicographic(problem).problem    # what presolve works on (forbidden.py)
    red = presolve(problem, reductions=DP_REDUCTIONS)
    if red.warm_start is None or red.stats.get("dp_marginal_configs") is None:
        return
    opt = red.upper_bound
    best = [np.full(k, math.inf) for k in problem.n_configs]
    for a in itertools.product(*[range(k) for k in problem.n_configs]):
        c = problem.evaluate(np.array(a)).cost
        for v, cv in enumerate(a):
            best[v][cv] = min(best[v][cv], c)
    for v in range(problem.n_nodes):
        kept = red.configs[v] if red.configs[v] is not None else np.array([red.fixed[v]])
        should = np.nonzero(best[v] <= opt + 1e-9 * max(1.0, abs(opt)))[0]
        assert sorted(kept.tolist()) == sorted(should.tolist()), (v, kept, should)
