"""Strict readers (issue 22, item 3): every key of every level of every document is checked.

Each case writes a real file to ``tmp_path`` (a typo'd key, a wrong type, a missing key, a
bad unit, a malformed ONNX graph) and asserts the error type and that the message names the
file, the key path and, for typos, the nearest known key. The cases are generated from the
readers' own key tables (``OP_ATTRS``, ``_NODE_KEYS``, ...) and from good documents, so a key
added to a format is covered without a new test. Good files of the repository and of
``shared/reference`` must still load.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from milp_parallel import models
from milp_parallel.errors import (
    FileWriteError,
    FormatError,
    InvalidGraphError,
    InvalidOptionError,
    MilpParallelError,
)
from milp_parallel.graph import _RULES, OP_ATTRS, LayerGraph
from milp_parallel.io import Fields, read_json, suggest, write_json
from milp_parallel.measure.profile import (
    ProfileCoverage,
    ProfileEntry,
    ProfileTable,
    layer_signature,
    needed_tiles,
)
from milp_parallel.oracle import paradl_files as paradl
from milp_parallel.problem import Problem, load_problem

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MILP_PARALLEL_SHARED", "/work/shared")) / "reference"


# ---------------------------------------------------------------------- helpers
def typo(key: str) -> str:
    """A near miss of ``key`` that difflib maps back to it (drop or double the last letter)."""
    return key[:-1] if len(key) > 4 else key + key[-1]


def refused(exc_type, fn, *fragments):
    """``fn()`` raises ``exc_type`` whose message holds every fragment; returns the message."""
    with pytest.raises(exc_type) as info:
        fn()
    msg = str(info.value)
    for frag in fragments:
        assert str(frag) in msg, f"{frag!r} not in {msg!r}"
    return msg


def rename(obj: dict, key: str, new: str) -> None:
    obj[new] = obj.pop(key)


def write(tmp_path, doc, name="doc.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


#: A wrong JSON value for each attribute kind of graph.py, and a fragment of the message.
WRONG = {"int": "2", "ints": "2", "bool": 1, "str": 5, "number": "0.5", "letters": 5,
         "axis": [1], "shape": "2x3"}


def _every_op_graph() -> LayerGraph:
    """A small graph with a layer of every op, every attribute given."""
    g = LayerGraph("every_op")
    g.input("x", (2, 4, 8, 8))
    g.conv("conv", "x", 8, 3, stride=1, padding=1)
    g.pool("pool", "conv", 2)
    g.adaptive_pool("apool", "pool", 2)
    g.global_pool("gpool", "apool")
    g.batchnorm("bn", "conv")
    g.elementwise("relu", "bn")
    g.add("add", "relu", "conv")
    g.mul("mul", "add", "conv")
    g.concat("cat", ["mul", "conv"])
    g.dropout("drop", "cat", 0.1)
    g.flatten("flat", "gpool")
    g.linear("fc", "flat", 6)
    g.reshape("resh", "fc", (2, 3), dims="nsc")
    g.transpose("tr", "resh", (0, 2, 1))
    g.softmax("sm", "tr")
    g.layernorm("ln", "sm")
    g.rmsnorm("rms", "ln")
    g.slice("sl", "rms", "c", 0, 1)
    g.fanout("fan", "sl", linear_readers=True)
    g.matmul("mm", "tr", "resh")
    g.input("ids", (2, 5), dims="ns")
    g.embedding("emb", "ids", 11, 12)
    g.linear("qkv", "emb", 24)
    g.attention("att", "qkv", 2, kv_heads=1, head_dim=6)
    g.linear("logits", "emb", 11, tied_to="emb", bias=False)
    g.loss("loss", "logits", shift=1)
    return g


GRAPH = _every_op_graph()
GRAPH_DOC = GRAPH.to_dict()
LAYER_INDEX = {rec["name"]: j for j, rec in enumerate(GRAPH_DOC["layers"])}
ATTR_CASES = [(rec["name"], rec["op"], k) for rec in GRAPH_DOC["layers"] for k in rec["attrs"]]


def test_every_op_and_attribute_is_covered():
    assert {op for _, op, _ in ATTR_CASES} | {r["op"] for r in GRAPH_DOC["layers"]} == \
        set(_RULES)
    for op, names in OP_ATTRS.items():
        given = {k for _, o, k in ATTR_CASES if o == op}
        assert given == set(names), (op, set(names) - given)


# ---------------------------------------------------------------------- io.Fields.keys
def test_fields_keys():
    f = Fields("p.json")
    assert f.keys({"a": 1}, {"a", "b"}, "x", required=("a",)) == {"a": 1}
    refused(FormatError, lambda: f.keys({"paddin": 1}, {"padding", "stride"}, "layers[3]"),
            "p.json: layers[3].paddin is not a known key; did you mean 'padding'? known: "
            "padding, stride")
    refused(FormatError, lambda: f.keys({"zzz": 1}, ["a"], ""),
            "p.json: zzz is not a known key; known: a")
    refused(FormatError, lambda: f.keys({}, {"a"}, "n", required=("a",)), "p.json: n.a is "
                                                                         "missing")
    refused(FormatError, lambda: f.keys([], {"a"}, "n"), "p.json: n must be an object")
    refused(FormatError, lambda: f.keys({"x": 1}, (), "attrs"), "known: none")
    assert suggest("Stride", ["stride"]) == "; did you mean 'stride'?"


# ---------------------------------------------------------------------- graph
def test_graph_round_trip_of_every_op(tmp_path):
    GRAPH.save(tmp_path / "g.json.gz")
    assert LayerGraph.load(tmp_path / "g.json.gz") == GRAPH


@pytest.mark.parametrize("layer, op, key", ATTR_CASES, ids=[f"{o}.{k}" for _, o, k in ATTR_CASES])
def test_graph_attr_typo(tmp_path, layer, op, key):
    doc = copy.deepcopy(GRAPH_DOC)
    j = LAYER_INDEX[layer]
    rename(doc["layers"][j]["attrs"], key, typo(key))
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"layers[{j}].attrs.{typo(key)} is not a known key", f"did you mean {key!r}?")


@pytest.mark.parametrize("layer, op, key", ATTR_CASES, ids=[f"{o}.{k}" for _, o, k in ATTR_CASES])
def test_graph_attr_wrong_type(tmp_path, layer, op, key):
    doc = copy.deepcopy(GRAPH_DOC)
    j = LAYER_INDEX[layer]
    doc["layers"][j]["attrs"][key] = WRONG[_RULES[op].attrs[key]]
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"layers[{j}].attrs.{key}", "must be")


REQUIRED = [(rec["name"], rec["op"], k) for rec in GRAPH_DOC["layers"]
            for k in _RULES[rec["op"]].required]


@pytest.mark.parametrize("layer, op, key", REQUIRED, ids=[f"{o}.{k}" for _, o, k in REQUIRED])
def test_graph_attr_missing(tmp_path, layer, op, key):
    doc = copy.deepcopy(GRAPH_DOC)
    j = LAYER_INDEX[layer]
    del doc["layers"][j]["attrs"][key]
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"layers[{j}].attrs.{key} is missing")


def test_graph_attr_unknown_for_its_op(tmp_path):
    """An attribute of another op (padding on a linear) is refused too, naming the op."""
    doc = copy.deepcopy(GRAPH_DOC)
    j = LAYER_INDEX["fc"]
    doc["layers"][j]["attrs"]["padding"] = 1
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"layers[{j}].attrs.padding is not a known key", "a linear layer's attributes")
    doc["layers"][LAYER_INDEX["relu"]]["attrs"] = {"fn": "relu", "inplace": True}
    doc["layers"][j]["attrs"].pop("padding")
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), "attrs.inplace is not a known key")


@pytest.mark.parametrize("key", sorted({"name", "op", "inputs", "attrs", "output_shape"}))
def test_graph_layer_key_typo(tmp_path, key):
    doc = copy.deepcopy(GRAPH_DOC)
    rename(doc["layers"][1], key, typo(key))
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"layers[1].{typo(key)} is not a known key", f"did you mean {key!r}?")


@pytest.mark.parametrize("key", ["name", "layers"])
def test_graph_top_key_typo(tmp_path, key):
    doc = copy.deepcopy(GRAPH_DOC)
    rename(doc, key, typo(key))
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path),
            f"{typo(key)} is not a known key", f"did you mean {key!r}?")


@pytest.mark.parametrize("key, value, fragment", [
    ("name", 5, "layers[1].name must be a string"),
    ("op", 5, "layers[1].op must be a string"),
    ("op", "conv2d", "did you mean 'conv'?"),
    ("inputs", "x", "layers[1].inputs must be a list"),
    ("inputs", [1], "layers[1].inputs[0] must be a string"),
    ("attrs", [], "layers[1].attrs must be an object"),
    ("attrs", None, "layers[1].attrs must be an object"),
    ("output_shape", "2x8", "layers[1].output_shape must be a list"),
    ("output_shape", [2.5], "layers[1].output_shape[0] must be an integer"),
])
def test_graph_layer_wrong_type(tmp_path, key, value, fragment):
    doc = copy.deepcopy(GRAPH_DOC)
    doc["layers"][1][key] = value
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path), fragment)


@pytest.mark.parametrize("key", ["name", "op"])
def test_graph_layer_missing(tmp_path, key):
    doc = copy.deepcopy(GRAPH_DOC)
    del doc["layers"][1][key]
    path = write(tmp_path, doc, "g.json")
    refused(FormatError, lambda: LayerGraph.load(path), str(path), f"layers[1].{key} is missing")


def test_graph_top_wrong_types(tmp_path):
    for key, value, fragment in [("name", 5, "name must be a string"),
                                 ("layers", {}, "layers must be a list")]:
        doc = copy.deepcopy(GRAPH_DOC)
        doc[key] = value
        path = write(tmp_path, doc, "g.json")
        refused(FormatError, lambda: LayerGraph.load(path), str(path), fragment)


def test_conv_stride_defaults_to_one_and_pool_stride_to_the_kernel(tmp_path):
    doc = copy.deepcopy(GRAPH_DOC)
    for j in (LAYER_INDEX["conv"], LAYER_INDEX["pool"]):
        del doc["layers"][j]["attrs"]["stride"]
        del doc["layers"][j]["output_shape"]
    g = LayerGraph.load(write(tmp_path, doc, "g.json"))
    assert g.layer("conv").attrs["stride"] == (1, 1)      # torch.nn.Conv2d: stride=1
    assert g.layer("pool").attrs["stride"] == (2, 2)      # torch.nn.MaxPool2d: the kernel
    h = LayerGraph()
    h.input("x", (1, 3, 9, 9))
    h.add_layer("c", "conv", ("x",), out_channels=2, kernel=3, stride=None)
    assert h.layer("c").output_shape == (1, 2, 7, 7)


def test_builder_refuses_unknown_attributes():
    g = LayerGraph()
    g.input("x", (1, 3, 9, 9))
    refused(InvalidGraphError, lambda: g.add_layer("c", "conv", ("x",), out_channels=2,
                                                   kernel=3, paddin=1),
            "layer 'c' (conv): unknown attribute 'paddin'; did you mean 'padding'?")


# ---------------------------------------------------------------------- problem (ours)
def _problem_doc(intervals=False) -> dict:
    kw = ({"memory": [np.array([1.0, 2.0]), np.array([3.0])], "intervals": [(0, 2), (1, 3)]}
          if intervals else {"memory": [np.array([[1.0], [2.0]]), np.array([[3.0]])]})
    p = Problem([np.array([1.0, 2.0]), np.array([3.0])], [(0, 1)], [np.array([[1.0], [0.0]])],
                node_names=["a", "b"], config_labels=[["x", "y"], ["z"]], memory_limit=10.0,
                **kw)
    return p.to_dict()


PROBLEM_KEYS = [("", k) for k in _problem_doc() if k not in ("format", "version")] + \
    [("nodes[1]", k) for k in _problem_doc(True)["nodes"][1]] + \
    [("edges[0]", k) for k in _problem_doc()["edges"][0]]


def _at(doc, where):
    if not where:
        return doc
    head, idx = where[:-3], int(where[-2])
    return doc[head][idx]


@pytest.mark.parametrize("where, key", PROBLEM_KEYS)
def test_problem_key_typo(tmp_path, where, key):
    doc = _problem_doc(intervals=True)
    rename(_at(doc, where), key, typo(key))
    path = write(tmp_path, doc, "p.json")
    path_key = f"{where}.{typo(key)}" if where else typo(key)
    for load in (Problem.load, load_problem):
        refused(FormatError, lambda: load(path), str(path),
                f"{path_key} is not a known key", f"did you mean {key!r}?")


@pytest.mark.parametrize("where, key, value, fragment", [
    ("", "nodes", {}, "nodes must be a list"),
    ("", "edges", 3, "edges must be a list"),
    ("", "memory_limit", "lots", "memory_limit must be a number"),
    ("nodes[1]", "costs", "3", "nodes[1].costs must be a list of numbers"),
    ("nodes[1]", "costs", ["3"], "nodes[1].costs[0] must be a number"),
    ("nodes[1]", "name", 7, "nodes[1].name must be a string"),
    ("nodes[1]", "labels", "z", "nodes[1].labels must be a list"),
    ("nodes[1]", "labels", [1], "nodes[1].labels[0] must be a string"),
    ("nodes[1]", "memory", "3", "nodes[1].memory must be a list"),
    ("nodes[1]", "interval", [1.5, 3], "nodes[1].interval[0] must be an integer"),
    ("nodes[1]", "interval", 3, "nodes[1].interval must be a list"),
    ("edges[0]", "u", 0.0, "edges[0].u must be an integer"),
    ("edges[0]", "v", "1", "edges[0].v must be an integer"),
    ("edges[0]", "costs", [1, 0], "edges[0].costs[0] must be a list of numbers"),
])
def test_problem_wrong_type(tmp_path, where, key, value, fragment):
    doc = _problem_doc(intervals=True)
    _at(doc, where)[key] = value
    path = write(tmp_path, doc, "p.json")
    refused(FormatError, lambda: Problem.load(path), str(path), fragment)


@pytest.mark.parametrize("where, key", [("", "nodes"), ("", "edges"), ("nodes[0]", "costs"),
                                        ("edges[0]", "u"), ("edges[0]", "v"),
                                        ("edges[0]", "costs")])
def test_problem_missing(tmp_path, where, key):
    doc = _problem_doc()
    del _at(doc, where)[key]
    path = write(tmp_path, doc, "p.json")
    refused(FormatError, lambda: Problem.load(path), str(path),
            f"{where}.{key} is missing" if where else f"{key} is missing")


# ---------------------------------------------------------------------- IOPDDL
EXAMPLE = ROOT / "data" / "iopddl_example.json"
IOPDDL_DOC = json.loads(EXAMPLE.read_text())
IOPDDL_KEYS = [("", "problem")] + [("problem", k) for k in IOPDDL_DOC["problem"]] + \
    [(f"problem.{o}", k) for o in ("nodes", "edges") for k in IOPDDL_DOC["problem"][o]]


def _dotted(doc, where):
    for part in filter(None, where.split(".")):
        doc = doc[part]
    return doc


@pytest.mark.parametrize("where, key", IOPDDL_KEYS)
def test_iopddl_key_typo(tmp_path, where, key):
    doc = copy.deepcopy(IOPDDL_DOC)
    obj = _dotted(doc, where)
    if key == "problem":   # a document without 'problem' is not IOPDDL: add a stray key
        doc["problme"] = {}
        bad, good = "problme", "problem"
    else:
        obj[typo(key)] = obj[key]          # the real key stays: only the typo is refused
        bad, good = typo(key), key
    path = write(tmp_path, doc, "i.json")
    for load in (Problem.from_iopddl, load_problem):
        refused(FormatError, lambda: load(path), str(path),
                f"{where + '.' if where else ''}{bad} is not a known key",
                f"did you mean {good!r}?")


@pytest.mark.parametrize("where, key", [(w, k) for w, k in IOPDDL_KEYS
                                        if k not in ("problem", "name", "usage_limit")])
def test_iopddl_missing(tmp_path, where, key):
    doc = copy.deepcopy(IOPDDL_DOC)
    del _dotted(doc, where)[key]
    path = write(tmp_path, doc, "i.json")
    refused(FormatError, lambda: Problem.from_iopddl(path), str(path), f"{where}.{key} is missing")


@pytest.mark.parametrize("where, key, value, fragment", [
    ("problem", "name", 3, "problem.name must be a string"),
    ("problem", "usage_limit", "50", "problem.usage_limit must be a number"),
    ("problem", "nodes", [], "problem.nodes must be an object"),
    ("problem", "edges", "x", "problem.edges must be an object"),
    ("problem.nodes", "costs", {}, "problem.nodes.costs must be a list"),
    ("problem.nodes", "usages", 1, "problem.nodes.usages must be a list"),
    ("problem.nodes", "intervals", "x", "problem.nodes.intervals must be a list"),
    ("problem.edges", "nodes", {}, "problem.edges.nodes must be a list"),
    ("problem.edges", "costs", 2, "problem.edges.costs must be a list"),
])
def test_iopddl_wrong_type(tmp_path, where, key, value, fragment):
    doc = copy.deepcopy(IOPDDL_DOC)
    _dotted(doc, where)[key] = value
    path = write(tmp_path, doc, "i.json")
    refused(FormatError, lambda: Problem.from_iopddl(path), str(path), fragment)


# ---------------------------------------------------------------------- profile tables
def _lenet_table(**kw) -> ProfileTable:
    g = models.get("lenet5")
    # every entry has its update timed: the first entry is a convolution's
    return ProfileTable([ProfileEntry(L.op, layer_signature(L, t), t, "float32", "cpu", 1e-4,
                                      2e-5 if L.params else None)
                         for L, t in needed_tiles(g, 4)], meta={"graph": "lenet5"},
                        optimizer="adam", **kw)


PROFILE_DOC = _lenet_table().to_dict()
assert "update_seconds" in PROFILE_DOC["entries"][0]
PROFILE_KEYS = [("", k) for k in PROFILE_DOC if k not in ("format", "version")] + \
    [("entries[0]", k) for k in PROFILE_DOC["entries"][0]]


@pytest.mark.parametrize("where, key", PROFILE_KEYS)
def test_profile_key_typo(tmp_path, where, key):
    doc = copy.deepcopy(PROFILE_DOC)
    rename(doc if not where else doc["entries"][0], key, typo(key))
    path = write(tmp_path, doc, "prof.json")
    refused(FormatError, lambda: ProfileTable.load(path), str(path),
            f"{where + '.' if where else ''}{typo(key)} is not a known key",
            f"did you mean {key!r}?")


@pytest.mark.parametrize("key", sorted(set(PROFILE_DOC["entries"][0]) - {"update_seconds"}))
def test_profile_entry_missing(tmp_path, key):
    doc = copy.deepcopy(PROFILE_DOC)
    del doc["entries"][3][key]
    path = write(tmp_path, doc, "prof.json")
    refused(FormatError, lambda: ProfileTable.load(path), str(path),
            f"entries[3].{key} is missing")


@pytest.mark.parametrize("where, key, value, fragment", [
    ("", "entries", {}, "entries must be a list"),
    ("", "dtype", "fp32", "dtype must be one of float32"),
    ("", "device", "gpu", "device must be 'cpu', 'cuda' or 'cuda:<index>'"),
    ("", "meta", [], "meta must be an object"),
    ("entries[0]", "op", 3, "entries[0].op must be a string"),
    ("entries[0]", "op", "convolution", "entries[0].op 'convolution' is not a known op"),
    ("entries[0]", "signature", None, "entries[0].signature must be a string"),
    ("entries[0]", "tile_shape", "4x6", "entries[0].tile_shape must be a list"),
    ("entries[0]", "tile_shape", [4, 0], "entries[0].tile_shape[1] must be >= 1"),
    ("entries[0]", "tile_shape", [4.0], "entries[0].tile_shape[0] must be an integer"),
    ("entries[0]", "dtype", 32, "entries[0].dtype must be one of"),
    ("entries[0]", "device", ["cpu"], "entries[0].device must be a string"),
    ("entries[0]", "seconds", "1e-3", "entries[0].seconds must be a number"),
    ("entries[0]", "seconds", -1, "entries[0].seconds must be >= 0"),
    ("entries[0]", "seconds", "inf", "entries[0].seconds must be a finite number"),
    ("entries[0]", "update_seconds", "2e-5", "entries[0].update_seconds must be a number"),
    ("entries[0]", "update_seconds", -1, "entries[0].update_seconds must be >= 0"),
    ("", "optimizer", "adamw", "optimizer 'adamw' is not one of adam, sgd, momentum"),
])
def test_profile_wrong_type(tmp_path, where, key, value, fragment):
    doc = copy.deepcopy(PROFILE_DOC)
    (doc if not where else doc["entries"][0])[key] = value
    path = write(tmp_path, doc, "prof.json")
    refused(FormatError, lambda: ProfileTable.load(path), str(path), fragment)


def test_profile_files_through_io(tmp_path):
    t = _lenet_table()
    t.save(tmp_path / "p.json.gz")
    assert gzip.decompress((tmp_path / "p.json.gz").read_bytes())
    assert ProfileTable.load(tmp_path / "p.json.gz") == t
    (tmp_path / "dir").mkdir()
    (tmp_path / "bin").write_bytes(b"\x00\xff\x00binary")
    (tmp_path / "torn.gz").write_bytes(gzip.compress(b'{"format": 1}')[:-6])
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, fragment in [("dir", "is a directory"), ("bin", "binary data"),
                           ("torn.gz", "corrupt or truncated gzip"), ("none", "no such file"),
                           ("list.json", "expected a profile table")]:
        refused(FormatError, lambda: ProfileTable.load(tmp_path / name),
                str(tmp_path / name), fragment)


def test_profile_of_another_model_is_refused_and_a_partial_one_reported(tmp_path, caplog):
    import milp_parallel as mp

    t = _lenet_table()
    t.save(tmp_path / "lenet.json")
    msg = refused(InvalidOptionError, lambda: mp.solve("alexnet", "pcie_box", devices=4,
                                                        profile=tmp_path / "lenet.json"),
                  str(tmp_path / "lenet.json"), f"{len(t)} entries", "'lenet5'",
                  "prices no layer of graph 'alexnet'", "features.0")
    assert "23 layers" in msg
    g = models.get("lenet5")
    assert t.coverage(g, 4).complete
    part = ProfileTable([e for e in t.entries if e.op == "conv"], source="part.json")
    cov = part.coverage(g, 4)
    assert isinstance(cov, ProfileCoverage) and not cov.complete
    assert set(cov.matched) == {L.name for L in g.layers if L.op == "conv"}
    assert "relu1" in cov.unmatched and 0 < cov.fraction < 1
    with caplog.at_level(logging.WARNING, logger="milp_parallel.measure.profile"):
        plan = mp.solve("lenet5", "pcie_box", devices=4, profile=part)
    assert "profile table part.json prices 2 of 13 layers" in caplog.text
    assert plan is not None


def test_cost_model_keeps_the_coverage():
    from milp_parallel import clusters
    from milp_parallel.costs import CostModel
    from milp_parallel.costs.build import build

    topo = clusters.get("pcie_box").with_devices(4)
    cm = CostModel(topo, profile=_lenet_table())
    build(models.get("lenet5"), topo, cost_model=cm)
    assert cm.profile_coverage.complete and cm.profile_stats["fallbacks"] == 0


# ---------------------------------------------------------------------- ParaDL files
PLAT = """MEM_PER_NODE|16e9|Bytes
NODE_SPEED|7.8E12|FLOPS
BANDWIDTH|12.5E9|Bps
LATENCY|500E-9|second
MAX_NODE|4096|GPUs
GPU_PER_NODE|4|GPUs
"""
PLAT_LINES = PLAT.splitlines()


@pytest.mark.parametrize("line", range(6))
def test_plat_key_typo(tmp_path, line):
    lines = list(PLAT_LINES)
    key = lines[line].split("|")[0]
    lines[line] = lines[line].replace(key, typo(key), 1)
    path = tmp_path / "x.plat"
    path.write_text("\n".join(lines))
    refused(FormatError, lambda: paradl.read_platform(path), f"{path}, line {line + 1}",
            f"unknown key {typo(key)!r}", f"did you mean {key!r}?")


@pytest.mark.parametrize("line", range(6))
def test_plat_unknown_unit(tmp_path, line):
    lines = list(PLAT_LINES)
    key = lines[line].split("|")[0]
    lines[line] = "|".join(lines[line].split("|")[:2] + ["parsecs"])
    path = tmp_path / "x.plat"
    path.write_text("\n".join(lines))
    refused(FormatError, lambda: paradl.read_platform(path), f"{path}, line {line + 1}",
            f"{key} unit 'parsecs' is not known")


@pytest.mark.parametrize("line, text, fragment", [
    (0, "MEM_PER_NODE|16|GB|extra", "has 4 '|'-separated fields"),
    (0, "MEM_PER_NODE", "MEM_PER_NODE has no value"),
    (0, "MEM_PER_NODE||GB", "MEM_PER_NODE has no value"),
    (0, "MEM_PER_NODE|sixteen|GB", "MEM_PER_NODE value 'sixteen' is not a number"),
    (0, "MEM_PER_NODE|-16|GB", "MEM_PER_NODE must be a positive number"),
    (0, "MEM_PER_NODE|16|Gb", "did you mean 'GB'?"),
    (1, "NODE_SPEED|7.8|TFLOP", "did you mean 'TFLOPS'?"),
    (3, "LATENCY|0.5|usec", "LATENCY unit 'usec' is not known"),
    (4, "MAX_NODE|40.5|GPUs", "MAX_NODE must be a whole number"),
    (5, "MAX_NODE|16|GPUs", "second MAX_NODE line (first on line 5)"),
])
def test_plat_malformed_line(tmp_path, line, text, fragment):
    lines = list(PLAT_LINES)
    lines[line] = text
    path = tmp_path / "x.plat"
    path.write_text("\n".join(lines))
    refused(FormatError, lambda: paradl.read_platform(path), f"{path}, line {line + 1}",
            fragment)


@pytest.mark.parametrize("unit, factor", [("GB", 1e9), ("GiB", 2**30), ("MB", 1e6),
                                          ("Bytes", 1), ("", 1), ("TB", 1e12)])
def test_plat_memory_units(unit, factor):
    text = PLAT.replace("MEM_PER_NODE|16e9|Bytes", f"MEM_PER_NODE|16|{unit}".rstrip("|"))
    assert paradl.parse_platform(text).memory_bytes == 16 * factor


def test_plat_other_units():
    p = paradl.parse_platform("MEM_PER_NODE|16|GiB\nNODE_SPEED|7.8|TFLOPS\n"
                              "BANDWIDTH|100|Gbps\nLATENCY|0.5|us\nMAX_NODE|8\nGPU_PER_NODE|4")
    assert (p.speed_flops, p.bandwidth_bytes_per_s, p.latency_s) == (7.8e12, 12.5e9, 5e-7)


NET = """Dataset|ImageNet
Input|1280000x3x8x8
Model|Tiny
CONV1|3x8x8|3x4x3x3|4x8x8|0.001
RELU1|4x8x8|4x4x0x0|4x8x8
"""


@pytest.mark.parametrize("line, text, fragment", [
    (0, "Datset|ImageNet", "unknown header key 'Datset'; did you mean 'Dataset'?"),
    (1, "Inptu|1280000x3x8x8", "did you mean 'Input'?"),
    (2, "Modle|Tiny", "did you mean 'Model'?"),
    (3, "CNOV1|3x8x8|3x4x3x3|4x8x8|0.001", "unknown layer kind in name 'CNOV1'; did you "
                                          "mean 'CONV'?"),
    (3, "CONV1|3x8x8|3x4x3x3|4x8x8|fast", "time 'fast' is not a number"),
    (3, "CONV1|3x8x8|3x4x3x3|4x8", "shape ranks do not fit"),
    (4, "RELU1|4x8x8|4x4x0x0", "layer row has 3 '|'-separated fields"),
])
def test_net_malformed_line(tmp_path, line, text, fragment):
    lines = NET.splitlines()
    lines[line] = text
    path = tmp_path / "x.net"
    path.write_text("\n".join(lines))
    refused(FormatError, lambda: paradl.read_net(path), f"{path}, line {line + 1}", fragment)


# ---------------------------------------------------------------------- ONNX
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from milp_parallel.importers import from_onnx  # noqa: E402


def _onnx_file(tmp_path, nodes, inits=(), inputs=None, shape=(1, 3, 8, 8)):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.zeros(s, np.float32), n)
                                           for n, s in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    return path


def _relu(i, o, name):
    return helper.make_node("Relu", [i], [o], name=name)


BAD_ONNX = {
    "cycle": ([_relu("x", "a", "r0"), helper.make_node("Add", ["a", "c"], ["b"], name="add"),
               _relu("b", "c", "r2"), _relu("c", "y", "r3")], (),
              ["cycle", "'add' (Add) -[b]-> 'r2' (Relu) -[c]-> 'add' (Add)"]),
    "self loop": ([helper.make_node("Add", ["x", "y"], ["y"], name="loop")], (),
                  ["cycle", "'loop' (Add)"]),
    "undefined input": ([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], (),
                        ["node 'add' (Add) reads tensor 'ghost'", "no node, graph input or "
                                                                  "initializer defines"]),
    "two writers": ([_relu("x", "a", "r1"), _relu("x", "a", "r2"), _relu("a", "y", "r3")], (),
                    ["tensor 'a' is written by two nodes", "'r1' (Relu)", "'r2' (Relu)"]),
    "writes a graph input": ([_relu("y", "x", "r1"), _relu("x", "y", "r0")], (),
                             ["node 'r1' (Relu) writes tensor 'x'", "already a graph input"]),
    "writes an initializer": ([_relu("x", "w", "r1"), _relu("w", "y", "r2")], [("w", (1,))],
                              ["writes tensor 'w'", "already an initializer"]),
    "conv weight channels": ([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1")],
                             [("w", (4, 2, 3, 3))],
                             ["node 'conv1' (Conv): weight 'w' has shape (4, 2, 3, 3)",
                              "input 'x' has shape (1, 3, 8, 8)"]),
    "conv weight rank": ([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1")],
                         [("w", (4, 3, 3))], ["weight 'w' has shape (4, 3, 3)"]),
    "conv kernel_shape": ([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1",
                                            kernel_shape=[5, 5])], [("w", (4, 3, 3, 3))],
                          ["weight 'w' has shape (3, 3), expected (5, 5)"]),
    "conv bias": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv1")],
                  [("w", (4, 3, 3, 3)), ("b", (5,))], ["bias 'b' has shape (5,), expected (4,)"]),
    "gemm weight": ([helper.make_node("Flatten", ["x"], ["f"], name="flat"),
                     helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1)],
                    [("w", (10, 100))], ["node 'fc' (Gemm): weight 'w' has shape (10, 100)",
                                         "input 'f' has 192"]),
    "matmul weight": ([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                      [("w", (7, 4))], ["node 'mm' (MatMul): weight 'w' has shape (7, 4)",
                                        "needs a (8, out) matrix"]),
    "batchnorm scale": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                          ["y"], name="bn")],
                        [("s", (4,)), ("b", (3,)), ("m", (3,)), ("v", (3,))],
                        ["node 'bn' (BatchNormalization): scale 's' has shape (4,), expected "
                         "(3,)"]),
    "layernorm scale": ([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
                        [("s", (5,))], ["node 'ln' (LayerNormalization): scale 's' has shape "
                                        "(5,), expected (8,)"]),
}


@pytest.mark.parametrize("case", sorted(BAD_ONNX))
def test_onnx_malformed_graph_is_refused(tmp_path, case):
    nodes, inits, fragments = BAD_ONNX[case]
    path = _onnx_file(tmp_path, nodes, inits)
    msg = refused(InvalidGraphError, lambda: from_onnx(path), str(path), *fragments)
    assert "ONNX" in msg


def test_onnx_nodes_out_of_order_are_sorted(tmp_path):
    path = _onnx_file(tmp_path, [_relu("a", "y", "second"), _relu("x", "a", "first")])
    g = from_onnx(path)
    assert g.names == ("x", "first", "second")


# ---------------------------------------------------------------------- writing
def _writers():
    g = LayerGraph("w")
    g.input("x", (1, 2))
    p = Problem([np.array([1.0])], [], [])
    return {"graph": g.save, "problem": p.save, "profile": _lenet_table().save,
            "json": lambda path: write_json(path, {"a": 1})}


@pytest.mark.parametrize("what", sorted(_writers()))
def test_saving_to_a_bad_path_is_typed(tmp_path, what):
    save = _writers()[what]
    refused(FileWriteError, lambda: save(tmp_path), str(tmp_path), "is a directory")
    missing = tmp_path / "no" / "such" / "x.json"
    refused(FileWriteError, lambda: save(missing), str(missing), "does not exist")
    (tmp_path / "file").write_text("")
    under_file = tmp_path / "file" / "x.json"
    refused(FileWriteError, lambda: save(under_file), str(under_file), "is not a folder")
    with pytest.raises(OSError):     # still an OSError, as the raw error was
        save(tmp_path)
    with pytest.raises(MilpParallelError):
        save(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes anywhere")
def test_saving_without_permission_is_typed(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        refused(FileWriteError, lambda: write_json(ro / "x.json", {}), str(ro / "x.json"),
                "permission denied")
    finally:
        ro.chmod(0o700)


# ---------------------------------------------------------------------- good files load
@pytest.mark.parametrize("name", models.names())
def test_zoo_graphs_round_trip_through_the_strict_reader(name):
    g = models.get(name)
    assert LayerGraph.from_dict(json.loads(json.dumps(g.to_dict())), source=name) == g


IOPDDL_GOOD = [EXAMPLE, ROOT / "data" / "asplos-2025-iopddl-G.json.gz",
               SHARED / "iopddl" / "example.json",
               SHARED / "iopddl" / "asplos-2025-iopddl-G.json.gz"]


@pytest.mark.parametrize("path", IOPDDL_GOOD, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_good_iopddl_files_load(path):
    if not path.exists():
        pytest.skip(f"{path} not present")
    p = load_problem(path)
    assert p.n_nodes > 0 and Problem.from_iopddl(path) == p


def test_good_problem_and_graph_documents_load(tmp_path):
    p = load_problem(EXAMPLE)
    p.save(tmp_path / "p.json.gz")
    assert Problem.load(tmp_path / "p.json.gz") == p
    for doc in (_problem_doc(), _problem_doc(intervals=True)):
        Problem.load(write(tmp_path, doc, "q.json"))


PARADL_GOOD = sorted({p for d in (ROOT / "data" / "paradl", SHARED / "paradl") if d.is_dir()
                      for p in d.iterdir() if p.is_file() and p.suffix != ".md"})


@pytest.mark.parametrize("path", PARADL_GOOD, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_good_paradl_files_load(path):
    if path.suffix == ".plat":
        assert paradl.read_platform(path).memory_bytes == 16e9
    elif path.suffix == ".lc":
        assert paradl.read_mask(path).size > 0
    else:
        assert paradl.read_net(path).n_layers > 0


def test_good_json_files_of_the_repo_parse():
    for path in [*ROOT.glob("data/*.json"), *ROOT.glob("data/*.json.gz")]:
        assert read_json(path) is not None


# ----------------------------------------------------------------------------- plans
@pytest.fixture(scope="module")
def lenet_plan():
    import milp_parallel as mp
    return mp.solve("lenet5", "pcie_box", devices=2, solver="dp", cross_check=False,
                    simulate=False)


def test_a_plan_records_how_its_program_must_run(lenet_plan):
    from milp_parallel.costs import DDP_BUCKET_BYTES
    from milp_parallel.plan import Plan
    assert lenet_plan.runtime_options == {"gradient_bucket_bytes": float(DDP_BUCKET_BYTES),
                                          "bucket_copies": 0, "batchnorm_stats": "local"}
    assert Plan.from_json(lenet_plan.to_json()).runtime_options == lenet_plan.runtime_options
    # a plan saved before the field existed reads as one with none recorded
    doc = lenet_plan.to_dict()
    del doc["runtime_options"]
    assert Plan.from_dict(doc).runtime_options == {}
    doc["runtime_options"] = {"gradient_bucket_bytes": None}      # one all-reduce per layer
    assert Plan.from_dict(doc).runtime_options == {"gradient_bucket_bytes": None}


@pytest.mark.parametrize("key, value, fragments", [
    ("batchnorm_stat", "sync", ("runtime_options", "did you mean 'batchnorm_stats'")),
    ("batchnorm_stats", "global", ("runtime_options.batchnorm_stats", "local, sync")),
    ("batchnorm_stats", 1, ("runtime_options.batchnorm_stats", "must be a string")),
    ("bucket_copies", 1.5, ("runtime_options.bucket_copies", "must be an integer")),
    ("bucket_copies", -1, ("runtime_options.bucket_copies", ">= 0")),
    ("gradient_bucket_bytes", 0, ("runtime_options.gradient_bucket_bytes", "> 0")),
    ("gradient_bucket_bytes", "big", ("runtime_options.gradient_bucket_bytes",
                                      "must be a number")),
])
def test_plan_runtime_options_typos_and_wrong_values(tmp_path, lenet_plan, key, value,
                                                     fragments):
    from milp_parallel.plan import Plan
    doc = lenet_plan.to_dict()
    doc["runtime_options"] = {**doc["runtime_options"], key: value}
    if key == "batchnorm_stat":
        del doc["runtime_options"]["batchnorm_stats"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    refused(FormatError, lambda: Plan.load(path), str(path), *fragments)
