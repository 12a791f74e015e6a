"""The redistribution's table machinery: the block boxes of a layout, the distinct
intervals a transfer reads, and the bytes each pair of configurations moves over each level
(what :meth:`~milp_parallel.costs.model.CostModel.transfer_seconds` prices).

May import: numpy only (pure functions over arrays).
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


def _dense_ids(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, distinct)``: the sorted distinct values of an integer array and every
    element's index into them (``np.unique(..., return_inverse=True)``, by a presence
    table instead of a sort when the values are small)."""
    code = np.asarray(code, dtype=np.int64)
    bound = int(code.max()) + 1 if code.size else 1
    if bound > max(1 << 16, 4 * code.size) or (code.size and code.min() < 0):
        u, inv = np.unique(code.ravel(), return_inverse=True)
        return inv.reshape(code.shape), u
    present = np.zeros(bound, dtype=bool)
    present[code] = True
    index = np.cumsum(present) - 1
    return index[code], np.flatnonzero(present)


def _interval_ids(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ids of the intervals ``[lo, hi)`` (any equal-shape non-negative integer arrays) into
    their distinct values: ``(ids like lo, (n, 2) array of distinct (lo, hi))``."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    m = int(hi.max()) + 1 if hi.size else 1
    ids, u = _dense_ids(lo * m + hi)
    return ids, np.stack([u // m, u % m], axis=1)


def _block_boxes(h_lo, h_hi, t_h, b: int, d_max: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The box held by each aligned block of ``b`` devices that holds a device ``< d_max``:
    from the first tile's ``lo`` to the last used tile's ``hi`` (empty for an unused block).

    Returns ``(lo, hi, block)``: boxes of shape ``(K_h or 1, blocks, nd)`` (1 when every
    holder has the same) and the block of each device ``< d_max``.
    """
    k_h, t_hmax, _ = h_lo.shape
    start = np.arange(-(-d_max // b)) * b
    first = np.minimum(start, t_hmax - 1)
    last = np.clip(np.minimum(start[None, :] + b, t_h[:, None]) - 1, 0, t_hmax - 1)
    valid = (start[None, :] < t_h[:, None])[..., None]
    b_lo = np.where(valid, h_lo[:, first], 0)
    b_hi = np.where(valid, h_hi[np.arange(k_h)[:, None], last], 0)
    if (b_lo == b_lo[:1]).all() and (b_hi == b_hi[:1]).all():
        b_lo, b_hi = b_lo[:1], b_hi[:1]
    return b_lo, b_hi, np.arange(d_max) // b


def _level_tables(b_lo, b_hi, block, n_ids, n_vals, n_cache: dict, limit: int
                  ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Overlap volumes of holder block boxes ``(K, blocks, nd)`` with need boxes, as gathers.

    Per dim, the 1-D overlap of every distinct holder interval with every distinct need
    interval; dims are then merged greedily into joint tables while a table has at most
    ``limit`` entries. Returns per group ``(holder code (T, K), need id (J, T), flat
    table)``: the group's overlap is ``table[holder code + need id]``, the volume the
    product over groups (exact in float64: integers below 2**53). ``n_cache`` keeps the
    receivers' joint ids between levels.
    """
    groups = []
    for i in range(b_lo.shape[2]):
        h_id, h_val = _interval_ids(b_lo[..., i], b_hi[..., i])
        n_val = n_vals[i]
        ov = (np.minimum(h_val[:, 1:], n_val[None, :, 1])
              - np.maximum(h_val[:, :1], n_val[None, :, 0]))
        groups.append((i, h_id, np.maximum(ov, 0).astype(np.float64)))
    while len(groups) > 1:
        pairs = sorted((groups[a][2].size * groups[c][2].size, a, c)
                       for a in range(len(groups)) for c in range(a + 1, len(groups)))
        for _, a, c in pairs:
            (da, ha, ta), (dc, hc, tc) = groups[a], groups[c]
            if max(ta.shape[0], tc.shape[0]) * max(ta.shape[1], tc.shape[1]) > limit:
                continue        # the joint table has at least this many entries
            h_id, h_pair = _dense_ids(ha * tc.shape[0] + hc)   # joint ids of (id_a, id_c)
            if len(h_pair) * max(ta.shape[1], tc.shape[1]) > limit:
                continue
            key = (da, dc)
            if key not in n_cache:
                n_cache[key] = _dense_ids(_need_id(n_cache, n_ids, da) * tc.shape[1]
                                          + _need_id(n_cache, n_ids, dc))
            n_pair = n_cache[key][1]
            if len(h_pair) * len(n_pair) <= limit:
                ha_, hc_ = np.divmod(h_pair, tc.shape[0])
                na_, nc_ = np.divmod(n_pair, tc.shape[1])
                table = np.take(np.take(ta, ha_, axis=0), na_, axis=1)
                table *= np.take(np.take(tc, hc_, axis=0), nc_, axis=1)
                groups = [g for x, g in enumerate(groups) if x not in (a, c)]
                groups.append((key, h_id, table))
                break
        else:
            break
    return [(np.ascontiguousarray((h_id * table.shape[1]).T[block]),
             _need_id(n_cache, n_ids, dims), table.ravel()) for dims, h_id, table in groups]


def _need_id(n_cache: dict, n_ids: list, dims) -> np.ndarray:
    return n_ids[dims] if isinstance(dims, int) else n_cache[dims][0]
