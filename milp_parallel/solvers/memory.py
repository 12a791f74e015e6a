"""The memory rows a budget imposes, and the least memory any assignment needs.

A budget ``M_d`` on device ``d`` is one linear row per set of nodes that are live together:

* **all-live** model (no intervals): every node is live at once, one row per device,
  ``sum_v m(v, a_v, d) <= M_d``;
* **interval** model (IOPDDL): node ``v`` is live on ``[a_v, b_v)``; the usage at time ``t``
  is the sum over the nodes live at ``t``. It is enough to keep the *maximal* live sets: the
  maximal cliques of the interval graph. Sorting the interval ends before the starts at equal
  times (the intervals are half-open), a maximal clique is the live set just after a start
  that is immediately followed by an end. Node ``v`` belongs to the cliques whose time lies
  in ``[a_v, b_v)``, a contiguous range of the sorted clique times, so the rows come out in
  ``O(n log n + nnz)`` without any quadratic matrix.

:class:`MemoryRows` keeps the rows in compressed form (per node, the range of rows that hold
it; per row, its device) so that instances of tens of thousands of nodes stay small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problem import MEMORY_RTOL, Problem

__all__ = ["MemoryRows", "memory_rows", "least_memory", "interval_cliques", "clique_levels"]


def interval_cliques(intervals: np.ndarray) -> np.ndarray:
    """The times of the maximal live sets of half-open intervals, sorted.

    Parameters
    ----------
    intervals : numpy.ndarray
        ``(n, 2)`` integer starts and ends; an interval with ``end <= start`` is never live.

    Returns
    -------
    numpy.ndarray
        The start times ``t`` (ascending) whose live sets ``{v : a_v <= t < b_v}`` are the
        maximal ones (each maximal set once).

    Examples
    --------
    >>> interval_cliques(np.array([[0, 4], [1, 2], [3, 5], [6, 6]])).tolist()
    [1, 3]
    """
    iv = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
    live = iv[:, 1] > iv[:, 0]
    if not live.any():
        return np.zeros(0, dtype=np.int64)
    a, b = iv[live, 0], iv[live, 1]
    times = np.concatenate([a, b])
    kind = np.concatenate([np.ones(a.size, dtype=np.int8), np.zeros(b.size, dtype=np.int8)])
    order = np.lexsort((kind, times))            # by time, ends (0) before starts (1)
    k = kind[order]
    t = times[order]
    hit = (k[:-1] == 1) & (k[1:] == 0)
    return np.unique(t[:-1][hit])


@dataclass(frozen=True)
class MemoryRows:
    """The rows of a memory budget, ``sum_{v in row} m(v, a_v, device) <= budget``.

    Attributes
    ----------
    device : numpy.ndarray
        ``(R,)`` the device (memory column) of each row.
    budget : numpy.ndarray
        ``(R,)`` the right-hand side (the device's budget, with the relative tolerance
        :data:`~milp_parallel.problem.MEMORY_RTOL` that :meth:`Problem.evaluate` allows).
    start, nodes : numpy.ndarray
        Rows in CSR form: row ``r`` holds ``nodes[start[r]:start[r + 1]]`` (ascending).
    first, stop : numpy.ndarray or None
        Interval model only: node ``v`` is in rows ``first[v]:stop[v]`` of each device
        block (rows are sorted by device, then time). ``None`` for the all-live model, where
        every node is in every row.
    """

    device: np.ndarray
    budget: np.ndarray
    start: np.ndarray
    nodes: np.ndarray
    first: np.ndarray | None
    stop: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return int(self.device.size)

    def row(self, r: int) -> np.ndarray:
        return self.nodes[self.start[r]:self.start[r + 1]]

    def __iter__(self):
        """``(nodes, device, budget)`` per row."""
        for r in range(self.n_rows):
            yield self.row(r), int(self.device[r]), float(self.budget[r])

    def levels(self, problem: Problem, assignment: np.ndarray) -> np.ndarray:
        """Each row's usage under ``assignment``."""
        use = np.stack([problem.memory[v][assignment[v]] for v in range(problem.n_nodes)]) \
            if problem.n_nodes else np.zeros((0, problem.n_devices))
        per_entry = use[self.nodes, np.repeat(self.device, np.diff(self.start))]
        out = np.zeros(self.n_rows)
        np.add.at(out, np.repeat(np.arange(self.n_rows), np.diff(self.start)), per_entry)
        return out


