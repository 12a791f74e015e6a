"""The MILP backends (cbc, highs, cpsat) against brute force and the DP, and their status
honesty."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from milp_parallel.errors import InvalidOptionError
from milp_parallel.problem import Problem
from milp_parallel.solvers import get_solver, solve_problem
from milp_parallel.solvers.auto import choose
from milp_parallel.solvers.brute import brute_force

from checks import check_against
from strategies import problems

BACKENDS = ("cbc", "highs", "cpsat")
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "iopddl_example.json"




@pytest.mark.parametrize("solver", BACKENDS)
@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_backend_equals_brute_force(solver, problem):
    check_against(solve_problem(problem, solver), brute_force(problem), problem)


@pytest.mark.parametrize("solver", BACKENDS)
@given(problem=problems(memory="intervals", budget=True, max_nodes=6, max_assignments=1500,
                        inf=False))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_backend_equals_brute_force_with_interval_budgets(solver, problem):
    check_against(solve_problem(problem, solver), brute_force(problem), problem)


@pytest.mark.parametrize("solver", BACKENDS)
@given(problem=problems(max_nodes=6, max_assignments=1500))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_backend_equals_brute_force_without_presolve(solver, problem):
    """The bare formulation (only what the model cannot express is removed)."""
    check_against(solve_problem(problem, solver, reductions=()), brute_force(problem),
                   problem)


@pytest.mark.parametrize("solver", BACKENDS)
@given(problem=problems(kinds=("chain", "tree", "series_parallel"), min_nodes=10,
                        max_nodes=30, max_configs=6, max_assignments=None,
                        memory="all_live", budget=True, inf=False, max_devices=2))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_backend_equals_dp_on_larger_problems(solver, problem):
    exact = solve_problem(problem, "dp")
    check_against(solve_problem(problem, solver), exact, problem)


@pytest.mark.parametrize("solver", BACKENDS)
@pytest.mark.parametrize("reductions", [None, ()])
def test_iopddl_example(solver, reductions):
    p = Problem.from_iopddl(EXAMPLE)
    r = solve_problem(p, solver, reductions=reductions)
    assert r.status == "optimal"
    assert r.objective == 445
    assert r.assignment.tolist() == [0, 0, 2, 1, 0]


@pytest.mark.parametrize("solver", BACKENDS)
def test_over_tight_budget_is_infeasible_with_least_memory(solver):
    p = Problem.from_iopddl(EXAMPLE)
    least = 0
    r = solve_problem(p.with_memory_limit(30), solver)
    assert r.status == "infeasible" and r.assignment is None
    least = r.stats["least_peak_memory"]
    assert least[0] > 30
    # The least memory is reachable: with exactly that budget the problem is feasible.
    assert solve_problem(p.with_memory_limit(float(least[0])), solver).status == "optimal"


@pytest.mark.parametrize("solver", BACKENDS)
def test_warm_start_is_used_and_returned_when_nothing_beats_it(solver):
    p = Problem.from_iopddl(EXAMPLE)
    r = solve_problem(p, solver, warm_start=[0, 0, 2, 1, 0], reductions=())
    assert r.objective == 445
    assert r.stats["warm_start_source"] == "user"


@pytest.mark.parametrize("solver", BACKENDS)
def test_unknown_option_is_a_type_error(solver):
    with pytest.raises(InvalidOptionError, match="unknown option"):
        solve_problem(Problem.from_iopddl(EXAMPLE), solver, tme_limit=3)


@pytest.mark.parametrize("solver", BACKENDS)
def test_backend_declares_its_package(solver):
    s = get_solver(solver)
    assert s.available()
    assert s.package in ("pulp", "highspy", "ortools")


def test_auto_picks_an_available_milp_backend():
    p = Problem.from_iopddl(EXAMPLE)
    name = choose(p)
    assert get_solver(name).available()
    r = solve_problem(p, "auto")
    assert r.objective == 445 and r.status == "optimal"


def _hard_problem(seed: int = 0, n: int = 25, k: int = 8) -> Problem:
    """A dense random problem with a binding budget (HiGHS needs about a minute)."""
    rng = np.random.default_rng(seed)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.25]
    return Problem([rng.uniform(0, 10, k) for _ in range(n)], edges,
                   [rng.uniform(0, 10, (k, k)) for _ in edges],
                   memory=[rng.uniform(0, 10, k) for _ in range(n)],
                   memory_limit=4.0 * n, intervals=None)


@pytest.mark.parametrize("solver", BACKENDS)
def test_tiny_time_limit_is_never_called_optimal(solver):
    p = _hard_problem()
    r = solve_problem(p, solver, time_limit=0.2)
    assert r.status in ("feasible", "unknown")
    if r.status == "feasible":
        assert p.evaluate(r.assignment).feasible
        assert r.gap > 0
        assert r.bound < r.objective


# ---------------------------------------------------------------- time_limit end to end
@pytest.mark.parametrize("solver", BACKENDS)
def test_solver_gets_only_the_time_left_after_the_build(solver):
    rng = np.random.default_rng(3)
    n, k = 12, 5
    p = Problem([rng.random(k) for _ in range(n)], [(i, i + 1) for i in range(n - 1)],
                [rng.random((k, k)) for _ in range(n - 1)])
    r = solve_problem(p, solver, time_limit=30.0, reductions=("forbidden",))
    assert r.stats["variables"] > 0                  # the solver did run
    tl = r.stats["solver_time_limit"]
    # The solver is handed what is left once warm start, presolve and formulation ran.
    assert 0 < tl <= 30.0 - r.stats["build_seconds"]
    assert r.status == "optimal"


@pytest.mark.parametrize("solver", BACKENDS)
def test_no_time_left_returns_the_warm_start_without_running_the_solver(solver):
    p = Problem.from_iopddl(EXAMPLE)
    exact = solve_problem(p, "brute") if p.n_configs.prod() < 10 ** 6 else None
    r = solve_problem(p, solver, time_limit=1e-9)
    assert r.stats["solver_time_limit"] == 0.0
    assert r.stats["solve_seconds"] == 0.0
    assert r.status in ("feasible", "unknown")
    if r.status == "feasible":
        ev = p.evaluate(r.assignment)
        assert ev.feasible and ev.cost == r.objective
        if exact is not None:
            assert r.key >= (exact.forbidden_entries, exact.allowed_cost * (1 - 1e-9))


@pytest.mark.parametrize("solver", BACKENDS)
def test_a_solver_that_cannot_load_the_model_in_time_is_not_started(solver, monkeypatch):
    # a backend that needs longer to load the model than is left keeps the incumbent
    rng = np.random.default_rng(3)
    n, k = 12, 5
    p = Problem([rng.random(k) for _ in range(n)], [(i, i + 1) for i in range(n - 1)],
                [rng.random((k, k)) for _ in range(n - 1)])
    monkeypatch.setattr(type(get_solver(solver)), "startup_seconds_per_nonzero", 1e3)
    r = solve_problem(p, solver, time_limit=30.0, reductions=("forbidden",))
    assert r.stats["solve_seconds"] == 0.0 and r.stats["time_limit_reached"]
    assert "takes about" in r.stats["native_status"]
    assert r.status == "feasible" and p.evaluate(r.assignment).feasible


def test_cbc_stops_writing_its_model_file_at_the_deadline(tmp_path):
    from milp_parallel.solvers.milp import formulate, presolve
    from milp_parallel.solvers.milp.cbc import _OutOfTime, write_mps
    from milp_parallel.solvers.options import Deadline
    rng = np.random.default_rng(3)
    p = Problem([rng.random(4) for _ in range(5)], [(i, i + 1) for i in range(4)],
                [rng.random((4, 4)) for _ in range(4)])
    model = formulate(presolve(p, reductions=("forbidden",)))
    with pytest.raises(_OutOfTime):
        write_mps(model, str(tmp_path / "m.mps"), deadline=Deadline(0.0))
    write_mps(model, str(tmp_path / "m.mps"), deadline=Deadline(60.0))
    text = (tmp_path / "m.mps").read_text()
    assert text.startswith("NAME") and text.endswith("ENDATA\n")
    assert text.count(" BV BND ") == model.n_x


@pytest.mark.parametrize("solver", BACKENDS)
def test_bad_time_limit_is_a_value_error(solver):
    p = Problem([np.array([1.0, 2.0])], [], [])
    with pytest.raises(InvalidOptionError, match="time_limit"):
        solve_problem(p, solver, time_limit=-1.0)
