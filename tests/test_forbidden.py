"""Forbidden (>= 1e18) entries, exactly: counted, not added, by every solver.

Every backend is compared with :func:`checks.exact_optimum`, an enumeration written in the
tests (fewest forbidden entries, then the exact cost of the rest), on random problems of every
shape and memory model with forbidden entries alone and beside ``inf``, without a warm start,
with a feasible one (which may use forbidden entries) and with an infeasible one; presolve is
checked to keep an optimum with and without a warm start.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_parallel.plan.crosscheck import checker_for, cross_check
from milp_parallel.problem import FORBIDDEN_COST, Problem
from milp_parallel.solvers import available_solvers, solve_problem
from milp_parallel.solvers.forbidden import lexicographic, marker
from milp_parallel.solvers.milp.presolve import DP_REDUCTIONS, REDUCTIONS, presolve

from checks import check_exact, exact_key, exact_optimum
from strategies import KINDS, MEMORY_MODELS, problems

B = 1e18
SOLVERS = [s for s in ("brute", "dp", "highs", "cbc", "cpsat", "auto")
           if s in available_solvers() or s == "auto"]
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def _accepts(solver: str, problem: Problem) -> bool:
    from milp_parallel.solvers import get_solver
    return solver == "auto" or get_solver(solver).accepts(problem) is None


# ---------------------------------------------------------------------- the evaluation
def test_evaluation_counts_forbidden_entries_and_sums_the_rest_exactly():
    p = Problem([np.array([6.0, 58.0]), np.array([0.0])], [(0, 1)],
                [np.array([[B], [B]])])
    a, b = p.evaluate([0, 0]), p.evaluate([1, 0])
    assert a.cost == b.cost                     # float64 cannot tell them apart ...
    assert a.key == (1, 6.0) and b.key == (1, 58.0)      # ... the key can
    assert a.key < b.key and a.feasible and a.forbidden_entries == 1


def test_inf_stays_impossible_and_is_not_counted():
    p = Problem([np.array([math.inf, B, 1.0])], [], [])
    assert not p.evaluate([0]).feasible
    assert p.evaluate([1]).key == (1, 0.0)
    assert p.evaluate([2]).key == (0, 1.0)


def test_the_lexicographic_copy_orders_like_the_key():
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = rng.integers(1, 4, size=3)
        nodes = [np.where(rng.random(kv) < 0.4, B, rng.integers(0, 9, kv) * 1.0) for kv in k]
        tabs = [np.where(rng.random((k[0], k[1])) < 0.5, 3e18, rng.uniform(0, 5, (k[0], k[1])))]
        p = Problem(nodes, [(0, 1)], tabs)
        lex = lexicographic(p)
        assert lex.problem.forbidden_cost == lex.marker == marker(p)
        assert lexicographic(lex.problem).problem is lex.problem        # idempotent
        keys, costs = [], []
        for a in np.ndindex(*k):
            keys.append(p.evaluate(a).key)
            costs.append(lex.problem.evaluate(a).cost)
            assert lex.problem.evaluate(a).key == keys[-1]
        order = sorted(range(len(keys)), key=lambda i: keys[i])
        assert all(costs[i] <= costs[j] + 1e-9 for i, j in zip(order, order[1:])
                   if keys[i] < keys[j])


def test_costs_too_close_to_the_marker_are_refused():
    from milp_parallel.errors import InvalidProblemError
    p = Problem([np.array([B, 9e17]), np.array([0.0])], [], [])
    with pytest.raises(InvalidProblemError, match="rescale"):
        solve_problem(p, "brute")


# ---------------------------------------------------------------------- the cases
def _forced():
    """Node 1 must take config 0, so every answer pays one 1e18 entry: u=1 (cost 3) wins."""
    return Problem([np.array([9.0, 3.0]), np.array([0.0, math.inf])], [(0, 1)],
                   [np.array([[B, 16.0], [B, 6.0]])])


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("warm", [None, [0, 0], [1, 0]])
def test_an_answer_that_must_use_a_forbidden_entry_is_exact(solver, warm):
    p = _forced()
    r = solve_problem(p, solver, warm_start=warm)
    assert r.status == "optimal" and r.assignment.tolist() == [1, 0]
    assert r.key == (1, 3.0) and r.stats["forbidden_entries"] == 1
    check_exact(r, p)


@pytest.mark.parametrize("solver", SOLVERS)
def test_fold_keeps_the_small_costs_beside_a_forbidden_entry(solver):
    # an edge [[1e18, 16], [1e18, 6]] next to node costs [9, 3]: folding it with a tolerance
    # relative to 1e18 erased the 9 and 3; the optimum (0, 3 + 6 + 100 + 12) needs them.
    p = Problem([np.array([9.0, 3.0]), np.array([0.0, 100.0]), np.array([0.0, 12.0])],
                [(0, 1), (1, 2)],
                [np.array([[B, 16.0], [B, 6.0]]), np.array([[B, B], [B, 0.0]])])
    for warm in (None, [0, 0, 0], [1, 1, 1]):
        check_exact(solve_problem(p, solver, warm_start=warm), p)


# ---------------------------------------------------------------------- every backend
def _warm(problem: Problem, how: str, seed: int):
    rng = np.random.default_rng(seed)
    if how == "none":
        return None
    tries = [rng.integers(0, problem.n_configs) for _ in range(200)]
    feasible = [a for a in tries if exact_key(problem, a) is not None]
    if how == "feasible":
        with_forbidden = [a for a in feasible if exact_key(problem, a)[0] > 0]
        pick = with_forbidden or feasible
        return pick[0].tolist() if pick else None
    bad = [a for a in tries if exact_key(problem, a) is None]
    return bad[0].tolist() if bad else None


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("memory", MEMORY_MODELS)
def test_every_backend_equals_the_exact_enumeration(solver, memory):
    @FUZZ
    @given(problems(KINDS, max_nodes=6, max_assignments=600, forbidden=True, memory=memory),
           st.sampled_from(("none", "feasible", "infeasible")), st.integers(0, 99))
    def check(problem, how, seed):
        if not _accepts(solver, problem):
            return
        warm = _warm(problem, how, seed)
        check_exact(solve_problem(problem, solver, warm_start=warm, threads=1), problem)

    check()


@pytest.mark.parametrize("solver", [s for s in SOLVERS if s in ("highs", "cbc", "cpsat")])
@pytest.mark.parametrize("steps", [(), ("forbidden",), ("dominance",), ("fold",), ("bound",),
                                   ("dual",), REDUCTIONS])
def test_each_presolve_step_alone_keeps_the_optimum(solver, steps):
    @settings(max_examples=15, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(problems(max_nodes=6, max_assignments=400, forbidden=True), st.integers(0, 99),
           st.booleans())
    def check(problem, seed, use_warm):
        warm = _warm(problem, "feasible", seed) if use_warm else None
        check_exact(solve_problem(problem, solver, reductions=steps, warm_start=warm,
                                  threads=1), problem)

    check()


# ---------------------------------------------------------------------- presolve itself
def _kept(red, a) -> bool:
    """Whether the reduced problem can still express assignment ``a``."""
    local = {}
    for v, x in enumerate(a):
        if red.fixed[v] >= 0:
            if red.fixed[v] != x:
                return False
        else:
            hit = np.nonzero(red.configs[v] == x)[0]
            if hit.size == 0:
                return False
            local[v] = int(hit[0])
    for (u, w), t in zip(red.edges, red.edge_costs):
        if not np.isfinite(t[local[int(u)], local[int(w)]]):
            return False
    return True


@FUZZ
@given(problems(max_nodes=6, max_assignments=400, forbidden=True), st.integers(0, 99),
       st.sampled_from(("none", "feasible")))
def test_presolve_keeps_an_optimum_with_and_without_a_warm_start(problem, seed, how):
    exact = exact_optimum(problem)
    red = presolve(problem, warm_start=_warm(problem, how, seed))
    if exact.key is None:
        return
    assert not red.infeasible, red.reason
    best = [a for a in np.ndindex(*problem.n_configs) if exact_key(problem, a) == exact.key]
    assert any(_kept(red, a) for a in best), (exact, red.stats)
    assert red.problem.has_forbidden_entries is False or red.problem.forbidden_cost < B


# ---------------------------------------------------------------------- independence
def test_a_solve_that_ran_the_exact_search_is_not_checked_by_it():
    p = _forced()
    r = solve_problem(p, "highs", reductions=REDUCTIONS + DP_REDUCTIONS)
    assert r.stats["presolve"] == "milp" and r.stats["used_exact_search"] is True
    assert checker_for(r, p) != "dp"
    outcome, check = cross_check(p, r)
    assert check is not None and check.solver != "dp"
    assert not check.stats.get("used_exact_search")
    plain = solve_problem(p, "highs")
    assert plain.stats["used_exact_search"] is False and checker_for(plain, p) == "dp"


def test_the_marker_never_reaches_1e18():
    p = _forced()
    lex = lexicographic(p)
    assert lex.marker < FORBIDDEN_COST
    assert all(np.all(t[np.isfinite(t)] < FORBIDDEN_COST)
               for t in lex.problem.node_costs + lex.problem.edge_costs)
