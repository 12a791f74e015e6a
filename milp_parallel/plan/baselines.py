"""Hand-written parallelization strategies to compare an optimal plan against.

Each baseline is an *assignment* of the same :class:`~milp_parallel.Problem` the solver sees
(one configuration index per node), so it is evaluated by the same
:meth:`Problem.evaluate <milp_parallel.Problem.evaluate>` and the comparison is fair: the
optimum of the problem can never be slower than a baseline that fits in memory.

=================  ============================================================================
name               rule (per problem node, among its configurations of finite cost)
=================  ============================================================================
``data``           data parallelism: split only the sample dimension ``n``, with degree ``p``
                   (the number of devices) when that configuration exists, else the largest
                   power-of-two sample degree that exists, else the largest sample degree.
``model``          model (channel) parallelism: split only the channel dimension ``c``, with the
                   degree nearest to ``p`` (ties go to the larger degree); a node with no
                   channel split runs serially.
``owt``            Krizhevsky's "one weird trick": the ``model`` rule for layers with dense
                   weights (``linear``, ``embedding``, ``matmul``), the ``data`` rule for every
                   other layer (convolutions, pools, element-wise, ...).
``best_uniform``   over the strategies that every node offers (the same degrees on every
                   layer, e.g. ``n=4`` or ``n=2 c=2``), the one with the least predicted time
                   among those within the memory budget (the least overall when none fits).
=================  ============================================================================

When a rule finds nothing (e.g. a node without any sample split), the node falls back to its
serial configuration (every degree 1), or, if that is forbidden, its cheapest configuration.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..problem import Problem

__all__ = ["NodeConfigs", "BASELINE_NAMES", "baseline_assignments", "data_parallel",
           "model_parallel", "one_weird_trick", "best_uniform", "parse_config_label",
           "degrees_dict", "WEIGHT_OPS"]

logger = logging.getLogger(__name__)

#: The baselines, in the order reports list them.
BASELINE_NAMES = ("data", "model", "owt", "best_uniform")

#: Ops whose weights OWT splits by channel (model parallelism); everything else is data
#: parallel.
WEIGHT_OPS = frozenset({"linear", "embedding", "matmul"})


@dataclass(frozen=True)
class NodeConfigs:
    """The configurations of one problem node, as degrees.

    Attributes
    ----------
    op : str
        The op of the node's layer (``"conv"``, ``"linear"``, ...).
    dims : tuple of str
        One letter per output dimension of the layer (``"n"``, ``"c"``, ``"h"``, ...).
    degrees : numpy.ndarray
        ``(K, len(dims))`` int array: the split degree of every dimension in every
        configuration (1 = not split).
    """

    op: str
    dims: tuple[str, ...]
    degrees: np.ndarray

    def pure(self, dim: str) -> tuple[np.ndarray, np.ndarray]:
        """Configurations that split ``dim`` only (degree > 1): ``(indices, degrees)``."""
        if dim not in self.dims or self.degrees.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        j = self.dims.index(dim)
        others = np.delete(self.degrees, j, axis=1)
        mask = np.all(others == 1, axis=1) & (self.degrees[:, j] > 1)
        idx = np.nonzero(mask)[0]
        return idx, self.degrees[idx, j]

    def serial(self) -> int | None:
        """Index of the configuration with every degree 1, or ``None``."""
        idx = np.nonzero(np.all(self.degrees == 1, axis=1))[0]
        return int(idx[0]) if idx.size else None


def degrees_dict(dims: Sequence[str], degrees: Sequence[int]) -> dict[str, int]:
    """``{dim: degree}`` of the split dimensions (degree > 1), in ``dims`` order."""
    return {d: int(k) for d, k in zip(dims, degrees) if int(k) > 1}


def parse_config_label(label: str) -> dict[str, int]:
    """Read a configuration label such as ``"n=2 h=2"`` (or ``"serial"``) into degrees.

    Parameters
    ----------
    label : str
        ``"serial"`` or space-separated ``dim=degree`` items, each dim once, each degree a
        whole number >= 1 (``n=1`` means ``n`` is not split); anything in
        parentheses (e.g. ``"(4 GPUs)"``) is ignored.

    Returns
    -------
    dict
        ``{dim: degree}`` of every dim the label names (``"n=1 c=2"`` gives ``{"n": 1,
        "c": 2}``, so that a caller can check the letters).

    Raises
    ------
    InvalidOptionError
        (a ``ValueError``) If an item is not ``dim=degree`` with a degree >= 1, or a dim is
        named twice (``"n=4 n=2"``).

    Examples
    --------
    >>> parse_config_label("n=2 h=2")
    {'n': 2, 'h': 2}
    >>> parse_config_label("serial")
    {}
    >>> parse_config_label("n=4 n=2")
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: configuration label 'n=4 n=2' names dim 'n' twice
    """
    from ..errors import InvalidOptionError
    if not isinstance(label, str):
        raise InvalidOptionError(f"a configuration label is a string such as 'n=2 h=2', got "
                                 f"{type(label).__name__}")
    text = label.split("(")[0].strip()
    if text in ("", "serial"):
        return {}
    out: dict[str, int] = {}
    seen: set[str] = set()
    for item in text.replace(",", " ").split():
        key, sep, val = item.partition("=")
        if not sep or not key or not val.isdigit() or not val.isascii() or int(val) < 1:
            raise InvalidOptionError(f"configuration label {label!r}: item {item!r} is not "
                                     "dim=degree with a whole degree >= 1")
        if key in seen:
            raise InvalidOptionError(f"configuration label {label!r} names dim {key!r} twice")
        seen.add(key)
        out[key] = int(val)
    return out


# ---------------------------------------------------------------------- per-node rules
def _finite(problem: Problem, v: int) -> np.ndarray:
    return np.isfinite(problem.node_costs[v])


def _fallback(problem: Problem, v: int, node: NodeConfigs) -> int:
    s = node.serial()
    if s is not None and np.isfinite(problem.node_costs[v][s]):
        return s
    return int(np.argmin(problem.node_costs[v]))


def _data_choice(problem: Problem, v: int, node: NodeConfigs, p: int) -> int:
    idx, deg = node.pure("n")
    ok = _finite(problem, v)[idx]
    idx, deg = idx[ok], deg[ok]
    if idx.size == 0:
        return _fallback(problem, v, node)
    if np.any(deg == p):
        return int(idx[np.nonzero(deg == p)[0][0]])
    pow2 = (deg & (deg - 1)) == 0
    if pow2.any():
        idx, deg = idx[pow2], deg[pow2]
    return int(idx[np.argmax(deg)])


def _model_choice(problem: Problem, v: int, node: NodeConfigs, p: int) -> int:
    idx, deg = node.pure("c")
    ok = _finite(problem, v)[idx]
    idx, deg = idx[ok], deg[ok]
    if idx.size == 0:
        return _fallback(problem, v, node)
    # nearest to p; ties to the larger degree: sort key (|deg - p|, -deg)
    order = np.lexsort((-deg, np.abs(deg - p)))
    return int(idx[order[0]])


def _check(problem: Problem, nodes: Sequence[NodeConfigs]) -> None:
    if len(nodes) != problem.n_nodes:
        raise ValueError(f"got configurations for {len(nodes)} nodes, the problem has "
                         f"{problem.n_nodes}")
    for v, node in enumerate(nodes):
        if node.degrees.shape[0] != problem.n_configs[v]:
            raise ValueError(f"node {v} ({problem.node_names[v]}): {node.degrees.shape[0]} "
                             f"degree rows for {problem.n_configs[v]} configurations")


def data_parallel(problem: Problem, nodes: Sequence[NodeConfigs], n_devices: int) -> np.ndarray:
    """The ``data`` baseline's assignment (see the module docstring).

    Parameters
    ----------
    problem : Problem
    nodes : sequence of NodeConfigs
        One per problem node, aligned with its configurations.
    n_devices : int
        ``p``, the number of devices.

    Returns
    -------
    numpy.ndarray
        One configuration index per node.
    """
    _check(problem, nodes)
    return np.array([_data_choice(problem, v, nd, n_devices) for v, nd in enumerate(nodes)],
                    dtype=np.int64)


def model_parallel(problem: Problem, nodes: Sequence[NodeConfigs], n_devices: int
                   ) -> np.ndarray:
    """The ``model`` baseline's assignment (channel split nearest to ``p``)."""
    _check(problem, nodes)
    return np.array([_model_choice(problem, v, nd, n_devices) for v, nd in enumerate(nodes)],
                    dtype=np.int64)


