"""Contraction of one-to-one edges: the problem over groups of nodes that must agree.

In XLA's sharding problems (the IOPDDL instances) most edges allow, among the
configurations that can be part of a good answer, exactly one partner for each
configuration on either side: a tensor and its consumer keep the same sharding, and any
other pair is "effectively forbidden". Such an edge is a *bijection* between the two
domains, and the nodes it joins are one decision. Instance D has 40,958 nodes and 68,632
edges; its bijections join them into 481 groups with 3,291 states and 851 edges between
groups (97 thousand table entries instead of 9.7 million).

:func:`contract` finds the groups and builds the :class:`Contraction`:

1. **Forbidden entries.** ``inf`` (and ``nan``) entries, and, when every cost is ``>= 0``
   and the cost ``upper`` of a feasible assignment is known, every entry above ``upper``
   (any assignment that uses one costs more than the known one): IOPDDL's ``1e18`` entries
   go this way once an assignment without them is known. Nothing an optimum can use is
   forbidden.
2. **Arc consistency** over the allowed entries (a configuration without an allowed
   partner on some edge is removed).
3. **Groups.** The connected components of the bijective edges, grown breadth-first from
   the node of most configurations: every member's configuration is a function of the
   group's *state* (the root's configuration). A cycle of bijections that does not compose
   to the identity rules out the states where it disagrees; an edge between two members
   that is not a bijection becomes a cost on the group's states.
4. **The contracted problem** over groups: a state costs the sum of its members' node costs
   and the group's internal edges; the edges between two groups add into one table; the
   memory of a state is its members' memory. For the interval memory model the contracted
   problem takes one memory column per *row* (a device at a time, see
   :meth:`Contraction.problem`), so that only the rows that bind need to be built (the
   rows of instance S would hold 3.3e8 entries).

Every assignment of the contracted problem expands to one of the original problem with the
same cost (:meth:`Contraction.expand`), and every assignment of the original that uses no
forbidden entry is such an expansion: an optimum of the contracted problem (with every
memory row) expands to an optimum of the original. Only the problem's own tables are read
(MILP-side reasoning, DESIGN.md "Independence").
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..problem import MEMORY_RTOL, Problem
from .memory import clique_levels, interval_cliques
from .options import Deadline

__all__ = ["Contraction", "contract", "violated_rows"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Contraction:
    """A problem over groups of nodes joined by one-to-one edges (see the module docstring).

    Attributes
    ----------
    original : Problem
    group : numpy.ndarray
        ``(n,)`` the group of each original node.
    maps : tuple of numpy.ndarray
        Per original node, ``(K_g,)``: its configuration in each state of its group.
    node_costs : tuple of numpy.ndarray
        Per group, the cost of each state (members and internal edges).
    edges : numpy.ndarray
        ``(E', 2)`` group pairs, ``g < h``.
    edge_costs : tuple of numpy.ndarray
        ``(K_g, K_h)`` per group pair (``inf``: a forbidden pair).
    upper : float
        The cost the forbidden entries were measured against (``inf``: only ``inf``).
    """

    original: Problem
    group: np.ndarray
    maps: tuple
    node_costs: tuple
    edges: np.ndarray
    edge_costs: tuple
    upper: float

    @property
    def n_groups(self) -> int:
        return len(self.node_costs)

    @property
    def n_states(self) -> int:
        return int(sum(c.size for c in self.node_costs))

    def expand(self, assignment: np.ndarray) -> np.ndarray:
        """The original assignment of a group assignment."""
        a = np.asarray(assignment, dtype=np.int64)
        return np.array([int(m[a[g]]) for g, m in zip(self.group, self.maps)],
                        dtype=np.int64)

    def restrict(self, assignment: np.ndarray) -> np.ndarray | None:
        """The group assignment an original assignment expands from (``None`` when there is
        none: it uses a forbidden entry or breaks a one-to-one edge)."""
        a = np.asarray(assignment, dtype=np.int64)
        out = np.full(self.n_groups, -1, dtype=np.int64)
        for v, (g, m) in enumerate(zip(self.group, self.maps)):
            hit = np.nonzero(m == a[v])[0]
            if hit.size != 1 or (out[g] >= 0 and out[g] != hit[0]):
                return None
            out[g] = hit[0]
        return out

    def member_memory(self) -> list[np.ndarray]:
        """Per original node, ``(K_g, D)``: its memory in each state of its group."""
        return [m[f] for m, f in zip(self.original.memory, self.maps)]

    def problem(self, rows: np.ndarray | None = None) -> Problem:
        """The contracted problem.

        Without a budget, or with the all-live memory model, every device keeps its column
        and budget. With intervals, ``rows`` (``(R, 2)`` pairs of a device and an index into
        :func:`~milp_parallel.solvers.memory.interval_cliques`) are the memory rows to
        keep, each as one column of the all-live model with its device's budget: the
        contracted problem is then a *relaxation* (the rows left out are not checked).
        """
        p = self.original
        kw: dict = {}
        if p.has_budget:
            mem = self.member_memory()
            k = np.array([c.size for c in self.node_costs], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(k)])
            if p.intervals is None:
                cols = [np.zeros((kg, p.n_devices)) for kg in k]
                for g, m in zip(self.group, mem):
                    cols[g] += m
                kw = {"memory": cols, "memory_limit": p.memory_limit}
            else:
                rows = np.zeros((0, 2), dtype=np.int64) if rows is None else \
                    np.asarray(rows, dtype=np.int64).reshape(-1, 2)
                iv = p.intervals
                times = interval_cliques(iv)
                flat = np.concatenate([offsets[g] + np.arange(k[g]) for g in self.group])
                sizes = k[self.group]
                table = np.zeros((int(offsets[-1]), rows.shape[0]))
                for r, (d, ti) in enumerate(rows):
                    t = times[ti]
                    live = np.repeat((iv[:, 0] <= t) & (t < iv[:, 1]), sizes)
                    vals = np.concatenate([m[:, d] for m in mem])
                    table[:, r] = np.bincount(flat[live], weights=vals[live],
                                              minlength=int(offsets[-1]))
                cols = [table[offsets[g]:offsets[g + 1]] for g in range(len(k))]
                if rows.shape[0] == 0:
                    kw = {}
                else:
                    kw = {"memory": cols, "memory_limit": p.memory_limit[rows[:, 0]]}
        return Problem(list(self.node_costs), [tuple(e) for e in self.edges.tolist()],
                       list(self.edge_costs), forbidden_cost=p.forbidden_cost, **kw)


#: Edges handled between two looks at the deadline.
_CHECK_EVERY = 2048


def _forbidden(problem: Problem, upper: float) -> tuple[list, list]:
    """Per node and per edge, the entries no optimum uses (module docstring, step 1)."""
    tabs = problem.node_costs + tuple(problem.edge_costs)
    nonneg = all(not (t.size and np.nanmin(t) < 0) for t in tabs)
    cut = upper if (nonneg and math.isfinite(upper)) else math.inf

    def bad(t: np.ndarray) -> np.ndarray:
        return ~(t <= cut) if math.isfinite(cut) else ~(t < math.inf)

    return [bad(c) for c in problem.node_costs], [bad(t) for t in problem.edge_costs]


def _domains(problem: Problem, node_bad: list, edge_bad: list,
             deadline: Deadline) -> list[np.ndarray] | None:
    """Arc-consistent allowed masks, or ``None`` when one empties or time runs out."""
    from .heuristics import _Arcs
    allowed = [~b for b in node_bad]
    if not all(al.any() for al in allowed):
        return None
    arcs = _Arcs(problem, edge_bad)
    if not arcs.propagate(allowed, arcs.tight, deadline):
        return None
    return allowed


def contract(problem: Problem, *, upper: float = math.inf,
             deadline: Deadline | None = None) -> Contraction | None:
    """The problem's one-to-one edges contracted (see the module docstring).

    Parameters
    ----------
    problem : Problem
    upper : float
        The cost of a feasible assignment (entries above it are forbidden when every cost
        is ``>= 0``); ``inf`` when none is known.
    deadline : Deadline, optional

    Returns
    -------
    Contraction or None
        ``None`` when no assignment avoids the forbidden entries or the deadline passed.

    Examples
    --------
    Two nodes that must agree (any other pair costs more than the known assignment) become
    one group of two states:

    >>> big = 1e18
    >>> p = Problem([np.array([1.0, 5.0]), np.array([4.0, 0.0])], [(0, 1)],
    ...             [np.array([[0.0, big], [big, 0.0]])])
    >>> c = contract(p, upper=5.0)
    >>> c.n_groups, [x.tolist() for x in c.node_costs]
    (1, [[5.0, 5.0]])
    >>> c.expand(np.array([1])).tolist()
    [1, 1]
    """
    deadline = deadline or Deadline(None)
    n = problem.n_nodes
    node_bad, edge_bad = _forbidden(problem, upper)
    allowed = _domains(problem, node_bad, edge_bad, deadline)
    if allowed is None:
        return None
    dom = [np.nonzero(al)[0] for al in allowed]
    k = np.array([d.size for d in dom], dtype=np.int64)
    # one-to-one edges, as maps between local domain indices
    links: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
    bijective = np.zeros(problem.n_edges, dtype=bool)
    for e, ((u, v), b) in enumerate(zip(problem.edges, edge_bad)):
        if e % _CHECK_EVERY == 0 and deadline.passed():
            return None
        u, v = int(u), int(v)
        if k[u] != k[v]:
            continue
        ok = ~b[np.ix_(dom[u], dom[v])]
        if (ok.sum(axis=1) == 1).all() and (ok.sum(axis=0) == 1).all():
            perm = np.argmax(ok, axis=1)            # u's local index -> v's
            inv = np.empty_like(perm)
            inv[perm] = np.arange(perm.size)
            links[u].append((v, perm))
            links[v].append((u, inv))
            bijective[e] = True
    if deadline.passed():
        return None
    # groups, breadth-first from the node of most configurations
    group = np.full(n, -1, dtype=np.int64)
    local: list[np.ndarray | None] = [None] * n     # group state -> local domain index
    valid: list[np.ndarray] = []
    for root in np.argsort(-k, kind="stable"):
        if group[root] >= 0:
            continue
        g = len(valid)
        group[root] = g
        local[root] = np.arange(k[root])
        ok = np.ones(k[root], dtype=bool)
        queue = deque([int(root)])
        while queue:
            u = queue.popleft()
            for v, perm in links[u]:
                mapped = perm[local[u]]
                if group[v] < 0:
                    group[v] = g
                    local[v] = mapped
                    queue.append(v)
                else:                               # a cycle: it must compose to the same
                    ok &= local[v] == mapped
        valid.append(ok)
    n_groups = len(valid)
    # internal edges: a cost on the group's states (and a ban where one is not one-to-one)
    sizes = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(sizes, group, k)
    extra = [np.zeros(s) for s in sizes]
    for e, ((u, v), t, b) in enumerate(zip(problem.edges, problem.edge_costs, edge_bad)):
        if e % _CHECK_EVERY == 0 and deadline.passed():
            return None
        u, v = int(u), int(v)
        g = group[u]
        if g != group[v]:
            continue
        fu, fv = dom[u][local[u]], dom[v][local[v]]
        valid[g] &= ~b[fu, fv]
        extra[g] += np.where(b[fu, fv], 0.0, t[fu, fv])
    for v in range(n):
        valid[group[v]] &= ~node_bad[v][dom[v][local[v]]]
    if not all(ok.any() for ok in valid):
        return None
    keep = [np.nonzero(ok)[0] for ok in valid]
    maps = tuple(dom[v][local[v][keep[group[v]]]] for v in range(n))
    costs = [extra[g][keep[g]].copy() for g in range(n_groups)]
    for v in range(n):
        costs[group[v]] += problem.node_costs[v][maps[v]]
    # edges between groups, parallel ones added into one table (g < h)
    tables: dict[tuple[int, int], np.ndarray] = {}
    for e, ((u, v), t, b) in enumerate(zip(problem.edges, problem.edge_costs, edge_bad)):
        if e % _CHECK_EVERY == 0 and deadline.passed():
            return None
        u, v = int(u), int(v)
        g, h = int(group[u]), int(group[v])
        if g == h:
            continue
        sub = np.where(b[np.ix_(maps[u], maps[v])], np.inf, t[np.ix_(maps[u], maps[v])])
        if g > h:
            g, h, sub = h, g, sub.T
        tables[(g, h)] = tables[(g, h)] + sub if (g, h) in tables else sub
    pairs = sorted(tables)
    edges = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    logger.debug("contract: %d nodes, %d edges -> %d groups, %d states, %d edges",
                 n, problem.n_edges, n_groups, sum(c.size for c in costs), len(pairs))
    return Contraction(problem, group, maps, tuple(costs), edges,
                       tuple(tables[p] for p in pairs), float(upper))


def violated_rows(problem: Problem, assignment: np.ndarray, *, limit: int = 8,
                  exclude: set | None = None) -> np.ndarray:
    """The memory rows an assignment overflows most, as ``(device, clique index)`` pairs.

    Per device, each maximal run of consecutive overflowing clique times gives its worst
    row; the worst ``limit`` of those (largest overflow relative to the budget first) not
    in ``exclude`` are returned.
    """
    a = np.asarray(assignment, dtype=np.int64)
    use = np.stack([problem.memory[v][a[v]] for v in range(problem.n_nodes)])
    _, level = clique_levels(problem, use)                      # (T, D)
    budget = problem.memory_limit * (1 + MEMORY_RTOL)
    over = (level - budget[None, :]) / np.maximum(budget[None, :], 1e-300)
    found = []
    for d in range(problem.n_devices):
        hot = over[:, d] > 0
        if not hot.any():
            continue
        edges = np.diff(np.concatenate([[0], hot.astype(np.int8), [0]]))
        for s, e in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]):
            t = s + int(np.argmax(over[s:e, d]))
            if exclude is None or (d, t) not in exclude:
                found.append((float(over[t, d]), d, t))
    found.sort(reverse=True)
    return np.array([(d, t) for _, d, t in found[:limit]], dtype=np.int64).reshape(-1, 2)
