"""Fuzz targets for every reader of the package, and hypothesis strategies that feed them.

A *target* takes one malformed input and calls a reader on it; it passes when the reader
returns a valid value or raises a typed error (:class:`~milp_parallel.errors.MilpParallelError`)
and fails on anything else (a raw ``KeyError``, ``OverflowError``, ``zlib.error``, ...).

Inputs are valid documents damaged the ways files get damaged: truncated, gzip-compressed and
then truncated, a key deleted, a value replaced by one of another type, by a huge, negative
or non-finite number, or by garbage; and plain random bytes. ``tests/test_fuzz.py`` runs every
target a few dozen times in CI; ``benchmarks/fuzz_readers.py`` runs them for longer.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from milp_parallel.errors import MilpParallelError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "data" / "iopddl_example.json"
PARADL = ROOT / "data" / "paradl"

#: JSON values that break readers: wrong types, huge, negative and non-finite numbers.
NASTY_SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.sampled_from([0, -1, 1, 2**31, 2**63, -2**63 - 1, 10**25, 10**400, 1.5, -0.0, 1e308,
                     1e-320, math.inf, -math.inf, math.nan]),
    st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "inf", "-inf", "nan", "abc", "0", "1e400", "\x00", "n=2", "serial"]),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    NASTY_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=8)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys / indices) into a JSON document, the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):      # a few items of long lists are enough
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def damaged_documents(draw, doc: Any) -> Any:
    """``doc`` with one to three of: a key deleted, a value replaced, a list emptied or
    doubled, a value wrapped in a list."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        op = draw(st.sampled_from(["replace", "delete", "empty", "double", "wrap"]))
        if not path:
            if op == "replace":
                doc = draw(JSON_VALUES)
            continue
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            key = path[-1]
            value = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(JSON_VALUES)
        elif op == "empty" and isinstance(value, (list, dict)):
            parent[key] = type(value)()
        elif op == "double" and isinstance(value, list):
            parent[key] = value + value
        elif op == "wrap":
            parent[key] = [value]
    return doc


@st.composite
def damaged_bytes(draw, data: bytes) -> bytes:
    """``data`` truncated, with a byte flipped, with garbage inserted, or left whole."""
    op = draw(st.sampled_from(["whole", "truncate", "flip", "insert"]))
    if op == "truncate":
        return data[:draw(st.integers(0, max(0, len(data) - 1)))]
    if op == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if op == "insert":
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.binary(max_size=16)) + data[i:]
    return data


@st.composite
def json_files(draw, doc: Any) -> tuple[bytes, str]:
    """``(content, suffix)``: a damaged document as JSON text, maybe gzip-compressed, maybe
    damaged again as bytes; or random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64)), draw(st.sampled_from([".json", ".json.gz"]))
    if draw(st.booleans()):
        doc = draw(damaged_documents(doc))
    text = json.dumps(doc, allow_nan=True).encode()
    gz = draw(st.booleans())
    if gz:
        text = gzip.compress(text, mtime=0)
    text = draw(damaged_bytes(text))
    return text, draw(st.sampled_from([".json.gz" if gz else ".json", ".json", ".json.gz"]))


@st.composite
def text_files(draw, text: str) -> bytes:
    """A damaged text file: lines dropped, duplicated or replaced, fields garbled."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "replace", "field"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "replace":
            lines[i] = draw(st.text(max_size=30))
        else:
            fields = lines[i].split("|")
            j = draw(st.integers(0, len(fields) - 1))
            fields[j] = draw(st.sampled_from(["", "0", "-1", "0.5", "nan", "inf", "1e400",
                                              "0x3x3", "3x0x4", "9" * 40, "abc", "x"]))
            lines[i] = "|".join(fields)
    return draw(damaged_bytes("\n".join(lines).encode()))


# ---------------------------------------------------------------------- the targets
@dataclass(frozen=True)
class Target:
    """One reader: what to damage and how to call the reader on a file."""

    name: str
    files: Callable[[], st.SearchStrategy]   # -> (content bytes, suffix)
    read: Callable[[Path], Any]


def run_target(target: Target, content: bytes, suffix: str) -> Any:
    """Write ``content`` to a temporary file and read it: a value, or None after a typed
    error. Any other exception propagates (the fuzz failure)."""
    with tempfile.TemporaryDirectory(prefix="milp_parallel_fuzz_") as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(content)
        try:
            return target.read(path)
        except MilpParallelError:
            return None


def _problem_doc() -> dict:
    from milp_parallel.problem import Problem
    return Problem.from_iopddl(EXAMPLE).to_dict()


def _graph_doc() -> dict:
    from milp_parallel import models
    return models.get("lenet5").to_dict()


def _topology_doc() -> dict:
    from milp_parallel import clusters
    return clusters.get("abci", nodes=2).to_dict()


