"""Collectives as NCCL-style libraries run them, on a :class:`~milp_parallel.topology.Topology`.

Every formula is alpha-beta per level of the topology: a message of ``m`` bytes over level
``l`` costs ``alpha_l + m / bw_l``, ``alpha_l`` the level's latency (for a group of ``r``
devices: ``Level.latency_for(r)``) and ``bw_l`` its per-direction bandwidth. Each result is
affine in the buffer size, ``time(m) = latency_s + m * seconds_per_byte``
(:class:`CollectiveCost`), so bucketing and algorithm choice are cheap to evaluate.

Algorithms (``m`` = the total buffer, ``r`` devices; a group is summarized per level by
``s_l``, the number of its level-``(l-1)`` units inside one level-``l`` unit (``s_0`` = its
devices per node, ``s_1`` = its nodes per level-1 unit, ...; ``prod(s_l) = r`` for regular
groups, the most loaded unit otherwise)):

========== ================================================= =================================
algorithm  all-reduce                                        all-gather / reduce-scatter
========== ================================================= =================================
ring       ``2 (r-1) (alpha + (m/r) / bw)`` on the slowest   ``(r-1) (alpha + (m/r) / bw)``
           level the ring crosses (devices in increasing
           order: each unit is entered and left once)
tree       ``2 [(s_0 - 1) alpha_0 + sum_(l>0) ceil(log2 s_l)  (not used: libraries gather by
           alpha_l] + 2 m / bw``: NCCL's tree, a chain       rings)
           inside the node and a pipelined double binary
           tree across nodes (every device sends and
           receives ``m`` up and ``m`` down), slowest level
hierarch.  ``sum_l 2 (s_l - 1) (alpha_l + m_l / bw_l)``,     ``sum_l (s_l - 1) (alpha_l + m_l
           ``m_l = m / (s_0 ... s_l)``: reduce-scatter       / bw_l)``
           inside the node, the same one level up on the
           node's shard, ..., then all-gather back down
========== ================================================= =================================

Point-to-point: ``alpha + m / bw`` on the link between the two devices.

A level that lists a collective's own measured figures (``Level.collectives``, written by
:func:`milp_parallel.calibrate`) prices that collective with them in place of ``alpha_l`` and
``bw_l``: the same formulas, with the alpha and bandwidth the backend's implementation of it
reached.

**Network cards shared per node.** A level with ``uplinks = U > 0`` gives each unit of the
level below (a node) ``U`` cards of ``bw_l``; the flows that leave (or enter) one unit over
that level at the same time share them: each gets ``bw_l * min(1, U / flows)``. A ring has one
flow per unit it crosses; the hierarchical algorithm's level-``l`` phase has ``s_0 ... s_{l-1}``
parallel rings (one per local rank), so it spreads over the cards. Groups that run at the same
time (the replica groups of the shards of one layer) add their flows. ``uplinks = 0`` means
one card per device: no sharing.

``"auto"`` picks, per group and message size, the algorithm with the least time, as NCCL's
tuner does.

Examples
--------
>>> from milp_parallel import clusters
>>> t = clusters.get("dgx_a100", nodes=2)
>>> c = allreduce_cost(t, [list(range(16))], algorithm="hierarchical")[0]
>>> # in a node 2 x 7 x (9 us + m/8 / 300 GB/s); across 2 x 1 x (40.31 us + m/16 / 25 GB/s),
>>> # 8 rings (one per local rank) on the node's 8 cards
>>> round(c.seconds(64e6) * 1e3, 4)
0.9
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import InvalidTopologyError

__all__ = ["ALGORITHMS", "CollectiveCost", "group_levels", "cost_table", "allreduce_cost",
           "allgather_cost", "reducescatter_cost", "p2p_seconds", "best"]

#: All-reduce algorithms; all-gather and reduce-scatter use ``ring`` and ``hierarchical``.
ALGORITHMS = ("ring", "tree", "hierarchical")


@dataclass(frozen=True)
class CollectiveCost:
    """``time(m) = latency_s + m * seconds_per_byte`` of one collective on one group.

    Attributes
    ----------
    algorithm : str
    latency_s : float
        The message-size-independent part (alpha terms).
    seconds_per_byte : float
        The bandwidth part per byte of the buffer.
    """

    algorithm: str
    latency_s: float
    seconds_per_byte: float

    def seconds(self, nbytes: float) -> float:
        """The time for a buffer of ``nbytes`` (0 for an empty buffer)."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + float(nbytes) * self.seconds_per_byte


