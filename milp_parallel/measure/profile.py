"""Measured layer costs: time each layer's tiles with real torch operators.

:func:`profile_layers` builds, for every layer and every distinct local tile shape that its
configurations produce, the torch operator the layer stands for on a tile-shaped input, and
times forward + backward (the median of ``repeats`` runs after ``warmup`` runs). The result is
a :class:`ProfileTable`, which :class:`~milp_parallel.costs.CostModel` accepts as ``profile``:
its :meth:`ProfileTable.lookup` answers ``lookup(layer, tile_shape) -> seconds or None`` and
the cost model counts the misses (``CostModel.profile_stats``) and falls back to its FLOP
estimate for them.

What is timed for a tile
------------------------
The tile is the largest output tile of a configuration, ``ceil(output_shape / degrees)``
(:func:`milp_parallel.configs.tile_extent`). Each input's tile is the input region
(:meth:`~milp_parallel.graph.Layer.input_region`) that an output box of that shape needs,
with the box placed in the middle of the output, so a convolution tile gets its full halo
(an interior tile; tiles on the border need less). The operator is then built from the
layer's attributes for those shapes:

============  ==================================================================
op            torch operator (forward, then ``autograd.grad`` of every input and
              weight)
============  ==================================================================
conv          ``F.conv{1,2,3}d``; a channel split = fewer output channels (the
              weight shard), groups scaled with it; padding as in the layer
pool          ``F.max_pool*`` / ``F.avg_pool*``
adaptive_pool ``F.adaptive_*_pool*`` to the tile's spatial extent
global_pool   mean / amax over the spatial dims
linear        ``F.linear`` with a weight shard of the tile's output features
batchnorm     ``F.batch_norm`` in training mode; layernorm ``F.layer_norm``
elementwise   ``torch.<fn>`` / ``F.<fn>`` when it exists, else one multiply
add, mul      sum / product of the input tiles
concat        ``torch.cat``; flatten / reshape ``reshape``; transpose
              ``permute(...).contiguous()``
dropout       ``F.dropout`` (training); softmax ``F.softmax`` on the last dim
loss          ``F.cross_entropy`` against random labels
embedding     ``F.embedding`` with a table shard of the tile's features
matmul        ``torch.matmul``
============  ==================================================================

``input`` layers are not timed; :meth:`ProfileTable.lookup` answers 0.0 for them.

Table keys
----------
An entry is keyed by ``(op, signature, tile_shape, dtype, device)``. The signature is a
canonical JSON string of the op, the layer's attributes and the input tile shapes, so two
layers that do the same work on the same tile (the repeated blocks of a ResNet) share one
measurement, and a table measured for one graph answers for every graph with identical
layers. Tile shapes include the local batch: a table measured at one batch size does not
answer for another. A layer that reads a graph input is timed without the data's gradient
(a training step computes none) and its signature says which inputs are data (``"data":
[0]``); a lookup told so (``graph_inputs``, as the cost model passes it) falls back to the
tile timed with the gradient, which tables written before this distinction hold.

JSON format (version 1)
-----------------------
``{"format": "milp_parallel.profile", "version": 1, "dtype": str, "device": str,
"meta": {"device_name", "torch_version", "repeats", "warmup", "threads", ...},
"entries": [{"op", "signature", "tile_shape": [...], "dtype", "device", "seconds"}, ...]}``.
Read through :mod:`milp_parallel.io` (gzip either way, one
:class:`~milp_parallel.errors.FormatError` naming the file and the field for anything
malformed) and strictly: an unknown key at the top or in an entry is refused naming the
nearest known one; ``meta`` is free-form provenance.

Coverage
--------
A table answers only for the tiles it was measured on (same op, attributes, input tiles and
batch). :class:`ProfileCoverage` says which layers of a graph were priced from it (every
tile), in part, or by the estimate only: :meth:`ProfileTable.coverage` computes it for a
configuration space, and ``CostModel.check_profile``, which
:func:`~milp_parallel.build.build` runs on every profiled build, from the cost model's own
lookups (kept as ``CostModel.profile_coverage``). A table that prices no layer at all is
refused (:class:`~milp_parallel.errors.InvalidOptionError`: a lenet5 table given for alexnet
would price every layer by the estimate without a word); one that prices only some logs a
warning naming the layers that fall back to the estimate.

Examples
--------
>>> from milp_parallel.graph import LayerGraph
>>> g = LayerGraph()
>>> _ = g.input("x", (4, 3, 16, 16))
>>> _ = g.conv("conv", "x", 8, 3, padding=1)
>>> table = profile_layers(g, [("conv", (4, 8, 16, 16)), ("conv", (4, 4, 16, 16))],
...                        repeats=3, warmup=1)                       # doctest: +SKIP
>>> table.lookup(g.layer("conv"), (4, 4, 16, 16)) > 0                 # doctest: +SKIP
True
"""

