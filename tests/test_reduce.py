"""The exact reductions (issue 25 item 3) against brute force on small problems with interval
memory budgets and 1e18 forbidden entries: each keeps an optimum, and the mapping back gives an
assignment of the original whose key is the reduced one's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from milp_parallel.problem import Problem
from milp_parallel.solvers.reduce import (
    expand,
    fix_isolated,
    reduce_problem,
    remove_dominated,
    restrict,
)

from checks import exact_key, exact_optimum
from strategies import problems

REDUCTIONS = {"isolated": fix_isolated, "dominance": remove_dominated,
              "both": reduce_problem}


def _check_keeps_an_optimum(problem, reduction):
    reduced = reduction.problem
    assert np.array_equal(reduced.edges, problem.edges)
    assert reduced.n_configs.sum() == problem.n_configs.sum() - \
        reduction.stats["removed_strategies"]
    # every reduced assignment maps back to one with the same key (cost entries and memory)
    for a in itertools.islice(itertools.product(*[range(int(k)) for k in reduced.n_configs]),
                              300):
        assert exact_key(problem, expand(reduction, a)) == exact_key(reduced, a)
    # every original assignment carries over to one at least as good and as feasible
    for a in itertools.islice(itertools.product(*[range(int(k)) for k in problem.n_configs]),
                              300):
        before, after = exact_key(problem, a), exact_key(reduced, reduction.carry(a))
        assert before is None or (after is not None and after[0] <= before[0]
                                  and (after[0] < before[0] or after[1] <= before[1] + 1e-9
                                       * max(1.0, abs(before[1])))), (a, before, after)
    # the reduced optimum is the original optimum (infeasible alike)
    assert exact_optimum(reduced).key == exact_optimum(problem).key


@pytest.mark.parametrize("which", sorted(REDUCTIONS))
@given(problem=problems(memory="intervals", budget=True, forbidden=True, max_nodes=6,
                        max_configs=5))
@settings(max_examples=60, deadline=None)
def test_reduction_keeps_an_optimum_with_interval_budgets(which, problem):
    _check_keeps_an_optimum(problem, REDUCTIONS[which](problem))


@pytest.mark.parametrize("which", sorted(REDUCTIONS))
@given(problem=problems(max_nodes=6, max_configs=5))
@settings(max_examples=60, deadline=None)
def test_reduction_keeps_an_optimum_on_any_problem(which, problem):
    _check_keeps_an_optimum(problem, REDUCTIONS[which](problem))


def _isolated_problem(rng, n=30, k=6, edge_density=0.3):
    """Intervals, a budget, several constant edges and some nodes whose best strategy in cost
    is also the least in memory (what fix_isolated fixes)."""
    costs = [rng.integers(0, 20, k).astype(float) for _ in range(n)]
    mem = [rng.integers(1, 10, k).astype(float) for _ in range(n)]
    for v in range(0, n, 2):
        best = int(np.argmin(costs[v]))
        mem[v][best] = 0.5                      # least cost and least memory: fixable
    edges, tables = [], []
    for u in range(n - 1):
        if rng.random() < edge_density:
            edges.append((u, u + 1))
            tables.append(np.full((k, k), 7.0) if u % 3 else
                          rng.integers(0, 5, (k, k)).astype(float))
    iv = np.stack([np.arange(n), np.arange(n) + 3], axis=1)
    return Problem(costs, edges, tables, memory=mem, memory_limit=12.0, intervals=iv)


def test_fix_isolated_fixes_the_nodes_it_should_and_only_those():
    p = _isolated_problem(np.random.default_rng(0))
    r = fix_isolated(p)
    busy = set()
    for (u, v), t in zip(p.edges.tolist(), p.edge_costs):
        if t.max() != t.min():
            busy |= {u, v}
    for v in range(p.n_nodes):
        c, m = p.node_costs[v], p.memory[v][:, 0]
        fixable = v not in busy and bool(((c == c.min()) & (m == m.min())).any())
        assert (r.kept[v].size == 1) == fixable, v
        if fixable:
            s = int(r.kept[v][0])
            assert c[s] == c.min() and m[s] == m.min()
    assert r.stats["isolated_fixed"] == r.stats["fixed_nodes"] > 0


def test_dominance_removes_a_strategy_worse_in_every_row():
    # node 0's strategy 1 costs more, uses more memory and is worse in the edge row
    p = Problem([np.array([1.0, 2.0, 0.0]), np.array([0.0, 0.0])], [(0, 1)],
                [np.array([[1.0, 2.0], [1.0, 3.0], [0.0, 9.0]])],
                memory=[np.array([1.0, 2.0, 1.0]), np.array([1.0, 1.0])], memory_limit=3.0,
                intervals=[(0, 2), (1, 3)])
    r = remove_dominated(p)
    assert r.kept[0].tolist() == [0, 2]           # 2 is better in cost but not in the row
    assert r.kept[1].tolist() == [0]              # its column 0 is at most column 1
    # with strategy 1 lighter in memory it is no longer dominated
    q = p.with_memory_limit(None)
    assert remove_dominated(q).kept[0].tolist() == [0, 2]
    light = Problem(p.node_costs, p.edges, p.edge_costs,
                    memory=[np.array([1.0, 0.5, 1.0]), np.array([1.0, 1.0])],
                    memory_limit=3.0, intervals=[(0, 2), (1, 3)])
    assert remove_dominated(light).kept[0].tolist() == [0, 1, 2]


def test_identical_strategies_keep_the_first():
    p = Problem([np.array([1.0, 1.0, 1.0])], [], [], memory=[np.array([2.0, 2.0, 2.0])],
                memory_limit=5.0)
    assert remove_dominated(p).kept[0].tolist() == [0]


def test_forbidden_entries_compare_lexicographically():
    # strategy 0 avoids a forbidden entry that strategy 1 pays; 1 is cheaper elsewhere
    p = Problem([np.array([5.0, 0.0]), np.array([0.0, 100.0])], [(0, 1)],
                [np.array([[1.0, 1.0], [1e18, 1.0]])])
    r = reduce_problem(p)
    assert r.kept[0].tolist() == [0, 1]           # neither dominates: both kept
    q = Problem([np.array([0.0, 5.0]), np.array([0.0, 100.0])], [(0, 1)],
                [np.array([[1.0, 1.0], [1e18, 1.0]])])
    assert reduce_problem(q).kept[0].tolist() == [0]


def test_restrict_and_expand_round_trip():
    p = _isolated_problem(np.random.default_rng(3), n=8, k=3, edge_density=0.9)
    kept = [np.array([0, 2]) if v % 2 else np.arange(3) for v in range(p.n_nodes)]
    q = restrict(p, kept)
    assert q.n_configs.tolist() == [3 if v % 2 == 0 else 2 for v in range(p.n_nodes)]
    for e, (u, v) in enumerate(p.edges.tolist()):
        assert np.array_equal(q.edge_costs[e], p.edge_costs[e][np.ix_(kept[u], kept[v])])
    r = reduce_problem(p)
    a = np.zeros(p.n_nodes, dtype=np.int64)
    assert p.evaluate(expand(r, a)).cost == r.problem.evaluate(a).cost


def test_solve_fixed_first_gives_the_original_optimum():
    from milp_parallel.solvers import solve_problem
    from milp_parallel.solvers.reduce import solve_fixed_first
    p = _isolated_problem(np.random.default_rng(5), n=9, k=3, edge_density=0.5)
    seen = []

    def solve(q, warm):
        seen.append(q)
        return solve_problem(q, "highs", warm_start=warm)
    r = solve_fixed_first(p, np.zeros(p.n_nodes, dtype=np.int64), solve)
    assert r is not None and len(seen) == 1 and seen[0].n_configs.sum() < p.n_configs.sum()
    exact = exact_optimum(p)
    assert r.status == "optimal" and exact_key(p, r.assignment) == exact.key
    assert r.objective == p.evaluate(r.assignment).cost
    assert r.stats["reductions"]["fixed_nodes"] > 0
    # nothing to fix: no solve, None
    busy = Problem([np.array([1.0, 2.0])] * 2, [(0, 1)], [np.array([[0.0, 1.0], [1.0, 0.0]])])
    assert solve_fixed_first(busy, None, solve) is None and len(seen) == 1