def _groups(topology, devices) -> np.ndarray:
    d = np.asarray(devices, dtype=np.int64)
    if d.ndim == 1:
        d = d[None, :]
    if d.ndim != 2:
        raise InvalidTopologyError(f"device groups must be a (G, r) array, got shape {d.shape}")
    if d.size and (d.min() < 0 or d.max() >= topology.n_devices):
        raise InvalidTopologyError(f"a device group names a device outside 0.."
                                   f"{topology.n_devices - 1} of topology {topology.name!r}")
    d = np.sort(d, axis=1)
    if d.shape[1] > 1 and np.any(d[:, 1:] == d[:, :-1]):
        raise InvalidTopologyError("a device group lists the same device twice")
    return d


def group_levels(topology, devices) -> tuple[np.ndarray, np.ndarray]:
    """Per group and level, ``s_l`` and the flows each unit sends over the level.

    Parameters
    ----------
    topology : Topology
    devices : array_like of int, shape (G, r)
        ``G`` groups that run at the same time.

    Returns
    -------
    s : numpy.ndarray of int, shape (G, levels)
        ``s_l`` (see the module docstring): for level 0 the most devices of the group in one
        node, for level ``l`` the most level-``(l-1)`` units of the group in one level-``l``
        unit. 1 where the group does not use the level.
    ring_flows : numpy.ndarray of int, shape (levels,)
        Per level, the most flows leaving one unit of the level below over that level when
        every group runs a ring (one per group that crosses it there).
    """
    d = _groups(topology, devices)
    return _group_levels(topology, d)


