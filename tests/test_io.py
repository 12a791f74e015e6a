"""The one I/O layer: every document read and written the same way."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from milp_parallel import clusters, models
from milp_parallel.errors import FormatError, InvalidProblemError
from milp_parallel.graph import LayerGraph
from milp_parallel.io import Fields, decode, encode, read_document, read_json, write_json
from milp_parallel.machine.topology import Topology
from milp_parallel.plan import Plan, solve
from milp_parallel.problem import Problem, load_problem

from fuzzing import EXAMPLE


@pytest.fixture(scope="module")
def documents():
    """One value of every document type, and how to load it."""
    plan = solve("lenet5", "optcnn", devices=2, solver="dp", cross_check=False)
    return [(Problem.from_iopddl(EXAMPLE), Problem.load),
            (models.get("lenet5"), LayerGraph.load),
            (clusters.get("abci", nodes=2), Topology.load),
            (plan, Plan.load)]


@pytest.mark.parametrize("name", ["x.json", "x.json.gz"])
def test_every_document_round_trips_plain_or_gzip(tmp_path, documents, name):
    for value, load in documents:
        path = tmp_path / f"{type(value).__name__}-{name}"
        value.save(path)
        raw = path.read_bytes()
        assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
        assert load(path) == value
        # the content decides, not the name: a gzip file without .gz and plain with .gz
        other = tmp_path / ("swapped.json" if name.endswith(".gz") else "swapped.json.gz")
        other.write_bytes(raw)
        assert load(other) == value


def test_non_finite_numbers_are_written_one_way(tmp_path):
    doc = {"a": [math.inf, -math.inf, math.nan, 1.5], "b": np.float64(math.inf)}
    write_json(tmp_path / "x.json", doc)
    text = (tmp_path / "x.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    back = decode(read_json(tmp_path / "x.json"))
    assert back["a"][:2] == [math.inf, -math.inf] and math.isnan(back["a"][2])
    assert encode(doc)["a"][:3] == ["inf", "-inf", "nan"]
    # the same spelling in a plan and a problem
    p = Problem([np.array([1.0, math.inf])], [], [])
    p.save(tmp_path / "p.json")
    assert '"inf"' in (tmp_path / "p.json").read_text()


def test_errors_name_the_file_and_the_field(tmp_path):
    f = tmp_path / "p.json"
    doc = Problem.from_iopddl(EXAMPLE).to_dict()
    doc["nodes"][3]["costs"][1] = "cheap"
    f.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"p\.json: nodes\[3\]\.costs\[1\] must be a number"):
        Problem.load(f)
    doc = Problem.from_iopddl(EXAMPLE).to_dict()
    doc["edges"][0]["u"] = 0.5
    f.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=r"edges\[0\]\.u must be an integer"):
        Problem.load(f)
    with pytest.raises(FormatError, match="missing.json: no such file"):
        Topology.load(tmp_path / "missing.json")
    with pytest.raises(FormatError, match="is a directory"):
        LayerGraph.load(tmp_path)
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(b'{"a": 1}')[:12])
    with pytest.raises(FormatError, match="truncated gzip"):
        Plan.load(tmp_path / "t.json.gz")
    (tmp_path / "big.json").write_text('{"a": ' + "9" * 5000 + "}")
    with pytest.raises(FormatError, match="big.json: a number is too long"):
        read_json(tmp_path / "big.json")
    with pytest.raises(FormatError, match="unsupported version 2"):
        read_document(None, "x", 1, data={"format": "x", "version": 2})


def test_problem_documents_are_all_or_nothing_per_field(tmp_path):
    p = Problem.from_iopddl(EXAMPLE)
    doc = p.to_dict()
    del doc["nodes"][0]["interval"]       # node 0 lacks it, the others have it
    with pytest.raises(FormatError, match=r"nodes\[1\] has 'interval' but nodes\[0\] has none"):
        Problem.from_dict(doc, source="d.json")
    doc = p.to_dict()
    del doc["nodes"][2]["memory"]
    with pytest.raises(FormatError, match=r"nodes\[2\] has no 'memory' but nodes\[0\] has"):
        Problem.from_dict(doc)
    doc = p.to_dict()
    for n in doc["nodes"]:
        del n["interval"]
    q = Problem.from_dict(doc)             # none have it: the all-live model, on purpose
    assert q.intervals is None and q.memory is not None
    # the example keeps its optimum 445 (with intervals), read back from our format
    back = Problem.from_dict(p.to_dict())
    assert back.evaluate([0, 0, 2, 1, 0]).cost == 445 and back.intervals is not None


def test_iopddl_reader_refuses_each_bad_shape(tmp_path):
    base = json.loads(EXAMPLE.read_text())
    cases = [
        (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [0]), "must have 2 entries"),
        (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [0, 1.0]),
         "must be an integer"),
        (lambda d: d["problem"]["nodes"]["costs"].__setitem__(0, 15),
         "must be a list of numbers"),
        (lambda d: d["problem"]["nodes"]["intervals"].__setitem__(0, [30]),
         "must have 2 entries"),
        (lambda d: d["problem"]["nodes"]["usages"][1].__setitem__(0, "25"),
         "must be a number"),
        (lambda d: d["problem"].__setitem__("usage_limit", -5), "must be >= 0"),
        (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [1, 1]), "self-loop"),
    ]
    for mutate, pattern in cases:
        doc = json.loads(json.dumps(base))
        mutate(doc)
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(doc))
        with pytest.raises((FormatError, InvalidProblemError), match=pattern) as info:
            Problem.from_iopddl(f)
        assert "bad.json" in str(info.value)
    f.write_text(json.dumps(base).replace("[15]", "[" + "1" * 400 + "]"))
    with pytest.raises(FormatError, match=r"bad.json: problem.nodes.costs\[0\]\[0\] is too "
                                          r"large a number"):
        load_problem(f)


def test_problem_constructor_refuses_what_numpy_would_mangle():
    with pytest.raises(InvalidProblemError, match="beyond the float range"):
        Problem([[10**400]], [], [])
    with pytest.raises(InvalidProblemError, match="expected an integer"):
        Problem([[1.0], [1.0]], [(0, 1.5)], [[[0.0]]])
    with pytest.raises(InvalidProblemError, match="expected a pair"):
        Problem([[1.0], [1.0]], ["01"], [[[0.0]]])
    with pytest.raises(InvalidProblemError, match="time point .* is out of range"):
        Problem([[1.0]], [], [], memory=[[1.0]], intervals=[(0, 10**30)])
    with pytest.raises(InvalidProblemError, match="integer time points"):
        Problem([[1.0]], [], [], memory=[[1.0]], intervals=[(0, 2.5)])


def test_fields_reject_bools_and_strings_as_numbers():
    f = Fields("x")
    with pytest.raises(FormatError, match="must be a number"):
        f.numbers([1, True], "a")
    with pytest.raises(FormatError, match="is NaN"):
        f.numbers([1.0, math.nan], "a")
    assert f.numbers([1, "inf"], "a").tolist() == [1.0, math.inf]
    with pytest.raises(FormatError, match="rows must be equal"):
        f.numbers([[1.0], [1.0, 2.0]], "t", ndim=2)
