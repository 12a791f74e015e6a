"""Two independent proofs (issue 11): fault injection on each side of the cross-check.

- With the exact graph search made unavailable (its engine replaced by functions that raise),
  every MILP backend still proves the optimum: of zoo problems without and with a binding
  budget, and of hypothesis problems (up to 12 nodes, 6 configurations, every graph shape,
  both memory models), against brute force.
- With the MILP solvers made unavailable, ``solve(..., solver="dp")`` still works and its
  cross-check says "not run", never "agreed".
- A deliberately wrong exact search, or a deliberately wrong MILP answer, makes ``solve()``
  raise CrossCheckError.
- Tiny time limits on a large problem give an honest status from every solver.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from milp_parallel.errors import CrossCheckError
from milp_parallel.plan import make_problem, solve
from milp_parallel.solvers import MILP_SOLVERS, solve_problem
from milp_parallel.solvers.brute import brute_force
from milp_parallel.solvers.dp import DPSolver
from milp_parallel.solvers.dp import engine as dp_engine
from milp_parallel.solvers.memory import least_memory
from milp_parallel.solvers.milp.backend import MilpBackend
from milp_parallel.solvers.result import FEASIBLE, OPTIMAL, UNKNOWN, SolveResult

from checks import same_answer
from strategies import problems

CLUSTER = "abci"


class DPUnavailable(RuntimeError):
    pass


def _boom(*args, **kwargs):
    raise DPUnavailable("the exact search was called on the independent MILP path")


@pytest.fixture
def no_dp(monkeypatch):
    """Every entry point of the exact search raises."""
    monkeypatch.setattr(dp_engine.Engine, "__init__", _boom)
    monkeypatch.setattr(dp_engine.Engine, "run", _boom)
    monkeypatch.setattr(dp_engine.Engine, "min_marginals", _boom)
    monkeypatch.setattr(dp_engine, "solve_unconstrained", _boom)
    monkeypatch.setattr(DPSolver, "_solve", _boom)


def _halfway(model: str, devices: int):
    """A zoo problem, its optimum, and the budget halfway between the least memory and the
    unconstrained optimum's peak on the most loaded device (None when it cannot bind)."""
    free = make_problem(model, CLUSTER, devices=devices, memory_limit=math.inf)
    r_free = solve_problem(free, "dp")
    peak = free.evaluate(r_free.assignment).peak_memory
    least = least_memory(free)
    d = int(np.argmax(least))
    if peak[d] <= least[d] * (1 + 1e-9):
        return free, r_free.objective, None
    return free, r_free.objective, 0.5 * (least[d] + peak[d])


def _budgeted(model: str, devices: int):
    """``((free problem, optimum), (budgeted problem, optimum) or None)``, the optima from
    the exact search (computed before any fault)."""
    free, opt, budget = _halfway(model, devices)
    if budget is None:
        return (free, opt), None
    tight = free.with_memory_limit(budget)
    return (free, opt), (tight, solve_problem(tight, "dp").objective)


ZOO = [("lenet5", 4), ("alexnet", 4), ("resnet18", 4), ("vgg16", 8)]


@pytest.fixture(scope="module")
def zoo_cases():
    return {case: _budgeted(*case) for case in ZOO}


@pytest.mark.parametrize("solver", MILP_SOLVERS)
@pytest.mark.parametrize("case", ZOO)
def test_milp_backends_prove_zoo_optima_without_the_exact_search(no_dp, zoo_cases, case,
                                                                  solver):
    (free, free_opt), tight = zoo_cases[case]
    for problem, optimum in [(free, free_opt)] + ([tight] if tight else []):
        r = solve_problem(problem, solver)
        assert r.status == OPTIMAL, r
        assert r.objective == pytest.approx(optimum, rel=1e-9)
        assert r.stats["warm_start_source"] in ("heuristic", "none")
        assert r.stats["presolve"] == "milp"


@pytest.mark.parametrize("solver", MILP_SOLVERS)
@given(problem=problems(max_nodes=12, max_configs=6, max_assignments=20_000))
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_milp_backends_equal_brute_force_without_the_exact_search(no_dp, solver, problem):
    exact = brute_force(problem, max_assignments=1e6)
    r = solve_problem(problem, solver)
    assert r.status == exact.status, (r, exact)
    if exact.status == OPTIMAL:
        assert same_answer(r, exact)
        assert problem.evaluate(r.assignment).feasible


