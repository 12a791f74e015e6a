"""The package's layout (issue 23): folders by stage, small modules, no import cycle, one HiGHS
adapter, benchmarks that do not edit ``sys.path``, and old module paths that still work one
release with a warning.

The import graph is read from the source (``ast``), lazy imports inside functions included:
an edge ``a -> b`` for every ``import`` / ``from ... import`` in ``a`` that names module
``b`` of the package (``from pkg import name`` counts as ``pkg.name`` when that is a module).
"""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import networkx as nx
import pytest

import milp_parallel
from milp_parallel import _moved

PACKAGE = Path(milp_parallel.__file__).parent
ROOT = PACKAGE.parent

#: At most this many modules at the top level, besides the folders (issue 23's target;
#: ``__init__`` and ``__main__`` are the package itself, not modules of it).
MAX_TOP_LEVEL = 12
MAX_LINES = 900

#: Import edges that close a cycle on purpose, each with the reason and when it goes.
ALLOWED_BACK_EDGES = {
    ("milp_parallel.plan.result", "milp_parallel.plan.planner"):
        "Plan.explain, a deprecated delegate of plan.explain(); it goes next release",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (annotations only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def _import_graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
            for t in targets:
                # the longest prefix that is a module of the package
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):
                    g.add_edge(name, t)
    return g


def test_top_level_holds_at_most_twelve_modules_besides_the_folders():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= MAX_TOP_LEVEL, top


def test_no_module_is_longer_than_900_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long


def test_the_package_has_no_import_cycle_lazy_imports_included():
    g = _import_graph()
    g.remove_edges_from(ALLOWED_BACK_EDGES)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, sorted(cycles, key=len)[:5]
    for edge in ALLOWED_BACK_EDGES:       # each exception is still needed, or it goes
        assert edge in _import_graph().edges


def test_a_stage_never_imports_a_later_stage():
    # the data flow of the README: nothing below the plan stage imports it
    g = _import_graph()
    later = ("milp_parallel.plan", "milp_parallel.sweep", "milp_parallel.cli",
             "milp_parallel.report")
    for below in ("milp_parallel.graph", "milp_parallel.machine", "milp_parallel.costs",
                  "milp_parallel.problem", "milp_parallel.solvers", "milp_parallel.inputs"):
        for a, b in g.edges:
            if (a == below or a.startswith(below + ".")) and b.startswith(later):
                pytest.fail(f"{a} imports {b}, a later stage")


def test_highspy_is_imported_by_one_module():
    users = {name for name, path in _modules().items()
             if any(isinstance(n, (ast.Import, ast.ImportFrom))
                    and ("highspy" in [a.name for a in getattr(n, "names", [])]
                         or getattr(n, "module", None) == "highspy")
                    for n in ast.walk(ast.parse(path.read_text())))}
    assert users == {"milp_parallel.solvers.milp.highs"}


def test_benchmarks_do_not_edit_sys_path():
    bench = ROOT / "benchmarks"
    if not bench.is_dir():
        pytest.skip("no benchmarks folder beside the package (an installed copy)")
    edits = [p.name for p in bench.glob("*.py") if "sys.path" in p.read_text()]
    assert not edits


@pytest.mark.parametrize("old", sorted(_moved.MOVED_MODULES))
def test_old_module_paths_warn_and_give_the_same_module(old, monkeypatch):
    import sys
    new = importlib.import_module(_moved.MOVED_MODULES[old])
    if not isinstance(sys.modules.get(old), _moved._StandIn):
        monkeypatch.delitem(sys.modules, old, raising=False)   # as on a first import
    leaf = old.rpartition(".")[2]
    with pytest.warns(DeprecationWarning, match=_moved.MOVED_MODULES[old].replace(".", r"\.")):
        mod = importlib.import_module(old)
        names = [n for n in dir(new) if not n.startswith("__")][:3]
        got = [getattr(mod, n) for n in names]       # a stand-in warns on attribute access
    assert got == [getattr(new, n) for n in names]
    if not isinstance(mod, _moved._StandIn):
        assert mod is new and mod.__name__ == new.__name__ and mod.__spec__.name == new.__name__
    # the face's attribute of the same name is untouched (milp_parallel.simulate stays the
    # function)
    face = getattr(milp_parallel, leaf, None)
    if old in _moved._SHADOWED:
        assert callable(face) and not isinstance(face, type(milp_parallel))


def test_importing_the_package_imports_no_old_path():
    # the package's own modules import the new paths: a user sees no warning of ours
    import subprocess
    import sys
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import milp_parallel as mp\n"
            "mp.solve('lenet5', 'optcnn', devices=2, solver='dp', cross_check=False)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_moved_names_of_the_face_still_warn():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert milp_parallel.CostModel is importlib.import_module("milp_parallel.costs").CostModel
    assert any(issubclass(w.category, DeprecationWarning) for w in seen)


def test_the_readme_table_names_the_tree():
    readme = (ROOT / "README.md").read_text()
    head = readme.index("| step | API | module")
    rows = [r for r in readme[head:].split("\n\n")[0].splitlines()[2:] if r.startswith("|")]
    named = set()
    for row in rows:
        cell = row.rstrip("|").rsplit("|", 1)[1]
        for name in cell.split("`")[1::2]:
            named.add(name)
            assert (PACKAGE / name).exists(), f"the README names {name}, which is not there"
    # every folder and top-level module of a stage is in the table
    stages = {p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert stages - named <= {"data/"}, stages - named


def test_plan_least_memory_bytes_warns_and_is_the_exact_one():
    import milp_parallel.plan as plan
    from milp_parallel.solvers.memory import least_memory
    with pytest.warns(DeprecationWarning, match="least_memory"):
        assert plan.least_memory_bytes is least_memory
