"""The one process-isolation runner, sweep item kinds, sweep values checked at load, and the
reproduce verb gone from the package (a usage error naming the benchmark)."""

from __future__ import annotations

import os
import textwrap

import pytest

from milp_parallel import isolation, sweep
from milp_parallel.cli import main
from milp_parallel.errors import FormatError, InvalidOptionError
from milp_parallel.isolation import FAILED, RETURNED, TIMEOUT, run_isolated


def crash(code):
    os._exit(code)


def hang(seconds):
    import time
    time.sleep(seconds)


def test_runner_statuses():
    r = run_isolated("math:factorial", 5)
    assert (r.status, r.value, r.ok) == (RETURNED, 120, True)
    r = run_isolated("math:factorial", -1)
    assert r.status == FAILED and r.error.startswith("ValueError")
    r = run_isolated(crash, 7)                      # a module of the tests, imported again
    assert r.status == FAILED and "exited with code 7" in r.error
    r = run_isolated(hang, 30, kill_after=0.5)
    assert r.status == TIMEOUT and r.seconds < 29
    with pytest.raises(InvalidOptionError, match="top level"):
        run_isolated(lambda: 1)


def test_one_status_vocabulary():
    assert sweep.FAILED == isolation.FAILED and sweep.TIMEOUT == isolation.TIMEOUT
    assert set(sweep.ITEM_STATUSES) == {"optimal", "feasible", "infeasible", "unknown",
                                        "failed", "timeout"}
    assert sweep.FAILED_STATUSES == ("failed", "timeout")


def _load(tmp_path, text):
    p = tmp_path / "s.toml"
    p.write_text(textwrap.dedent(text))
    return sweep.load_sweep(p)


@pytest.mark.parametrize("line, match", [
    ("time_limit = 0", "time_limit 0"),
    ("time_limit = -5", "time_limit -5"),
    ('time_limit = "abc"', "time_limit 'abc'"),
    ('memory_limits = ["lots"]', "lots"),
    ("memory_limits = [0]", "memory_limit"),
    ("batch_sizes = [0]", "batch_sizes"),
    ('cross_check = "yes"', "cross_check"),
    ("devices = [[1]]", "devices"),
])
def test_sweep_values_are_checked_when_the_file_is_loaded(tmp_path, line, match):
    with pytest.raises(FormatError, match=match):
        _load(tmp_path, f"""
            models = ["lenet5"]
            clusters = ["optcnn"]
            devices = [1]
            [[grid]]
            {line}
        """)


def test_memory_limits_in_sweeps_read_like_the_cli(tmp_path):
    from milp_parallel.problem import Problem
    Problem([[1.0, 2.0]], [], [], memory=[[3.0, 4.0]]).save(tmp_path / "x.json")
    s = _load(tmp_path, """
        [[grid]]
        models = ["lenet5"]
        clusters = ["optcnn"]
        devices = [1]
        memory_limits = ["device", "none", "1KiB"]
        [[grid]]
        problems = ["x.json"]
        memory_limits = ["none", "2KB"]
    """)
    got = sorted((i.kind, str(i.param("memory_limit"))) for i in s.items)
    assert got == [("model", "1024"), ("model", "None"), ("model", "none"),
                   ("problem", "2000"), ("problem", "none")]
    with pytest.raises(FormatError, match="a problem file has no device"):
        _load(tmp_path, 'problems = ["x.json"]\nmemory_limits = ["device"]\n')


def test_registered_kinds_run_in_their_own_process(tmp_path):
    import sweep_kinds
    assert "sleep" in sweep.item_kinds() and sweep_kinds.SLEEP.runner.endswith(
        "run_sleep_item")
    items = sweep.expand_grid({"sleeps": [0.01], "exit_codes": ["none", 4]})
    recs = {it.param("exit_code"): sweep.run_item_isolated(it) for it in items}
    assert recs[None]["status"] == "optimal" and recs[None]["objective"] == 0.01
    assert recs[4]["status"] == "failed" and "code 4" in recs[4]["error"]
    with pytest.raises(InvalidOptionError, match="already used"):
        sweep.register_item_kind("other", sweep_kinds.run_sleep_item, keys={"sleeps": "s"})


@pytest.mark.parametrize("argv", [["reproduce", "--quick"], ["-v", "reproduce", "--help"],
                                  ["reproduce", "--out", "x"]])
def test_reproduce_is_a_usage_error_naming_the_benchmark(argv, capsys):
    # the reproduction left the installed package: one line saying what to run instead
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("milp-parallel: error: ") and "source checkout" in err
    assert "python -m benchmarks.reproduce" in err
    with pytest.raises(ModuleNotFoundError):
        import milp_parallel.reproduce  # noqa: F401
