"""Tests of plan.py's pieces that need no model zoo: the cross-check logic, the memory
diagnosis, the baselines over configurations, and the Plan value (JSON, text)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings

from milp_parallel import Problem, solve_problem
from milp_parallel.errors import CrossCheckError, FormatError, InfeasibleError
from milp_parallel.plan import (
    Baseline,
    CrossCheck,
    LayerChoice,
    Plan,
    cross_check_results,
)
from milp_parallel.plan.baselines import (
    NodeConfigs,
    baseline_assignments,
    parse_config_label,
    uniform_strategies,
)
from milp_parallel.plan.planner import _infeasible_error
from milp_parallel.solvers import SolveResult
from milp_parallel.solvers.memory import least_memory

from strategies import problems


def _chain(n=4, k=3, seed=0, budget=None, devices=2):
    rng = np.random.default_rng(seed)
    mem = [rng.uniform(1, 10, size=(k, devices)) for _ in range(n)]
    return Problem([rng.uniform(0, 5, k) for _ in range(n)],
                   [(i, i + 1) for i in range(n - 1)],
                   [rng.uniform(0, 3, (k, k)) for _ in range(n - 1)],
                   memory=mem, memory_limit=budget)


def _result(problem, a, status="optimal", solver="x", bound=None):
    a = None if a is None else np.asarray(a)
    obj = math.nan if a is None else problem.evaluate(a).cost
    if bound is None:
        bound = obj if status == "optimal" else -math.inf
    return SolveResult(assignment=a, objective=obj, status=status, bound=bound,
                       gap=0.0 if status == "optimal" else math.inf, seconds=0.01,
                       solver=solver)


# ---------------------------------------------------------------------- cross-check
def test_cross_check_agrees_on_same_optimum():
    p = _chain()
    exact = solve_problem(p, "brute")
    dp = solve_problem(p, "dp")
    cc = cross_check_results(p, dp, exact)
    assert cc.verdict == "agreed"
    assert cc.exact_objective == pytest.approx(dp.objective, rel=1e-9)
    assert cc.exact_solver == "brute"


def test_cross_check_raises_on_wrong_optimum_with_both_assignments():
    p = _chain(seed=3)
    exact = solve_problem(p, "brute")
    worse = next(np.array(a) for a in np.ndindex(*p.n_configs)
                 if p.evaluate(a).cost > exact.objective * (1 + 1e-3))
    wrong = _result(p, worse, status="optimal", solver="liar")
    with pytest.raises(CrossCheckError) as info:
        cross_check_results(p, wrong, exact)
    err = info.value
    assert np.array_equal(err.solver_assignment, worse)
    assert np.array_equal(err.exact_assignment, exact.assignment)
    assert err.solver_objective == wrong.objective
    assert err.exact_objective == exact.objective
    assert "liar" in str(err)


def test_cross_check_raises_when_objective_does_not_match_assignment():
    p = _chain(seed=4)
    exact = solve_problem(p, "brute")
    lie = dataclasses.replace(exact, objective=exact.objective * 0.5, solver="liar")
    with pytest.raises(CrossCheckError, match="costs"):
        cross_check_results(p, lie, exact)


def test_cross_check_raises_when_solver_claims_infeasible_wrongly():
    p = _chain(seed=5)
    exact = solve_problem(p, "brute")
    none = _result(p, None, status="infeasible")
    with pytest.raises(CrossCheckError, match="infeasible"):
        cross_check_results(p, none, exact)


def test_cross_check_feasible_solver_is_bounded_not_agreed():
    p = _chain(seed=6)
    exact = solve_problem(p, "brute")
    worse = next(np.array(a) for a in np.ndindex(*p.n_configs)
                 if p.evaluate(a).cost > exact.objective * 1.01)
    feas = _result(p, worse, status="feasible", bound=exact.objective * 0.9)
    cc = cross_check_results(p, feas, exact)
    assert cc.verdict.startswith("bounded:")
    # a "feasible" result that is in fact optimal is still only bounded: agreed means both
    # proved the same optimum
    same = _result(p, exact.assignment, status="feasible")
    cc = cross_check_results(p, same, exact)
    assert cc.outcome == "bounded" and "equals the optimum" in cc.reason
    # a proved bound above the exact optimum is a disagreement
    lying_bound = _result(p, worse, status="feasible", bound=exact.objective * 1.005)
    with pytest.raises(CrossCheckError, match="bound"):
        cross_check_results(p, lying_bound, exact)


def test_cross_check_over_budget_assignment_is_rejected():
    p = _chain(seed=7)
    free = solve_problem(p, "brute")
    peak = p.evaluate(free.assignment).peak_memory
    tight = p.with_memory_limit(float(peak.max()) * 0.999)
    exact = solve_problem(tight, "brute")
    with pytest.raises(CrossCheckError, match="not feasible"):
        cross_check_results(tight, dataclasses.replace(free, solver="liar"), exact)


@given(problems(kinds=("chain", "tree", "series_parallel"), memory="all_live", budget=True))
@settings(max_examples=25, deadline=None)
def test_cross_check_dp_vs_brute_agree_on_random_problems(problem):
    exact = solve_problem(problem, "brute")
    dp = solve_problem(problem, "dp")
    if dp.status in ("optimal", "infeasible"):
        assert cross_check_results(problem, dp, exact).verdict == "agreed"


# ---------------------------------------------------------------------- memory diagnosis
def test_least_memory_is_exact_for_all_live_and_in_message():
    p = _chain(n=3, k=3, seed=8, devices=1)
    least = least_memory(p)
    brute_least = min(p.evaluate(a).peak_memory[0] for a in np.ndindex(*p.n_configs))
    assert least[0] == pytest.approx(brute_least, rel=1e-12)
    tight = p.with_memory_limit(least[0] * 0.9)
    res = solve_problem(tight, "dp")
    assert res.status == "infeasible"
    err = _infeasible_error(tight, res, "toy")
    assert isinstance(err, InfeasibleError)
    assert err.least_memory_bytes == pytest.approx(least[0], rel=1e-9)
    assert err.budget_bytes == pytest.approx(least[0] * 0.9)
    assert f"{least[0]:.6g}" in str(err) and f"{least[0] * 0.9:.6g}" in str(err)


# ---------------------------------------------------------------------- baselines
def _grid_problem(seed=0, budget=None):
    """3 nodes (conv, conv, linear), configs over dims (n, c): serial, n=2, n=4, c=2, c=4,
    n=2 c=2 (the linear lacks c=4)."""
    rng = np.random.default_rng(seed)
    full = np.array([[1, 1], [2, 1], [4, 1], [1, 2], [1, 4], [2, 2]])
    lin = full[[0, 1, 2, 3, 5]]
    degs = [full, full, lin]
    ops = ["conv", "conv", "linear"]
    ks = [len(d) for d in degs]
    p = Problem([rng.uniform(1, 5, k) for k in ks], [(0, 1), (1, 2)],
                [rng.uniform(0, 2, (ks[0], ks[1])), rng.uniform(0, 2, (ks[1], ks[2]))],
                memory=[rng.uniform(1, 3, (k, 4)) for k in ks], memory_limit=budget)
    return p, [NodeConfigs(op, ("n", "c"), d) for op, d in zip(ops, degs)]


def test_baselines_follow_their_rules():
    p, nodes = _grid_problem()
    b = baseline_assignments(p, nodes, 4)
    assert [tuple(nodes[v].degrees[c]) for v, c in enumerate(b["data"])] == [(4, 1)] * 3
    assert [tuple(nodes[v].degrees[c]) for v, c in enumerate(b["model"])] == \
        [(1, 4), (1, 4), (1, 2)]            # linear has no c=4: nearest is c=2
    assert [tuple(nodes[v].degrees[c]) for v, c in enumerate(b["owt"])] == \
        [(4, 1), (4, 1), (1, 2)]
    uni = uniform_strategies(p, nodes)
    assert set(uni) == {(), (("n", 2),), (("n", 4),), (("c", 2),), (("c", 2), ("n", 2))}
    best = min(uni.values(), key=lambda a: p.evaluate(a).cost)
    assert np.array_equal(b["best_uniform"], best)


def test_optimum_never_worse_than_feasible_baselines():
    for seed in range(5):
        p, nodes = _grid_problem(seed, budget=6.0)
        opt = solve_problem(p, "brute")
        for name, a in baseline_assignments(p, nodes, 4).items():
            ev = p.evaluate(a)
            if ev.feasible:
                assert opt.objective <= ev.cost * (1 + 1e-12), name


def test_data_baseline_falls_back_to_power_of_two():
    p = Problem([np.ones(4)], [], [])
    node = NodeConfigs("conv", ("n", "c"), np.array([[1, 1], [2, 1], [4, 1], [3, 1]]))
    assert baseline_assignments(p, [node], 6)["data"].tolist() == [2]   # n=4, not n=3


def test_parse_config_label():
    assert parse_config_label("n=2 h=2 (4 GPUs)") == {"n": 2, "h": 2}
    assert parse_config_label("serial") == {}
    with pytest.raises(ValueError):
        parse_config_label("n2")


# ---------------------------------------------------------------------- the Plan value
def _plan(status="optimal", bound=0.01):
    layers = (
        LayerChoice("data", "input", "n=4", {"n": 4}, 4, 0.0, 0.0, 0.0, 1e6, "data"),
        LayerChoice("conv1", "conv", "n=2 h=2", {"n": 2, "h": 2}, 4, 0.004, 0.001, 0.0005,
                    3.5e7, "conv1"),
        LayerChoice("relu1", "elementwise", "n=2 h=2", {"n": 2, "h": 2}, 4, 1e-4, 0.0, 0.0,
                    2e6, "conv1"),
        LayerChoice("fc", "linear", "c=4", {"c": 4}, 4, 0.003, 0.0, 0.0014, 1.2e8, "fc"),
    )
    base = {"data": Baseline("data", 0.02, 0.01, 0.009, 0.001, 2e9, True, 2.0, "n=4",
                             (1, 1, 1)),
            "model": Baseline("model", math.inf, 0.01, 0.0, math.inf, 1e9, False, math.inf,
                              "c=4", (2, 2, 2))}
    return Plan(model="toy", cluster="box", devices=4, batch_size=64, layers=layers,
                step_seconds=0.01, compute_seconds=0.0071, sync_seconds=0.001,
                transfer_seconds=0.0019, throughput=6400.0, memory_bytes=(1e9, 1e9, 9e8, 9e8),
                memory_capacity_bytes=16e9, solver="highs", status=status, objective=0.01,
                bound=bound, gap=0.0 if status == "optimal" else 0.5, solve_seconds=0.2,
                cross_check=CrossCheck("agreed", 0.01, 0.05, "dp"), baselines=base,
                memory_limit_bytes=16e9, assignment=(0, 3, 1),
                solver_stats={"nodes": 3, "least_memory": [1.0, 2.0], "bound": -math.inf})


def test_plan_json_round_trip_is_exact():
    plan = _plan()
    text = plan.to_json()
    json.loads(text)                         # strict JSON: no NaN/Infinity tokens
    assert "Infinity" not in text
    back = Plan.from_json(text)
    assert back == plan
    assert Plan.from_dict(plan.to_dict()) == plan
    feas = _plan("feasible", bound=-math.inf)
    assert Plan.from_json(feas.to_json()) == feas


def test_plan_save_load(tmp_path):
    plan = _plan()
    plan.save(tmp_path / "p.json")
    assert Plan.load(tmp_path / "p.json") == plan
    with pytest.raises(FormatError):
        Plan.load(tmp_path / "missing.json")
    with pytest.raises(FormatError):
        Plan.from_json('{"format": "something else"}')
    with pytest.raises(FormatError):
        Plan.from_json("not json")


def test_plan_str_names_every_layer_and_flags_unproved_status():
    plan = _plan()
    text = str(plan)
    for lc in plan.layers:
        assert lc.name in text
    assert "n=2 h=2" in text and "follows conv1" in text
    assert "agreed" in text and "OPTIMAL" in text
    assert "NOT proved" not in text
    assert "NOT proved optimal" in str(_plan("feasible", bound=0.005))
    assert plan.layer("fc").config == "c=4"
    with pytest.raises(KeyError):
        plan.layer("nope")
