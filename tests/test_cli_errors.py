"""Every user mistake on the command line: one line on stderr naming the input, exit 2.

Each case runs the real CLI (``milp_parallel.cli.main``) in this process, in a folder holding
files that are not what they claim (missing, a directory, binary, not JSON, the wrong
document, a results file with junk fields); a few run through the installed console script.
The line must start ``milp-parallel: error:``, name the bad input, and never say
"internal error" or show a traceback: that is kept for bugs.
"""

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from milp_parallel import errors
from milp_parallel.cli import EXIT_CODES, exit_code, main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "iopddl_example.json"
PARADL = ROOT / "data" / "paradl"
NET = PARADL / "ALEXNET_ImageNet.net"
PLAT = PARADL / "ABCI.plat"
PARADL_OK = f"-net {NET} -plat {PLAT} --paratype d --cmaxp 8 --cmaxB 256 --cBon 32"
SOLVE = "solve lenet5 --cluster optcnn --devices 2 --solver dp --no-cross-check"
ORACLE = "oracle lenet5 --cluster optcnn --devices 1..4"

RECORD = {"id": "a1", "kind": "model", "status": "optimal", "objective": 1.0,
          "params": {"model": "lenet5", "cluster": "optcnn", "devices": 2, "solver": "dp"},
          "plan": {"throughput": 10.0, "step_seconds": 0.1, "batch_size": 64,
                   "baselines": {"data": {"step_seconds": 0.2, "speedup": 2.0,
                                          "feasible": True}}}}


def _record(**changes) -> dict:
    """RECORD with dotted fields replaced (``params.devices="x"``); None deletes."""
    rec = json.loads(json.dumps(RECORD))
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        d = rec
        for k in path:
            d = d[k]
        if value is None:
            d.pop(last, None)
        else:
            d[last] = value
    return rec


