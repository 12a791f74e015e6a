"""Exact search under one binding memory budget: (cost, memory) Pareto sets carried through
OptCNN's eliminations.

With a single binding device (the budget search's other devices are implied, see
:meth:`~.budget.BudgetSearch.reduce_devices`), the budgeted optimum is the cheapest point with
memory within the budget on the Pareto front of (cost, memory) over all assignments. Every
factor of the elimination (:mod:`.engine`) then holds, per cell, the Pareto set of
(cost, memory) of its partial assignments instead of one number: a leaf elimination and a node
elimination take the Minkowski sum of their factors' sets for each value of the eliminated
node and keep the non-dominated points; parallel edges add (Minkowski sum); independent
components combine at the end. Each point keeps pointers to the points it was made of, so the
assignment of the chosen point is read back exactly.

Two bounds prune points that cannot be in an assignment that fits and beats the incumbent:
the least memory the nodes outside a factor can add (their least-memory configurations), and,
at the Lagrange multiplier ``lam``, the least ``cost + lam * memory`` they can add, per node and
per edge, so that ``cost + lam * mem + outside - lam * budget > incumbent`` prunes.

Exact, and fast when the configurations are few: the budget search first removes every
configuration that reduced-cost fixing at the root rules out (zoo problems keep 5-10% of
them), so the sets stay small. It refuses (returns ``None``) graphs that need variable
elimination (treewidth above 2 after OptCNN's eliminations) and gives up past ``max_points``
points, so the caller falls back to branch-and-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...problem import Problem
from ..options import Deadline
from .engine import Engine, OutOfTime

__all__ = ["pareto_search", "ParetoResult", "DEFAULT_MAX_POINTS"]

#: Points (over all factors) after which the search gives up.
DEFAULT_MAX_POINTS = 5_000_000
#: Seconds a join and its Pareto prune take per candidate point (gathers and a lexsort; up to
#: 5.7e-7 measured on this project's 2-core machine), for the deadline check before a join.
_SECONDS_PER_POINT = 6e-7


@dataclass
class _Set:
    """Pareto points of one factor: per point its cell (flat index over ``scope``), cost,
    memory, and how it was made (``parents``: per parent set, the point index; ``conf``: the
    configuration of the node this step eliminated, ``-1`` for none)."""

    scope: tuple
    shape: tuple
    cell: np.ndarray
    cost: np.ndarray
    mem: np.ndarray
    parents: tuple = ()
    index: tuple = ()                  # per parent: (L,) point indices into it
    node: int = -1
    conf: np.ndarray | None = None
    base: int = -1                     # a base unary of this node (cell = configuration)
    absorbed_nodes: frozenset = field(default_factory=frozenset)
    absorbed_edges: frozenset = field(default_factory=frozenset)

    def __len__(self) -> int:
        return int(self.cell.size)


@dataclass(frozen=True)
class ParetoResult:
    """The budgeted optimum found by :func:`pareto_search`.

    Attributes
    ----------
    assignment : numpy.ndarray or None
        ``None`` when no assignment fits and beats the incumbent.
    cost : float
        Its cost (``inf`` without one).
    points : int
        Pareto points created (the work done).
    """

    assignment: np.ndarray | None
    cost: float
    points: int


class _Search:
    def __init__(self, problem: Problem, device: int, budget: float, upper: float,
                 lam: float, max_points: float, deadline: Deadline | None):
        self.p = problem
        self.B = budget
        self.U = upper
        self.lam = lam
        self.max_points = max_points
        self.deadline = deadline
        self.k = problem.n_configs
        self.mem = [m[:, device].astype(float) for m in problem.memory]
        self.cost = [c.astype(float) for c in problem.node_costs]
        self.min_mem = np.array([m.min() for m in self.mem])
        self.min_lag = np.array([float((c + lam * m).min()) for c, m in zip(self.cost,
                                                                            self.mem)])
        self.edge_min = {}
        for (u, v), t in zip(problem.edges, problem.edge_costs):
            self.edge_min[_key(int(u), int(v))] = float(t.min())
        self.total_mem = float(self.min_mem.sum())
        self.total_lag = float(self.min_lag.sum()) + sum(self.edge_min.values())
        self.points = 0
        self.tol = 1e-12 * max(abs(budget), 1.0)
        self.utol = 1e-10 * max(abs(upper), 1e-300) if math.isfinite(upper) else 0.0

    # ------------------------------------------------------------------ set algebra
    def _afford(self, n: int) -> None:
        """Raise :class:`OutOfTime` now if joining and pruning ``n`` candidate points
        (one numpy pass each, not interruptible) would end past the deadline."""
        if self.deadline is not None:
            left = self.deadline.left()
            if left is not None and n * _SECONDS_PER_POINT > left:
                raise OutOfTime

    def _prune(self, s: _Set) -> _Set:
        """Bounds, then per cell the Pareto filter (memory up, cost strictly down)."""
        out_mem = self.total_mem - float(self.min_mem[list(s.absorbed_nodes)].sum()) \
            if s.absorbed_nodes else self.total_mem
        out_lag = self.total_lag - (float(self.min_lag[list(s.absorbed_nodes)].sum())
                                    if s.absorbed_nodes else 0.0) \
            - sum(self.edge_min[e] for e in s.absorbed_edges)
        keep = s.mem + out_mem <= self.B + self.tol
        if math.isfinite(self.U):
            keep &= (s.cost + self.lam * s.mem + out_lag - self.lam * self.B
                     <= self.U + self.utol)
        keep &= np.isfinite(s.cost)
        idx = np.nonzero(keep)[0]
        if idx.size:
            order = np.lexsort((s.cost[idx], s.mem[idx], s.cell[idx]))
            idx = idx[order]
            cell, cost = s.cell[idx], s.cost[idx]
            first = np.r_[True, cell[1:] != cell[:-1]]
            # running minimum of cost within each cell (cells are contiguous): rank trick
            rank = np.empty(cost.size, dtype=np.int64)
            rank[np.argsort(cost, kind="stable")] = np.arange(cost.size)
            key = cell.astype(np.int64) * (cost.size + 1) + (cost.size - rank)
            run = np.maximum.accumulate(key)
            prev = np.r_[np.iinfo(np.int64).min, run[:-1]]
            idx = idx[first | (key > prev)]
        return self._take(s, idx)

    def _take(self, s: _Set, idx: np.ndarray) -> _Set:
        self.points += int(idx.size)
        if self.points > self.max_points:
            raise _TooMany
        if self.deadline is not None and self.deadline.passed():
            raise OutOfTime
        return _Set(s.scope, s.shape, s.cell[idx], s.cost[idx], s.mem[idx], s.parents,
                    tuple(i[idx] for i in s.index), s.node,
                    None if s.conf is None else s.conf[idx], s.base, s.absorbed_nodes,
                    s.absorbed_edges)

    def unary(self, v: int) -> _Set:
        k = int(self.k[v])
        return _Set((v,), (k,), np.arange(k), self.cost[v].copy(), self.mem[v].copy(),
                    base=v, absorbed_nodes=frozenset([v]))

    def edge(self, u: int, v: int, table: np.ndarray) -> _Set:
        return _Set((u, v), table.shape, np.arange(table.size), table.ravel().astype(float),
                    np.zeros(table.size), absorbed_edges=frozenset([_key(u, v)]))

    def oriented(self, s: _Set, scope: tuple) -> _Set:
        """The same points with cells over ``scope`` (a permutation of ``s.scope``)."""
        if s.scope == scope or len(scope) < 2:
            return s
        ka, kb = s.shape
        a, b = s.cell // kb, s.cell % kb
        return _Set(scope, (kb, ka), b * ka + a, s.cost, s.mem, s.parents, s.index, s.node,
                    s.conf, s.base, s.absorbed_nodes, s.absorbed_edges)

    def product(self, sets: list[_Set], scope: tuple, shape: tuple, elim: int | None) -> _Set:
        """Minkowski sums of the sets' points that agree on shared nodes, projected to
        ``scope`` (``elim``, when given, is summed out and recorded), then pruned."""
        # Start from the first set and join the others one by one on the shared nodes.
        nodes: list = []
        confs: list = []
        cost = np.zeros(1)
        mem = np.zeros(1)
        idxs: list = []
        n_rows = 1
        for s in sets:
            sc = s.scope
            cells = [(s.cell // int(np.prod(s.shape[j + 1:], dtype=np.int64))) % s.shape[j]
                     for j in range(len(sc))] if sc else []
            shared = [j for j, x in enumerate(sc) if x in nodes]
            # candidate pairs: every row with every point that agrees on shared nodes
            if shared:
                key_rows = np.zeros(n_rows, dtype=np.int64)
                key_pts = np.zeros(len(s), dtype=np.int64)
                for j in shared:
                    key_rows = key_rows * int(s.shape[j]) + confs[nodes.index(sc[j])]
                    key_pts = key_pts * int(s.shape[j]) + cells[j]
                order = np.argsort(key_pts, kind="stable")
                sk = key_pts[order]
                lo = np.searchsorted(sk, key_rows, side="left")
                hi = np.searchsorted(sk, key_rows, side="right")
                cnt = hi - lo
                rows = np.repeat(np.arange(n_rows), cnt)
                within = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
                pts = order[np.repeat(lo, cnt) + within]
            else:
                rows = np.repeat(np.arange(n_rows), len(s))
                pts = np.tile(np.arange(len(s)), n_rows)
            if rows.size > 5e7:
                raise _TooMany
            self._afford(rows.size)
            confs = [c[rows] for c in confs]
            for j, x in enumerate(sc):
                if x not in nodes:
                    nodes.append(x)
                    confs.append(cells[j][pts])
            cost = cost[rows] + s.cost[pts]
            mem = mem[rows] + s.mem[pts]
            idxs = [i[rows] for i in idxs] + [pts]
            n_rows = rows.size
            if self.deadline is not None and self.deadline.passed():
                raise OutOfTime
        cell = np.zeros(n_rows, dtype=np.int64)
        for x, kx in zip(scope, shape):
            cell = cell * int(kx) + confs[nodes.index(x)]
        conf = confs[nodes.index(elim)] if elim is not None else None
        absorbed_nodes = frozenset().union(*[s.absorbed_nodes for s in sets])
        absorbed_edges = frozenset().union(*[s.absorbed_edges for s in sets])
        out = _Set(scope, shape, cell, cost, mem, tuple(sets), tuple(idxs),
                   -1 if elim is None else elim, conf, -1, absorbed_nodes, absorbed_edges)
        return self._prune(out)

    # ------------------------------------------------------------------ read back
    def read_back(self, s: _Set, i: int, a: np.ndarray) -> None:
        stack = [(s, int(i))]
        while stack:
            s, i = stack.pop()
            if s.base >= 0:
                a[s.base] = s.cell[i]
            if s.node >= 0 and s.conf is not None:
                a[s.node] = s.conf[i]
            for parent, index in zip(s.parents, s.index):
                stack.append((parent, int(index[i])))


class _TooMany(Exception):
    pass


def _key(u: int, v: int) -> tuple:
    return (u, v) if u < v else (v, u)


def pareto_search(problem: Problem, device: int, budget: float, *, upper: float = math.inf,
                  lam: float = 0.0, engine: Engine | None = None,
                  max_points: float = DEFAULT_MAX_POINTS,
                  deadline: Deadline | None = None) -> ParetoResult | None:
    """The cheapest assignment whose memory on ``device`` is within ``budget`` and whose cost
    is at most ``upper``; exact.

    Parameters
    ----------
    problem : Problem
        Memory tables needed; only column ``device`` is read (the caller makes sure the other
        devices cannot bind).
    device : int
    budget : float
        Bytes, tolerance included.
    upper : float
        The cost of a known feasible assignment (prunes; ``inf`` for none).
    lam : float
        A Lagrange multiplier for the pruning bound (any ``lam >= 0`` is valid).
    engine : Engine, optional
        Its elimination plan is reused.
    max_points : float
        Give up past this many Pareto points.
    deadline : Deadline, optional

    Returns
    -------
    ParetoResult or None
        ``None`` when the search does not apply (variable elimination needed) or gave up
        (too many points); ``ParetoResult(None, inf, ...)`` when nothing fits within
        ``upper``.

    Raises
    ------
    OutOfTime
        When ``deadline`` passes.

    Examples
    --------
    >>> p = Problem([np.array([1.0, 3.0]), np.array([1.0, 3.0])], [(0, 1)],
    ...             [np.array([[0.0, 1.0], [1.0, 0.0]])],
    ...             memory=[np.array([2.0, 1.0]), np.array([2.0, 1.0])], memory_limit=3.0)
    >>> r = pareto_search(p, 0, 3.0)
    >>> r.assignment.tolist(), r.cost
    ([0, 1], 5.0)
    """
    eng = engine or Engine(problem, deadline=deadline)
    if any(st[0] == "ve" for st in eng.plan.steps):
        return None
    s = _Search(problem, device, budget, upper, lam, max_points, deadline)
    un = {v: s.unary(v) for v in range(problem.n_nodes)}
    tabs = {}
    for (u, v), t in zip(problem.edges, problem.edge_costs):
        u, v = int(u), int(v)
        tabs[_key(u, v)] = s.edge(u, v, t) if u < v else s.oriented(s.edge(u, v, t), (v, u))
    k = problem.n_configs
    done: list[_Set] = []
    try:
        for step in eng.plan.steps:
            kind = step[0]
            if kind == "single":
                v = step[1]
                for w in step[2]:
                    msg = s.product([tabs.pop(_key(v, w))], (w,), (int(k[w]),), v)
                    un[w] = s.product([un[w], msg], (w,), (int(k[w]),), None)
                done.append(s.product([un.pop(v)], (), (), v))
            elif kind == "iso":
                v = step[1]
                done.append(s.product([un.pop(v)], (), (), v))
            elif kind == "leaf":
                v, w = step[1], step[2]
                msg = s.product([tabs.pop(_key(v, w)), un.pop(v)], (w,), (int(k[w]),), v)
                un[w] = s.product([un[w], msg], (w,), (int(k[w]),), None)
            elif kind == "node":
                j, i, kk, merged = step[1:]
                parts = [tabs.pop(_key(i, j)), un.pop(j), tabs.pop(_key(j, kk))]
                scope, shape = (i, kk), (int(k[i]), int(k[kk]))
                msg = s.product(parts, scope, shape, j)
                if merged:
                    msg = s.product([msg, s.oriented(tabs.pop(_key(i, kk)), scope)], scope,
                                    shape, None)
                tabs[_key(i, kk)] = s.oriented(msg, (min(i, kk), max(i, kk)))
            else:                                              # pragma: no cover
                return None
        total = done[0] if done else _Set((), (), np.zeros(1, dtype=np.int64), np.zeros(1),
                                          np.zeros(1))
        for part in done[1:]:
            total = s.product([total, part], (), (), None)
    except _TooMany:
        return None
    fits = np.nonzero(total.mem <= budget + s.tol)[0]
    if fits.size == 0:
        return ParetoResult(None, math.inf, s.points)
    best = int(fits[np.argmin(total.cost[fits])])
    a = np.zeros(problem.n_nodes, dtype=np.int64)
    s.read_back(total, best, a)
    return ParetoResult(a, float(problem.evaluate(a).cost), s.points)