_PLAN_DOC: list[dict] = []


def _plan_doc() -> dict:
    if not _PLAN_DOC:
        from milp_parallel.plan import solve
        _PLAN_DOC.append(solve("lenet5", "optcnn", devices=2, solver="dp",
                               cross_check=False).to_dict())
    return _PLAN_DOC[0]


def _results_lines() -> bytes:
    recs = [{"id": f"{i:016x}", "kind": "problem", "params": {"problem": "x.json",
                                                              "solver": "dp"},
             "status": "optimal", "objective": 445.0 + i, "error": None} for i in range(3)]
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def _read_problem(p: Path):
    from milp_parallel.problem import Problem
    return Problem.load(p)


def _read_iopddl(p: Path):
    from milp_parallel.problem import Problem
    return Problem.from_iopddl(p)


def _read_any_problem(p: Path):
    from milp_parallel.problem import load_problem
    return load_problem(p)


def _read_graph(p: Path):
    from milp_parallel.graph import LayerGraph
    return LayerGraph.load(p)


def _read_topology(p: Path):
    from milp_parallel.machine.topology import Topology
    return Topology.load(p)


def _read_plan(p: Path):
    from milp_parallel.plan import Plan
    return Plan.load(p)


def _read_results(p: Path):
    from milp_parallel.report import load_records
    return load_records(p)


def _read_sweep(p: Path):
    from milp_parallel.sweep import load_sweep
    return load_sweep(p)


def _read_net(p: Path):
    from milp_parallel.oracle.paradl_files import read_net, to_layer_graph
    table = read_net(p)
    to_layer_graph(table)
    return table


def _read_platform(p: Path):
    from milp_parallel.oracle.paradl_files import read_platform
    return read_platform(p)


def _read_mask(p: Path):
    from milp_parallel.oracle.paradl_files import read_mask
    return read_mask(p)


def _read_onnx(p: Path):
    from milp_parallel.importers import from_onnx
    return from_onnx(p)


