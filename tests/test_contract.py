"""Contraction of one-to-one edges and row generation (issue 12): exact against brute force.

Problems are drawn by ``strategies.problems`` and then given *planted* one-to-one edges: on
some edges between nodes of equal configuration counts every entry off a random
permutation becomes ``1e18`` (IOPDDL's "effectively forbidden"), so that contraction has
groups to find, cycles of permutations that may not compose, and internal edges that are not
one-to-one.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.contract import contract, violated_rows
from milp_parallel.solvers.memory import interval_cliques, least_memory
from milp_parallel.solvers.result import OPTIMAL

from checks import check_against
from strategies import problems

SENTINEL = 1e18


def _planted(p: Problem, seed: int, share: float = 0.7) -> Problem:
    """``p`` with a share of its square edges turned one-to-one (module docstring)."""
    rng = np.random.default_rng(seed)
    tables = []
    for (u, v), t in zip(p.edges, p.edge_costs):
        t = t.copy()
        if t.shape[0] == t.shape[1] and rng.random() < share:
            perm = rng.permutation(t.shape[0])
            keep = np.zeros(t.shape, dtype=bool)
            keep[np.arange(t.shape[0]), perm] = True
            t[~keep] = SENTINEL
        tables.append(t)
    kw = {}
    if p.memory is not None:
        kw = {"memory": list(p.memory), "memory_limit": p.memory_limit,
              "intervals": p.intervals}
    return Problem(list(p.node_costs), [tuple(e) for e in p.edges.tolist()], tables, **kw)


@st.composite
def planted(draw, memory: str = "any", budget: bool | None = None, binding: bool = False):
    """Planted problems; with ``binding``, the budget halfway between the least peak and the
    unconstrained optimum's peak (so that the relaxation without rows overflows)."""
    p = draw(problems(memory=memory, budget=budget, max_nodes=7, max_configs=3, inf=False))
    p = _planted(p, draw(st.integers(0, 2**31 - 1)))
    if binding and p.memory is not None:
        free = brute_force(p.with_memory_limit(None))
        if free.assignment is not None:
            peak = p.evaluate(free.assignment).peak_memory
            least = least_memory(p)
            p = p.with_memory_limit((least + 0.5 * (peak - least)).tolist())
    return p


def _check_against_brute(p: Problem, solver: str) -> None:
    check_against(solve_problem(p, solver, contract="on", time_limit=30, threads=1),
                  brute_force(p), p)


@given(planted())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_assignment_without_forbidden_entries_is_an_expansion(p):
    u = brute_force(p.with_memory_limit(None) if p.has_budget else p)
    if u.status != OPTIMAL:
        return
    c = contract(p, upper=u.objective)
    assert c is not None
    # the unconstrained optimum is representable, and expands back to itself
    r = c.restrict(u.assignment)
    assert r is not None and c.expand(r).tolist() == u.assignment.tolist()
    # an assignment of the contracted problem costs what its expansion costs, or is
    # forbidden there because its expansion costs more than the known optimum
    q = c.problem() if not (p.has_budget and p.intervals is not None) else \
        c.problem(np.zeros((0, 2), dtype=np.int64))
    rng = np.random.default_rng(0)
    for _ in range(10):
        a = np.array([rng.integers(0, k) for k in q.n_configs])
        cost, full = q.evaluate(a).cost, p.evaluate(c.expand(a)).cost
        if np.isfinite(cost):
            assert cost == pytest.approx(full, rel=1e-9)
        else:
            assert full > u.objective
    assert q.evaluate(r).cost == pytest.approx(u.objective, rel=1e-9)


def test_groups_follow_the_one_to_one_edges_and_cycles_that_disagree_remove_states():
    k = 3
    swap = np.full((k, k), SENTINEL)
    swap[[0, 1, 2], [1, 0, 2]] = 0.0                 # 0<->1, 2->2
    same = np.where(np.eye(k, dtype=bool), 0.0, SENTINEL)
    # a triangle: 0 -same- 1 -same- 2 -swap- 0: only state 2 composes to the identity
    p = Problem([np.arange(k, dtype=float)] * 3, [(0, 1), (1, 2), (2, 0)], [same, same, swap])
    c = contract(p, upper=100.0)
    assert c.n_groups == 1 and c.n_states == 1
    assert c.expand(np.array([0])).tolist() == [2, 2, 2]


@given(planted(memory="none"))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_highs_on_the_contracted_problem_equals_brute_force(p):
    _check_against_brute(p, "highs")


@given(planted(memory="all_live", budget=True))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_all_live_budgets_contracted_equal_brute_force(p):
    _check_against_brute(p, "highs")


@pytest.mark.parametrize("solver", ["highs", "cbc", "cpsat"])
@given(p=planted(memory="intervals", budget=True, binding=True))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_row_generation_on_interval_budgets_equals_brute_force(solver, p):
    _check_against_brute(p, solver)


def test_row_generation_adds_rows_until_the_answer_fits():
    # A chain that must agree everywhere; cheapest at the config of most memory, and a
    # budget over overlapping live sets that only small configurations meet.
    n, k = 12, 3
    same = np.where(np.eye(k, dtype=bool), 0.0, SENTINEL)
    node = [np.array([3.0, 2.0, 1.0]) + 0.01 * v for v in range(n)]
    mem = [np.array([1.0, 2.0, 4.0]) for _ in range(n)]
    iv = [(v, v + 3) for v in range(n)]
    p = Problem(node, [(v, v + 1) for v in range(n - 1)], [same] * (n - 1), memory=mem,
                memory_limit=6.5, intervals=iv)
    r = solve_problem(p, "highs", contract="on", time_limit=30, threads=1)
    assert r.status == OPTIMAL and r.assignment.tolist() == [1] * n
    gen = r.stats["row_generation"]
    assert gen["rows"] >= 1 and len(gen["rounds"]) >= 2
    assert r.objective == pytest.approx(brute_force(p).objective)


def test_violated_rows_names_the_worst_row_of_each_overflowing_run():
    mem = [np.array([1.0]), np.array([5.0]), np.array([1.0]), np.array([1.0]),
           np.array([6.0])]
    iv = [(0, 2), (1, 3), (4, 6), (5, 7), (6, 8)]
    p = Problem([np.zeros(1)] * 5, [], [], memory=mem, memory_limit=4.0, intervals=iv)
    times = interval_cliques(p.intervals)
    rows = violated_rows(p, np.zeros(5, dtype=np.int64))
    # level 6 at t=1 (nodes 0, 1) and 7 at t=6 (nodes 3, 4): two runs, the worse first
    assert [times[t] for _, t in rows] == [6, 1]
    assert violated_rows(p, np.zeros(5, dtype=np.int64), limit=1).shape == (1, 2)


def test_contraction_gives_up_when_its_deadline_has_passed():
    from milp_parallel.solvers.options import Deadline
    big = 1e18
    chain = Problem([np.array([1.0, 5.0])] * 3000, [(i, i + 1) for i in range(2999)],
                    [np.array([[0.0, big], [big, 0.0]])] * 2999)
    assert contract(chain, upper=1e6).n_groups == 1
    assert contract(chain, upper=1e6, deadline=Deadline(0.0)) is None
