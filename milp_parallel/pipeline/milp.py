"""A small sparse MILP of non-negative columns, solved by the one HiGHS adapter.

Built column by column and handed to :func:`~milp_parallel.solvers.milp.highs.run_highs`;
every HiGHS status is checked.

May import: ``errors``, ``solvers.milp`` (``highs``, ``model``), ``solvers.result``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import SolverError
from ..solvers.milp.highs import run_highs
from ..solvers.milp.model import merge_duplicate_entries
from ..solvers.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN

#: HiGHS's settings for the pipeline's models: a near-exact gap, one thread, quiet.
_SETTINGS = {"verbose": False, "gap": 1e-7, "threads": 1, "random_seed": 0,
             "highs_presolve": "on", "no_probing": False, "callback": None}


@dataclass(frozen=True)
class _MilpAnswer:
    """What a solve found.

    Attributes
    ----------
    status : str
        :data:`~milp_parallel.solvers.result.OPTIMAL`, ``INFEASIBLE``, or at a time limit
        ``FEASIBLE`` (a solution) / ``UNKNOWN`` (none).
    objective : float
        The solution's objective (``inf`` without one).
    values : numpy.ndarray or None
        The column values.
    bound : float
        A lower bound on the optimum (the objective when optimal, ``inf`` when infeasible,
        ``-inf`` when none is known).
    """

    status: str
    objective: float
    values: np.ndarray | None
    bound: float


class _SparseMilp:
    """Columns (all ``>= 0``) with costs, upper bounds and integrality; rows
    ``lo <= a x <= hi``; minimized."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.hi: list[float] = []
        self.integer: list[bool] = []
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def var(self, cost=0.0, hi=math.inf, integer=False, n=None):
        """One column (its index) or, with ``n``, ``n`` columns (an index array)."""
        if n is None:
            self.cost.append(float(cost))
            self.hi.append(float(hi))
            self.integer.append(bool(integer))
            return len(self.cost) - 1
        start = len(self.cost)
        cost = np.broadcast_to(np.asarray(cost, float), (n,))
        self.cost.extend(cost.tolist())
        self.hi.extend([float(hi)] * n)
        self.integer.extend([bool(integer)] * n)
        return np.arange(start, start + n)

    def row(self, idx, val, lo=-math.inf, hi=math.inf) -> None:
        idx = np.asarray(idx, np.int64).ravel()
        val = np.broadcast_to(np.asarray(val, float), idx.shape).ravel()
        nz = val != 0
        self.rows.append((float(lo), float(hi), idx[nz].tolist(), val[nz].tolist()))

    def solve(self, time_limit: float | None = None,
              start: np.ndarray | None = None) -> _MilpAnswer:
        """Solve with HiGHS; ``start``: a feasible solution to begin from.

        Raises
        ------
        SolverError
            HiGHS failed, or stopped for another reason than an optimum, a proof of
            infeasibility or the time limit (the message names HiGHS's status).
        """
        lengths = [len(r[2]) for r in self.rows]
        start_rows = np.r_[0, np.cumsum(lengths, dtype=np.int64)]
        index = np.fromiter((i for r in self.rows for i in r[2]), np.int64, start_rows[-1])
        value = np.fromiter((a for r in self.rows for a in r[3]), float, start_rows[-1])
        start_rows, index, value = merge_duplicate_entries(start_rows, index, value)
        arrays = {"col_cost": np.asarray(self.cost, float),
                  "col_upper": np.asarray(self.hi, float),
                  "row_lower": np.array([r[0] for r in self.rows], float),
                  "row_upper": np.array([r[1] for r in self.rows], float),
                  "start": start_rows, "index": index, "value": value,
                  "integer": self.integer,
                  "warm": None if start is None else np.asarray(start, float)}
        deadline = None if time_limit is None else time.time() + float(time_limit)
        out = run_highs(arrays, {**_SETTINGS, "deadline_epoch": deadline})
        values = out["values"]
        objective = math.inf if values is None else float(arrays["col_cost"] @ values)
        if out["optimal"] and values is not None:
            return _MilpAnswer(OPTIMAL, objective, values, objective)
        if out["infeasible"]:
            return _MilpAnswer(INFEASIBLE, math.inf, None, math.inf)
        if out["time_limit"]:
            return _MilpAnswer(FEASIBLE if values is not None else UNKNOWN, objective, values,
                               out["bound"])
        raise SolverError(f"pipeline: HiGHS stopped on a planner MILP with status "
                          f"{out['status']!r} ({len(self.cost)} columns, {len(self.rows)} "
                          "rows) where an optimum, infeasibility or the time limit was "
                          "expected; please report it with the model and the options")
