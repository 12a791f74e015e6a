"""The MILP formulation shared by the MILP backends (CBC, HiGHS, CP-SAT), and its presolve.

A :class:`~milp_parallel.Problem` becomes, once, a sparse model (:class:`MilpModel`) that each
backend hands to its solver as arrays:

* binary ``x[v, c]``: one-hot per node, ``sum_c x[v, c] = 1``;
* continuous ``y[e, c, c'] >= 0`` per edge ``e = (u, v)`` with the **marginal
  (local-polytope) constraints** ``sum_c' y[e, c, c'] = x[u, c]`` and
  ``sum_c y[e, c, c'] = x[v, c']`` (never the weak ``y >= x_u + x_v - 1`` form: on trees the LP
  relaxation of this one is integral);
* memory rows ``sum_v sum_c m(v, c, d) x[v, c] <= M_d``: one per device for the all-live model;
  for the interval model one per distinct interval start time that is not implied by another
  (a row whose live set is a subset of another's is dropped); only rows that can bind;
* objective ``sum x . node_costs + sum y . edge_costs + offset``.

Presolve (:func:`presolve`) shrinks the problem first; every step keeps at least one optimal
assignment (each is tested on its own in ``tests/test_milp.py``):

``forbidden``
    ``inf`` node costs remove the configuration; ``inf`` edge pairs get no ``y`` variable (the
    marginal constraints then forbid the pair); a configuration with no allowed partner on
    some edge is removed too (arc consistency).
``memory``
    A configuration that alone overflows a memory row (every other node at its least memory)
    is removed; a row whose largest possible usage is within the budget is dropped; a row
    implied by another is dropped; a memory row over two nodes joined by an edge becomes
    forbidden pairs of that edge, and the row is dropped.
``dominance``
    Configuration ``c`` of node ``v`` is dropped when another configuration ``c'`` costs no
    more on the node, on every entry of every incident edge table, and in memory on every
    device whose rows hold ``v`` (ties broken by the index, so one of equal configs stays).
``fold``
    A node with one configuration left is fixed: its cost joins the constant, its edge rows
    join the neighbours' node costs, its memory comes off the rows' budgets. An edge whose
    table is additive (``t[c, c'] = a[c] + b[c']``) is folded into the two nodes' costs.
``marginal``
    Given an upper bound ``U`` (the warm start's cost), configuration ``c`` of node ``v`` is
    removed when its exact min-marginal without memory rows, ``m_v(c) = min {cost(a) : a_v =
    c}`` (from the DP's elimination passes, :mod:`milp_parallel.solvers.dp`), exceeds ``U``:
    every assignment with ``a_v = c`` then costs more than the warm start, budget or not.
    Without a budget the DP's warm start is optimal, so only configurations of optimal
    assignments stay. Runs once, first; skipped when the DP's tables are too large.
``bound``
    Given an upper bound ``U`` (the cost of a feasible assignment: the warm start), every
    configuration and pair whose cost alone makes every completion cost more than ``U`` is
    removed. The lower bound of a completion is an edge decomposition: each node's cost is
    shared among its incident edges and every edge (and isolated node) is minimised on its
    own. This is what turns IOPDDL's ``1e18`` "effectively forbidden" costs into removed
    variables without changing the problem: they are removed only when a known feasible
    assignment is cheaper than any completion containing them.

``time_limit`` covers the whole solve: the warm start, presolve (whose optional work stops
once :data:`PRESOLVE_TIME_SHARE` of the time left after the warm start is spent), the
formulation and the solver, which is handed only what is left (``stats["solver_time_limit"]``;
CBC, which ignores its limit inside its root LP, is killed a second past it). With nothing
left the solver is not started and the warm start comes back ``feasible`` (or ``unknown``).

The answer of a backend is always mapped back to the original problem and re-evaluated there
(``objective = problem.evaluate(assignment).cost``); the warm start stays the fallback
incumbent, so a backend that finds nothing better still returns it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidAssignmentError
from ..problem import MEMORY_RTOL, Problem
from .result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolveResult, relative_gap

__all__ = ["MemoryRow", "Reduced", "MilpModel", "presolve", "build_milp", "formulate",
           "initial_assignment", "least_memory", "merge_duplicate_entries", "finish_result",
           "REDUCTIONS", "OPTIMALITY_RTOL", "COMMON_OPTIONS", "time_left",
           "validate_time_limit", "out_of_time_result", "PRESOLVE_TIME_SHARE"]

logger = logging.getLogger(__name__)

#: Names of the presolve steps (pass a subset as ``reductions=`` to switch some off).
REDUCTIONS = ("forbidden", "memory", "dominance", "fold", "bound", "marginal")

#: A backend's answer is reported ``optimal`` only when its solver says so *and* the proved
#: bound is within this relative distance of the re-evaluated objective.
OPTIMALITY_RTOL = 1e-6

#: Options every MILP backend accepts.
COMMON_OPTIONS = frozenset({"time_limit", "threads", "gap", "verbose", "warm_start",
                            "reductions", "dominance_work_limit"})

_DEFAULT_DOMINANCE_WORK = 3e8


# ---------------------------------------------------------------------- values
@dataclass(frozen=True)
class MemoryRow:
    """One memory row of the reduced problem: ``sum_v coef_v[x_v] <= rhs``.

    Attributes
    ----------
    nodes : numpy.ndarray
        Original indices of the free nodes in the row.
    device : int
        The memory column (device) the row is about.
    coefs : tuple of numpy.ndarray
        Per node, the memory over its kept configurations, shifted so the least is 0.
    rhs : float
        The budget left after fixed nodes and the shifts (``>= 0``).
    """

    nodes: np.ndarray
    device: int
    coefs: tuple
    rhs: float


@dataclass(frozen=True)
class Reduced:
    """A problem after :func:`presolve`.

    Attributes
    ----------
    problem : Problem
        The original problem.
    configs : tuple
        Per original node: the kept original configuration indices (a 1-D int array), or
        ``None`` when the node was fixed.
    fixed : numpy.ndarray
        Per node the fixed original configuration, ``-1`` for free nodes.
    node_costs : tuple
        Per node the cost over its kept configurations (``None`` when fixed).
    edges : numpy.ndarray
        ``(E', 2)`` original node indices of the edges left (both ends free).
    edge_costs : tuple of numpy.ndarray
        ``(K'_u, K'_v)`` tables over kept configurations; ``inf`` marks an excluded pair.
    rows : tuple of MemoryRow
    offset : float
        The constant part of the objective (fixed nodes, folded edges).
    infeasible : bool
        Presolve proved that no assignment is feasible.
    reason : str
        Why, when infeasible.
    warm_start : numpy.ndarray or None
        A feasible assignment (original indices) that is representable in the reduced problem.
    upper_bound : float
        Its cost (``inf`` without one).
    stats : dict
        Counts of what each step removed.
    """

    problem: Problem
    configs: tuple
    fixed: np.ndarray
    node_costs: tuple
    edges: np.ndarray
    edge_costs: tuple
    rows: tuple
    offset: float
    infeasible: bool
    reason: str
    warm_start: np.ndarray | None
    upper_bound: float
    stats: dict = field(default_factory=dict)

    @property
    def free_nodes(self) -> np.ndarray:
        """Original indices of the nodes left free."""
        return np.nonzero(self.fixed < 0)[0]

    def expand(self, local: dict[int, int]) -> np.ndarray:
        """The original assignment from ``{free node: index into its kept configs}``."""
        a = self.fixed.copy()
        for v, i in local.items():
            a[v] = self.configs[v][int(i)]
        return a

    def local_cost(self, local: dict[int, int]) -> float:
        """The reduced objective (offset included) of a local choice (for tests)."""
        cost = self.offset + sum(float(self.node_costs[v][i]) for v, i in local.items())
        for (u, v), t in zip(self.edges, self.edge_costs):
            cost += float(t[local[int(u)], local[int(v)]])
        return cost

    def local_feasible(self, local: dict[int, int]) -> bool:
        """Whether a local choice satisfies every memory row (for tests)."""
        for r in self.rows:
            use = sum(float(c[local[int(v)]]) for v, c in zip(r.nodes, r.coefs))
            if use > r.rhs * (1 + 1e-12) + 1e-300:
                return False
        return True


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


# ---------------------------------------------------------------------- helpers
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


def _interval_rows(problem: Problem) -> list[np.ndarray]:
    """Live node sets at every distinct start time, minus those inside another set."""
    iv = problem.intervals
    live = iv[:, 1] > iv[:, 0]
    times = np.unique(iv[live, 0])
    if times.size == 0:
        return []
    inc = (iv[:, 0][None, :] <= times[:, None]) & (times[:, None] < iv[:, 1][None, :])
    inc = inc & live[None, :]
    sets = _undominated_sets(inc)
    return [np.nonzero(inc[t])[0] for t in sets]


def _undominated_sets(inc: np.ndarray, slack: np.ndarray | None = None) -> np.ndarray:
    """Indices of the rows of a 0/1 incidence matrix not contained in another row.

    With ``slack``, row ``r`` is dropped when ``set_r`` is inside ``set_s`` and
    ``slack_r >= slack_s`` (ties broken by index).
    """
    m = inc.astype(np.float32)
    size = m.sum(axis=1)
    inter = m @ m.T                                   # |S_r & S_s|
    subset = inter >= size[:, None] - 0.5             # S_r within S_s
    np.fill_diagonal(subset, False)
    if slack is not None:
        subset &= slack[:, None] >= slack[None, :]
    # Break ties between equal sets (mutual containment with equal slack) by index.
    mutual = subset & subset.T
    r_idx = np.arange(inc.shape[0])
    subset &= ~mutual | (r_idx[:, None] > r_idx[None, :])
    return np.nonzero(~subset.any(axis=1))[0]


def least_memory(problem: Problem) -> np.ndarray | None:
    """The least peak memory per device that any assignment reaches, ignoring costs.

    Memory is separable: picking each node's least-memory configuration minimises every row
    at once, so this is exact (per device, and for both memory models).

    Returns
    -------
    numpy.ndarray or None
        ``(n_devices,)``, or ``None`` without memory tables.
    """
    if problem.memory is None:
        return None
    mins = np.stack([m.min(axis=0) for m in problem.memory])
    if problem.intervals is None:
        return mins.sum(axis=0)
    use = mins
    iv = problem.intervals
    live = iv[:, 1] > iv[:, 0]
    times = np.unique(iv[live, 0])
    if times.size == 0:
        return np.zeros(problem.n_devices)
    inc = ((iv[:, 0][None, :] <= times[:, None]) & (times[:, None] < iv[:, 1][None, :])
           & live[None, :])
    return (inc.astype(float) @ use).max(axis=0)


# ---------------------------------------------------------------------- warm start
def _rows_of_problem(problem: Problem) -> tuple[list[np.ndarray], list[int]]:
    if not problem.has_budget:
        return [], []
    if problem.intervals is None:
        n = problem.n_nodes
        return ([np.arange(n)] * problem.n_devices, list(range(problem.n_devices)))
    sets = _interval_rows(problem)
    return sets, [0] * len(sets)


def _greedy(problem: Problem, start: np.ndarray, sweeps: int = 8) -> np.ndarray:
    """Iterated conditional modes from ``start``, keeping every memory row within budget."""
    a = start.copy()
    n = problem.n_nodes
    rows, devs = _rows_of_problem(problem)
    budget = None if problem.memory_limit is None else problem.memory_limit * (1 + MEMORY_RTOL)
    node_rows: list[list[int]] = [[] for _ in range(n)]
    for r, nodes in enumerate(rows):
        for v in nodes:
            node_rows[int(v)].append(r)
    level = np.array([sum(problem.memory[int(v)][a[v], devs[r]] for v in nodes)
                      for r, nodes in enumerate(rows)]) if rows else np.zeros(0)
    inc: list[list[tuple[int, np.ndarray, int]]] = [[] for _ in range(n)]
    for (u, v), t in zip(problem.edges, problem.edge_costs):
        inc[int(u)].append((int(v), t, 0))
        inc[int(v)].append((int(u), t, 1))
    if rows and np.any(level > budget[devs]):
        # Repair: move nodes to the configuration that most reduces the total overflow
        # (ties: node cost), until every row fits or nothing helps.
        for _ in range(sweeps):
            moved = False
            for v in range(n):
                if not node_rows[v]:
                    continue
                rs = np.array(node_rows[v])
                ds = np.array([devs[r] for r in rs])
                m = problem.memory[v][:, ds]
                new = level[rs][None, :] - m[a[v]][None, :] + m
                over = np.maximum(new - budget[ds][None, :], 0.0).sum(axis=1)
                over = np.where(np.isfinite(problem.node_costs[v]), over, np.inf)
                c = int(np.lexsort((problem.node_costs[v], over))[0])
                if over[c] < over[a[v]]:
                    level[rs] += m[c] - m[a[v]]
                    a[v] = c
                    moved = True
            if not moved or not np.any(level > budget[devs]):
                break
    for _ in range(sweeps):
        changed = False
        for v in range(n):
            local = problem.node_costs[v].copy()
            for w, t, side in inc[v]:
                local = local + (t[:, a[w]] if side == 0 else t[a[w], :])
            if node_rows[v]:
                rs = np.array(node_rows[v])
                ds = np.array([devs[r] for r in rs])
                m = problem.memory[v][:, ds]                       # (K, R_v)
                new = level[rs][None, :] - m[a[v]][None, :] + m
                ok = np.all(new <= budget[ds][None, :], axis=1)
                ok[a[v]] = True
                local = np.where(ok, local, np.inf)
            c = int(np.argmin(local))
            if local[c] < local[a[v]] and c != a[v]:
                if node_rows[v]:
                    level[rs] += m[c] - m[a[v]]
                a[v] = c
                changed = True
        if not changed:
            break
    return a


def initial_assignment(problem: Problem, warm_start: Sequence[int] | None = None
                       ) -> tuple[np.ndarray | None, str]:
    """A feasible assignment to start from, and where it came from.

    Tries, in order: the user's ``warm_start`` (if feasible); the exact unconstrained optimum
    from :func:`milp_parallel.solvers.dp.solve_unconstrained` when that module exists and its
    answer fits the memory budget; a greedy descent (iterated conditional modes) from the
    least-memory assignment, which fits every memory row whenever anything does.

    Returns
    -------
    tuple
        ``(assignment or None, source)``, source in ``"user"``, ``"dp"``, ``"greedy"``,
        ``"none"``.
    """
    if warm_start is not None:
        a = problem.check_assignment(warm_start)
        ev = problem.evaluate(a)
        if ev.feasible:
            return a, "user"
        logger.info("warm start is not feasible (cost %s); ignoring it", ev.cost)
    try:
        from .dp import solve_unconstrained  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        solve_unconstrained = None
    if solve_unconstrained is not None:
        try:
            res = solve_unconstrained(problem)
            a = res[0] if isinstance(res, tuple) else getattr(res, "assignment", res)
            if a is not None:
                a = problem.check_assignment(a)
                if problem.evaluate(a).feasible:
                    return a, "dp"
        except Exception as exc:  # the warm start is an optimisation only
            logger.info("dp warm start failed: %s", exc)
    # Greedy: least memory (ties: least node cost), then descend.
    start = np.empty(problem.n_nodes, dtype=np.int64)
    for v in range(problem.n_nodes):
        cost = problem.node_costs[v]
        if problem.memory is not None and problem.has_budget:
            mem = problem.memory[v].sum(axis=1)
            order = np.lexsort((cost, np.where(np.isfinite(cost), 0, 1), mem))
        else:
            order = np.argsort(cost, kind="stable")
        start[v] = order[0]
    a = _greedy(problem, start)
    if problem.evaluate(a).feasible:
        return a, "greedy"
    return None, "none"


# ---------------------------------------------------------------------- presolve
class _State:
    """Mutable working copy used inside :func:`presolve` only."""

    def __init__(self, problem: Problem):
        n = problem.n_nodes
        self.p = problem
        self.conf = [np.arange(k, dtype=np.int64) for k in problem.n_configs]
        self.theta = [c.astype(float).copy() for c in problem.node_costs]
        self.mem = (None if problem.memory is None
                    else [m.astype(float).copy() for m in problem.memory])
        self.fixed = np.full(n, -1, dtype=np.int64)
        self.edges: dict[int, list] = {}
        self.adj: list[set] = [set() for _ in range(n)]
        for e, ((u, v), t) in enumerate(zip(problem.edges, problem.edge_costs)):
            self.edges[e] = [int(u), int(v), t.astype(float).copy()]
            self.adj[int(u)].add(e)
            self.adj[int(v)].add(e)
        # Memory rows: [nodes, device, rhs]
        self.rows: list[list] = []
        if problem.has_budget:
            budget = problem.memory_limit * (1 + MEMORY_RTOL)
            sets, devs = _rows_of_problem(problem)
            for nodes, d in zip(sets, devs):
                self.rows.append([np.asarray(nodes, dtype=np.int64), int(d), float(budget[d])])
        self.offset = 0.0
        self.infeasible = False
        self.reason = ""
        self.warm: np.ndarray | None = None   # local indices per node (into conf)
        self.U = math.inf
        self.deadline: float | None = None    # perf_counter value for optional work
        self.stats = {"configs_in": int(problem.n_configs.sum()),
                      "pairs_in": int(sum(t.size for t in problem.edge_costs)),
                      "forbidden_configs": 0, "forbidden_pairs": 0, "memory_configs": 0,
                      "memory_pairs": 0, "memory_rows_dropped": 0, "dominated_configs": 0,
                      "fixed_nodes": 0, "folded_edges": 0, "bound_configs": 0,
                      "bound_pairs": 0, "rounds": 0}

    # -- basic edits -------------------------------------------------------------------
    def table(self, e: int, v: int) -> tuple[np.ndarray, int]:
        """Edge table oriented with ``v`` first, and the other end."""
        u, w, t = self.edges[e]
        return (t, w) if u == v else (t.T, u)

    def fail(self, reason: str) -> None:
        if not self.infeasible:
            self.infeasible = True
            self.reason = reason

    def keep(self, v: int, mask: np.ndarray, stat: str, repl: np.ndarray | None = None) -> bool:
        """Keep configs ``mask`` of node ``v``; ``repl[c]`` maps a removed warm config."""
        if mask.all():
            return False
        self.stats[stat] += int((~mask).sum())
        if not mask.any():
            self.fail(f"node {v} ({self.p.node_names[v]}) has no allowed configuration left "
                      f"after the {stat.replace('_', ' ')} step")
            return True
        if self.warm is not None:
            c = self.warm[v]
            if not mask[c]:
                if repl is None or not mask[repl[c]]:
                    logger.debug("warm start lost at node %d", v)
                    self.warm = None
                else:
                    c = repl[c]
            if self.warm is not None:
                self.warm[v] = np.cumsum(mask)[c] - 1
        self.conf[v] = self.conf[v][mask]
        self.theta[v] = self.theta[v][mask]
        if self.mem is not None:
            self.mem[v] = self.mem[v][mask]
        for e in self.adj[v]:
            u, w, t = self.edges[e]
            self.edges[e][2] = t[mask] if u == v else t[:, mask]
        return True

    def free(self, v: int) -> bool:
        return self.fixed[v] < 0

    def late(self) -> bool:
        """The optional work's deadline has passed."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    # -- steps ---------------------------------------------------------------------------
    def forbidden(self, arc: bool = True) -> bool:
        changed = False
        for v in range(self.p.n_nodes):
            if self.free(v) and not np.all(np.isfinite(self.theta[v])):
                changed |= self.keep(v, np.isfinite(self.theta[v]), "forbidden_configs")
                if self.infeasible:
                    return True
        again = arc
        while again and not self.infeasible:
            again = False
            for e in list(self.edges):
                u, w, t = self.edges[e]
                fin = np.isfinite(t)
                ok_u, ok_w = fin.any(axis=1), fin.any(axis=0)
                if not ok_u.all():
                    again |= self.keep(u, ok_u, "forbidden_configs")
                if not ok_w.all() and not self.infeasible:
                    again |= self.keep(w, ok_w, "forbidden_configs")
                if self.infeasible:
                    break
            changed |= again
        return changed

    def memory(self, enabled: bool) -> bool:
        if not self.rows:
            return False
        changed = False
        # Normalise: nodes with constant memory come off the row; rows that cannot bind go.
        keep_rows = []
        for nodes, d, rhs in self.rows:
            mins = np.array([self.mem[v][:, d].min() for v in nodes]) if nodes.size else \
                np.zeros(0)
            maxs = np.array([self.mem[v][:, d].max() for v in nodes]) if nodes.size else \
                np.zeros(0)
            const = maxs <= mins
            if const.any():
                rhs -= float(mins[const].sum())
                nodes, mins, maxs = nodes[~const], mins[~const], maxs[~const]
            slack = rhs - float(mins.sum())
            tol = 1e-12 * max(abs(rhs), 1.0)
            if slack < -tol:
                self.fail(f"memory budget {self.p.memory_limit[d]:.6g} on device {d} cannot be "
                          "met: the least-memory choice of every node already exceeds it")
                return True
            if float((maxs - mins).sum()) <= slack:
                self.stats["memory_rows_dropped"] += 1
                changed = True
                continue
            keep_rows.append([nodes, d, rhs])
        self.rows = keep_rows
        if not enabled:
            return changed
        # Configurations that overflow a row on their own.
        n = self.p.n_nodes
        dcount = self.p.n_devices
        tight = np.full((n, dcount), np.inf)
        for nodes, d, rhs in self.rows:
            mins = np.array([self.mem[v][:, d].min() for v in nodes])
            slack = rhs - float(mins.sum())
            np.minimum.at(tight[:, d], nodes, slack)
        for v in range(n):
            if not self.free(v) or not np.isfinite(tight[v]).any():
                continue
            m = self.mem[v]
            tol = 1e-12 * np.maximum(np.abs(tight[v]), 1.0)
            ok = np.all(m - m.min(axis=0) <= tight[v] + tol, axis=1)
            changed |= self.keep(v, ok, "memory_configs")
            if self.infeasible:
                return True
        # Rows over two nodes joined by an edge become forbidden pairs.
        edge_of = {}
        for e, (u, w, _) in self.edges.items():
            edge_of[(u, w)] = e
            edge_of[(w, u)] = e
        keep_rows = []
        for nodes, d, rhs in self.rows:
            if nodes.size == 2 and (int(nodes[0]), int(nodes[1])) in edge_of:
                e = edge_of[(int(nodes[0]), int(nodes[1]))]
                u, w, t = self.edges[e]
                over = (self.mem[u][:, d][:, None] + self.mem[w][:, d][None, :]
                        > rhs + 1e-12 * max(abs(rhs), 1.0))
                over &= np.isfinite(t)
                if over.any():
                    self.stats["memory_pairs"] += int(over.sum())
                    t = t.copy()
                    t[over] = np.inf
                    self.edges[e][2] = t
                self.stats["memory_rows_dropped"] += 1
                changed = True
                continue
            keep_rows.append([nodes, d, rhs])
        self.rows = keep_rows
        # Rows implied by another (same device, subset of nodes, no more slack).
        if len(self.rows) > 1:
            kept = []
            for d in range(dcount):
                idx = [i for i, r in enumerate(self.rows) if r[1] == d]
                if len(idx) < 2:
                    kept += idx
                    continue
                if self.p.n_devices == 1 or self.p.intervals is not None:
                    inc = np.zeros((len(idx), n), dtype=bool)
                    slack = np.empty(len(idx))
                    for j, i in enumerate(idx):
                        nodes, _, rhs = self.rows[i]
                        inc[j, nodes] = True
                        slack[j] = rhs - sum(self.mem[v][:, d].min() for v in nodes)
                    kept += [idx[j] for j in _undominated_sets(inc, slack)]
                else:
                    kept += idx
            if len(kept) < len(self.rows):
                self.stats["memory_rows_dropped"] += len(self.rows) - len(kept)
                changed = True
            self.rows = [self.rows[i] for i in sorted(kept)]
        return changed

    def _row_devices(self) -> list[np.ndarray]:
        """Per node, the devices of the memory rows that hold it."""
        devs: list[set] = [set() for _ in range(self.p.n_nodes)]
        for nodes, d, _ in self.rows:
            for v in nodes:
                devs[int(v)].add(d)
        return [np.array(sorted(s), dtype=np.int64) for s in devs]

    def dominance(self, work_limit: float) -> bool:
        changed = False
        devs = self._row_devices()
        work = 0.0
        for v in range(self.p.n_nodes):
            if not self.free(v):
                continue
            k = self.conf[v].size
            if k < 2:
                continue
            parts = [self.theta[v][:, None]]
            if devs[v].size:
                parts.append(self.mem[v][:, devs[v]])
            for e in self.adj[v]:
                parts.append(self.table(e, v)[0])
            f = np.concatenate(parts, axis=1)
            work += k * k * f.shape[1]
            if work > work_limit:
                logger.info("dominance stopped at node %d: work limit %.3g reached", v,
                            work_limit)
                break
            if self.late():
                logger.info("dominance stopped at node %d: time is up", v)
                self.stats["presolve_cut"] = True
                break
            dominated = np.zeros(k, dtype=bool)
            repl = np.arange(k)
            idx = np.arange(k)
            for c in range(k):
                le = np.all(f <= f[c], axis=1)            # c' no worse than c everywhere
                le[c] = False
                if not le.any():
                    continue
                eq = np.all(f == f[c], axis=1)
                strict = le & (~eq | (idx < c))
                if strict.any():
                    dominated[c] = True
                    # A dominator that is itself undominated: the one with least node cost,
                    # then fewest... any minimal element works; pick by lexicographic order.
                    cand = np.nonzero(strict)[0]
                    repl[c] = cand[np.lexsort(f[cand].T[::-1])[0]]
            if dominated.any():
                # Each removed config's replacement is kept or itself replaced by a kept one.
                for c in np.nonzero(dominated)[0]:
                    r = repl[c]
                    seen = 0
                    while dominated[r] and seen < k:
                        r = repl[r]
                        seen += 1
                    repl[c] = r
                changed |= self.keep(v, ~dominated, "dominated_configs", repl)
        return changed

    def fold(self) -> bool:
        changed = False
        for v in range(self.p.n_nodes):
            if not self.free(v) or self.conf[v].size != 1:
                continue
            self.fixed[v] = self.conf[v][0]
            self.stats["fixed_nodes"] += 1
            self.offset += float(self.theta[v][0])
            for e in list(self.adj[v]):
                t, w = self.table(e, v)
                self.theta[w] = self.theta[w] + t[0]
                self.adj[w].discard(e)
                del self.edges[e]
            self.adj[v] = set()
            for row in self.rows:
                hit = row[0] == v
                if hit.any():
                    row[2] -= float(self.mem[v][0, row[1]])
                    row[0] = row[0][~hit]
            changed = True
        # Additive edges.
        for e in list(self.edges):
            u, w, t = self.edges[e]
            if not np.all(np.isfinite(t)):
                continue
            a, b = t[:, 0], t[0, :] - t[0, 0]
            resid = t - a[:, None] - b[None, :]
            if np.all(np.abs(resid) <= 1e-12 * max(float(np.abs(t).max()), 1e-300)):
                self.theta[u] = self.theta[u] + a
                self.theta[w] = self.theta[w] + b
                self.adj[u].discard(e)
                self.adj[w].discard(e)
                del self.edges[e]
                self.stats["folded_edges"] += 1
                changed = True
        return changed

    def marginal(self) -> bool:
        """Remove configs whose exact min-marginal (memory ignored) exceeds ``U``.

        Runs on the untouched problem (original indices), before any other step.
        """
        try:
            from .dp import _Engine  # type: ignore[attr-defined]
            res = _Engine(self.p).min_marginals(self.p.node_costs)
        except Exception as exc:  # an optimisation only: no dp, or its tables too large
            logger.info("marginal step skipped: %s", exc)
            return False
        if res is None:
            logger.info("marginal step skipped: the DP's tables are too large to keep")
            return False
        value, _, mm = res
        margin = 1e-9 * max(abs(self.U), abs(value) if math.isfinite(value) else 0.0) + 1e-12
        changed = False
        self.stats.setdefault("marginal_configs", 0)
        for v in range(self.p.n_nodes):
            if not self.free(v):
                continue
            ok = np.asarray(mm[v])[self.conf[v]] <= self.U + margin
            changed |= self.keep(v, ok, "marginal_configs")
            if self.infeasible:
                return True
        return changed

    def bound(self) -> bool:
        """Remove configs and pairs whose completions all cost more than ``U``."""
        if not math.isfinite(self.U):
            return False
        n = self.p.n_nodes
        deg = np.array([len(self.adj[v]) for v in range(n)])
        share = [None if not self.free(v) else
                 self.theta[v] / max(deg[v], 1) for v in range(n)]
        lb = self.offset
        for v in range(n):
            if self.free(v) and deg[v] == 0:
                lb += float(self.theta[v].min())
        h = {}
        for e, (u, w, t) in self.edges.items():
            he = t + share[u][:, None] + share[w][None, :]
            h[e] = he
            lb += float(he.min())
        if not math.isfinite(lb):
            return False
        limit = self.U + 1e-9 * abs(self.U) + 1e-12
        extra = [np.zeros(self.conf[v].size) if self.free(v) else None for v in range(n)]
        rowmin, colmin, emin = {}, {}, {}
        for e, (u, w, t) in self.edges.items():
            he = h[e]
            emin[e] = float(he.min())
            rowmin[e] = he.min(axis=1)
            colmin[e] = he.min(axis=0)
            extra[u] += rowmin[e] - emin[e]
            extra[w] += colmin[e] - emin[e]
        changed = False
        for e, (u, w, t) in list(self.edges.items()):
            he = h[e]
            with np.errstate(invalid="ignore"):    # inf - inf: rows with no partner
                pair_lb = (lb + (he - emin[e]) + (extra[u] - (rowmin[e] - emin[e]))[:, None]
                           + (extra[w] - (colmin[e] - emin[e]))[None, :])
            kill = (pair_lb > limit) & np.isfinite(t)
            if kill.any():
                self.stats["bound_pairs"] += int(kill.sum())
                t = t.copy()
                t[kill] = np.inf
                self.edges[e][2] = t
                changed = True
        for v in range(n):
            if not self.free(v):
                continue
            node_lb = lb + extra[v]
            if deg[v] == 0:
                node_lb = lb - float(self.theta[v].min()) + self.theta[v]
            ok = node_lb <= limit
            changed |= self.keep(v, ok, "bound_configs")
            if self.infeasible:
                # Cannot happen with a feasible warm start; keep the proof honest anyway.
                return True
        return changed

    def warm_cost(self) -> float:
        if self.warm is None:
            return math.inf
        cost = self.offset
        for v in range(self.p.n_nodes):
            if self.free(v):
                cost += float(self.theta[v][self.warm[v]])
        for e, (u, w, t) in self.edges.items():
            cost += float(t[self.warm[u], self.warm[w]])
        return cost


def presolve(problem: Problem, *, warm_start: Sequence[int] | None = None,
             reductions: Sequence[str] | None = None,
             dominance_work_limit: float = _DEFAULT_DOMINANCE_WORK,
             max_rounds: int = 20, deadline: float | None = None) -> Reduced:
    """Reduce a problem before it becomes a MILP (see the module docstring for the steps).

    Parameters
    ----------
    problem : Problem
    warm_start : sequence of int, optional
        A feasible assignment; its cost is the upper bound of the ``bound`` step and it is
        kept representable (a dominated config of it is replaced by its dominator, which
        costs no more). An infeasible one is ignored.
    reductions : sequence of str, optional
        Steps to run, a subset of :data:`REDUCTIONS` (default: all). Removing configurations
        with ``inf`` cost and the memory rows that cannot bind always happens (the model has
        no way to express ``inf``).
    dominance_work_limit : float
        Element comparisons the dominance step may spend (it is quadratic in ``K_v``).
    max_rounds : int
        The steps repeat until nothing changes or this many rounds ran.
    deadline : float, optional
        A :func:`time.perf_counter` value: once it has passed, the optional steps stop
        (the first round's ``forbidden`` and memory-row normalisation always run, the model
        needs them) and ``stats["presolve_cut"]`` says so. Each step keeps an optimum on its
        own, so stopping between (or inside the dominance step, between nodes) is exact.

    Returns
    -------
    Reduced

    Examples
    --------
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> red = presolve(p)
    >>> [None if c is None else c.tolist() for c in red.configs]
    [[0, 1], [0, 1]]
    """
    steps = set(REDUCTIONS if reductions is None else reductions)
    unknown = steps - set(REDUCTIONS)
    if unknown:
        raise ValueError(f"unknown reductions {sorted(unknown)}; known: {REDUCTIONS}")
    st = _State(problem)
    if warm_start is not None:
        a = problem.check_assignment(warm_start)
        ev = problem.evaluate(a)
        if ev.feasible:
            st.warm = a.copy()
            st.U = ev.cost
    arc = "forbidden" in steps
    st.deadline = deadline

    def late() -> bool:
        if st.late():
            st.stats["presolve_cut"] = True
            return True
        return False

    if "marginal" in steps and math.isfinite(st.U) and not late():
        st.marginal()
    for rnd in range(max_rounds):
        changed = st.forbidden(arc and (rnd == 0 or not late()))
        if st.infeasible:
            break
        st.stats["rounds"] = rnd + 1
        changed |= st.memory("memory" in steps and not late())
        if not st.infeasible and "bound" in steps and not late():
            st.U = min(st.U, st.warm_cost())
            changed |= st.bound()
        if not st.infeasible and not late():
            changed |= st.forbidden(arc)
        if not st.infeasible and "dominance" in steps and not late():
            changed |= st.dominance(dominance_work_limit)
        if not st.infeasible and "fold" in steps and not late():
            changed |= st.fold()
        if not changed or late():
            break
    n = problem.n_nodes
    free = st.fixed < 0
    configs = tuple(st.conf[v] if free[v] else None for v in range(n))
    node_costs = tuple(st.theta[v] if free[v] else None for v in range(n))
    keys = sorted(st.edges)
    edges = np.array([st.edges[e][:2] for e in keys], dtype=np.int64).reshape(-1, 2)
    edge_costs = tuple(st.edges[e][2] for e in keys)
    rows = []
    if not st.infeasible and st.rows:
        for nodes, d, rhs in st.rows:
            mins = [float(st.mem[v][:, d].min()) for v in nodes]
            coefs = tuple(st.mem[v][:, d] - m for v, m in zip(nodes, mins))
            rows.append(MemoryRow(nodes=nodes.copy(), device=d, coefs=coefs,
                                  rhs=rhs - sum(mins)))
    warm = None
    if st.warm is not None and not st.infeasible:
        warm = st.fixed.copy()
        for v in np.nonzero(free)[0]:
            warm[v] = st.conf[v][st.warm[v]]
    stats = dict(st.stats)
    stats["configs_out"] = int(sum(c.size for c in configs if c is not None))
    stats["pairs_out"] = int(sum(np.isfinite(t).sum() for t in edge_costs))
    stats["memory_rows_out"] = len(rows)
    return Reduced(problem=problem, configs=configs, fixed=st.fixed.copy(),
                   node_costs=node_costs, edges=edges, edge_costs=edge_costs,
                   rows=tuple(rows), offset=st.offset, infeasible=st.infeasible,
                   reason=st.reason, warm_start=warm,
                   upper_bound=problem.evaluate(warm).cost if warm is not None else math.inf,
                   stats=stats)


# ---------------------------------------------------------------------- the model
def formulate(reduced: Reduced) -> MilpModel:
    """Build the sparse MILP of a reduced problem (see :class:`MilpModel`)."""
    t0 = time.perf_counter()
    n = reduced.problem.n_nodes
    x_start = np.full(n, -1, dtype=np.int64)
    pos = 0
    costs, integer = [], []
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
            within = np.arange(order.size) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
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
#: under a ``time_limit``; the rest goes to the formulation and the solver.
PRESOLVE_TIME_SHARE = 0.3


def time_left(t0: float, time_limit: float | None) -> float | None:
    """Seconds left of ``time_limit`` counted from ``t0`` (a :func:`time.perf_counter` value).

    Returns
    -------
    float or None
        ``None`` without a limit; never negative.

    Examples
    --------
    >>> time_left(time.perf_counter(), None) is None
    True
    >>> 0 < time_left(time.perf_counter(), 5.0) <= 5.0
    True
    """
    if time_limit is None:
        return None
    return max(0.0, float(time_limit) - (time.perf_counter() - t0))


def validate_time_limit(time_limit: Any) -> float | None:
    """``None`` or a number ``> 0`` (``inf`` means no limit)."""
    if time_limit is None:
        return None
    tl = float(time_limit)
    if not tl > 0:
        raise ValueError(f"time_limit must be > 0 seconds (or None), got {time_limit}")
    return None if math.isinf(tl) else tl


def build_milp(problem: Problem, *, warm_start: Sequence[int] | None = None,
               reductions: Sequence[str] | None = None,
               dominance_work_limit: float = _DEFAULT_DOMINANCE_WORK,
               time_limit: float | None = None, t0: float | None = None
               ) -> tuple[MilpModel, np.ndarray | None, str]:
    """Warm start, presolve and formulate: what every MILP backend does first.

    Parameters
    ----------
    time_limit : float, optional
        Seconds for the whole solve, counted from ``t0`` (default: now). The optional
        presolve work stops once :data:`PRESOLVE_TIME_SHARE` of what is left after the warm
        start is spent; the warm start and the formulation always run.
    t0 : float, optional
        :func:`time.perf_counter` value when the solve started.

    Returns
    -------
    tuple
        ``(model, warm assignment or None, warm source)``; the warm assignment is feasible
        and representable in the model (see :meth:`MilpModel.encode`).
    """
    t0 = time.perf_counter() if t0 is None else t0
    tb = time.perf_counter()
    warm, source = initial_assignment(problem, warm_start)
    t1 = time.perf_counter()
    left = time_left(t0, time_limit)
    deadline = None if left is None else t1 + PRESOLVE_TIME_SHARE * left
    red = presolve(problem, warm_start=warm, reductions=reductions,
                   dominance_work_limit=dominance_work_limit, deadline=deadline)
    t2 = time.perf_counter()
    model = formulate(red)
    red.stats["warm_start_seconds"] = t1 - tb
    red.stats["presolve_seconds"] = t2 - t1
    red.stats["warm_start_source"] = source
    object.__setattr__(model, "build_seconds", time.perf_counter() - tb)
    return model, red.warm_start, source


def finish_result(problem: Problem, model: MilpModel, solver: str, *,
                  values: np.ndarray | None, claimed_optimal: bool, bound: float,
                  infeasible: bool, native_status: str, seconds: float,
                  solve_seconds: float, warm: np.ndarray | None,
                  extra_stats: dict | None = None) -> SolveResult:
    """Map a backend's raw answer to a :class:`SolveResult` on the original problem.

    Parameters
    ----------
    values : numpy.ndarray or None
        The solver's column values (``None`` without a solution).
    claimed_optimal : bool
        The solver says it proved optimality.
    bound : float
        The solver's proved lower bound on the *model's* objective (without offset);
        ``-inf`` when unknown.
    infeasible : bool
        The solver proved the model infeasible.
    warm : numpy.ndarray or None
        The feasible warm start: kept when it beats the solver's answer.
    """
    stats = model.stats()
    stats["solve_seconds"] = solve_seconds
    stats["native_status"] = native_status
    if extra_stats:
        stats.update(extra_stats)
    lm = least_memory(problem)
    if infeasible and warm is None:
        if lm is not None:
            stats["least_peak_memory"] = lm
        return SolveResult(assignment=None, objective=math.nan, status=INFEASIBLE,
                           bound=math.inf, gap=math.inf, seconds=seconds, solver=solver,
                           stats=stats)
    if infeasible:
        logger.warning("%s claims infeasible but a feasible warm start exists; reporting the "
                       "warm start", solver)
        claimed_optimal = False
        bound = -math.inf
    best, best_cost = None, math.inf
    if values is not None:
        a = model.decode(values)
        ev = problem.evaluate(a)
        if ev.feasible:
            best, best_cost = a, ev.cost
        else:
            logger.warning("%s returned an assignment that is infeasible on the original "
                           "problem (cost %s, peak %s); ignoring it", solver, ev.cost,
                           ev.peak_memory)
            claimed_optimal = False
    if warm is not None:
        wc = problem.evaluate(warm).cost
        if wc < best_cost:
            best, best_cost = warm, wc
    full_bound = bound + model.offset if np.isfinite(bound) else bound
    if (np.isfinite(full_bound) and float(model.offset).is_integer()
            and np.all(model.col_cost == np.round(model.col_cost))):
        # Integer costs: every objective is an integer, so the bound rounds up.
        full_bound = float(math.ceil(full_bound - 1e-6))
    if best is None:
        return SolveResult(assignment=None, objective=math.nan, status=UNKNOWN,
                           bound=full_bound, gap=math.inf, seconds=seconds, solver=solver,
                           stats=stats)
    if claimed_optimal and not np.isfinite(full_bound):
        full_bound = best_cost
    if np.isfinite(full_bound):
        full_bound = min(full_bound, best_cost)
    gap = relative_gap(best_cost, full_bound)
    scale = max(abs(best_cost), 1e-12)
    status = OPTIMAL if claimed_optimal and (best_cost - full_bound) <= OPTIMALITY_RTOL * scale \
        else FEASIBLE
    if status == OPTIMAL:
        gap = max(0.0, gap)
    return SolveResult(assignment=np.asarray(best, dtype=np.int64), objective=best_cost,
                       status=status, bound=full_bound, gap=gap, seconds=seconds,
                       solver=solver, stats=stats)


def trivial_result(problem: Problem, model: MilpModel, solver: str, warm, t0: float):
    """The result when presolve decided everything (infeasible, or no columns left)."""
    red = model.reduced
    if red.infeasible:
        return finish_result(problem, model, solver, values=None, claimed_optimal=False,
                             bound=math.inf, infeasible=True, native_status="presolve: "
                             + red.reason, seconds=time.perf_counter() - t0,
                             solve_seconds=0.0, warm=None)
    if model.n_cols == 0:
        a = red.fixed.copy()
        ev = problem.evaluate(a)
        return finish_result(problem, model, solver, values=np.zeros(0),
                             claimed_optimal=ev.feasible, bound=ev.cost - model.offset,
                             infeasible=not ev.feasible, native_status="presolve: solved",
                             seconds=time.perf_counter() - t0, solve_seconds=0.0, warm=warm)
    return None


def out_of_time_result(problem: Problem, model: MilpModel, solver: str, warm, t0: float,
                       extra_stats: dict | None = None) -> SolveResult:
    """The result when ``time_limit`` ran out before the solver could run.

    ``feasible`` with the warm start (bound: the presolve's lower bound is not kept, so
    ``-inf``) or ``unknown`` without one; ``stats["solver_time_limit"]`` is 0.
    """
    stats = {"solver_time_limit": 0.0, "time_limit_reached": True}
    stats.update(extra_stats or {})
    return finish_result(problem, model, solver, values=None, claimed_optimal=False,
                         bound=-math.inf, infeasible=False,
                         native_status="time limit reached before the solver ran",
                         seconds=time.perf_counter() - t0, solve_seconds=0.0, warm=warm,
                         extra_stats=stats)


#: Under this many seconds left, the solver is not started (its start-up alone costs more).
MIN_SOLVER_SECONDS = 0.05


def check_options(solver: str, options: dict, own: set) -> None:
    """Raise ``TypeError`` for an option the backend does not know."""
    unknown = set(options) - set(COMMON_OPTIONS) - set(own)
    if unknown:
        raise TypeError(f"{solver}: unknown option(s) {sorted(unknown)}; known: "
                        f"{sorted(set(COMMON_OPTIONS) | set(own))}")


def validate_gap(gap: Any) -> float:
    gap = 0.0 if gap is None else float(gap)
    if not (gap >= 0 and math.isfinite(gap)):
        raise ValueError(f"gap must be a finite number >= 0, got {gap}")
    return gap
