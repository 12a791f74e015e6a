"""Sweeps: grid expansion, parallel runs in worker processes, resume after kills, Dask."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from milp_parallel.errors import FormatError, UnknownNameError
from milp_parallel.problem import Problem
from milp_parallel.sweep import (
    FAILED,
    TIMEOUT,
    SweepItem,
    expand_grid,
    load_problem_file,
    load_sweep,
    read_results,
    run_sweep,
)

import sweep_kinds  # noqa: F401 - registers the "sleep" item kind these tests run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "iopddl_example.json"


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


# ---------------------------------------------------------------------- expansion
def test_grid_is_the_cross_product_with_stable_distinct_ids(tmp_path):
    p = write(tmp_path, """
        name = "g"
        time_limit = 30
        [[grid]]
        models = ["lenet5", "alexnet"]
        clusters = ["optcnn"]
        devices = "1..8"
        memory_limits = ["none", "16GiB"]
        solvers = ["dp", "brute"]
        repeats = 2
        [[grid]]
        problem = "x.json"
        solvers = ["dp"]
    """)
    for folder in (tmp_path, tmp_path / ".."):  # problem files are checked at load
        (folder / "x.json").write_text("{}")
    s = load_sweep(p)
    assert s.name == "g"
    model_items = [i for i in s.items if i.kind == "model"]
    assert len(model_items) == 2 * 1 * 4 * 2 * 2 * 2
    assert len({i.id for i in s.items}) == len(s.items) == len(model_items) + 1
    assert {i.param("devices") for i in model_items} == {1, 2, 4, 8}
    assert {i.param("memory_limit") for i in model_items} == {"none", 16 * 2**30}
    assert all(i.param("time_limit") == 30.0 for i in s.items)
    assert all(i.kill_after and i.kill_after > 30 for i in s.items)
    # ids depend on the parameters only, not on the file's location or order
    again = load_sweep(write(tmp_path / "..", p.read_text(), name="other_name.toml"))
    assert sorted(i.id for i in again.items) == sorted(i.id for i in s.items)
    prob = [i for i in s.items if i.kind == "problem"][0]
    assert Path(prob.base_dir) == tmp_path.resolve()


def test_item_round_trips_through_dict():
    it = expand_grid({"problems": ["a.json"], "solvers": ["dp"], "time_limits": ["2min"]})[0]
    assert SweepItem.from_dict(json.loads(json.dumps(it.to_dict()))) == it
    assert it.param("time_limit") == 120.0


@pytest.mark.parametrize("grid,error,match", [
    ({"models": ["a"], "clusters": ["c"], "devices": [1], "colour": 3}, FormatError, "colour"),
    ({"models": ["a"], "devices": [1]}, FormatError, "clusters"),
    ({"solvers": ["dp"]}, FormatError, "exactly one"),
    ({"problems": ["a"], "models": ["b"]}, FormatError, "exactly one"),
    ({"problems": ["a"], "clusters": ["c"]}, FormatError, "model items"),
    ({"problems": ["a"], "solvers": ["gurobi"]}, UnknownNameError, "gurobi"),
    ({"problems": ["a"], "memory_limits": ["lots"]}, FormatError, "lots"),
    ({"models": ["a"], "clusters": ["c"], "devices": "8..1"}, FormatError, "8..1"),
    ({"problems": ["a"], "repeats": 0}, FormatError, "repeats"),
])
def test_bad_grids_name_the_offender(grid, error, match):
    with pytest.raises(error, match=match):
        expand_grid(grid)


def test_bad_files(tmp_path):
    with pytest.raises(FormatError, match="no such"):
        load_sweep(tmp_path / "missing.toml")
    with pytest.raises(FormatError, match="TOML"):
        load_sweep(write(tmp_path, "models = [1,"))
    with pytest.raises(FormatError, match="grid 2.*unknown key"):
        load_sweep(write(tmp_path, """
            [[grid]]
            sleeps = [0]
            [[grid]]
            sleeps = [0]
            bogus = 1
        """))


def test_problem_files_are_detected_by_content(tmp_path):
    iop = load_problem_file(EXAMPLE)
    ours = tmp_path / "p.json.gz"
    iop.save(ours)
    back = load_problem_file(ours)
    assert back.evaluate([0, 0, 2, 1, 0]).cost == iop.evaluate([0, 0, 2, 1, 0]).cost == 445
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(FormatError, match="neither"):
        load_problem_file(tmp_path / "x.json")


# ---------------------------------------------------------------------- running
def small_sweep(tmp_path):
    limited = tmp_path / "limited.json"
    Problem.from_iopddl(EXAMPLE).with_memory_limit(None).save(limited)
    return write(tmp_path, f"""
        name = "small"
        [[grid]]
        problems = ["{EXAMPLE}", "limited.json"]
        solvers = ["brute"]
        [[grid]]
        problems = ["limited.json"]
        solvers = ["dp"]
        [[grid]]
        sleeps = [0.1]
        exit_codes = ["none", 3]
    """)


def test_small_sweep_with_two_jobs_then_resume(tmp_path):
    sweep = load_sweep(small_sweep(tmp_path))
    out = tmp_path / "r.jsonl"
    seen = []
    summary = run_sweep(sweep, out, jobs=2, progress=False, on_result=seen.append)
    assert (summary.total, summary.done, summary.skipped, summary.failed) == (5, 5, 0, 1)
    res = read_results(out)
    assert set(res) == {i.id for i in sweep.items} == {r["id"] for r in seen}
    by = {(Path(r["params"].get("problem", "")).name, r["params"].get("solver"),
           r["params"].get("exit_code")): r for r in res.values()}
    assert by[("iopddl_example.json", "brute", None)]["objective"] == 445
    unlimited = by[("limited.json", "brute", None)]
    assert unlimited["status"] == "optimal"
    assert unlimited["objective"] <= 445
    assert by[("limited.json", "dp", None)]["objective"] == unlimited["objective"]
    assert unlimited["problem"] == {"n_nodes": 5, "n_edges": 5, "n_configs": 9,
                                    "n_edge_pairs": 14}
    crashed = by[("", None, 3)]
    assert crashed["status"] == FAILED and "exited with code 3" in crashed["error"]
    assert by[("", None, None)]["status"] == "optimal"
    for r in res.values():
        assert r["version"] and r["host"] and r["wall_seconds"] >= 0
    # re-running skips everything; retrying re-runs only the failed item
    n_lines = len(lines(out))
    assert run_sweep(sweep, out, jobs=2, progress=False).done == 0
    assert len(lines(out)) == n_lines
    again = run_sweep(sweep, out, jobs=2, progress=False, retry_failed=True)
    assert (again.done, again.skipped, again.failed) == (1, 4, 1)
    assert len(lines(out)) == n_lines + 1


def test_killed_worker_fails_only_its_item_and_is_retried(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    p = write(tmp_path, f"""
        [[grid]]
        sleeps = [0.2, 0.3, 20]
        pid_dir = "{pids}"
    """)
    sweep = load_sweep(p)
    victim = next(i for i in sweep.items if i.param("sleep") == 20)
    out = tmp_path / "r.jsonl"
    box = {}
    t = threading.Thread(target=lambda: box.update(s=run_sweep(sweep, out, jobs=3,
                                                               progress=False)))
    t.start()
    pidfile = pids / f"{victim.id}.pid"
    for _ in range(600):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    t.join(60)
    assert not t.is_alive()
    assert box["s"].failed == 1
    res = read_results(out)
    assert res[victim.id]["status"] == FAILED and "SIGKILL" in res[victim.id]["error"]
    assert all(r["status"] == "optimal" for k, r in res.items() if k != victim.id)
    # the retry runs the same item (same id) and supersedes the failed line
    (pids / f"{victim.id}.release").write_text("")
    retry = run_sweep(sweep, out, retry_failed=True, progress=False)
    assert (retry.done, retry.skipped, retry.failed) == (1, 2, 0)
    res = read_results(out)
    assert res[victim.id]["status"] == "optimal"
    assert len(lines(out)) == 4 and len(res) == 3


def test_killed_sweep_resumes_without_duplicates_or_torn_lines(tmp_path):
    p = write(tmp_path, """
        [[grid]]
        sleeps = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
    """)
    out = tmp_path / "r.jsonl"
    code = (f"import sweep_kinds; from milp_parallel.sweep import load_sweep, run_sweep; "
            f"run_sweep(load_sweep({str(p)!r}), {str(out)!r}, jobs=1, progress=False)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    for _ in range(1200):
        if out.exists() and len(out.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = lines(out)
    assert 2 <= len(before) < 6
    # simulate a torn write as well: the next run must start on a fresh line
    with open(out, "a") as f:
        f.write('{"id": "torn", "sta')
    summary = run_sweep(load_sweep(p), out, jobs=2, progress=False)
    assert summary.skipped == len({r["id"] for r in before})
    raw = out.read_text().splitlines()
    parsed = []
    for line in raw:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            assert line.startswith('{"id": "torn"')
    ids = [r["id"] for r in parsed]
    assert len(ids) == len(set(ids)) == 6
    assert set(read_results(out)) == {i.id for i in load_sweep(p).items}


def test_hard_limit_kills_the_item(tmp_path):
    p = write(tmp_path, """
        kill_after = 1.5
        [[grid]]
        sleeps = [30]
    """)
    out = tmp_path / "r.jsonl"
    t0 = time.perf_counter()
    s = run_sweep(load_sweep(p), out, jobs=1, progress=False)
    assert s.failed == 1
    (rec,) = read_results(out).values()
    assert rec["status"] == TIMEOUT and "1.5s" in rec["error"]
    assert time.perf_counter() - t0 < 29  # the item was killed, not waited for


def test_dask_cluster_gives_the_same_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    sweep = load_sweep(small_sweep(tmp_path))
    local_out, dask_out = tmp_path / "local.jsonl", tmp_path / "dask.jsonl"
    run_sweep(sweep, local_out, jobs=2, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            s = run_sweep(sweep, dask_out, scheduler=client, progress=False)
    assert s.done == 5
    a, b = read_results(local_out), read_results(dask_out)
    assert set(a) == set(b)
    for k in a:
        assert (a[k]["status"], a[k]["objective"]) == (b[k]["status"], b[k]["objective"])


def test_shipped_sweep_files_parse():
    quick = load_sweep(ROOT / "sweeps" / "quick.toml")
    assert {i.param("solver") for i in quick.items} >= {"dp", "highs", "cpsat", "cbc", "brute"}
    problems = [i for i in quick.items if i.kind == "problem"]
    assert problems and all((Path(i.base_dir) / i.param("problem")).exists() for i in problems)
    paper = load_sweep(ROOT / "sweeps" / "paper.toml")
    assert {i.param("model") for i in paper.items} == {"alexnet", "vgg16", "inception_v3"}
    assert {i.param("devices") for i in paper.items} == {1, 2, 4, 8, 16}
    assert {i.param("cluster") for i in paper.items} == {"optcnn"}
    assert {i.param("solver") for i in paper.items} == {"dp", "highs", "cpsat", "cbc"}