from __future__ import annotations

import json
import logging
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import FormatError, InvalidGraphError, InvalidOptionError, require
from ..graph import OPS
from ..io import Fields, describe_type, dumps, loads, read_document, read_json, suggest, write_json
from .operators import (
    OPTIMIZER_STATE_FACTOR,
    OPTIMIZERS,
    input_tiles,
    median_seconds,
    tile_runner,
    update_seconds,
)

__all__ = ["ProfileEntry", "ProfileTable", "ProfileCoverage", "profile_layers", "profile_model",
           "layer_signature", "graph_inputs_of", "needed_tiles", "PROFILE_FORMAT",
           "PROFILE_FORMAT_VERSION"]

logger = logging.getLogger(__name__)

PROFILE_FORMAT = "milp_parallel.profile"
PROFILE_FORMAT_VERSION = 1
_DTYPES = ("float32", "float16", "bfloat16", "float64")


# ----------------------------------------------------------------------------- keys
def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in sorted(v.items())}
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _check_tile(layer: Any, tile_shape: Sequence[int]) -> tuple[int, ...]:
    tile = tuple(int(x) for x in tile_shape)
    if len(tile) != len(layer.output_shape) or any(
            t < 1 or t > s for t, s in zip(tile, layer.output_shape)):
        raise InvalidGraphError(
            f"layer {layer.name!r}: tile shape {tile} must have one positive extent per "
            f"output dim, each at most the output shape {layer.output_shape}")
    return tile


def layer_signature(layer: Any, tile_shape: Sequence[int],
                    graph_inputs: Sequence[bool] | None = None) -> str:
    """The part of a table key that says what work a tile does.

    Parameters
    ----------
    layer : Layer
    tile_shape : sequence of int
        The output tile's extent per output dim (batch first).
    graph_inputs : sequence of bool, optional
        Per input of the layer, whether it is a graph input: a training step computes no
        gradient of the data, so such a tile does less work (a 5x5 convolution of one
        channel on this CPU: 0.3 ms without the data's gradient, 3 ms with it). Recorded
        as ``"data": [input indices]`` when any is.

    Returns
    -------
    str
        Canonical JSON of the op, its attributes, the input tile shapes and, when some
        input is a graph input, which.

    Raises
    ------
    InvalidGraphError
        When ``tile_shape`` does not fit the layer's output.
    """
    tile = _check_tile(layer, tile_shape)
    ins = input_tiles(layer, tile) if layer.op != "input" else ()
    sig = {"op": layer.op, "attrs": _jsonable(dict(layer.attrs)), "in": [list(s) for s in ins]}
    data = [i for i, g in enumerate(graph_inputs or ()) if g]
    if data:
        sig["data"] = data
    return json.dumps(sig, sort_keys=True, separators=(",", ":"))


def graph_inputs_of(graph: Any, layer: Any) -> tuple[bool, ...] | None:
    """Per input of ``layer``, whether it is an input of ``graph`` (None without a graph)."""
    if graph is None or layer.op == "input":
        return None
    return tuple(graph.layer(x).op == "input" for x in layer.inputs)


@dataclass(frozen=True)
class ProfileEntry:
    """One measurement: forward+backward seconds of one tile of one kind of layer, and the
    optimizer step of the tile's weight shard (``update_seconds``; None when not timed or
    the layer has no weights)."""

    op: str
    signature: str
    tile_shape: tuple[int, ...]
    dtype: str
    device: str
    seconds: float
    update_seconds: float | None = None

    @property
    def key(self) -> tuple:
        """``(op, signature, tile_shape, dtype, device)``."""
        return (self.op, self.signature, self.tile_shape, self.dtype, self.device)

    def to_dict(self) -> dict:
        out = {"op": self.op, "signature": self.signature,
               "tile_shape": list(self.tile_shape), "dtype": self.dtype,
               "device": self.device, "seconds": self.seconds}
        if self.update_seconds is not None:
            out["update_seconds"] = self.update_seconds
        return out


