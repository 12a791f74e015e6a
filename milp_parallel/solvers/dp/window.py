"""Exact search under an interval budget whose live sets span few consecutive nodes.

In the interval memory model (IOPDDL's, Alpa's) a budget is one row per device and maximal
live set: the memory of the nodes live at that time, summed, at most the budget. When the
nodes are numbered so that every edge and every live set falls within ``W`` consecutive
nodes (a chain of layers whose tensors live a few steps, numbered in execution order), the
problem has pathwidth below ``W`` in that order, and a dynamic programme along it is exact:
its state is the configuration of the last ``W - 1`` nodes; adding node ``i`` adds its cost,
the costs of its edges to the window, and forbids the combinations that overflow a row whose
last node is ``i``; the node leaving the window is minimized out (and its argmin kept to
read the assignment back). Time and memory grow with the largest window table (the product
of the configuration counts of ``W`` consecutive nodes); :func:`window_table_size` says it
before anything is allocated.

Nothing here uses a MILP solver: on the problems it takes, it is the exact search's
independent proof for interval budgets.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ProblemTooLargeError
from ...problem import MEMORY_RTOL, Problem
from ..memory import interval_cliques
from ..options import Deadline
from .engine import DEFAULT_MAX_TABLE_SIZE, OutOfTime

__all__ = ["window_width", "window_table_size", "window_search"]

#: Seconds per table entry and numpy pass (an add, a compare, a select), for the deadline
#: check before each node: a step that cannot finish in time is not started.
_SECONDS_PER_ENTRY = 3e-9


def _paint(first: np.ndarray, stop: np.ndarray, order: np.ndarray, n_slots: int
           ) -> np.ndarray:
    """For every slot ``j``, the first node of ``order`` whose range ``[first, stop)``
    holds it (-1 for none): each slot is painted once (a "next unpainted slot" forest)."""
    nxt = list(range(n_slots + 1))
    out = np.full(n_slots, -1, dtype=np.int64)

    def find(j: int) -> int:
        root = j
        while nxt[root] != root:
            root = nxt[root]
        while nxt[j] != root:
            nxt[j], j = root, nxt[j]
        return root

    for v in order.tolist():
        j = find(int(first[v]))
        while j < stop[v]:
            out[j] = v
            nxt[j] = j + 1
            j = find(j + 1)
    return out


def _cliques(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per node the range ``[first, stop)`` of the maximal cliques (time indices) it is
    live in, and per clique its lowest and highest live node; O(nodes + cliques)."""
    iv = np.asarray(problem.intervals, dtype=np.int64).reshape(-1, 2)
    times = interval_cliques(iv)
    live = iv[:, 1] > iv[:, 0]
    first = np.where(live, np.searchsorted(times, iv[:, 0]), 0)
    stop = np.maximum(np.where(live, np.searchsorted(times, iv[:, 1]), 0), first)
    idx = np.arange(iv.shape[0])
    lo = _paint(first, stop, idx, times.size)
    hi = _paint(first, stop, idx[::-1], times.size)
    return first, stop, lo, hi


def _rows(cliques: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
          ) -> list[np.ndarray]:
    """The live set (node indices, ascending) of every maximal clique (of :func:`_cliques`)."""
    first, stop, lo, hi = cliques
    out = []
    for j, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        if a < 0:
            continue
        cand = np.arange(a, b + 1)
        out.append(cand[(first[cand] <= j) & (j < stop[cand])])
    return out


def window_width(problem: Problem) -> int:
    """The least ``W`` such that every edge and every maximal live set lies within ``W``
    consecutive nodes (in index order); 1 for a problem without either.

    Examples
    --------
    >>> p = Problem([np.zeros(2)] * 4, [(0, 1), (1, 2), (2, 3)], [np.zeros((2, 2))] * 3,
    ...             memory=[np.ones((2, 1))] * 4, memory_limit=[3.0],
    ...             intervals=[(0, 2), (1, 3), (2, 4), (3, 5)])
    >>> window_width(p)
    2
    """
    cliques = _cliques(problem) if problem.has_budget and problem.intervals is not None \
        else None
    return _width(problem, cliques)


def _width(problem: Problem, cliques) -> int:
    w = 1
    if problem.n_edges:
        e = np.asarray(problem.edges, dtype=np.int64)
        w = max(w, int(np.abs(e[:, 0] - e[:, 1]).max()) + 1)
    if cliques is not None and cliques[2].size:
        w = max(w, int((cliques[3] - cliques[2]).max()) + 1)
    return w


def window_table_size(problem: Problem, width: int | None = None) -> float:
    """Entries of the largest table the search builds: the largest product of the
    configuration counts of ``width`` consecutive nodes (default :func:`window_width`)."""
    w = window_width(problem) if width is None else width
    k = np.log(np.asarray(problem.n_configs, dtype=np.float64))
    if k.size == 0:
        return 0.0
    c = np.concatenate([[0.0], np.cumsum(k)])
    sums = c[min(w, k.size):] - c[:k.size - min(w, k.size) + 1]
    return float(math.exp(min(sums.max(), 700.0)))          # 1e304: "too big" either way


