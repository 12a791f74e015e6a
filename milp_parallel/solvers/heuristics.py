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

from ..problem import MEMORY_RTOL, Problem
from .memory import interval_cliques
from .options import Deadline

__all__ = ["SENTINEL", "incumbent", "LocalSearch"]

logger = logging.getLogger(__name__)

#: Costs at or above this are "effectively forbidden" (the IOPDDL contest's 1e18 entries):
#: the heuristics avoid them like ``inf`` whenever they can.
SENTINEL = 1e18


def _bad(a: np.ndarray) -> np.ndarray:
    return ~(a < SENTINEL)                  # inf, nan and the sentinel


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

    def __init__(self, problem: Problem, deadline: Deadline | None = None, seed: int = 0):
        self.p = problem
        self.n = n = problem.n_nodes
        self.deadline = deadline or Deadline(None)
        self.rng = np.random.default_rng(seed)
        self.nbrs: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
        for (u, v), t in zip(problem.edges, problem.edge_costs):
            u, v = int(u), int(v)
            self.nbrs[u].append((v, t))            # t[c_u, c_v]: rows are u's configs
            self.nbrs[v].append((u, t.T))
        k = problem.n_configs
        self.offsets = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
        self.sizes = np.asarray(k, dtype=np.int64)
        self.owner = np.repeat(np.arange(n), self.sizes)
        self.node_bad = [_bad(c) for c in problem.node_costs]
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
            if problem.intervals is None:
                self.first = np.zeros(n, dtype=np.int64)
                self.stop = np.ones(n, dtype=np.int64)
                self.n_sets = 1
                self.mem_all = np.concatenate(problem.memory, axis=0) if n else \
                    np.zeros((0, problem.n_devices))
            else:
                iv = problem.intervals
                times = interval_cliques(iv)
                live = iv[:, 1] > iv[:, 0]
                self.first = np.where(live, np.searchsorted(times, iv[:, 0]), 0)
                self.stop = np.maximum(np.where(live, np.searchsorted(times, iv[:, 1]), 0),
                                       self.first)
                self.n_sets = max(1, times.size)
        self.a: np.ndarray | None = None
        self.level: np.ndarray | None = None

    # ------------------------------------------------------------------ state
    def restrict(self, allowed: list[np.ndarray]) -> None:
        """Count the configurations outside ``allowed`` (per node, a mask) as bad entries, so
        that no move enters them (call before :meth:`set`)."""
        self.node_bad = [b | ~al for b, al in zip(self.node_bad, allowed)]

    def set(self, assignment: np.ndarray) -> None:
        """Start from ``assignment`` (levels and cached local costs recomputed)."""
        self.a = np.asarray(assignment, dtype=np.int64).copy()
        for v in range(self.n):
            self._refresh(v)
        if self.has_rows:
            d = self.p.n_devices
            delta = np.zeros((d, self.n_sets + 1))
            for v in range(self.n):
                f, s = self.first[v], self.stop[v]
                if s > f:
                    m = self.p.memory[v][self.a[v]]
                    delta[:, f] += m
                    delta[:, s] -= m
            self.level = np.cumsum(delta, axis=1)[:, :-1]

    def _refresh(self, v: int) -> None:
        bad = self.node_bad[v].astype(np.int64)
        cost = self.node_cost[v].copy()
        a = self.a
        for w, t in self.nbrs[v]:
            col = t[:, a[w]]
            b = _bad(col)
            bad += b
            cost += np.where(b, 0.0, col)
        s = self.offsets[v]
        self.bad_all[s:s + bad.size] = bad
        self.cost_all[s:s + bad.size] = cost

    def local(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Per configuration of ``v``: (bad entries, cost of the good ones), neighbours fixed."""
        s, e = self.offsets[v], self.offsets[v + 1]
        return self.bad_all[s:e], self.cost_all[s:e]

    def move(self, v: int, c: int) -> None:
        if self.has_rows and self.stop[v] > self.first[v]:
            m = self.p.memory[v]
            self.level[:, self.first[v]:self.stop[v]] += (m[c] - m[self.a[v]])[:, None]
        self.a[v] = c
        for w, _ in self.nbrs[v]:
            self._refresh(w)

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
        """Bad entries chosen by the current assignment."""
        a = self.a
        n_bad = sum(int(self.node_bad[v][a[v]]) for v in range(self.n))
        for (u, v), t in zip(self.p.edges, self.p.edge_costs):
            n_bad += int(_bad(t[a[u], a[v]]))
        return n_bad

    def over(self) -> bool:
        return self.has_rows and bool(np.any(self.level > self.budget[:, None]
                                             + self.tol[:, None]))

    # ------------------------------------------------------------------ phases
    def greedy(self, domains: list[np.ndarray] | None) -> np.ndarray:
        """Breadth-first greedy construction (see the module docstring)."""
        n = self.n
        a = np.full(n, -1, dtype=np.int64)
        placed = np.zeros(n, dtype=bool)
        degree = np.array([len(x) for x in self.nbrs])
        in_domain = None
        if domains is not None:
            in_domain = [np.zeros(k, dtype=bool) for k in self.sizes]
            for m, d in zip(in_domain, domains):
                m[d] = True
        for root in np.argsort(-degree, kind="stable"):
            if placed[root] or self.deadline.passed():
                continue
            queue = deque([int(root)])
            placed[root] = True
            while queue and not self.deadline.passed():
                v = queue.popleft()
                bad = self.node_bad[v].astype(np.int64)
                cost = self.node_cost[v].copy()
                for w, t in self.nbrs[v]:
                    if a[w] >= 0:
                        col = t[:, a[w]]
                        b = _bad(col)
                        bad += b
                        cost += np.where(b, 0.0, col)
                    elif in_domain is not None:
                        # forward check: keep configs that leave w a good partner
                        bad += ~((~_bad(t)) & in_domain[w][None, :]).any(axis=1)
                if in_domain is not None:
                    bad += ~in_domain[v]
                a[v] = int(np.lexsort((cost, bad))[0])
                for w, _ in self.nbrs[v]:
                    if not placed[w]:
                        placed[w] = True
                        queue.append(w)
        for v in np.nonzero(a < 0)[0]:         # out of time: least-cost configurations
            a[v] = int(np.lexsort((self.node_cost[v], self.node_bad[v]))[0])
        self.set(a)
        return self.a

    def repair_conflicts(self, max_rounds: int = 50) -> int:
        """Min-conflicts moves until no bad entry is chosen; returns the bad entries left."""
        left = self.bad_count()
        stall = 0
        for _ in range(max_rounds):
            if left == 0 or self.deadline.passed():
                break
            for v in self.rng.permutation(self.n):
                bad, cost = self.local(v)
                cur = self.a[v]
                if bad[cur] == 0:
                    continue
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

    def _repair_move_intervals(self, scale: np.ndarray) -> tuple[int, int]:
        hot = np.nonzero(np.any(self.level > self.budget[:, None] + self.tol[:, None],
                                axis=0))[0]
        lo, hi = int(hot.min()), int(hot.max())
        cand = np.nonzero((self.stop > lo) & (self.first <= hi) & (self.stop > self.first))[0]
        best = (math.inf, -1, -1)
        for v in cand:
            f, s = self.first[v], self.stop[v]
            m = self.p.memory[v]
            dm = m - m[self.a[v]]                                          # (K, D)
            lev = self.level[:, f:s]
            old = np.maximum(lev - self.budget[:, None], 0.0)
            new = np.maximum(lev[None] + dm[:, :, None] - self.budget[None, :, None], 0.0)
            saved = ((old[None] - new) * scale[None, :, None]).sum(axis=(1, 2))
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
            for v in range(self.n):
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
            tb = _bad(t)
            tc = np.where(tb, 0.0, t)
            # each end's local cost without this edge's term (the other end at its choice)
            col_u, col_w = t[:, cw], t[cu, :]
            bu0 = bu - _bad(col_u)
            ku0 = ku - np.where(_bad(col_u), 0.0, col_u)
            bw0 = bw - _bad(col_w)
            kw0 = kw - np.where(_bad(col_w), 0.0, col_w)
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


def _hard_domains(problem: Problem, deadline: Deadline) -> list[np.ndarray] | None:
    """Arc-consistent domains of good configurations, or ``None`` when one empties."""
    allowed = [~_bad(c) for c in problem.node_costs]
    if not all(al.any() for al in allowed):
        return None
    good = [~_bad(t) for t in problem.edge_costs]
    edges = [(int(u), int(v)) for u, v in problem.edges]
    inc: list[list[int]] = [[] for _ in range(problem.n_nodes)]
    for e, (u, v) in enumerate(edges):
        inc[u].append(e)
        inc[v].append(e)
    queue = deque(range(len(edges)))
    queued = np.ones(len(edges), dtype=bool)
    while queue:
        if deadline.passed():
            return None
        e = queue.popleft()
        queued[e] = False
        u, v = edges[e]
        g = good[e]
        for node, sup in ((u, (g & allowed[v][None, :]).any(axis=1)),
                          (v, (g & allowed[u][:, None]).any(axis=0))):
            new = allowed[node] & sup
            if new.sum() < allowed[node].sum():
                if not new.any():
                    return None
                allowed[node] = new
                for f in inc[node]:
                    if f != e and not queued[f]:
                        queued[f] = True
                        queue.append(f)
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
    ls = LocalSearch(problem, deadline, seed)
    stats: dict = {}
    if problem.n_nodes == 0:
        return np.zeros(0, dtype=np.int64), stats
    domains = _hard_domains(problem, deadline)
    stats["hard_domains"] = domains is not None
    best, best_key = None, (math.inf, math.inf)

    def finish() -> None:
        nonlocal best, best_key
        if ls.repair_memory():
            for _ in range(max_sweeps):
                ls.descend(max_sweeps)
                if not ls.descend_pairs() or deadline.passed():
                    break
        ev = problem.evaluate(ls.a)
        key = (ls.bad_count(), ev.cost)
        if ev.feasible and key < best_key:
            best, best_key = ls.a.copy(), key

    if start is not None:
        ls.set(problem.check_assignment(start))
    else:
        ls.greedy(domains)
    ls.repair_conflicts()
    finish()
    if best is None and problem.has_budget and not deadline.passed():
        # The least-memory assignment fits every row whenever anything does (memory is
        # separable); start from it (fewest bad entries first, then least cost).
        a = np.empty(problem.n_nodes, dtype=np.int64)
        for v in range(problem.n_nodes):
            m = problem.memory[v].sum(axis=1)
            a[v] = int(np.lexsort((ls.node_cost[v], m, ls.node_bad[v]))[0])
        ls.set(a)
        finish()
    stats["bad_entries"] = int(best_key[0]) if best is not None else None
    if best is None:
        logger.debug("incumbent: no feasible assignment found")
    return best, stats
