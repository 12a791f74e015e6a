"""The solver registry: a name -> its backend class, imported lazily.

May import: ``errors``, ``io`` and ``solvers.base`` only (a missing optional package matters
only when its solver is asked for).
"""

from __future__ import annotations

import importlib

from ..errors import UnknownNameError
from ..io import suggest
from .base import Solver

__all__ = ["get_solver", "solver_names", "available_solvers", "MILP_SOLVERS"]

#: Registry: solver name -> "module:ClassName" (imported lazily, so a missing optional
#: package only matters when that solver is asked for).
_BACKENDS = {
    "dp": "milp_parallel.solvers.dp:DPSolver",
    "brute": "milp_parallel.solvers.brute:BruteForceSolver",
    "cbc": "milp_parallel.solvers.milp.cbc:CBCSolver",
    "highs": "milp_parallel.solvers.milp.highs:HiGHSSolver",
    "cpsat": "milp_parallel.solvers.milp.cpsat:CPSATSolver",
    "penalty": "milp_parallel.solvers.penalty:PenaltySolver",
    "portfolio": "milp_parallel.solvers.penalty.portfolio:PortfolioSolver",
}

#: The MILP backends (the registry names whose proof is a MILP solver's).
MILP_SOLVERS = ("highs", "cbc", "cpsat")


def solver_names() -> tuple[str, ...]:
    """Every registered solver name (available or not), plus ``"auto"``."""
    return tuple(_BACKENDS) + ("auto",)


def get_solver(name: str) -> Solver:
    """The backend registered as ``name``.

    Raises
    ------
    UnknownNameError
        If no solver has that name (lists the known ones).
    """
    try:
        spec = _BACKENDS[name]
    except KeyError:
        raise UnknownNameError(f"unknown solver {name!r}{suggest(name, solver_names()) or ';'} "
                               f"known solvers: {', '.join(solver_names())}") from None
    module, cls = spec.split(":")
    return getattr(importlib.import_module(module), cls)()


def available_solvers() -> tuple[str, ...]:
    """Names of the solvers whose packages are installed."""
    return tuple(n for n in _BACKENDS if get_solver(n).available())
