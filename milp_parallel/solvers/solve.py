"""``solve_problem``: one call for every backend, ``"auto"`` included.

May import: ``problem``, ``errors``, ``solvers.registry``, ``solvers.auto``, ``solvers.result``.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import SolverUnavailableError
from ..problem import Problem
from .registry import get_solver
from .result import SolveResult

__all__ = ["solve_problem"]


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
