"""Reports: plan and sweep plots, summary tables, oracle scaling plots."""

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

from milp_parallel.errors import FormatError
from milp_parallel.plan import Baseline, CrossCheck, LayerChoice, Plan
from milp_parallel.report import (
    load_records,
    plot_oracle_scaling,
    plot_plan,
    plot_sweep,
    summary_table,
    write_report,
)

plt = pytest.importorskip("matplotlib.pyplot")
np = pytest.importorskip("numpy")


def assert_real_image(path, min_bytes=5000):
    path = Path(path)
    assert path.exists() and path.stat().st_size > min_bytes
    if path.suffix == ".png":
        img = plt.imread(path)
        colours = np.unique(img.reshape(-1, img.shape[-1]), axis=0)
        assert len(colours) > 3
    else:
        assert b"<svg" in path.read_bytes()[:2000]


def make_plan():
    layers = []
    cfgs = [{"n": 4}, {"n": 2, "h": 2}, {"c": 4}, {}, {"n": 2, "c": 2}]
    for i, deg in enumerate(cfgs):
        label = " ".join(f"{k}={v}" for k, v in deg.items()) or "serial"
        layers.append(LayerChoice(f"layer{i}", "conv", label, deg,
                                  int(np.prod(list(deg.values()) or [1])), 1e-3 * (i + 1),
                                  2e-4, 1e-4 * i, 1e8))
    comp = sum(lc.compute_seconds for lc in layers)
    sync = sum(lc.sync_seconds for lc in layers)
    tr = sum(lc.transfer_seconds for lc in layers)
    step = comp + sync + tr
    base = {n: Baseline(n, step * f, comp * f, sync * f, tr, 2e9, n != "model", f)
            for n, f in (("data", 1.5), ("model", 2.0), ("owt", 1.2), ("best_uniform", 1.1))}
    return Plan("toy", "optcnn", 4, 64, tuple(layers), step, comp, sync, tr, 64 / step,
                (1e9,) * 4, 16e9, "dp", "optimal", step, step, 0.0, 0.01,
                CrossCheck("agreed", step, 0.02, "highs"), base)


def test_plan_plot_png_and_svg(tmp_path):
    plan = make_plan()
    assert_real_image(plot_plan(plan, tmp_path / "plan.png"))
    # the JSON form of the plan draws the same way; SVG on request
    svg = plot_plan(json.loads(plan.to_json()), tmp_path / "plan", fmt="svg")
    assert svg.suffix == ".svg"
    assert_real_image(svg)
    with pytest.raises(FormatError, match="jpeg"):
        plot_plan(plan, tmp_path / "plan.jpeg")


def model_record(model, devices, throughput, speedup, solver="dp", status="optimal"):
    step = 64 / throughput
    return {"id": f"{model}{devices}{solver}", "kind": "model", "status": status,
            "params": {"model": model, "cluster": "optcnn", "devices": devices,
                       "solver": solver, "memory_limit": None, "repeat": 0},
            "objective": step, "gap": 0.0, "solve_seconds": 0.01 * devices,
            "solver_used": solver, "problem": {"n_nodes": 10 * devices},
            "plan": {"step_seconds": step, "throughput": throughput, "batch_size": 64,
                     "cross_check": "agreed", "exact_seconds": 0.005 * devices,
                     "baselines": {"data": {"step_seconds": step * speedup,
                                            "speedup": speedup, "feasible": True},
                                   "owt": {"step_seconds": step * 1.1, "speedup": 1.1,
                                           "feasible": True}}}}


def records():
    recs = []
    for m in ("alexnet", "lenet5"):
        for d in (1, 2, 4, 8):
            recs.append(model_record(m, d, 100.0 * d ** 0.8, 1 + 0.1 * d))
            recs.append(model_record(m, d, 100.0 * d ** 0.8, 1 + 0.1 * d, solver="highs"))
    recs.append({"id": "bad", "kind": "model", "status": "failed",
                 "params": {"model": "alexnet", "cluster": "optcnn", "devices": 16,
                            "solver": "cbc"}, "error": "SolverError: boom | twice"})
    recs.append({"id": "p1", "kind": "problem", "status": "optimal", "objective": 445.0,
                 "solve_seconds": 0.3, "solver_used": "highs",
                 "params": {"problem": "/x/iopddl_example.json", "solver": "highs"},
                 "problem": {"n_nodes": 5, "n_edges": 5, "n_configs": 9, "n_edge_pairs": 14}})
    return recs


def test_sweep_plots(tmp_path):
    files = plot_sweep(records(), tmp_path)
    assert {f.name for f in files} == {"throughput.png", "speedup.png", "solver_time.png"}
    for f in files:
        assert_real_image(f)


def test_sweep_plots_skip_what_has_no_data(tmp_path):
    only_problems = [r for r in records() if r["kind"] == "problem"]
    assert [f.name for f in plot_sweep(only_problems, tmp_path)] == ["solver_time.png"]
    assert plot_sweep([], tmp_path) == []


