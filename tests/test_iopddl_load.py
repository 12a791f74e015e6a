"""The fast IOPDDL reader (issue 25 item 6) gives exactly the tables of a plain reference
reader written here (one ``np.array`` per list, parallel edges summed into the first), on the
example and on instance G (which has parallel edges); its vectorized paths refuse what the
entry-by-entry checks refuse."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.instances import iopddl_path
from milp_parallel.errors import FormatError, InvalidProblemError
from milp_parallel.problem import Problem

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "iopddl_example.json"


def reference_tables(path: Path) -> dict:
    """The tables of an IOPDDL file, read the plain way (no fast path, no shared buffer)."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["problem"]
    nodes, edges = doc["nodes"], doc["edges"]
    costs = [np.array(c, dtype=float) for c in nodes["costs"]]
    merged: dict[tuple[int, int], np.ndarray] = {}
    for (u, v), c in zip(edges["nodes"], edges["costs"]):
        tab = np.array(c, dtype=float).reshape(len(costs[u]), len(costs[v]))
        if (u, v) in merged:
            merged[(u, v)] = merged[(u, v)] + tab
        elif (v, u) in merged:
            merged[(v, u)] = merged[(v, u)] + tab.T
        else:
            merged[(u, v)] = tab
    return {"node_costs": costs, "memory": [np.array(m, dtype=float) for m in nodes["usages"]],
            "intervals": np.array(nodes["intervals"], dtype=np.int64).reshape(-1, 2),
            "edges": np.array(list(merged), dtype=np.int64).reshape(-1, 2),
            "edge_costs": list(merged.values()), "limit": doc.get("usage_limit"),
            "n_listed_edges": len(edges["nodes"])}


def _paths():
    g = iopddl_path("G")
    return [EXAMPLE] + ([g] if g is not None else [])


@pytest.mark.parametrize("path", _paths(), ids=lambda p: p.name)
def test_fast_reader_gives_the_reference_tables(path):
    ref = reference_tables(Path(path))
    p = Problem.from_iopddl(path)
    assert p.n_nodes == len(ref["node_costs"])
    assert np.array_equal(p.edges, ref["edges"])
    assert np.array_equal(p.intervals, ref["intervals"])
    for mine, theirs in zip(p.node_costs, ref["node_costs"]):
        assert mine.dtype == np.float64 and np.array_equal(mine, theirs)
    for mine, theirs in zip(p.memory, ref["memory"]):
        assert mine.shape == (theirs.size, 1) and np.array_equal(mine[:, 0], theirs)
    assert len(p.edge_costs) == len(ref["edge_costs"])
    for mine, theirs in zip(p.edge_costs, ref["edge_costs"]):
        assert mine.shape == theirs.shape and np.array_equal(mine, theirs)
    if ref["limit"] is not None:
        assert p.memory_limit[0] == ref["limit"]
    # every table is read-only, even though they share one buffer
    for t in p.node_costs[:50] + p.edge_costs[:50] + p.memory[:50]:
        assert not t.flags.writeable
    # the same problem as the entry-by-entry path (the parsed dict without its text)
    raw = Path(path).read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    assert Problem.from_iopddl_dict(doc) == p


def test_g_has_parallel_edges_merged():
    g = iopddl_path("G")
    if g is None:
        pytest.skip("IOPDDL instance G is not available")
    ref = reference_tables(Path(g))
    assert ref["n_listed_edges"] > len(ref["edges"])       # the merge path is exercised
    assert Problem.from_iopddl(g).n_edges == len(ref["edges"])


def _example_doc() -> dict:
    return json.loads(EXAMPLE.read_text())


@pytest.mark.parametrize("mutate, pattern", [
    (lambda d: d["problem"]["nodes"]["costs"][1].__setitem__(0, True),
     r"problem\.nodes\.costs\[1\]\[0\]"),
    (lambda d: d["problem"]["edges"]["costs"][0].__setitem__(1, False),
     r"problem\.edges\.costs\[0\]\[1\]"),
    (lambda d: d["problem"].__setitem__("name", "fu") or
     d["problem"]["nodes"]["usages"][0].__setitem__(0, True),
     r"problem\.nodes\.usages\[0\]\[0\]"),
    (lambda d: d["problem"]["edges"]["costs"][0].__setitem__(0, "3"),
     r"problem\.edges\.costs\[0\]\[0\]"),
    (lambda d: d["problem"]["nodes"]["usages"][2].append(4),
     "node 2 has .* costs but .* usages"),
    (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [0, 0]), "self-loop"),
    (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [0, 99]), "out of range"),
    (lambda d: d["problem"]["nodes"]["intervals"].__setitem__(0, [0, 1.5]),
     r"problem\.nodes\.intervals\[0\]\[1\]"),
])
def test_fast_reader_refuses_what_the_checks_refuse(tmp_path, mutate, pattern):
    doc = _example_doc()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=pattern):
        Problem.from_iopddl(path)
    with pytest.raises(FormatError, match=pattern):
        Problem.from_iopddl_dict(doc)


def test_a_boolean_is_refused_even_when_the_text_is_not_given():
    doc = _example_doc()
    doc["problem"]["edges"]["costs"][0][0] = False
    with pytest.raises(FormatError, match=r"problem\.edges\.costs\[0\]\[0\]"):
        Problem.from_iopddl_dict(doc)


def test_shared_views_are_validated_not_trusted():
    # read-only views of one buffer are taken as they are, but the buffer is checked: a NaN
    # in a view is refused by name, as for any table
    buf = np.array([1.0, 2.0, np.nan, 4.0])
    buf.setflags(write=False)
    with pytest.raises(InvalidProblemError, match="node 1 costs: holds NaN"):
        Problem([buf[0:2], buf[2:4]], [], [])
    # a bad entry outside the views does not stop a good problem
    p = Problem([buf[0:1], buf[1:2]], [], [])
    assert [t.tolist() for t in p.node_costs] == [[1.0], [2.0]]
    # writable inputs are copied: changing them later does not change the problem
    mine = [np.array([1.0, 2.0]), np.array([3.0])]
    q = Problem(mine, np.array([[0, 1]]), [np.zeros((2, 1))])
    mine[0][0] = 9.0
    assert q.node_costs[0][0] == 1.0 and not q.node_costs[0].flags.writeable


def test_vectorized_edge_checks_name_the_bad_edge():
    costs = [np.zeros(2), np.zeros(2), np.zeros(2)]
    with pytest.raises(InvalidProblemError, match="edge 1 .* duplicates edge 0"):
        Problem(costs, np.array([[0, 1], [1, 0]]), [np.zeros((2, 2))] * 2)
    with pytest.raises(InvalidProblemError, match=r"edge 1 \(1, 2\): cost table has shape"):
        Problem(costs, np.array([[0, 1], [1, 2]]), [np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(InvalidProblemError, match="edge 0 .* negative value"):
        Problem(costs, np.array([[0, 1]]), [-np.ones((2, 2))])
