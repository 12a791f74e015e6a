"""``solver="auto"``: pick a backend by evidence.

Rule (:func:`choose`):

1. No memory budget, or the all-live model: ``"dp"`` when available (exact and fastest;
   its budget search is a Lagrangian branch-and-bound that stays exact).
2. Otherwise (interval memory with a budget, which the DP does not handle, or no dp module):
   ``"highs"`` when highspy is installed, else ``"cbc"``, else ``"cpsat"``.

Evidence (``python benchmarks/solver_scaling.py``, this machine: 2 shared cores, 1 thread
each; build = presolve + formulation, the same for every backend):

=====================================  ===========  ===========  =================
instance                               highs        cbc          cpsat
=====================================  ===========  ===========  =================
IOPDDL G (816 nodes, interval budget)  optimal 5 s  optimal 9 s  feasible at 20 s,
                                                                 gap 0.999
=====================================  ===========  ===========  =================

(IOPDDL G: all three share ~2.5 s of presolve/build; before presolve CBC held a solution
6000x off the optimum after 300 s.) See ``benchmarks/solver_scaling.py`` for the random
chain / series-parallel cases behind the ordering of the fallbacks.
"""

from __future__ import annotations

from ..problem import Problem

__all__ = ["choose", "PREFERENCE"]

#: MILP backends in order of preference (by the measurements above).
PREFERENCE = ("highs", "cbc", "cpsat")


def choose(problem: Problem) -> str:
    """The solver name ``"auto"`` stands for on this problem.

    Parameters
    ----------
    problem : Problem

    Returns
    -------
    str
        A registry name of an available solver.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0])], [], [])
    >>> choose(p) in ("dp", "highs", "cbc", "cpsat")
    True
    """
    from . import get_solver

    interval_budget = problem.has_budget and problem.intervals is not None
    if not interval_budget:
        try:
            if get_solver("dp").available():
                return "dp"
        except Exception:  # dp module missing or broken: fall back to a MILP backend
            pass
    for name in PREFERENCE:
        if get_solver(name).available():
            return name
    return "dp" if not interval_budget else PREFERENCE[0]
