"""Presolve: shrink a problem before it becomes a MILP, keeping at least one optimum.

Every step uses MILP-side reasoning only (DESIGN.md, "Independence"): the problem's own
tables, memory rows, and bounds against an incumbent that no exact search produced. Each
keeps at least one optimal assignment on its own (tested against enumeration in
``tests/test_milp.py``), so stopping between steps is exact.

``forbidden``
    ``inf`` node costs remove the configuration; ``inf`` edge pairs get no ``y`` variable
    (the marginal constraints then forbid the pair); a configuration with no allowed partner
    on some edge is removed too (arc consistency).
``memory``
    Nodes whose memory does not depend on their configuration leave a row (into its
    right-hand side); a row whose largest possible usage is within the budget is dropped,
    as is a row equal to another with no less slack; a configuration that alone overflows a
    row (every other node at its least memory) is removed; a row over two nodes joined by an
    edge becomes forbidden pairs of that edge.
``dominance``
    Configuration ``c`` of node ``v`` is dropped when another configuration ``c'`` costs no
    more on the node, on every entry of every incident edge table, and in memory on every
    device whose rows hold ``v`` (ties broken by the index, so one of equal configs stays).
``fold``
    A node with one configuration left is fixed: its cost joins the constant, its edge rows
    join the neighbours' node costs, its memory comes off the rows' budgets. An edge whose
    table is additive (``t[c, c'] = a[c] + b[c']``, no forbidden entry) is folded away.
``bound``
    Given an upper bound ``U`` (the cost of a feasible assignment), every configuration and
    pair whose cost alone makes every completion cost more than ``U`` is removed; the lower
    bound of a completion shares each node's cost among its incident edges.
``dual``
    Dual ascent on the LP relaxation (:mod:`milp_parallel.solvers.dual`), with Lagrange
    multipliers on the memory rows raised by subgradient steps: its bound gives every
    configuration and pair a lower bound on the assignments that use it (reduced-cost
    fixing against ``U``), and its rounding, polished by local search, a better incumbent
    ``U``. On problems whose LP relaxation is tight this proves the optimum by itself.

With ``presolve="dp"`` (an explicit option, never a default, never used by a cross-check)
two steps that use the exact graph search run first: the DP's unconstrained optimum as an
incumbent (``dp_incumbent``) and min-marginal fixing (``dp_marginal``: configuration ``c`` of
``v`` goes when the least cost of any assignment with ``a_v = c``, memory ignored, exceeds
``U``).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...problem import Problem
from ..dual import DualAscent, capped
from ..forbidden import lexicographic
from ..heuristics import LocalSearch
from ..memory import memory_rows
from ..options import Deadline
from ..result import Incumbent

__all__ = ["REDUCTIONS", "DP_REDUCTIONS", "MemoryRow", "Reduced", "presolve"]

logger = logging.getLogger(__name__)

#: The MILP-side steps (pass a subset as ``reductions=`` to switch some off).
REDUCTIONS = ("forbidden", "memory", "dominance", "fold", "bound", "dual")
#: The steps that use the exact graph search (only with ``presolve="dp"``).
DP_REDUCTIONS = ("dp_incumbent", "dp_marginal")

#: Entries above this are lowered to it inside the dual ascent (so IOPDDL's 1e18 costs do
#: not swamp the float arithmetic; lowering a cost keeps every bound valid).
_DUAL_CAP = 2.0 ** 50
#: Default element comparisons the dominance step may spend (it is quadratic in ``K_v``).
DEFAULT_DOMINANCE_WORK = 3e8


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
    lower_bound : float
        A proved lower bound on the optimum (``-inf`` when none was computed); from the
        ``dual`` step.
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
    lower_bound: float = -math.inf
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


# ---------------------------------------------------------------------- the working state
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
        # Memory rows: per row its nodes (array), device and right-hand side.
        rows = memory_rows(problem)
        self.row_nodes = [rows.row(r).copy() for r in range(rows.n_rows)]
        self.row_dev = rows.device.copy()
        self.row_rhs = rows.budget.astype(float).copy()
        self.offset = 0.0
        self.infeasible = False
        self.reason = ""
        self.warm: np.ndarray | None = None   # local indices per node (into conf)
        self.U = math.inf
        self.LB = -math.inf
        self.deadline = Deadline(None)        # for the optional work
        self.integer = (all(np.all(c[np.isfinite(c)] == np.round(c[np.isfinite(c)]))
                            for c in problem.node_costs)
                        and all(np.all(t[np.isfinite(t)] == np.round(t[np.isfinite(t)]))
                                for t in problem.edge_costs))
        self.stats = {"configs_in": int(problem.n_configs.sum()),
                      "pairs_in": int(sum(t.size for t in problem.edge_costs)),
                      "memory_rows_in": len(self.row_nodes),
                      "forbidden_configs": 0, "forbidden_pairs": 0, "memory_configs": 0,
                      "memory_pairs": 0, "memory_rows_dropped": 0, "dominated_configs": 0,
                      "fixed_nodes": 0, "folded_edges": 0, "bound_configs": 0,
                      "bound_pairs": 0, "dual_configs": 0, "dual_pairs": 0, "rounds": 0}

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
        if self.deadline.passed():
            self.stats["presolve_cut"] = True
            return True
        return False

    def tol(self) -> float:
        """Absolute slack for comparisons of bounds with ``U``."""
        return 1e-9 * max(abs(self.U), 1.0) if math.isfinite(self.U) else 0.0

    # -- forbidden ---------------------------------------------------------------------
    def forbidden(self, arc: bool = True) -> bool:
        changed = False
        for v in range(self.p.n_nodes):
            if self.free(v) and not np.all(np.isfinite(self.theta[v])):
                changed |= self.keep(v, np.isfinite(self.theta[v]), "forbidden_configs")
                if self.infeasible:
                    return True
        if not arc:
            return changed
        queue = deque(self.edges)
        queued = set(queue)
        while queue and not self.infeasible:
            e = queue.popleft()
            queued.discard(e)
            if e not in self.edges:
                continue
            u, w, t = self.edges[e]
            fin = np.isfinite(t)
            for node, ok in ((u, fin.any(axis=1)), (w, fin.any(axis=0))):
                if not ok.all():
                    changed |= self.keep(node, ok, "forbidden_configs")
                    if self.infeasible:
                        return True
                    for f in self.adj[node]:
                        if f != e and f not in queued:
                            queued.add(f)
                            queue.append(f)
                    u, w, t = self.edges[e]
                    fin = np.isfinite(t)
        return changed

    # -- memory ------------------------------------------------------------------------
    def _row_arrays(self):
        """Flat views of the rows: (lengths, nodes, devices per entry, row id per entry)."""
        lens = np.array([r.size for r in self.row_nodes], dtype=np.int64)
        flat = (np.concatenate(self.row_nodes) if self.row_nodes
                else np.zeros(0, dtype=np.int64))
        dev = np.repeat(self.row_dev, lens)
        rid = np.repeat(np.arange(len(self.row_nodes)), lens)
        return lens, flat, dev, rid

    def _min_max(self) -> tuple[np.ndarray, np.ndarray]:
        """``(n, D)`` least and largest memory of each free node over its kept configs."""
        n, d = self.p.n_nodes, self.p.n_devices
        lo, hi = np.zeros((n, d)), np.zeros((n, d))
        for v in range(n):
            if self.free(v):
                lo[v] = self.mem[v].min(axis=0)
                hi[v] = self.mem[v].max(axis=0)
        return lo, hi

    def _set_rows(self, keep_row: np.ndarray, keep_entry: np.ndarray, lens, flat) -> None:
        new_lens = np.add.reduceat(keep_entry.astype(np.int64), np.r_[0, np.cumsum(lens)[:-1]]) \
            if lens.size and lens.sum() else np.zeros(lens.size, dtype=np.int64)
        new_lens = np.where(lens > 0, new_lens, 0)
        parts = np.split(flat[keep_entry], np.cumsum(new_lens)[:-1]) if lens.size else []
        self.row_nodes = [p for p, k in zip(parts, keep_row) if k]
        self.row_dev = self.row_dev[keep_row]
        self.row_rhs = self.row_rhs[keep_row]

    def memory(self, enabled: bool) -> bool:
        if not self.row_nodes:
            return False
        changed = False
        lo, hi = self._min_max()
        lens, flat, dev, rid = self._row_arrays()
        # Fixed nodes and nodes of constant memory leave their rows (into the rhs).
        fixed_entry = self.fixed[flat] >= 0
        const = (hi[flat, dev] <= lo[flat, dev]) & ~fixed_entry
        out = fixed_entry | const
        if out.any():
            sub = np.zeros(len(self.row_nodes))
            fixed_use = np.array([self.mem_fixed(v, d) for v, d in
                                  zip(flat[fixed_entry], dev[fixed_entry])]) \
                if fixed_entry.any() else np.zeros(0)
            np.add.at(sub, rid[fixed_entry], fixed_use)
            np.add.at(sub, rid[const], lo[flat[const], dev[const]])
            self.row_rhs = self.row_rhs - sub
        keep_entry = ~out
        mins = np.zeros(len(self.row_nodes))
        spans = np.zeros(len(self.row_nodes))
        np.add.at(mins, rid[keep_entry], lo[flat[keep_entry], dev[keep_entry]])
        np.add.at(spans, rid[keep_entry], (hi - lo)[flat[keep_entry], dev[keep_entry]])
        slack = self.row_rhs - mins
        tol = 1e-12 * np.maximum(np.abs(self.row_rhs), 1.0)
        if np.any(slack < -tol):
            r = int(np.argmin(slack))
            d = int(self.row_dev[r])
            self.fail(f"memory budget {self.p.memory_limit[d]:.6g} on device {d} cannot be "
                      "met: the least-memory choice of every node already exceeds it")
            return True
        keep_row = spans > slack
        dropped = int((~keep_row).sum())
        if dropped or out.any():
            changed |= dropped > 0
            self._set_rows(keep_row, keep_entry, lens, flat)
            slack = slack[keep_row]
        # Equal rows (same device and nodes): keep the one with least slack.
        if 1 < len(self.row_nodes) and sum(r.size for r in self.row_nodes) <= 5e6:
            seen: dict = {}
            keep_row = np.ones(len(self.row_nodes), dtype=bool)
            for r, nodes in enumerate(self.row_nodes):
                key = (int(self.row_dev[r]), nodes.tobytes())
                other = seen.get(key)
                if other is None:
                    seen[key] = r
                    continue
                drop = r if slack[r] >= slack[other] else other
                keep_row[drop] = False
                seen[key] = other if drop == r else r
            if not keep_row.all():
                dropped += int((~keep_row).sum())
                changed = True
                self.row_nodes = [x for x, k in zip(self.row_nodes, keep_row) if k]
                self.row_dev = self.row_dev[keep_row]
                self.row_rhs = self.row_rhs[keep_row]
        self.stats["memory_rows_dropped"] += dropped
        if not enabled or not self.row_nodes:
            return changed
        # Configurations that overflow a row on their own.
        lens, flat, dev, rid = self._row_arrays()
        slack = self.row_rhs - np.bincount(rid, weights=lo[flat, dev],
                                           minlength=len(self.row_nodes))
        n, dcount = self.p.n_nodes, self.p.n_devices
        tight = np.full((n, dcount), np.inf)
        np.minimum.at(tight, (flat, dev), slack[rid])
        for v in np.nonzero(np.isfinite(tight).any(axis=1))[0]:
            if not self.free(v):
                continue
            m = self.mem[v]
            t_ = tight[v]
            tol_v = 1e-12 * np.maximum(np.abs(np.where(np.isfinite(t_), t_, 0.0)), 1.0)
            ok = np.all(m - m.min(axis=0) <= t_ + tol_v, axis=1)
            changed |= self.keep(int(v), ok, "memory_configs")
            if self.infeasible:
                return True
        # Rows over two nodes joined by an edge become forbidden pairs.
        edge_of = {}
        for e, (u, w, _) in self.edges.items():
            edge_of[(u, w)] = e
            edge_of[(w, u)] = e
        keep = np.ones(len(self.row_nodes), dtype=bool)
        for r, nodes in enumerate(self.row_nodes):
            if nodes.size == 2 and (int(nodes[0]), int(nodes[1])) in edge_of:
                e = edge_of[(int(nodes[0]), int(nodes[1]))]
                u, w, t = self.edges[e]
                d, rhs = int(self.row_dev[r]), float(self.row_rhs[r])
                over = (self.mem[u][:, d][:, None] + self.mem[w][:, d][None, :]
                        > rhs + 1e-12 * max(abs(rhs), 1.0))
                over &= np.isfinite(t)
                if over.any():
                    self.stats["memory_pairs"] += int(over.sum())
                    t = t.copy()
                    t[over] = np.inf
                    self.edges[e][2] = t
                self.stats["memory_rows_dropped"] += 1
                keep[r] = False
                changed = True
        if not keep.all():
            self.row_nodes = [x for x, k in zip(self.row_nodes, keep) if k]
            self.row_dev = self.row_dev[keep]
            self.row_rhs = self.row_rhs[keep]
        return changed

    def mem_fixed(self, v: int, d: int) -> float:
        return float(self.p.memory[v][self.fixed[v], d])

    def _row_devices(self) -> list[np.ndarray]:
        """Per node, the devices of the memory rows that hold it."""
        devs: list[set] = [set() for _ in range(self.p.n_nodes)]
        for nodes, d in zip(self.row_nodes, self.row_dev):
            for v in nodes:
                devs[int(v)].add(int(d))
        return [np.array(sorted(s), dtype=np.int64) for s in devs]

    # -- dominance ---------------------------------------------------------------------
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

    # -- fold --------------------------------------------------------------------------
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
            changed = True
        # Additive edges.
        # (Never one with a forbidden entry: a tolerance relative to the marker would erase
        # the small costs beside it.)
        forbidden = self.p.forbidden_cost
        for e in list(self.edges):
            u, w, t = self.edges[e]
            if not np.all(t < forbidden):
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
        if changed and self.row_nodes:
            self.memory(False)                  # fixed nodes leave their rows
        return changed

    # -- bounds ------------------------------------------------------------------------
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
        limit = self.U + self.tol()
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

    def offer(self, assignment: np.ndarray) -> bool:
        """Take an original assignment as the incumbent if it is feasible, representable in
        the current reduction and cheaper than ``U``."""
        ev = self.p.evaluate(assignment)
        if not ev.feasible or ev.cost >= self.U:
            return False
        if np.any((self.fixed >= 0) & (assignment != self.fixed)):
            return False
        local = np.zeros(self.p.n_nodes, dtype=np.int64)
        for v in np.nonzero(self.fixed < 0)[0]:
            hit = np.nonzero(self.conf[v] == assignment[v])[0]
            if hit.size == 0:
                return False
            local[v] = hit[0]
        for u, w, t in self.edges.values():
            if not np.isfinite(t[local[u], local[w]]):
                return False
        self.warm = local
        self.U = ev.cost
        return True

    def dual(self, sweeps: int, rounds: int) -> bool:
        """LP-dual reduced-cost fixing and rounding (see the module docstring)."""
        free = np.nonzero(self.fixed < 0)[0]
        if free.size == 0:
            return False
        # The dual's effort is capped by the size of the problem (it is fast where the LP
        # relaxation is tight and well conditioned, the zoo; elsewhere the solver's own LP
        # does better): about 10 us per table entry, at least half a second.
        entries = sum(t.size for t in (e[2] for e in self.edges.values()))
        cap = Deadline(max(0.5, 1e-5 * entries))
        outer = self.deadline
        self.deadline = cap if outer.at is None or (cap.at is not None and cap.at < outer.at) \
            else outer
        try:
            return self._dual(free, sweeps, rounds)
        finally:
            self.deadline = outer

    def _dual(self, free: np.ndarray, sweeps: int, rounds: int) -> bool:
        index = np.full(self.p.n_nodes, -1, dtype=np.int64)
        index[free] = np.arange(free.size)
        keys = list(self.edges)
        edges = np.array([[index[self.edges[e][0]], index[self.edges[e][1]]] for e in keys],
                         dtype=np.int64).reshape(-1, 2)
        tables = [capped(self.edges[e][2], _DUAL_CAP) for e in keys]
        base = [capped(self.theta[v], _DUAL_CAP) for v in free]
        # Memory rows as multipliers, flat: entry -> (row, free node index, device).
        lens = np.array([r.size for r in self.row_nodes], dtype=np.int64)
        r_node = index[np.concatenate(self.row_nodes)] if self.row_nodes else \
            np.zeros(0, dtype=np.int64)
        r_row = np.repeat(np.arange(lens.size), lens)
        r_dev = np.repeat(self.row_dev, lens)
        rhs = self.row_rhs.astype(float)
        n_dev = self.p.n_devices
        mu = np.zeros(lens.size)
        order = _bfs_order(free.size, edges)
        da = DualAscent(base, edges, tables, order=order)
        best = (-math.inf, None, None)
        ls = LocalSearch(self.p, self.deadline)
        ls.restrict(self._allowed_mask())
        for rnd in range(max(1, rounds)):
            if self.late():
                break
            if lens.size:
                weight = np.zeros((free.size, n_dev))
                np.add.at(weight, (r_node, r_dev), mu[r_row])
                da.set_unary([b + self.mem[v] @ weight[i] if weight[i].any() else b
                              for i, (v, b) in enumerate(zip(free, base))])
            target = self.U - self.offset + float(mu @ rhs) - self.tol() \
                if math.isfinite(self.U) else math.inf
            lb = da.run(sweeps if rnd == 0 else max(10, sweeps // 10), target=target,
                        rtol=1e-6, deadline=self.deadline)
            lb_full = self.offset + lb - float(mu @ rhs)
            if lb_full > best[0]:
                best = (lb_full, da.node_reduced(), [da.edge_reduced(i)
                                                     for i in range(len(keys))])
            # rounding, polished on the original problem within the kept configurations
            local = da.decode()
            a = self.fixed.copy()
            a[free] = [self.conf[v][c] for v, c in zip(free, local)]
            ls.set(a)
            if ls.repair_memory():
                for _ in range(10):
                    ls.descend(20)
                    if not ls.descend_pairs() or self.late():
                        break
                self.offer(ls.a.copy())
            if not lens.size or not math.isfinite(self.U):
                break
            # subgradient step on the multipliers (Polyak, towards U)
            use = np.array([self.mem[v][c] for v, c in zip(free, local)])      # (F, D)
            level = np.bincount(r_row, weights=use[r_node, r_dev], minlength=lens.size)
            g = level - rhs
            g[(mu <= 0) & (g < 0)] = 0.0
            norm = float(g @ g)
            if norm == 0 or lb_full >= self.U - self.tol():
                break
            mu = np.maximum(0.0, mu + (self.U - lb_full) / norm * g)
        lb_full, node_red, edge_red = best
        if not math.isfinite(lb_full):
            return False
        self.LB = max(self.LB, lb_full)
        self.stats["dual_bound"] = lb_full
        self.stats["dual_sweeps"] = da.sweeps
        if not math.isfinite(self.U):
            return False
        limit = self.U + self.tol()
        if self.integer:
            limit = math.floor(self.U + 0.5) + 1 - 1e-6     # costs are whole: > U means >= U+1
        changed = False
        for i, e in enumerate(keys):
            u, w = self.edges[e][0], self.edges[e][1]
            pair_lb = (lb_full + edge_red[i] + node_red[index[u]][:, None]
                       + node_red[index[w]][None, :])
            t = self.edges[e][2]
            kill = (pair_lb >= limit) & np.isfinite(t)
            if self.warm is not None:
                kill[self.warm[u], self.warm[w]] = False
            if kill.any():
                self.stats["dual_pairs"] += int(kill.sum())
                t = t.copy()
                t[kill] = np.inf
                self.edges[e][2] = t
                changed = True
        for i, v in enumerate(free):
            ok = lb_full + node_red[i] < limit
            if self.warm is not None:
                ok[self.warm[v]] = True
            changed |= self.keep(int(v), ok, "dual_configs")
            if self.infeasible:
                return True
        return changed

    def _allowed_mask(self) -> list[np.ndarray]:
        out = []
        for v in range(self.p.n_nodes):
            m = np.zeros(self.p.n_configs[v], dtype=bool)
            if self.free(v):
                m[self.conf[v]] = True
            else:
                m[self.fixed[v]] = True
            out.append(m)
        return out


def _bfs_order(n: int, edges: np.ndarray) -> np.ndarray:
    """Nodes in breadth-first order from the highest-degree node of each component."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, w in edges:
        adj[int(u)].append(int(w))
        adj[int(w)].append(int(u))
    deg = np.array([len(x) for x in adj])
    seen = np.zeros(n, dtype=bool)
    order = []
    for root in np.argsort(-deg, kind="stable"):
        if seen[root]:
            continue
        seen[root] = True
        queue = deque([int(root)])
        while queue:
            v = queue.popleft()
            order.append(v)
            for w in adj[v]:
                if not seen[w]:
                    seen[w] = True
                    queue.append(w)
    return np.array(order, dtype=np.int64)