@dataclass(frozen=True)
class ProfileTable:
    """Measured forward+backward seconds per (op, signature, tile shape, dtype, device).

    Parameters
    ----------
    entries : iterable of ProfileEntry
        Later entries with the same key replace earlier ones.
    dtype, device : str
        What :meth:`lookup` asks for by default (``"float32"``, ``"cpu"``, ``"cuda"``).
    meta : mapping, optional
        Provenance: ``device_name``, ``torch_version``, ``repeats``, ``warmup``, ...
    optimizer : {"adam", "momentum", "sgd"} or None
        The optimizer whose step the entries' ``update_seconds`` timed (None: no update
        was timed).
    source : str, optional
        Where the table came from (its file), for messages; not compared.

    Examples
    --------
    >>> t = ProfileTable([ProfileEntry("elementwise", "{}", (2, 3), "float32", "cpu", 1e-6)])
    >>> len(t), ProfileTable.from_json(t.to_json()) == t
    (1, True)
    """

    entries: tuple[ProfileEntry, ...] = ()
    dtype: str = "float32"
    device: str = "cpu"
    meta: Mapping[str, Any] = field(default_factory=dict)
    optimizer: str | None = None
    source: str = field(default="<table>", repr=False, compare=False)
    _index: Mapping[tuple, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple, ProfileEntry] = {}
        for e in self.entries:
            if not isinstance(e, ProfileEntry):
                raise FormatError(f"ProfileTable entries must be ProfileEntry, got {e!r}")
            if not (math.isfinite(e.seconds) and e.seconds >= 0):
                raise FormatError(f"profile entry for {e.op} tile {e.tile_shape} has "
                                  f"seconds={e.seconds!r}; expected a finite number >= 0")
            if e.update_seconds is not None and not (math.isfinite(e.update_seconds)
                                                     and e.update_seconds >= 0):
                raise FormatError(f"profile entry for {e.op} tile {e.tile_shape} has "
                                  f"update_seconds={e.update_seconds!r}; expected a finite "
                                  "number >= 0")
            index[e.key] = e
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise FormatError(f"ProfileTable optimizer {self.optimizer!r} is not one of "
                              f"{', '.join(OPTIMIZERS)}")
        object.__setattr__(self, "entries", tuple(index.values()))
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))
        object.__setattr__(self, "_index", MappingProxyType(
            {k: e.seconds for k, e in index.items()}))
        object.__setattr__(self, "_updates", MappingProxyType(
            {k: e.update_seconds for k, e in index.items() if e.update_seconds is not None}))

    def __reduce__(self):
        # rebuilt from its fields (its read-only views do not pickle), so that a plan solved
        # with a profiled cost model travels to verify_plan's processes
        return (type(self), (self.entries, self.dtype, self.device, dict(self.meta),
                             self.optimizer, self.source))

    def __len__(self) -> int:
        return len(self.entries)

    def key(self, layer: Any, tile_shape: Sequence[int], *, dtype: str | None = None,
            device: str | None = None, graph_inputs: Sequence[bool] | None = None) -> tuple:
        """The key :meth:`lookup` reads for this layer and tile."""
        tile = _check_tile(layer, tile_shape)
        return (layer.op, layer_signature(layer, tile, graph_inputs), tile,
                dtype or self.dtype, device or self.device)

    def _get(self, index, layer, tile_shape, dtype, device, graph_inputs):
        try:
            keys = [self.key(layer, tile_shape, dtype=dtype, device=device,
                             graph_inputs=graph_inputs)]
            if graph_inputs is not None and any(graph_inputs):
                # a table timed before graph inputs were told apart: the tile with the
                # data's gradient (more work than the step does, but measured)
                keys.append(self.key(layer, tile_shape, dtype=dtype, device=device))
        except InvalidGraphError:
            return None
        for k in keys:
            if k in index:
                return index[k]
        return None

    def lookup(self, layer: Any, tile_shape: Sequence[int], *, dtype: str | None = None,
               device: str | None = None, graph_inputs: Sequence[bool] | None = None
               ) -> float | None:
        """Measured forward+backward seconds of this tile, or None when not measured.

        Parameters
        ----------
        layer : Layer
        tile_shape : sequence of int
            The output tile's extent per dim (batch first), as
            :func:`milp_parallel.configs.tile_extent` computes it.
        dtype, device : str, optional
            Default: the table's.
        graph_inputs : sequence of bool, optional
            Per input, whether it is a graph input (its tile was timed without the data's
            gradient; see :func:`layer_signature`). Falls back to the tile timed with it.

        Returns
        -------
        float or None
            0.0 for ``input`` layers (nothing to compute).
        """
        if layer.op == "input":
            return 0.0
        return self._get(self._index, layer, tile_shape, dtype, device, graph_inputs)

    def lookup_update(self, layer: Any, tile_shape: Sequence[int], *,
                      dtype: str | None = None, device: str | None = None,
                      graph_inputs: Sequence[bool] | None = None) -> float | None:
        """Measured seconds of :attr:`optimizer`'s step over this tile's weight shard, or
        None when not measured (arguments as :meth:`lookup`)."""
        if layer.op == "input" or not self._updates:
            return None
        return self._get(self._updates, layer, tile_shape, dtype, device, graph_inputs)

    @property
    def optimizer_state_factor(self) -> float | None:
        """The cost model's ``optimizer_state_factor`` of :attr:`optimizer` (None without
        one): a cost model uses the measured updates only when its own factor is this."""
        return None if self.optimizer is None else OPTIMIZER_STATE_FACTOR[self.optimizer]

    def missing(self, pairs: Iterable[tuple[Any, Sequence[int]]], graph: Any = None
                ) -> list[tuple[str, tuple]]:
        """The ``(layer name, tile shape)`` pairs :meth:`lookup` has no entry for (told by
        ``graph``, when given, which inputs are graph inputs, as the cost model is)."""
        return [(layer.name, tuple(int(x) for x in tile)) for layer, tile in pairs
                if self.lookup(layer, tile, graph_inputs=graph_inputs_of(graph, layer))
                is None]

    def merge(self, other: "ProfileTable") -> "ProfileTable":
        """A table with both tables' entries (``other`` wins on equal keys)."""
        if None not in (self.optimizer, other.optimizer) and self.optimizer != other.optimizer:
            raise InvalidOptionError(f"cannot merge a profile of {self.optimizer!r} updates "
                                     f"with one of {other.optimizer!r} updates")
        return ProfileTable(self.entries + other.entries, dtype=self.dtype,
                            device=self.device, meta={**self.meta, **other.meta},
                            optimizer=self.optimizer or other.optimizer, source=self.source)

    # ------------------------------------------------------------------ coverage
    def coverage(self, graph: Any, topology_or_configs: Any, *, options: Any = None
                 ) -> "ProfileCoverage":
        """Which layers of ``graph`` this table prices, tile by tile, as the cost model does.

        Parameters
        ----------
        graph : LayerGraph
        topology_or_configs : Topology, int or iterable of (layer or name, tile shape)
            The tiles a cost model will look up (:func:`needed_tiles`).
        options : ConfigOptions, optional
            Passed to :func:`needed_tiles`.

        Returns
        -------
        ProfileCoverage
            A layer is *matched* when every tile it needs was measured, *partial* when some
            were, *unmatched* when none was (priced by the estimate); ``input`` layers cost
            nothing and are in no list.
        """
        hits: dict[str, list[int]] = {}
        for layer, tile in needed_tiles(graph, topology_or_configs, options=options):
            rec = hits.setdefault(layer.name, [0, 0])
            rec[self.lookup(layer, tile, graph_inputs=graph_inputs_of(graph, layer))
                is None] += 1
        return ProfileCoverage.of(self, graph, hits)

    # ------------------------------------------------------------------ formats
    def to_dict(self) -> dict:
        """The JSON-ready document of the module docstring's format."""
        out = {"format": PROFILE_FORMAT, "version": PROFILE_FORMAT_VERSION,
               "dtype": self.dtype, "device": self.device, "meta": _jsonable(dict(self.meta)),
               "entries": [e.to_dict() for e in self.entries]}
        if self.optimizer is not None:
            out["optimizer"] = self.optimizer
        return out

    @classmethod
    def from_dict(cls, data: Mapping, *, source: str = "<dict>") -> "ProfileTable":
        """Read :meth:`to_dict`'s layout.

        Raises
        ------
        FormatError
            Not this format or version, an unknown key (at the top or in an entry: names it
            and the nearest known key), a missing field or one of the wrong type (names
            ``source`` and the field, e.g. ``entries[3].seconds``).
        """
        doc = read_document(source, PROFILE_FORMAT, PROFILE_FORMAT_VERSION, data=data,
                            what="profile table")
        f = Fields(source)
        f.keys(doc, _TABLE_KEYS, "", required=("entries",))
        dtype = _dtype(f, doc.get("dtype", "float32"), "dtype")
        device = _device(f, doc.get("device", "cpu"), "device")
        meta = f.mapping(doc.get("meta", {}), "meta")
        optimizer = doc.get("optimizer")
        if optimizer is not None and optimizer not in OPTIMIZERS:
            raise f.error("optimizer", f"{optimizer!r:.40} is not one of "
                                       f"{', '.join(OPTIMIZERS)}")
        entries = []
        for i, rec in enumerate(f.array(doc["entries"], "entries")):
            w = f"entries[{i}]"
            f.keys(rec, _ENTRY_KEYS, w, required=_ENTRY_KEYS - {"update_seconds"})
            op = f.string(rec["op"], f"{w}.op")
            if op not in OPS:
                raise f.error(f"{w}.op", f"{op!r:.40} is not a known op{suggest(op, OPS) or ';'}"
                                         f" known: {', '.join(OPS)}")
            tile = f.array(rec["tile_shape"], f"{w}.tile_shape")
            if not tile:
                raise f.error(f"{w}.tile_shape", "must not be empty (one extent per dim)")
            entries.append(ProfileEntry(
                op=op, signature=f.string(rec["signature"], f"{w}.signature"),
                tile_shape=tuple(f.integer(x, f"{w}.tile_shape[{j}]", minimum=1)
                                 for j, x in enumerate(tile)),
                dtype=_dtype(f, rec["dtype"], f"{w}.dtype"),
                device=_device(f, rec["device"], f"{w}.device"),
                seconds=f.number(rec["seconds"], f"{w}.seconds", finite=True, minimum=0),
                update_seconds=(None if "update_seconds" not in rec else f.number(
                    rec["update_seconds"], f"{w}.update_seconds", finite=True, minimum=0))))
        return cls(tuple(entries), dtype=dtype, device=device, meta=dict(meta),
                   optimizer=optimizer, source=source)

    def to_json(self, indent: int | None = None) -> str:
        """The table as JSON text (:meth:`to_dict`)."""
        return dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str, *, source: str = "<json>") -> "ProfileTable":
        """Parse :meth:`to_json`'s text (errors as :meth:`from_dict`)."""
        return cls.from_dict(loads(text, source=source, what="profile table"), source=source)

    def save(self, path: str | Path) -> None:
        """Write the table as JSON (gzip-compressed when the name ends in ``.gz``).

        Raises
        ------
        FileWriteError
            When ``path`` cannot be written (names it).
        """
        write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "ProfileTable":
        """Read a table written by :meth:`save` (gzip-compressed or not).

        Raises
        ------
        FormatError
            Missing, a directory, unreadable, binary, not JSON, not a profile table, an
            unknown key or a malformed field (names the file and the field).
        """
        return cls.from_dict(read_json(path, what="profile table file"), source=str(path))


