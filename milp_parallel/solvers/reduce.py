"""Exact reductions of a :class:`~milp_parallel.problem.Problem` that keep an optimum.

Each reduction removes strategies (configurations) of nodes; the nodes, edges, intervals and
the budget stay, so a reduced problem has the same graph with smaller tables. A strategy ``t``
of node ``v`` is removed only when another strategy ``s`` of ``v`` is at least as good in
every respect: for every choice of the other nodes, switching ``v`` from ``t`` to ``s`` does
not raise any cost entry (so neither the count of forbidden entries nor, at an equal count,
the allowed cost: the lexicographic order of :mod:`.forbidden` included) and does not raise
``v``'s memory where it counts (while ``v`` is live and a budget binds). So from any optimum
of the original, switching each removed strategy to the one that dominates it gives an
assignment of the reduced problem that is as good: the reduced optimum is an optimum of the
original, and :func:`expand` maps it back.

* :func:`fix_isolated` (issue 25 item 3a): a node all of whose edges are constant tables
  keeps one strategy when one of its strategies has both the least cost and the least memory
  (on T, U, R this fixes about three quarters of the nodes with a choice). Vectorized over all
  nodes at once.
* :func:`remove_dominated` (item 3b): ``t`` is dominated by ``s`` when ``s`` is at most ``t``
  in cost, in memory (where it counts) and in every entry of every incident edge table's row
  (or column) of ``v``; ties keep the lowest index. Per node: a ``K x K`` comparison of the
  node's rows of all its tables, skipped on nodes where that comparison exceeds a work bound.
* :func:`reduce_problem`: both, repeated while they remove something (a removal can make an
  edge table constant or a strategy dominated).

* :func:`solve_fixed_first`: the hook of the MILP path (where the contracted path starts):
  a solve of the problem with its isolated nodes fixed, expanded back.

May import: ``problem``, ``errors``, ``solvers.result``, numpy.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import InvalidAssignmentError
from ..problem import Problem
from .result import SolveResult

__all__ = ["Reduction", "fix_isolated", "remove_dominated", "reduce_problem", "expand",
           "restrict", "solve_fixed_first", "FIX_MIN_SHARE"]

logger = logging.getLogger(__name__)

#: Default bound on one node's dominance comparison: ``K**2 x`` (entries of its rows).
MAX_NODE_WORK = 4_000_000
#: :func:`solve_fixed_first` reduces when it fixes at least this share of the nodes with a
#: choice (IOPDDL T, U, R: 71-79%; the others under 1%, where it is not worth a rebuild).
FIX_MIN_SHARE = 0.2


@dataclass(frozen=True)
class Reduction:
    """A reduced problem and the way back.

    Attributes
    ----------
    problem : Problem
        The reduced problem (same nodes, edges, intervals and budget; fewer strategies).
    original : Problem
    kept : tuple of numpy.ndarray
        Per node, the original strategy index of each strategy of the reduced problem.
    forward : tuple of numpy.ndarray
        Per node, for each original strategy, the reduced index of a kept strategy at least
        as good (itself when kept): :meth:`carry` maps an assignment of the original to one
        of the reduced problem that is as good and as feasible.
    stats : dict
        ``fixed_nodes`` (nodes with a choice left with one strategy), ``removed_strategies``
        and, per reduction, what it removed.
    """

    problem: Problem
    original: Problem
    kept: tuple[np.ndarray, ...]
    forward: tuple[np.ndarray, ...]
    stats: dict = field(default_factory=dict)

    def carry(self, assignment: Sequence[int]) -> np.ndarray:
        """The reduced problem's assignment that :attr:`forward` maps ``assignment`` (of the
        original) to: no cost entry and no memory use larger."""
        a = self.original.check_assignment(assignment)
        return np.fromiter((f[i] for f, i in zip(self.forward, a.tolist())), dtype=np.int64,
                           count=a.size)


def expand(reduction: Reduction, assignment: Sequence[int]) -> np.ndarray:
    """The original problem's assignment of an assignment of ``reduction.problem`` (same
    cost entries, same memory: the reduced tables are sub-tables of the original's).

    Raises
    ------
    InvalidAssignmentError
        If ``assignment`` is not an assignment of the reduced problem.
    """
    a = reduction.problem.check_assignment(assignment)
    return np.fromiter((k[i] for k, i in zip(reduction.kept, a.tolist())), dtype=np.int64,
                       count=a.size)


def restrict(problem: Problem, kept: Sequence[np.ndarray]) -> Problem:
    """The problem whose node ``v`` has only the strategies ``kept[v]`` (original indices, in
    order); tables of nodes and edges that keep everything are shared, not copied."""
    kept = [np.asarray(k, dtype=np.int64) for k in kept]
    if len(kept) != problem.n_nodes or any(k.size == 0 for k in kept):
        raise InvalidAssignmentError("restrict needs a non-empty list of strategies per node")
    whole = np.fromiter((k.size for k in kept), np.int64, len(kept)) == problem.n_configs
    costs = [c if w else c[k] for c, k, w in zip(problem.node_costs, kept, whole.tolist())]
    tables = []
    for (u, v), t in zip(problem.edges.tolist(), problem.edge_costs):
        if whole[u] and whole[v]:
            tables.append(t)
        else:
            tables.append(t[np.ix_(kept[u], kept[v])])
    memory = None if problem.memory is None else [
        m if w else m[k] for m, k, w in zip(problem.memory, kept, whole.tolist())]
    labels = [tuple(ls) if w else tuple(ls[i] for i in k.tolist())
              for ls, k, w in zip(problem.config_labels, kept, whole.tolist())]
    return Problem(costs, problem.edges, tables, memory=memory,
                   memory_limit=problem.memory_limit, intervals=problem.intervals,
                   node_names=problem.node_names, config_labels=labels,
                   forbidden_cost=problem.forbidden_cost)


def _memory_counts(problem: Problem) -> np.ndarray:
    """Per node: whether its memory can matter (a budget, and the node live at some time)."""
    n = problem.n_nodes
    if problem.memory is None or problem.memory_limit is None:
        return np.zeros(n, dtype=bool)
    if problem.intervals is None:
        return np.ones(n, dtype=bool)
    iv = problem.intervals
    return iv[:, 1] > iv[:, 0]


def _constant_edges(problem: Problem) -> np.ndarray:
    """Per edge: whether its table holds one value (``inf`` included)."""
    if problem.n_edges == 0:
        return np.zeros(0, dtype=bool)
    flat = np.concatenate([t.ravel() for t in problem.edge_costs])
    sizes = np.fromiter((t.size for t in problem.edge_costs), np.int64, problem.n_edges)
    starts = np.cumsum(sizes) - sizes
    return np.maximum.reduceat(flat, starts) == np.minimum.reduceat(flat, starts)


def _identity(problem: Problem, stats: dict) -> Reduction:
    same = tuple(np.arange(x) for x in problem.n_configs.tolist())
    return Reduction(problem, problem, same, same,
                     {"fixed_nodes": 0, "removed_strategies": 0, **stats})


def _result(problem: Problem, kept: list[np.ndarray], forward: list[np.ndarray],
            stats: dict) -> Reduction:
    k = problem.n_configs
    sizes = np.fromiter((x.size for x in kept), np.int64, len(kept))
    stats = {**stats, "fixed_nodes": int(((sizes == 1) & (k > 1)).sum()),
             "removed_strategies": int(k.sum() - sizes.sum())}
    if stats["removed_strategies"] == 0:
        return _identity(problem, stats)
    return Reduction(restrict(problem, kept), problem, tuple(kept), tuple(forward), stats)


def fix_isolated(problem: Problem) -> Reduction:
    """Keep one strategy of every node whose edges are all constant tables and one of whose
    strategies has both the least cost and the least memory (memory only where it counts);
    the first such strategy is kept. Every other strategy of that node is dominated by it."""
    kept, forward, n_fixed = _isolated(problem)
    if n_fixed == 0:
        return _identity(problem, {"isolated_fixed": 0})
    return _result(problem, kept, forward, {"isolated_fixed": n_fixed})


def _isolated(problem: Problem) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """:func:`fix_isolated`'s kept and forward maps and the count of nodes it fixes."""
    n, k = problem.n_nodes, problem.n_configs
    busy = np.zeros(n, dtype=bool)
    if problem.n_edges:
        varying = ~_constant_edges(problem)
        busy[problem.edges[varying].ravel()] = True
    candidates = np.nonzero(~busy & (k > 1))[0]
    kept = [np.arange(x) for x in k.tolist()]
    forward = list(kept)
    if candidates.size == 0:
        return kept, forward, 0
    counts = _memory_counts(problem)
    sizes = k[candidates]
    starts = (np.cumsum(sizes) - sizes)
    cost = np.concatenate([problem.node_costs[v] for v in candidates.tolist()])
    good = cost == np.repeat(np.minimum.reduceat(cost, starts), sizes)
    if problem.memory is not None:
        mem = np.concatenate([problem.memory[v] for v in candidates.tolist()])   # (S, D)
        least = np.repeat(np.minimum.reduceat(mem, starts, axis=0), sizes, axis=0)
        good &= (mem <= least).all(axis=1) | np.repeat(~counts[candidates], sizes)
    owner = np.repeat(np.arange(candidates.size), sizes)
    local = np.arange(good.size) - np.repeat(starts, sizes)
    hit = np.nonzero(good)[0]
    first = {}
    for o, j in zip(owner[hit].tolist(), local[hit].tolist()):
        first.setdefault(o, j)
    for o, j in first.items():
        v = int(candidates[o])
        kept[v] = np.array([j], dtype=np.int64)
        forward[v] = np.zeros(k[v], dtype=np.int64)          # the one kept dominates all
    return kept, forward, len(first)


