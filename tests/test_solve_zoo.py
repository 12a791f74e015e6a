"""End-to-end tests of solve(): zoo models on a preset cluster, every available backend
against the exact graph search, memory budgets, baselines, and the Plan it returns."""

from __future__ import annotations

import math

import pytest

from milp_parallel.errors import (
    InfeasibleError,
    InvalidOptionError,
    InvalidTopologyError,
    UnknownNameError,
)
from milp_parallel.plan import Plan, make_problem, solve
from milp_parallel.solvers import get_solver
from milp_parallel.solvers.memory import least_memory

CLUSTER = "abci"


def _available(name: str) -> bool:
    try:
        return get_solver(name).available()
    except (ImportError, AttributeError):     # backend module not written yet
        return False


MILP = [s for s in ("highs", "cbc", "cpsat") if _available(s)]
BACKENDS = ["dp", *MILP]

SMALL = [("lenet5", 4), ("alexnet", 4)]


def _honest(plan):
    """A backend may stop short of proving optimality (CBC with its default tolerances does
    on tiny objectives); then the plan must say so."""
    assert plan.status in ("optimal", "feasible")
    if plan.status == "optimal":
        assert "NOT proved" not in str(plan)
    else:
        assert "NOT proved optimal" in str(plan)
        assert plan.bound <= plan.objective


@pytest.fixture(scope="module")
def dp_plans():
    """The dp plan (no cross-check) of each small model, without and with a binding budget."""
    out = {}
    for model, dev in SMALL:
        free = solve(model, CLUSTER, devices=dev, solver="dp", memory_limit=math.inf,
                     cross_check=False)
        prob = make_problem(model, CLUSTER, devices=dev, memory_limit=math.inf)
        least = float(least_memory(prob).max())
        peak = max(free.memory_bytes)
        budget = least + 0.5 * (peak - least)
        tight = solve(model, CLUSTER, devices=dev, solver="dp", memory_limit=budget,
                      cross_check=False)
        out[model] = (free, tight, budget, least, peak)
    return out


@pytest.mark.parametrize("solver", BACKENDS)
@pytest.mark.parametrize("model,devices", SMALL)
def test_every_backend_matches_dp_optimum(dp_plans, model, devices, solver):
    free, _, _, _, _ = dp_plans[model]
    plan = solve(model, CLUSTER, devices=devices, solver=solver, memory_limit=math.inf)
    _honest(plan)
    assert plan.step_seconds == pytest.approx(free.step_seconds, rel=1e-6)
    assert plan.cross_check.verdict in ("agreed",) or plan.cross_check.verdict.startswith(
        "not run")
    if solver != "dp":
        assert plan.cross_check.verdict == "agreed"
        assert plan.cross_check.exact_solver == "dp"


@pytest.mark.parametrize("solver", BACKENDS)
@pytest.mark.parametrize("model,devices", SMALL)
def test_every_backend_matches_dp_under_binding_budget(dp_plans, model, devices, solver):
    free, tight, budget, least, peak = dp_plans[model]
    if peak <= least * (1 + 1e-9):
        pytest.skip("the fastest plan already uses the least memory: no budget binds")
    plan = solve(model, CLUSTER, devices=devices, solver=solver, memory_limit=budget)
    _honest(plan)
    assert plan.step_seconds == pytest.approx(tight.step_seconds, rel=1e-6)
    assert max(plan.memory_bytes) <= budget * (1 + 1e-9)
    assert plan.memory_limit_bytes == budget
    assert plan.step_seconds >= free.step_seconds * (1 - 1e-9)


@pytest.mark.parametrize("model,devices", SMALL)
def test_plan_accounts_for_every_layer_and_adds_up(dp_plans, model, devices):
    from milp_parallel import models
    plan = dp_plans[model][0]
    graph = models.get(model)
    assert [lc.name for lc in plan.layers] == [lay.name for lay in graph.layers]
    total = plan.compute_seconds + plan.sync_seconds + plan.transfer_seconds
    assert total == pytest.approx(plan.step_seconds, rel=1e-6)
    assert sum(lc.seconds for lc in plan.layers) == pytest.approx(plan.step_seconds, rel=1e-6)
    assert plan.throughput == pytest.approx(plan.batch_size / plan.step_seconds)
    for lc in plan.layers:
        assert 1 <= lc.n_devices <= devices
        assert lc.n_devices == math.prod(lc.degrees.values())
        if lc.merged:                           # follows its producer's layout
            assert lc.degrees == plan.layer(lc.node).degrees
    text = str(plan)
    for lc in plan.layers:
        assert lc.name in text
    assert Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("model,devices", SMALL)