def _min_out_first(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(argmin, min)`` over axis 0 (the first index of the minimum), by contiguous
    slices: ``np.argmin(f, axis=0)`` strides across the array and is several times slower."""
    m = f.min(axis=0)
    arg = np.zeros(m.shape, dtype=np.int32)
    for j in range(f.shape[0] - 1, 0, -1):
        arg[f[j] == m] = j
    arg[f[0] == m] = 0
    return arg, m


def window_search(problem: Problem, *, deadline: Deadline | None = None,
                  max_table_size: float = DEFAULT_MAX_TABLE_SIZE
                  ) -> tuple[float, np.ndarray | None]:
    """The optimum of ``problem`` (interval memory model, or no budget) by the window DP.

    Parameters
    ----------
    problem : Problem
    deadline : Deadline, optional
        Checked after every node; :class:`~.engine.OutOfTime` when it passes.
    max_table_size : float
        Largest window table allowed (:func:`window_table_size`), checked before anything
        is allocated.

    Returns
    -------
    (float, numpy.ndarray or None)
        The optimal cost and an optimal assignment, or ``(inf, None)`` when no assignment
        fits the budget (or avoids the infinite entries).

    Raises
    ------
    ProblemTooLargeError
        When the window's table would exceed ``max_table_size``.

    Examples
    --------
    Two nodes live together may not both take their cheap, memory-hungry configuration:

    >>> p = Problem([np.array([1.0, 3.0])] * 2, [(0, 1)], [np.zeros((2, 2))],
    ...             memory=[np.array([[2.0], [1.0]])] * 2, memory_limit=[3.0],
    ...             intervals=[(0, 2), (1, 2)])
    >>> cost, a = window_search(p)
    >>> cost, sorted(a.tolist())
    (4.0, [0, 1])
    """
    n = problem.n_nodes
    budgeted = problem.has_budget and problem.intervals is not None
    cliques = _cliques(problem) if budgeted else None
    w = _width(problem, cliques)
    size = window_table_size(problem, w)
    if size > max_table_size:
        raise ProblemTooLargeError(
            f"dp: the live sets and edges of this problem span {w} consecutive nodes, a "
            f"window table of {size:.3g} entries > max_table_size {max_table_size:.3g}; "
            f"raise max_table_size or use a MILP solver (solver='highs', 'cbc' or 'cpsat')")
    k = [int(x) for x in problem.n_configs]
    edges_to: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
    for (u, v), t in zip(problem.edges, problem.edge_costs):
        u, v = int(u), int(v)
        if u < v:
            edges_to[v].append((u, np.asarray(t, dtype=np.float64)))
        else:
            edges_to[u].append((v, np.asarray(t, dtype=np.float64).T))
    rows_at: list[list[tuple[np.ndarray, list, float]]] = [[] for _ in range(n)]
    if budgeted:
        budget = np.asarray(problem.memory_limit, dtype=np.float64) * (1 + MEMORY_RTOL)
        for live in _rows(cliques):
            for d in range(problem.n_devices):
                mem = [problem.memory[v][:, d] for v in live.tolist()]
                if sum(float(m.max()) for m in mem) <= budget[d]:
                    continue                                  # cannot bind
                rows_at[int(live[-1])].append((live, mem, float(budget[d])))
    # f: min cost over the nodes left of the window, per configuration of the window nodes
    # [lo, i) (axis j is node lo + j); back[v]: argmin over v's configuration when v left.
    f = np.zeros(())
    lo = 0
    back: list[np.ndarray | None] = [None] * n
    for i in range(n):
        if deadline is not None:
            left = deadline.left()
            passes = 3 + len(edges_to[i]) + sum(2 + r[0].size for r in rows_at[i])
            if deadline.passed() or (left is not None
                                     and f.size * k[i] * passes * _SECONDS_PER_ENTRY > left):
                raise OutOfTime
        axes = i - lo                                         # f.ndim
        g = f[..., None] + np.asarray(problem.node_costs[i], dtype=np.float64)
        for u, t in edges_to[i]:
            shape = [1] * (axes + 1)
            shape[u - lo], shape[axes] = k[u], k[i]
            g += t.reshape(shape)
        for live, mem, cap in rows_at[i]:
            total = np.zeros(())
            for v, m in zip(live.tolist(), mem):
                shape = [1] * (axes + 1)
                shape[v - lo] = k[v]
                total = total + m.reshape(shape)
            np.copyto(g, np.inf, where=total > cap)
        f = g
        if i - lo + 1 >= w and i + 1 < n:                 # node lo leaves the window
            back[lo], f = _min_out_first(f)
            lo += 1
    best = float(f.min()) if f.size else 0.0
    if not math.isfinite(best):
        return math.inf, None
    a = np.zeros(n, dtype=np.int64)
    a[lo:] = np.unravel_index(int(np.argmin(f)), f.shape) if f.ndim else []
    for v in range(lo - 1, -1, -1):
        a[v] = int(back[v][tuple(a[v + 1:v + 1 + back[v].ndim])])
    return best, a
