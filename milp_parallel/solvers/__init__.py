"""Solvers for :class:`~milp_parallel.Problem`, all behind :func:`solve_problem`.

=========  ==========================================================================
name       what it is
=========  ==========================================================================
``dp``     exact graph search: OptCNN's node/edge eliminations, then variable
           elimination along a tree decomposition (:mod:`.dp`)
``brute``  exhaustive enumeration, for tiny instances and tests (:mod:`.brute`)
``cbc``    the MILP through PuLP's CBC (:mod:`.milp.cbc`)
``highs``  the MILP through highspy (:mod:`.milp.highs`)
``cpsat``  the MILP through OR-Tools CP-SAT (:mod:`.milp.cpsat`)
``auto``   picks one by measured evidence (:mod:`.auto`)
=========  ==========================================================================

Shared pieces: :mod:`.options` (validation, deadlines), :mod:`.base` (the backend template),
:mod:`.result` (the one result type and status vocabulary), :mod:`.memory` (memory rows),
:mod:`.heuristics` (incumbents without an exact search), :mod:`.dual` (the LP relaxation's
dual), :mod:`.contract` (one-to-one edges contracted into groups, and the memory rows an
assignment overflows).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ..errors import SolverUnavailableError, UnknownNameError
from ..io import suggest
from ..problem import Problem
from .base import Capabilities, Solver
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, STATUSES, UNKNOWN, Progress, SolveResult

__all__ = ["solve_problem", "get_solver", "solver_names", "available_solvers", "Solver",
           "Capabilities", "SolveResult", "Progress", "OPTIMAL", "FEASIBLE", "INFEASIBLE",
           "UNKNOWN", "STATUSES", "MILP_SOLVERS"]

#: Registry: solver name -> "module:ClassName" (imported lazily, so a missing optional
#: package only matters when that solver is asked for).
_BACKENDS = {
    "dp": "milp_parallel.solvers.dp:DPSolver",
    "brute": "milp_parallel.solvers.brute:BruteForceSolver",
    "cbc": "milp_parallel.solvers.milp.cbc:CBCSolver",
    "highs": "milp_parallel.solvers.milp.highs:HiGHSSolver",
    "cpsat": "milp_parallel.solvers.milp.cpsat:CPSATSolver",
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


def solve_problem(problem: Problem, solver: str = "auto", **options: Any) -> SolveResult:
    """Solve a :class:`~milp_parallel.Problem` with the named solver.

    Parameters
    ----------
    problem : Problem
    solver : str
        A name from :func:`solver_names`; ``"auto"`` (default) picks the best available
        backend for this problem (see :func:`milp_parallel.solvers.auto.choose`).
    **options
        Passed to the backend: common ones are ``time_limit`` (seconds for the whole
        solve), ``threads``, ``gap`` (relative, default 0: exact), ``verbose``,
        ``warm_start`` (an assignment), ``callback`` (called with a
        :class:`~milp_parallel.solvers.result.Progress` as the search improves).

    Returns
    -------
    SolveResult

    Raises
    ------
    UnknownNameError
        For an unknown solver name.
    SolverUnavailableError
        If the solver's package is not installed (names the package to install).
    InvalidOptionError
        For an unknown option or a bad value.
    UnsupportedProblemError
        When the solver cannot handle the problem (names one that can).
    """
    if isinstance(problem, (str, os.PathLike)):
        from ..problem import load_problem
        problem = load_problem(problem)            # our JSON or an IOPDDL file, by content
    if not isinstance(problem, Problem):
        from ..errors import InvalidOptionError
        raise InvalidOptionError(f"solve_problem expects a Problem or the path of a problem "
                                 f"file (ours or IOPDDL's), got {type(problem).__name__}")
    if solver == "auto":
        from .auto import choose
        name = choose(problem)
        result = get_solver(name).solve(problem, **options)
        result.stats["auto"] = name
        return result
    backend = get_solver(solver)
    if not backend.available():
        raise SolverUnavailableError(
            f"solver {solver!r} needs the package {backend.package!r}: pip install "
            f"{backend.package}")
    return backend.solve(problem, **options)