#: Results files whose one record has a field of the wrong shape: (name, record, field).
ODD_RESULTS = [
    ("params_string", _record(params="junk"), "params"),
    ("params_list", _record(params=[1, 2]), "params"),
    ("devices_string", _record(params__devices="x"), "params.devices"),
    ("devices_zero", _record(params__devices=0), "params.devices"),
    ("devices_float", _record(params__devices=2.5), "params.devices"),
    ("devices_bool", _record(params__devices=True), "params.devices"),
    ("devices_nested", _record(params__devices={"n": 2}), "params.devices"),
    ("devices_list", _record(params__devices=[2, 4]), "params.devices"),
    ("devices_missing", _record(params__devices=None), "params.devices"),
    ("model_missing", _record(params__model=None), "params.model"),
    ("model_number", _record(params__model=5), "params.model"),
    ("cluster_list", _record(params__cluster=["optcnn"]), "params.cluster"),
    ("solver_number", _record(params__solver=3), "params.solver"),
    ("batch_string", _record(params__batch_size="64"), "params.batch_size"),
    ("param_nested", _record(params__extra={"a": [1]}), "params.extra"),
    ("status_number", _record(status=5), "status"),
    ("status_unknown", _record(status="done"), "status"),
    ("status_missing", _record(status=None), "status"),
    ("kind_number", _record(kind=3), "kind"),
    ("plan_list", _record(plan=[1, 2]), "plan"),
    ("plan_string", _record(plan="fast"), "plan"),
    ("baselines_list", _record(plan__baselines=[1]), "plan.baselines"),
    ("baseline_number", _record(plan__baselines={"data": 3}), "plan.baselines.data"),
    ("feasible_string", _record(plan__baselines={"data": {"feasible": "no"}}),
     "plan.baselines.data.feasible"),
    ("problem_string", _record(problem="big"), "problem"),
    ("problem_kind_missing_file", {"id": "p", "kind": "problem", "status": "optimal",
                                   "params": {"solver": "dp"}}, "params.problem"),
    ("record_fields_nested", _record(params={"model": {"name": "x"}, "cluster": "c",
                                             "devices": 2}), "params.model"),
]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    """A folder of files that are not what their names say."""
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "adir").mkdir()
    (d / "adir.json").mkdir()
    (d / "empty.json").write_text("")
    (d / "garbage.txt").write_text("garbage\n")
    (d / "notjson.json").write_text("{not json")
    (d / "list.json").write_text("[1, 2, 3]")
    (d / "wrongformat.json").write_text('{"format": "x", "version": 1}')
    (d / "binary.json").write_bytes(bytes(range(256)) * 4)
    (d / "nul.json").write_bytes(b'{"a": "\x00"}')
    (d / "fake.json.gz").write_bytes(b"not gzip at all")
    (d / "truncated.json.gz").write_bytes(gzip.compress(EXAMPLE.read_bytes())[:40])
    (d / "afile").write_text("a file, not a folder\n")
    (d / "typo.toml").write_text('[[grid]]\nmodels = ["lenet5"]\nclustrs = ["optcnn"]\n'
                                 'devices = [2]\n')
    (d / "top_typo.toml").write_text('time_limt = 5\n[[grid]]\nproblems = ["x.json"]\n')
    (d / "bad_model.toml").write_text('[[grid]]\nmodels = ["lenet"]\nclusters = ["optcnn"]\n'
                                      'devices = [2]\nsolvers = ["dp"]\n')
    (d / "bad_cluster.toml").write_text('[[grid]]\nmodels = ["lenet5"]\nclusters = ["optcn"]\n'
                                        'devices = [2]\n')
    (d / "bad_solver.toml").write_text('[[grid]]\nproblems = ["x.json"]\nsolvers = ["hihgs"]\n')
    (d / "bad_problem.toml").write_text('[[grid]]\nproblems = ["missing.json"]\n')
    (d / "bad_devices.toml").write_text('[[grid]]\nmodels = ["lenet5"]\nclusters = ["optcnn"]'
                                        '\ndevices = [3]\n')
    (d / "bad_memory.toml").write_text('[[grid]]\nproblems = ["x.json"]\n'
                                       'memory_limits = ["8GiX"]\n')
    (d / "bad_time.toml").write_text('[[grid]]\nproblems = ["x.json"]\ntime_limit = 0\n')
    (d / "bad_type.toml").write_text('[[grid]]\nproblems = ["x.json"]\nrepeats = "many"\n')
    (d / "bad_date.toml").write_text('[[grid]]\nproblems = [1979-05-27]\n')
    (d / "x.json").write_text("{}")
    (d / "bad.json.sweep.json").write_text('{"grid": [{"problems": ["x.json"], '
                                           '"solvrs": ["dp"]}]}')
    for name, rec, _ in ODD_RESULTS:
        (d / f"{name}.jsonl").write_text(json.dumps(rec) + "\n")
    (d / "notrecords.jsonl").write_text('{"no": "id"}\n[1]\n')
    (d / "good.jsonl").write_text(json.dumps(RECORD) + "\n")
    return d


