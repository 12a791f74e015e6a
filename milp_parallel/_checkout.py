"""Find the benchmarks of a source checkout (they are not part of the installed package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["benchmarks_dir", "load_benchmark"]


def benchmarks_dir() -> Path | None:
    """The ``benchmarks/`` folder of the checkout this package runs from (an editable
    install), else of the current directory; ``None`` when neither has one."""
    for root in (Path(__file__).resolve().parents[1], Path.cwd()):
        d = root / "benchmarks"
        if (d / "reproduce.py").is_file() and (root / "milp_parallel").is_dir():
            return d
    return None


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` of the source checkout.

    Raises
    ------
    MissingDependencyError
        When the package does not run from a source checkout (an installed wheel): the
        message says how to get one.
    """
    d = benchmarks_dir()
    if d is None or not (d / f"{name}.py").is_file():
        raise MissingDependencyError(
            f"benchmarks/{name}.py is not installed with the package: it needs the source "
            "tree (its data/ and benchmarks/). Clone the repository and run it from there, "
            "e.g. python benchmarks/reproduce.py --quick")
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, d / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