@dataclass(frozen=True)
class ProfileCoverage:
    """Which layers of a graph a profile table priced: from the table or by the estimate.

    Made by :meth:`ProfileTable.coverage` (from the tiles a configuration space needs) and by
    ``CostModel.check_profile`` (from the cost model's own lookups, which
    :func:`~milp_parallel.build.build` runs on every profiled build and keeps as
    ``CostModel.profile_coverage``).

    Attributes
    ----------
    table : str
        The table's source (its file).
    graph : str
        The graph's name.
    matched : tuple of str
        Layers every tile of which was measured, in graph order: priced from the table.
    partial : tuple of str
        Layers some tiles of which were measured (the others priced by the estimate).
    unmatched : tuple of str
        Non-input layers no tile of which was measured: priced by the estimate only.
    entries : int
        The table's entry count.
    measured_for : str
        The graph the table was measured for (its ``meta["graph"]``), when known.
    """

    table: str
    graph: str
    matched: tuple[str, ...]
    partial: tuple[str, ...]
    unmatched: tuple[str, ...]
    entries: int = 0
    measured_for: str = ""

    @classmethod
    def of(cls, table: Any, graph: Any, hits: Mapping[str, Sequence[int]]
           ) -> "ProfileCoverage":
        """From ``{layer name: (tiles measured, tiles estimated)}`` of ``graph``'s layers."""
        groups: tuple[list, list, list] = ([], [], [])
        for layer in graph.layers:
            if layer.op == "input":
                continue
            hit, miss = hits.get(layer.name, (0, 0))
            groups[0 if hit and not miss else 1 if hit else 2].append(layer.name)
        meta = getattr(table, "meta", {}) or {}
        return cls(str(getattr(table, "source", "<table>")), str(getattr(graph, "name", "")),
                   *map(tuple, groups), entries=len(getattr(table, "entries", ())),
                   measured_for=str(meta.get("graph", "") or ""))

    @property
    def complete(self) -> bool:
        """Every non-input layer is priced from the table, every tile of it."""
        return not self.partial and not self.unmatched

    @property
    def fraction(self) -> float:
        """Layers with a measured tile / non-input layers (1.0 for inputs only)."""
        n = len(self.matched) + len(self.partial) + len(self.unmatched)
        return (len(self.matched) + len(self.partial)) / n if n else 1.0

    def check(self) -> "ProfileCoverage":
        """Refuse a table that priced no layer; log a warning when it priced only some.

        The warning is logged once per table, graph and unmatched layers.

        Raises
        ------
        InvalidOptionError
            When the graph has layers to price and no tile of any was measured: names the
            table, its entry count, the graph it was measured for, this graph and a few of
            its layers.
        """
        if self.unmatched and not (self.matched or self.partial):
            raise InvalidOptionError(
                f"profile table {self.table} ({self.entries} entries, measured for "
                f"{self.measured_for or 'another graph'!r}) prices no layer of graph "
                f"{self.graph or '<unnamed>'!r} ({len(self.unmatched)} layers, none measured: "
                f"{_few(self.unmatched)}); every layer would be priced by the estimate. "
                "Profile this model on this cluster at this batch size (milp-parallel "
                "profile MODEL --cluster NAME --out FILE; tile shapes include the batch) or "
                "leave the profile out")
        if not self.complete:
            key = (self.table, self.graph, self.partial, self.unmatched)
            if key not in _WARNED:
                _WARNED.add(key)
                logger.warning("%s", self)
        return self

    def __str__(self) -> str:
        n = len(self.matched) + len(self.partial) + len(self.unmatched)
        text = (f"profile table {self.table} prices {len(self.matched)} of {n} layers of graph "
                f"{self.graph or '<unnamed>'!r} from measurements")
        if self.partial:
            text += f"; {len(self.partial)} in part ({_few(self.partial)})"
        if self.unmatched:
            text += (f"; {len(self.unmatched)} by the estimate only (no measured tile): "
                     f"{_few(self.unmatched)}")
        return text


