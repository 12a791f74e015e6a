"""Parallel configurations of a layer, and where their tiles go.

A *configuration* of a layer is one degree per dimension of its **output** tensor (aligned with
``layer.dims``; 1 for a dim that is not split). Dims outside ``layer.parallel_dims`` always
have degree 1. The product of the degrees is the number of devices the layer uses; it may be
smaller than the device count (as in OptCNN), unless ``require_all_devices`` is set.

Default space (OptCNN's): power-of-two degrees that divide the dim, product at most the number
of devices. :class:`ConfigOptions` widens it (any divisor) or narrows it (per-dim caps, a
minimum tile extent, all devices only).

Placement rule
--------------
Tiles of a configuration with degrees ``(d_0, ..., d_k)`` are numbered **row-major** over the
output dims in ``layer.dims`` order (the last dim varies fastest), and tile ``t`` goes to
device ``t``: the layer uses devices ``0 .. prod(d) - 1``. Devices are numbered so that
consecutive devices fill the innermost level of the topology first (see
:mod:`milp_parallel.topology`), so a configuration of degree product 4 on 4 nodes x 4 GPUs
stays inside node 0, and with power-of-two degrees and fanouts every aligned block of
devices (a node, a group of nodes) holds a box-shaped part of the tensor.

Tile boxes are equal splits: along a dim of extent ``s`` split ``d`` ways, tile ``i`` covers
``[i * e, min((i + 1) * e, s))`` with ``e = ceil(s / d)``; the largest tile sets the compute
time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

import numpy as np

from ..errors import InvalidGraphError, InvalidTopologyError, ProblemTooLargeError
from ..validation import check_bool, check_keys, check_mapping, check_whole

__all__ = ["ConfigOptions", "SizeLimits", "enumerate_configs", "config_label", "config_labels",
           "config_counts", "tile_boxes", "tile_extent", "check_device_count"]

logger = logging.getLogger(__name__)


def _frozen_map(m, what: str) -> Mapping[str, int]:
    """A read-only ``{dim letter: positive int}``: every letter a known dimension letter
    (:data:`~milp_parallel.graph.DIM_LETTERS`, nearest one suggested), every value a whole
    number >= 1."""
    from ..graph import DIM_LETTERS
    option = f"config_options.{what}"
    m = check_mapping(option, {} if m is None else m, "from dimension letter to a whole "
                      "number, e.g. {'h': 4}")
    check_keys(option, m, DIM_LETTERS, what="dimension letter", describe=DIM_LETTERS)
    return MappingProxyType({k: check_whole(f"{option}[{k!r}]", v) for k, v in m.items()})


@dataclass(frozen=True)
class ConfigOptions:
    """Which configurations to enumerate.

    Parameters
    ----------
    power_of_two : bool, default True
        Only power-of-two degrees (OptCNN's space); ``False`` allows every divisor.
    require_all_devices : bool, default False
        Only configurations whose degree product equals the device count. A layer that has
        none (too small to split that far) keeps its largest-product configurations.
    max_degree : mapping of dim letter to int, optional
        A cap on the degree of a dim, e.g. ``{"h": 4, "w": 4}``.
    min_tile : mapping of dim letter to int, optional
        The least extent of a tile along a dim, e.g. ``{"h": 8}`` (no tile thinner than 8 rows).

    Raises
    ------
    InvalidOptionError
        A flag that is not ``True`` / ``False`` (``"false"`` is refused, not read as true),
        a cap or tile extent that is not a whole number >= 1.
    UnknownOptionError
        A key of ``max_degree`` / ``min_tile`` that is not a dimension letter of
        :data:`~milp_parallel.graph.DIM_LETTERS` (the nearest one is suggested: ``"C"`` ->
        ``'c'``).

    Examples
    --------
    >>> ConfigOptions(max_degree={"h": 2}).max_degree["h"]
    2
    """

    power_of_two: bool = True
    require_all_devices: bool = False
    max_degree: Mapping[str, int] = field(default_factory=dict)
    min_tile: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_bool("config_options.power_of_two", self.power_of_two)
        check_bool("config_options.require_all_devices", self.require_all_devices)
        object.__setattr__(self, "max_degree", _frozen_map(self.max_degree, "max_degree"))
        object.__setattr__(self, "min_tile", _frozen_map(self.min_tile, "min_tile"))

    def __hash__(self) -> int:
        return hash((self.power_of_two, self.require_all_devices,
                     tuple(sorted(self.max_degree.items())),
                     tuple(sorted(self.min_tile.items()))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigOptions) and hash(self) == hash(other) and (
            self.power_of_two == other.power_of_two
            and self.require_all_devices == other.require_all_devices
            and dict(self.max_degree) == dict(other.max_degree)
            and dict(self.min_tile) == dict(other.min_tile))


def _candidate_degrees(extent: int, n_devices: int, cap: int, min_tile: int,
                       power_of_two: bool) -> list[int]:
    out = []
    for d in range(1, min(extent, n_devices, cap) + 1):
        if extent % d or extent // d < min_tile and d > 1:
            continue
        if power_of_two and d & (d - 1):
            continue
        out.append(d)
    return out


def enumerate_configs(layer, n_devices: int, *, options: ConfigOptions | None = None,
                      max_configs: int | None = None) -> np.ndarray:
    """All configurations of a layer on ``n_devices`` devices.

    Parameters
    ----------
    layer : Layer
        Needs ``output_shape``, ``dims`` and ``parallel_dims``.
    n_devices : int
    options : ConfigOptions, optional
    max_configs : int, optional
        Refuse (before building the array) a layer with more configurations than this
        (:attr:`SizeLimits.max_configs` when called by the builder).

    Returns
    -------
    numpy.ndarray of int64, shape (K, ndim)
        Degrees aligned with ``layer.dims``. The serial configuration (all ones) comes first;
        rows are in lexicographic order of the degrees.

    Raises
    ------
    InvalidGraphError
        For a non-positive device count.
    ProblemTooLargeError
        When the layer has more than ``max_configs`` configurations (names the layer, the
        count and the option that raises the limit).

    Examples
    --------
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (4, 8))
    >>> _ = g.linear("fc", "x", 2)
    >>> enumerate_configs(g.layer("fc"), 4).tolist()
    [[1, 1], [1, 2], [2, 1], [2, 2], [4, 1]]
    """
    if isinstance(n_devices, (bool, np.bool_)) or not isinstance(n_devices, (int, np.integer)) \
            or n_devices < 1:
        raise InvalidGraphError(f"n_devices must be a positive integer, got {n_devices!r}")
    opt = options or ConfigOptions()
    parallel = set(layer.parallel_dims)
    cands = []
    for dim, extent in zip(layer.dims, layer.output_shape):
        if dim not in parallel:
            cands.append([1])
            continue
        cap = opt.max_degree.get(dim, n_devices)
        cands.append(_candidate_degrees(int(extent), int(n_devices), cap,
                                        opt.min_tile.get(dim, 1), opt.power_of_two))
    rows = _products_at_most(cands, int(n_devices), max_configs, layer)
    cfg = np.array(rows, dtype=np.int64).reshape(len(rows), len(layer.dims))
    if opt.require_all_devices:
        prod = cfg.prod(axis=1)
        keep = prod == n_devices
        if not keep.any():
            keep = prod == prod.max()
            logger.debug("layer %r has no configuration on all %d devices; keeping those on %d",
                         layer.name, n_devices, int(prod.max()))
        cfg = cfg[keep]
    return cfg


def _products_at_most(cands: list[list[int]], n_devices: int, max_rows: int | None,
                      layer) -> list[tuple[int, ...]]:
    """The tuples of the cross product of ``cands`` whose product is at most ``n_devices``,
    in lexicographic order, without walking the tuples whose prefix is already too large
    (the full product of the candidate lists can be astronomically larger)."""
    out: list[tuple[int, ...]] = []
    prefix: list[int] = []

    def walk(i: int, budget: int) -> None:
        if i == len(cands):
            out.append(tuple(prefix))
            if max_rows is not None and len(out) > max_rows:
                raise ProblemTooLargeError(
                    f"layer {getattr(layer, 'name', '?')!r} has more than {max_rows} "
                    f"configurations on {n_devices} devices (limit max_configs={max_rows}); "
                    "narrow the space (config_options max_degree, min_tile, "
                    "require_all_devices, power_of_two) or raise the limit with "
                    f"config_options={{'max_configs': ...}}")
            return
        for d in cands[i]:          # ascending, so the first too-large degree ends the loop
            if d > budget:
                break
            prefix.append(d)
            walk(i + 1, budget // d)
            prefix.pop()

    walk(0, n_devices)
    return out


def config_label(layer, degrees) -> str:
    """A readable label: ``"n=2 h=2"`` (split dims in ``layer.dims`` order), ``"serial"``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> config_label(SimpleNamespace(dims=("n", "c", "h", "w")), [2, 1, 2, 1])
    'n=2 h=2'
    """
    parts = [f"{d}={int(k)}" for d, k in zip(layer.dims, degrees) if int(k) > 1]
    return " ".join(parts) if parts else "serial"


def config_labels(layer, configs: np.ndarray) -> tuple[str, ...]:
    """:func:`config_label` of every row of ``configs``."""
    dims = tuple(layer.dims)
    return tuple(" ".join([f"{d}={k}" for d, k in zip(dims, row) if k > 1]) or "serial"
                 for row in np.asarray(configs, dtype=np.int64).tolist())


def config_counts(graph, n_devices: int, *, options: ConfigOptions | None = None
                  ) -> dict[str, int]:
    """The number of configurations of every layer of a graph, by layer name."""
    return {layer.name: len(enumerate_configs(layer, n_devices, options=options))
            for layer in graph.layers}


def tile_extent(shape, configs: np.ndarray) -> np.ndarray:
    """Extent of the largest tile along each dim: ``ceil(shape / degrees)``, shape (K, ndim)."""
    s = np.asarray(shape, dtype=np.int64)
    c = np.asarray(configs, dtype=np.int64)
    return -(-s // c)


def tile_boxes(shape, configs: np.ndarray, n_tiles: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The output box of every tile of every configuration, under the placement rule.

    Parameters
    ----------
    shape : sequence of int
        The output shape.
    configs : array_like of int, shape (K, ndim)
    n_tiles : int, optional
        Pad to this many tiles per configuration (default: the largest degree product).

    Returns
    -------
    lo, hi : numpy.ndarray of int64, shape (K, T, ndim)
        Tile ``t`` of configuration ``k`` (on device ``t``) covers ``[lo[k, t], hi[k, t])``;
        padding tiles (``t >= prod(configs[k])``) are empty (``lo == hi == 0``).
    valid : numpy.ndarray of bool, shape (K, T)

    Examples
    --------
    >>> lo, hi, ok = tile_boxes((4, 6), [[2, 3]])
    >>> lo[0, 4].tolist(), hi[0, 4].tolist()  # tile 4 = row 1, column 1
    ([2, 2], [4, 4])
    """
    s = np.asarray(shape, dtype=np.int64)
    c = np.atleast_2d(np.asarray(configs, dtype=np.int64))
    k, nd = c.shape
    prod = c.prod(axis=1)
    t_max = int(prod.max()) if n_tiles is None else int(n_tiles)
    t = np.arange(t_max)
    # row-major coordinates: the last dim varies fastest
    strides = np.ones_like(c)
    if nd > 1:
        strides[:, :-1] = np.cumprod(c[:, :0:-1], axis=1)[:, ::-1]
    coord = (t[None, :, None] // strides[:, None, :]) % c[:, None, :]
    e = -(-s // c)                                      # (K, nd)
    lo = np.minimum(coord * e[:, None, :], s)
    hi = np.minimum((coord + 1) * e[:, None, :], s)
    valid = t[None, :] < prod[:, None]
    lo = np.where(valid[..., None], lo, 0)
    hi = np.where(valid[..., None], hi, 0)
    return lo, hi, valid


# ---------------------------------------------------------------------- size guards
@dataclass(frozen=True)
class SizeLimits:
    """The largest problem the builder agrees to allocate, checked before any allocation.

    Each limit is one of the sizes that grow fastest with the device count and the model; a
    problem beyond one raises :class:`~milp_parallel.errors.ProblemTooLargeError` naming the
    size, the limit and the option that raises it. Pass larger limits as build options
    (``build(graph, topo, max_devices=65536)``) or through ``solve(...,
    config_options={"max_devices": 65536})``.

    Parameters
    ----------
    max_devices : int, default 4096
        Devices in the topology (the memory tables hold one column per device).
    max_configs : int, default 4096
        Configurations of one layer (node).
    max_edge_entries : int, default 100_000_000
        Entries of all edge cost tables together (``sum K_u * K_v``; 8 bytes each, and the
        transfer computation needs a few times more while it runs).
    max_memory_entries : int, default 100_000_000
        Entries of all memory tables together (``sum K_v * n_devices``).

    Examples
    --------
    >>> SizeLimits().max_devices
    4096
    >>> SizeLimits(max_devices=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    milp_parallel.errors.InvalidOptionError: SizeLimits.max_devices (config_options ...) must ...
    """

    max_devices: int = 4096
    max_configs: int = 4096
    max_edge_entries: int = 100_000_000
    max_memory_entries: int = 100_000_000

    def __post_init__(self) -> None:
        from ..errors import InvalidOptionError
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                    or v < 1:
                raise InvalidOptionError(f"SizeLimits.{f.name} (config_options "
                                         f"{{'{f.name}': ...}}) must be a positive integer, "
                                         f"got {v!r:.40}")
            object.__setattr__(self, f.name, int(v))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The names of the limits (the options that raise them)."""
        return tuple(f.name for f in fields(cls))

    def check(self, size: str, value: int, what: str) -> None:
        """Raise :class:`ProblemTooLargeError` when ``value`` exceeds the limit ``size``."""
        limit = getattr(self, size)
        if value > limit:
            raise ProblemTooLargeError(
                f"{what}: {value:,} exceeds the limit {size}={limit:,}; use a smaller "
                f"problem or raise the limit with config_options={{'{size}': {value}}} "
                f"(build option {size}=...)")


def check_device_count(n_devices: int, options: ConfigOptions | None = None, *,
                       limits: SizeLimits | None = None, where: str = "the cluster") -> None:
    """Refuse a device count the configuration space cannot use as labelled.

    With power-of-two degrees (the default space), a plan on ``n`` devices that is not a
    power of two could only use the largest power of two below ``n``, while being labelled
    ``n``: that is refused, naming the counts that work and the option that allows any
    divisor. The count is also checked against :attr:`SizeLimits.max_devices`.

    Raises
    ------
    InvalidTopologyError
        A device count that is not a power of two under power-of-two degrees.
    ProblemTooLargeError
        More devices than ``limits.max_devices``.

    Examples
    --------
    >>> check_device_count(8)
    >>> try:
    ...     check_device_count(3)
    ... except InvalidTopologyError as exc:
    ...     print(str(exc)[-84:])
    use 2 or 4 devices, or allow any divisor with config_options={'power_of_two': False}
    """
    opt = options or ConfigOptions()
    n = int(n_devices)
    (limits or SizeLimits()).check("max_devices", n, f"{where} has {n} devices")
    if opt.power_of_two and n & (n - 1):
        lo = 1 << (n.bit_length() - 1)
        raise InvalidTopologyError(
            f"{where} has {n} devices, but with power-of-two degrees (the default "
            f"configuration space) a plan can only use 1, 2, 4, 8, ... devices: {n} would be "
            f"planned on at most {lo} of them; use {lo} or {2 * lo} devices, or allow any "
            "divisor with config_options={'power_of_two': False}")
