"""The public API's options are checked in one place, with one message form
(:mod:`milp_parallel.validation`): config_options, fixed, forbid, rerank, cost_model,
batch_size / batch_per_device, zoo keywords, and the entry points that took paths or names."""

from __future__ import annotations

import pytest

import milp_parallel as mp
from milp_parallel.errors import (
    FormatError,
    InvalidOptionError,
    MilpParallelError,
    UnknownNameError,
    UnknownOptionError,
)

SMALL = dict(devices=4, solver="dp", cross_check=False, simulate=False)


def _solve(**kw):
    return mp.solve("lenet5", "optcnn", **{**SMALL, **kw})


@pytest.fixture(scope="module")
def plan():
    return mp.solve("lenet5", "optcnn", devices=4, solver="dp", cross_check=False)


# ---------------------------------------------------------------------- config_options
@pytest.mark.parametrize("opts, error, words", [
    ({"max_degree": {"C": 1}}, UnknownOptionError, ["max_degree", "'C'", "did you mean 'c'"]),
    ({"max_degree": {"q": 2}}, UnknownOptionError, ["max_degree", "'q'"]),
    ({"min_tile": {"H": 4}}, UnknownOptionError, ["min_tile", "did you mean 'h'"]),
    ({"max_degre": {"c": 1}}, UnknownOptionError, ["max_degre", "did you mean 'max_degree'"]),
    ({"power_of_two": "false"}, InvalidOptionError, ["power_of_two", "'false'"]),
    ({"power_of_two": 0}, InvalidOptionError, ["power_of_two"]),
    ({"require_all_devices": "yes"}, InvalidOptionError, ["require_all_devices"]),
    ({"max_degree": {"c": 0}}, InvalidOptionError, ["max_degree", "'c'", ">= 1"]),
    ({"max_degree": {"c": 2.5}}, InvalidOptionError, ["max_degree", "2.5"]),
    ({"max_degree": {"c": "2"}}, InvalidOptionError, ["max_degree"]),
    ({"max_degree": [1, 2]}, InvalidOptionError, ["max_degree", "mapping"]),
    ({"min_tile": {"h": -1}}, InvalidOptionError, ["min_tile"]),
    ({"max_devices": 0}, InvalidOptionError, ["max_devices"]),
    ("power_of_two", InvalidOptionError, ["config_options", "mapping"]),
    ({"max_degree": {"d": 2}}, InvalidOptionError, ["no layer of lenet5", "'d'"]),
])
def test_config_options_are_checked(opts, error, words):
    with pytest.raises(error) as info:
        _solve(config_options=opts)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_a_channel_cap_is_obeyed(plan):
    capped = _solve(config_options={"max_degree": {"c": 1}})
    assert all(lc.degrees.get("c", 1) == 1 for lc in capped.layers)


# ---------------------------------------------------------------------- fixed / forbid
@pytest.mark.parametrize("what", ["fixed", "forbid"])
@pytest.mark.parametrize("value, error, words", [
    ({"conv1": "n=4 n=2"}, InvalidOptionError, ["conv1", "twice"]),
    ({"conv1": "n=0"}, InvalidOptionError, ["conv1", "n=0"]),
    ({"conv1": "n=two"}, InvalidOptionError, ["conv1"]),
    ({"conv1": "q=2"}, InvalidOptionError, ["conv1", "no configuration"]),
    ({"conv1": "n=3"}, InvalidOptionError, ["conv1", "its configurations"]),
    ({"conv9": "n=4"}, UnknownNameError, ["conv9", "the nearest", "conv1"]),
    ({"conv1": 4}, InvalidOptionError, ["conv1", "label"]),
    ("conv1", InvalidOptionError, ["mapping"]),
])
def test_fixed_and_forbid_name_the_layer_and_the_configuration(what, value, error, words):
    if what == "forbid" and isinstance(value, dict):
        value = {k: [v] for k, v in value.items()}
    with pytest.raises(error) as info:
        _solve(**{what: value})
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_a_pinned_configuration_is_obeyed():
    p = _solve(fixed={"conv1": "n=2 c=2"})
    assert p.layer("conv1").degrees == {"n": 2, "c": 2}


