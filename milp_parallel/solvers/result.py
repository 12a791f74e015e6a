"""The one result type and status vocabulary every solver returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = ["SolveResult", "Progress", "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "STATUSES",
           "OPTIMALITY_RTOL", "relative_gap"]

OPTIMAL = "optimal"        #: proved optimal (gap 0 within the solver's tolerance)
FEASIBLE = "feasible"      #: a solution, not proved optimal; see bound and gap
INFEASIBLE = "infeasible"  #: proved that no assignment satisfies the constraints
UNKNOWN = "unknown"        #: no solution and no proof (e.g. a time limit hit first)
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN)

#: A result is ``optimal`` only when its proved bound is within this relative distance of its
#: (re-evaluated) objective.
OPTIMALITY_RTOL = 1e-6


@dataclass(frozen=True)
class SolveResult:
    """What a solver returns.

    Attributes
    ----------
    assignment : numpy.ndarray or None
        One configuration index per node (``None`` when no solution was found).
    objective : float
        The assignment's cost evaluated on the problem (``nan`` without a solution).
    status : str
        One of ``"optimal"``, ``"feasible"``, ``"infeasible"``, ``"unknown"``. ``"optimal"``
        only when the solver proved it.
    bound : float
        A proved lower bound on the optimum (``-inf`` when none is known).
    gap : float
        Relative gap ``(objective - bound) / max(|objective|, tiny)``; 0 when optimal.
    seconds : float
        Wall-clock time of the solve.
    solver : str
        The solver's registry name.
    stats : Mapping
        Solver-specific statistics (eliminations, treewidth, nodes explored, ...).
    forbidden_entries : int
        How many chosen entries are forbidden (at or above the problem's ``forbidden_cost``,
        IOPDDL's ``1e18``): assignments compare by :attr:`key`, fewest first.
    allowed_cost : float
        The exact cost of the other chosen entries (``objective`` when none is forbidden;
        ``nan`` without a solution).
    """

    assignment: np.ndarray | None
    objective: float
    status: str
    bound: float
    gap: float
    seconds: float
    solver: str
    stats: Mapping[str, Any] = field(default_factory=dict)
    forbidden_entries: int = 0
    allowed_cost: float = math.nan

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if math.isnan(self.allowed_cost) and self.forbidden_entries == 0:
            object.__setattr__(self, "allowed_cost", float(self.objective))

    @property
    def key(self) -> tuple[int, float]:
        """``(forbidden_entries, allowed_cost)``: the order in which answers compare."""
        return (self.forbidden_entries, self.allowed_cost)

    @property
    def is_optimal(self) -> bool:
        return self.status == OPTIMAL

    def __repr__(self) -> str:
        forbidden = (f"forbidden_entries={self.forbidden_entries}, allowed_cost="
                     f"{self.allowed_cost:.6g}, " if self.forbidden_entries else "")
        return (f"SolveResult(solver={self.solver!r}, status={self.status!r}, "
                f"objective={self.objective:.6g}, {forbidden}bound={self.bound:.6g}, "
                f"gap={self.gap:.3g}, seconds={self.seconds:.3f})")


def relative_gap(objective: float, bound: float) -> float:
    """``(objective - bound) / max(|objective|, 1e-12)``, 0 when both are equal."""
    if not np.isfinite(objective):
        return float("inf")
    if not np.isfinite(bound):
        return float("inf")
    return max(0.0, (objective - bound) / max(abs(objective), 1e-12))


@dataclass(frozen=True)
class Progress:
    """What a ``callback`` receives while a backend searches.

    Attributes
    ----------
    solver : str
    seconds : float
        Since the solve started.
    objective : float
        The best assignment's cost so far (``inf`` without one).
    bound : float
        The best proved lower bound so far (``-inf`` without one).
    """

    solver: str
    seconds: float
    objective: float
    bound: float

    @property
    def gap(self) -> float:
        return relative_gap(self.objective, self.bound)
