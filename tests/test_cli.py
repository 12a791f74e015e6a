"""The milp-parallel command line, end to end through a subprocess."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from milp_parallel import oracle
from milp_parallel.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "iopddl_example.json"
PARADL = ROOT / "data" / "paradl"


def run(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "milp_parallel.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd or ROOT,
                          timeout=600)


def assert_usage_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("milp-parallel: error: ")
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in proc.stderr


def test_help_has_examples_and_every_command():
    proc = run("--help")
    assert proc.returncode == 0
    for cmd in ("solve", "problem", "oracle", "sweep", "report", "models", "clusters",
                "examples:", "exit codes"):
        assert cmd in proc.stdout
    sub = run("solve", "--help")
    assert sub.returncode == 0 and "--memory-limit" in sub.stdout and "examples:" in sub.stdout


def test_solve_prints_the_plan_and_json_parses(tmp_path):
    proc = run("solve", "lenet5", "--cluster", "optcnn", "--devices", "4", "--solver", "dp")
    assert proc.returncode == 0, proc.stderr
    assert "Plan for lenet5" in proc.stdout and "cross-check: agreed" in proc.stdout
    # HiGHS prints a banner on the C-level stdout: --json must still be JSON only
    proc = run("solve", "lenet5", "--cluster", "optcnn", "--devices", "2", "--memory-limit",
               "16GiB", "--solver", "highs", "--json", "--no-cross-check", "--plot",
               tmp_path / "plan.png")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model"] == "lenet5" and doc["devices"] == 2
    assert doc["memory_limit_bytes"] == 16 * 2**30
    assert doc["cross_check"]["verdict"].startswith("not run")
    assert (tmp_path / "plan.png").stat().st_size > 5000


def test_infeasible_budget_exits_1_with_one_line():
    proc = run("solve", "alexnet", "--cluster", "optcnn", "--devices", "2", "--memory-limit",
               "1MB")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("milp-parallel: error: infeasible")
    proc = run("problem", EXAMPLE, "--solver", "brute", "--memory-limit", "30")
    assert proc.returncode == 1 and "infeasible" in proc.stderr


@pytest.mark.parametrize("args,words", [
    (("solve", "nosuchnet", "--cluster", "optcnn"), ["nosuchnet", "alexnet"]),
    (("solve", "lenet5", "--cluster", "nosuchcluster"), ["nosuchcluster", "optcnn"]),
    (("solve", "lenet5", "--cluster", "optcnn", "--solver", "gurobi"), ["gurobi"]),
    (("solve", "lenet5", "--cluster", "optcnn", "--memory-limit", "lots"), ["lots"]),
    (("solve", "lenet5"), ["--cluster"]),
    (("problem", "no/such/file.json"), ["no such file"]),
    (("problem", ROOT / "pyproject.toml"), ["not valid JSON"]),
    (("oracle", "lenet5", "--cluster", "optcnn", "--strategy", "warp"), ["warp"]),
    (("oracle", "--paradl", "-net", PARADL / "ABCI.plat"), ["--paratype"]),
    (("sweep", "missing.toml", "--out", "x.jsonl"), ["missing.toml"]),
    (("frobnicate",), ["frobnicate"]),
])
def test_bad_usage_exits_2_with_one_line(args, words, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert_usage_error(subprocess.CompletedProcess(args, code, "", err), *words)


def test_bad_usage_through_the_console():
    assert_usage_error(run("solve", "nosuchnet", "--cluster", "optcnn"), "nosuchnet")


def test_debug_shows_the_traceback():
    proc = run("problem", "no/such/file.json", "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_problem_file_both_formats(tmp_path):
    proc = run("problem", EXAMPLE, "--solver", "brute", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "optimal" and doc["objective"] == 445
    assert doc["assignment"] == [0, 0, 2, 1, 0]
    from milp_parallel.problem import Problem
    ours = tmp_path / "p.json.gz"
    Problem.from_iopddl(EXAMPLE).save(ours)
    proc = run("problem", ours, "--solver", "highs")
    assert proc.returncode == 0, proc.stderr
    assert "optimal, objective 445" in proc.stdout


def test_models_and_clusters_list_sizes():
    proc = run("models", "--json")
    assert proc.returncode == 0, proc.stderr
    models = {m["name"]: m for m in json.loads(proc.stdout)}
    assert models["alexnet"]["params"] > 50_000_000 and models["lenet5"]["layers"] > 5
    proc = run("clusters", "--json")
    clusters = {c["name"]: c for c in json.loads(proc.stdout)}
    assert clusters["optcnn"]["devices"] == 16 and clusters["optcnn"]["memory_bytes"] > 1e9
    text = run("clusters").stdout
    assert "optcnn" in text and "GB" in text


@pytest.mark.parametrize("log,lc", [("ranking_resnet_16_data.log", None),
                                    ("ranking_vgg_df.log", "filter_vgg.lc")])
def test_oracle_paradl_arguments_reproduce_paradl_summary(log, lc):
    text = (PARADL / "logs" / log).read_text()
    cmd = oracle.parse_command(text)
    args = ["oracle", "--paradl", "-net", Path(cmd["net"]).name, "-plat", cmd["plat"],
            "-goal", "1", "--paratype", ",".join(cmd["strategies"]),
            "--cmaxB", cmd["max_batch"], "--cmaxp", cmd["max_devices"],
            "--cBon", cmd["batch_per_device"]]
    if lc:
        args += ["--lc", lc]
    proc = run(*args, cwd=PARADL)
    assert proc.returncode == 0, proc.stderr
    # our SUMMARY is ParaDL's, line for line
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if "=SUMMARY=" in line)
    ours = proc.stdout.strip().splitlines()
    assert ours == lines[start:start + len(ours)]
    assert oracle.parse_summary(proc.stdout) == oracle.parse_summary(text)


def test_oracle_projection_csv_json_plot(tmp_path):
    net = PARADL / "RESNET50_ImageNet_profall.net_sc"
    proc = run("oracle", net, "--cluster", "abci", "--strategy", "data,filter", "--devices",
               "4..64", "--csv")
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.strip().splitlines()
    assert rows[0].startswith("strategy,devices") and len(rows) == 1 + 2 * 5
    proc = run("oracle", net, "--cluster", "abci", "--strategy", "data", "--devices", "4,8",
               "--json", "--plot", tmp_path / "o.png")
    assert proc.returncode == 0, proc.stderr
    (doc,) = json.loads(proc.stdout)
    assert [r["devices"] for r in doc["rows"]] == [4, 8]
    assert (tmp_path / "o.png").stat().st_size > 5000
    text = run("oracle", "lenet5", "--cluster", "optcnn", "--devices", "1..4").stdout
    assert "data on optcnn" in text and "->" in text


def test_sweep_then_report(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text(textwrap.dedent(f"""
        [[grid]]
        problems = ["{EXAMPLE}"]
        solvers = ["brute", "highs"]
        [[grid]]
        models = ["lenet5"]
        clusters = ["optcnn"]
        devices = "1..2"
        solvers = ["dp"]
        cross_check = false
    """))
    out = tmp_path / "r.jsonl"
    proc = run("sweep", sweep, "--out", out, "--jobs", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "4 items: 4 ran, 0 of them failed" in proc.stdout
    assert "[4/4]" in proc.stderr  # plain progress lines when not on a terminal
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["status"] for r in recs) == ["optimal"] * 4
    model = [r for r in recs if r["kind"] == "model"]
    assert all(r["plan"]["throughput"] > 0 and "data" in r["plan"]["baselines"]
               for r in model)
    again = run("sweep", sweep, "--out", out, "--jobs", "2")
    assert again.returncode == 0 and "4 already done" in again.stdout
    listing = run("sweep", sweep, "--out", out, "--list").stdout.splitlines()
    assert len(listing) == 4 and all("optimal" in x for x in listing)
    rep = run("report", out, "--out", tmp_path / "rep")
    assert rep.returncode == 0, rep.stderr
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert {"summary.md", "summary.csv", "throughput.png", "solver_time.png"} <= names


def test_sweep_with_a_failing_item_exits_1(tmp_path):
    # a file that looks like a problem file at load but is not one: it fails when it runs
    (tmp_path / "broken.json").write_text('{"hello": 1}')
    sweep = tmp_path / "s.toml"
    sweep.write_text('[[grid]]\nproblems = ["broken.json"]\nsolvers = ["dp"]\n')
    proc = run("sweep", sweep, "--out", tmp_path / "r.jsonl", "--no-progress")
    assert proc.returncode == 1 and "1 of 1 items failed" in proc.stderr
    (rec,) = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert rec["status"] == "failed" and "broken.json" in rec["error"]


def test_sweep_with_a_missing_problem_file_stops_at_load(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[[grid]]\nproblems = ["missing.json"]\nsolvers = ["dp"]\n')
    proc = run("sweep", sweep, "--out", tmp_path / "r.jsonl", "--no-progress")
    assert_usage_error(proc, "missing.json: no such problem file")
    assert not (tmp_path / "r.jsonl").exists()


def test_report_of_a_saved_plan(tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["solve", "lenet5", "--cluster", "optcnn", "--devices", "2",
                 "--no-cross-check", "--save", str(plan), "--json"]) == 0
    assert main(["report", str(plan), "--out", str(tmp_path / "rep"), "--format", "svg"]) == 0
    assert (tmp_path / "rep" / "plan.svg").stat().st_size > 5000
    assert "Plan for lenet5" in (tmp_path / "rep" / "plan.txt").read_text()


def test_main_returns_codes_in_process(capsys):
    assert main(["clusters"]) == 0
    assert "optcnn" in capsys.readouterr().out
    assert main(["solve", "lenet5"]) == 2
    assert main(["--version"]) == 0
