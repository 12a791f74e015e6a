"""The reproduction report: every section present, every number computed, bytes moved right."""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.reproduction import (
    OTHER_RESULTS,
    SECTION_TITLES,
    STRATEGIES,
    ReproduceConfig,
    _solve_killable,
    bytes_moved,
    load_published,
    reproduce,
)
from milp_parallel import clusters
from milp_parallel.costs import CostModel
from milp_parallel.errors import FormatError, MilpParallelError
from milp_parallel.graph import LayerGraph
from milp_parallel.problem import Problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    return reproduce(out, ReproduceConfig.tiny())


def test_report_has_every_section(tiny):
    md = Path(tiny["report"]).read_text(encoding="utf-8")
    for title in SECTION_TITLES:
        assert title in md
    assert md == tiny["markdown"]
    # the oracle ran (it is in the source tree) and its table is included
    assert tiny["oracle"] is not None
    assert "Projected vs measured seconds per epoch" in md


def test_every_number_is_computed(tiny):
    md = tiny["markdown"]
    text = md.replace("not run in this mode", "")
    for bad in ("nan", "TODO", "XXX", "None", "not run:"):
        # whole words: "Narayanan" (the Megatron paper's author) is not a NaN
        assert not re.search(rf"\b{re.escape(bad)}(?!\w)", text), bad
    rows = tiny["strategies"]
    cfg = ReproduceConfig.tiny()
    assert {(r["model"], r["devices"], r["strategy"]) for r in rows} == {
        (m, d, s) for m in cfg.strategy_models for d in cfg.strategy_devices
        for s in STRATEGIES + ("best_uniform",)}
    for r in rows:
        assert math.isfinite(r["step_seconds"]) and r["step_seconds"] > 0
        assert r["throughput"] == pytest.approx(r["batch"] / r["step_seconds"])
        assert r["total_bytes"] == pytest.approx(r["transfer_bytes"] + r["sync_bytes"])
        if r["strategy"] != "best_uniform":
            # the table shows exactly this row's numbers
            assert (f"| {r['model']} | {r['devices']} | "
                    f"{'**layer-wise**' if r['strategy'] == 'layerwise' else r['strategy']} | "
                    f"{r['throughput']:.1f} | {1e3 * r['step_seconds']:.2f} |") in md
    # the optimum is never slower than a baseline that fits
    for r in rows:
        lw = next(x for x in rows if x["model"] == r["model"] and x["devices"] == r["devices"]
                  and x["strategy"] == "layerwise")
        if r["feasible"]:
            assert lw["step_seconds"] <= r["step_seconds"] * (1 + 1e-9)
    # one GPU: every strategy is the serial one
    for r in rows:
        if r["devices"] == 1:
            assert r["total_bytes"] == 0


def test_search_rows_are_honest(tiny):
    rows = tiny["search"]
    assert {r["budget"] for r in rows} == {"none", "binding"}
    for r in rows:
        assert r["status"] in ("optimal", "feasible", "unknown", "infeasible", "timeout"), r
        if r["status"] == "optimal":
            assert r["agrees"] is True
        assert f"| {r['model']} | {r['devices']} |" in tiny["markdown"]
    binding = [r for r in rows if r["budget"] == "binding"]
    free = {r["solver"]: r for r in rows if r["budget"] == "none"}
    for r in binding:
        # the budget binds: the budgeted optimum is strictly slower than the free one
        if r["status"] == "optimal" and free[r["solver"]]["status"] == "optimal":
            assert r["objective"] > free[r["solver"]]["objective"]


def test_plots_written_and_small(tiny):
    assert set(tiny["plots"]) == {"throughput", "search_time", "strategy"}
    for path in tiny["plots"].values():
        p = Path(path)
        assert p.exists() and 0 < p.stat().st_size < 300_000
        assert p.name in tiny["markdown"]
    data = json.loads((Path(tiny["plots"]["throughput"]).parent / "reproduce.json").read_text())
    assert len(data["strategies"]) == len(tiny["strategies"])


def test_published_data_have_sources():
    pub = load_published()
    assert "ICML 2018" in pub["optcnn"]["source"]
    assert pub["optcnn"]["gain_at_16_gpus"]["alexnet"] == 2.2
    assert all(r["source"] and r["seconds"] > 0 for r in pub["search"])
    assert any(r["method"] == "PaSE DP" and r["gpus"] == 64 for r in pub["search"])


def test_missing_published_data_is_a_format_error(tmp_path):
    with pytest.raises(FormatError, match="optcnn_published.json"):
        load_published(tmp_path)


