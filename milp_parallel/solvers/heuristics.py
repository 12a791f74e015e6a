"""Incumbents found without any exact search: constraint propagation, greedy, local search.

The MILP backends start from the assignment :func:`incumbent` returns (unless the user gives
a ``warm_start``), so their proof never leans on the exact graph search of
:mod:`milp_parallel.solvers.dp` (see DESIGN.md, "Independence"). The DP's budget search may
use these helpers too: they depend on nothing but the :class:`~milp_parallel.Problem`.

The steps, each cheap and each honouring ``deadline``:

1. **Hard domains.** A configuration or an edge pair whose cost is ``inf`` or at least
   :data:`SENTINEL` (IOPDDL's "effectively forbidden" ``1e18``) is *bad*. Arc consistency
   (AC-3) removes every configuration that has no good partner on some edge; when that
   empties a domain, no assignment avoids bad entries and the search falls back to all
   configurations of finite cost.
2. **Greedy.** Nodes are visited in breadth-first order (each after a neighbour); each takes
   the configuration of least (bad terms, cost) given the neighbours already placed, among its
   hard domain when possible.
3. **Conflict repair.** While some chosen entry is bad, nodes on bad entries move to their
   least (bad terms, cost) configuration (min-conflicts), with a random move when stuck.
4. **Memory repair.** While a memory row overflows, the move of least added cost per byte
   of overflow removed is made (never adding a bad entry).
5. **Descent.** 1-swap moves that lower the cost, keep every memory row within budget and add
   no bad entry, until none is left (iterated conditional modes).

Every memory row is checked through its usage level: per device ``d`` and per maximal live
set ``t`` (one for the all-live model), ``level[d, t] <= budget[d]``; node ``v`` is in the
sets ``first[v]:stop[v]``.
"""

from __future__ import annotations

import logging
import math
from collections import deque

import numpy as np

from ..problem import FORBIDDEN_COST, MEMORY_RTOL, Problem
from .memory import interval_cliques
from .options import Deadline

__all__ = ["SENTINEL", "incumbent", "LocalSearch"]

logger = logging.getLogger(__name__)

#: Costs at or above this are "effectively forbidden" (the IOPDDL contest's 1e18 entries):
#: the heuristics avoid them like ``inf`` whenever they can. A problem's own threshold is its
#: ``forbidden_cost`` (the lexicographic copy a solver sees has a smaller one).
SENTINEL = FORBIDDEN_COST


def _bad(a: np.ndarray, forbidden: float) -> np.ndarray:
    return ~(a < forbidden)                 # inf, nan and the forbidden entries