def one_weird_trick(problem: Problem, nodes: Sequence[NodeConfigs], n_devices: int
                    ) -> np.ndarray:
    """The ``owt`` baseline: channel split for :data:`WEIGHT_OPS`, sample split elsewhere."""
    _check(problem, nodes)
    return np.array([(_model_choice if nd.op in WEIGHT_OPS else _data_choice)(
        problem, v, nd, n_devices) for v, nd in enumerate(nodes)], dtype=np.int64)


def uniform_strategies(problem: Problem, nodes: Sequence[NodeConfigs]
                       ) -> dict[tuple[tuple[str, int], ...], np.ndarray]:
    """Every strategy that all nodes offer with a finite cost, as its assignment.

    Returns
    -------
    dict
        ``((dim, degree), ...)`` (split dims, sorted) -> assignment.
    """
    _check(problem, nodes)
    common = None
    per_node = []
    for v, nd in enumerate(nodes):
        fin = _finite(problem, v)
        keys: dict[tuple, int] = {}
        for c in range(nd.degrees.shape[0]):
            if fin[c]:
                key = tuple(sorted(degrees_dict(nd.dims, nd.degrees[c]).items()))
                keys.setdefault(key, c)
        per_node.append(keys)
        common = set(keys) if common is None else common & set(keys)
    return {key: np.array([k[key] for k in per_node], dtype=np.int64)
            for key in sorted(common or (), key=lambda t: (math.prod(d for _, d in t), t))}