def solve_fixed_first(problem: Problem, warm: np.ndarray | None,
                      solve: Callable[[Problem, np.ndarray | None], SolveResult], *,
                      min_share: float = FIX_MIN_SHARE) -> SolveResult | None:
    """Solve with the isolated nodes fixed (:func:`fix_isolated`), when that fixes at least
    ``min_share`` of the nodes with a choice; else ``None`` (nothing is built).

    ``solve(reduced, warm)`` solves the reduced problem from ``warm`` carried over
    (:meth:`Reduction.carry`: as good and as feasible); its answer is expanded to the
    original: the same cost, and the same status and bound (the reduced optimum is an
    optimum of the original, so a bound of one bounds the other; infeasible alike).
    ``stats["reductions"]`` says what was fixed.
    """
    choice = int((problem.n_configs > 1).sum())
    kept, forward, n_fixed = _isolated(problem)
    if choice == 0 or n_fixed < min_share * choice:
        return None
    red = _result(problem, kept, forward, {"isolated_fixed": n_fixed})
    res = solve(red.problem, None if warm is None else red.carry(warm))
    stats = {**res.stats, "reductions": {key: red.stats[key] for key in
                                         ("fixed_nodes", "removed_strategies")}}
    if res.assignment is None:
        return dataclasses.replace(res, stats=stats)
    return dataclasses.replace(res, assignment=expand(red, res.assignment), stats=stats)