#: The keys of a profile document and of one entry.
_TABLE_KEYS = frozenset({"format", "version", "dtype", "device", "meta", "entries",
                         "optimizer"})
_ENTRY_KEYS = frozenset({"op", "signature", "tile_shape", "dtype", "device", "seconds",
                         "update_seconds"})
#: (table, graph, partial, unmatched) of the partial matches already logged.
_WARNED: set = set()


def _dtype(f: Fields, v: Any, where: str) -> str:
    if v not in _DTYPES:
        raise f.error(where, f"must be one of {', '.join(_DTYPES)}, got {describe_type(v)}"
                             f"{suggest(v, _DTYPES) if isinstance(v, str) else ''}")
    return v


def _device(f: Fields, v: Any, where: str) -> str:
    v = f.string(v, where)
    if not (v == "cpu" or v == "cuda" or (v.startswith("cuda:") and v[5:].isdigit())):
        raise f.error(where, f"must be 'cpu', 'cuda' or 'cuda:<index>', got {v!r:.40}")
    return v


def _few(names: Sequence[str], k: int = 5) -> str:
    shown = ", ".join(names[:k])
    return shown + (f", ... ({len(names) - k} more)" if len(names) > k else "")


# ----------------------------------------------------------------------------- tiles
def needed_tiles(graph: Any, topology_or_configs: Any, *, options: Any = None
                 ) -> list[tuple[Any, tuple[int, ...]]]:
    """The distinct ``(layer, tile shape)`` pairs a cost model will look up.

    Parameters
    ----------
    graph : LayerGraph
    topology_or_configs : Topology, int or iterable of (layer or name, tile shape)
        A topology (its device count) or a device count: every configuration of every
        non-input layer (:func:`milp_parallel.configs.enumerate_configs`), tile
        ``ceil(output_shape / degrees)``. Or an explicit list of pairs.
    options : ConfigOptions, optional
        Passed to ``enumerate_configs``.

    Returns
    -------
    list of (Layer, tuple of int)
        Without duplicates, in graph order.
    """
    if isinstance(topology_or_configs, (int, np.integer)) or hasattr(
            topology_or_configs, "n_devices"):
        from ..costs.configs import enumerate_configs, tile_extent

        n = int(getattr(topology_or_configs, "n_devices", topology_or_configs))
        pairs = []
        for layer in graph.layers:
            if layer.op == "input":
                continue
            cfg = enumerate_configs(layer, n, options=options)
            ext = np.unique(tile_extent(np.asarray(layer.output_shape), cfg), axis=0)
            pairs += [(layer, tuple(int(x) for x in row)) for row in ext]
        return pairs
    pairs, seen = [], set()
    for item in topology_or_configs:
        try:
            who, tile = item
        except (TypeError, ValueError):
            raise InvalidGraphError(f"expected (layer, tile_shape) pairs, got {item!r}") from None
        layer = graph.layer(who) if isinstance(who, str) else who
        key = (layer.name, tuple(int(x) for x in tile))
        if key not in seen:
            seen.add(key)
            pairs.append((layer, _check_tile(layer, tile)))
    return pairs


