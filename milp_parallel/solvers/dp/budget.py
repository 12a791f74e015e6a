"""Memory budgets in the exact search: Lagrangian relaxation and branch-and-bound.

Exact for the *all-live* model (no intervals; memory ``(K_v, D)`` per node, additive, one
budget per device). For multipliers ``lambda >= 0`` the engine minimises
``cost + lambda . memory``, which gives the lower bound ``L(lambda) = DP(lambda) -
lambda . budget``; the multipliers are raised by subgradient steps (several binding devices)
or by cutting planes on the concave one-dimensional dual (one device); a relaxed solution
within the budget is an incumbent; subproblems branch on one node's configuration (forbid it
/ fix it) until every open bound meets the incumbent. The status is ``optimal`` only when
that proof completes. Three things make the search small:

- *reduced-cost fixing*: at each branch-and-bound node's multipliers, one upward and one
  downward pass over the elimination steps give every min-marginal ``m_v(c)`` (the Lagrangian
  bound with ``a_v = c`` forced; :meth:`~.engine.Engine.min_marginals`); a configuration with
  ``m_v(c) - lambda . budget`` at or above the incumbent is forbidden below that node, then
  the bound is recomputed on what is left (a few rounds);
- *incumbents early*: every relaxed solution is offered, and repaired / improved by a greedy
  1-swap local search (least cost per memory saved, then cost-decreasing swaps that fit);
- *fewer multipliers*: a device whose budget no assignment can exceed, or whose memory
  column (scaled by its budget) another device's dominates entrywise, is implied and left out
  of the relaxation (zoo problems: configurations use the first devices, so usually only
  device 0 remains and the exact one-dimensional dual search applies).

A budget that no assignment meets gives ``infeasible``, with the least memory any assignment
needs per device in the stats (``least_memory``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...errors import InvalidOptionError, UnsupportedProblemError
from ...problem import MEMORY_RTOL, Problem
from ..options import Deadline
from ..result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Progress, SolveResult
from .engine import DEFAULT_MAX_TABLE_SIZE, Engine, OutOfTime

__all__ = ["BudgetSearch", "LagrangianBound", "dp_lower_bound", "INTERVAL_MESSAGE"]


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
        raise UnsupportedProblemError(INTERVAL_MESSAGE)
    eng = Engine(problem, eliminations=eliminations, max_table_size=max_table_size)
    if not problem.has_budget:
        val, a = eng.run(problem.node_costs)
        mem = _memory_of(problem, a) if problem.memory is not None else None
        return LagrangianBound(val, a, problem.evaluate(a).cost, mem, math.isfinite(val))
    d = problem.n_devices
    lam = np.zeros(d) if multipliers is None else np.broadcast_to(
        np.asarray(multipliers, dtype=np.float64), (d,)).copy()
    if np.any(lam < 0) or not np.all(np.isfinite(lam)):
        raise InvalidOptionError(f"multipliers must be finite and >= 0, got {lam}")
    budget = problem.memory_limit * (1 + MEMORY_RTOL)
    val, a = eng.run([c + m @ lam for c, m in zip(problem.node_costs, problem.memory)])
    mem = _memory_of(problem, a)
    ev = problem.evaluate(a)
    return LagrangianBound(val - float(lam @ budget), a, ev.cost, mem, ev.feasible)


INTERVAL_MESSAGE = ("the dp solver takes a memory budget over liveness intervals only when "
                    "every live set and edge spans few consecutive nodes "
                    "(milp_parallel.solvers.dp.window); for this problem use a MILP solver "
                    "(solver='highs', 'cbc' or 'cpsat'), or drop the budget with "
                    "problem.with_memory_limit(None)")


class BudgetSearch:
    """Lagrangian relaxation + best-first branch-and-bound for the all-live budget.

    Besides the bound, each branch-and-bound node uses its multipliers for *reduced-cost
    fixing*: a configuration whose min-marginal ``m_v(c) - lambda . budget`` (the Lagrangian
    bound with ``a_v = c`` forced) already reaches the incumbent cannot be in a better
    assignment, so it is forbidden in that node and all below it. A greedy 1-swap local search
    repairs and improves the relaxed solutions for early incumbents. Devices whose budget no
    assignment can exceed, and devices whose (budget-scaled) memory column another device's
    dominates, are left out of the relaxation: their constraints are implied.

    ``solve_sub(problem, seconds) -> SolveResult`` solves the merged sub-problem exactly
    (the backend hands in its own solve, without merging, so that this module does not
    import the backend); without it there is no solution merging.
    """

    def __init__(self, problem: Problem, eng: Engine, *, gap: float, deadline: Deadline,
                 max_branch_nodes: int, root_iterations: int, node_iterations: int,
                 fixing: bool = True, merge_seconds: float = 0.0, callback=None,
                 root_only: bool = False,
                 solve_sub: Callable[[Problem, float], SolveResult] | None = None):
        self.p = problem
        self.solve_sub = solve_sub
        self.eng = eng
        self.gap = gap
        self.deadline = deadline
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
        self.pool: dict[bytes, np.ndarray] = {}      # distinct relaxed solutions
        self.max_pool = 64
        self.merge_seconds = merge_seconds
        self.merges = 0
        self.callback = callback
        self.global_bound = -math.inf
        self.root_only = root_only
        self.root_allowed: list | None = None      # configurations left after root fixing
        self.root_level = math.inf                 # the prune level they were fixed against
        self.root_lam = np.zeros(0)
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
        least, argmins = [], []
        if all(np.isfinite(t).all() for t in self.eng.tables.values()):
            # no forbidden pair: memory is separable, each node takes its least-memory
            # configuration of finite cost, per device (no DP run needed)
            masked = [np.where(np.isfinite(c)[:, None], m, np.inf)
                      for c, m in zip(self.cost, self.p.memory)]
            arg = np.stack([m.argmin(axis=0) for m in masked]) if masked else \
                np.zeros((0, self.p.n_devices), dtype=np.int64)             # (n, D)
            least = np.sum([m.min(axis=0) for m in masked], axis=0)
            argmins = [np.ascontiguousarray(arg[:, d]) for d in range(self.p.n_devices)]
            seen = set()
            argmins = [a for a in argmins if not (a.tobytes() in seen or seen.add(a.tobytes()))]
            if self.p.n_devices > 1:
                scale = 1.0 / np.maximum(self.budget_full, 1e-300)
                argmins.append(np.array([int(np.argmin(m @ scale)) for m in masked],
                                        dtype=np.int64))
            return np.asarray(least, dtype=float), argmins
        tabs = {key: np.where(np.isfinite(t), 0.0, np.inf) for key, t in self.eng.tables.items()}
        for d in range(self.p.n_devices):
            un = [np.where(np.isfinite(c), m[:, d], np.inf)
                  for c, m in zip(self.cost, self.p.memory)]
            val, a = self.eng.run(un, tabs, deadline=self.deadline)
            self.dp_runs += 1
            least.append(val)
            argmins.append(a)
        if self.p.n_devices > 1:
            # A heuristic incumbent for several devices: memory relative to each budget.
            scale = 1.0 / np.maximum(self.budget_full, 1e-300)
            un = [np.where(np.isfinite(c), m @ scale, np.inf)
                  for c, m in zip(self.cost, self.p.memory)]
            argmins.append(self.eng.run(un, tabs, deadline=self.deadline)[1])
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
            self.report()

    def report(self) -> None:
        """Tell the ``callback`` the incumbent's cost and the proved bound."""
        if self.callback is not None:
            self.callback(Progress("dp", self.deadline.elapsed(), self.best_f,
                                   min(self.global_bound, self.best_f)))

    def tol(self) -> float:
        return 1e-10 * abs(self.best_f) if math.isfinite(self.best_f) else 0.0

    def prune_level(self) -> float:
        if not math.isfinite(self.best_f):
            return math.inf
        return self.best_f - self.tol() - self.gap * abs(self.best_f)

    def out_of_time(self) -> bool:
        return self.deadline.passed()

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
            if self.out_of_time():
                break
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
        val, a = self.eng.run(self.unary(allowed, lam), deadline=self.deadline)
        self.dp_runs += 1
        self.lagrangian_iterations += 1
        if not math.isfinite(val):
            return None
        self.offer(a)
        if len(self.pool) < self.max_pool:
            self.pool.setdefault(a.tobytes(), a.copy())
        return (val - float(lam @ self.budget), a, self.p.evaluate(a).cost,
                self.mem_of(a) - self.budget)

    def merge(self, seconds: float) -> None:
        """Solution merging: solve the budgeted problem restricted to the configurations of
        the relaxed solutions seen so far and of the incumbent, exactly, by a nested search
        (without merging), and offer its answer.

        The relaxations at different multipliers settle different parts of the network
        differently; the best budgeted plan often combines them segment by segment, which
        single swaps cannot reach.
        """
        if self.solve_sub is None:
            return
        sols = list(self.pool.values()) + ([self.best_a] if self.best_a is not None else [])
        if len(sols) < 2:
            return
        keep = [np.unique([a[v] for a in sols]) for v in range(self.p.n_nodes)]
        if all(k.size == 1 for k in keep):
            return
        p = self.p
        sub = Problem([c[k] for c, k in zip(p.node_costs, keep)], p.edges,
                      [t[np.ix_(keep[int(u)], keep[int(w)])]
                       for (u, w), t in zip(p.edges, p.edge_costs)],
                      memory=[m[k] for m, k in zip(p.memory, keep)],
                      memory_limit=p.memory_limit, forbidden_cost=p.forbidden_cost)
        left = self.deadline.left()
        seconds = seconds if left is None else min(seconds, left)
        if seconds <= 0:
            return
        self.merges += 1
        r = self.solve_sub(sub, seconds)
        if r.assignment is not None:
            a = np.array([k[i] for k, i in zip(keep, r.assignment)], dtype=np.int64)
            self.offer(a)
            self.local_search(a, [np.isfinite(c) for c in p.node_costs])

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
        res = self.eng.min_marginals(self.unary(allowed, lam), deadline=self.deadline)
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
            try:
                val, a = self.eng.run(self.unary(allowed0, np.zeros(0)),
                                      deadline=self.deadline)
            except OutOfTime:
                return (FEASIBLE if self.best_a is not None else UNKNOWN), -math.inf, 0
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
            if pb > self.global_bound:        # best-first: the smallest open bound
                self.global_bound = min(pb, lowest_pruned)
                self.report()
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
            try:
                bound, lam, a = self.process(allowed, lam, iters, n_nodes)
            except OutOfTime:
                heapq.heappush(heap, (pb, 0, packed, lam))
                bound = min(min(h[0] for h in heap), lowest_pruned, self.best_f)
                return (FEASIBLE if self.best_a is not None else UNKNOWN), bound, n_nodes
            bound = max(bound, pb)
            if n_nodes == 1:
                self.root_allowed = [al.copy() for al in allowed]
                self.root_level = self.prune_level()
                self.root_lam = np.asarray(lam, dtype=float).copy()
                if self.root_only and a is not None and bound < self.prune_level():
                    return FEASIBLE, min(bound, self.best_f), 1
            if n_nodes in (1, 20, 200) and self.merge_seconds > 0:
                try:
                    self.merge(self.merge_seconds)
                except OutOfTime:
                    pass
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
