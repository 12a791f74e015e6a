"""The penalty backend (milp_parallel/solvers/penalty) against brute force on small interval
budgets, forbidden (1e18) entries included, with either inner solver."""

from __future__ import annotations

import math

import numpy as np
import pytest

from milp_parallel import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.memory import least_memory
from milp_parallel.solvers.penalty.inner import toulbar2_available
from milp_parallel.solvers.penalty.weights import Weights

from checks import exact_key

INNERS = ["descent"] + (["toulbar2"] if toulbar2_available() else [])


def _problem(seed: int, n: int = 7, k: int = 3, squeeze: float = 0.5,
             forbidden: float = 0.15) -> Problem:
    """A random DAG with intervals; the budget ``squeeze`` of the way from the least peak to
    the peak of the unconstrained optimum's memory (roughly)."""
    rng = np.random.default_rng(seed)
    edges = sorted({(int(u), int(v)) for v in range(1, n)
                    for u in rng.choice(v, size=min(v, 2), replace=False)})
    node = [rng.integers(0, 20, k).astype(float) for _ in range(n)]
    tabs = []
    for _ in edges:
        t = rng.integers(0, 20, (k, k)).astype(float)
        t[rng.random((k, k)) < forbidden] = 1e18
        t[0, 0] = min(t[0, 0], 19.0)              # a finite pair on every edge
        tabs.append(t)
    mem = [rng.integers(1, 10, k).astype(float) for _ in range(n)]
    starts = rng.integers(0, n, n)
    iv = [(int(s), int(s + rng.integers(1, 4))) for s in starts]
    p = Problem(node, edges, tabs, memory=mem, memory_limit=1e9, intervals=iv)
    low = float(least_memory(p)[0])
    most = low + sum(float(m.max() - m.min()) for m in mem)
    return p.with_memory_limit(low + squeeze * (most - low) * 0.3)


def _brute(p: Problem):
    return solve_problem(p, "brute")


@pytest.mark.parametrize("inner", INNERS)
@pytest.mark.parametrize("seed", range(8))
def test_never_better_than_brute_force_and_feasible(seed, inner):
    p = _problem(seed)
    ref = _brute(p)
    r = solve_problem(p, "penalty", inner=inner, round_seconds=1, max_rounds=6)
    if ref.status == "infeasible":
        assert r.status in ("infeasible", "unknown") and r.assignment is None
        return
    assert r.status in ("feasible", "optimal")
    ev = p.evaluate(r.assignment)
    assert ev.feasible
    assert exact_key(p, r.assignment) >= ref.key            # brute force is the optimum
    assert r.bound <= ref.objective * (1 + 1e-9) + 1e-9     # a valid bound
    if r.status == "optimal":
        assert math.isclose(r.objective, ref.objective, rel_tol=1e-6)


@pytest.mark.parametrize("inner", INNERS)
def test_finds_most_optima_of_small_problems(inner):
    hits = total = 0
    for seed in range(10):
        p = _problem(100 + seed, forbidden=0.0)
        ref = _brute(p)
        if ref.status != "optimal":
            continue
        r = solve_problem(p, "penalty", inner=inner, round_seconds=1, max_rounds=8)
        total += 1
        hits += r.key == ref.key or math.isclose(r.objective, ref.objective, rel_tol=1e-9)
    assert total >= 5 and hits >= 0.6 * total, (hits, total)


def test_forbidden_entries_stay_forbidden_when_avoidable():
    for seed in range(6):
        p = _problem(200 + seed, forbidden=0.4)
        ref = _brute(p)
        if ref.status != "optimal" or ref.forbidden_entries:
            continue
        r = solve_problem(p, "penalty", round_seconds=1, max_rounds=4)
        assert r.forbidden_entries == 0 and r.objective < 1e18


def test_an_impossible_budget_is_infeasible():
    p = _problem(3)
    p = p.with_memory_limit(float(least_memory(p)[0]) * 0.9)
    assert _brute(p).status == "infeasible"
    r = solve_problem(p, "penalty")
    assert r.status == "infeasible" and r.assignment is None and math.isnan(r.objective)


def test_weights_only_on_nodes_that_can_overflow_and_brackets_narrow():
    p = _problem(5)
    w = Weights(p, start=1.0)
    assert np.all(w.lam[~w.risky] == 0) and np.all(w.lam[w.risky] == 1.0)
    biggest = np.array([int(np.argmax(m[:, 0])) for m in p.memory])
    least = np.array([int(np.argmin(m[:, 0])) for m in p.memory])
    if w.overflowed(biggest).any():
        before = w.lam.copy()
        assert not w.update(biggest)
        up = w.overflowed(biggest) & w.risky
        assert np.all(w.lam[up] > before[up]) and np.all(w.lo[up] == before[up])
    lam = w.lam.copy()
    assert w.update(least)                                   # least memory always fits
    assert np.all(w.lam[w.risky] < lam[w.risky]) and np.all(w.hi[w.risky] == lam[w.risky])


@pytest.mark.parametrize("seed", range(4))
def test_the_portfolio_is_never_worse_than_either_side(seed):
    from milp_parallel.solvers.auto import choose_exact
    p = _problem(300 + seed)
    ref = _brute(p)
    exact = choose_exact(p)
    alone = solve_problem(p, exact, time_limit=30)
    pen = solve_problem(p, "penalty", time_limit=30)
    both = solve_problem(p, "portfolio", threads=2, time_limit=30)
    assert both.solver == "portfolio"
    if ref.status == "infeasible":
        assert both.status == "infeasible" and both.assignment is None
        return
    assert p.evaluate(both.assignment).feasible
    for side in (alone, pen):
        if side.assignment is not None:
            assert both.key <= side.key
    assert both.key >= ref.key and both.bound <= ref.objective * (1 + 1e-9) + 1e-9
    if both.status == "optimal":
        assert alone.status == "optimal" and both.key == alone.key


def test_the_portfolio_with_one_thread_is_the_exact_backend():
    from milp_parallel.solvers.auto import choose_exact
    p = _problem(11)
    one = solve_problem(p, "portfolio", threads=1, time_limit=30)
    alone = solve_problem(p, choose_exact(p), threads=1, time_limit=30)
    assert one.status == alone.status and one.key == alone.key
    assert one.stats.get("penalty", {}).get("inner") is None   # no penalty side ran