def _onnx_bytes() -> bytes:
    """A small valid ONNX model (conv, relu, pool, flatten, gemm)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
    fc = numpy_helper.from_array(np.zeros((10, 4 * 4 * 4), np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              [w, fc])
    return helper.make_model(graph).SerializeToString()


def _sweep_texts() -> st.SearchStrategy:
    keys = st.sampled_from(["models", "model", "clusters", "devices", "batch_sizes",
                            "memory_limits", "solvers", "time_limits", "time_limit",
                            "repeats", "cross_check", "problems", "kill_after", "bogus"])
    scalars = st.one_of(
        st.sampled_from(['"lenet5"', '"optcnn"', '"dp"', '"none"', '"device"', '"16GiB"',
                         '"lots"', '"1..4"', '"8..1"', '"0"', "0", "-1", "1.5", "nan", "inf",
                         "true", "false", '"2min"', '"abc"', '"x.json"', "9" * 30, '""']),
        st.integers(-3, 100).map(str))
    values = st.one_of(scalars, st.lists(scalars, max_size=3).map(
        lambda xs: "[" + ", ".join(xs) + "]"))
    grid = st.lists(st.tuples(keys, values), max_size=7).map(
        lambda kv: "".join(f"{k} = {v}\n" for k, v in dict(kv).items()))

    @st.composite
    def texts(draw):
        body = "".join("[[grid]]\n" + g for g in draw(st.lists(grid, min_size=0, max_size=3)))
        head = draw(grid)
        return draw(damaged_bytes((head + body).encode())), ".toml"
    return texts()


def _jsonl_files() -> st.SearchStrategy:
    @st.composite
    def files(draw):
        return draw(damaged_bytes(_results_lines())), ".jsonl"
    return files()


def _paradl_files(name: str, suffix: str) -> Callable[[], st.SearchStrategy]:
    def make() -> st.SearchStrategy:
        text = (PARADL / name).read_text()
        return text_files(text).map(lambda b: (b, suffix))
    return make


TARGETS = {
    "problem": Target("problem", lambda: json_files(_problem_doc()), _read_problem),
    "iopddl": Target("iopddl", lambda: json_files(json.loads(EXAMPLE.read_text())),
                     _read_iopddl),
    "any_problem": Target("any_problem",
                          lambda: st.one_of(json_files(_problem_doc()),
                                            json_files(json.loads(EXAMPLE.read_text()))),
                          _read_any_problem),
    "graph": Target("graph", lambda: json_files(_graph_doc()), _read_graph),
    "topology": Target("topology", lambda: json_files(_topology_doc()), _read_topology),
    "plan": Target("plan", lambda: json_files(_plan_doc()), _read_plan),
    "results": Target("results", _jsonl_files, _read_results),
    "sweep": Target("sweep", _sweep_texts, _read_sweep),
    "paradl_net": Target("paradl_net", _paradl_files("ALEXNET_ImageNet.net", ".net"),
                         _read_net),
    "paradl_platform": Target("paradl_platform", _paradl_files("ABCI.plat", ".plat"),
                              _read_platform),
    "paradl_mask": Target("paradl_mask", _paradl_files("filter_alexnet.lc", ".lc"),
                          _read_mask),
    "onnx": Target("onnx", lambda: damaged_bytes(_onnx_bytes()).map(lambda b: (b, ".onnx")),
                   _read_onnx),
}


#: Values given to command-line options: bad, huge, non-finite, sentinels, ranges.
CLI_VALUES = st.sampled_from(["0", "-1", "1", "2", "4", "3", "1.5", "nan", "inf", "1e400",
                              "abc", "", "9" * 40, "none", "device", "16GiB", "2min", "1..4",
                              "8..1", "1.." + "9" * 30 + ":+1"])


@st.composite
def cli_arguments(draw, files: list[str]) -> list[str]:
    """An argv for ``milp-parallel``: a command with options drawn from bad values and
    ``files`` (paths that are not documents, and valid ones)."""
    f = draw(st.sampled_from(files))
    vals = [draw(CLI_VALUES) for _ in range(3)]
    cmd = draw(st.sampled_from(["solve", "problem", "oracle", "paradl", "sweep", "report"]))
    if cmd == "solve":
        opts = draw(st.lists(st.sampled_from(["--devices", "--batch-size", "--memory-limit",
                                              "--time-limit", "--explain", "--fix",
                                              "--forbid"]), min_size=1, max_size=3))
        argv = ["solve", draw(st.sampled_from(["lenet5", f])), "--cluster",
                draw(st.sampled_from(["optcnn", "abci", f])), "--no-cross-check", "--solver",
                draw(st.sampled_from(["dp", "brute", "nosuch"]))]
        for opt, v in zip(opts, vals):
            if opt in ("--explain", "--fix", "--forbid"):
                v = draw(st.sampled_from(["conv1=n=2", "conv1=serial", "fc1=c=2", "x=y", "=",
                                          v]))
            argv += [opt, v]
        return argv
    if cmd == "problem":
        return ["problem", f, "--solver", draw(st.sampled_from(["brute", "dp", "highs"])),
                "--memory-limit", vals[0], "--time-limit", vals[1]]
    if cmd == "oracle":
        return ["oracle", draw(st.sampled_from(["lenet5", f])), "--cluster",
                draw(st.sampled_from(["abci", "optcnn", f])), "--devices", vals[0],
                "--batch-per-device", vals[1], "--strategy",
                draw(st.sampled_from(["data", "filter", "nosuch", "", "data,spatial"]))]
    if cmd == "paradl":
        return ["oracle", "--paradl", "-net",
                draw(st.sampled_from([f, str(PARADL / "ALEXNET_ImageNet.net")])), "-plat",
                draw(st.sampled_from([f, str(PARADL / "ABCI.plat")])), "--paratype",
                draw(st.sampled_from(["d", "f", "zz", "df"])), "--cmaxp", vals[0],
                "--cmaxB", vals[1], "--cBon", vals[2]]
    if cmd == "sweep":
        return ["sweep", f, "--list"]
    return ["report", f, "--out", f + ".out", "--no-plots"]


def check_cli(argv: list[str]) -> int:
    """Run ``milp-parallel argv`` in this process; assert the contract, return the code."""
    import contextlib
    import io

    from milp_parallel.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    text = err.getvalue()
    assert code in (0, 1, 2), (argv, code, text)
    assert "internal error" not in text and "Traceback" not in text, (argv, text)
    if code != 0:
        assert text.strip().splitlines()[-1].startswith("milp-parallel: error:"), (argv, text)
    return code


def path_cases(tmp: Path) -> list[Path]:
    """Paths that are not files of the right kind: missing, a directory, empty, binary."""
    (tmp / "dir.json").mkdir(exist_ok=True)
    (tmp / "empty.json").write_bytes(b"")
    (tmp / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp / "nul.json").write_bytes(b'{"a": "\x00"}')
    (tmp / "fake.json.gz").write_bytes(b"not gzip at all")
    (tmp / "truncated.json.gz").write_bytes(gzip.compress(EXAMPLE.read_bytes())[:40])
    return [tmp / "missing.json", tmp / "dir.json", tmp / "empty.json", tmp / "binary.json",
            tmp / "nul.json", tmp / "fake.json.gz", tmp / "truncated.json.gz"]


__all__ = ["TARGETS", "Target", "run_target", "path_cases", "damaged_documents",
           "damaged_bytes", "json_files", "text_files", "cli_arguments", "check_cli",
           "JSON_VALUES", "NASTY_SCALARS", "CLI_VALUES"]
