"""Inner solvers of the penalty path: the unconstrained pairwise problem, one round each.

A round hands over a pairwise problem (per node a cost vector, per edge a table; ``inf``
marks a forbidden entry) and a start assignment, and gets back an assignment of least cost
found within the seconds given:

* :class:`Toulbar2` (``pytoulbar2``, optional: ``pip install milp-parallel[toulbar]``):
  the weighted constraint solver, default settings, costs scaled to integers;
* :class:`Descent`: our own :class:`~milp_parallel.solvers.heuristics.LocalSearch` 1-opt
  and 2-opt moves from the start (always available, the fallback).

May import: ``problem``, ``solvers.heuristics``, ``solvers.options``; ``pytoulbar2`` inside
:class:`Toulbar2` only.
"""

from __future__ import annotations

import importlib.util
import logging
import math

import numpy as np

from ...problem import Problem
from ..heuristics import LocalSearch
from ..options import Deadline

__all__ = ["Toulbar2", "Descent", "INNER_SOLVERS", "inner_solver", "toulbar2_available"]

logger = logging.getLogger(__name__)

#: Integer scale of the largest finite total handed to toulbar2.
TB2_TOTAL = 1e12
#: toulbar2's forbidden cost (its initial upper bound), scaled units.
TB2_TOP = 1e15


def toulbar2_available() -> bool:
    return importlib.util.find_spec("pytoulbar2") is not None


class Descent:
    """1-opt and 2-opt descent from the start (no budget: the penalty is in the costs)."""

    name = "descent"

    def solve(self, unary: list[np.ndarray], edges: np.ndarray, tables: list[np.ndarray],
              start: np.ndarray, seconds: float) -> np.ndarray:
        p = Problem(unary, [tuple(e) for e in edges.tolist()], tables)
        ls = LocalSearch(p, Deadline(seconds))
        ls.set(start)
        for _ in range(20):
            ls.descend()
            if not ls.descend_pairs() or ls.deadline.passed():
                break
        return ls.a.copy()


class Toulbar2:
    """pytoulbar2 with its default search, ``seconds`` (whole seconds, at least 1) per round.

    The costs are shifted to ``>= 0`` per function and scaled so that the start assignment
    costs about :data:`TB2_TOTAL`; entries above :data:`TB2_TOP` are forbidden.
    """

    name = "toulbar2"

    def solve(self, unary: list[np.ndarray], edges: np.ndarray, tables: list[np.ndarray],
              start: np.ndarray, seconds: float) -> np.ndarray:
        import pytoulbar2

        n = len(unary)
        u = [np.asarray(x, dtype=np.float64) for x in unary]
        t = [np.asarray(x, dtype=np.float64) for x in tables]
        ref = sum(float(x[k]) for x, k in zip(u, start.tolist()))
        ref += sum(float(x[start[a], start[b]]) for x, (a, b) in zip(t, edges.tolist()))
        shift_u = [x - x[np.isfinite(x)].min() if np.isfinite(x).any() else x for x in u]
        shift_t = [x - x[np.isfinite(x)].min() if np.isfinite(x).any() else x for x in t]
        base = sum(float(x[k]) for x, k in zip(shift_u, start.tolist()))
        base += sum(float(x[start[a], start[b]]) for x, (a, b) in zip(shift_t,
                                                                     edges.tolist()))
        scale = TB2_TOTAL / max(base, 1e-300) if math.isfinite(base) and base > 0 else 1.0
        cap = TB2_TOP / 10

        def ints(x: np.ndarray) -> list:
            y = np.where(np.isfinite(x), np.minimum(np.rint(x * scale), cap), TB2_TOP)
            return y.ravel().tolist()

        cfn = pytoulbar2.CFN(ubinit=TB2_TOP, verbose=-1)
        for v in range(n):
            cfn.AddVariable(f"x{v}", range(u[v].size))
        for v in range(n):
            if u[v].size > 1 and np.any(shift_u[v] != 0):
                cfn.AddFunction([v], ints(shift_u[v]))
        for (a, b), x in zip(edges.tolist(), shift_t):
            cfn.AddFunction([int(a), int(b)], ints(x))
        try:
            res = cfn.Solve(timeLimit=max(1, int(seconds)))
        except Exception as exc:                          # noqa: BLE001 - its own errors
            logger.info("toulbar2 stopped: %s", exc)
            res = None
        sol = None
        if res is not None and res[0] is not None:
            sol = res[0]
        else:
            found = cfn.GetSolutions()
            if found:
                sol = found[-1][1]
        if sol is None:
            logger.info("toulbar2 found no solution in %.0f s; keeping the start", seconds)
            return start.copy()
        logger.debug("toulbar2 round: ref %.6g", ref)
        return np.asarray(sol, dtype=np.int64)


#: Inner solvers by name, in order of preference.
INNER_SOLVERS = ("toulbar2", "descent")


def inner_solver(name: str):
    """The inner solver ``name`` (``"auto"``: toulbar2 when installed, else descent)."""
    if name == "auto":
        name = "toulbar2" if toulbar2_available() else "descent"
    if name == "toulbar2" and not toulbar2_available():
        logger.info("pytoulbar2 is not installed; the penalty path uses descent")
        name = "descent"
    return Toulbar2() if name == "toulbar2" else Descent()