# (argv, words the error line must hold); {d} is the folder of bad files
CASES = [
    # unknown names
    ("solve lenet --cluster optcnn", ["lenet", "lenet5"]),
    ("solve lenet5 --cluster optcn", ["optcn", "optcnn"]),
    ("solve lenet5 --cluster optcnn --solver hihgs", ["hihgs"]),
    ("solve lenet5 --cluster optcnn --solver ''", ["solver"]),
    ("problem {example} --solver nosuch", ["nosuch"]),
    ("oracle lenet --cluster optcnn", ["lenet"]),
    ("oracle lenet5 --cluster optcn", ["optcn"]),
    ("oracle lenet5 --cluster optcnn --strategy warp", ["warp"]),
    ("profile lenet --cluster pcie_box --out {d}/p.json", ["lenet"]),
    ("profile lenet5 --cluster pcie_bo --out {d}/p.json", ["pcie_bo"]),
    ("calibrate --out {d}/c.json --profile {d}/p.json --model nosuch", ["nosuch"]),
    ("frobnicate", ["frobnicate"]),
    # number formats and option values
    ("solve lenet5 --cluster optcnn --memory-limit 8GiX", ["8GiX"]),
    ("solve lenet5 --cluster optcnn --memory-limit lots", ["lots"]),
    ("solve lenet5 --cluster optcnn --memory-limit nan", ["nan"]),
    ("solve lenet5 --cluster optcnn --memory-limit ''", ["--memory-limit"]),
    ("solve lenet5 --cluster optcnn --memory-limit 8..GiB", ["8..GiB"]),
    ("solve lenet5 --cluster optcnn --memory-limit 0", ["--memory-limit"]),
    ("solve lenet5 --cluster optcnn --time-limit 0", ["time_limit"]),
    ("solve lenet5 --cluster optcnn --time-limit abc", ["abc"]),
    ("solve lenet5 --cluster optcnn --time-limit 5parsecs", ["5parsecs"]),
    ("solve lenet5 --cluster optcnn --time-limit nan", ["--time-limit"]),
    ("solve lenet5 --cluster optcnn --devices 0", ["--devices", "0"]),
    ("solve lenet5 --cluster optcnn --devices x", ["--devices", "x"]),
    ("solve lenet5 --cluster optcnn --devices 1e3", ["--devices", "1e3"]),
    ("solve lenet5 --cluster optcnn --devices 4.0", ["--devices", "4.0"]),
    ("solve lenet5 --cluster optcnn --devices 99999999999999999999", ["--devices"]),
    ("solve lenet5 --cluster optcnn --devices 3", ["3 devices"]),
    ("solve lenet5 --cluster optcnn --devices 1000000000", ["max_devices"]),
    ("solve lenet5 --cluster optcnn --batch-size 0", ["--batch-size"]),
    ("solve lenet5 --cluster optcnn --batch-size -3", ["--batch-size"]),
    ("problem {example} --memory-limit 8GiX", ["8GiX"]),
    ("problem {example} --memory-limit device", ["device"]),
    ("problem {example} --time-limit 0", ["time_limit"]),
    ("problem {example} --time-limit -5", ["-5"]),
    (f"{ORACLE} --batch-per-device 0", ["--batch-per-device"]),
    (f"{ORACLE} --batch-per-device x", ["--batch-per-device", "x"]),
    (f"{ORACLE} --batch-per-device inf", ["--batch-per-device", "inf"]),
    (f"{ORACLE} --batch-per-device nan", ["--batch-per-device", "nan"]),
    (f"{ORACLE} --dataset-size 0", ["--dataset-size"]),
    ("oracle lenet5 --cluster optcnn --devices 0", ["--devices"]),
    ("oracle lenet5 --cluster optcnn --devices 8..1", ["8..1"]),
    ("oracle lenet5 --cluster optcnn --devices abc", ["abc"]),
    ("oracle lenet5 --cluster optcnn --devices 4..1024:*1", ["4..1024:*1"]),
    ("oracle lenet5 --cluster optcnn --strategy ,", ["--strategy"]),
    (f"{ORACLE} --mode nope", ["nope"]),
    (f"{ORACLE} --scaling medium", ["medium"]),
    (f"oracle --paradl {PARADL_OK} -goal 2", ["-goal 2"]),
    (f"oracle --paradl {PARADL_OK} -goal x", ["-goal"]),
    (f"oracle --paradl -net {NET} -plat {PLAT} --paratype zz --cmaxp 8 --cmaxB 256 --cBon 32",
     ["zz"]),
    (f"oracle --paradl -net {NET} -plat {PLAT} --paratype d --cmaxp 0 --cmaxB 256 --cBon 32",
     ["--cmaxp"]),
    (f"oracle --paradl -net {NET} -plat {PLAT} --paratype d --cmaxp 8.5 --cmaxB 256 "
     "--cBon 32", ["--cmaxp", "8.5"]),
    (f"oracle --paradl -net {NET} -plat {PLAT} --paratype d --cmaxp 8 --cmaxB x --cBon 32",
     ["--cmaxB"]),
    (f"oracle --paradl -net {NET} -plat {PLAT} --paratype d --cmaxp 8 --cmaxB 256 --cBon -1",
     ["--cBon"]),
    ("oracle --paradl", ["-net"]),
    (f"oracle --paradl -net {NET}", ["--paratype"]),
    ("sweep {d}/typo.toml --out {d}/r.jsonl --jobs 0", ["--jobs"]),
    ("sweep {d}/typo.toml --out {d}/r.jsonl --jobs 1e3", ["--jobs"]),
    ("sweep {d}/x.sweep.toml --out {d}/r.jsonl --scheduler nothing", ["nothing"]),
    ("report {d}/good.jsonl --out {d}/rep --format gif", ["gif"]),
    ("calibrate --out {d}/c.json --max-bytes 10", ["--max-bytes"]),
    ("calibrate --out {d}/c.json --max-bytes 8GiX", ["8GiX"]),
    ("calibrate --out {d}/c.json --world-size 0", ["--world-size"]),
    ("calibrate --out {d}/c.json --backend mpi", ["mpi"]),
    ("calibrate --out {d}/c.json --model lenet5", ["--profile"]),
    ("profile lenet5 --cluster pcie_box --out {d}/p.json --devices 0", ["--devices"]),
    # layers and configurations
    (f"{SOLVE} --fix nolayer=n=2", ["nolayer"]),
    (f"{SOLVE} --fix conv1=z=3", ["z=3"]),
    (f"{SOLVE} --fix conv1", ["conv1"]),
    (f"{SOLVE} --fix =x", ["=x"]),
    (f"{SOLVE} --fix 'conv1=n=4 n=2'", ["n=4 n=2"]),
    (f"{SOLVE} --fix conv1=n=2 --fix conv1=serial", ["conv1", "twice"]),
    (f"{SOLVE} --forbid nolayer=serial", ["nolayer"]),
    (f"{SOLVE} --forbid conv1=banana", ["banana"]),
    (f"{SOLVE} --explain nolayer=serial", ["nolayer"]),
    (f"{SOLVE} --explain conv1=banana", ["banana"]),
    # missing arguments and unknown options
    ("solve lenet5", ["--cluster"]),
    ("solve", ["MODEL"]),
    ("solve lenet5 --cluster optcnn --bogus", ["--bogus"]),
    ("oracle lenet5", ["--cluster"]),
    ("sweep {d}/x.sweep.toml", ["--out"]),
    ("report {d}/good.jsonl", ["--out"]),
    ("models --bogus", ["--bogus"]),
    ("clusters extra", ["extra"]),
    ("calibrate", ["--out"]),
    # a command that left the package: what to run instead
    ("reproduce --out {d}/afile/x", ["reproduce", "python -m benchmarks.reproduce"]),
]