# ----------------------------------------------------------------------------- timing
def _device_name(torch: Any, device: str) -> str:
    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or platform.machine()


def profile_layers(graph: Any, topology_or_configs: Any, *, device: str = "cpu",
                   repeats: int = 5, warmup: int = 2, dtype: str = "float32",
                   options: Any = None, table: ProfileTable | None = None,
                   threads: int | None = None, optimizer: str | None = "adam"
                   ) -> ProfileTable:
    """Time forward+backward of every needed (layer, tile shape) with torch, and the
    optimizer step of each tile's weight shard.

    Parameters
    ----------
    graph : LayerGraph
    topology_or_configs : Topology, int or iterable of (layer or name, tile shape)
        What to measure, see :func:`needed_tiles`.
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:1"``...
    repeats, warmup : int
        Timed runs (the median is kept) and untimed runs before them, per entry.
    dtype : {"float32", "float16", "bfloat16", "float64"}
    options : ConfigOptions, optional
        For enumerating configurations.
    table : ProfileTable, optional
        Entries already measured (same dtype and device) are reused, not re-timed.
    threads : int, optional
        CPU threads torch may use while timing (``torch.set_num_threads``, restored
        afterwards); default: torch's current setting. One thread gives the steadiest
        numbers on a shared machine.
    optimizer : {"adam", "momentum", "sgd"} or None, default "adam"
        Also time what each tile's weight shard adds to this optimizer's ``step()``, built
        as a training script builds it
        (:func:`~milp_parallel.measure.operators.update_seconds`), into the entries'
        ``update_seconds``; a cost model with the same optimizer state
        prices its updates by them. None: time no update (the estimate prices it).

    Returns
    -------
    ProfileTable
        One entry per distinct key; ``meta`` records the device name, torch version,
        thread count, repeats and warmup. Tiles whose operator cannot be built or run are
        skipped with a warning (their lookups fall back to the estimate).

    Raises
    ------
    MissingDependencyError
        Without torch (``pip install milp_parallel[torch]``).
    InvalidGraphError
        Bad ``repeats``/``warmup``/``dtype``/``device`` or tile shapes.
    InvalidOptionError
        An unknown ``optimizer``, or a ``table`` whose updates another optimizer timed.
    """
    torch = require("torch", "torch", "profile_layers()")
    if optimizer is not None and optimizer not in OPTIMIZERS:
        raise InvalidOptionError(f"profile_layers(optimizer={optimizer!r}): expected one of "
                                 f"{', '.join(OPTIMIZERS)} or None")
    if table is not None and None not in (table.optimizer, optimizer) and \
            table.optimizer != optimizer:
        raise InvalidOptionError(f"profile_layers(optimizer={optimizer!r}): the table's "
                                 f"updates were timed with {table.optimizer!r}; pass that "
                                 "optimizer or no table")
    if dtype not in _DTYPES:
        raise InvalidGraphError(f"profile dtype {dtype!r} is not one of {_DTYPES}")
    if int(repeats) < 1 or int(warmup) < 0:
        raise InvalidGraphError(f"repeats={repeats} must be >= 1 and warmup={warmup} >= 0")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidGraphError(f"device {device!r} asked for but torch.cuda is not "
                                f"available; use device='cpu'")
    if not (device == "cpu" or device.startswith("cuda")):
        raise InvalidGraphError(f"device {device!r}: use 'cpu' or 'cuda[:i]'")
    tdtype = getattr(torch, dtype)
    done = dict(table._index) if table is not None else {}
    entries = list(table.entries) if table is not None else []
    pairs = needed_tiles(graph, topology_or_configs, options=options)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        if int(threads) < 1:
            raise InvalidGraphError(f"threads={threads} must be >= 1")
        torch.set_num_threads(int(threads))
    try:
        entries = _measure(torch, graph, pairs, done, entries, tdtype, dtype, device,
                           int(repeats), int(warmup), optimizer)
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(saved_threads)
    meta = {"device_name": _device_name(torch, device), "torch_version": torch.__version__,
            "threads": used_threads, "repeats": int(repeats),
            "warmup": int(warmup), "graph": getattr(graph, "name", "")}
    return ProfileTable(tuple(entries), dtype=dtype, device=device, meta=meta,
                        optimizer=optimizer if optimizer is not None else (
                            table.optimizer if table is not None else None))