# ---------------------------------------------------------------------- other options
@pytest.mark.parametrize("value", [0, -1, 10**9, 2.0, "4", True])
def test_rerank_is_a_bounded_whole_number(value):
    with pytest.raises(InvalidOptionError, match="rerank"):
        _solve(rerank=value, simulate=True)


@pytest.mark.parametrize("value", ["fast", 3, object()])
def test_cost_model_must_be_a_cost_model(value):
    with pytest.raises(InvalidOptionError, match="cost_model"):
        _solve(cost_model=value)


def test_batch_size_and_batch_per_device_are_exclusive_and_say_where_they_came_from():
    with pytest.raises(InvalidOptionError, match="not both"):
        _solve(batch_size=64, batch_per_device=16)
    per = _solve(batch_per_device=16)
    assert per.batch_size == 64 and per.batch_per_device == 16
    assert per.batch_origin == "batch_per_device"
    default = _solve()
    assert default.batch_origin == "default" and "default global batch" in str(default)
    assert _solve(batch_size=64).batch_origin == "batch_size"
    with pytest.raises(InvalidOptionError, match="batch_per_device"):
        _solve(batch_per_device=0)


def test_the_plan_states_its_dtype(plan):
    assert plan.dtype == "fp32" and "fp32" in str(plan).splitlines()[0]
    bf16 = mp.solve("lenet5", mp.clusters.get("selene", dtype="bf16"), **{**SMALL,
                                                                       "devices": None})
    assert bf16.dtype == "bf16"


@pytest.mark.parametrize("kw", [{"width": 2}, {"num_clases": 10}])
def test_zoo_keywords_are_typed(kw):
    with pytest.raises(UnknownOptionError, match=next(iter(kw))):
        mp.models.get("resnet50", **kw)


def test_names_suggest_the_nearest():
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        mp.models.get("resnt50")
    with pytest.raises(UnknownNameError, match="did you mean 'highs'"):
        mp.solvers.get_solver("hihgs")


# ---------------------------------------------------------------------- entry points
def test_plan_layer_names_the_nearest_layers(plan):
    with pytest.raises(UnknownNameError, match="conv1"):
        plan.layer("conv9")
    with pytest.raises(KeyError):               # still a KeyError for old callers
        plan.layer("nolayer")


def test_simulate_and_solve_problem_take_paths(plan, tmp_path):
    path = tmp_path / "p.json"
    plan.save(path)
    assert mp.simulate(str(path)).step_seconds > 0
    with pytest.raises(FormatError, match="missing.json"):
        mp.simulate(str(tmp_path / "missing.json"))
    r = mp.solve_problem("data/iopddl_example.json", "dp")
    assert r.status == "optimal"
    with pytest.raises(FormatError):
        mp.solve_problem(str(tmp_path / "none.json"), "dp")
    with pytest.raises(InvalidOptionError, match="Problem"):
        mp.solve_problem(42, "dp")


def test_a_saved_plan_with_a_typo_is_refused(plan, tmp_path):
    import json
    path = tmp_path / "p.json"
    plan.save(path)
    doc = json.loads(path.read_text())
    doc["step_second"] = doc.pop("step_seconds")
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="did you mean 'step_seconds'"):
        mp.Plan.load(path)


def test_every_error_here_is_one_of_ours():
    for bad in ({"config_options": {"x": 1}}, {"fixed": {"zz": "n=2"}}, {"rerank": -3}):
        with pytest.raises(MilpParallelError):
            _solve(**bad)


def test_time_limit_covers_the_cross_check(monkeypatch):
    # the cross-check gets what the solve left of time_limit, never a limit of its own
    import milp_parallel.plan.planner as plan_module
    seen = {}
    real = plan_module.run_cross_check

    def spy(problem, result, *, time_limit=None, **kw):
        seen["limit"] = time_limit
        return real(problem, result, time_limit=time_limit, **kw)

    monkeypatch.setattr(plan_module, "run_cross_check", spy)
    p = mp.solve("lenet5", "optcnn", devices=4, solver="highs", time_limit=30, simulate=False)
    assert 0 < seen["limit"] <= 30 - p.solve_seconds
    assert p.cross_check.outcome in ("agreed", "bounded", "not_run")