def best_uniform(problem: Problem, nodes: Sequence[NodeConfigs]) -> np.ndarray | None:
    """The ``best_uniform`` baseline's assignment, or ``None`` if no strategy is uniform."""
    cands = uniform_strategies(problem, nodes)
    best, best_key = None, None
    for key, a in cands.items():
        ev = problem.evaluate(a)
        rank = (not ev.feasible, ev.cost)
        if best_key is None or rank < best_key:
            best, best_key = a, rank
    return best


def baseline_assignments(problem: Problem, nodes: Sequence[NodeConfigs], n_devices: int
                         ) -> Mapping[str, np.ndarray]:
    """All baselines of :data:`BASELINE_NAMES` as assignments of ``problem``.

    ``best_uniform`` is left out when no strategy exists on every node.

    Examples
    --------
    >>> import numpy as np
    >>> from milp_parallel import Problem
    >>> p = Problem([np.array([4.0, 1.0, 2.0])] * 2, [(0, 1)], [np.zeros((3, 3))])
    >>> deg = np.array([[1, 1], [2, 1], [1, 2]])
    >>> nodes = [NodeConfigs("conv", ("n", "c"), deg), NodeConfigs("linear", ("n", "c"), deg)]
    >>> {k: v.tolist() for k, v in baseline_assignments(p, nodes, 2).items()}
    {'data': [1, 1], 'model': [2, 2], 'owt': [1, 2], 'best_uniform': [1, 1]}
    """
    out = {"data": data_parallel(problem, nodes, n_devices),
           "model": model_parallel(problem, nodes, n_devices),
           "owt": one_weird_trick(problem, nodes, n_devices)}
    bu = best_uniform(problem, nodes)
    if bu is not None:
        out["best_uniform"] = bu
    return out
