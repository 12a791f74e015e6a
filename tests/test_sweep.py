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


# ---------------------------------------------------------------------- checked at load
def test_a_typo_names_the_nearest_key(tmp_path):
    with pytest.raises(FormatError, match=r"grid 1: unknown key 'clustrs'; did you mean "
                                          r"'clusters'\?"):
        load_sweep(write(tmp_path, '[[grid]]\nmodels = ["lenet5"]\nclustrs = ["optcnn"]\n'))
    with pytest.raises(FormatError, match=r"unknown top-level key 'time_limt'; did you mean "
                                          r"'time_limit'\?"):
        load_sweep(write(tmp_path, 'time_limt = 5\n[[grid]]\nproblems = ["a.json"]\n'))
    with pytest.raises(UnknownNameError, match=r"'hihgs'; did you mean 'highs'\?"):
        expand_grid({"problems": ["a.json"], "solvers": ["hihgs"]})


def test_every_bad_item_is_listed_at_load_before_anything_runs(tmp_path):
    (tmp_path / "ok.json").write_text("{}")
    (tmp_path / "text.json").write_text("hello")
    p = write(tmp_path, """
        [[grid]]
        models = ["lenet5", "lenet", "nosuchnet"]
        clusters = ["optcnn", "optcn"]
        devices = "1..2"
        solvers = ["dp"]
        [[grid]]
        problems = ["ok.json", "missing.json", "text.json"]
        [[grid]]
        models = ["lenet5"]
        clusters = ["optcnn"]
        devices = [3]
        [[grid]]
        problems = ["ok.json"]
        solver = "hihgs"
    """)
    with pytest.raises(FormatError) as info:
        load_sweep(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: 7 problems, nothing was run: ")
    for words in ["grid 1: unknown model 'lenet'; did you mean 'lenet5'?",
                  "grid 1: unknown model 'nosuchnet'", "nosuchnet@optcnn x1 dp",
                  "grid 1: unknown cluster 'optcn'; did you mean 'optcnn'?",
                  "(6 items: lenet5@optcn x1 dp, lenet5@optcn x2 dp, lenet@optcn x1 dp, +3 more)",
                  "grid 2: ", "missing.json: no such problem file (1 item: missing.json auto)",
                  "text.json: not a problem file", "grid 3: cluster 'optcnn' has 3 devices",
                  "grid 4: unknown solver 'hihgs'"]:
        assert words in msg, words
    assert "ok.json" not in msg


def test_only_unknown_names_is_an_unknown_name_error(tmp_path):
    p = write(tmp_path, '[[grid]]\nmodels = ["lenet"]\nclusters = ["optcn"]\ndevices = [2]\n')
    with pytest.raises(UnknownNameError, match="2 problems.*'lenet'.*'optcn'"):
        load_sweep(p)


def test_a_cluster_file_and_a_model_file_are_read_at_load(tmp_path):
    from milp_parallel import clusters, models
    models.get("lenet5").save(tmp_path / "g.json")
    clusters.get("optcnn", nodes=1).save(tmp_path / "c.json")
    (tmp_path / "broken.json").write_text('{"format": "milp_parallel.graph"}')
    ok = write(tmp_path, '[[grid]]\nmodels = ["g.json"]\nclusters = ["c.json"]\n'
                         'devices = [1, 4]\n')
    assert len(load_sweep(ok).items) == 2
    with pytest.raises(FormatError, match=r"c.json' has 4 devices, not 8.*g.json@c.json x8"):
        load_sweep(write(tmp_path, '[[grid]]\nmodels = ["g.json"]\nclusters = ["c.json"]\n'
                                   'devices = [8]\n'))
    with pytest.raises(FormatError, match="broken.json"):
        load_sweep(write(tmp_path, '[[grid]]\nmodels = ["broken.json"]\nclusters = ["optcnn"]'
                                   '\ndevices = [2]\n'))
    with pytest.raises(FormatError, match="nope.json"):
        load_sweep(write(tmp_path, '[[grid]]\nmodels = ["lenet5"]\nclusters = ["nope.json"]'
                                   '\ndevices = [2]\n'))


def test_model_files_resolve_against_the_sweep_folder_when_they_run(tmp_path, monkeypatch):
    from milp_parallel import models
    (tmp_path / "sub").mkdir()
    models.get("lenet5").save(tmp_path / "sub" / "g.json")
    p = write(tmp_path / "sub", '[[grid]]\nmodels = ["g.json"]\nclusters = ["optcnn"]\n'
                                'devices = [2]\nsolvers = ["dp"]\ncross_check = false\n')
    monkeypatch.chdir(tmp_path)  # not the sweep's folder
    out = tmp_path / "r.jsonl"
    summary = run_sweep(load_sweep(p), out, jobs=1, progress=False)
    assert summary.failed == 0
    (rec,) = lines(out)
    assert rec["status"] == "optimal" and rec["plan"]["n_layers"] > 5


def test_json_sweep_files_hold_the_same_keys(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    toml = write(tmp_path, 'time_limit = 30\n[[grid]]\nproblems = ["x.json"]\n'
                           'solvers = ["dp", "brute"]\n')
    js = tmp_path / "s.json"
    js.write_text(json.dumps({"time_limit": 30, "grid": [{"problems": ["x.json"],
                                                           "solvers": ["dp", "brute"]}]}))
    assert [i.id for i in load_sweep(js).items] == [i.id for i in load_sweep(toml).items]
    js.write_text(json.dumps({"grid": [{"problems": ["x.json"], "solvrs": ["dp"]}]}))
    with pytest.raises(FormatError, match="'solvrs'; did you mean 'solvers'"):
        load_sweep(js)
    js.write_text("[1, 2]")
    with pytest.raises(FormatError, match="JSON object"):
        load_sweep(js)


@pytest.mark.parametrize("text,match", [
    ('[[grid]]\nproblems = [1979-05-27]\n', "'problems' must be a value"),
    ('[[grid]]\nproblems = [["a"]]\n', "'problems' must be a value"),
    ('[[grid]]\nmodels = ["lenet5"]\nclusters = ["optcnn"]\ndevices = [2.0]\n', "devices"),
    ('[[grid]]\nproblems = ["x.json"]\nrepeats = "many"\n', "repeats"),
    ('[[grid]]\nproblems = ["x.json"]\ntime_limit = 0\n', "time_limit"),
    ('[[grid]]\nproblems = ["x.json"]\nmemory_limit = "8GiX"\n', "8GiX"),
    ('kill_after = "soon"\n[[grid]]\nproblems = ["x.json"]\n', "kill_after"),
    ('name = 3\n[[grid]]\nproblems = ["x.json"]\n', "'name' must be a string"),
    ('grid = 3\n', "array of tables"),
    ('grid = [3]\n', "grid 1 is not a table"),
])
def test_wrong_types_are_refused_at_load(tmp_path, text, match):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(FormatError, match=match):
        load_sweep(write(tmp_path, text))


def test_check_items_on_items_built_by_hand(tmp_path):
    from milp_parallel.sweep import check_items
    good = expand_grid({"models": ["lenet5"], "clusters": ["optcnn"], "devices": [2]})
    check_items(good)
    bad = expand_grid({"problems": ["missing.json"]}, base_dir=tmp_path)
    with pytest.raises(FormatError, match="mine: .*missing.json: no such problem file"):
        check_items(good + bad, where="mine")