def memory_rows(problem: Problem) -> MemoryRows:
    """The rows of ``problem``'s memory budget (none without a budget).

    Examples
    --------
    >>> p = Problem([np.zeros(2)] * 3, [], [], memory=[np.ones(2)] * 3,
    ...             memory_limit=5, intervals=[[0, 2], [1, 3], [2, 4]])
    >>> rows = memory_rows(p)
    >>> [r.tolist() for r, _, _ in rows]
    [[0, 1], [1, 2]]
    """
    n, n_dev = problem.n_nodes, problem.n_devices
    empty = np.zeros(0, dtype=np.int64)
    if not problem.has_budget:
        return MemoryRows(empty, np.zeros(0), np.zeros(1, dtype=np.int64), empty, None, None)
    budget = problem.memory_limit * (1 + MEMORY_RTOL)
    if problem.intervals is None:
        nodes = np.tile(np.arange(n, dtype=np.int64), n_dev)
        start = np.arange(n_dev + 1, dtype=np.int64) * n
        return MemoryRows(np.arange(n_dev, dtype=np.int64), budget.astype(float), start, nodes,
                          None, None)
    iv = problem.intervals
    times = interval_cliques(iv)
    t_count = times.size
    live = iv[:, 1] > iv[:, 0]
    first = np.where(live, np.searchsorted(times, iv[:, 0], side="left"), 0)
    stop = np.where(live, np.searchsorted(times, iv[:, 1], side="left"), 0)
    stop = np.maximum(stop, first)
    counts = stop - first
    # Row-wise CSR of one device block: node v at rows first[v]..stop[v]-1.
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    row = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts,
                                                                   counts)
    row += np.repeat(first, counts)
    order = np.lexsort((owner, row))
    block_nodes = owner[order]
    block_start = np.zeros(t_count + 1, dtype=np.int64)
    np.add.at(block_start, row + 1, 1)
    block_start = np.cumsum(block_start)
    nodes = np.tile(block_nodes, n_dev)
    start = np.concatenate([[0]] + [block_start[1:] + d * block_nodes.size
                                    for d in range(n_dev)]).astype(np.int64)
    device = np.repeat(np.arange(n_dev, dtype=np.int64), t_count)
    return MemoryRows(device, budget[device].astype(float), start, nodes, first, stop)


def least_memory(problem: Problem) -> np.ndarray | None:
    """Per device, the least peak memory that an assignment of finite cost reaches.

    Memory is separable: picking each node's least-memory configuration (among those of
    finite cost; among all when a node has none) minimises every row at once, so this is
    exact for both memory models.

    Returns
    -------
    numpy.ndarray or None
        ``(n_devices,)``, or ``None`` without memory tables.

    Examples
    --------
    >>> p = Problem([np.array([1.0, np.inf])], [], [], memory=[np.array([1.0, 0.5])])
    >>> least_memory(p).tolist()
    [1.0]
    """
    if problem.memory is None:
        return None
    mins = []
    for c, m in zip(problem.node_costs, problem.memory):
        fin = np.isfinite(c)
        mins.append((m[fin] if fin.any() else m).min(axis=0))
    use = np.stack(mins) if mins else np.zeros((0, problem.n_devices))
    if problem.intervals is None:
        return use.sum(axis=0)
    times, level = clique_levels(problem, use)
    return level.max(axis=0) if times.size else np.zeros(problem.n_devices)


def clique_levels(problem: Problem, use: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The memory in use at each maximal live set of the interval model.

    Parameters
    ----------
    problem : Problem
        With intervals.
    use : numpy.ndarray
        ``(n, D)`` each node's memory (e.g. at its chosen configuration).

    Returns
    -------
    tuple
        ``(times, level)``: :func:`interval_cliques` and ``(T, D)`` the usage there.

    Examples
    --------
    >>> p = Problem([np.zeros(1)] * 3, [], [], memory=[np.ones(1)] * 3,
    ...             memory_limit=5, intervals=[[0, 2], [1, 3], [2, 4]])
    >>> t, level = clique_levels(p, np.array([[1.0], [2.0], [4.0]]))
    >>> t.tolist(), level[:, 0].tolist()
    ([1, 2], [3.0, 6.0])
    """
    iv = problem.intervals
    times = interval_cliques(iv)
    live = iv[:, 1] > iv[:, 0]
    # Sweep: +use at the start, -use at the end, evaluated at the clique times.
    s = np.searchsorted(times, iv[live, 0], side="left")
    e = np.searchsorted(times, iv[live, 1], side="left")
    delta = np.zeros((times.size + 1, use.shape[1]))
    np.add.at(delta, s, use[live])
    np.add.at(delta, e, -use[live])
    return times, np.cumsum(delta, axis=0)[:-1]
