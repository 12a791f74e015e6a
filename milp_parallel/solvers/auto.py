"""``solver="auto"``: pick a backend by evidence.

Rule (:func:`choose`):

1. No memory budget, or the all-live model: ``"dp"`` when available (exact and fastest;
   its budget search is a Lagrangian branch-and-bound that stays exact).
2. Otherwise (interval memory with a budget, which the DP does not handle, or no dp module):
   ``"highs"`` when highspy is installed, else ``"cbc"``, else ``"cpsat"``.

Evidence (``python benchmarks/solver_scaling.py --quick --time-limit 30``; 2 shared cores,
1 thread per MILP backend; seconds are total = build (warm start + presolve + formulation,
about the same for every backend) + the solver; ``+budget`` = binding all-live budget):

=====================  ==============  ==============  ===================  ==========
case                   highs           cbc             cpsat                dp
=====================  ==============  ==============  ===================  ==========
IOPDDL G (intervals)   optimal 6.3 s   optimal 10.9 s  feasible at 30 s     refuses
chain-100-16           optimal 0.9 s   optimal 1.1 s   feasible at 30 s     0.00 s
chain-100-16+budget    optimal 1.0 s   optimal 4.1 s   feasible at 30 s     0.06 s
chain-200-32           optimal 5.3 s   optimal 11 s    feasible at 30 s     0.02 s
chain-200-32+budget    optimal 12 s    gap 6e-4, 30 s  gap 0.66, 30 s       5.6 s
sp-100-16+budget       optimal 5.9 s   gap 8e-4, 30 s  gap 0.51, 30 s       2.6 s
sp-200-32              optimal 7.1 s   optimal 20 s    feasible at 30 s     -
=====================  ==============  ==============  ===================  ==========

So: the DP where it is exact; otherwise HiGHS, then CBC (slower, same answers), then CP-SAT
(which rarely closes these LP-tight models within a minute). Before presolve, CBC held a
solution 6000x off the optimum of G after 300 s.
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
        A registry name of an available solver that accepts the problem.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0])], [], [])
    >>> choose(p) in ("dp", "highs", "cbc", "cpsat")
    True
    """
    from . import get_solver

    for name in ("dp",) + PREFERENCE:
        backend = get_solver(name)
        if backend.available() and backend.accepts(problem) is None:
            return name
    return PREFERENCE[0]
