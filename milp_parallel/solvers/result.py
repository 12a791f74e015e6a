"""The one result type and status vocabulary every solver returns, and the incumbent
value solvers carry between their steps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

__all__ = ["SolveResult", "Progress", "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "STATUSES",
           "OPTIMALITY_RTOL", "relative_gap", "STATS_KEYS", "Incumbent", "best_incumbent"]

OPTIMAL = "optimal"        #: proved optimal (gap 0 within the solver's tolerance)
FEASIBLE = "feasible"      #: a solution, not proved optimal; see bound and gap
INFEASIBLE = "infeasible"  #: proved that no assignment satisfies the constraints
UNKNOWN = "unknown"        #: no solution and no proof (e.g. a time limit hit first)
STATUSES = (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN)

#: Every key a backend may put in :attr:`SolveResult.stats`, with its meaning: one spelling
#: each, declared once (``tests/test_backend_contract.py`` checks that no backend writes a key
#: missing here).
STATS_KEYS: dict[str, str] = {
    # every backend
    "forbidden_entries": "forbidden (>= forbidden_cost) entries the answer uses",
    "forbidden_marker": "the cost of one forbidden entry in the lexicographic copy solved",
    "sentinel_entries": "the same count, under the MILP backends' older name",
    "least_peak_memory": "per device, the least peak memory any assignment reaches (bytes)",
    "used_exact_search": "whether the exact graph search took part (presolve='dp')",
    "isolated": "whether the solve ran in a child process (a kill-able time limit)",
    "auto": "the backend solve(..., 'auto') chose",
    # the exact search (dp)
    "ordering": "the elimination ordering's heuristic", "treewidth": "its width",
    "largest_table": "the largest table the elimination built (entries)",
    "node_eliminations": "degree-2 eliminations", "edge_eliminations": "parallel edges merged",
    "leaf_eliminations": "degree-1 eliminations",
    "single_config_eliminations": "nodes with one configuration folded",
    "nodes_left": "nodes left for the tree decomposition",
    "binding_devices": "devices whose budget binds", "branch_nodes": "budget search nodes",
    "dp_runs": "unconstrained solves of the budget search",
    "fixed_configs": "configurations fixed by the budget search's bounds",
    "lagrangian_iterations": "iterations of the Lagrangian bound",
    "local_searches": "local searches of the budget search",
    "merges": "Pareto merges of the budget search",
    "shrunk_branch_nodes": "budget search nodes on the shrunk problem",
    "shrunk_configs": "configurations the shrunk problem keeps",
    "shrunk_dp_runs": "unconstrained solves on the shrunk problem",
    "shrunk_fixed_configs": "configurations fixed on the shrunk problem",
    "shrunk_status": "the shrunk problem's status",
    "window_table": "the window search's largest table", "window_width": "its width",
    "pareto": "why the exact Pareto search of one binding device did not finish",
    "pareto_points": "the Pareto points that search kept",
    "time_limit_reached": "whether the time limit stopped the search",
    # brute force
    "n_assignments": "assignments enumerated", "n_finite_cost": "those of finite cost",
    "timed_out": "whether the enumeration stopped at the time limit",
    # the MILP backends
    "presolve": "'milp' (its own reasoning) or 'dp' (the exact search's steps too)",
    "reductions": "what each presolve step removed", "presolve_bound": "presolve's bound",
    "presolve_seconds": "seconds of presolve", "presolve_cut": "presolve steps the deadline cut",
    "warm_start_source": "where the incumbent came from (heuristic, user, dp)",
    "incumbent_seconds": "seconds spent finding it",
    "incumbent_bad_entries": "forbidden entries the heuristic's incumbent uses",
    "estimated_nonzeros": "nonzeros of the full model, estimated before it is built",
    "model_skipped": "why no model was built (too many nonzeros, no contraction)",
    "formulate_seconds": "seconds to write the model", "build_seconds": "seconds to it",
    "variables": "model variables", "binaries": "of them binary", "rows": "model rows",
    "onehot_rows": "one-configuration-per-node rows", "marginal_rows": "edge marginal rows",
    "memory_rows": "memory rows", "nonzeros": "model nonzeros",
    "solver_time_limit": "the limit handed to the solver library (seconds)",
    "cost_scale": "the factor costs were scaled by for the solver",
    "mip_nodes": "branch-and-bound nodes", "native_status": "the library's own status",
    "solve_seconds": "seconds in the library", "solver_objective": "its objective",
    "solver_bound": "its bound", "proof": "what proved the status (solver, contracted, ...)",
    "contracted": "the contraction's groups, states, edges and seconds",
    "row_generation": "rounds and rows of memory-row generation",
    "penalty": "the penalty backend's rounds: inner solver, rounds, fitted, risky nodes",
    "lagrangian": "the interval Lagrangian bound: bound, unconstrained bound, rows, "
                  "priced rows, iterations, rounds, sweeps, infeasible, seconds",
    "cpsat_model": "CP-SAT's formulation", "cpsat_build_seconds": "seconds it took to build",
    "ignored_options": "options this backend does not use (a sweep passes one set to all)",
    "killed_at_time_limit": "whether the isolated solve was killed at the limit",
}

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


@dataclass(frozen=True)
class Incumbent:
    """A feasible assignment, evaluated once: what a solver's steps hand each other.

    Build it with :meth:`of`, which evaluates the assignment on its problem and gives
    ``None`` for no assignment or an infeasible one, so that no step re-evaluates a bare
    array to learn what it is worth.

    Attributes
    ----------
    assignment : numpy.ndarray
        One configuration index per node (int64).
    cost : float
        Its objective on the problem it was evaluated on.
    forbidden_entries : int
        Chosen entries at or above that problem's ``forbidden_cost``.
    source : str
        Where it came from (``"user"``, ``"heuristic"``, ``"dp"``, ``"solver"``, ...).
    """

    assignment: np.ndarray
    cost: float
    forbidden_entries: int
    source: str

    @classmethod
    def of(cls, problem: Any, assignment: Any, source: str) -> Incumbent | None:
        """The incumbent ``assignment`` is on ``problem``, or ``None`` when there is no
        assignment or it is not feasible."""
        if assignment is None:
            return None
        a = np.asarray(assignment, dtype=np.int64)
        ev = problem.evaluate(a)
        if not ev.feasible:
            return None
        return cls(a, float(ev.cost), int(ev.forbidden_entries), source)

    @property
    def key(self) -> tuple[int, float]:
        """``(forbidden_entries, cost)``: the order in which incumbents compare."""
        return (self.forbidden_entries, self.cost)


def best_incumbent(*incumbents: Incumbent | None) -> Incumbent | None:
    """The best of some incumbents (``None`` ignored): fewest forbidden entries, then the
    least cost; the first on a tie."""
    found = [i for i in incumbents if i is not None]
    return min(found, key=lambda i: i.key) if found else None