def test_summary_lists_failures_and_every_row_in_csv():
    md, text = summary_table(records())
    assert md.startswith("18 runs: 17 answered, 1 failed.")
    assert "## Failures" in md and "`bad`" in md and "SolverError: boom / twice" in md
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 17
    assert len({len(line.split("|")) for line in table}) == 1  # a well-formed table
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 18
    assert {r["status"] for r in rows} == {"optimal", "failed"}
    p1 = next(r for r in rows if r["id"] == "p1")
    assert p1["what"] == "iopddl_example.json" and float(p1["objective"]) == 445


def test_write_report_from_results_file(tmp_path):
    res = tmp_path / "r.jsonl"
    recs = records()
    with open(res, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
        # a superseding line for the failure: readers take the last line per id
        f.write(json.dumps({**recs[-2], "status": "optimal", "error": None,
                            "plan": recs[0]["plan"], "objective": 1.0}) + "\n")
        f.write('{"id": "torn"')
    files = write_report(res, tmp_path / "out")
    names = {f.name for f in files}
    assert {"summary.md", "summary.csv", "throughput.png"} <= names
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "0 failed" in md
    assert len(load_records(res)) == 18
    with pytest.raises(FormatError, match="no such"):
        load_records(tmp_path / "missing.jsonl")


def test_oracle_scaling_plot(tmp_path):
    rows = [{"strategy": s, "devices": p, "compute_seconds": 1000 / p,
             "communication_seconds": 5 * math.log2(p + 1) * k, "feasible": p <= 64}
            for k, s in enumerate(("data", "filter"), start=1) for p in (4, 16, 64, 256)]
    assert_real_image(plot_oracle_scaling(rows, tmp_path / "o.png", title="ResNet-50"))
    with pytest.raises(FormatError):
        plot_oracle_scaling([], tmp_path / "none.png")


# ---------------------------------------------------------------------- odd records
def odd(**fields):
    rec = {"id": "m1", "kind": "model", "status": "optimal", "objective": 2.0,
           "params": {"model": "lenet5", "cluster": "optcnn", "devices": 4, "solver": "dp"},
           "plan": {"throughput": 100.0, "step_seconds": 0.5, "batch_size": 64,
                    "baselines": {"data": {"step_seconds": 1.0, "speedup": 2.0}}}}
    rec.update(fields)
    return rec


@pytest.mark.parametrize("fields,field", [
    ({"params": "junk"}, "params must be an object"),
    ({"params": {"model": "lenet5", "cluster": "optcnn", "devices": "4"}}, "params.devices"),
    ({"params": {"model": "lenet5", "cluster": "optcnn", "devices": -1}}, "params.devices"),
    ({"params": {"model": "lenet5", "cluster": "optcnn", "devices": [4]}}, "params.devices"),
    ({"params": {"model": "lenet5", "cluster": "optcnn"}}, "params.devices is missing"),
    ({"params": {"model": None, "cluster": "optcnn", "devices": 4}}, "params.model"),
    ({"params": {"model": "lenet5", "cluster": {"x": 1}, "devices": 4}}, "params.cluster"),
    ({"status": "great"}, "status must be one of"),
    ({"plan": [1]}, "plan must be an object"),
    ({"plan": {"baselines": {"data": "fast"}}}, "plan.baselines.data must be an object"),
    ({"problem": [5]}, "problem must be an object"),
])
def test_a_record_that_cannot_be_used_names_file_line_and_field(tmp_path, fields, field):
    res = tmp_path / "r.jsonl"
    res.write_text(json.dumps(odd(id="fine")) + "\n" + json.dumps(odd(**fields)) + "\n")
    with pytest.raises(FormatError, match=rf"r.jsonl, line 2: {re.escape(field)}"):
        load_records(res)
    with pytest.raises(FormatError, match=rf"record 1: {re.escape(field)}"):
        summary_table([odd(**fields)])


def test_measurements_that_are_not_numbers_render_blank(tmp_path, caplog):
    rec = odd(objective="fast", gap=[1], solve_seconds={"s": 1}, problem={"n_nodes": "many"},
              plan={"throughput": "x", "step_seconds": True, "batch_size": "64",
                    "cross_check": 5, "baselines": {"data": {"speedup": "2x"}}})
    good = odd(id="m2", params={"model": "lenet5", "cluster": "optcnn", "devices": 8},
               objective="inf")
    res = tmp_path / "r.jsonl"
    res.write_text(json.dumps(rec) + "\n" + json.dumps(good) + "\n")
    files = write_report(res, tmp_path / "out")
    assert {"summary.md", "summary.csv"} <= {f.name for f in files}
    assert "r.jsonl, line 1: not a number, shown blank: objective, gap" in caplog.text
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "summary.csv").read_text())))
    assert rows[0]["objective"] == rows[0]["throughput"] == rows[0]["speedup_vs_data"] == ""
    assert rows[0]["cross_check"] == "5" and rows[1]["objective"] == "inf"


def test_an_unwritable_report_folder_is_a_file_write_error(tmp_path):
    from milp_parallel.errors import FileWriteError
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileWriteError, match="afile is a file, not a folder"):
        write_report([odd()], tmp_path / "afile" / "out", plots=False)
    with pytest.raises(FileWriteError, match="afile"):
        plot_plan(make_plan(), tmp_path / "afile" / "p.png")


def test_an_empty_results_file_holds_no_results_yet(tmp_path):
    (tmp_path / "r.jsonl").write_text("")
    assert load_records(tmp_path / "r.jsonl") == []
