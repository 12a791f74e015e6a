"""IOPDDL contest instance G (816 nodes, ~212k edge pairs, interval memory, 1e18 sentinel
costs): the proven optimum is 217,039. Skipped when the reference file is absent."""

from __future__ import annotations

import pytest

from benchmarks.instances import iopddl_path
from milp_parallel.problem import Problem
from milp_parallel.solvers import solve_problem
from milp_parallel.solvers.heuristics import incumbent
from milp_parallel.solvers.milp import formulate, presolve

G_OPTIMUM = 217_039


@pytest.fixture(scope="module")
def g_problem() -> Problem:
    path = iopddl_path("G")
    if path is None:
        pytest.skip("IOPDDL instance G is not available (asplos-2025-iopddl-G.json.gz)")
    return Problem.from_iopddl(path)


def test_presolve_removes_every_sentinel_cost_soundly(g_problem):
    warm, stats = incumbent(g_problem)
    assert warm is not None and g_problem.evaluate(warm).feasible
    assert stats["bad_entries"] == 0 and g_problem.evaluate(warm).cost < 1e17
    model = formulate(presolve(g_problem, warm_start=warm))
    # No 1e18 coefficient survives into the model: the bound steps removed them because a
    # feasible assignment (the incumbent) is far cheaper than any completion using one.
    assert model.col_cost.max() < 1e17
    assert model.reduced.stats["bound_configs"] + model.reduced.stats["dual_configs"] > 0
    assert model.n_cols < 0.5 * (sum(g_problem.n_configs)
                                 + sum(t.size for t in g_problem.edge_costs))


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_g_is_solved_and_proved(g_problem, solver):
    r = solve_problem(g_problem, solver, threads=1)
    assert r.status == "optimal"
    assert r.objective == G_OPTIMUM
    assert g_problem.evaluate(r.assignment).feasible
    assert r.bound == pytest.approx(G_OPTIMUM, rel=1e-6)


@pytest.mark.slow
def test_cpsat_on_g_is_honest_under_a_time_limit(g_problem):
    r = solve_problem(g_problem, "cpsat", time_limit=3, threads=1)
    # how far a 3 s run gets depends on the machine; what it says must be true
    assert r.status in ("optimal", "feasible", "unknown")
    assert not r.bound > G_OPTIMUM
    if r.assignment is None:
        assert r.status == "unknown"
        return
    assert r.objective >= G_OPTIMUM and r.objective < 1e17     # never a sentinel entry
    assert g_problem.evaluate(r.assignment).feasible
    if r.status == "optimal":
        assert r.objective == G_OPTIMUM
