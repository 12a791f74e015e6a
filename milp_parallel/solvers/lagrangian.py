"""A certified lower bound for the interval memory model: Lagrange multipliers per clique.

The interval model (IOPDDL's, DESIGN.md section 2) asks, at every time ``t`` and device
``d``, that the nodes live at ``t`` (``a_v <= t < b_v``) fit:
``sum_{v live at t} m_d(v, x_v) <= M_d``. Dual ascent on the *unconstrained* problem
(:class:`~milp_parallel.solvers.dual.DualAscent`) ignores these rows and its bound is far
below the constrained optimum when memory binds. This module prices the rows in.

**Rows.** Each node's usage splits into its least usage ``base_d(v)`` over the
configurations it can take and its *excess* ``m_d(v, .) - base_d(v) >= 0``. With
nonnegative usage, every time's live set is contained in a maximal one
(:func:`~milp_parallel.solvers.memory.interval_cliques`), so the maximal live sets carry
every row. Consecutive maximal sets whose *varying* members (nodes with a nonzero excess) are
the same become one row, ``sum_{v in C} excess_d(v, x_v) <= slack_r``, whose slack is the
budget minus the largest sum of ``base_d`` over those times; sets without varying members
are only checked (a negative slack there proves the budget infeasible). A row set that
misses some rows is a relaxation, so the bound stays valid whatever the usage's sign.

**Bound.** For multipliers ``mu_r >= 0`` the node costs become
``theta_v + (sum_{r covers v} mu_r) excess(v, .)``, and

    ``L(mu) = LB_MPLP(theta + A^T mu) - mu . slack``

bounds the cost of every assignment that fits (weak duality: such an assignment's
Lagrangian cost is at most its cost, and the MPLP value is a lower bound of the Lagrangian
problem for *any* messages). With the messages fixed, ``L`` is concave in ``mu`` and
``usage(x*) - slack`` is a supergradient, ``x*`` the per-node argmin of the beliefs. The
multipliers follow projected supergradient steps of Polyak's size towards a target (the
best known feasible cost when given, which the dual optimum never exceeds), the target's
distance halving whenever the bound stalls; the messages are kept between iterations
(:meth:`DualAscent.set_unary`) and a few MPLP sweeps run after each step. The best ``L``
seen is returned, so the answer is never below the unconstrained bound at ``mu = 0``,
which is computed first.

**Contractions.** On a contraction (:mod:`~milp_parallel.solvers.contract`, or the
penalty backend's identity stand-in) a node's excess is a cost on its group's states,
``term[group[v]] += excess_v[maps[v]]``, exactly as the penalty backend adds its penalty
unaries; the bound then covers every assignment of the original that the contraction
keeps (every one below its ``upper``).

**Forbidden entries.** ``inf`` and IOPDDL's ``1e18`` entries are capped
(:func:`~milp_parallel.solvers.dual.capped`) at ``upper`` when it is finite, else at a cost
above every assignment that uses no forbidden entry: lowering costs keeps the bound valid.

**Infeasible budgets.** Memory is separable, so the budget admits no assignment exactly
when some row's slack is negative (every node at its least usage overflows it); then the
dual is unbounded and the bound is ``+inf`` with ``infeasible=True``.

May import: ``problem``, ``solvers.options``, ``solvers.memory``, ``solvers.dual``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..problem import MEMORY_RTOL, Problem
from .dual import DualAscent, capped
from .memory import interval_cliques
from .options import Deadline

__all__ = ["LagrangianIntervalBound", "IntervalRows", "interval_rows",
           "interval_lagrangian_bound"]

logger = logging.getLogger(__name__)

#: Factor the Polyak target's distance grows by after a step that raised the bound.
GROW = 1.5
#: Excess (relative to the device's budget) below which a node counts as constant.
EXCESS_RTOL = 1e-12


@dataclass(frozen=True)
class IntervalRows:
    """The memory rows of an interval budget over the nodes' excess usage.

    Attributes
    ----------
    device : numpy.ndarray
        ``(R,)`` each row's device.
    time : numpy.ndarray
        ``(R,)`` a time of each row (the one of largest constant usage).
    slack : numpy.ndarray
        ``(R,)`` the budget minus the constant usage there.
    pair_node, pair_first, pair_stop : numpy.ndarray
        ``(P,)`` per (varying node, device) pair: the node and the rows ``[first, stop)``
        it covers (rows are sorted by device, then time).
    infeasible : bool
        Whether a live set overflows even with every node at its least usage.
    """

    device: np.ndarray
    time: np.ndarray
    slack: np.ndarray
    pair_node: np.ndarray
    pair_first: np.ndarray
    pair_stop: np.ndarray
    infeasible: bool

    @property
    def n_rows(self) -> int:
        return int(self.slack.size)


def interval_rows(intervals: np.ndarray, base: np.ndarray, varying: np.ndarray,
                  budget: np.ndarray) -> IntervalRows:
    """The rows of the module docstring ("Rows").

    Parameters
    ----------
    intervals : numpy.ndarray
        ``(n, 2)`` half-open live intervals.
    base : numpy.ndarray
        ``(n, D)`` each node's least usage per device.
    varying : numpy.ndarray
        ``(n, D)`` bool: whether the node's usage on the device varies.
    budget : numpy.ndarray
        ``(D,)`` the budgets (tolerance included).

    Returns
    -------
    IntervalRows

    Examples
    --------
    >>> iv = np.array([[0, 2], [1, 3], [2, 4]])
    >>> r = interval_rows(iv, np.array([[1.0], [1.0], [5.0]]),
    ...                   np.array([[True], [True], [False]]), np.array([10.0]))
    >>> r.time.tolist(), r.slack.tolist(), r.pair_first.tolist(), r.pair_stop.tolist()
    ([1, 2], [8.0, 4.0], [0, 0], [1, 2])
    """
    iv = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
    n, n_dev = base.shape
    live = iv[:, 1] > iv[:, 0]
    times = interval_cliques(iv)
    devs, tms, slacks, p_node, p_first, p_stop = [], [], [], [], [], []
    infeasible = False
    offset = 0
    for d in range(n_dev):
        if not times.size:
            break
        # constant usage at each maximal set's time
        s = np.searchsorted(times, iv[live, 0], side="left")
        e = np.searchsorted(times, iv[live, 1], side="left")
        delta = np.zeros(times.size + 1)
        np.add.at(delta, s, base[live, d])
        np.add.at(delta, e, -base[live, d])
        const = np.cumsum(delta)[:-1]
        if np.any(const > budget[d]):
            infeasible = True
        vary = live & varying[:, d]
        va, vb = np.sort(iv[vary, 0]), np.sort(iv[vary, 1])
        starts = np.searchsorted(va, times, side="right")          # varying starts <= t
        ends = np.searchsorted(vb, times, side="right")            # varying ends <= t
        count = starts - ends                                      # varying nodes live
        new = np.ones(times.size, dtype=bool)
        new[1:] = (starts[1:] != starts[:-1]) | (ends[1:] != ends[:-1])
        seg = np.cumsum(new) - 1                                   # same varying set
        keep = count > 0
        if not keep.any():
            continue
        order = np.lexsort((-const, seg))                          # per segment, most first
        head = order[np.concatenate([[True], seg[order][1:] != seg[order][:-1]])]
        head = head[keep[head]]
        t_d = times[head]
        devs.append(np.full(head.size, d, dtype=np.int64))
        tms.append(t_d)
        slacks.append(budget[d] - const[head])
        nodes = np.flatnonzero(vary)
        p_node.append(nodes)
        p_first.append(offset + np.searchsorted(t_d, iv[nodes, 0], side="left"))
        p_stop.append(offset + np.searchsorted(t_d, iv[nodes, 1], side="left"))
        offset += head.size

    def cat(parts: list, dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    first, stop = cat(p_first, np.int64), cat(p_stop, np.int64)
    nodes = cat(p_node, np.int64)
    cover = stop > first
    return IntervalRows(cat(devs, np.int64), cat(tms, np.int64), cat(slacks, np.float64),
                        nodes[cover], first[cover], stop[cover], infeasible)


@dataclass(frozen=True)
class LagrangianIntervalBound:
    """What :func:`interval_lagrangian_bound` found.

    Attributes
    ----------
    bound : float
        A lower bound on the cost of every assignment that fits (``+inf`` when none does,
        ``-inf`` when nothing could be computed).
    unconstrained : float
        The dual ascent bound at ``mu = 0`` (the memory-blind bound).
    multipliers : numpy.ndarray
        ``(R,)`` the multipliers of the best bound.
    rows : IntervalRows
        The rows they price.
    iterations : int
        Multiplier updates.
    rounds : int
        Rounds (updates for fixed messages, then sweeps).
    sweeps : int
        MPLP sweeps in all.
    infeasible : bool
        Whether the budget admits no assignment (then ``bound`` is ``+inf``).
    seconds : float
        Wall-clock time.
    history : tuple of float
        ``L(mu)`` per iteration.
    """

    bound: float
    unconstrained: float
    multipliers: np.ndarray
    rows: IntervalRows
    iterations: int
    rounds: int
    sweeps: int
    infeasible: bool
    seconds: float
    history: tuple = field(default=(), repr=False)

    def stats(self) -> dict[str, Any]:
        """A small summary for :attr:`SolveResult.stats` (key ``"lagrangian"``)."""
        return {"bound": float(self.bound), "unconstrained": float(self.unconstrained),
                "rows": self.rows.n_rows, "priced_rows": int(np.count_nonzero(
                    self.multipliers > 0)), "iterations": self.iterations,
                "rounds": self.rounds, "sweeps": self.sweeps, "infeasible": self.infeasible,
                "seconds": round(self.seconds, 3)}


class _IdentityContraction:
    """Every node its own group (the contraction interface of the penalty backend)."""

    def __init__(self, problem: Problem):
        self.group = np.arange(problem.n_nodes)
        self.maps = [np.arange(k) for k in problem.n_configs]
        self.node_costs = [np.asarray(c, dtype=np.float64) for c in problem.node_costs]
        self.edges = np.asarray(problem.edges, dtype=np.int64).reshape(-1, 2)
        self.edge_costs = list(problem.edge_costs)


def _default_cap(node_costs: Sequence[np.ndarray], edge_costs: Sequence[np.ndarray],
                 forbidden: float) -> float:
    """A cost above every assignment that uses no forbidden entry (and at least 1)."""
    total = 0.0
    for t in list(node_costs) + list(edge_costs):
        ok = t[np.isfinite(t) & (t < forbidden)]
        if ok.size:
            total += max(0.0, float(ok.max()))
    return 2.0 * total + 1.0


def interval_lagrangian_bound(problem: Problem, *, contraction: Any = None,
                              deadline: Deadline | None = None, upper: float = math.inf,
                              max_rounds: int = 50, inner_iterations: int = 300,
                              first_sweeps: int = 100, first_share: float = 0.4,
                              sweeps_per_round: int = 4, patience: int = 3,
                              cap: float | None = None) -> LagrangianIntervalBound:
    """The Lagrangian bound of the module docstring.

    Parameters
    ----------
    problem : Problem
        With a budget and intervals (without them the result is the unconstrained bound).
    contraction : object, optional
        ``group``, ``maps``, ``node_costs``, ``edges``, ``edge_costs`` as in
        :class:`~milp_parallel.solvers.contract.Contraction` over ``problem``; default:
        every node its own group.
    deadline : Deadline, optional
        Checked between sweeps and iterations; the best bound so far is returned.
    upper : float
        The cost of a known assignment that fits (the steps' target and the cap), or
        ``inf``.
    max_rounds : int
        Rounds at most (multiplier updates for fixed messages, then MPLP sweeps).
    inner_iterations : int
        Multiplier updates at most per round.
    first_sweeps : int
        MPLP sweeps at most at ``mu = 0``.
    first_share : float
        The share of the time left that the sweeps at ``mu = 0`` may use.
    sweeps_per_round : int
        MPLP sweeps after each round's updates.
    patience : int
        Iterations without a better bound before the target's distance halves.
    cap : float, optional
        Entries above it (``inf`` included) are lowered to it; default ``upper`` when
        finite, else a cost above every assignment without a forbidden entry.

    Returns
    -------
    LagrangianIntervalBound

    Examples
    --------
    Two nodes live together; the cheap configurations do not fit together.

    >>> p = Problem([np.array([0.0, 10.0]), np.array([0.0, 10.0])], [], [],
    ...             memory=[np.array([2.0, 1.0]), np.array([2.0, 1.0])], memory_limit=3.0,
    ...             intervals=[[0, 2], [0, 2]])
    >>> r = interval_lagrangian_bound(p)
    >>> r.unconstrained, round(r.bound, 6)
    (0.0, 10.0)
    """
    t0 = time.perf_counter()
    con = _IdentityContraction(problem) if contraction is None else contraction
    node_costs = [np.asarray(c, dtype=np.float64) for c in con.node_costs]
    edge_costs = [np.asarray(t, dtype=np.float64) for t in con.edge_costs]
    if cap is None:
        cap = _default_cap(node_costs, edge_costs, problem.forbidden_cost)
        if math.isfinite(upper):
            cap = min(cap, float(upper))
    theta = [capped(c, cap) for c in node_costs]
    tables = [capped(t, cap) for t in edge_costs]
    k = np.array([c.size for c in theta], dtype=np.int64)
    empty_rows = IntervalRows(*(np.zeros(0, dtype=t) for t in (np.int64, np.int64, float,
                                                               np.int64, np.int64,
                                                               np.int64)), False)

    def done(bound: float, unc: float, mu: np.ndarray, rows: IntervalRows, it: int,
             sweeps: int, infeasible: bool, hist: Sequence[float],
             rounds: int = 0) -> LagrangianIntervalBound:
        return LagrangianIntervalBound(float(bound), float(unc), mu, rows, it, rounds, sweeps,
                                       infeasible, time.perf_counter() - t0, tuple(hist))

    if any(c.size == 0 for c in theta):
        return done(math.inf, math.inf, np.zeros(0), empty_rows, 0, 0, True, ())
    # ---- rows over each node's excess on its group's states
    rows, pairs = empty_rows, None
    if problem.has_budget and problem.intervals is not None and problem.n_nodes:
        budget = problem.memory_limit * (1 + MEMORY_RTOL)
        use = [np.asarray(m, dtype=np.float64)[np.asarray(f, dtype=np.int64)]
               for m, f in zip(problem.memory, con.maps)]                # (K_g, D) per node
        base = np.stack([u.min(axis=0) for u in use])                     # (n, D)
        tol = EXCESS_RTOL * np.maximum(budget, 1e-300)
        varying = np.stack([(u.max(axis=0) - u.min(axis=0)) > tol for u in use])
        rows = interval_rows(problem.intervals, base, varying, budget)
        if rows.infeasible:
            logger.info("lagrangian: a live set overflows at every node's least memory")
            return done(math.inf, -math.inf, np.zeros(rows.n_rows), rows, 0, 0, True, ())
        pairs = _Pairs(rows, use, base, con.group, k)
    dual = DualAscent(theta, con.edges, tables)
    left = None if deadline is None else deadline.left()
    unc = float(dual.run(sweeps=first_sweeps, deadline=None if left is None else
                         Deadline(first_share * left)))
    mu = np.zeros(rows.n_rows)
    if pairs is None or rows.n_rows == 0:
        return done(unc, unc, mu, rows, 0, dual.sweeps, False, (unc,))
    best, best_mu = unc, mu.copy()
    hist = [unc]
    theta_flat = np.concatenate(theta)
    dist = 0.05 * abs(best) + 1.0
    it = rounds = 0

    def passed() -> bool:
        return deadline is not None and deadline.passed()

    while rounds < max_rounds and not passed():
        # (a) the multipliers for the current messages: L is concave in mu, evaluated in
        # O(states) from the messages' sums into each state and the edge terms' minima
        msg = np.concatenate(dual.belief) - np.concatenate(dual.theta)
        fixed = theta_flat + msg
        edge_part = math.fsum(float(dual.edge_term(e).min()) for e in range(len(tables)))
        value, g = pairs.evaluate(fixed, mu)
        value += edge_part
        r_best, r_mu, stall = value, mu, 0
        for _ in range(inner_iterations):
            if passed() or not (np.any(g > 0) or np.any((g < 0) & (mu > 0))):
                break                   # complementary slackness: no ascent direction
            gg = float(g @ g)
            target = r_best + dist
            if math.isfinite(upper):
                target = min(target, upper)
            if gg <= 0 or target <= value:
                break
            mu = np.maximum(mu + (target - value) / gg * g, 0.0)
            value, g = pairs.evaluate(fixed, mu)
            value += edge_part
            it += 1
            hist.append(value)
            if value > r_best + 1e-12 * abs(r_best):
                r_best, r_mu, stall = value, mu, 0
                dist *= GROW
            else:
                stall += 1
                if stall >= patience:
                    dist *= 0.5
                    stall = 0
                    if dist < 1e-7 * max(abs(r_best), 1e-300):
                        break
        best_before = best
        if r_best > best:
            best, best_mu = r_best, r_mu.copy()
        # (b) MPLP sweeps at the round's best multipliers (the bound never falls there)
        mu = r_mu
        dual.set_unary(pairs.unary(theta, mu))
        for _ in range(sweeps_per_round):
            if passed():
                break
            dual.sweep()
        value = dual.bound() - float(mu @ rows.slack)
        hist.append(value)
        if value > best:
            best, best_mu = value, mu.copy()
        rounds += 1
        dist = max(dist, 0.01 * abs(best))
        if math.isfinite(upper) and best >= upper * (1 - 1e-9):
            break
        if best <= best_before + 1e-9 * abs(best_before):
            break                       # a round gained nothing: converged
    logger.debug("lagrangian: %d rows, %d iterations, bound %.6g (unconstrained %.6g)",
                 rows.n_rows, it, best, unc)
    return done(best, unc, best_mu, rows, it, dual.sweeps, False, hist, rounds)


class _Pairs:
    """The (varying node, device) pairs as flat arrays over the groups' states."""

    def __init__(self, rows: IntervalRows, use: list, base: np.ndarray,
                 group: np.ndarray, k: np.ndarray):
        self.rows = rows
        self.offsets = np.concatenate([[0], np.cumsum(k)])
        self.n_states = int(self.offsets[-1])
        group = np.asarray(group, dtype=np.int64)
        dev = rows.device
        p_dev = dev[rows.pair_first] if rows.pair_first.size else np.zeros(0, np.int64)
        vals = [use[v][:, d] - base[v, d] for v, d in zip(rows.pair_node.tolist(),
                                                           p_dev.tolist())]
        sizes = np.array([x.size for x in vals], dtype=np.int64)
        self.start = np.concatenate([[0], np.cumsum(sizes)])[:-1]     # per pair, in val
        self.val = np.concatenate(vals) if vals else np.zeros(0)
        pg = group[rows.pair_node]
        self.pair_group = pg
        self.owner = np.repeat(np.arange(sizes.size), sizes)
        self.idx = np.repeat(self.offsets[pg], sizes) + (
            np.arange(self.val.size) - np.repeat(self.start, sizes))

    def coef(self, mu: np.ndarray) -> np.ndarray:
        """Per pair, the sum of the multipliers of the rows it covers."""
        c = np.concatenate([[0.0], np.cumsum(mu)])
        return c[self.rows.pair_stop] - c[self.rows.pair_first]

    def term(self, mu: np.ndarray) -> np.ndarray:
        """The flat multiplier term over all states."""
        return np.bincount(self.idx, weights=self.val * self.coef(mu)[self.owner],
                           minlength=self.n_states)

    def unary(self, theta: list, mu: np.ndarray) -> list:
        term = self.term(mu)
        return [t + term[a:b] for t, a, b in zip(theta, self.offsets[:-1].tolist(),
                                                 self.offsets[1:].tolist())]

    def evaluate(self, fixed: np.ndarray, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """``(sum_g min b_g - mu . slack, supergradient)`` for the beliefs ``fixed + term``."""
        flat = fixed + self.term(mu)
        lo = np.minimum.reduceat(flat, self.offsets[:-1])
        value = math.fsum(lo.tolist()) - float(mu @ self.rows.slack)
        return value, self.usage(flat, lo) - self.rows.slack

    def usage(self, flat: np.ndarray, lo: np.ndarray | None = None) -> np.ndarray:
        """Per row, the excess the per-group argmin of the flat beliefs uses."""
        if lo is None:
            lo = np.minimum.reduceat(flat, self.offsets[:-1])
        hit = np.flatnonzero(flat <= np.repeat(lo, np.diff(self.offsets)))
        state = hit[np.searchsorted(hit, self.offsets[:-1])] - self.offsets[:-1]
        u = self.val[self.start + state[self.pair_group]] if self.val.size else np.zeros(0)
        delta = np.zeros(self.rows.n_rows + 1)
        np.add.at(delta, self.rows.pair_first, u)
        np.add.at(delta, self.rows.pair_stop, -u)
        return np.cumsum(delta)[:-1]
