"""Dominance programs: the non-dominated assignments of a chain-like group of layers.

Also the one-criterion case (the least total cost), all over numpy tables.

May import: ``.pricing`` (the criteria count only).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .pricing import _N_CRIT


def _columns(table: np.ndarray):
    """Where an edge table adds: every criterion (``(K_u, K_v, 5)``) or time only."""
    return slice(None) if table.ndim == 3 else 0


def _assignment_criteria(assign: np.ndarray, crit: Sequence[np.ndarray],
                         preds: Sequence[Sequence[tuple]]) -> np.ndarray:
    """The criteria of one assignment: the layers' own plus the edges'."""
    out = np.zeros(_N_CRIT)
    for j, k in enumerate(assign):
        out += crit[j][k]
        for u, table in preds[j]:
            out[_columns(table)] += table[assign[u], k]
    return out


def _pareto_mask(c: np.ndarray) -> np.ndarray:
    """Rows of ``c`` (minimized criteria) not dominated by another row (``<=`` everywhere);
    of equal rows the first in lexicographic order stays."""
    n = len(c)
    if n <= 1:
        return np.ones(n, bool)
    if n <= 48:
        le = (c[:, None, :] <= c[None, :, :]).all(axis=2)        # le[a, b]: a <= b
        eq = le & le.T
        first = np.arange(n)[:, None] < np.arange(n)[None, :]
        return ~((le & ~eq) | (eq & first)).any(axis=0)
    order = np.lexsort(c.T[::-1])
    cs = c[order]
    keep = np.ones(n, bool)
    step = max(1, (1 << 22) // (n * c.shape[1]))
    for s0 in range(1, n, step):
        blk = cs[s0:s0 + step]
        hi = s0 + len(blk)
        le = (cs[None, :hi, :] <= blk[:, None, :]).all(axis=2)
        le &= np.arange(hi)[None, :] < (s0 + np.arange(len(blk)))[:, None]
        keep[s0:hi] = ~le.any(axis=1)
    mask = np.empty(n, bool)
    mask[order] = keep
    return mask


def _prune(state: np.ndarray, crit: np.ndarray, assign: np.ndarray):
    """Keep, for every distinct state row, the non-dominated criteria rows."""
    if state.shape[1] == 0:
        m = _pareto_mask(crit)
        return state[m], crit[m], assign[m]
    base = int(state.max()) + 1
    key = np.zeros(len(state), np.int64)
    for col in state.T:
        key = key * base + col
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    sizes = np.diff(np.r_[starts, len(ks)])
    keep = np.zeros(len(crit), bool)
    small = sizes <= 48
    # the small groups at once: (G, g, g) comparisons on padded blocks
    if small.any():
        g = int(sizes[small].max())
        st, sz = starts[small], sizes[small]
        pos = st[:, None] + np.arange(g)[None, :]
        valid = np.arange(g)[None, :] < sz[:, None]
        idx = order[np.where(valid, pos, st[:, None])]
        c = np.where(valid[..., None], crit[idx], np.inf)
        le = (c[:, :, None, :] <= c[:, None, :, :]).all(axis=3)     # le[G, a, b]: a <= b
        eq = le & le.transpose(0, 2, 1)
        first = np.arange(g)[:, None] < np.arange(g)[None, :]
        dom = ((le & ~eq) | (eq & first[None])) & valid[:, :, None]
        ok = ~dom.any(axis=1) & valid
        keep[idx[ok]] = True
    for s0, n in zip(starts[~small], sizes[~small]):
        idx = order[s0:s0 + n]
        keep[idx[_pareto_mask(crit[idx])]] = True
    return state[keep], crit[keep], assign[keep]


def _dominance_program(crit: Sequence[np.ndarray], preds: Sequence[Sequence[tuple]],
                       keep_final: Sequence[int]):
    """Every non-dominated assignment of a chain-like group of layers.

    Parameters
    ----------
    crit : list of (K_j, 5) arrays
        The layers' own criteria, in topological order.
    preds : list of lists of ``(u, table)``
        Internal inputs of layer ``j``: producer position ``u < j`` and the edge's
        ``(K_u, K_j, 5)`` criteria, or ``(K_u, K_j)`` re-layout seconds (added to the time
        criterion).
    keep_final : sequence of int
        Layers whose kind distinguishes the results (their classes).

    Returns
    -------
    (kept_positions, state, criteria, assignment)
        ``state[:, i]`` is the kind of ``kept_positions[i]``; ``assignment`` has one column
        per layer. Within each state, no row is dominated.
    """
    n = len(crit)
    last_use: dict[int, int] = {}
    for j, ps in enumerate(preds):
        for u, _ in ps:
            last_use[u] = max(last_use.get(u, -1), j)
    keep = set(keep_final)
    open_ops: list[int] = []
    state = np.zeros((1, 0), np.int64)
    cr = np.zeros((1, _N_CRIT))
    assign = np.zeros((1, 0), np.int64)
    for j in range(n):
        K = len(crit[j])
        P = len(cr)
        kj = np.tile(np.arange(K), P)
        state = np.repeat(state, K, axis=0)
        assign = np.column_stack([np.repeat(assign, K, axis=0), kj])
        cr = np.repeat(cr, K, axis=0) + crit[j][kj]
        for u, table in preds[j]:
            cr[:, _columns(table)] += table[state[:, open_ops.index(u)], kj]
        state = np.column_stack([state, kj])
        open_ops.append(j)
        alive = [o for o in open_ops if o in keep or last_use.get(o, -1) > j]
        state = state[:, [open_ops.index(o) for o in alive]]
        open_ops = alive
        state, cr, assign = _prune(state, cr, assign)
    order = np.argsort(open_ops)
    open_ops = [open_ops[i] for i in order]
    return open_ops, state[:, order], cr, assign


def _min_program(cost: Sequence[np.ndarray], preds: Sequence[Sequence[tuple]]) -> float:
    """The least total cost of a chain-like group of layers (own costs ``cost[j]`` of
    shape ``(K_j,)`` plus re-layout tables): the dominance program with one criterion."""
    last_use: dict[int, int] = {}
    for j, ps in enumerate(preds):
        for u, _ in ps:
            last_use[u] = max(last_use.get(u, -1), j)
    open_ops: list[int] = []
    state = np.zeros((1, 0), np.int64)
    val = np.zeros(1)
    for j, c in enumerate(cost):
        K = len(c)
        kj = np.tile(np.arange(K), len(val))
        state = np.repeat(state, K, axis=0)
        val = np.repeat(val, K) + c[kj]
        for u, table in preds[j]:
            val = val + table[state[:, open_ops.index(u)], kj]
        state = np.column_stack([state, kj])
        open_ops.append(j)
        alive = [o for o in open_ops if last_use.get(o, -1) > j]
        state = state[:, [open_ops.index(o) for o in alive]]
        open_ops = alive
        if state.shape[1] == 0:
            state, val = state[:1], np.array([val.min()])
            continue
        base = int(state.max()) + 1
        key = np.zeros(len(state), np.int64)
        for colv in state.T:
            key = key * base + colv
        order = np.lexsort((val, key))
        first = np.r_[True, key[order][1:] != key[order][:-1]]
        keep = order[first]
        state, val = state[keep], val[keep]
    return float(val.min())