#: Every reader of a user's file, with the files that are not documents of its kind.
FILE_COMMANDS = [
    ("solve {f} --cluster optcnn", "model"),
    ("solve lenet5 --cluster {f}", "cluster"),
    ("solve lenet5 --cluster optcnn --profile {f}", "profile"),
    ("problem {f}", "problem"),
    ("oracle {f} --cluster abci --devices 4", "oracle table"),
    (f"oracle --paradl -net {{f}} -plat {PLAT} --paratype d --cmaxp 8 --cmaxB 256 --cBon 32",
     "paradl net"),
    (f"oracle --paradl -net {NET} -plat {{f}} --paratype d --cmaxp 8 --cmaxB 256 --cBon 32",
     "paradl plat"),
    (f"oracle --paradl {PARADL_OK} --lc {{f}}", "paradl mask"),
    ("sweep {f} --out {d}/r.jsonl", "sweep"),
    ("sweep {f} --list", "sweep list"),
    ("report {f} --out {d}/rep --no-plots", "report"),
]
BAD_FILES = ["missing.json", "adir.json", "empty.json", "notjson.json", "list.json",
             "wrongformat.json", "binary.json", "nul.json", "fake.json.gz",
             "truncated.json.gz", "garbage.txt"]

#: Output paths that cannot be written: (argv, words).
OUTPUTS = [
    (f"{SOLVE} --save {{d}}/adir", ["adir", "directory"]),
    (f"{SOLVE} --save {{d}}/nofolder/p.json", ["nofolder"]),
    (f"{SOLVE} --save {{d}}/afile/p.json", ["afile"]),
    (f"{SOLVE} --save ''", ["--save"]),
    (f"{SOLVE} --plot {{d}}/afile/p.png", ["afile"]),
    (f"{SOLVE} --plot {{d}}/p.gif", ["gif"]),
    (f"{SOLVE} --plot {{d}}/adir.json", ["adir.json"]),
    (f"{ORACLE} --plot {{d}}/afile/x.png", ["afile"]),
    (f"{ORACLE} --plot {{d}}/x.bmp", ["bmp"]),
    (f"oracle --paradl {PARADL_OK} --plot {{d}}/afile/x.png", ["afile"]),
    ("profile lenet5 --cluster pcie_box --out {d}/adir", ["adir"]),
    ("profile lenet5 --cluster pcie_box --out {d}/afile/p.json", ["afile"]),
    ("calibrate --out {d}/adir", ["adir"]),
    ("calibrate --out {d}/afile/c.json", ["afile"]),
    ("calibrate --out {d}/c.json --profile {d}/adir", ["adir"]),
    ("sweep {d}/x.sweep.toml --out {d}/afile/r.jsonl", ["afile"]),
    ("sweep {d}/x.sweep.toml --out {d}/adir", ["adir"]),
    ("sweep {d}/x.sweep.toml --out {d}/binary.json", ["binary.json"]),
    ("report {d}/good.jsonl --out {d}/afile --no-plots", ["afile"]),
    ("report {d}/good.jsonl --out {d}/afile/sub --no-plots", ["afile"]),
]

