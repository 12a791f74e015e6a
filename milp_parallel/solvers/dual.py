"""Dual ascent on the LP relaxation of the MILP: lower bounds, reduced costs, a rounding.

The MILP's LP relaxation over the one-hot ``x`` and the edge variables ``y`` (the local
polytope, DESIGN.md section 2) has a dual whose variables are one message per edge end,
``lambda_{e->u}(c_u)``. For any messages, with the *beliefs* and *edge terms*

    ``b_v(c) = theta_v(c) + sum_{e at v} lambda_{e->v}(c)``,
    ``r_e(c_u, c_w) = theta_e(c_u, c_w) - lambda_{e->u}(c_u) - lambda_{e->w}(c_w)``,

every assignment's cost is ``sum_v b_v(a_v) + sum_e r_e(a_u, a_w)`` exactly (the messages
cancel), so

    ``LB = sum_v min b_v + sum_e min r_e``

is a lower bound on the optimum (weak duality), whatever the messages; the best messages make
it the LP optimum. :class:`DualAscent` raises it by MPLP's block-coordinate updates (Globerson
& Jaakkola, NIPS 2007: each edge update is a closed-form maximisation of the dual over that
edge's two messages, so ``LB`` never decreases), sweeping the edges forward and backward.

What the MILP side uses it for (this module knows nothing of the exact graph search):

* **reduced-cost fixing**: an assignment with ``a_v = c`` costs at least
  ``LB + b_v(c) - min b_v``; one with ``(a_u, a_w) = (c, c')`` on edge ``e`` at least
  ``LB + r_e(c, c') - min r_e + b_u(c) - min b_u + b_w(c') - min b_w``. Whatever exceeds the
  cost of a known feasible assignment can be removed without losing an optimum;
* **a rounding**: nodes in order take the configuration of least
  ``theta_v + sum_{placed u} theta_uv(a_u, .) + sum_{not placed u} lambda_{uv->v}``, the usual
  decoding of message-passing duals; local search polishes it.

A memory budget enters through Lagrange multipliers ``mu_r >= 0`` on its rows: the node
costs become ``theta_v + sum_r mu_r m_r(v, .)`` and ``LB - mu . budget`` bounds every
assignment that fits (the reduced costs above then hold for assignments that fit).

Entries that are ``inf`` (forbidden) must have been removed beforehand from the nodes (every
configuration here has a finite cost and a finite partner on every edge); costs may be capped
(:func:`capped`) so that IOPDDL's ``1e18`` entries do not swamp the float arithmetic: lowering
a cost keeps every bound valid.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .options import Deadline

__all__ = ["DualAscent", "capped"]


def capped(table: np.ndarray, cap: float) -> np.ndarray:
    """``table`` with every entry above ``cap`` lowered to ``cap`` (``inf`` included).

    Lowering costs keeps every lower bound computed on them valid for the original.
    """
    return np.minimum(table, cap) if np.any(~(table <= cap)) else table


class DualAscent:
    """MPLP dual ascent on one pairwise problem.

    Parameters
    ----------
    unary : sequence of numpy.ndarray
        ``theta_v`` per node (finite).
    edges : numpy.ndarray
        ``(E, 2)`` node pairs.
    tables : sequence of numpy.ndarray
        ``theta_e`` as ``(K_u, K_w)`` (``inf`` marks a forbidden pair; every configuration
        must keep a finite partner on every edge).
    order : sequence of int, optional
        The node order of the sweeps and of the rounding (default ``0..n-1``).

    Examples
    --------
    >>> d = DualAscent([np.array([1.0, 2.0]), np.array([3.0, 0.5])], np.array([[0, 1]]),
    ...                [np.array([[0.0, 4.0], [4.0, 0.0]])])
    >>> round(d.run(sweeps=20), 9), d.decode().tolist()
    (2.5, [1, 1])
    """

    def __init__(self, unary: Sequence[np.ndarray], edges: np.ndarray,
                 tables: Sequence[np.ndarray], order: Sequence[int] | None = None):
        self.theta = [np.asarray(u, dtype=np.float64) for u in unary]
        self.n = len(self.theta)
        self.edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        self.tables = [np.asarray(t, dtype=np.float64) for t in tables]
        self.order = np.arange(self.n) if order is None else np.asarray(order, dtype=np.int64)
        rank = np.empty(self.n, dtype=np.int64)
        rank[self.order] = np.arange(self.n)
        self.rank = rank
        self.msg_u = [np.zeros(t.shape[0]) for t in self.tables]     # lambda_{e->u}
        self.msg_w = [np.zeros(t.shape[1]) for t in self.tables]     # lambda_{e->w}
        self.belief = [t.copy() for t in self.theta]
        key = np.minimum(rank[self.edges[:, 0]], rank[self.edges[:, 1]]) if self.edges.size \
            else np.zeros(0, dtype=np.int64)
        self.edge_order = np.argsort(key, kind="stable")
        self._ends = [(int(u), int(w)) for u, w in self.edges]
        self._sweep_order = [int(e) for e in self.edge_order] + \
            [int(e) for e in self.edge_order[::-1]]
        self.inc: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        for e, (u, w) in enumerate(self.edges):
            self.inc[int(u)].append((e, 0))
            self.inc[int(w)].append((e, 1))
        self.sweeps = 0
        self.history: list[float] = []

    # ------------------------------------------------------------------ updates
    def set_unary(self, unary: Sequence[np.ndarray]) -> None:
        """New node costs (e.g. other memory multipliers); messages are kept."""
        for v, u in enumerate(unary):
            u = np.asarray(u, dtype=np.float64)
            self.belief[v] = self.belief[v] + (u - self.theta[v])
            self.theta[v] = u

    def sweep(self) -> None:
        """One forward and one backward pass over the edges."""
        belief, msg_u, msg_w = self.belief, self.msg_u, self.msg_w
        ends = self._ends
        with np.errstate(invalid="ignore"):
            for e in self._sweep_order:
                u, w = ends[e]
                t = self.tables[e]
                bu = belief[u] - msg_u[e]                   # b_u without this edge
                bw = belief[w] - msg_w[e]
                mu = 0.5 * ((t + bw).min(axis=1) - bu)
                mw = 0.5 * ((t + bu[:, None]).min(axis=0) - bw)
                belief[u] = bu + mu
                belief[w] = bw + mw
                msg_u[e] = mu
                msg_w[e] = mw
        self.sweeps += 1

    def run(self, sweeps: int = 200, *, rtol: float = 1e-7, check_every: int = 4,
            target: float = math.inf, deadline: Deadline | None = None) -> float:
        """Sweep until the bound stops rising (less than ``rtol`` relative between two
        checks ``check_every`` sweeps apart, twice), reaches ``target``, ``sweeps`` are done
        or ``deadline`` passes; returns the best bound seen."""
        best = self.bound()
        self.history.append(best)
        still = 0
        for i in range(sweeps):
            if best >= target or (deadline is not None and deadline.passed()):
                break
            self.sweep()
            if (i + 1) % check_every == 0 or i == sweeps - 1:
                lb = self.bound()
                self.history.append(lb)
                if lb <= best + rtol * max(abs(best), 1e-300):
                    still += 1
                    if still >= 2:
                        break
                else:
                    still = 0
                best = max(best, lb)
        return best

    # ------------------------------------------------------------------ reading
    def edge_term(self, e: int) -> np.ndarray:
        """``r_e``: the edge's table minus its two messages."""
        return self.tables[e] - self.msg_u[e][:, None] - self.msg_w[e][None, :]

    def bound(self) -> float:
        """``sum_v min b_v + sum_e min r_e`` (a lower bound on every assignment's cost)."""
        lb = math.fsum(float(b.min()) for b in self.belief if b.size)
        lb += math.fsum(float(self.edge_term(e).min()) for e in range(len(self.tables)))
        return lb

    def node_reduced(self) -> list[np.ndarray]:
        """Per node ``b_v - min b_v``."""
        return [b - b.min() for b in self.belief]

    def edge_reduced(self, e: int) -> np.ndarray:
        """``r_e - min r_e``."""
        r = self.edge_term(e)
        return r - r.min()

    def decode(self, order: Sequence[int] | None = None) -> np.ndarray:
        """The rounding described in the module docstring."""
        order = self.order if order is None else np.asarray(order, dtype=np.int64)
        a = np.full(self.n, -1, dtype=np.int64)
        for v in order:
            v = int(v)
            score = self.theta[v].copy()
            for e, side in self.inc[v]:
                other = int(self.edges[e, 1 - side])
                if a[other] >= 0:
                    t = self.tables[e]
                    score = score + (t[:, a[other]] if side == 0 else t[a[other], :])
                else:
                    score = score + (self.msg_u[e] if side == 0 else self.msg_w[e])
            a[v] = int(np.argmin(score))
        return a