def _node_rows(problem: Problem, incident: list[list[tuple[int, bool]]], v: int,
               counts: np.ndarray) -> np.ndarray:
    """``(K_v, D)``: per strategy of ``v`` its cost, memory (where it counts) and its row of
    every incident edge table."""
    parts = [problem.node_costs[v][:, None]]
    if counts[v]:
        parts.append(problem.memory[v])
    for e, first in incident[v]:
        t = problem.edge_costs[e]
        parts.append(t if first else t.T)
    return np.hstack(parts)


def remove_dominated(problem: Problem, *, max_node_work: float = MAX_NODE_WORK) -> Reduction:
    """Remove every strategy dominated by another of its node (see the module docstring);
    nodes where ``K**2 x`` the entries of the node's rows exceed ``max_node_work`` are left as
    they are (counted in ``stats["dominance_skipped"]``)."""
    n, k = problem.n_nodes, problem.n_configs
    incident: list[list[tuple[int, bool]]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(problem.edges.tolist()):
        incident[u].append((e, True))
        incident[v].append((e, False))
    counts = _memory_counts(problem)
    width = np.ones(n, dtype=np.int64) + np.where(counts, problem.n_devices, 0)
    for e, (u, v) in enumerate(problem.edges.tolist()):
        width[u] += k[v]
        width[v] += k[u]
    kept = [np.arange(x) for x in k.tolist()]
    forward = list(kept)
    skipped = removed = 0
    for v in np.nonzero(k > 1)[0].tolist():
        if float(k[v]) ** 2 * width[v] > max_node_work:
            skipped += 1
            continue
        rows = _node_rows(problem, incident, v, counts)
        le = (rows[:, None, :] <= rows[None, :, :]).all(axis=2)      # le[s, t]: s <= t
        np.fill_diagonal(le, False)
        upper = ~np.tri(k[v], dtype=bool)                           # s < t (ties: lowest)
        dominated = ((le & ~le.T) | (le & le.T & upper)).any(axis=0)
        if dominated.any():
            kept[v] = np.nonzero(~dominated)[0]
            # a kept strategy at most each one (one exists: the order is strict and finite)
            np.fill_diagonal(le, True)
            forward[v] = np.argmax(le[kept[v]], axis=0)
            removed += int(dominated.sum())
    return _result(problem, kept, forward, {"dominated_removed": removed,
                                            "dominance_skipped": skipped})


def _compose(first: Reduction, second: Reduction) -> Reduction:
    kept = tuple(a[b] for a, b in zip(first.kept, second.kept))
    forward = tuple(b[a] for a, b in zip(first.forward, second.forward))
    stats = dict(first.stats)
    for key, value in second.stats.items():
        stats[key] = stats.get(key, 0) + value
    k = first.original.n_configs
    sizes = np.fromiter((x.size for x in kept), np.int64, len(kept))
    stats["fixed_nodes"] = int(((sizes == 1) & (k > 1)).sum())
    stats["removed_strategies"] = int(k.sum() - sizes.sum())
    return Reduction(second.problem, first.original, kept, forward, stats)


def reduce_problem(problem: Problem, *, isolated: bool = True, dominance: bool = True,
                   max_rounds: int = 3, max_node_work: float = MAX_NODE_WORK) -> Reduction:
    """:func:`fix_isolated` and :func:`remove_dominated`, repeated (at most ``max_rounds``
    rounds) while a round removes a strategy.

    Examples
    --------
    >>> import numpy as np
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [1.0, 5.0]])])
    >>> r = reduce_problem(p)
    >>> [k.tolist() for k in r.kept], r.stats["removed_strategies"]
    ([[0], [0, 1]], 1)
    """
    out = _identity(problem, {"rounds": 0})
    for _ in range(max_rounds):
        before = out.stats["removed_strategies"]
        if isolated:
            out = _compose(out, fix_isolated(out.problem))
        if dominance:
            out = _compose(out, remove_dominated(out.problem, max_node_work=max_node_work))
        out.stats["rounds"] += 1
        if out.stats["removed_strategies"] == before:
            break
    logger.info("reductions: %d strategies removed, %d nodes fixed in %d rounds",
                out.stats["removed_strategies"], out.stats["fixed_nodes"],
                out.stats["rounds"])
    return out
