"""Exact graph search: OptCNN's eliminations, then variable elimination, plus a memory budget.

The search treats the problem graph as undirected (the table of edge ``(u, v)`` is
``K_u x K_v``; it is transposed as needed) and works in two phases:

1. **OptCNN's eliminations** (Jia et al., ICML 2018), repeated to a fixed point:

   - *leaf elimination*: a node ``j`` with one neighbour ``i`` folds into it,
     ``u'_i(c_i) = u_i(c_i) + min_cj [u_j(c_j) + t_ij(c_i, c_j)]`` (``O(C^2)``);
   - *node elimination*: a node ``j`` with exactly two neighbours ``i, k`` becomes an edge,
     ``t'(c_i, c_k) = min_cj [u_j(c_j) + t_ij(c_i, c_j) + t_jk(c_j, c_k)]``: one numpy
     broadcast min over a ``(C_i, C_k, C_j)`` array, in row chunks for large ``C``
     (``O(C^3)``);
   - *edge elimination*: when that edge already exists, the two tables add (``O(C^2)``);
   - an isolated node picks its cheapest configuration; a node with a single configuration
     folds its edges into its neighbours' costs (first of all).

   Chains, trees and series-parallel graphs (treewidth <= 2: AlexNet, VGG, ResNet,
   Inception) reduce to nothing this way.

2. **Variable elimination** (bucket elimination) on whatever is left, along an elimination
   ordering chosen among networkx's treewidth heuristics (min-degree, min-fill-in: an
   ordering is read off their tree decompositions) and a greedy min-weight ordering (least
   table size first), keeping the ordering with the smallest largest table. Exact on every
   graph; fast for small treewidth ``w``: ``O(n C^(w+1))``.

Every step keeps an argmin table; undoing the steps in reverse order recovers every node's
configuration.

**Memory budgets.** Exact for the *all-live* model (no intervals; memory ``(K_v, D)`` per
node, additive, one budget per device), by Lagrangian relaxation plus branch-and-bound: for
multipliers ``lambda >= 0`` the DP minimises ``cost + lambda . memory``, which gives the lower
bound ``L(lambda) = DP(lambda) - lambda . budget``; subgradient steps raise it; a node whose
DP solution is within the budget gives an incumbent; subproblems branch on one node's
configuration (forbid it / fix it) until every open bound meets the incumbent. The status is
``optimal`` only when that proof completes. Three things make the search small:

- *reduced-cost fixing*: at each branch-and-bound node's multipliers, one upward and one
  downward pass over the elimination steps give every min-marginal ``m_v(c)`` (the Lagrangian
  bound with ``a_v = c`` forced; :meth:`_Engine.min_marginals`); a configuration with
  ``m_v(c) - lambda . budget`` at or above the incumbent is forbidden below that node, then
  the bound is recomputed on what is left (a few rounds);
- *incumbents early*: every relaxed solution is offered, and repaired / improved by a greedy
  1-swap local search (least cost per memory saved, then cost-decreasing swaps that fit);
- *fewer multipliers*: a device whose budget no assignment can exceed, or whose memory
  column (scaled by its budget) another device's dominates entrywise, is implied and left out
  of the relaxation (zoo problems: configurations use the first devices, so usually only
  device 0 remains and the exact one-dimensional dual search applies). A budget that no assignment meets gives
``infeasible``, with the least memory any assignment needs per device in the stats
(``least_memory``, the same DP with memory as the cost). The *interval* memory model with a
budget is not supported (:class:`~milp_parallel.errors.UnsupportedProblemError`: use a MILP
solver); without a budget, memory plays no part and any model is fine.

Public helpers: :func:`solve_unconstrained` (the fast path, no budget) and
:func:`dp_lower_bound` (the Lagrangian bound and its assignment at given multipliers, for MILP
presolve and warm starts).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import networkx as nx
import numpy as np

from ..errors import ProblemTooLargeError, UnsupportedProblemError
from ..problem import MEMORY_RTOL, Problem
from .base import Capabilities, Solver
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolveResult, relative_gap

__all__ = ["DPSolver", "solve_unconstrained", "dp_lower_bound", "LagrangianBound",
           "DEFAULT_MAX_TABLE_SIZE"]

logger = logging.getLogger(__name__)

#: Default refusal threshold: entries of the largest variable-elimination table.
DEFAULT_MAX_TABLE_SIZE = 5e7
#: Entries per numpy temporary in node elimination (bounds memory: 8 bytes each).
_CHUNK_ELEMS = 1 << 20
_ORDERINGS = ("auto", "min_weight", "min_degree", "min_fill")
#: Most variable-elimination table entries kept for min-marginals (reduced-cost fixing).
_MAX_TRACE_ENTRIES = 2e7
_COMMON_OPTIONS = {"time_limit", "threads", "gap", "verbose", "warm_start"}


# ====================================================================== the plan
def _small_int_dtype(k: int) -> np.dtype:
    if k <= 256:
        return np.dtype(np.uint8)
    if k <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int64)


@dataclass(frozen=True)
class _Plan:
    """The structure of one search: which step eliminates which node (values come later).

    ``steps`` holds tuples: ``("iso", v)``, ``("leaf", v, w)``, ``("node", j, i, k,
    merged)`` and ``("ve", x, rest)`` (``rest``: the other variables of ``x``'s bucket).
    """

    steps: tuple
    n_leaf: int
    n_node: int
    n_edge: int
    n_isolated: int
    n_single: int
    nodes_left: int
    treewidth: int
    largest_table: int
    ordering: str

    @property
    def ve_vars(self) -> list:
        """The variables left to variable elimination."""
        return [s[1] for s in self.steps if s[0] == "ve"]


def _ordering_from_decomposition(tree: nx.Graph, nodes) -> list:
    """An elimination ordering read off a tree decomposition (post-order over the bags)."""
    order: list = []
    done: set = set()
    if tree.number_of_nodes() == 0:
        return list(nodes)
    for comp in nx.connected_components(tree):
        root = next(iter(comp))
        parent = {root: None}
        for a, b in nx.bfs_edges(tree, root):
            parent[b] = a
        for bag in reversed(list(nx.dfs_preorder_nodes(tree, root))):
            keep = parent[bag] if parent[bag] is not None else frozenset()
            for x in sorted(set(bag) - set(keep) - done):
                order.append(x)
                done.add(x)
    order.extend(x for x in nodes if x not in done)
    return order


def _min_weight_ordering(adj: dict, k: np.ndarray) -> list:
    """Greedy ordering: eliminate the variable whose bucket table is smallest (lazy heap)."""
    adj = {v: set(ns) for v, ns in adj.items()}
    logk = {v: math.log(float(k[v])) for v in adj}

    def score(v):
        return logk[v] + sum(logk[w] for w in adj[v])

    heap = [(score(v), v) for v in adj]
    heapq.heapify(heap)
    current = {v: s for s, v in heap}
    order = []
    while heap:
        s, v = heapq.heappop(heap)
        if v not in adj or current.get(v) != s:
            continue
        order.append(v)
        nbrs = adj.pop(v)
        del current[v]
        for a in nbrs:
            adj[a].discard(v)
            adj[a].update(b for b in nbrs if b != a)
        for a in nbrs:
            current[a] = score(a)
            heapq.heappush(heap, (current[a], a))
    return order


def _simulate(adj: dict, order: list, k: np.ndarray) -> tuple[list, int, int, float]:
    """Run an ordering on the graph: (steps, largest table, width, total table work)."""
    adj = {v: set(ns) for v, ns in adj.items()}
    steps = []
    largest = 0
    width = 0
    total = 0.0
    for x in order:
        nbrs = adj.pop(x)
        size = int(k[x]) * int(np.prod([int(k[w]) for w in nbrs], dtype=np.float64))
        largest = max(largest, size)
        width = max(width, len(nbrs))
        total += size
        for a in nbrs:
            adj[a].discard(x)
            adj[a].update(b for b in nbrs if b != a)
        steps.append(("ve", x, tuple(sorted(nbrs))))
    return steps, largest, width, total


def _build_plan(n: int, k: np.ndarray, edges: np.ndarray, *, eliminations: bool = True,
                ordering: str = "auto", max_table_size: float = DEFAULT_MAX_TABLE_SIZE
                ) -> _Plan:
    adj = [set() for _ in range(n)]
    for u, v in edges:
        adj[int(u)].add(int(v))
        adj[int(v)].add(int(u))
    alive = np.ones(n, dtype=bool)
    steps: list = []
    n_leaf = n_node = n_edge = n_iso = 0
    n_single = 0
    if eliminations:
        # A node with one configuration folds its edges into its neighbours' costs.
        for v in np.nonzero(k == 1)[0]:
            v = int(v)
            nbrs = tuple(sorted(adj[v]))
            steps.append(("single", v, nbrs))
            for w in nbrs:
                adj[w].discard(v)
            adj[v] = set()
            alive[v] = False
            n_single += 1
        low = [v for v in range(n) if alive[v] and len(adj[v]) <= 1]     # leaves and isolated nodes first
        two = [v for v in range(n) if alive[v] and len(adj[v]) == 2]
        while low or two:
            v = low.pop() if low else two.pop()
            if not alive[v]:
                continue
            d = len(adj[v])
            if d == 0:
                steps.append(("iso", v))
                n_iso += 1
            elif d == 1:
                (w,) = adj[v]
                steps.append(("leaf", v, w))
                adj[w].discard(v)
                n_leaf += 1
                if len(adj[w]) <= 1:
                    low.append(w)
                elif len(adj[w]) == 2:
                    two.append(w)
            elif d == 2:
                i, kk = sorted(adj[v])
                merged = kk in adj[i]
                steps.append(("node", v, i, kk, merged))
                adj[i].discard(v)
                adj[kk].discard(v)
                n_node += 1
                if merged:
                    n_edge += 1
                else:
                    adj[i].add(kk)
                    adj[kk].add(i)
                for w in (i, kk):
                    if len(adj[w]) <= 1:
                        low.append(w)
                    elif len(adj[w]) == 2:
                        two.append(w)
            else:
                continue
            adj[v] = set()
            alive[v] = False
    left = [v for v in range(n) if alive[v]]
    width1 = 2 if n_node else (1 if n_leaf else 0)
    if not left:
        return _Plan(tuple(steps), n_leaf, n_node, n_edge, n_iso, n_single, 0, width1, 0,
                     "none")
    radj = {v: set(adj[v]) for v in left}
    if ordering not in _ORDERINGS:
        raise ValueError(f"unknown ordering {ordering!r}; known: {_ORDERINGS}")
    candidates = {}
    names = ("min_weight", "min_degree", "min_fill") if ordering == "auto" else (ordering,)
    g = None
    for name in names:
        if name == "min_weight":
            order = _min_weight_ordering(radj, k)
        else:
            if name == "min_fill" and ordering == "auto" and len(left) > 1500:
                continue                     # networkx's min-fill-in is slow on big graphs
            if g is None:
                g = nx.Graph()
                g.add_nodes_from(left)
                g.add_edges_from((a, b) for a in left for b in radj[a] if a < b)
            fn = (nx.algorithms.approximation.treewidth_min_degree if name == "min_degree"
                  else nx.algorithms.approximation.treewidth_min_fill_in)
            _, tree = fn(g)
            order = _ordering_from_decomposition(tree, left)
        candidates[name] = _simulate(radj, order, k)
    best = min(candidates, key=lambda nm: (candidates[nm][1], candidates[nm][3]))
    vsteps, largest, width, _ = candidates[best]
    if largest > max_table_size:
        raise ProblemTooLargeError(
            f"the dp search would need a table of {largest:.3g} entries (treewidth about "
            f"{width} on the {len(left)} nodes left after OptCNN's eliminations, ordering "
            f"{best!r}), above max_table_size={max_table_size:.3g}; use a MILP solver "
            "(solver='highs', 'cbc' or 'cpsat') or raise max_table_size")
    return _Plan(tuple(steps) + tuple(vsteps), n_leaf, n_node, n_edge, n_iso, n_single,
                 len(left),
                 max(width1, width), largest, best)


# ====================================================================== execution
def _minplus(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``m[i, k] = min_j a[i, j] + b[j, k]`` and its argmin, in row chunks."""
    ci, cj = a.shape
    ck = b.shape[1]
    bt = np.ascontiguousarray(b.T)                            # (ck, cj)
    m = np.empty((ci, ck))
    arg = np.empty((ci, ck), dtype=_small_int_dtype(cj))
    rows = max(1, _CHUNK_ELEMS // max(1, cj * ck))
    for s in range(0, ci, rows):
        t = a[s:s + rows, None, :] + bt[None, :, :]           # (r, ck, cj)
        j = t.argmin(axis=2)
        arg[s:s + rows] = j
        m[s:s + rows] = np.take_along_axis(t, j[..., None], axis=2)[..., 0]
    return m, arg


def _align(scope: tuple, arr: np.ndarray, target: tuple) -> np.ndarray:
    """View ``arr`` (axes in ``scope`` order) broadcastable against ``target``'s axes."""
    pos = {v: i for i, v in enumerate(target)}
    perm = sorted(range(len(scope)), key=lambda i: pos[scope[i]])
    a = arr.transpose(perm) if perm != list(range(len(scope))) else arr
    shape = [1] * len(target)
    for i in perm:
        shape[pos[scope[i]]] = arr.shape[i]
    return a.reshape(shape)


class _Engine:
    """A plan plus the problem's edge tables; :meth:`run` solves for given node costs."""

    def __init__(self, problem: Problem, *, eliminations: bool = True, ordering: str = "auto",
                 max_table_size: float = DEFAULT_MAX_TABLE_SIZE):
        self.n = problem.n_nodes
        self.k = problem.n_configs
        self.plan = _build_plan(self.n, self.k, problem.edges, eliminations=eliminations,
                                ordering=ordering, max_table_size=max_table_size)
        self.tables = self.edge_tables(problem.edge_costs, problem.edges)
        self.ve_entries = sum(int(self.k[st[1]]) * int(np.prod([int(self.k[v]) for v in st[2]]))
                              for st in self.plan.steps if st[0] == "ve")

    @staticmethod
    def edge_tables(edge_costs, edges) -> dict:
        tabs = {}
        for (u, v), t in zip(edges, edge_costs):
            u, v = int(u), int(v)
            tabs[(u, v) if u < v else (v, u)] = np.ascontiguousarray(t if u < v else t.T)
        return tabs

    def run(self, unary: Sequence[np.ndarray], tables: dict | None = None,
            trace: list | None = None) -> tuple[float, np.ndarray]:
        """Minimise ``sum_v unary[v][a_v] + sum_e t_e[a_u, a_v]``: (value, assignment).

        With a list ``trace``, each step appends what :meth:`min_marginals` needs: the step's
        bucket (the sum of the factors it eliminates, over its clique) and its message.
        """
        un = list(unary)
        tabs = dict(self.tables if tables is None else tables)

        def get(a, b):
            return tabs.pop((a, b)) if a < b else tabs.pop((b, a)).T

        const = 0.0
        records = []
        factors: dict[int, tuple[tuple, np.ndarray]] = {}
        by_var: dict[int, set] = {}
        next_id = 0
        in_ve = False
        for step in self.plan.steps:
            kind = step[0]
            if kind == "single":
                v = step[1]
                for w in step[2]:
                    un[w] = un[w] + get(w, v)[:, 0]
                const += float(un[v][0])
                records.append(0)
                if trace is not None:
                    trace.append((un[v], un[v][0]))
            elif kind == "iso":
                v = step[1]
                c = int(np.argmin(un[v]))
                const += float(un[v][c])
                records.append(c)
                if trace is not None:
                    trace.append((un[v], un[v][c]))
            elif kind == "leaf":
                v, w = step[1], step[2]
                m = get(w, v) + un[v][None, :]                 # (K_w, K_v)
                arg = m.argmin(axis=1)
                msg = m[np.arange(m.shape[0]), arg]
                un[w] = un[w] + msg
                records.append(arg)
                if trace is not None:
                    trace.append((m, msg))
            elif kind == "node":
                j, i, kk, merged = step[1:]
                left, right = get(i, j) + un[j][None, :], get(j, kk)
                m, arg = _minplus(left, right)
                if trace is not None:
                    trace.append(((left, right), m))
                if merged:
                    m = m + tabs.pop((i, kk))
                tabs[(i, kk)] = m
                records.append(arg)
            else:                                              # "ve"
                if not in_ve:                                  # hand the rest over as factors
                    in_ve = True
                    for v in self.plan.ve_vars:
                        factors[next_id] = ((v,), un[v])
                        by_var.setdefault(v, set()).add(next_id)
                        next_id += 1
                    for (a, b), t in tabs.items():
                        factors[next_id] = ((a, b), t)
                        by_var.setdefault(a, set()).add(next_id)
                        by_var.setdefault(b, set()).add(next_id)
                        next_id += 1
                    tabs = {}
                x, rest = step[1], step[2]
                target = rest + (x,)
                total = None
                for fid in by_var.pop(x, set()):
                    scope, arr = factors.pop(fid)
                    for v in scope:
                        if v != x:
                            by_var[v].discard(fid)
                    al = _align(scope, arr, target)
                    total = al if total is None else total + al
                shape = tuple(int(self.k[v]) for v in target)
                total = np.broadcast_to(total, shape) if total is not None else np.zeros(shape)
                arg = total.argmin(axis=-1)
                m = np.take_along_axis(total, arg[..., None], axis=-1)[..., 0]
                if trace is not None:
                    trace.append((total, m))
                if rest:
                    factors[next_id] = (rest, m)
                    for v in rest:
                        by_var[v].add(next_id)
                    next_id += 1
                else:
                    const += float(m)
                records.append(arg.astype(_small_int_dtype(int(self.k[x]))))
        # Undo in reverse order.
        a = np.zeros(self.n, dtype=np.int64)
        for step, rec in zip(reversed(self.plan.steps), reversed(records)):
            kind = step[0]
            if kind in ("iso", "single"):
                a[step[1]] = rec
            elif kind == "leaf":
                a[step[1]] = rec[a[step[2]]]
            elif kind == "node":
                a[step[1]] = rec[a[step[2]], a[step[3]]]
            else:
                a[step[1]] = rec[tuple(a[v] for v in step[2])] if step[2] else rec
        return const, a


    def min_marginals(self, unary: Sequence[np.ndarray]
                      ) -> tuple[float, np.ndarray, list[np.ndarray]] | None:
        """The optimum, its assignment and every min-marginal ``m_v(c)``.

        ``m_v(c)`` is the least value of ``sum_u unary[u][a_u] + sum_e t_e`` over assignments
        with ``a_v = c`` (``inf`` where none is finite). An upward pass (:meth:`run`, keeping
        each step's bucket) and a downward pass over the same steps: the min-marginal of a
        step's clique is its bucket plus (the min-marginal of its message's scope, read off
        the later step that consumed the message) minus the message. Node eliminations keep
        their two ``K^2`` halves, so the ``K^3`` arrays are never stored; their marginals are
        min-plus products. ``None`` when the variable-elimination tables would take more than
        :data:`_MAX_TRACE_ENTRIES` entries to keep.
        """
        if self.ve_entries > _MAX_TRACE_ENTRIES:
            return None
        trace: list = []
        value, a = self.run(unary, trace=trace)
        if not math.isfinite(value):
            return value, a, [np.full(int(k), math.inf) for k in self.k]
        steps = self.plan.steps
        elim = {}
        for s, step in enumerate(steps):
            elim[step[1]] = s
        scopes = []
        for step in steps:
            kind = step[0]
            if kind in ("single", "iso"):
                scopes.append(((), step[1]))
            elif kind == "leaf":
                scopes.append(((step[2],), step[1]))
            elif kind == "node":
                scopes.append(((step[2], step[3]), step[1]))
            else:
                scopes.append((tuple(step[2]), step[1]))
        shift: dict[int, np.ndarray] = {}        # s -> M_R - msg over the rest scope R
        cache: dict[tuple, np.ndarray] = {}

        def marg(s: int, want: tuple) -> np.ndarray:
            """Min-marginal of step ``s``'s clique over ``want`` (axes in ``want`` order)."""
            key = (s, want)
            if key in cache:
                return cache[key]
            rest, x = scopes[s]
            bucket, msg = trace[s]
            d = shift[s]
            if steps[s][0] == "node":
                i, kk = rest
                left, right = bucket                          # (K_i, K_j), (K_j, K_k)
                if x not in want:                             # over (i, k): M_R itself
                    full = np.where(np.isfinite(msg), msg + d, math.inf)
                    res = _reduce(full, (i, kk), want)
                elif kk not in want:                          # (i, j) or (j)
                    pij = left + _minplus_value(d, right.T)
                    res = _reduce(pij, (i, x), want)
                else:                                         # (j, k) or (k, j)
                    qjk = right + _minplus_value(left.T, d)
                    res = _reduce(qjk, (x, kk), want)
            else:
                full = cache.get((s, None))
                if full is None:
                    full = bucket + (np.asarray(d)[..., None] if rest else d)
                    cache[(s, None)] = full
                res = _reduce(full, rest + (x,), want)
            cache[key] = res
            return res

        for s in range(len(steps) - 1, -1, -1):
            rest, x = scopes[s]
            msg = np.asarray(trace[s][1], dtype=np.float64)
            if rest:
                owner = min(elim[r] for r in rest)
                m_r = marg(owner, rest)
            else:
                m_r = np.float64(value)
            shift[s] = np.where(np.isfinite(msg), m_r - np.where(np.isfinite(msg), msg, 0.0),
                                0.0)
        mm = [marg(elim[v], (v,)) for v in range(self.n)]
        return value, a, mm


def _reduce(arr: np.ndarray, scope: tuple, want: tuple) -> np.ndarray:
    """Min of ``arr`` (axes in ``scope`` order) over the axes not in ``want``, in its order."""
    axes = tuple(i for i, v in enumerate(scope) if v not in want)
    red = arr.min(axis=axes) if axes else arr
    kept = [v for v in scope if v in want]
    return red.transpose([kept.index(v) for v in want]) if len(want) > 1 else red


def _minplus_value(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``m[i, k] = min_j a[i, j] + b[j, k]`` (no argmin), in row chunks."""
    ci, cj = a.shape
    ck = b.shape[1]
    bt = np.ascontiguousarray(b.T)
    m = np.empty((ci, ck))
    rows = max(1, _CHUNK_ELEMS // max(1, cj * ck))
    for s in range(0, ci, rows):
        m[s:s + rows] = (a[s:s + rows, None, :] + bt[None, :, :]).min(axis=2)
    return m


# ====================================================================== public helpers
def _check_options(name: str, options: dict, own: set) -> None:
    unknown = set(options) - own - _COMMON_OPTIONS
    if unknown:
        raise TypeError(f"{name}: unknown option(s) {sorted(unknown)}; known: "
                        f"{sorted(own | _COMMON_OPTIONS)}")


def solve_unconstrained(problem: Problem, *, eliminations: bool = True,
                        ordering: str = "auto",
                        max_table_size: float = DEFAULT_MAX_TABLE_SIZE
                        ) -> tuple[np.ndarray, float]:
    """The least-cost assignment, ignoring any memory budget (the fast path).

    Parameters
    ----------
    problem : Problem
    eliminations : bool
        Use OptCNN's leaf/node/edge eliminations before variable elimination (default).
        ``False`` runs variable elimination on the whole graph (same answer; for testing).
    ordering : str
        Variable elimination ordering: ``"auto"`` (the best of the others), ``"min_weight"``,
        ``"min_degree"``, ``"min_fill"``.
    max_table_size : float
        Refuse when the largest elimination table would exceed this many entries.

    Returns
    -------
    assignment : numpy.ndarray
        One configuration index per node.
    cost : float
        Its cost (``inf`` when every assignment makes a forbidden choice).

    Raises
    ------
    ProblemTooLargeError
        If the graph's treewidth makes the tables too large (names the treewidth and size).

    Examples
    --------
    >>> import numpy as np
    >>> from milp_parallel import Problem
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> a, cost = solve_unconstrained(p)
    >>> a.tolist(), cost
    ([1, 1], 2.5)
    """
    eng = _Engine(problem, eliminations=eliminations, ordering=ordering,
                  max_table_size=max_table_size)
    _, a = eng.run(problem.node_costs)
    return a, problem.evaluate(a).cost


@dataclass(frozen=True)
class LagrangianBound:
    """The DP's answer at given memory multipliers.

    Attributes
    ----------
    bound : float
        ``L(lambda) = min_a [cost(a) + lambda . memory(a)] - lambda . budget``, a lower bound
        on the optimum under the budget (``inf``: every assignment is forbidden).
    assignment : numpy.ndarray
        The minimiser of the relaxed problem.
    objective : float
        Its true cost.
    memory : numpy.ndarray or None
        Its memory per device (all-live sum), ``None`` without memory tables.
    feasible : bool
        Whether it meets the budget (then it is a valid warm start, and optimal when
        ``objective`` equals ``bound`` within tolerance).
    """

    bound: float
    assignment: np.ndarray
    objective: float
    memory: np.ndarray | None
    feasible: bool


def _memory_of(problem: Problem, a: np.ndarray) -> np.ndarray:
    return np.sum([problem.memory[v][a[v]] for v in range(problem.n_nodes)], axis=0)


def dp_lower_bound(problem: Problem, multipliers: float | Sequence[float] | None = None, *,
                   eliminations: bool = True, max_table_size: float = DEFAULT_MAX_TABLE_SIZE
                   ) -> LagrangianBound:
    """The Lagrangian lower bound of the all-live memory budget at ``multipliers``.

    Minimises ``cost(a) + lambda . memory(a)`` exactly with the DP. For any
    ``lambda >= 0`` the result's ``bound`` is a valid lower bound on the optimum under the
    budget (use it in a MILP presolve or to judge a gap); the assignment is a warm start when
    ``feasible``. Without a budget, ``lambda`` is ignored and the bound is the optimum.

    Parameters
    ----------
    problem : Problem
        All-live memory model (intervals are refused when a budget is set).
    multipliers : float or sequence of float, optional
        ``lambda``, one per device (or one for all), in cost units per memory unit; >= 0.
        Default 0.
    eliminations, max_table_size
        As in :func:`solve_unconstrained`.

    Returns
    -------
    LagrangianBound

    Raises
    ------
    UnsupportedProblemError
        For the interval memory model with a budget.
    ValueError
        For a negative multiplier or a wrong count.

    Examples
    --------
    >>> import numpy as np
    >>> from milp_parallel import Problem
    >>> p = Problem([np.array([1.0, 5.0]), np.array([1.0, 5.0])], [(0, 1)],
    ...             [np.zeros((2, 2))], memory=[np.array([4.0, 1.0])] * 2, memory_limit=5)
    >>> r = dp_lower_bound(p, 2.0)
    >>> round(r.bound, 6), r.feasible          # min(c + 2 m) summed, minus 2 x budget
    (4.0, True)
    """
    if problem.has_budget and problem.intervals is not None:
        raise UnsupportedProblemError(_INTERVAL_MSG)
    eng = _Engine(problem, eliminations=eliminations, max_table_size=max_table_size)
    if not problem.has_budget:
        val, a = eng.run(problem.node_costs)
        mem = _memory_of(problem, a) if problem.memory is not None else None
        return LagrangianBound(val, a, problem.evaluate(a).cost, mem, math.isfinite(val))
    d = problem.n_devices
    lam = np.zeros(d) if multipliers is None else np.broadcast_to(
        np.asarray(multipliers, dtype=np.float64), (d,)).copy()
    if np.any(lam < 0) or not np.all(np.isfinite(lam)):
        raise ValueError(f"multipliers must be finite and >= 0, got {lam}")
    budget = problem.memory_limit * (1 + MEMORY_RTOL)
    val, a = eng.run([c + m @ lam for c, m in zip(problem.node_costs, problem.memory)])
    mem = _memory_of(problem, a)
    ev = problem.evaluate(a)
    return LagrangianBound(val - float(lam @ budget), a, ev.cost, mem, ev.feasible)


_INTERVAL_MSG = ("the dp solver is exact for the all-live memory model only; this problem "
                 "has liveness intervals and a memory budget: use a MILP solver "
                 "(solver='highs', 'cbc' or 'cpsat'), or drop the budget with "
                 "problem.with_memory_limit(None)")


# ====================================================================== budget search
class _BudgetSearch:
    """Lagrangian relaxation + best-first branch-and-bound for the all-live budget.

    Besides the bound, each branch-and-bound node uses its multipliers for *reduced-cost
    fixing*: a configuration whose min-marginal ``m_v(c) - lambda . budget`` (the Lagrangian
    bound with ``a_v = c`` forced) already reaches the incumbent cannot be in a better
    assignment, so it is forbidden in that node and all below it. A greedy 1-swap local search
    repairs and improves the relaxed solutions for early incumbents. Devices whose budget no
    assignment can exceed, and devices whose (budget-scaled) memory column another device's
    dominates, are left out of the relaxation: their constraints are implied.
    """

    def __init__(self, problem: Problem, eng: _Engine, *, gap: float, time_limit, t0: float,
                 max_branch_nodes: int, root_iterations: int, node_iterations: int,
                 fixing: bool = True):
        self.p = problem
        self.eng = eng
        self.gap = gap
        self.deadline = None if time_limit is None else t0 + float(time_limit)
        self.max_branch_nodes = max_branch_nodes
        self.root_iterations = root_iterations
        self.node_iterations = node_iterations
        self.fixing = fixing
        self.budget_full = problem.memory_limit * (1 + MEMORY_RTOL)
        self.active = np.arange(problem.n_devices)
        self.budget = self.budget_full
        self.mem = problem.memory
        self.mem_all = np.concatenate(self.mem, axis=0)
        self.cost = problem.node_costs
        self.best_a: np.ndarray | None = None
        self.best_f = math.inf
        self.dp_runs = 0
        self.lagrangian_iterations = 0
        self.fixed = 0
        self.local_searches = 0
        k = problem.n_configs
        self.offsets = np.concatenate([[0], np.cumsum(k)])
        self.nbrs: list[list] = [[] for _ in range(problem.n_nodes)]
        for (u, v), t in zip(problem.edges, problem.edge_costs):
            u, v = int(u), int(v)
            self.nbrs[u].append((v, np.ascontiguousarray(t)))
            self.nbrs[v].append((u, np.ascontiguousarray(t.T)))

    # ------------------------------------------------------------------ setup
    def least_memory(self) -> tuple[np.ndarray, list]:
        """Least memory per device among assignments of finite cost, and the minimisers."""
        tabs = {key: np.where(np.isfinite(t), 0.0, np.inf) for key, t in self.eng.tables.items()}
        least, argmins = [], []
        for d in range(self.p.n_devices):
            un = [np.where(np.isfinite(c), m[:, d], np.inf)
                  for c, m in zip(self.cost, self.p.memory)]
            val, a = self.eng.run(un, tabs)
            self.dp_runs += 1
            least.append(val)
            argmins.append(a)
        if self.p.n_devices > 1:
            # A heuristic incumbent for several devices: memory relative to each budget.
            scale = 1.0 / np.maximum(self.budget_full, 1e-300)
            un = [np.where(np.isfinite(c), m @ scale, np.inf)
                  for c, m in zip(self.cost, self.p.memory)]
            argmins.append(self.eng.run(un, tabs)[1])
            self.dp_runs += 1
        return np.array(least), argmins

    def reduce_devices(self, allowed: list) -> None:
        """Keep only the devices whose budget can bind and that no other device dominates."""
        b = self.budget_full
        cols = np.concatenate([m[al] for m, al in zip(self.p.memory, allowed)], axis=0)
        most = np.sum([m[al].max(axis=0) for m, al in zip(self.p.memory, allowed)], axis=0)
        keep = [d for d in range(self.p.n_devices) if most[d] > b[d]]
        scaled = cols / np.maximum(b, 1e-300)
        active = []
        for d in keep:
            dominated = False
            for e in keep:
                if e == d:
                    continue
                ge = scaled[:, e] >= scaled[:, d]
                if ge.all() and (e < d or np.any(scaled[:, e] > scaled[:, d])):
                    dominated = True
                    break
            if not dominated:
                active.append(d)
        self.active = np.array(active, dtype=np.int64)
        self.budget = b[self.active]
        self.mem = tuple(np.ascontiguousarray(m[:, self.active]) for m in self.p.memory)
        self.mem_all = np.concatenate(self.mem, axis=0) if self.mem else np.zeros((0, 0))

    # ------------------------------------------------------------------ helpers
    def mem_of(self, a: np.ndarray) -> np.ndarray:
        return np.sum([m[c] for m, c in zip(self.mem, a)], axis=0) if len(a) else \
            np.zeros(len(self.active))

    def offer(self, a: np.ndarray) -> None:
        ev = self.p.evaluate(a)
        if ev.feasible and ev.cost < self.best_f:
            self.best_f, self.best_a = ev.cost, a.copy()

    def tol(self) -> float:
        return 1e-10 * abs(self.best_f) if math.isfinite(self.best_f) else 0.0

    def prune_level(self) -> float:
        if not math.isfinite(self.best_f):
            return math.inf
        return self.best_f - self.tol() - self.gap * abs(self.best_f)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def unary(self, allowed: list, lam: np.ndarray) -> list:
        return [np.where(al, c + m @ lam, np.inf)
                for al, c, m in zip(allowed, self.cost, self.mem)]

    def pack(self, allowed: list) -> np.ndarray:
        return np.packbits(np.concatenate(allowed))

    def unpack(self, packed: np.ndarray) -> list:
        flat = np.unpackbits(packed, count=int(self.offsets[-1])).astype(bool)
        return [flat[self.offsets[v]:self.offsets[v + 1]] for v in range(self.p.n_nodes)]

    def tighten(self, allowed: list) -> bool:
        """Forbid configurations that cannot fit with every other node at its least memory.

        Returns ``False`` when some node is left with no configuration.
        """
        starts = self.offsets[:-1]
        sizes = np.diff(self.offsets)
        mem_all = self.mem_all
        for _ in range(4):
            flat = np.concatenate(allowed)
            if not np.logical_or.reduceat(flat, starts).all():
                return False
            masked = np.where(flat[:, None], mem_all, np.inf)
            mins = np.minimum.reduceat(masked, starts, axis=0)             # (n, D)
            slack = self.budget - mins.sum(axis=0)
            ok = np.all(mem_all - np.repeat(mins, sizes, axis=0) <= slack, axis=1)
            if not np.any(flat & ~ok):
                return True
            for v, al in enumerate(allowed):
                al &= ok[starts[v]:starts[v] + sizes[v]]
        return all(al.any() for al in allowed)

    def local_search(self, a: np.ndarray, allowed: list, max_moves: int | None = None) -> None:
        """Greedy 1-swaps: repair the budget (least cost per memory saved), then improve.

        Vectorized over all ``(node, configuration)`` pairs; after a move only the moved
        node's neighbours' cost columns are recomputed.
        """
        n = self.p.n_nodes
        if n == 0:
            return
        self.local_searches += 1
        a = np.asarray(a, dtype=np.int64).copy()
        starts = self.offsets[:-1]
        sizes = np.diff(self.offsets)
        owner = np.repeat(np.arange(n), sizes)
        ok_all = np.concatenate(allowed)
        mem_all = self.mem_all
        cost_all = np.empty(int(self.offsets[-1]))

        def column(v):
            d = self.cost[v].copy()
            for u, t in self.nbrs[v]:
                d += t[:, a[u]]
            cost_all[starts[v]:starts[v] + sizes[v]] = d

        for v in range(n):
            column(v)
        use = self.mem_of(a)
        scale = 1.0 / np.maximum(self.budget, 1e-300)
        tiny = 1e-12 * max(1.0, abs(self.best_f) if math.isfinite(self.best_f) else 1.0)
        for _ in range(max_moves or 4 * n + 10):
            cur = starts + a
            with np.errstate(invalid="ignore"):
                delta = cost_all - np.repeat(cost_all[cur], sizes)
            dm = mem_all - np.repeat(mem_all[cur], sizes, axis=0)
            fits = use + dm <= self.budget
            over = use > self.budget
            if over.any():
                saved = -(dm[:, over] @ scale[over])
                ok = ok_all & np.isfinite(delta) & (saved > 0) & np.all(fits | over, axis=1)
                if not ok.any():
                    break
                score = np.where(ok, delta / np.where(ok, saved, 1.0), np.inf)
            else:
                ok = ok_all & (delta < -tiny) & np.all(fits, axis=1)
                if not ok.any():
                    break
                score = np.where(ok, delta, np.inf)
            i = int(np.argmin(score))
            v = int(owner[i])
            c = i - int(starts[v])
            use = use + mem_all[i] - mem_all[cur[v]]
            a[v] = c
            for u, _ in self.nbrs[v]:
                column(u)
        self.offer(a)

    # ------------------------------------------------------------------ bounds
    def relaxed(self, allowed: list, lam: np.ndarray):
        """One DP run at ``lam``: (bound, assignment, true cost, memory - budget) or None."""
        val, a = self.eng.run(self.unary(allowed, lam))
        self.dp_runs += 1
        self.lagrangian_iterations += 1
        if not math.isfinite(val):
            return None
        self.offer(a)
        return (val - float(lam @ self.budget), a, self.p.evaluate(a).cost,
                self.mem_of(a) - self.budget)

    def evaluate_1d(self, allowed: list, lam: np.ndarray, iterations: int):
        """One device: maximise the concave piecewise-linear ``L(lambda)`` by cutting planes.

        Keeps a line ``f + lambda g`` with ``g > 0`` (lo) and one with ``g <= 0`` (hi); the
        next ``lambda`` is where they cross; it stops when ``L`` there meets the lines (the
        dual optimum) or the node can be pruned.
        """
        x = float(lam[0])
        r = self.relaxed(allowed, np.array([x]))
        if r is None:
            return math.inf, lam, None
        best = (r[0], np.array([x]), r[1])
        lo = hi = None
        for it in range(max(1, iterations)):
            bound, a, f, g = r
            g = float(g[0])
            if bound > best[0]:
                best = (bound, np.array([x]), a)
            if best[0] >= self.prune_level():
                break
            if g > 0:
                lo = (f, g)
            else:
                if x == 0.0:
                    break                          # the relaxation is feasible at lambda = 0
                hi = (f, g)
            if lo is None:
                x_new = 0.0
            elif hi is None:
                step = ((self.best_f - lo[0]) / lo[1] if math.isfinite(self.best_f)
                        else 1.0)
                x_new = max(2.0 * x, step * (1 + 1e-9), 1e-300)
            else:
                x_new = (hi[0] - lo[0]) / (lo[1] - hi[1])
            if x_new == x or not math.isfinite(x_new) or x_new < 0:
                break
            x = x_new
            r = self.relaxed(allowed, np.array([x]))
            if r is None:
                return math.inf, lam, None
            if lo is not None and hi is not None:
                line = lo[0] + x * lo[1]
                if r[0] >= line - 1e-12 * max(1.0, abs(line)):
                    if r[0] > best[0]:
                        best = (r[0], np.array([x]), r[1])
                    break                          # the lines meet: the dual optimum
            if self.out_of_time():
                break
        bound, a = r[0], r[1]
        if bound > best[0]:
            best = (bound, np.array([x]), a)
        return best

    def evaluate(self, allowed: list, lam: np.ndarray, iterations: int):
        """Subgradient ascent at one B&B node: (best bound, its lambda, its assignment)."""
        best = (-math.inf, lam, None)
        theta = 1.0
        stall = 0
        for _ in range(max(1, iterations)):
            r = self.relaxed(allowed, lam)
            if r is None:
                return math.inf, lam, None                    # nothing allowed is finite
            bound, a, f, g = r
            if bound > best[0]:
                best = (bound, lam, a)
                stall = 0
            else:
                stall += 1
                if stall >= 2:
                    theta /= 2
                    stall = 0
            if bound >= self.prune_level():
                break
            if np.all(g <= 0):
                # Feasible: optimal for this node when complementary slackness holds.
                if f - bound <= self.tol() or np.all(lam * g == 0):
                    return max(best[0], f if np.all(lam * g == 0) else bound), lam, a
            target = self.best_f if math.isfinite(self.best_f) else (
                bound + max(1.0, abs(bound)) * 0.1)
            gg = g.copy()
            gg[(lam <= 0) & (gg < 0)] = 0.0                    # projected direction
            norm = float(gg @ gg)
            if norm == 0:
                break
            lam = np.maximum(0.0, lam + theta * max(target - bound, 1e-12 * abs(target)) /
                             norm * gg)
            if self.out_of_time():
                break
        return best

    def fix(self, allowed: list, lam: np.ndarray) -> int | None:
        """Reduced-cost fixing at ``lam``: forbid ``(v, c)`` whose min-marginal bound reaches
        the incumbent. Returns how many were forbidden (``None``: min-marginals unavailable).
        """
        level = self.prune_level()
        if not math.isfinite(level):
            return 0
        res = self.eng.min_marginals(self.unary(allowed, lam))
        if res is None:
            return None
        self.dp_runs += 2
        val, a, mm = res
        if math.isfinite(val):
            self.offer(a)
        shift = float(lam @ self.budget)
        # A margin for the rounding of the downward pass's sums and differences.
        margin = 1e-9 * max(abs(val) if math.isfinite(val) else 0.0, shift, abs(self.best_f))
        removed = 0
        for al, m in zip(allowed, mm):
            out = al & (m - shift > level + margin)
            k = int(out.sum())
            if k:
                al &= ~out
                removed += k
        self.fixed += removed
        return removed

    def branch_var(self, allowed: list, lam: np.ndarray, a: np.ndarray) -> int:
        best_v, best_s = -1, -1.0
        for v, al in enumerate(allowed):
            if al.sum() <= 1:
                continue
            m = self.mem[v]
            excess = m[a[v]] - m[al].min(axis=0)
            s = float(excess @ (lam + 1e-300)) + 1e-300 * float(excess.sum())
            if s > best_s:
                best_v, best_s = v, s
        return best_v

    # ------------------------------------------------------------------ search
    def process(self, allowed: list, lam: np.ndarray, iters: int, n_nodes: int):
        """Bound one node (fixing in rounds): (bound, lam, relaxed assignment) or None."""
        d = len(self.active)
        bound, a = -math.inf, None
        for rnd in range(4):
            if d == 1:
                b, lam, a = self.evaluate_1d(allowed, lam, iters)
            else:
                b, lam, a = self.evaluate(allowed, lam, iters)
            bound = max(bound, b)
            if a is None or bound >= self.prune_level():
                return bound, lam, None
            if n_nodes <= 50 or n_nodes % 10 == 0:
                self.local_search(a, allowed)
                if bound >= self.prune_level():
                    return bound, lam, None
            if not self.fixing or self.out_of_time():
                break
            total = sum(int(al.sum()) for al in allowed)
            removed = self.fix(allowed, lam)
            if not removed:
                break
            if not self.tighten(allowed):
                return self.prune_level(), lam, None
            if removed < 0.02 * total:
                break
        return bound, lam, a

    def run(self, allowed0: list) -> tuple[str, float, int]:
        """Returns (status, bound, branch nodes)."""
        d = len(self.active)
        if d == 0:                                   # no budget can bind: the free optimum
            val, a = self.eng.run(self.unary(allowed0, np.zeros(0)))
            self.dp_runs += 1
            if math.isfinite(val):
                self.offer(a)
            if self.best_a is None:
                return INFEASIBLE, math.inf, 0
            return OPTIMAL, self.best_f, 1
        heap = [(-math.inf, 0, self.pack(allowed0), np.zeros(d))]
        counter = 1
        n_nodes = 0
        lowest_pruned = math.inf
        while heap:
            pb, _, packed, lam = heapq.heappop(heap)
            if pb >= self.prune_level():
                lowest_pruned = min(lowest_pruned, pb)
                continue
            if n_nodes >= self.max_branch_nodes or self.out_of_time():
                heapq.heappush(heap, (pb, 0, packed, lam))
                bound = min(min(h[0] for h in heap), lowest_pruned, self.best_f)
                return (FEASIBLE if self.best_a is not None else UNKNOWN), bound, n_nodes
            n_nodes += 1
            allowed = self.unpack(packed)
            if not self.tighten(allowed):
                continue                                       # nothing fits: infeasible
            iters = self.root_iterations if n_nodes == 1 else self.node_iterations
            bound, lam, a = self.process(allowed, lam, iters, n_nodes)
            bound = max(bound, pb)
            if a is None or bound >= self.prune_level():
                if math.isfinite(bound):
                    lowest_pruned = min(lowest_pruned, bound)
                continue
            v = self.branch_var(allowed, lam, a)
            if v < 0:
                continue                                       # a single assignment: offered
            c = int(a[v])
            for fix in (False, True):
                child = [al.copy() if u == v else al for u, al in enumerate(allowed)]
                if fix:
                    child[v][:] = False
                child[v][c] = fix
                heapq.heappush(heap, (bound, counter, self.pack(child), lam))
                counter += 1
        if self.best_a is None:
            return INFEASIBLE, math.inf, n_nodes
        bound = min(lowest_pruned, self.best_f)
        if self.gap == 0 or self.best_f - bound <= self.tol():
            return OPTIMAL, self.best_f, n_nodes
        return FEASIBLE, bound, n_nodes


# ====================================================================== the backend
class DPSolver(Solver):
    """Exact graph search (registry name ``"dp"``); see the module docstring.

    Exact for: no memory, memory without a budget (any model), and the all-live memory model
    with a budget (any number of devices). Not for intervals with a budget.

    Options
    -------
    eliminations : bool
        OptCNN's leaf/node/edge eliminations before variable elimination (default ``True``).
    ordering : str
        ``"auto"`` (default), ``"min_weight"``, ``"min_degree"``, ``"min_fill"``.
    max_table_size : float
        Largest variable-elimination table allowed (default ``5e7`` entries).
    time_limit : float
        Seconds for the budget search (returns ``feasible``/``unknown`` when it runs out).
    gap : float
        Relative gap at which the budget search may stop (default 0: prove optimality).
    max_branch_nodes : int
        Branch-and-bound node limit (default 200000).
    root_iterations, node_iterations : int
        Subgradient iterations at the root (default 60) and at other nodes (default 8).
    fixing : bool
        Reduced-cost fixing from min-marginals in the budget search (default ``True``;
        ``False`` only for comparison: same answers, slower).

    ``warm_start`` (an assignment) seeds the budget search's incumbent when it meets the
    budget (a good one makes reduced-cost fixing stronger from the start); it is ignored
    without a budget. ``threads`` and ``verbose`` are accepted and ignored.
    """

    name = "dp"
    package = None
    module = None
    capabilities = Capabilities(exact=True, memory_all_live=True, memory_intervals=False,
                                time_limit=True)

    def solve(self, problem: Problem, **options: Any) -> SolveResult:
        """Solve exactly.

        Returns
        -------
        SolveResult
            ``stats``: ``leaf_eliminations``, ``node_eliminations``, ``edge_eliminations``,
            ``isolated``, ``single_config_eliminations``, ``nodes_left``, ``treewidth``,
            ``largest_table``, ``ordering``,
            and with a budget ``dp_runs``, ``lagrangian_iterations``, ``branch_nodes``,
            ``least_memory`` (per device), ``fixed_configs`` (configurations forbidden by
            reduced-cost fixing, summed over branch-and-bound nodes), ``local_searches``,
            ``binding_devices`` (the devices kept in the relaxation).

        Raises
        ------
        ProblemTooLargeError
            If the largest table exceeds ``max_table_size``.
        UnsupportedProblemError
            For intervals with a budget.
        """
        own = {"eliminations", "ordering", "max_table_size", "max_branch_nodes",
               "root_iterations", "node_iterations", "fixing"}
        _check_options("dp", options, own)
        t0 = time.perf_counter()
        if problem.has_budget and problem.intervals is not None:
            raise UnsupportedProblemError(_INTERVAL_MSG)
        eng = _Engine(problem, eliminations=options.get("eliminations", True),
                      ordering=options.get("ordering") or "auto",
                      max_table_size=options.get("max_table_size") or DEFAULT_MAX_TABLE_SIZE)
        pl = eng.plan
        stats: dict[str, Any] = {
            "leaf_eliminations": pl.n_leaf, "node_eliminations": pl.n_node,
            "edge_eliminations": pl.n_edge, "isolated": pl.n_isolated,
            "single_config_eliminations": pl.n_single,
            "nodes_left": pl.nodes_left, "treewidth": pl.treewidth,
            "largest_table": pl.largest_table, "ordering": pl.ordering}

        def done(status, a, bound):
            objective = problem.evaluate(a).cost if a is not None else math.nan
            if status == OPTIMAL:
                bound, gap = objective, 0.0
            elif a is None:
                gap = math.inf
            else:
                gap = relative_gap(objective, bound)
            return SolveResult(assignment=a, objective=objective, status=status, bound=bound,
                               gap=gap, seconds=time.perf_counter() - t0, solver="dp",
                               stats=stats)

        if not problem.has_budget:
            val, a = eng.run(problem.node_costs)
            if not math.isfinite(val):
                return done(INFEASIBLE, None, math.inf)
            return done(OPTIMAL, a, val)

        search = _BudgetSearch(
            problem, eng, gap=float(options.get("gap") or 0.0),
            time_limit=options.get("time_limit"), t0=t0,
            max_branch_nodes=int(options.get("max_branch_nodes") or 200_000),
            root_iterations=int(options.get("root_iterations") or 60),
            node_iterations=int(options.get("node_iterations") or 8),
            fixing=bool(options.get("fixing", True)))
        least, argmins = search.least_memory()
        stats["least_memory"] = least
        budget = search.budget
        if not np.all(np.isfinite(least)) or np.any(least > budget):
            stats.update(dp_runs=search.dp_runs, lagrangian_iterations=0, branch_nodes=0)
            return done(INFEASIBLE, None, math.inf)
        for a in argmins:
            search.offer(a)                # D == 1: the least-memory assignment is feasible
        warm = options.get("warm_start")
        if warm is not None:
            search.offer(problem.check_assignment(warm))
        # Drop configurations that cannot fit even with every other node at its least memory.
        allowed0 = [np.isfinite(c) for c in problem.node_costs]
        if not search.tighten(allowed0):
            stats.update(dp_runs=search.dp_runs, lagrangian_iterations=0, branch_nodes=0)
            return done(INFEASIBLE, None, math.inf)
        search.reduce_devices(allowed0)
        for a in argmins:
            search.local_search(a, allowed0)
        status, bound, n_bb = search.run(allowed0)
        stats.update(dp_runs=search.dp_runs, lagrangian_iterations=search.lagrangian_iterations,
                     branch_nodes=n_bb, fixed_configs=search.fixed,
                     local_searches=search.local_searches,
                     binding_devices=[int(d) for d in search.active])
        return done(status, search.best_a, bound)
