"""The dp solver against brute force, its two paths against each other, and its refusals.

Also the budget search's parts: min-marginals against enumeration, reduced-cost fixing that
never forbids the optimum, and the devices left out of the relaxation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel import Problem, solve_problem
from milp_parallel.errors import InvalidOptionError, ProblemTooLargeError, UnsupportedProblemError
from milp_parallel.problem import MEMORY_RTOL
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.dp import (
    BudgetSearch,
    DPSolver,
    Engine,
    dp_lower_bound,
    solve_unconstrained,
)
from milp_parallel.solvers.options import Deadline

from checks import same_answer
from strategies import problems

EXAMPLE = "data/iopddl_example.json"


def _agree(p: Problem, exact, got) -> None:
    if exact.status == "infeasible":
        assert got.status == "infeasible", (exact, got)
        assert got.assignment is None
        return
    assert got.status == "optimal", (exact, got, got.stats)
    assert same_answer(got, exact, 1e-9)
    ev = p.evaluate(got.assignment)
    assert ev.feasible
    assert math.isclose(ev.cost, got.objective, rel_tol=1e-12)
    assert got.bound == got.objective and got.gap == 0.0


@given(problems(memory="none", max_nodes=8, max_assignments=6000))
@settings(max_examples=120, deadline=None)
def test_dp_equals_brute_without_budget(p):
    _agree(p, brute_force(p), solve_problem(p, "dp"))


@given(problems(memory="all_live", budget=True, max_nodes=8, max_configs=5,
                max_assignments=6000))
@settings(max_examples=120, deadline=None)
def test_dp_equals_brute_with_all_live_budget(p):
    r = solve_problem(p, "dp")
    _agree(p, brute_force(p), r)
    assert len(r.stats["least_peak_memory"]) == p.n_devices


@given(problems(memory="intervals", budget=False, max_nodes=7, max_assignments=3000))
@settings(max_examples=40, deadline=None)
def test_intervals_without_budget_are_plain(p):
    _agree(p, brute_force(p), solve_problem(p, "dp"))


@given(problems(kinds=("partial_ktree", "dag", "series_parallel"), memory="none",
                max_nodes=9, max_configs=3, max_assignments=None),
       st.sampled_from(["min_weight", "min_degree", "min_fill"]))
@settings(max_examples=80, deadline=None)
def test_elimination_and_variable_elimination_paths_agree(p, ordering):
    with_elim = solve_problem(p, "dp")
    ve_only = solve_problem(p, "dp", eliminations=False, ordering=ordering)
    assert ve_only.stats["leaf_eliminations"] == ve_only.stats["node_eliminations"] == 0
    assert ve_only.stats["nodes_left"] == p.n_nodes
    assert with_elim.status == ve_only.status
    if with_elim.status == "optimal":
        assert same_answer(with_elim, ve_only, 1e-9)


@given(problems(kinds=("chain", "tree", "series_parallel"), memory="none", min_nodes=2,
                max_nodes=12, max_assignments=None))
@settings(max_examples=60, deadline=None)
def test_treewidth_two_graphs_reduce_completely(p):
    r = solve_problem(p, "dp")
    assert r.stats["nodes_left"] == 0
    assert r.stats["largest_table"] == 0


def test_series_parallel_node_and_edge_eliminations_counted():
    # A diamond 0-1-3, 0-2-3: two node eliminations, the second one merges an edge.
    rng = np.random.default_rng(1)
    edges = [(0, 1), (1, 3), (0, 2), (2, 3)]
    p = Problem([rng.random(3) for _ in range(4)], edges,
                [rng.random((3, 3)) for _ in edges])
    r = solve_problem(p, "dp")
    assert r.stats["node_eliminations"] >= 1
    assert r.stats["edge_eliminations"] >= 1
    _agree(p, brute_force(p), r)


def test_iopddl_example():
    p = Problem.from_iopddl(EXAMPLE)
    assert brute_force(p).assignment.tolist() == [0, 0, 2, 1, 0]
    free = p.with_memory_limit(None)
    _agree(free, brute_force(free), solve_problem(free, "dp"))
    # its live sets span a few consecutive nodes: the window search takes the budget
    _agree(p, brute_force(p), solve_problem(p, "dp"))
    with pytest.raises(UnsupportedProblemError, match="intervals.*highs"):
        dp_lower_bound(p, 1.0)


def test_budget_infeasible_reports_least_memory():
    rng = np.random.default_rng(3)
    mem = [rng.uniform(1, 10, size=(4, 2)) for _ in range(5)]
    edges = [(i, i + 1) for i in range(4)]
    p = Problem([rng.random(4) for _ in range(5)], edges, [rng.random((4, 4)) for _ in edges],
                memory=mem)
    least = np.sum([m.min(axis=0) for m in mem], axis=0)
    r = solve_problem(p.with_memory_limit(least * 0.99), "dp")
    assert r.status == "infeasible" and r.assignment is None
    np.testing.assert_allclose(r.stats["least_peak_memory"], least)
    roomy = p.with_memory_limit(least.max())
    _agree(roomy, brute_force(roomy), solve_problem(roomy, "dp"))


def test_too_large_names_treewidth_and_milp():
    # A clique of 8 nodes with 10 configs each: treewidth 7, table 1e8 entries.
    n = 8
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    p = Problem([np.zeros(10)] * n, edges, [np.zeros((10, 10))] * len(edges))
    with pytest.raises(ProblemTooLargeError, match=r"1e\+08 entries.*treewidth about 7.*highs"):
        solve_problem(p, "dp")
    with pytest.raises(ProblemTooLargeError):
        solve_unconstrained(p, max_table_size=1e6)


def test_long_chain_with_many_configs():
    rng = np.random.default_rng(7)
    n, k = 300, 64
    edges = [(i + 1, i) if i % 2 else (i, i + 1) for i in range(n - 1)]
    p = Problem([rng.random(k) for _ in range(n)], edges,
                [rng.random((k, k)) for _ in edges])
    a, cost = solve_unconstrained(p)
    assert cost == p.evaluate(a).cost
    # Optimality against a straightforward Viterbi pass along the chain.
    best = p.node_costs[0].copy()
    for i in range(n - 1):
        t = p.edge_costs[i] if edges[i][0] == i else p.edge_costs[i].T
        best = (best[:, None] + t).min(axis=0) + p.node_costs[i + 1]
    assert math.isclose(cost, best.min(), rel_tol=1e-12)


def test_unconstrained_and_lower_bound_helpers():
    rng = np.random.default_rng(5)
    edges = [(0, 1), (1, 2), (0, 2), (2, 3)]
    mem = [rng.uniform(0, 5, size=3) for _ in range(4)]
    p = Problem([rng.random(3) for _ in range(4)], edges, [rng.random((3, 3)) for _ in edges],
                memory=mem, memory_limit=float(np.sum([m.min() for m in mem]) + 2.0))
    opt = solve_problem(p, "dp")
    _agree(p, brute_force(p), opt)
    a, cost = solve_unconstrained(p)
    assert cost <= opt.objective + 1e-12
    for lam in (0.0, 0.1, 1.0, 10.0):
        lb = dp_lower_bound(p, lam)
        assert lb.bound <= opt.objective + 1e-9
        assert lb.objective == p.evaluate(lb.assignment).cost
        assert lb.feasible == p.evaluate(lb.assignment).feasible
    with pytest.raises(InvalidOptionError, match="multipliers"):
        dp_lower_bound(p, -1.0)


def test_gap_and_branch_limit_are_honest():
    rng = np.random.default_rng(11)
    n, k = 30, 6
    edges = [(i, i + 1) for i in range(n - 1)]
    mem = [rng.uniform(0, 10, size=k) for _ in range(n)]
    lo = sum(m.min() for m in mem)
    hi = sum(m.max() for m in mem)
    p = Problem([rng.random(k) * 10 for _ in range(n)], edges,
                [rng.random((k, k)) for _ in edges], memory=mem,
                memory_limit=lo + 0.2 * (hi - lo))
    exact = solve_problem(p, "dp", shrink=False)
    assert exact.status == "optimal"
    assert exact.stats["branch_nodes"] > 1        # the budget binds: a real search
    shrunk = solve_problem(p, "dp")               # root fixing, then the Pareto search
    assert shrunk.status == "optimal" and shrunk.objective == pytest.approx(exact.objective)
    limited = solve_problem(p, "dp", max_branch_nodes=1, shrink=False)
    assert limited.status == "feasible"
    assert limited.objective >= exact.objective - 1e-9
    assert limited.bound <= exact.objective + 1e-9
    assert limited.gap > 0
    assert p.evaluate(limited.assignment).feasible


def test_unknown_option_is_rejected():
    p = Problem([np.zeros(2)], [], [])
    with pytest.raises(InvalidOptionError, match="elimination"):
        DPSolver().solve(p, elimination=False)


# ---------------------------------------------------------------------- budget search parts
def _enumerated_min_marginals(p: Problem, unary) -> list[np.ndarray]:
    """``m_v(c)`` by enumerating every assignment (tiny problems)."""
    import itertools

    ref = [np.full(int(k), math.inf) for k in p.n_configs]
    for a in itertools.product(*[range(int(k)) for k in p.n_configs]):
        a = np.array(a)
        val = sum(float(u[c]) for u, c in zip(unary, a)) + p.evaluate(a).edge_cost
        for v, c in enumerate(a):
            ref[v][c] = min(ref[v][c], val)
    return ref


@given(problems(memory="none", max_nodes=7, max_configs=3, max_assignments=800),
       st.booleans())
@settings(max_examples=80, deadline=None)
def test_min_marginals_equal_enumeration(p, eliminations):
    eng = Engine(p, eliminations=eliminations)
    value, a, mm = eng.min_marginals(p.node_costs)
    ref = _enumerated_min_marginals(p, p.node_costs)
    for v in range(p.n_nodes):
        np.testing.assert_allclose(mm[v], ref[v], rtol=1e-9, atol=1e-12)
    best = min(r.min() for r in ref) if p.n_nodes else 0.0
    assert math.isclose(value, best, rel_tol=1e-9, abs_tol=1e-12) or value == best


def _search(p: Problem, **kw) -> BudgetSearch:
    return BudgetSearch(p, Engine(p), gap=0.0, deadline=Deadline(None),
                         max_branch_nodes=10_000, root_iterations=60, node_iterations=8, **kw)


@given(problems(memory="all_live", budget=True, max_nodes=7, max_configs=4,
                max_assignments=3000, max_devices=3),
       st.lists(st.floats(0, 5), min_size=3, max_size=3))
@settings(max_examples=100, deadline=None)
def test_fixing_never_forbids_the_optimum(p, lam_scale):
    exact = brute_force(p)
    if exact.status != "optimal":
        return
    s = _search(p)
    allowed = [np.isfinite(c) for c in p.node_costs]
    assert s.tighten(allowed)                      # the memory filter keeps the optimum too
    assert all(al[c] for al, c in zip(allowed, exact.assignment))
    s.reduce_devices(allowed)
    s.best_f, s.best_a = exact.objective, exact.assignment
    # Multipliers of every scale: lambda . memory of the order of the costs.
    scale = max(1.0, max(float(np.abs(c[np.isfinite(c)]).max(initial=0)) for c in p.node_costs))
    lam = np.array(lam_scale[:len(s.active)]) * scale / np.maximum(s.budget, 1e-9)
    s.fix(allowed, lam)
    assert all(al[c] for al, c in zip(allowed, exact.assignment)), (lam, s.active)


@given(problems(memory="all_live", budget=True, max_nodes=8, max_configs=5,
                max_assignments=6000, max_devices=3))
@settings(max_examples=60, deadline=None)
def test_fixing_and_no_fixing_agree_with_brute(p):
    exact = brute_force(p)
    _agree(p, exact, solve_problem(p, "dp"))
    _agree(p, exact, solve_problem(p, "dp", fixing=False))


def _zoo_like(seed: int, n: int = 7, k: int = 4, devices: int = 4) -> Problem:
    """Configurations that use the first 1, 2 or 4 devices, memory split evenly among them."""
    rng = np.random.default_rng(seed)
    edges = [(i, i + 1) for i in range(n - 1)] + [(0, 2)]
    mem = []
    for _ in range(n):
        used = rng.choice([1, 2, 4], size=k)
        total = rng.uniform(1, 10, size=k)
        mem.append(np.where(np.arange(devices)[None, :] < used[:, None],
                            (total / used)[:, None], 0.0))
    cost = [rng.random(k) * 10 for _ in range(n)]
    least = np.sum([m.min(axis=0) for m in mem], axis=0)
    most = np.sum([m.max(axis=0) for m in mem], axis=0)
    return Problem(cost, edges, [rng.random((k, k)) for _ in edges], memory=mem,
                   memory_limit=float(least[0] + 0.3 * (most[0] - least[0])))


@pytest.mark.parametrize("seed", range(6))
def test_dominated_devices_leave_the_relaxation(seed):
    p = _zoo_like(seed)
    r = solve_problem(p, "dp")
    _agree(p, brute_force(p), r)
    # Device 0 carries at least every other device's share in every configuration.
    assert r.stats["binding_devices"] in ([0], [])


def test_unbinding_budget_needs_no_relaxation():
    rng = np.random.default_rng(2)
    mem = [rng.uniform(0, 1, size=(3, 2)) for _ in range(4)]
    edges = [(0, 1), (1, 2), (2, 3)]
    p = Problem([rng.random(3) for _ in range(4)], edges, [rng.random((3, 3)) for _ in edges],
                memory=mem, memory_limit=[4.0, 4.0])
    r = solve_problem(p, "dp")
    assert r.stats["binding_devices"] == []
    _agree(p, brute_force(p), r)
    assert math.isclose(r.objective, solve_unconstrained(p)[1], rel_tol=1e-12)


def test_fixing_shrinks_a_binding_chain():
    rng = np.random.default_rng(4)
    n, k = 40, 8
    edges = [(i, i + 1) for i in range(n - 1)]
    mem = [rng.uniform(0, 10, size=k) for _ in range(n)]
    lo, hi = sum(m.min() for m in mem), sum(m.max() for m in mem)
    p = Problem([rng.random(k) * 10 for _ in range(n)], edges,
                [rng.random((k, k)) for _ in edges], memory=mem,
                memory_limit=lo + 0.3 * (hi - lo))
    fixed = solve_problem(p, "dp")
    plain = solve_problem(p, "dp", fixing=False)
    assert fixed.status == plain.status == "optimal"
    assert math.isclose(fixed.objective, plain.objective, rel_tol=1e-9)
    assert fixed.stats["fixed_configs"] > 0
    assert fixed.stats["branch_nodes"] <= plain.stats["branch_nodes"]
    assert p.evaluate(fixed.assignment).peak_memory[0] <= p.memory_limit[0] * (1 + MEMORY_RTOL)


def test_warm_start_seeds_the_budget_search():
    rng = np.random.default_rng(8)
    n, k = 12, 5
    edges = [(i, i + 1) for i in range(n - 1)]
    mem = [rng.uniform(0, 10, size=k) for _ in range(n)]
    lo, hi = sum(m.min() for m in mem), sum(m.max() for m in mem)
    p = Problem([rng.random(k) * 10 for _ in range(n)], edges,
                [rng.random((k, k)) for _ in edges], memory=mem,
                memory_limit=lo + 0.25 * (hi - lo))
    cold = solve_problem(p, "dp")
    warm = solve_problem(p, "dp", warm_start=cold.assignment.tolist())
    assert warm.status == "optimal"
    assert math.isclose(warm.objective, cold.objective, rel_tol=1e-12)
    assert warm.stats["branch_nodes"] <= cold.stats["branch_nodes"]
    from milp_parallel.errors import InvalidAssignmentError
    with pytest.raises(InvalidAssignmentError, match="one configuration index per node"):
        solve_problem(p, "dp", warm_start=[0])