#: Sweep files with a mistake found at load: (file, words).
SWEEPS = [
    ("typo.toml", ["clustrs", "did you mean"]),
    ("top_typo.toml", ["time_limt", "time_limit"]),
    ("bad_model.toml", ["lenet", "lenet5"]),
    ("bad_cluster.toml", ["optcn", "optcnn"]),
    ("bad_solver.toml", ["hihgs"]),
    ("bad_problem.toml", ["missing.json"]),
    ("bad_devices.toml", ["3 devices"]),
    ("bad_memory.toml", ["8GiX"]),
    ("bad_time.toml", ["time_limit"]),
    ("bad_type.toml", ["repeats"]),
    ("bad_date.toml", ["problems"]),
    ("bad.json.sweep.json", ["solvrs", "solvers"]),
]


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, words) -> str:
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("milp-parallel: error: "), line
    assert "internal error" not in line and "Traceback" not in err, line
    for w in words:
        assert w in line, (w, line)
    return line


def argv_of(template: str, d: Path, **kw) -> list[str]:
    return shlex.split(template.format(d=d, example=EXAMPLE, **kw))


@pytest.fixture
def in_bad_folder(bad_files, monkeypatch):
    monkeypatch.chdir(bad_files)
    (bad_files / "x.sweep.toml").write_text('[[grid]]\nproblems = ["x.json"]\n')
    yield bad_files
    for leftover in ("r.jsonl", "rep", "p.json", "c.json"):
        p = bad_files / leftover
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


@pytest.mark.parametrize("template,words", CASES, ids=[c[0][:60] for c in CASES])
def test_bad_usage_is_one_line_exit_2(template, words, in_bad_folder, capsys):
    code, _, err = run_main(argv_of(template, in_bad_folder), capsys)
    assert_one_line(code, err, words)


@pytest.mark.parametrize("bad", BAD_FILES)
@pytest.mark.parametrize("template,reader", FILE_COMMANDS, ids=[c[1] for c in FILE_COMMANDS])
def test_bad_files_are_one_line_exit_2_naming_the_file(template, reader, bad, in_bad_folder,
                                                       capsys):
    if (reader, bad) == ("report", "empty.json"):
        pytest.skip("an empty results file holds no results yet: an empty report")
    path = in_bad_folder / bad
    code, _, err = run_main(argv_of(template, in_bad_folder, f=path), capsys)
    assert_one_line(code, err, [bad])


@pytest.mark.parametrize("template,words", OUTPUTS, ids=[c[0][:60] for c in OUTPUTS])
def test_unwritable_outputs_are_one_line_exit_2(template, words, in_bad_folder, capsys):
    code, _, err = run_main(argv_of(template, in_bad_folder), capsys)
    assert_one_line(code, err, words)
    assert not (in_bad_folder / "afile").is_dir()


@pytest.mark.parametrize("name,words", SWEEPS, ids=[s[0] for s in SWEEPS])
def test_bad_sweep_files_stop_at_load(name, words, in_bad_folder, capsys):
    out = in_bad_folder / "r.jsonl"
    code, stdout, err = run_main(["sweep", str(in_bad_folder / name), "--out", str(out)],
                                 capsys)
    assert_one_line(code, err, [name, *words])
    assert not out.exists() and stdout == ""


