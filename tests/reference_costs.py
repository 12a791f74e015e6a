"""Test-only reference implementations the fast cost model paths are checked against.

``receive_seconds`` is the straightforward t_x kernel (with the network-card sharing rule
of ``Level.uplinks`` added independently) the cost model used before the
table-gather one (one box intersection per level per (holder configuration, receiving
device), with numpy broadcasting); tests compare the two to 1e-12 relative. (Not a test
module: imported as ``from reference_costs import ...``, like ``strategies``.)
"""

import numpy as np


def receive_seconds(cm, h_lo, h_hi, t_h, n_lo, n_hi, t_r):
    """:meth:`CostModel._receive_seconds` of ``cm``, computed the plain way, shape (K_h, K_r)."""
    blocks = (1,) + cm.topology.group_sizes
    lat = np.array([x.latency_for(2) for x in cm.topology.levels], float)
    bw = np.array([x.bandwidth_bytes_per_s for x in cm.topology.levels], float)
    k_h, t_hmax, nd = h_lo.shape
    t_r = np.asarray(t_r, dtype=np.int64)
    t_h = np.asarray(t_h, dtype=np.int64)
    rr, dd = np.nonzero(np.arange(n_lo.shape[1])[None, :] < t_r[:, None])
    nlo = n_lo[rr, dd]
    nhi = n_hi[rr, dd]
    offsets = np.searchsorted(rr, np.arange(len(t_r)))
    rows = np.arange(k_h)[:, None]
    d_max = int(dd.max()) + 1
    total = np.zeros((k_h, len(rr)))
    prev = None
    for lvl, b in enumerate(blocks):
        start = np.arange(-(-d_max // b)) * b
        first = np.minimum(start, t_hmax - 1)
        last = np.clip(np.minimum(start[None, :] + b, t_h[:, None]) - 1, 0, t_hmax - 1)
        valid = (start[None, :] < t_h[:, None])[..., None]
        b_lo = np.where(valid, h_lo[:, first], 0)[:, dd // b]         # (K_h, M, nd)
        b_hi = np.where(valid, h_hi[rows, last], 0)[:, dd // b]
        ov = np.minimum(b_hi, nhi[None]) - np.maximum(b_lo, nlo[None])
        vol = np.maximum(ov, 0).astype(np.float64).prod(axis=2)
        if prev is not None:
            moved = vol - prev
            # receivers of one node (same configuration, same holder configuration) that
            # get data over a level with U cards share them
            up = cm.topology.levels[lvl - 1].uplinks
            unit = blocks[lvl - 1]
            slow = np.ones_like(moved)
            if lvl - 1 > 0 and up and unit > up:
                busy = moved > 0
                key = rr * (d_max + 1) + dd // unit
                for kk in np.unique(key):
                    cols = key == kk
                    slow[:, cols] = np.maximum(busy[:, cols].sum(axis=1) / up, 1.0)[:, None]
            total += np.where(moved > 0, lat[lvl - 1]
                              + moved * (cm.bytes_per_element / bw[lvl - 1]) * slow, 0.0)
        prev = vol
    return np.maximum.reduceat(total, offsets, axis=1)


def transfer_seconds(cm, producer, consumer, input_index, cu, cv):
    """:meth:`CostModel.transfer_seconds` with :func:`receive_seconds` as the kernel."""
    from milp_parallel.costs.configs import tile_boxes
    cu = np.atleast_2d(np.asarray(cu, dtype=np.int64))
    cv = np.atleast_2d(np.asarray(cv, dtype=np.int64))
    p_lo, p_hi, _ = tile_boxes(producer.output_shape, cu)
    o_lo, o_hi, ok = tile_boxes(consumer.output_shape, cv)
    r_lo, r_hi = consumer.input_region(input_index, o_lo, o_hi)
    r_lo = np.where(ok[..., None], r_lo, 0)
    r_hi = np.where(ok[..., None], r_hi, 0)
    passes = 1.0 if producer.op == "input" else 1.0 + cm.backward_transfer_factor
    return passes * receive_seconds(
        cm, p_lo, p_hi, cu.prod(axis=1), r_lo, r_hi, cv.prod(axis=1))