@pytest.mark.parametrize("memory", ["all_live", "intervals"])
@pytest.mark.parametrize("kind", ["tree", "series_parallel", "dag"])
def test_shapes_and_memory_models_without_the_exact_search(no_dp, kind, memory):
    @given(problem=problems(kinds=(kind,), memory=memory, budget=True, max_nodes=12,
                            max_configs=6, max_assignments=20_000, inf=False))
    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def check(problem):
        exact = brute_force(problem, max_assignments=1e6)
        for solver in MILP_SOLVERS:
            r = solve_problem(problem, solver)
            assert r.status == exact.status, (solver, r, exact)
            if exact.status == OPTIMAL:
                assert same_answer(r, exact)
    check()


def test_dp_alone_is_never_agreed(monkeypatch):
    from milp_parallel.solvers.milp import cbc, cpsat, highs
    for cls in (highs.HiGHSSolver, cbc.CBCSolver, cpsat.CPSATSolver):
        monkeypatch.setattr(cls, "available", lambda self: False)
    plan = solve("lenet5", CLUSTER, devices=4, solver="dp", memory_limit=math.inf)
    assert plan.status == OPTIMAL
    assert plan.cross_check.outcome == "not_run"
    assert not plan.cross_check.agreed
    assert "no MILP backend" in plan.cross_check.reason


def test_the_cross_check_of_each_method_is_the_other():
    plan = solve("lenet5", CLUSTER, devices=4, solver="highs", memory_limit=math.inf)
    assert plan.cross_check.checker == "dp" and plan.cross_check.agreed
    assert plan.cross_check.solver_seconds == pytest.approx(plan.solve_seconds)
    plan = solve("lenet5", CLUSTER, devices=4, solver="dp", memory_limit=math.inf)
    assert plan.cross_check.checker in MILP_SOLVERS and plan.cross_check.agreed
    # a MILP backend that leaned on the exact search is checked by a MILP backend instead
    plan = solve("lenet5", CLUSTER, devices=4, solver="highs", presolve="dp",
                 memory_limit=math.inf)
    assert plan.cross_check.checker in MILP_SOLVERS


def _suboptimal(problem, solver_name: str) -> SolveResult:
    """A feasible assignment worse than the optimum, claimed optimal (a buggy solver)."""
    best = solve_problem(problem, "brute" if problem.n_nodes < 8 else "dp")
    for v in range(problem.n_nodes):
        for c in range(problem.n_configs[v]):
            a = best.assignment.copy()
            a[v] = c
            ev = problem.evaluate(a)
            if ev.feasible and ev.cost > best.objective * (1 + 1e-3):
                return SolveResult(a, ev.cost, OPTIMAL, ev.cost, 0.0, 0.01, solver_name, {})
    raise AssertionError("no worse feasible neighbour")


def test_a_wrong_exact_search_is_caught(monkeypatch):
    problem = make_problem("lenet5", CLUSTER, devices=4, memory_limit=math.inf)
    wrong = _suboptimal(problem, "dp")
    monkeypatch.setattr(DPSolver, "_solve", lambda self, p, o, d: wrong)
    with pytest.raises(CrossCheckError, match="cross-check failed"):
        solve("lenet5", CLUSTER, devices=4, solver="highs", memory_limit=math.inf)


def test_a_wrong_milp_answer_is_caught(monkeypatch):
    problem = make_problem("lenet5", CLUSTER, devices=4, memory_limit=math.inf)
    wrong = _suboptimal(problem, "highs")
    monkeypatch.setattr(MilpBackend, "_solve", lambda self, p, o, d: wrong)
    with pytest.raises(CrossCheckError, match="cross-check failed"):
        solve("lenet5", CLUSTER, devices=4, solver="dp", memory_limit=math.inf)


@pytest.fixture(scope="module")
def large_budgeted():
    free, _, budget = _halfway("resnet50", 16)
    return free.with_memory_limit(budget)


@pytest.mark.parametrize("solver", ("dp",) + MILP_SOLVERS)
def test_tiny_time_limits_give_honest_statuses(large_budgeted, solver):
    r = solve_problem(large_budgeted, solver, time_limit=0.05)
    assert r.status in (FEASIBLE, UNKNOWN), r          # never optimal without the proof
    if r.assignment is not None:
        ev = large_budgeted.evaluate(r.assignment)
        assert ev.feasible and ev.cost == pytest.approx(r.objective)
        assert not (r.bound > r.objective)
    else:
        assert math.isnan(r.objective)