@pytest.mark.parametrize("name,record,field", ODD_RESULTS, ids=[r[0] for r in ODD_RESULTS])
def test_report_of_odd_records_names_file_line_and_field(name, record, field, in_bad_folder,
                                                         capsys):
    code, _, err = run_main(["report", str(in_bad_folder / f"{name}.jsonl"), "--out",
                             str(in_bad_folder / "rep"), "--no-plots"], capsys)
    line = assert_one_line(code, err, [f"{name}.jsonl, line 1", field])
    assert re.search(rf"\b{re.escape(field)} (must|is)", line), line


@pytest.mark.parametrize("value", ["abc", [1, 2], {"a": 1}, True, "12 ms", 10**400])
def test_report_shows_a_measurement_that_is_not_a_number_blank(value, in_bad_folder, capsys):
    path = in_bad_folder / "junk_numbers.jsonl"
    rec = _record(objective=value, solve_seconds=value, plan__throughput=value,
                  plan__baselines={"data": {"speedup": value, "step_seconds": value}})
    path.write_text(json.dumps(rec) + "\n")
    code, out, err = run_main(["report", str(path), "--out", str(in_bad_folder / "rep"),
                               "--no-plots"], capsys)
    assert code == 0, err
    assert "internal error" not in err and "objective" in err  # the warning names the field
    summary = (in_bad_folder / "rep" / "summary.csv").read_text().splitlines()
    row = dict(zip(summary[0].split(","), summary[1].split(",")))
    assert row["objective"] == row["throughput"] == row["speedup_vs_data"] == ""


def test_every_package_error_has_an_exit_code():
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert any(c in EXIT_CODES for c in cls.__mro__), name
    failed_runs = (errors.InfeasibleError, errors.CrossCheckError, errors.SolverError,
                   errors.MissingDependencyError)
    for name in errors.__all__:
        cls = getattr(errors, name)
        want = 1 if issubclass(cls, failed_runs) and cls is not errors.SolverUnavailableError \
            else 2
        assert exit_code(cls("x")) == want, name
    assert exit_code(errors.MilpParallelError("x")) == 2


def test_a_bug_still_says_internal_error(monkeypatch, capsys):
    import milp_parallel.cli as cli

    def broken(args):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(cli, "_cmd_models", broken)
    code, _, err = run_main(["models"], capsys)
    assert code == 1 and "internal error: ZeroDivisionError: a bug" in err
    assert "please report it" in err


def test_the_readme_paradl_command_runs_from_the_repository_root(monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    (cmd,) = [line for line in text.splitlines()
              if line.startswith("milp-parallel oracle --paradl")]
    monkeypatch.chdir(ROOT)
    code, out, err = run_main(shlex.split(cmd)[1:], capsys)
    assert code == 0, err
    assert out.startswith("==================SUMMARY==================")


def test_the_help_paradl_example_runs_from_the_repository_root(monkeypatch, capsys):
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    example = help_text.split("milp-parallel oracle --paradl", 1)[1].split("\n  milp", 1)[0]
    argv = ["oracle", "--paradl"] + shlex.split(example.replace("\\\n", " "))
    monkeypatch.chdir(ROOT)
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert "SUMMARY" in out


def _console(*args, cwd):
    exe = Path(sys.executable).with_name("milp-parallel")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "milp_parallel.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize("args,words", [
    (("solve", "lenet5", "--cluster", "optcnn", "--memory-limit", "8GiX"), ["8GiX"]),
    (("report", "devices_string.jsonl", "--out", "rep"), ["line 1", "params.devices"]),
    (("sweep", "bad_model.toml", "--out", "r.jsonl"), ["lenet"]),
    (("problem", "binary.json"), ["binary.json"]),
])
def test_through_the_console_script(args, words, bad_files):
    proc = _console(*args, cwd=bad_files)
    assert_one_line(proc.returncode, proc.stderr, words)
    assert proc.stdout == ""


def test_a_torn_line_and_an_odd_record_still_give_one_line(in_bad_folder, capsys):
    path = in_bad_folder / "torn_and_odd.jsonl"
    path.write_text(json.dumps(_record(params__devices="x")) + '\n{"id": "torn')
    code, _, err = run_main(["report", str(path), "--out", str(in_bad_folder / "rep")], capsys)
    assert_one_line(code, err, ["torn_and_odd.jsonl, line 1", "params.devices"])
