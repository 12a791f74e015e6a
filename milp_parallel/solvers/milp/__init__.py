"""The MILP path: one formulation, three solvers, one proof each.

=============  =========================================================================
module         what it holds
=============  =========================================================================
``presolve``   reductions that keep an optimum (MILP-side reasoning only)
``model``      the local-polytope formulation as sparse arrays (:class:`MilpModel`)
``backend``    the flow every backend shares and the checked mapping of its answer
``highs``      HiGHS through highspy
``cbc``        CBC, PuLP's bundled binary
``cpsat``      OR-Tools CP-SAT
=============  =========================================================================

The default path is independent of the exact graph search (:mod:`milp_parallel.solvers.dp`):
its incumbent comes from :mod:`~milp_parallel.solvers.heuristics`, its presolve from the
problem's tables and the LP relaxation's dual (:mod:`~milp_parallel.solvers.dual`); only
``presolve="dp"`` lets the exact search speed it up, and a cross-check never uses that.
"""

from .backend import MilpBackend, NativeResult, finish_result
from .model import MilpModel, formulate, merge_duplicate_entries
from .presolve import DP_REDUCTIONS, REDUCTIONS, MemoryRow, Reduced, presolve

__all__ = ["MilpBackend", "NativeResult", "finish_result", "MilpModel", "formulate",
           "merge_duplicate_entries", "REDUCTIONS", "DP_REDUCTIONS", "MemoryRow", "Reduced",
           "presolve"]
