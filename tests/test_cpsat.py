"""CP-SAT's models (``model=`` of the ``cpsat`` backend) against brute force; its integer
scaling, progress reports and status honesty under tiny limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from milp_parallel.errors import InvalidOptionError
from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.milp.cpsat import MODELS, scale_costs, scale_memory_row

from checks import check_against
from strategies import problems


@pytest.mark.parametrize("model", MODELS)
@given(problem=problems(memory="all_live", max_nodes=6, max_assignments=1500))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_model_equals_brute_force_all_live(model, problem):
    check_against(solve_problem(problem, "cpsat", model=model, threads=1), brute_force(problem),
           problem)


@pytest.mark.parametrize("model", MODELS)
@given(problem=problems(memory="intervals", budget=True, max_nodes=6, max_assignments=1500))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_model_equals_brute_force_intervals(model, problem):
    check_against(solve_problem(problem, "cpsat", model=model, threads=1), brute_force(problem),
           problem)


@pytest.mark.parametrize("model", MODELS)
@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_model_equals_brute_force_without_presolve(model, problem):
    """The bare model: every configuration and pair reaches CP-SAT."""
    check_against(solve_problem(problem, "cpsat", model=model, reductions=(), threads=1),
           brute_force(problem), problem)


# ---------------------------------------------------------------- integer data
def _integer_problem(seed: int, n: int = 7, k: int = 3) -> Problem:
    rng = np.random.default_rng(seed)
    edges = [(i, i + 1) for i in range(n - 1)] + [(0, n - 1)]
    mem = [rng.integers(10**9, 10**12, k).astype(float) for _ in range(n)]
    iv = [(i, min(n, i + 2)) for i in range(n)]
    p = Problem([rng.integers(0, 10**9, k).astype(float) for _ in range(n)], edges,
                [rng.integers(0, 10**9, (k, k)).astype(float) for _ in edges],
                memory=mem, intervals=iv)
    least = max(sum(min(mem[v]) for v in range(n) if iv[v][0] <= t < iv[v][1])
                for t in range(n))
    return p.with_memory_limit(float(least + 5 * 10**11))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("seed", range(4))
def test_integer_data_is_exact(model, seed):
    """IOPDDL-like integer data: no rounding anywhere, and the optimum is brute force's."""
    p = _integer_problem(seed)
    r = solve_problem(p, "cpsat", model=model, reductions=(), threads=1)
    exact = brute_force(p)
    assert r.stats["cost_rounded"] is False
    assert r.stats["memory_rounded"] is False
    assert r.stats["cost_scale"] == 1.0
    check_against(r, exact, p)
    assert r.objective == exact.objective          # exactly, not within a tolerance


def test_scale_costs_integer_is_identity_and_float_bound_is_safe():
    c = np.array([3.0, 0.0, 17.0])
    ic, s, exact = scale_costs(c, 20.0)
    assert s == 1.0 and exact and ic.tolist() == [3, 0, 17]
    c = np.array([1e-5, 3.3e-6, 0.0])
    ic, s, exact = scale_costs(c, 1.33e-5)
    assert not exact
    assert np.all(np.abs(ic - c * s) <= 0.5)


def test_scale_memory_row_never_admits_an_infeasible_choice():
    rng = np.random.default_rng(1)
    for _ in range(50):
        coefs = rng.uniform(0, 1e9, 6)
        rhs = float(rng.uniform(0, coefs.sum()))
        ic, irhs, _ = scale_memory_row(coefs, rhs)
        for mask in range(64):
            x = np.array([(mask >> i) & 1 for i in range(6)])
            if int(ic @ x) <= irhs:
                assert coefs @ x <= rhs
    ic, irhs, exact = scale_memory_row(np.array([3.0, 4.0]), 7.0)
    assert exact and ic.tolist() == [3, 4] and irhs == 7


# ---------------------------------------------------------------- honesty and options
def _hard_problem(seed: int = 3, n: int = 40, k: int = 8) -> Problem:
    rng = np.random.default_rng(seed)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.25]
    return Problem([rng.uniform(0, 10, k) for _ in range(n)], edges,
                   [rng.uniform(0, 10, (k, k)) for _ in edges],
                   memory=[rng.uniform(0, 10, k) for _ in range(n)],
                   memory_limit=4.0 * n)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("limit", [0.05, 0.3])
def test_tiny_time_limit_is_honest(model, limit):
    p = _hard_problem()
    r = solve_problem(p, "cpsat", model=model, time_limit=limit, threads=1)
    assert r.status in ("feasible", "unknown")          # not provable in that time
    if r.assignment is not None:
        assert p.evaluate(r.assignment).feasible
        assert p.evaluate(r.assignment).cost == r.objective
        assert r.bound <= r.objective
        assert r.gap > 0


@pytest.mark.parametrize("model", MODELS)
def test_progress_reports_are_consistent(model):
    p = _hard_problem(n=20, k=5)
    seen = []
    r = solve_problem(p, "cpsat", model=model, time_limit=3.0, threads=1,
                      callback=seen.append, reductions=())
    assert seen, "no progress was reported"
    for pr in seen:
        assert pr.solver == "cpsat"
        assert pr.bound <= pr.objective * (1 + 1e-9) + 1e-9
    if r.status == "optimal":
        assert min(pr.objective for pr in seen) >= r.objective * (1 - 1e-6)


def test_unknown_model_and_bad_parameters_are_typed_errors():
    p = _hard_problem(n=4, k=2)
    with pytest.raises(InvalidOptionError, match="model"):
        solve_problem(p, "cpsat", model="nope")
    with pytest.raises(InvalidOptionError, match="cpsat_parameters"):
        solve_problem(p, "cpsat", cpsat_parameters="no_such_parameter: 3")


def test_extra_parameters_keep_the_5293_workaround():
    p = _hard_problem(n=6, k=3)
    r = solve_problem(p, "cpsat", cpsat_parameters="linearization_level: 2 "
                      "presolve_inclusion_work_limit: 1000", threads=1)
    assert r.status == "optimal"
    assert math.isfinite(r.bound)
