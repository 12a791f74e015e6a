"""The narrow middle of the data flow: a :class:`Problem` is all a solver ever sees.

:mod:`.tables` holds :class:`Problem` (node and edge cost tables, memory, liveness
intervals, budgets; evaluation of an assignment) and our JSON format; :mod:`.iopddl` the
IOPDDL contest's format. May import: ``io``, ``units``, ``errors``, numpy; nothing above.
"""

from .tables import (
    FORBIDDEN_COST,
    MEMORY_RTOL,
    PROBLEM_FORMAT,
    PROBLEM_FORMAT_VERSION,
    Evaluation,
    Problem,
    load_problem,
)

__all__ = ["Problem", "Evaluation", "load_problem", "PROBLEM_FORMAT", "PROBLEM_FORMAT_VERSION",
           "FORBIDDEN_COST", "MEMORY_RTOL"]
