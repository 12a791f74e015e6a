"""Fuzz suite: damaged documents for every reader, and bad arguments for the API and the CLI.

The contract is "a typed error or a valid result": every reader either returns a value or
raises a :class:`~milp_parallel.errors.MilpParallelError` (whose message names the file); the
command line exits 0, 1 or 2 with one ``milp-parallel: error:`` line, never an internal error.
Sized for CI (a few dozen examples per target); ``benchmarks/fuzz_readers.py`` runs the same
targets for as long as asked.
"""

from __future__ import annotations

import math
import shlex

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from milp_parallel import errors
from milp_parallel.cli import EXIT_CODES, exit_code

from fuzzing import EXAMPLE, PARADL, TARGETS, check_cli, cli_arguments, path_cases, run_target

FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_damaged_files_give_a_typed_error_or_a_valid_result(name):
    target = TARGETS[name]
    if name == "onnx":
        pytest.importorskip("onnx")

    @FUZZ
    @given(target.files())
    def check(case):
        content, suffix = case
        run_target(target, content, suffix)

    check()


@pytest.mark.parametrize("name", sorted(set(TARGETS) - {"onnx", "paradl_mask"}))
def test_paths_that_are_not_documents_are_format_errors(tmp_path, name):
    for path in path_cases(tmp_path):
        if name == "results" and path.name == "empty.json":
            assert TARGETS[name].read(path) == []    # no results yet
            continue
        with pytest.raises(errors.FormatError) as info:
            TARGETS[name].read(path)
        assert path.name in str(info.value)


# ---------------------------------------------------------------------- the API
JUNK = st.sampled_from([None, 0, -1, 3, 1.5, 10**400, math.nan, math.inf, "abc", "", True,
                        [], {}, "16GiB", "none", "device", "2min"])


@settings(max_examples=30, deadline=None, derandomize=True)
@given(devices=st.one_of(st.sampled_from([1, 2, 4]), JUNK), batch=JUNK, memory=JUNK,
       time_limit=JUNK)
@example(devices=4, batch=None, memory=None, time_limit=10**400)
@example(devices=4, batch=None, memory=10**400, time_limit=None)
@example(devices=10**400, batch=10**400, memory=None, time_limit=None)
def test_solve_arguments_give_a_typed_error_or_a_plan(devices, batch, memory, time_limit):
    from milp_parallel import solve
    try:
        plan = solve("lenet5", "optcnn", devices=devices, batch_size=batch,
                     memory_limit=memory, time_limit=time_limit, solver="dp",
                     cross_check=False)
    except errors.MilpParallelError:
        return
    assert plan.devices == (16 if devices is None else devices)   # optcnn: 16 GPUs
    assert plan.status in ("optimal", "feasible") and plan.step_seconds > 0


@settings(max_examples=40, deadline=None, derandomize=True)
@given(node_costs=st.one_of(st.lists(st.lists(JUNK, max_size=3), max_size=3), JUNK),
       edges=st.one_of(st.lists(st.lists(JUNK, max_size=3), max_size=2), JUNK),
       intervals=st.one_of(st.lists(st.lists(JUNK, max_size=3), max_size=3), JUNK))
def test_problem_constructor_gives_a_typed_error_or_a_problem(node_costs, edges, intervals):
    from milp_parallel.problem import Problem
    try:
        Problem(node_costs, edges, [[[0.0]]] * (len(edges) if isinstance(edges, list) else 0),
                memory=None if not isinstance(node_costs, list) else [[0.0]] * len(node_costs),
                intervals=intervals)
    except errors.MilpParallelError:
        pass


# ---------------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return [str(p) for p in path_cases(tmp_path_factory.mktemp("cli_paths"))] + [str(EXAMPLE)]


def test_cli_bad_arguments_exit_with_one_error_line(files):
    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(cli_arguments(files))
    def check(argv):
        check_cli(argv)

    check()


@pytest.mark.parametrize("argv, code", [
    ("solve lenet5 --cluster optcnn --devices 3 --solver dp --no-cross-check", 2),
    ("solve lenet5 --cluster optcnn --devices 1000000 --solver dp --no-cross-check", 2),
    ("solve lenet5 --cluster optcnn --devices 2 --time-limit 0", 2),
    ("solve lenet5 --cluster optcnn --devices 2 --memory-limit 1KiB --solver dp", 1),
    ("solve lenet5 --cluster optcnn --devices 2 --solver dp --no-cross-check "
     "--explain nolayer=serial", 2),
    ("problem {example} --memory-limit device", 2),
    ("problem {example} --solver dp --time-limit -5", 2),
    ("oracle lenet5 --cluster abci --batch-per-device -4", 2),
    ("oracle lenet5 --cluster abci --batch-per-device nan", 2),
    ("oracle --paradl -net {net} -plat {plat} --paratype d --cmaxp 0 --cmaxB 64 --cBon 32", 2),
    ("oracle --paradl -net {missing} -plat {plat} --paratype d --cmaxp 4 --cmaxB 64 "
     "--cBon 32", 2),
])
def test_cli_catalogue_exit_codes(argv, code, tmp_path):
    argv = shlex.split(argv.format(example=EXAMPLE, net=PARADL / "ALEXNET_ImageNet.net",
                                   plat=PARADL / "ABCI.plat", missing=tmp_path / "no.net"))
    assert check_cli(argv) == code


def test_every_error_type_has_an_exit_code_and_a_catalogue_entry():
    from fuzzing import ROOT
    catalogue = (ROOT / "docs" / "errors.md").read_text()
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert any(c in EXIT_CODES for c in cls.__mro__), name
        assert exit_code(cls("x")) in (1, 2)
        assert f"### `{name}`" in catalogue, name
