"""The layout of the transformer planner (issue 23, step 3): ``pipeline.py`` became the folder
``pipeline/``; its three helper modules moved in (the old paths warn and give the same
objects); the folder's modules import one way; HiGHS is reached through one adapter."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import milp_parallel
from milp_parallel.errors import SolverError
from milp_parallel.pipeline.milp import _SparseMilp
from milp_parallel.solvers.result import INFEASIBLE, OPTIMAL

PACKAGE = Path(milp_parallel.__file__).parent
FOLDER = PACKAGE / "pipeline"
#: The folder's modules in the order data flows: each may import only those before it.
ORDER = ("training_memory", "tensor_parallel", "step_costs", "blocks", "fanout", "space", "result",
         "pricing", "accounting", "dominance", "stages", "milp", "combo", "search")
MOVED = ("tensor_parallel", "training_memory", "step_costs")


# ------------------------------------------------------------------ the old paths
@pytest.mark.parametrize("name", MOVED)
def test_old_path_warns_and_gives_the_same_objects(name, monkeypatch):
    new = importlib.import_module(f"milp_parallel.pipeline.{name}")
    monkeypatch.delitem(sys.modules, f"milp_parallel.{name}", raising=False)
    with pytest.warns(DeprecationWarning, match=f"milp_parallel.pipeline.{name}"):
        old = importlib.import_module(f"milp_parallel.{name}")
    names = [k for k in vars(new) if not k.startswith("__")]
    assert any(k.startswith("_") for k in names)          # private names travel too
    for k in names:
        assert getattr(old, k) is getattr(new, k), k
    assert old.__all__ == new.__all__


def test_megatron_kinds_lives_with_the_kinds():
    from milp_parallel.pipeline import megatron_kinds
    from milp_parallel.pipeline.tensor_parallel import megatron_kinds as here
    assert megatron_kinds is here


# ------------------------------------------------------------------ the face
#: What ``milp_parallel.pipeline`` offered as one module, the private names tests and
#: benchmarks import included.
OLD_NAMES = ("solve_pipeline", "evaluate_configuration", "PipelineOptions", "PipelinePlan",
             "StagePlan", "BlockStructure", "block_structure", "SCHEDULES", "megatron_kinds",
             "in_flight_micro_batches", "_assignment_criteria", "_Combo", "_ComboProblem",
             "_MeshPricing", "_StageTables", "_Choice", "_Points", "_Search", "_divisors",
             "_dominance_program", "_min_program", "_pareto_mask", "_prune", "_kind_index",
             "_N_CRIT", "_REL_TOL", "_RECOMPUTE_INDEX", "_combos", "_plan", "_prepare",
             "_least_memory", "_node_size", "_minplus", "_share", "_weight_elements")


def test_the_face_keeps_every_name_of_the_old_module():
    import milp_parallel.pipeline as face
    missing = [n for n in OLD_NAMES if not hasattr(face, n)]
    assert not missing
    assert sorted(face.__all__) == sorted(OLD_NAMES[:10])
    for n in face.__all__:
        obj = getattr(face, n)
        if callable(obj):
            assert obj.__module__.startswith("milp_parallel.pipeline."), n


def test_importing_the_face_warns_nothing():
    """The package's own code uses the new paths only (a fresh interpreter: every module)."""
    code = ("import milp_parallel.pipeline, milp_parallel.pipeline.search, "
            "milp_parallel.pipeline.milp")
    run = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# ------------------------------------------------------------------ the folder's modules
def _imports(path: Path) -> tuple[set[str], set[str], list[str]]:
    """What ``path`` imports: modules of the folder, modules of the package outside it, and
    absolute imports of the package (the folder uses relative ones)."""
    inside, outside, absolute = set(), set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            inside.add((node.module or "").split(".")[0])
        elif node.level == 2:
            outside.update([node.module.split(".")[0]] if node.module
                           else [a.name for a in node.names])
        elif (node.module or "").startswith("milp_parallel"):
            absolute.append(node.module)
    return inside, outside, absolute


def test_every_module_is_listed_small_and_says_what_it_may_import():
    found = {p.stem for p in FOLDER.glob("*.py")} - {"__init__"}
    assert found == set(ORDER)
    for name in ORDER:
        path = FOLDER / f"{name}.py"
        assert len(path.read_text().splitlines()) <= 600, name
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and "May import:" in doc, name


@pytest.mark.parametrize("name", ORDER)
def test_data_flows_one_way(name):
    inside, outside, absolute = _imports(FOLDER / f"{name}.py")
    above = set(ORDER[:ORDER.index(name)])
    assert inside <= above, f"{name} imports {sorted(inside - above)} (not above it)"
    assert not outside & {"plan", "sweep", "cli", "report"}, name
    assert not absolute, name


#: The stages below the planner (ground, model, cluster, costs, solvers): none may use it.
BELOW = ("errors.py", "units.py", "io.py", "isolation.py", "_fdio.py", "problem.py",
         "inputs.py", "topology.py", "clusters.py", "collectives.py", "roofline.py",
         "configs.py", "costs.py", "build.py", "graph", "models", "machine", "costs",
         "solvers")


def test_nothing_below_imports_the_pipeline():
    """Solvers, costs, the cluster and the graph never reach up into the planner."""
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in BELOW:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                used = [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                used = [a.name for a in node.names]
            else:
                continue
            parts = {p for u in used for p in u.split(".")}
            assert not parts & {"pipeline", *MOVED}, (str(rel), used)


def test_highspy_is_imported_by_one_module():
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if "import highspy" in p.read_text())
    assert users == ["solvers/milp/highs.py"]


# ------------------------------------------------------------------ the one HiGHS adapter
def _knapsack(capacity: float) -> _SparseMilp:
    """Pick at least one of three items (weights 3, 4, 5; costs 5, 4, 6) within a capacity."""
    m = _SparseMilp()
    x = m.var(cost=[5.0, 4.0, 6.0], hi=1, integer=True, n=3)
    m.row(x, 1.0, lo=1)
    m.row(x, [3.0, 4.0, 5.0], hi=capacity)
    return m


def test_sparse_milp_optimum_and_start():
    ans = _knapsack(4.0).solve()
    assert ans.status == OPTIMAL and ans.objective == pytest.approx(4.0)
    assert np.allclose(ans.values, [0, 1, 0]) and ans.bound == ans.objective
    ans = _knapsack(3.5).solve(start=np.array([1.0, 0.0, 0.0]))
    assert ans.status == OPTIMAL and ans.objective == pytest.approx(5.0)


def test_sparse_milp_infeasible():
    ans = _knapsack(2.0).solve()
    assert ans.status == INFEASIBLE and ans.values is None and ans.bound == np.inf


def test_sparse_milp_other_statuses_are_typed_errors_naming_the_status():
    m = _SparseMilp()
    x = m.var(cost=-1.0, integer=True)       # unbounded below
    m.row([x], [1.0], lo=1)
    with pytest.raises(SolverError, match="status '.*[Uu]nbounded"):
        m.solve()
