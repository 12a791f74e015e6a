"""The penalty path for interval memory budgets (issue 25): per-node memory weights, rounds
of unconstrained solves, memory-aware polish.

May import: ``solvers.penalty.backend``.
"""

from .backend import PenaltySolver

__all__ = ["PenaltySolver"]