# ---------------------------------------------------------------------- presolve
def presolve(problem: Problem, *, warm_start: Sequence[int] | None = None,
             reductions: Sequence[str] | None = None,
             dominance_work_limit: float = DEFAULT_DOMINANCE_WORK,
             max_rounds: int = 20, deadline: Deadline | None = None,
             dual_sweeps: int = 200, dual_rounds: int = 8) -> Reduced:
    """Reduce a problem before it becomes a MILP (see the module docstring for the steps).

    Parameters
    ----------
    problem : Problem
    warm_start : sequence of int, optional
        A feasible assignment; its cost is the upper bound ``U`` of the ``bound`` and ``dual``
        steps and it is kept representable (a dominated config of it is replaced by its
        dominator, which costs no more). An infeasible one is ignored.
    reductions : sequence of str, optional
        Steps to run, a subset of :data:`REDUCTIONS` plus, explicitly, :data:`DP_REDUCTIONS`
        (default: :data:`REDUCTIONS`). Removing configurations with ``inf`` cost and the
        memory rows that cannot bind always happens (the model has no way to express
        ``inf``).
    dominance_work_limit : float
        Element comparisons the dominance step may spend.
    max_rounds : int
        The steps repeat until nothing changes or this many rounds ran.
    deadline : Deadline, optional
        Once it passes, the optional steps stop (the first round's ``forbidden`` and
        memory-row normalisation always run, the model needs them) and
        ``stats["presolve_cut"]`` says so.
    dual_sweeps, dual_rounds : int
        Sweeps of the dual ascent per round, and rounds of multiplier updates.

    Returns
    -------
    Reduced

    Examples
    --------
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> red = presolve(p, reductions=("forbidden", "memory"))
    >>> [None if c is None else c.tolist() for c in red.configs]
    [[0, 1], [0, 1]]
    >>> red = presolve(p)                   # the dual step proves the optimum [1, 1]
    >>> red.warm_start.tolist(), red.upper_bound, red.lower_bound
    ([1, 1], 2.5, 2.5)
    """
    from ...errors import InvalidOptionError
    steps = set(REDUCTIONS if reductions is None else reductions)
    unknown = steps - set(REDUCTIONS) - set(DP_REDUCTIONS)
    if unknown:
        raise InvalidOptionError(f"unknown reductions {sorted(unknown)}; known: "
                                 f"{REDUCTIONS + DP_REDUCTIONS}")
    problem = lexicographic(problem).problem     # no step compares across 1e18
    st = _State(problem)
    st.deadline = deadline or Deadline(None)
    if warm_start is not None:
        inc = Incumbent.of(problem, problem.check_assignment(warm_start), "user")
        if inc is not None:
            st.warm, st.U = inc.assignment.copy(), inc.cost
    arc = "forbidden" in steps
    st.stats["used_exact_search"] = bool(steps & set(DP_REDUCTIONS))
    if st.stats["used_exact_search"]:          # only when asked: see presolve_dp.py
        from .presolve_dp import dp_incumbent, dp_marginal
        if "dp_incumbent" in steps and not st.late():
            dp_incumbent(st)
        if "dp_marginal" in steps and math.isfinite(st.U) and not st.late():
            dp_marginal(st)
    dual_done = False
    for rnd in range(max_rounds):
        changed = st.forbidden(arc and (rnd == 0 or not st.late()))
        if st.infeasible:
            break
        st.stats["rounds"] = rnd + 1
        changed |= st.memory("memory" in steps and not st.late())
        if not st.infeasible and "bound" in steps and not st.late():
            st.U = min(st.U, st.warm_cost())
            changed |= st.bound()
        if not st.infeasible and not st.late():
            changed |= st.forbidden(arc)
        if not st.infeasible and "dominance" in steps and not st.late():
            changed |= st.dominance(dominance_work_limit)
        if not st.infeasible and "fold" in steps and not st.late():
            changed |= st.fold()
        if not changed and not st.infeasible and "dual" in steps and not dual_done \
                and not st.late():
            dual_done = True
            changed |= st.dual(dual_sweeps, dual_rounds)
        if st.infeasible or not changed or st.late():
            break
    return _reduced(problem, st)


def _reduced(problem: Problem, st: _State) -> Reduced:
    n = problem.n_nodes
    free = st.fixed < 0
    configs = tuple(st.conf[v] if free[v] else None for v in range(n))
    node_costs = tuple(st.theta[v] if free[v] else None for v in range(n))
    keys = sorted(st.edges)
    edges = np.array([st.edges[e][:2] for e in keys], dtype=np.int64).reshape(-1, 2)
    edge_costs = tuple(st.edges[e][2] for e in keys)
    rows = []
    if not st.infeasible and st.row_nodes:
        for nodes, d, rhs in zip(st.row_nodes, st.row_dev, st.row_rhs):
            nodes = nodes[free[nodes]]
            d = int(d)
            mins = [float(st.mem[v][:, d].min()) for v in nodes]
            coefs = tuple(st.mem[v][:, d] - m for v, m in zip(nodes, mins))
            rows.append(MemoryRow(nodes=nodes.copy(), device=d, coefs=coefs,
                                  rhs=float(rhs) - sum(mins)))
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
                   lower_bound=st.LB, stats=stats)
