"""The MILP model: the local-polytope formulation as sparse arrays, built once.

A reduced problem (:class:`~.presolve.Reduced`) becomes one sparse model
(:class:`MilpModel`) that each backend hands to its solver as arrays:

* binary ``x[v, c]``: one-hot per node, ``sum_c x[v, c] = 1``;
* continuous ``y[e, c, c'] >= 0`` per edge ``e = (u, v)``, only for allowed pairs, with the
  **marginal (local-polytope) constraints** ``sum_c' y[e, c, c'] = x[u, c]`` and
  ``sum_c y[e, c, c'] = x[v, c']`` (never the weak ``y >= x_u + x_v - 1`` form: on trees
  the LP relaxation of this one is integral);
* memory rows ``sum_v sum_c m(v, c) x[v, c] <= M``: the rows presolve kept;
* objective ``sum x . node_costs + sum y . edge_costs + offset``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .presolve import Reduced

__all__ = ["MilpModel", "formulate", "merge_duplicate_entries", "objective_scale"]


@dataclass(frozen=True)
class MilpModel:
    """The reduced problem as one sparse MILP, ready for a backend.

    Columns are the ``x`` variables of every free node (in node order, then configuration
    order), then the ``y`` variables of every edge (in edge order, row-major over the allowed
    pairs). Rows are stored row-wise (CSR): ``row_start`` (``n_rows + 1``), ``row_index``,
    ``row_value``, with ``row_lower <= A x <= row_upper``.

    Attributes
    ----------
    reduced : Reduced
    col_cost, col_upper : numpy.ndarray
    col_integer : numpy.ndarray
        ``True`` for the binaries ``x``.
    row_start, row_index, row_value, row_lower, row_upper : numpy.ndarray
    offset : float
        Add to the model's objective to get the problem's.
    x_start : numpy.ndarray
        Per original node, the first ``x`` column (``-1`` when fixed).
    y_start : numpy.ndarray
        Per reduced edge, its first ``y`` column; ``y_pairs[e]`` lists its pairs.
    y_pairs : tuple of numpy.ndarray
        Per reduced edge, ``(P, 2)`` local index pairs of its ``y`` columns.
    n_onehot, n_marginal, n_memory : int
        Row counts by kind (in this order).
    build_seconds : float
    """

    reduced: Reduced
    col_cost: np.ndarray
    col_upper: np.ndarray
    col_integer: np.ndarray
    row_start: np.ndarray
    row_index: np.ndarray
    row_value: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    offset: float
    x_start: np.ndarray
    y_start: np.ndarray
    y_pairs: tuple
    n_onehot: int
    n_marginal: int
    n_memory: int
    build_seconds: float

    @property
    def n_cols(self) -> int:
        return int(self.col_cost.size)

    @property
    def n_rows(self) -> int:
        return int(self.row_lower.size)

    @property
    def n_x(self) -> int:
        return int(self.col_integer.sum())

    def rows(self):
        """Iterate ``(index array, value array, lower, upper)`` per row."""
        s = self.row_start
        for r in range(self.n_rows):
            yield (self.row_index[s[r]:s[r + 1]], self.row_value[s[r]:s[r + 1]],
                   float(self.row_lower[r]), float(self.row_upper[r]))

    def decode(self, values: np.ndarray) -> np.ndarray:
        """The original assignment from a column vector (the largest ``x`` per node wins)."""
        values = np.asarray(values, dtype=float)
        red = self.reduced
        local = {}
        for v in red.free_nodes:
            k = red.configs[v].size
            s = self.x_start[v]
            local[int(v)] = int(np.argmax(values[s:s + k]))
        return red.expand(local)

    def encode(self, assignment: Sequence[int]) -> np.ndarray | None:
        """Column values of an original assignment, or ``None`` if it is not representable."""
        red = self.reduced
        a = np.asarray(assignment, dtype=np.int64)
        if np.any((red.fixed >= 0) & (a != red.fixed)):
            return None
        col = np.zeros(self.n_cols)
        local = {}
        for v in red.free_nodes:
            hit = np.nonzero(red.configs[v] == a[v])[0]
            if hit.size == 0:
                return None
            local[int(v)] = int(hit[0])
            col[self.x_start[v] + hit[0]] = 1.0
        for e, (u, v) in enumerate(red.edges):
            pairs = self.y_pairs[e]
            hit = np.nonzero((pairs[:, 0] == local[int(u)]) & (pairs[:, 1] == local[int(v)]))[0]
            if hit.size == 0:
                return None
            col[self.y_start[e] + hit[0]] = 1.0
        return col

    def stats(self) -> dict:
        """Sizes and presolve counts for a result's ``stats``."""
        out = {"variables": self.n_cols, "binaries": self.n_x, "rows": self.n_rows,
               "onehot_rows": self.n_onehot, "marginal_rows": self.n_marginal,
               "memory_rows": self.n_memory, "nonzeros": int(self.row_index.size),
               "build_seconds": self.build_seconds}
        out["reductions"] = dict(self.reduced.stats)
        return out