def test_baselines_are_assignments_of_the_same_problem(dp_plans, model, devices):
    plan = dp_plans[model][1]                   # under the binding budget
    prob = make_problem(model, CLUSTER, devices=devices, memory_limit=plan.memory_limit_bytes)
    assert prob.evaluate(plan.assignment).cost == pytest.approx(plan.step_seconds, rel=1e-12)
    assert set(plan.baselines) >= {"data", "model", "owt"}
    for name, b in plan.baselines.items():
        ev = prob.evaluate(b.assignment)
        assert b.step_seconds == ev.cost
        assert b.feasible == ev.feasible
        assert b.peak_memory_bytes == pytest.approx(float(ev.peak_memory.max()))
        if math.isfinite(b.step_seconds):
            assert b.compute_seconds + b.sync_seconds + b.transfer_seconds == \
                pytest.approx(b.step_seconds, rel=1e-6)
            assert b.speedup == pytest.approx(b.step_seconds / plan.step_seconds)
        if b.feasible:
            assert plan.step_seconds <= b.step_seconds * (1 + 1e-9), name
    data = plan.baselines["data"]
    assert all(c == "serial" or c.startswith("n=") for c in data.description.split(", ")) \
        or data.description.startswith("n=")


def test_infeasible_budget_names_the_numbers(dp_plans):
    least = dp_plans["lenet5"][3]
    with pytest.raises(InfeasibleError) as info:
        solve("lenet5", CLUSTER, devices=4, solver="dp", memory_limit=least * 0.5)
    err = info.value
    assert err.least_memory_bytes == pytest.approx(least, rel=1e-9)
    assert err.budget_bytes == pytest.approx(least * 0.5)
    assert f"{least:.6g}" in str(err) and f"{least * 0.5:.6g}" in str(err)


def test_unknown_names_and_bad_arguments():
    with pytest.raises(UnknownNameError, match="nosuchnet"):
        solve("nosuchnet", CLUSTER, devices=4)
    with pytest.raises(UnknownNameError, match="nosuchcluster"):
        solve("lenet5", "nosuchcluster")
    with pytest.raises(UnknownNameError, match="nosolver"):
        solve("lenet5", CLUSTER, devices=4, solver="nosolver")
    with pytest.raises(InvalidTopologyError, match="devices"):
        solve("lenet5", CLUSTER, devices=0)
    with pytest.raises(InvalidOptionError, match="memory_limit"):
        solve("lenet5", CLUSTER, devices=4, memory_limit=-1)


def test_dp_main_solver_is_checked_by_a_milp(dp_plans):
    plan = solve("lenet5", CLUSTER, devices=4, solver="dp")
    if MILP:
        assert plan.cross_check.exact_solver in MILP
        assert plan.cross_check.verdict == "agreed"
    else:
        assert plan.cross_check.verdict.startswith("not run")


def test_graph_and_file_inputs_give_the_same_plan(tmp_path, dp_plans):
    from milp_parallel import clusters, models
    graph = models.get("lenet5")
    graph.save(tmp_path / "lenet5.json")
    clusters.get(CLUSTER).save(tmp_path / "cluster.json")
    a = solve(graph, clusters.get(CLUSTER), devices=4, solver="dp", memory_limit=math.inf,
              cross_check=False)
    b = solve(tmp_path / "lenet5.json", str(tmp_path / "cluster.json"), devices=4,
              solver="dp", memory_limit=math.inf, cross_check=False)
    assert a.step_seconds == b.step_seconds == dp_plans["lenet5"][0].step_seconds
    assert a.assignment == b.assignment


def test_batch_size_changes_the_problem():
    small = solve("lenet5", CLUSTER, devices=4, batch_size=8, solver="dp", cross_check=False)
    assert small.batch_size == 8
    assert all(lc.degrees.get("n", 1) <= 8 for lc in small.layers)


@pytest.mark.slow
@pytest.mark.parametrize("solver", BACKENDS)
def test_resnet18_every_backend_matches_dp(solver):
    ref = solve("resnet18", CLUSTER, devices=4, solver="dp", cross_check=False)
    plan = solve("resnet18", CLUSTER, devices=4, solver=solver)
    _honest(plan)
    assert plan.step_seconds == pytest.approx(ref.step_seconds, rel=1e-6)
    assert len(plan.layers) == len(ref.layers)
    for b in plan.baselines.values():
        if b.feasible:
            assert plan.step_seconds <= b.step_seconds * (1 + 1e-9)
