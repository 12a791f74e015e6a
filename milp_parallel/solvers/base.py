"""The interface every solver backend implements (the way cvxpy's solver interfaces are built).

A backend is a thin adapter: it declares its name, the package it needs and its capabilities,
and maps its native statuses into the one vocabulary of :mod:`milp_parallel.solvers.result`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from ..problem import Problem
from .result import SolveResult

__all__ = ["Capabilities", "Solver"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do.

    Attributes
    ----------
    exact : bool
        Proves optimality (every backend here can, given time).
    memory_all_live : bool
        Handles a memory budget with every node live at once.
    memory_intervals : bool
        Handles memory over liveness intervals (the IOPDDL model).
    time_limit : bool
        Honours ``time_limit`` (returning ``feasible``/``unknown`` when it runs out).
    """

    exact: bool = True
    memory_all_live: bool = True
    memory_intervals: bool = True
    time_limit: bool = True


class Solver:
    """Base class of solver backends.

    Subclasses set ``name``, ``package`` (the pip package that provides it, or ``None``),
    ``module`` (the import that must succeed) and ``capabilities``, and implement
    :meth:`solve`.
    """

    name: str = ""
    package: str | None = None
    module: str | None = None
    capabilities: Capabilities = Capabilities()

    def available(self) -> bool:
        """Whether the package behind this backend can be imported."""
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def solve(self, problem: Problem, **options: Any) -> SolveResult:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} available={self.available()}>"
