"""Per-node memory penalties for the interval memory model, and their bracket updates.

Memory becomes a soft term: node ``v`` at configuration ``k`` pays
``lam[v] * excess[v][k]``, where ``excess[v][k]`` is its memory above its least memory,
summed over devices in units of each device's budget. A node whose every live set fits even
when every node in it takes its largest memory can never overflow: it gets no weight. Each
round's answer narrows each node's bracket ``[lo, hi]``: a node live in an overflowing set
needs a larger weight (``lo`` rises), and when the whole answer fits every node's weight may
fall (``hi`` drops). The next weight is the geometric middle of the bracket, or a step by
:data:`GROW` towards the open side.

May import: ``problem``, ``solvers.memory``.
"""

from __future__ import annotations

import math

import numpy as np

from ...problem import MEMORY_RTOL, Problem
from ..memory import interval_cliques

__all__ = ["Weights", "GROW", "SHRINK"]

#: Factor a weight grows by while its bracket has no upper end.
GROW = 4.0
#: Factor a weight shrinks by while its bracket has no lower end.
SHRINK = 0.5


class Weights:
    """The memory profile of one interval-budget problem and its per-node weights.

    Parameters
    ----------
    problem : Problem
        With a budget and intervals.
    start : float
        The first weight of every node that can overflow (cost per budget of excess).
    """

    def __init__(self, problem: Problem, start: float):
        self.p = problem
        n = problem.n_nodes
        self.budget = problem.memory_limit * (1 + MEMORY_RTOL)                 # (D,)
        scale = 1.0 / np.maximum(self.budget, 1e-300)
        self.excess = [((m - m.min(axis=0)) * scale).sum(axis=1) for m in problem.memory]
        iv = problem.intervals
        times = interval_cliques(iv)
        self.n_sets = max(1, times.size)
        live = iv[:, 1] > iv[:, 0]
        self.first = np.where(live, np.searchsorted(times, iv[:, 0]), 0)
        self.stop = np.maximum(np.where(live, np.searchsorted(times, iv[:, 1]), 0),
                               self.first)
        self.live = self.stop > self.first
        most = np.stack([m.max(axis=0) for m in problem.memory]) if n else \
            np.zeros((0, problem.n_devices))
        top = self.levels_of(most)                                              # (D, T)
        hot = (top > self.budget[:, None]).any(axis=0)
        ch = np.concatenate([[0], np.cumsum(hot)])
        vary = np.array([e.max() > 0 for e in self.excess], dtype=bool)
        #: nodes that could ever be in an overflowing set and whose memory varies
        self.risky = self.live & vary & (ch[self.stop] > ch[self.first])
        self.lam = np.where(self.risky, float(start), 0.0)
        self.lo = np.zeros(n)
        self.hi = np.full(n, math.inf)

    def levels_of(self, mem: np.ndarray) -> np.ndarray:
        """``(D, T)`` usage of every live set when node ``v`` uses ``mem[v]`` (``(n, D)``)."""
        delta = np.zeros((self.n_sets + 1, self.p.n_devices))
        np.add.at(delta, self.first[self.live], mem[self.live])
        np.add.at(delta, self.stop[self.live], -mem[self.live])
        return np.cumsum(delta, axis=0)[:-1].T

    def levels(self, assignment: np.ndarray) -> np.ndarray:
        mem = np.stack([m[k] for m, k in zip(self.p.memory, assignment.tolist())]) \
            if self.p.n_nodes else np.zeros((0, self.p.n_devices))
        return self.levels_of(mem)

    def overflowed(self, assignment: np.ndarray) -> np.ndarray:
        """Per node: is it live in a set that overflows under ``assignment``?"""
        hot = (self.levels(assignment) > self.budget[:, None]).any(axis=0)
        ch = np.concatenate([[0], np.cumsum(hot)])
        return self.live & (ch[self.stop] > ch[self.first])

    def update(self, assignment: np.ndarray) -> bool:
        """Narrow the brackets after one round's answer; ``True`` when it fitted."""
        over = self.overflowed(assignment) & self.risky
        fits = not over.any()
        lam = self.lam
        if fits:
            down = self.risky
            self.hi[down] = np.minimum(self.hi[down], lam[down])
        else:
            down = np.zeros_like(over)
            self.lo[over] = np.maximum(self.lo[over], lam[over])
            # a bracket the interactions contradicted opens again above
            bad = over & (self.hi <= self.lo * (1 + 1e-9))
            self.hi[bad] = math.inf
        moved = over | down
        lo, hi = self.lo[moved], self.hi[moved]
        mid = np.where(np.isfinite(hi) & (lo > 0), np.sqrt(lo * np.where(np.isfinite(hi), hi,
                                                                          1.0)),
                       np.where(np.isfinite(hi), hi * SHRINK, np.maximum(lo, lam[moved])
                                * GROW))
        self.lam[moved] = mid
        return fits

    def unary(self, v: int) -> np.ndarray:
        """Node ``v``'s penalty per configuration."""
        return self.lam[v] * self.excess[v]