def test_the_package_never_imports_the_benchmarks():
    # the reproduction lives in benchmarks/ only: no module of the installed package imports
    # benchmarks (or looks for the source checkout it came from)
    assert not (ROOT / "milp_parallel" / "reproduce.py").exists()
    assert not (ROOT / "milp_parallel" / "_checkout.py").exists()
    for path in (ROOT / "milp_parallel").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            assert not any(n.split(".")[0] == "benchmarks" for n in names), path


def test_bad_config():
    with pytest.raises(MilpParallelError, match="budget_fraction"):
        ReproduceConfig(budget_fraction=1.5)
    with pytest.raises(MilpParallelError, match="strategy_devices"):
        ReproduceConfig(strategy_devices=(0, 2))


# ---------------------------------------------------------------------- bytes moved
def _mlp(batch=4, width=8, out=2):
    g = LayerGraph()
    g.input("x", (batch, width))
    g.linear("fc", "x", out)
    return g


def test_bytes_moved_matches_cost_model_with_one_receiver():
    # x split in 2 by samples, fc serial on device 0: device 0 receives x's rows 2-3
    # forward; x is the graph input, so no gradient goes back: one receiver, one way.
    g = _mlp()
    topo = clusters.get("pcie_box", nodes=1, gpus_per_node=2)
    cm = CostModel(topo)
    t = float(cm.transfer_seconds(g.layer("x"), g.layer("fc"), 0, [[2, 1]], [[1, 1]])[0, 0])
    level = topo.levels[0]
    b = bytes_moved(g, {"x": {"n": 2}, "fc": {}})
    assert b["sync_bytes"] == 0
    assert b["transfer_bytes"] == 2 * 8 * 4
    assert (t - level.latency_s) * level.bandwidth_bytes_per_s == pytest.approx(
        b["transfer_bytes"])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
       st.sampled_from([1, 2]))
def test_bytes_moved_properties(n, c, h, w):
    g = LayerGraph()
    g.input("x", (4, 3, 8, 8))
    g.conv("conv", "x", 4, 3, padding=1)
    g.elementwise("relu", "conv")
    deg = {"x": {"n": n}, "conv": {"n": n, "c": c, "h": h, "w": w},
           "relu": {"n": n, "c": c, "h": h, "w": w}}
    b = bytes_moved(g, deg)
    params = g.layer("conv").params
    # replicas of the conv weights: the product of the degrees that do not split them
    assert b["sync_bytes"] == 2 * (n * h * w - 1) * params * 4
    # the element-wise layer follows the conv's layout: nothing moves on that edge
    no_relu = bytes_moved(g, {"x": deg["x"], "conv": deg["conv"]})   # relu serial
    if n * c * h * w > 1:
        assert no_relu["transfer_bytes"] > b["transfer_bytes"]
    only_relu = bytes_moved(g, {"x": {}, "conv": {}, "relu": {}})
    assert only_relu["total_bytes"] == 0
    # x split by samples only and the conv by samples only: layouts match, no transfer
    if c == h == w == 1:
        assert b["transfer_bytes"] == 0
    else:
        assert b["transfer_bytes"] > 0


def test_solve_killable_reports_a_kill_honestly():
    rng = np.random.default_rng(0)
    n, k = 400, 6
    p = Problem([rng.random(k) for _ in range(n)], [(i, i + 1) for i in range(n - 1)],
                [rng.random((k, k)) for _ in range(n - 1)])
    r = _solve_killable(p, "dp", {}, kill_after=0.0)
    if r["killed"]:   # the usual case: the child cannot finish before the parent polls
        assert r["status"] == "timeout" and math.isinf(r["gap"])
        assert "hard limit" in r["error"]
    r = _solve_killable(p, "dp", {}, kill_after=60.0)
    assert r["status"] == "optimal" and not r["killed"]
    assert r["objective"] == pytest.approx(p.evaluate(np.asarray(r["assignment"])).cost)


def test_the_report_points_only_to_committed_measurements(tiny):
    for path, _ in OTHER_RESULTS:
        assert (ROOT / path).is_file(), f"{path} is named in RESULTS.md but not committed"
        assert f"`{path}`" in tiny["markdown"]


def test_section_5_shows_every_row_of_the_committed_tables(tiny):
    md = tiny["markdown"]
    assert SECTION_TITLES[4] in md
    part = md.split(SECTION_TITLES[4], 1)[1].split(SECTION_TITLES[5], 1)[0]
    for path, _ in OTHER_RESULTS:
        if not path.endswith(".csv"):
            continue
        with open(ROOT / path, newline="") as f:
            rows = list(csv.DictReader(f))
        block = part.split(f"`{path}`", 1)[1].split("### 5.", 1)[0]
        table = [ln for ln in block.splitlines() if ln.startswith("| ")]
        assert len(table) == len(rows) + 1, path          # the header, then one per row
        machines = {r["machine"] for r in rows}
        assert all(m in block for m in machines), path