def _measure(torch, graph, pairs, done, entries, tdtype, dtype, device, repeats, warmup,
             optimizer):
    for layer, tile in pairs:
        gi = graph_inputs_of(graph, layer)
        key = (layer.op, layer_signature(layer, tile, gi), tile, dtype, device)
        if key in done:
            continue
        try:
            run = tile_runner(torch, layer, tile, tdtype, device, graph_inputs=gi)
            if run is None:
                logger.warning("profile: op %r of layer %r has no torch operator; skipped",
                               layer.op, layer.name)
                continue
            seconds = median_seconds(torch, run, repeats, warmup, device)
            update = (None if optimizer is None else update_seconds(
                torch, layer, tile, tdtype, device, optimizer, repeats, warmup))
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            logger.warning("profile: layer %r tile %s could not be timed (%s); its lookups "
                           "fall back to the estimate", layer.name, tile, exc)
            continue
        done[key] = seconds
        entries.append(ProfileEntry(*key, seconds=seconds, update_seconds=update))
        logger.debug("profile: %s %s tile %s: %.3g s", layer.name, layer.op, tile, seconds)
    return entries


def profile_model(model: Any, cluster: Any, out_path: str | Path | None = None, *,
                  nodes: int | None = None, devices: int | None = None,
                  batch_size: int | None = None, device: str = "cpu", repeats: int = 5,
                  warmup: int = 2, dtype: str = "float32", options: Any = None,
                  threads: int | None = None) -> ProfileTable:
    """Profile a zoo model (or graph) for a preset cluster (or topology); save the table.

    The API behind ``milp-parallel profile MODEL --cluster NAME --out profile.json``.

    Parameters
    ----------
    model : str or LayerGraph
        A zoo name (:func:`milp_parallel.models.get`) or a graph.
    cluster : str or Topology
        A preset name (:func:`milp_parallel.clusters.get`) or a topology.
    out_path : path, optional
        Where to write the table's JSON.
    nodes : int, optional
        Nodes of the preset cluster.
    devices : int, optional
        Use only the first ``devices`` devices (``Topology.with_devices``).
    batch_size : int, optional
        Rebatch the graph (``LayerGraph.with_batch_size``).
    device, repeats, warmup, dtype, options, threads
        As :func:`profile_layers`.

    Returns
    -------
    ProfileTable
    """
    if isinstance(model, str):
        from .. import models

        graph = models.get(model) if batch_size is None else models.get(model,
                                                                         batch_size=batch_size)
    else:
        graph = model
    if batch_size is not None and graph.batch_size != batch_size:
        graph = graph.with_batch_size(batch_size)
    if isinstance(cluster, str):
        from ..machine import clusters

        topology = clusters.get(cluster, nodes)
    else:
        topology = cluster
    if devices is not None:
        topology = topology.with_devices(int(devices))
    table = profile_layers(graph, topology, device=device, repeats=repeats, warmup=warmup,
                           dtype=dtype, options=options, threads=threads)
    if out_path is not None:
        table.save(out_path)
    return table
