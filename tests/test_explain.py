"""Plans that take constraints (fixed / forbid) and explain themselves."""

from __future__ import annotations

import json

import pytest

from milp_parallel import Plan, solve
from milp_parallel.cli import main
from milp_parallel.errors import InvalidOptionError, UnknownNameError

KW = dict(devices=4, solver="dp", cross_check=False)


@pytest.fixture(scope="module")
def plan():
    return solve("alexnet", "optcnn", **KW)


def test_fixed_pins_and_forbid_bans_a_configuration(plan):
    layer = "features.0"
    other = "serial" if plan.layer(layer).config != "serial" else "n=4"
    pinned = solve("alexnet", "optcnn", fixed={layer: other}, **KW)
    assert pinned.layer(layer).config == other
    assert pinned.step_seconds >= plan.step_seconds * (1 - 1e-12)   # the optimum was free
    assert pinned.constraints == {"fixed": {layer: other}}
    banned = solve("alexnet", "optcnn", forbid={layer: [plan.layer(layer).config]}, **KW)
    assert banned.layer(layer).config != plan.layer(layer).config
    as_degrees = solve("alexnet", "optcnn", fixed={layer: {"n": 4}}, **KW)
    assert as_degrees.layer(layer).config == "n=4"
    # a merged follower (relu) pins its producer's node
    relu = solve("alexnet", "optcnn", fixed={"features.1": "n=4"}, **KW)
    assert relu.layer("features.0").config == relu.layer("features.1").config == "n=4"
    # saved and loaded with its constraints
    assert Plan.from_json(pinned.to_json()) == pinned


def test_constraints_name_what_is_wrong():
    with pytest.raises(UnknownNameError, match="no layer 'conv9'"):
        solve("alexnet", "optcnn", fixed={"conv9": "n=2"}, **KW)
    with pytest.raises(InvalidOptionError, match="has no configuration 'n=3'.*'serial'"):
        solve("alexnet", "optcnn", fixed={"features.0": "n=3"}, **KW)
    with pytest.raises(InvalidOptionError, match="cannot read configuration"):
        solve("alexnet", "optcnn", forbid={"features.0": "fast"}, **KW)
    with pytest.raises(InvalidOptionError, match="already pinned"):
        solve("alexnet", "optcnn", fixed={"features.0": "n=4", "features.1": "n=2"}, **KW)


def test_explain_splits_the_cost_of_another_choice(plan):
    layer = "classifier.4"                       # a fully connected layer
    e = plan.explain(layer, "serial")
    forced = e.plan
    assert e.feasible and e.config == "serial" and forced.layer(layer).config == "serial"
    assert e.original_config == plan.layer(layer).config
    assert e.delta_seconds == pytest.approx(forced.step_seconds - plan.step_seconds)
    assert e.delta_seconds == pytest.approx(e.delta_compute_seconds + e.delta_sync_seconds
                                            + e.delta_transfer_seconds, abs=1e-12)
    assert e.delta_seconds >= -1e-12 * plan.step_seconds          # the plan was optimal
    changed = {c.name for c in e.changes}
    assert changed == {lc.name for lc in plan.layers if lc.name != layer
                       and forced.layer(lc.name).config != lc.config}
    assert all(c.neighbour == (c.name in ("classifier.3", "classifier.5")) for c in e.changes)
    assert layer in str(e) and "ms" in str(e)
    same = plan.explain(layer, plan.layer(layer).config)
    assert same.delta_seconds == pytest.approx(0.0, abs=1e-15) and not same.changes
    with pytest.raises(UnknownNameError):
        plan.explain("nolayer", "serial")


def test_a_loaded_plan_explains_itself_from_zoo_names(plan, tmp_path):
    plan.save(tmp_path / "p.json")
    back = Plan.load(tmp_path / "p.json")
    e = back.explain("features.0", "serial")
    assert e.feasible and e.plan.layer("features.0").config == "serial"


def test_cli_fix_forbid_explain(capsys):
    code = main(["solve", "alexnet", "--cluster", "optcnn", "--devices", "4", "--solver", "dp",
                 "--no-cross-check", "--fix", "features.0=n=4", "--forbid",
                 "classifier.4=serial", "--explain", "features.3=serial", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["constraints"]["fixed"] == {"features.0": "n=4"}
    (e,) = doc["explanations"]
    assert e["layer"] == "features.3" and e["config"] == "serial"
    code = main(["solve", "alexnet", "--cluster", "optcnn", "--devices", "4", "--solver", "dp",
                 "--no-cross-check", "--explain", "features.3=serial"])
    assert code == 0 and "features.3: serial instead of" in capsys.readouterr().out
