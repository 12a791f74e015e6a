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
assignment overflows), :mod:`.kbest` (the k best assignments). The registry lives in
:mod:`.registry`, the one entry point in :mod:`.solve`; this module only re-exports.
"""

from __future__ import annotations

from .base import Capabilities, Solver
from .registry import MILP_SOLVERS, available_solvers, get_solver, solver_names
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, STATUSES, UNKNOWN, Progress, SolveResult
from .solve import solve_problem

__all__ = ["solve_problem", "get_solver", "solver_names", "available_solvers", "Solver",
           "Capabilities", "SolveResult", "Progress", "OPTIMAL", "FEASIBLE", "INFEASIBLE",
           "UNKNOWN", "STATUSES", "MILP_SOLVERS"]