def _group_levels(topology, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_lv = len(topology.levels)
    sizes = (1,) + topology.group_sizes
    g, r = d.shape
    rows = np.arange(g)[:, None]
    s = np.ones((g, n_lv), dtype=np.int64)
    flows = np.zeros(n_lv, dtype=np.int64)
    for lv in range(n_lv):
        below = d // sizes[lv]                 # sorted per row: the level-(l-1) units
        first = np.ones_like(below, dtype=bool)
        first[:, 1:] = below[:, 1:] != below[:, :-1]
        unit = d // sizes[lv + 1]
        n_units = topology.n_devices // sizes[lv + 1]
        count = np.bincount((rows * n_units + unit).ravel(), weights=first.ravel(),
                            minlength=g * n_units).reshape(g, n_units)
        s[:, lv] = np.maximum(count.max(axis=1), 1).astype(np.int64)
        if lv > 0:
            # one ring flow per crossing group in each of its level-(l-1) units
            crossing = (s[:, lv] > 1)[:, None] & first
            n_below = topology.n_devices // sizes[lv]
            per_unit = np.bincount(below[crossing], minlength=n_below)
            flows[lv] = int(per_unit.max()) if per_unit.size else 0
    return s, flows


def _level_params(topology, r: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    own = np.array([x.collective_params(kind, r) for x in topology.levels], float)
    up = np.array([x.uplinks for x in topology.levels], float)
    return own[:, 0], own[:, 1], up


def _share(up: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """The fraction of a card's bandwidth one of ``flows`` concurrent flows gets."""
    up = np.asarray(up, float)
    flows = np.asarray(flows, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((up <= 0) | (flows <= up), 1.0, up / np.maximum(flows, 1.0))


def cost_table(topology, devices, kind: str = "allreduce",
               algorithms: Sequence[str] = ALGORITHMS) -> tuple[np.ndarray, np.ndarray]:
    """``(latency_s, seconds_per_byte)``, each ``(len(algorithms), G)``, of concurrent groups.

    The vectorized core of :func:`allreduce_cost` and friends.

    Raises
    ------
    InvalidTopologyError
        For an unknown algorithm or kind, a device out of range or listed twice.
    """
    d = _groups(topology, devices)
    g, r = d.shape
    lat = np.zeros((len(algorithms), g))
    per_byte = np.zeros((len(algorithms), g))
    if kind not in ("allreduce", "allgather", "reducescatter"):
        raise InvalidTopologyError(f"unknown collective {kind!r}")
    for alg in algorithms:
        if alg not in ALGORITHMS:
            raise InvalidTopologyError(f"unknown collective algorithm {alg!r}; known: "
                                       f"{', '.join(ALGORITHMS)} or 'auto'")
        if alg == "tree" and kind != "allreduce":
            raise InvalidTopologyError(f"the tree algorithm is for all-reduce, not {kind}")
    if r <= 1:
        return lat, per_byte
    s, ring_flows = _group_levels(topology, d)
    alpha, bw, up = _level_params(topology, r, kind)
    n_lv = len(topology.levels)
    steps = 2.0 if kind == "allreduce" else 1.0
    share = _share(up, ring_flows)
    share[0] = 1.0
    bw_ring = bw * share                                   # one flow per unit and group
    used = s > 1                                           # (G, levels)
    top = np.where(used.any(axis=1), n_lv - 1 - np.argmax(used[:, ::-1], axis=1), 0)
    a_max = np.maximum.accumulate(alpha)[top]
    b_min = np.minimum.accumulate(bw_ring)[top]
    for i, alg in enumerate(algorithms):
        if alg == "ring":
            lat[i] = steps * (r - 1) * a_max
            per_byte[i] = steps * (r - 1) / r / b_min
        elif alg == "tree":
            hops = (s[:, 0] - 1) * alpha[0]
            for lv in range(1, n_lv):
                hops = hops + np.ceil(np.log2(s[:, lv])) * alpha[lv]
            lat[i] = 2.0 * hops
            per_byte[i] = 2.0 / b_min
        else:                                              # hierarchical
            inner = np.ones(g)
            n_cross = used.sum(axis=0)                     # groups using each level
            for lv in range(n_lv):
                sl = s[:, lv].astype(float)
                # level lv runs `inner` rings per unit per group at once (one per local
                # rank); every group of the collective does the same
                flows = inner * np.maximum(1, n_cross[lv])
                sh = _share(up[lv], flows) if lv else np.ones(g)
                after = inner * sl
                lat[i] += steps * (sl - 1) * alpha[lv]
                per_byte[i] += steps * (sl - 1) / after / (bw[lv] * sh)
                inner = after
    return lat, per_byte


def _costs(topology, devices, kind: str, algorithm: str) -> list[CollectiveCost]:
    lat, per_byte = cost_table(topology, devices, kind, (algorithm,))
    return [CollectiveCost(algorithm, float(a), float(b)) for a, b in zip(lat[0], per_byte[0])]


def best(costs: Sequence[Sequence[CollectiveCost]], nbytes: float) -> list[CollectiveCost]:
    """Per group, the cheapest of the candidate costs at ``nbytes`` (``"auto"``)."""
    return [min(cands, key=lambda c: (c.seconds(nbytes), c.algorithm))
            for cands in zip(*costs)]


def _collective(topology, devices, kind: str, algorithm: str, nbytes: float | None
                ) -> list[CollectiveCost]:
    if algorithm == "auto":
        algs = ("ring", "tree", "hierarchical") if kind == "allreduce" else (
            "ring", "hierarchical")
        cands = [_costs(topology, devices, kind, a) for a in algs]
        if nbytes is None:
            raise InvalidTopologyError("algorithm='auto' needs the message size (nbytes)")
        return best(cands, nbytes)
    return _costs(topology, devices, kind, algorithm)


def allreduce_cost(topology, devices, *, algorithm: str = "ring",
                   nbytes: float | None = None) -> list[CollectiveCost]:
    """All-reduce cost of each group of ``devices`` ((G, r) or (r,); groups concurrent).

    Parameters
    ----------
    topology : Topology
    devices : array_like of int
    algorithm : {"ring", "tree", "hierarchical", "auto"}
    nbytes : float, optional
        The buffer size; needed by ``"auto"`` (which picks per group).

    Returns
    -------
    list of CollectiveCost
        One per group.

    Raises
    ------
    InvalidTopologyError
        For an unknown algorithm, a device out of range or listed twice.
    """
    return _collective(topology, devices, "allreduce", algorithm, nbytes)


def allgather_cost(topology, devices, *, algorithm: str = "ring",
                   nbytes: float | None = None) -> list[CollectiveCost]:
    """All-gather cost (``nbytes`` = the gathered result); as :func:`allreduce_cost`."""
    return _collective(topology, devices, "allgather", algorithm, nbytes)


def reducescatter_cost(topology, devices, *, algorithm: str = "ring",
                       nbytes: float | None = None) -> list[CollectiveCost]:
    """Reduce-scatter cost (``nbytes`` = the input buffer); as :func:`allgather_cost`."""
    return _collective(topology, devices, "reducescatter", algorithm, nbytes)


def p2p_seconds(topology, src: int, dst: int, nbytes: float) -> float:
    """Point-to-point time ``alpha + m / bw`` between two devices (0 to itself).

    Examples
    --------
    >>> from milp_parallel import clusters
    >>> t = clusters.get("abci", nodes=2)
    >>> round(p2p_seconds(t, 0, 4, 12.5e6) * 1e3, 5)   # 40.31 us + 1 ms over InfiniBand
    1.04031
    """
    if src == dst or nbytes <= 0:
        return 0.0
    return topology.latency(src, dst) + float(nbytes) / topology.bandwidth(src, dst)