class LocalSearch:
    """Moves on one assignment of a problem, with its memory levels kept up to date.

    Per ``(node, configuration)`` it caches the cost of the good entries and the count of
    bad entries that choosing it would give, the neighbours' choices fixed (updated for the
    neighbours of a moved node only), so moves are evaluated over every pair at once.

    Parameters
    ----------
    problem : Problem
    deadline : Deadline, optional
    seed : int
        For the random moves of the conflict repair.
    """

    def __init__(self, problem: Problem, deadline: Deadline | None = None, seed: int = 0,
                 edge_bad: list[np.ndarray] | None = None):
        self.p = problem
        self.n = n = problem.n_nodes
        self.deadline = deadline or Deadline(None)
        self.rng = np.random.default_rng(seed)
        # per node: (neighbour, table with bad entries as 0, bad mask or None when the
        # table has no bad entry); the table's rows are this node's configurations
        self.nbrs: list[list[tuple[int, np.ndarray, np.ndarray | None]]] = \
            [[] for _ in range(n)]
        if edge_bad is None:
            edge_bad = [_bad(t, problem.forbidden_cost) for t in problem.edge_costs]
        self.edge_bad = edge_bad
        for (u, v), t, b in zip(problem.edges, problem.edge_costs, edge_bad):
            u, v = int(u), int(v)
            if b.any():
                clean = np.where(b, 0.0, t)
            else:
                b, clean = None, t
            self.nbrs[u].append((v, clean, b))
            self.nbrs[v].append((u, clean.T, None if b is None else b.T))
        k = problem.n_configs
        self.offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
        self.sizes = np.asarray(k, dtype=np.int64)
        self.owner = np.repeat(np.arange(n), self.sizes)
        self.node_bad = [_bad(c, problem.forbidden_cost) for c in problem.node_costs]
        self.node_cost = [np.where(b, 0.0, c) for c, b in zip(problem.node_costs,
                                                                self.node_bad)]
        total = int(self.offsets[-1])
        self.cost_all = np.zeros(total)
        self.bad_all = np.zeros(total, dtype=np.int64)
        self.has_rows = problem.has_budget
        self.all_live = self.has_rows and problem.intervals is None
        if self.has_rows:
            self.budget = problem.memory_limit * (1 + MEMORY_RTOL)        # (D,)
            self.tol = 1e-12 * np.abs(self.budget)
            self.mem_all = np.concatenate(problem.memory, axis=0) if n else \
                np.zeros((0, problem.n_devices))
            if problem.intervals is None:
                self.first = np.zeros(n, dtype=np.int64)
                self.stop = np.ones(n, dtype=np.int64)
                self.n_sets = 1
            else:
                iv = problem.intervals
                times = interval_cliques(iv)
                live = iv[:, 1] > iv[:, 0]
                self.first = np.where(live, np.searchsorted(times, iv[:, 0]), 0)
                self.stop = np.maximum(np.where(live, np.searchsorted(times, iv[:, 1]), 0),
                                       self.first)
                self.n_sets = max(1, times.size)
        self.a: np.ndarray | None = None
        self.set_seconds = 0.0
        self.level: np.ndarray | None = None
        self._edge_bad: np.ndarray | None = None      # flat bad masks (bad_count)

    # ------------------------------------------------------------------ state
    def restrict(self, allowed: list[np.ndarray]) -> None:
        """Count the configurations outside ``allowed`` (per node, a mask) as bad entries, so
        that no move enters them (call before :meth:`set`)."""
        self.node_bad = [b | ~al for b, al in zip(self.node_bad, allowed)]

    def set(self, assignment: np.ndarray) -> None:
        """Start from ``assignment`` (levels and cached local costs recomputed; the time
        taken is kept in ``set_seconds``, so that callers can tell whether a restart fits)."""
        clock = Deadline(None)
        self.a = a = np.asarray(assignment, dtype=np.int64).copy()
        # every edge gives its column (for u) and its row (for v) at the other end's choice:
        # gathered in one list, then bad-masked and summed into the flat caches at once
        pieces, owners = [], []
        for (u, v), t in zip(self.p.edges, self.p.edge_costs):
            pieces.append(t[:, a[v]])
            pieces.append(t[a[u], :])
        if pieces:
            owners = np.asarray(self.p.edges, dtype=np.int64).reshape(-1)
            vals = np.concatenate(pieces)
            lens = self.sizes[owners]
            pos = (np.repeat(self.offsets[owners] - np.cumsum(lens) + lens, lens)
                   + np.arange(vals.size))
            bad = _bad(vals, self.p.forbidden_cost)
            total = self.offsets[-1]
            self.bad_all = np.bincount(pos, weights=bad, minlength=total).astype(np.int64)
            self.cost_all = np.bincount(pos, weights=np.where(bad, 0.0, vals),
                                        minlength=total)
        else:
            self.bad_all = np.zeros(self.offsets[-1], dtype=np.int64)
            self.cost_all = np.zeros(self.offsets[-1])
        self.bad_all += np.concatenate(self.node_bad).astype(np.int64) if self.n else 0
        self.cost_all += np.concatenate(self.node_cost) if self.n else 0.0
        if self.has_rows:
            live = self.stop > self.first
            m = self.mem_all[self.offsets[:-1] + a][live]           # (n_live, D)
            delta = np.zeros((self.n_sets + 1, self.p.n_devices))
            np.add.at(delta, self.first[live], m)
            np.add.at(delta, self.stop[live], -m)
            self.level = np.ascontiguousarray(np.cumsum(delta, axis=0)[:-1].T)
        self.set_seconds = clock.elapsed()

    def local(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Per configuration of ``v``: (bad entries, cost of the good ones), neighbours fixed."""
        s, e = self.offsets[v], self.offsets[v + 1]
        return self.bad_all[s:e], self.cost_all[s:e]

    def move(self, v: int, c: int) -> None:
        if self.has_rows and self.stop[v] > self.first[v]:
            m = self.p.memory[v]
            self.level[:, self.first[v]:self.stop[v]] += (m[c] - m[self.a[v]])[:, None]
        old = self.a[v]
        self.a[v] = c
        if old == c:
            return
        for w, t, b in self.nbrs[v]:
            # w's cached terms change by this edge's row only (t: v's configs as rows);
            # incremental, so a move next to a hub does not rescan the hub's edges
            s = self.offsets[w]
            k = t.shape[1]
            self.cost_all[s:s + k] += t[c] - t[old]
            if b is not None:
                self.bad_all[s:s + k] += b[c].astype(np.int64) - b[old]

    def slack(self, v: int) -> np.ndarray | None:
        """``(D,)`` the least room left over the memory sets that hold ``v``."""
        if not self.has_rows or self.stop[v] <= self.first[v]:
            return None
        return self.budget - self.level[:, self.first[v]:self.stop[v]].max(axis=1)

    def fits(self, v: int) -> np.ndarray:
        """Per configuration of ``v``: would moving there keep its memory sets in budget?"""
        s = self.slack(v)
        if s is None:
            return np.ones(self.p.n_configs[v], dtype=bool)
        m = self.p.memory[v]
        return np.all(m - m[self.a[v]] <= s + self.tol, axis=1)

    def bad_count(self) -> int:
        """Bad entries chosen by the current assignment (vectorized over flat tables)."""
        a = self.a
        if self._edge_bad is None:
            tabs = self.p.edge_costs
            self._edge_bad = (np.concatenate([b.ravel() for b in self.edge_bad]) if tabs
                              else np.zeros(0, dtype=bool))
            self._edge_off = np.concatenate(
                [[0], np.cumsum([t.size for t in tabs])]).astype(np.int64)[:-1]
            self._edge_cols = np.array([t.shape[1] for t in tabs], dtype=np.int64)
            self._edge_ends = np.asarray(self.p.edges, dtype=np.int64).reshape(-1, 2)
        node_bad = np.concatenate(self.node_bad) if self.n else np.zeros(0, dtype=bool)
        n_bad = int(node_bad[self.offsets[:-1] + a].sum())
        if self._edge_off.size:
            u, v = self._edge_ends[:, 0], self._edge_ends[:, 1]
            n_bad += int(self._edge_bad[self._edge_off + a[u] * self._edge_cols + a[v]].sum())
        return n_bad

    def over(self) -> bool:
        return self.has_rows and bool(np.any(self.level > self.budget[:, None]
                                             + self.tol[:, None]))

    # ------------------------------------------------------------------ phases
    def greedy(self, domains: list[np.ndarray] | None, memory_first: bool = False,
               tries: int = 3, arcs: _Arcs | None = None) -> np.ndarray:
        """Breadth-first greedy construction (see the module docstring).

        With ``domains`` (arc-consistent good configurations), arc consistency is maintained
        as nodes are placed: each choice narrows the neighbours' domains through the good
        entries (so chains of one-to-one constraints, as in IOPDDL, are placed consistently
        at once); a choice that would empty a domain is undone and the next best tried, up to
        ``tries`` of them, before the best is kept anyway (no backtracking over placed nodes).
        ``arcs`` (built from the problem when not given) holds the good-entry masks.

        With ``memory_first``, each node takes the configuration of least (bad terms,
        memory, cost) instead of (bad terms, cost): a consistent assignment of little memory
        for budgets the cheapest choices overflow."""
        n = self.n
        a = np.full(n, -1, dtype=np.int64)
        placed = np.zeros(n, dtype=bool)
        degree = np.array([len(x) for x in self.nbrs])
        live = None
        if domains is not None:
            live = [np.zeros(k, dtype=bool) for k in self.sizes]
            for m, d in zip(live, domains):
                m[d] = True
            arcs = arcs if arcs is not None else _Arcs(self.p)
        for root in np.argsort(-degree, kind="stable"):
            if placed[root] or self.deadline.passed():
                continue
            queue = deque([int(root)])
            placed[root] = True
            while queue and not self.deadline.passed():
                v = queue.popleft()
                bad = self.node_bad[v].astype(np.int64)
                cost = self.node_cost[v].copy()
                for w, t, b in self.nbrs[v]:
                    if a[w] >= 0:
                        cost += t[:, a[w]]
                        if b is not None:
                            bad += b[:, a[w]]
                if live is not None:
                    # the domains stay arc consistent (a failed trial is undone), so every
                    # configuration left in live[v] has a good partner in every neighbour's
                    # domain: no forward check is needed beyond the domain itself
                    bad += ~live[v]
                if memory_first and self.has_rows:
                    order = np.lexsort((cost, self.p.memory[v].sum(axis=1), bad))
                else:
                    order = np.lexsort((cost, bad))
                a[v] = int(order[0])
                if live is not None and bad[a[v]] == 0 and live[v].sum() > 1:
                    for c in order[:tries]:
                        if bad[c] > 0:
                            break
                        trail = [(v, live[v])]
                        live[v] = np.zeros_like(live[v])
                        live[v][c] = True
                        if arcs.propagate(live, arcs.inc[v], self.deadline, trail):
                            a[v] = int(c)
                            break
                        for node, mask in reversed(trail):
                            live[node] = mask
                for w, _, _ in self.nbrs[v]:
                    if not placed[w]:
                        placed[w] = True
                        queue.append(w)
        if self.deadline.passed():
            # out of time: least-cost configurations for the rest, and no cache rebuild
            # (a full set() would overrun the deadline; call it to go on from here)
            for v in np.nonzero(a < 0)[0]:
                a[v] = int(np.lexsort((self.node_cost[v], self.node_bad[v]))[0])
            self.a = a
            return a
        self.set(a)
        return self.a

    def repair_conflicts(self, max_rounds: int = 50, keep_memory: bool = False) -> int:
        """Min-conflicts moves until no bad entry is chosen; returns the bad entries left.

        With ``keep_memory``, only moves that keep every memory set within budget are made
        (start from an assignment that fits, e.g. the least-memory one)."""
        left = self.bad_count()
        stall = 0
        keep_memory = keep_memory and self.has_rows
        for _ in range(max_rounds):
            if left == 0 or self.deadline.passed():
                break
            on_bad = np.nonzero(self.bad_all[self.offsets[:-1] + self.a] > 0)[0]
            for v in self.rng.permutation(on_bad):
                if self.deadline.passed():
                    break
                bad, cost = self.local(v)
                cur = self.a[v]
                if bad[cur] == 0:
                    continue
                if keep_memory:
                    fit = self.fits(v)
                    fit[cur] = True
                    bad = np.where(fit, bad, np.iinfo(np.int64).max)
                best = bad.min()
                cand = np.nonzero(bad == best)[0]
                if stall > 2:
                    self.move(v, int(self.rng.choice(cand)))
                elif best < bad[cur]:
                    self.move(v, int(cand[np.argmin(cost[cand])]))
            now = self.bad_count()
            stall = stall + 1 if now >= left else 0
            left = now
        return left

    def repair_memory(self, max_moves: int | None = None) -> bool:
        """Cheapest moves per unit of overflow removed; ``True`` when every row fits."""
        if not self.has_rows:
            return True
        scale = 1.0 / np.maximum(self.budget, 1e-300)
        if not self.all_live:
            # batches of moves first (one vectorized estimate per batch), then single moves
            for _ in range(max_moves or 4 * self.n + 10):
                if not self.over() or self.deadline.passed() \
                        or not self._repair_batch_intervals(scale):
                    break
        if not self.all_live and self.p.n_devices == 1:
            return not self.over()      # one device: the batches tried every such move
        for _ in range(max_moves or 4 * self.n + 10):
            if not self.over() or self.deadline.passed():
                break
            if self.all_live:
                v, c = self._repair_move_all_live(scale)
            else:
                v, c = self._repair_move_intervals(scale)
            if v < 0:
                break
            self.move(v, c)
        return not self.over()

    def _repair_move_all_live(self, scale: np.ndarray) -> tuple[int, int]:
        cur = self.offsets[:-1] + self.a
        use = self.level[:, 0]
        dm = self.mem_all - np.repeat(self.mem_all[cur], self.sizes, axis=0)
        over = use > self.budget
        new = use[None, :] + dm
        saved = ((np.maximum(use - self.budget, 0.0)[None, :]
                  - np.maximum(new - self.budget, 0.0)) * scale).sum(axis=1)
        delta = self.cost_all - np.repeat(self.cost_all[cur], self.sizes)
        ok = (saved > 0) & (self.bad_all <= np.repeat(self.bad_all[cur], self.sizes))
        ok &= np.all((new <= self.budget + self.tol) | over, axis=1)
        if not ok.any():
            ok = (saved > 0) & (self.bad_all <= np.repeat(self.bad_all[cur], self.sizes))
            if not ok.any():
                return -1, -1
        ratio = np.where(ok, delta / np.where(ok, saved, 1.0), np.inf)
        i = int(np.argmin(ratio))
        v = int(self.owner[i])
        return v, i - int(self.offsets[v])

    def _exact_saving(self, v: int, scale: np.ndarray) -> np.ndarray:
        """Per configuration of ``v``: overflow removed (scaled per device) by moving there."""
        f, s = self.first[v], self.stop[v]
        m = self.p.memory[v]
        dm = m - m[self.a[v]]                                              # (K, D)
        lev = self.level[:, f:s]
        old = np.maximum(lev - self.budget[:, None], 0.0)
        new = np.maximum(lev[None] + dm[:, :, None] - self.budget[None, :, None], 0.0)
        return ((old[None] - new) * scale[None, :, None]).sum(axis=(1, 2))

    def _repair_batch_intervals(self, scale: np.ndarray, share: float = 0.2) -> bool:
        """One batch of memory-lowering moves on interval rows; ``True`` if any was made.

        Every node live in an overflowing set is scored at once: the overflow a move removes
        is estimated from prefix sums (``min(memory saved x hot sets, overflow)`` over the
        node's range), and the nodes are visited by least added cost per unit removed; each
        visited node whose range still overflows takes its exact best move. Only moves that
        lower memory on every device are made (no other set can start to overflow) and none
        adds a bad entry. Cost ``O(sum K_v + sets)`` per batch instead of per move.
        """
        d = self.p.n_devices
        over = np.maximum(self.level - self.budget[:, None] - self.tol[:, None], 0.0)
        hot = (over > 0).any(axis=0)
        if not hot.any():
            return False
        ch = np.concatenate([[0], np.cumsum(hot)])
        co = np.concatenate([np.zeros((d, 1)), np.cumsum(over, axis=1)], axis=1)
        n_hot = ch[self.stop] - ch[self.first]                              # (n,)
        ov = (co[:, self.stop] - co[:, self.first]).T                       # (n, D)
        cur = self.offsets[:-1] + self.a
        dm = self.mem_all - np.repeat(self.mem_all[cur], self.sizes, axis=0)
        saved = (np.minimum(np.maximum(-dm, 0.0) * np.repeat(n_hot, self.sizes)[:, None],
                            np.repeat(ov, self.sizes, axis=0)) * scale).sum(axis=1)
        cur_bad = np.repeat(self.bad_all[cur], self.sizes)
        ok = (saved > 0) & np.all(dm <= 0, axis=1) & (self.bad_all <= cur_bad)
        if not ok.any():
            return False
        delta = self.cost_all - np.repeat(self.cost_all[cur], self.sizes)
        ratio = np.where(ok, delta / np.where(ok, saved, 1.0), np.inf)
        node_best = np.minimum.reduceat(ratio, self.offsets[:-1])
        nodes = np.nonzero(np.isfinite(node_best))[0]
        order = nodes[np.argsort(node_best[nodes], kind="stable")]
        moved = 0
        for v in order[:max(16, int(share * order.size))]:
            if self.deadline.passed():
                break
            v = int(v)
            f, s = self.first[v], self.stop[v]
            if not np.any(self.level[:, f:s] > self.budget[:, None] + self.tol[:, None]):
                continue
            m = self.p.memory[v]
            sv = self._exact_saving(v, scale)
            bad, cost = self.local(v)
            okv = (sv > 0) & np.all(m <= m[self.a[v]], axis=1) & (bad <= bad[self.a[v]])
            if not okv.any():
                continue
            r = np.where(okv, (cost - cost[self.a[v]]) / np.where(okv, sv, 1.0), np.inf)
            self.move(v, int(np.argmin(r)))
            moved += 1
        return moved > 0

    def _repair_move_intervals(self, scale: np.ndarray) -> tuple[int, int]:
        hot = np.nonzero(np.any(self.level > self.budget[:, None] + self.tol[:, None],
                                axis=0))[0]
        lo, hi = int(hot.min()), int(hot.max())
        cand = np.nonzero((self.stop > lo) & (self.first <= hi) & (self.stop > self.first))[0]
        best = (math.inf, -1, -1)
        for v in cand:
            saved = self._exact_saving(int(v), scale)
            bad, cost = self.local(int(v))
            ok = (saved > 0) & (bad <= bad[self.a[v]])
            if not ok.any():
                continue
            ratio = np.where(ok, (cost - cost[self.a[v]]) / np.where(ok, saved, 1.0), np.inf)
            c = int(np.argmin(ratio))
            if ratio[c] < best[0]:
                best = (float(ratio[c]), int(v), c)
            if self.deadline.passed():
                break
        return best[1], best[2]

    def descend(self, max_sweeps: int = 50) -> None:
        """1-swap improvements that keep memory in budget and add no bad entry."""
        if not self.has_rows or self.all_live:
            self._descend_vectorized(max_sweeps * max(self.n, 1))
            return
        for _ in range(max_sweeps):
            changed = False
            cur = self.offsets[:-1] + self.a
            cur_bad = np.repeat(self.bad_all[cur], self.sizes)
            delta = self.cost_all - np.repeat(self.cost_all[cur], self.sizes)
            tiny = 1e-12 * np.maximum(np.abs(np.repeat(self.cost_all[cur], self.sizes)), 1e-300)
            better = (self.bad_all < cur_bad) | ((self.bad_all <= cur_bad) & (delta < -tiny))
            for v in np.unique(self.owner[better]):
                if self.deadline.passed():
                    return
                bad, cost = self.local(v)
                cur = self.a[v]
                ok = (bad <= bad[cur]) & self.fits(v)
                ok[cur] = True
                score = np.where(ok, cost, np.inf)
                c = int(np.argmin(score))
                if bad[c] < bad[cur] or score[c] < cost[cur] - 1e-12 * max(abs(cost[cur]),
                                                                              1e-300):
                    self.move(v, c)
                    changed = True
            if not changed:
                return

    def descend_pairs(self) -> bool:
        """One sweep of joint moves of the two ends of each edge; ``True`` if any was made.

        A re-layout cost on an edge often makes every single move worse while moving both
        ends together pays off (a 2-swap).
        """
        changed = False
        for e, ((u, w), t) in enumerate(zip(self.p.edges, self.p.edge_costs)):
            if self.deadline.passed():
                break
            u, w = int(u), int(w)
            cu, cw = self.a[u], self.a[w]
            bu, ku = self.local(u)
            bw, kw = self.local(w)
            tb = _bad(t, self.p.forbidden_cost)
            tc = np.where(tb, 0.0, t)
            # each end's local cost without this edge's term (the other end at its choice)
            col_u, col_w = t[:, cw], t[cu, :]
            bu0 = bu - _bad(col_u, self.p.forbidden_cost)
            ku0 = ku - np.where(_bad(col_u, self.p.forbidden_cost), 0.0, col_u)
            bw0 = bw - _bad(col_w, self.p.forbidden_cost)
            kw0 = kw - np.where(_bad(col_w, self.p.forbidden_cost), 0.0, col_w)
            bad = bu0[:, None] + bw0[None, :] + tb
            cost = ku0[:, None] + kw0[None, :] + tc
            ok = bad <= bad[cu, cw]
            if self.has_rows:
                ok &= self._pair_fits(u, w, cu, cw)
            score = np.where(ok, cost + 1e300 * (bad < bad[cu, cw]) * -1.0, np.inf)
            i, j = np.unravel_index(int(np.argmin(score)), score.shape)
            if (i, j) != (cu, cw) and (bad[i, j] < bad[cu, cw] or cost[i, j] < cost[cu, cw]
                                       - 1e-12 * max(abs(cost[cu, cw]), 1e-300)):
                self.move(u, int(i))
                self.move(w, int(j))
                changed = True
        return changed

    def _pair_fits(self, u: int, w: int, cu: int, cw: int) -> np.ndarray:
        """``(K_u, K_w)``: does moving both ends keep every memory set that holds them?"""
        du = self.p.memory[u] - self.p.memory[u][cu]                        # (K_u, D)
        dw = self.p.memory[w] - self.p.memory[w][cw]
        ok = np.ones((du.shape[0], dw.shape[0]), dtype=bool)
        fu, su, fw, sw = self.first[u], self.stop[u], self.first[w], self.stop[w]
        lo, hi = max(fu, fw), min(su, sw)

        def room(a: int, b: int) -> np.ndarray | None:
            if b <= a:
                return None
            return self.budget - self.level[:, a:b].max(axis=1) + self.tol

        both = room(lo, hi)
        if both is not None:
            ok &= np.all(du[:, None, :] + dw[None, :, :] <= both, axis=2)
        for f, s_, d, axis in ((fu, su, du, 1), (fw, sw, dw, 0)):
            # the sets of one end only: before and after the shared range
            for a, b in ((f, min(s_, lo) if hi > lo else s_), (max(f, hi) if hi > lo else s_,
                                                                s_)):
                r = room(a, b)
                if r is not None:
                    fit = np.all(d <= r, axis=1)
                    ok &= fit[:, None] if axis == 1 else fit[None, :]
        return ok

    def _descend_vectorized(self, max_moves: int) -> None:
        for _ in range(max_moves):
            if self.deadline.passed():
                return
            cur = self.offsets[:-1] + self.a
            cur_bad = np.repeat(self.bad_all[cur], self.sizes)
            delta = self.cost_all - np.repeat(self.cost_all[cur], self.sizes)
            tiny = 1e-12 * np.maximum(np.abs(np.repeat(self.cost_all[cur], self.sizes)), 1e-300)
            ok = (self.bad_all < cur_bad) | ((self.bad_all == cur_bad) & (delta < -tiny))
            if self.has_rows:
                dm = self.mem_all - np.repeat(self.mem_all[cur], self.sizes, axis=0)
                ok &= np.all(self.level[:, 0][None, :] + dm <= self.budget + self.tol, axis=1)
            if not ok.any():
                return
            score = np.where(ok, delta - 1e300 * (self.bad_all < cur_bad), np.inf)
            i = int(np.argmin(score))
            v = int(self.owner[i])
            self.move(v, i - int(self.offsets[v]))


class _Arcs:
    """Arc consistency over the good entries (neither ``inf`` nor :data:`SENTINEL`).

    Domains are boolean masks per node. :meth:`propagate` runs AC-3 from a set of edges and
    records every mask it narrows on a trail, so that a failed trial can be undone. Only the
    *tight* edges (with some bad entry) can narrow a domain, so only they are kept: ``inc``
    lists each node's tight edges, ``tight`` all of them."""

    def __init__(self, problem: Problem, edge_bad: list[np.ndarray] | None = None):
        if edge_bad is None:
            edge_bad = [_bad(t, problem.forbidden_cost) for t in problem.edge_costs]
        self.edge_bad = edge_bad
        self.edges = [(int(u), int(v)) for u, v in problem.edges]
        self.good: list[np.ndarray | None] = [None] * len(self.edges)
        self.inc: list[list[int]] = [[] for _ in range(problem.n_nodes)]
        self.tight: list[int] = []
        for e, ((u, v), b) in enumerate(zip(self.edges, edge_bad)):
            good = ~b
            if good.all():
                continue
            self.good[e] = good
            self.tight.append(e)
            self.inc[u].append(e)
            self.inc[v].append(e)

    def propagate(self, allowed: list[np.ndarray], start, deadline: Deadline,
                  trail: list | None = None) -> bool:
        """Narrow ``allowed`` in place until arc consistent; ``False`` when a domain empties
        or the deadline passes (then ``allowed`` may be partly narrowed: undo the trail)."""
        queue = deque(start)
        queued = np.zeros(len(self.edges), dtype=bool)
        queued[list(queue)] = True
        while queue:
            if deadline.passed():
                return False
            e = queue.popleft()
            queued[e] = False
            u, v = self.edges[e]
            g = self.good[e]
            for node, other, t in ((u, v, g), (v, u, g.T)):
                sup = (t & allowed[other][None, :]).any(axis=1)
                old = allowed[node]
                if (old & ~sup).any():
                    new = old & sup
                    if trail is not None:
                        trail.append((node, old))
                    allowed[node] = new
                    if not new.any():
                        return False
                    for f in self.inc[node]:
                        if f != e and not queued[f]:
                            queued[f] = True
                            queue.append(f)
        return True


def _hard_domains(problem: Problem, deadline: Deadline,
                  arcs: _Arcs | None = None) -> list[np.ndarray] | None:
    """Arc-consistent domains of good configurations, or ``None`` when one empties."""
    allowed = [~_bad(c, problem.forbidden_cost) for c in problem.node_costs]
    if not all(al.any() for al in allowed):
        return None
    arcs = arcs if arcs is not None else _Arcs(problem)
    if not arcs.propagate(allowed, arcs.tight, deadline):
        return None
    return [np.nonzero(al)[0] for al in allowed]


def incumbent(problem: Problem, *, deadline: Deadline | None = None,
              start: np.ndarray | None = None, seed: int = 0,
              max_sweeps: int = 50) -> tuple[np.ndarray | None, dict]:
    """A feasible assignment found by propagation, greedy and local search (no exact search).

    Parameters
    ----------
    problem : Problem
    deadline : Deadline, optional
        Every phase stops when it passes (what was found by then is still repaired for
        memory when time allows, and returned only if feasible).
    start : numpy.ndarray, optional
        Start from this assignment instead of the greedy construction.
    seed : int
    max_sweeps : int
        Descent sweeps at most.

    Returns
    -------
    tuple
        ``(assignment or None, stats)``: the assignment is feasible (finite cost, memory
        within budget); it avoids every ``inf`` and :data:`SENTINEL` entry whenever the search
        found a way to. ``stats`` holds ``bad_entries`` (sentinel entries chosen),
        ``hard_domains`` (whether arc consistency left every node a good configuration).

    Examples
    --------
    >>> p = Problem([np.array([1.0, 2.0]), np.array([3.0, 0.5])], [(0, 1)],
    ...             [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> a, _ = incumbent(p)
    >>> a.tolist(), p.evaluate(a).cost
    ([1, 1], 2.5)
    """
    deadline = deadline or Deadline(None)
    clock = Deadline(None)
    stats: dict = {}
    if problem.n_nodes == 0:
        return np.zeros(0, dtype=np.int64), stats
    arcs = _Arcs(problem)
    domains = _hard_domains(problem, deadline, arcs)
    stats["hard_domains"] = domains is not None
    best, best_key = None, (math.inf, math.inf)

    def record(ls: LocalSearch, phase: str) -> None:
        """Keep ``ls``'s assignment when it fits and beats the best (fewer bad entries,
        then cost)."""
        nonlocal best, best_key
        stats[f"{phase}_seconds"] = round(clock.elapsed(), 3)
        if ls.over():
            return
        ev = problem.evaluate(ls.a)
        key = (ls.bad_count(), ev.cost)
        if ev.feasible and key < best_key:
            best, best_key = ls.a.copy(), key
            stats["phase"] = phase

    def finish(ls: LocalSearch, phase: str) -> None:
        """Memory repair, then descents (1-swaps and pairs) while they improve; record."""
        if ls.repair_memory():
            for _ in range(max_sweeps):
                ls.descend(max_sweeps)
                if ls.deadline.passed() or not ls.descend_pairs():
                    break
        record(ls, phase)

    set_seconds = 0.0

    def room_for_restart(ls: LocalSearch | None = None) -> bool:
        # a restart costs a full set() (as long as the longest so far) before any deadline
        # check: start one only when that fits in the time left
        nonlocal set_seconds
        if ls is not None:
            set_seconds = max(set_seconds, ls.set_seconds)
        left = deadline.left()
        return left is None or left > 2 * set_seconds

    def least_memory() -> bool:
        # The least-memory assignment fits every row whenever anything does (memory is
        # separable); start from it (within the arc-consistent domains, least cost among
        # equal memory). Two ways on from there, the better kept: (1) min-conflicts moves
        # that keep memory within budget remove the bad entries first (fast, so even a short
        # limit ends without them), then the descent lowers the cost for half the time left;
        # (2) with the rest of the time, the descent from the start removes bad entries
        # cost-first (better costs where it finishes: IOPDDL G 1.1e8 against 6.4e8), then
        # min-conflicts moves remove what is left.
        lm = LocalSearch(problem, deadline, seed + 1, arcs.edge_bad)
        if domains is not None:
            allowed = [np.zeros(k, dtype=bool) for k in problem.n_configs]
            for m, d in zip(allowed, domains):
                m[d] = True
            lm.restrict(allowed)
        lm.greedy(domains, memory_first=True, arcs=arcs)
        if deadline.passed():
            return False            # a greedy cut short placed nodes blindly: no answer
        lm.repair_conflicts(max_rounds=20, keep_memory=not lm.over())
        record(lm, "memory_greedy")
        if lm.bad_count() == 0:
            left = deadline.left()
            lm.deadline = Deadline(None if left is None else 0.3 * left)
            finish(lm, "memory_greedy_descent")
            lm.deadline = deadline
        if not room_for_restart(lm):
            return False
        a = np.empty(problem.n_nodes, dtype=np.int64)
        for v in range(problem.n_nodes):
            m = problem.memory[v].sum(axis=1)
            a[v] = int(np.lexsort((lm.node_cost[v], m, lm.node_bad[v]))[0])
        lm.set(a)
        lm.repair_conflicts(max_rounds=20, keep_memory=True)
        record(lm, "least_memory_conflicts")
        left = deadline.left()
        lm.deadline = Deadline(None if left is None else 0.5 * left)
        finish(lm, "least_memory_conflicts_descent")
        lm.deadline = deadline
        if not room_for_restart(lm):
            return False
        lm.set(a)
        finish(lm, "least_memory_descent")
        if lm.bad_count() > 0 and not deadline.passed():
            lm.repair_conflicts(max_rounds=200, keep_memory=True)
            finish(lm, "least_memory_descent_conflicts")
        return not deadline.passed()

    tight = False
    if start is None and problem.has_budget:
        # When the cheapest configuration of every node overflows memory, the greedy will
        # too and its repair is slow on large interval models: the least-memory start first.
        cheap = np.array([int(np.lexsort((c, _bad(c, problem.forbidden_cost)))[0])
                          for c in problem.node_costs])
        tight = not problem.evaluate(cheap).feasible
        stats["tight_memory"] = tight
    if tight:
        if not least_memory():      # out of time (or of room for another start)
            stats["bad_entries"] = int(best_key[0]) if best is not None else None
            return best, stats
    if not room_for_restart():
        stats["bad_entries"] = int(best_key[0]) if best is not None else None
        return best, stats
    ls = LocalSearch(problem, deadline, seed, arcs.edge_bad)
    if start is not None:
        ls.set(problem.check_assignment(start))
    else:
        ls.greedy(domains, arcs=arcs)
        if deadline.passed():
            stats["bad_entries"] = int(best_key[0]) if best is not None else None
            return best, stats
    ls.repair_conflicts()
    if not ls.over():
        finish(ls, "greedy")
    if (not tight and (best is None or best_key[0] > 0) and problem.has_budget
            and not deadline.passed()):
        least_memory()
    if ls.over() and not deadline.passed():
        finish(ls, "greedy_memory_repair")      # the greedy's own memory repair, if time is left
    if best is None and problem.has_budget and not deadline.passed():
        # The starts above prefer good configurations to light ones; when the budget needs a
        # forbidden configuration, start from the least memory itself (not impossible ones),
        # which fits whenever anything does on one device.
        f = problem.forbidden_cost
        a = np.array([int(np.lexsort((c, _bad(c, f), m.sum(axis=1), np.isinf(c)))[0])
                      for c, m in zip(problem.node_costs, problem.memory)])
        lm = LocalSearch(problem, deadline, seed + 2, arcs.edge_bad)
        lm.set(a)
        lm.repair_conflicts(max_rounds=200, keep_memory=True)
        record(lm, "least_memory_fallback")
        if best is not None:
            finish(lm, "least_memory_fallback_descent")
    stats["bad_entries"] = int(best_key[0]) if best is not None else None
    if best is None:
        logger.debug("incumbent: no feasible assignment found")
    return best, stats
