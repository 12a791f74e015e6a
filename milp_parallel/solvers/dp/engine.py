"""The exact graph search's engine: OptCNN's eliminations, then variable elimination.

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
configuration. :meth:`Engine.min_marginals` adds a downward pass over the same steps.

Every pass takes a :class:`~milp_parallel.solvers.options.Deadline` and raises
:class:`OutOfTime` between steps (and between the row chunks of a node elimination) once it
has passed, so a ``time_limit`` holds on every input.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Sequence

import networkx as nx
import numpy as np

from ...errors import ProblemTooLargeError
from ...problem import Problem
from ..options import Deadline

__all__ = ["Engine", "OutOfTime", "solve_unconstrained", "DEFAULT_MAX_TABLE_SIZE"]

#: Default refusal threshold: entries of the largest variable-elimination table.
DEFAULT_MAX_TABLE_SIZE = 5e7
#: Entries per numpy temporary in node elimination (bounds memory: 8 bytes each).
_CHUNK_ELEMS = 1 << 20
_ORDERINGS = ("auto", "min_weight", "min_degree", "min_fill")
#: Most variable-elimination table entries kept for min-marginals (reduced-cost fixing).
_MAX_TRACE_ENTRIES = 2e7
#: Above this many nodes left after OptCNN's eliminations, networkx's orderings are skipped
#: (they build a graph of Python objects and can run for minutes on contest instances).
_NX_ORDERING_LIMIT = 1500


class OutOfTime(Exception):
    """A deadline passed in the middle of a pass (caught by the solver, never raised to users)."""


def _check(deadline: Deadline | None) -> None:
    if deadline is not None and deadline.passed():
        raise OutOfTime


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


def _min_weight_ordering(adj: dict, k: np.ndarray, max_log_size: float = math.inf,
                         deadline: Deadline | None = None) -> list | None:
    """Greedy ordering: eliminate the variable whose bucket table is smallest (lazy heap).

    Returns ``None`` as soon as the smallest bucket left exceeds ``exp(max_log_size)``
    entries (every completion of this ordering would too: stop before the fill-in grows).
    """
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
        if s > max_log_size:
            return None
        if len(order) % 256 == 0:
            _check(deadline)
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


def _simulate(adj: dict, order: list, k: np.ndarray, limit: float = math.inf,
              deadline: Deadline | None = None) -> tuple[list, float, int, float]:
    """Run an ordering on the graph: (steps, largest table, width, total table work).

    Stops (with the largest table so far) once a table exceeds ``limit``.
    """
    adj = {v: set(ns) for v, ns in adj.items()}
    steps = []
    largest = 0.0
    width = 0
    total = 0.0
    for i, x in enumerate(order):
        if i % 256 == 0:
            _check(deadline)
        nbrs = adj.pop(x)
        size = float(k[x]) * float(np.prod([float(k[w]) for w in nbrs]))
        largest = max(largest, size)
        width = max(width, len(nbrs))
        if largest > limit:
            break
        total += size
        for a in nbrs:
            adj[a].discard(x)
            adj[a].update(b for b in nbrs if b != a)
        steps.append(("ve", x, tuple(sorted(nbrs))))
    return steps, largest, width, total


def _build_plan(n: int, k: np.ndarray, edges: np.ndarray, *, eliminations: bool = True,
                ordering: str = "auto", max_table_size: float = DEFAULT_MAX_TABLE_SIZE,
                deadline: Deadline | None = None) -> _Plan:
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
        # leaves and isolated nodes first
        low = [v for v in range(n) if alive[v] and len(adj[v]) <= 1]
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
        _check(deadline)
        if name == "min_weight":
            order = _min_weight_ordering(radj, k, math.log(max_table_size), deadline)
            if order is None:
                candidates[name] = ([], math.inf, len(left), math.inf)
                continue
        else:
            if ordering == "auto" and len(left) > _NX_ORDERING_LIMIT:
                continue                     # networkx's orderings are slow on big graphs
            if g is None:
                g = nx.Graph()
                g.add_nodes_from(left)
                g.add_edges_from((a, b) for a in left for b in radj[a] if a < b)
            fn = (nx.algorithms.approximation.treewidth_min_degree if name == "min_degree"
                  else nx.algorithms.approximation.treewidth_min_fill_in)
            _, tree = fn(g)
            order = _ordering_from_decomposition(tree, left)
        candidates[name] = _simulate(radj, order, k, max_table_size, deadline)
    best = min(candidates, key=lambda nm: (candidates[nm][1], candidates[nm][3]))
    vsteps, largest, width, _ = candidates[best]
    if largest > max_table_size:
        size = (f"more than {max_table_size:.3g}" if not math.isfinite(largest)
                 else f"{largest:.3g}")
        raise ProblemTooLargeError(
            f"the dp search would need a table of {size} entries (treewidth about {width} "
            f"on the {len(left)} nodes left after OptCNN's eliminations), above "
            f"max_table_size={max_table_size:.3g}; use a MILP solver (solver='auto', "
            "'highs', 'cbc' or 'cpsat') or raise max_table_size")
    return _Plan(tuple(steps) + tuple(vsteps), n_leaf, n_node, n_edge, n_iso, n_single,
                 len(left), max(width1, width), int(largest), best)


# ====================================================================== execution
def _minplus(a: np.ndarray, b: np.ndarray, deadline: Deadline | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """``m[i, k] = min_j a[i, j] + b[j, k]`` and its argmin, in row chunks."""
    ci, cj = a.shape
    ck = b.shape[1]
    bt = np.ascontiguousarray(b.T)                            # (ck, cj)
    m = np.empty((ci, ck))
    arg = np.empty((ci, ck), dtype=_small_int_dtype(cj))
    rows = max(1, _CHUNK_ELEMS // max(1, cj * ck))
    for s in range(0, ci, rows):
        _check(deadline)
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


class Engine:
    """A plan plus the problem's edge tables; :meth:`run` solves for given node costs."""

    def __init__(self, problem: Problem, *, eliminations: bool = True, ordering: str = "auto",
                 max_table_size: float = DEFAULT_MAX_TABLE_SIZE,
                 deadline: Deadline | None = None):
        self.n = problem.n_nodes
        self.k = problem.n_configs
        self.plan = _build_plan(self.n, self.k, problem.edges, eliminations=eliminations,
                                ordering=ordering, max_table_size=max_table_size,
                                deadline=deadline)
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
            trace: list | None = None, deadline: Deadline | None = None
            ) -> tuple[float, np.ndarray]:
        """Minimise ``sum_v unary[v][a_v] + sum_e t_e[a_u, a_v]``: (value, assignment).

        With a list ``trace``, each step appends what :meth:`min_marginals` needs: the step's
        bucket (the sum of the factors it eliminates, over its clique) and its message.

        Raises
        ------
        OutOfTime
            When ``deadline`` passes before the pass is done.
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
        for i_step, step in enumerate(self.plan.steps):
            kind = step[0]
            if i_step % 64 == 0:
                _check(deadline)
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
                m, arg = _minplus(left, right, deadline)
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
                _check(deadline)
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


    def min_marginals(self, unary: Sequence[np.ndarray], deadline: Deadline | None = None
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
        value, a = self.run(unary, trace=trace, deadline=deadline)
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
            if s % 64 == 0:
                _check(deadline)
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



def solve_unconstrained(problem: Problem, *, eliminations: bool = True,
                        ordering: str = "auto",
                        max_table_size: float = DEFAULT_MAX_TABLE_SIZE,
                        deadline: Deadline | None = None) -> tuple[np.ndarray, float]:
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
    deadline : Deadline, optional
        Raise :class:`OutOfTime` once it passes.

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
    eng = Engine(problem, eliminations=eliminations, ordering=ordering,
                 max_table_size=max_table_size, deadline=deadline)
    _, a = eng.run(problem.node_costs, deadline=deadline)
    return a, problem.evaluate(a).cost