def merge_duplicate_entries(start: np.ndarray, index: np.ndarray,
                            value: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge repeated column indices inside each row of a CSR matrix (their values add).

    highspy's ``addRows`` silently drops a row that names a column twice; every backend gets
    rows cleaned by this. Entries that sum to zero are dropped.

    Parameters
    ----------
    start : numpy.ndarray
        ``n_rows + 1`` row starts.
    index, value : numpy.ndarray
        Column indices and values.

    Returns
    -------
    tuple of numpy.ndarray
        ``(start, index, value)`` with each row's columns unique and sorted.

    Examples
    --------
    >>> s, i, v = merge_duplicate_entries(np.array([0, 3]), np.array([2, 0, 2]),
    ...                                   np.array([1.0, 5.0, 2.0]))
    >>> s.tolist(), i.tolist(), v.tolist()
    ([0, 2], [0, 2], [5.0, 3.0])
    """
    start = np.asarray(start, dtype=np.int64)
    index = np.asarray(index, dtype=np.int64)
    value = np.asarray(value, dtype=np.float64)
    n_rows = start.size - 1
    row = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(start))
    if index.size == 0:
        return start.copy(), index.copy(), value.copy()
    n_cols = int(index.max()) + 1
    key = row * n_cols + index
    uniq, inv = np.unique(key, return_inverse=True)
    val = np.zeros(uniq.size)
    np.add.at(val, inv, value)
    keep = val != 0
    uniq, val = uniq[keep], val[keep]
    r = uniq // n_cols
    new_start = np.zeros(n_rows + 1, dtype=np.int64)
    np.add.at(new_start, r + 1, 1)
    return np.cumsum(new_start), uniq % n_cols, val


def formulate(reduced: Reduced) -> MilpModel:
    """Build the sparse MILP of a reduced problem (see :class:`MilpModel`)."""
    t0 = time.perf_counter()
    n = reduced.problem.n_nodes
    x_start = np.full(n, -1, dtype=np.int64)
    pos = 0
    costs = []
    free = reduced.free_nodes
    for v in free:
        k = reduced.configs[v].size
        x_start[v] = pos
        pos += k
        costs.append(reduced.node_costs[v])
    n_x = pos
    y_start = np.zeros(len(reduced.edge_costs), dtype=np.int64)
    y_pairs = []
    for e, t in enumerate(reduced.edge_costs):
        ci, cj = np.nonzero(np.isfinite(t))
        y_start[e] = pos
        y_pairs.append(np.stack([ci, cj], axis=1))
        costs.append(t[ci, cj])
        pos += ci.size
    col_cost = np.concatenate(costs) if costs else np.zeros(0)
    col_integer = np.zeros(pos, dtype=bool)
    col_integer[:n_x] = True

    starts = [np.zeros(1, dtype=np.int64)]
    idx_parts, val_parts, lo_parts, hi_parts = [], [], [], []
    nnz = 0

    def add_rows(lengths: np.ndarray, index: np.ndarray, value: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray) -> None:
        nonlocal nnz
        starts.append(nnz + np.cumsum(lengths))
        nnz += int(lengths.sum())
        idx_parts.append(index)
        val_parts.append(value)
        lo_parts.append(lo)
        hi_parts.append(hi)

    # One-hot rows.
    ks = np.array([reduced.configs[v].size for v in free], dtype=np.int64)
    if free.size:
        add_rows(ks, np.arange(n_x, dtype=np.int64), np.ones(n_x), np.ones(free.size),
                 np.ones(free.size))
    n_onehot = int(free.size)
    # Marginal rows: for each edge, one per config of u and one per config of v.
    n_marg = 0
    for e, (u, v) in enumerate(reduced.edges):
        pairs = y_pairs[e]
        cols = y_start[e] + np.arange(pairs.shape[0])
        for side, node in ((0, int(u)), (1, int(v))):
            k = reduced.configs[node].size
            order = np.argsort(pairs[:, side], kind="stable")
            counts = np.bincount(pairs[:, side], minlength=k)
            # Row c: the y columns with pair[side] == c, then -x[node, c].
            lengths = counts + 1
            index = np.empty(int(lengths.sum()), dtype=np.int64)
            value = np.empty(index.size)
            row_pos = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            # Place y entries.
            y_sorted = cols[order]
            first = np.concatenate([[0], np.cumsum(counts)[:-1]])
            within = np.arange(order.size) - np.repeat(first, counts)
            tgt = np.repeat(row_pos, counts) + within
            index[tgt] = y_sorted
            value[tgt] = 1.0
            xpos = row_pos + counts
            index[xpos] = x_start[node] + np.arange(k)
            value[xpos] = -1.0
            add_rows(lengths, index, value, np.zeros(k), np.zeros(k))
            n_marg += k
    # Memory rows.
    n_mem = 0
    for row in reduced.rows:
        index = np.concatenate([x_start[v] + np.arange(c.size) for v, c in
                                zip(row.nodes, row.coefs)]) if row.nodes.size else \
            np.zeros(0, dtype=np.int64)
        value = np.concatenate(row.coefs) if row.nodes.size else np.zeros(0)
        nz = value != 0
        add_rows(np.array([int(nz.sum())]), index[nz], value[nz], np.array([-np.inf]),
                 np.array([row.rhs]))
        n_mem += 1
    row_start = np.concatenate(starts)
    row_index = np.concatenate(idx_parts) if idx_parts else np.zeros(0, dtype=np.int64)
    row_value = np.concatenate(val_parts) if val_parts else np.zeros(0)
    row_lower = np.concatenate(lo_parts) if lo_parts else np.zeros(0)
    row_upper = np.concatenate(hi_parts) if hi_parts else np.zeros(0)
    return MilpModel(reduced=reduced, col_cost=col_cost, col_upper=np.ones(pos),
                     col_integer=col_integer, row_start=row_start, row_index=row_index,
                     row_value=row_value, row_lower=row_lower, row_upper=row_upper,
                     offset=reduced.offset, x_start=x_start, y_start=y_start,
                     y_pairs=tuple(y_pairs), n_onehot=n_onehot, n_marginal=n_marg,
                     n_memory=n_mem, build_seconds=time.perf_counter() - t0)


#: Share of the time left (after the warm start) that the optional presolve work may use


def objective_scale(col_cost: np.ndarray, target: float = 2.0 ** 20) -> float:
    """A power of two ``s`` that brings the largest cost magnitude near ``target``.

    LP-based solvers use absolute tolerances made for objectives of order one or more: CBC's
    default cutoff increment is ``1e-5`` (a new solution must be that much better), HiGHS's
    dual feasibility tolerance ``1e-7``. Step times in seconds are ``1e-6``-``1e-2``, so the
    objective is multiplied by ``s`` before the solver sees it (a power of two: exact in
    floating point) and its bound divided by ``s`` after. Integer costs are left alone.

    Examples
    --------
    >>> objective_scale(np.array([1e-5, 3e-6]))
    137438953472.0
    >>> objective_scale(np.array([3.0, 40.0]))
    1.0
    """
    finite = col_cost[np.isfinite(col_cost)]
    big = float(np.abs(finite).max()) if finite.size else 0.0
    if big == 0.0 or (np.all(finite == np.round(finite)) and big >= 1.0):
        return 1.0
    return float(2.0 ** round(math.log2(target / big)))
