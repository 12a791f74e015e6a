"""Issue 26.2: every efficiency, latency, launch-time and bytes-per-parameter constant of the
cost model cites its source next to its number (``milp_parallel.machine.constants``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from milp_parallel.machine import constants
from milp_parallel.machine.roofline import RooflineParams
from milp_parallel.pipeline.step_costs import StepPricer

ROOT = Path(__file__).resolve().parents[1] / "milp_parallel"
FILES = sorted([ROOT / "machine" / "clusters.py", ROOT / "machine" / "roofline.py",
                ROOT / "pipeline" / "step_costs.py", *(ROOT / "oracle").glob("*.py")])
KINDS = ("EFFICIENCY", "LAT", "LAUNCH", "BYTES_PER", "_BW", "BANDWIDTH", "FRACTION")


def _numeric_literal(node: ast.AST) -> bool:
    """A number written bare: a literal or arithmetic of literals."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _numeric_literal(node.left) and _numeric_literal(node.right)
    if isinstance(node, ast.UnaryOp):
        return _numeric_literal(node.operand)
    return False


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_bare_model_constant(path):
    """Module-level constants of these kinds, and dataclass defaults, come from a Sourced."""
    tree = ast.parse(path.read_text())
    bare = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and _numeric_literal(node.value):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            bare += [n for n in names if any(k in n.upper() for k in KINDS)]
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if (isinstance(item, ast.AnnAssign) and item.value is not None
                        and _numeric_literal(item.value)
                        and any(k in item.target.id.upper() for k in
                                ("EFFICIENCY", "FRACTION", "TILE", "LATENCY"))):
                    bare.append(f"{node.name}.{item.target.id}")
    assert not bare, f"{path.name}: constants without a source: {bare}"


def test_every_sourced_constant_has_a_source():
    rows = constants.table()
    assert len(rows) >= 10
    for name, c in rows:
        assert c.source and len(c.source) > 30, name
        assert c.unit, name
        if not c.checked:   # an unchecked figure says so where it stands
            assert "NOT CHECKED" in c.source or "derivation" in c.source, name


def test_a_constant_without_source_is_refused():
    with pytest.raises(ValueError, match="source"):
        constants.Sourced(0.5, "fraction", "")


def test_the_models_read_the_sourced_values():
    from milp_parallel import clusters
    assert RooflineParams().memory_efficiency == constants.MEMORY_EFFICIENCY.value
    assert RooflineParams().gemm_tile == constants.GEMM_TILE.value
    assert clusters.GPU_KERNEL_LAUNCH_S == constants.KERNEL_LAUNCH_S.value
    topo = clusters.get("selene", dtype="bf16")
    pricer = StepPricer(topo)
    assert pricer.kernel_seconds == constants.KERNEL_LAUNCH_S.value
    import inspect
    default = inspect.signature(StepPricer).parameters["gemm_efficiency"].default
    assert default == constants.GEMM_EFFICIENCY_16BIT.value
