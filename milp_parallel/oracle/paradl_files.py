"""Readers for ParaDL's input files: layer tables, platform files and per-layer masks.

ParaDL (Kahira et al., HPDC 2021; public repository TruongThaoNguyen/paraDL-analysis) describes
a network as a ``|``-separated table (``*.net``, ``*.net_sc``)::

    Dataset|ImageNet
    Input|1280000x3x226x226            # N x C x W x H [x D]
    Model|ResNet50
    CONV_1|3x226x226|3x64x7x7|64x113x113|0.003119502
    #  comment lines start with '#'
    NAME|input CxWxH|weights CxFxKxK|output FxWxH[|t]

3-D models add one dimension to every shape. The layer kind comes from the name's prefix
(:data:`LAYER_KINDS`). ``t`` is a time in seconds; in ``*_profall.net_sc`` files only the first
row has a non-zero ``t``, the measured forward+backward time of one sample through the whole
model, which the oracle spreads over layers in proportion to :meth:`NetTable.flops`.

A platform file (``*.plat``) has six ``KEY|value|unit`` lines (memory per GPU, speed, bandwidth,
latency, maximum GPUs, GPUs per node); a mask file (``*.lc``) has one ``[index] NAME|0 or 1``
line per layer, 1 meaning the strategy applies to that layer.

Platform units
--------------
A value is scaled by its unit (:data:`PLATFORM_UNITS`); ParaDL's own files write base units
(``MEM_PER_NODE|16e9|Bytes``, ``NODE_SPEED|7.8E12|FLOPS``, ``BANDWIDTH|12.5E9|Bps``,
``LATENCY|500E-9|second``, ``MAX_NODE|4096|GPUs``), and a bare number (no unit) is in those
base units too. ``KB MB GB TB`` are powers of 1000 and ``KiB MiB GiB TiB`` of 1024
(``MEM_PER_NODE|16|GB`` is 16e9 bytes); ``Gbps`` / ``Gb/s`` are bits. An unknown key, an
unknown unit (for that key), a repeated key or a line with more than three fields is refused
with a :class:`~milp_parallel.errors.FormatError` naming the file, the line and the field, with
the nearest known spelling.

Examples
--------
>>> t = parse_net('''Dataset|Toy
... Input|100x3x8x8
... Model|Tiny
... CONV1|3x8x8|3x4x3x3|4x8x8|0.001
... RELU|4x8x8|4x4x0x0|4x8x8|0''')
>>> t.n_layers, t.kinds, int(t.w_elems.sum())
(2, ('CONV', 'RELU'), 108)
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import FormatError, InvalidGraphError
from ..io import read_text, suggest

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import LayerGraph

__all__ = [
    "LAYER_KINDS",
    "NetTable",
    "Platform",
    "PLATFORM_UNITS",
    "parse_net",
    "read_net",
    "parse_platform",
    "read_platform",
    "parse_mask",
    "read_mask",
    "to_layer_graph",
]

logger = logging.getLogger(__name__)

#: Layer kinds, recognised from the start of a layer's name (longest first where they overlap).
LAYER_KINDS = ("CONV", "BNORM", "RELU", "MPOOL", "APOOL", "ADD", "FC", "DROPOUT")

_DIMS_RE = re.compile(r"^\d+(x\d+)*$")


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class NetTable:
    """A ParaDL layer table: one row per layer, shapes as integer numpy arrays.

    Attributes
    ----------
    dataset : str
        The dataset's name (``Dataset|`` line).
    dataset_size : int
        Number of samples in the dataset (first number of the ``Input|`` line).
    sample_shape : tuple of int
        One sample's shape, ``(C, W, H[, D])``.
    model : str
        The model's name (``Model|`` line).
    names : tuple of str
        Layer names, in file order.
    kinds : tuple of str
        Each layer's kind, one of :data:`LAYER_KINDS`.
    x_shapes, y_shapes : numpy.ndarray
        ``(L, 1 + s)`` int arrays: input ``C x W x H[x D]`` and output ``F x W x H[x D]``.
    w_shapes : numpy.ndarray
        ``(L, 2 + s)`` int array: ``C x F x K x K[x K]`` (zeros for layers without weights).
    t_seconds : numpy.ndarray
        ``(L,)`` float: the row's ``t`` column, ``nan`` where the row has none.
    source : str
        Where the table came from (a path, or ``"<string>"``).
    """

    dataset: str
    dataset_size: int
    sample_shape: tuple[int, ...]
    model: str
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    x_shapes: np.ndarray
    w_shapes: np.ndarray
    y_shapes: np.ndarray
    t_seconds: np.ndarray
    source: str = "<string>"

    @property
    def n_layers(self) -> int:
        """Number of layers (rows)."""
        return len(self.names)

    @property
    def spatial_ndim(self) -> int:
        """Number of spatial dimensions: 2 for images, 3 for volumes."""
        return int(self.x_shapes.shape[1]) - 1

    @property
    def x_elems(self) -> np.ndarray:
        """Elements of each layer's input for one sample, ``|x_l|`` (int64)."""
        return np.prod(self.x_shapes, axis=1)

    @property
    def y_elems(self) -> np.ndarray:
        """Elements of each layer's output for one sample, ``|y_l|`` (int64)."""
        return np.prod(self.y_shapes, axis=1)

    @property
    def w_elems(self) -> np.ndarray:
        """Weights of each layer, ``|w_l|`` = product of the weight shape (int64)."""
        return np.prod(self.w_shapes, axis=1)

    @property
    def has_time(self) -> np.ndarray:
        """Boolean mask of the rows that carry a ``t`` column."""
        return ~np.isnan(self.t_seconds)

    def forward_flops(self) -> np.ndarray:
        """ParaDL's forward FLOPs of one sample per layer (float64).

        ``2*C*F*prod(K)*prod(Y)`` for CONV, ``C*F*prod(K)*prod(Y)`` for pools (with ParaDL's
        ``C`` and ``F`` = input and output channels), ``|y|`` for RELU and ADD, ``|w|`` for FC,
        ``4|x|`` for BNORM and 0 for DROPOUT.
        """
        kinds = np.asarray(self.kinds)
        w = self.w_shapes.astype(np.float64)
        y_sp = self.y_shapes[:, 1:].astype(np.float64)
        k_times_y = np.prod(w[:, 2:] * y_sp, axis=1)
        conv = 2.0 * w[:, 0] * w[:, 1] * k_times_y
        pool = self.x_shapes[:, 0] * self.y_shapes[:, 0] * k_times_y
        fw = np.zeros(self.n_layers)
        fw = np.where(kinds == "CONV", conv, fw)
        fw = np.where((kinds == "MPOOL") | (kinds == "APOOL"), pool, fw)
        fw = np.where((kinds == "RELU") | (kinds == "ADD"), self.y_elems, fw)
        fw = np.where(kinds == "FC", self.w_elems, fw)
        fw = np.where(kinds == "BNORM", 4.0 * self.x_elems, fw)
        return fw

    def flops(self) -> np.ndarray:
        """ParaDL's training FLOPs of one sample per layer: ``2 * forward + |w|``.

        The factor 2 stands for the forward pass plus the activation gradient; ``|w|`` for the
        weight gradient. This is the weight ParaDL spreads the measured time by.
        """
        return 2.0 * self.forward_flops() + self.w_elems

    def layer_seconds(self, speed_flops: float) -> np.ndarray:
        """Per-sample forward+backward seconds of each layer, spread as ParaDL does.

        Rows without a ``t`` column get ``flops / speed_flops``; the total of all rows (given
        ``t`` plus estimated ones) is then spread over all layers in proportion to
        :meth:`flops`.

        Parameters
        ----------
        speed_flops : float
            Device speed used for rows without ``t``.

        Returns
        -------
        numpy.ndarray
            ``(L,)`` seconds per sample, summing to the table's total time.
        """
        fl = self.flops()
        own = np.where(self.has_time, np.nan_to_num(self.t_seconds), fl / speed_flops)
        total = float(np.sum(own))
        total_flops = float(np.sum(fl))
        if total_flops <= 0:
            return own
        return fl * (total / total_flops)

    def __repr__(self) -> str:
        return (f"NetTable(model={self.model!r}, layers={self.n_layers}, "
                f"dataset={self.dataset!r} x{self.dataset_size}, source={self.source!r})")


@dataclass(frozen=True)
class Platform:
    """A ParaDL platform file (``*.plat``).

    Attributes
    ----------
    memory_bytes : float
        Memory per GPU (``MEM_PER_NODE``).
    speed_flops : float
        Compute speed per GPU in FLOP/s (``NODE_SPEED``).
    bandwidth_bytes_per_s : float
        Link bandwidth (``BANDWIDTH``; ParaDL's ABCI model ignores it, see oracle).
    latency_s : float
        Link latency (``LATENCY``; likewise ignored by ParaDL's ABCI model).
    max_devices : int
        Largest GPU count (``MAX_NODE``).
    devices_per_node : int
        GPUs per node (``GPU_PER_NODE``).
    name : str
        The file it came from.
    """

    memory_bytes: float
    speed_flops: float
    bandwidth_bytes_per_s: float
    latency_s: float
    max_devices: int
    devices_per_node: int
    name: str = "<string>"


def _fail(source: str, lineno: int, what: str) -> FormatError:
    return FormatError(f"{source}, line {lineno}: {what}")


#: The largest number a shape may hold (beyond it the oracle's int64 arithmetic overflows).
_MAX_DIM = 2**40


def _dims(source: str, lineno: int, text: str, what: str, *, positive: bool = True
          ) -> list[int]:
    t = text.strip()
    if not _DIMS_RE.match(t):
        raise _fail(source, lineno, f"{what} {text!r:.60} is not a shape like 3x226x226 "
                                    "(positive integers joined by 'x')")
    parts = t.split("x")
    if any(len(v.lstrip("0")) > 13 for v in parts) or any(int(v) > _MAX_DIM for v in parts):
        raise _fail(source, lineno, f"{what} {text!r:.60} holds a number beyond {_MAX_DIM} "
                                    "(2**40)")
    dims = [int(v) for v in parts]
    if positive and 0 in dims:
        raise _fail(source, lineno, f"{what} {text!r} has a zero dimension; every dimension of "
                                    "an input or output shape must be >= 1")
    return dims


def _kind_of(name: str) -> str | None:
    for kind in sorted(LAYER_KINDS, key=len, reverse=True):
        if name.upper().startswith(kind):
            return kind
    return None


def parse_net(text: str, source: str = "<string>") -> NetTable:
    """Parse the text of a ParaDL layer table.

    Parameters
    ----------
    text : str
        The file's content.
    source : str, optional
        Name used in error messages (a path).

    Returns
    -------
    NetTable

    Raises
    ------
    FormatError
        On a missing or malformed header, a row with the wrong number of fields, a shape that
        is not ``AxBxC``, inconsistent shape ranks, an unknown layer kind or a bad ``t``; the
        message names the source and the line number.

    Examples
    --------
    >>> parse_net("Dataset|D\\nInput|10x1x4x4\\nModel|M\\nFC1|1x4x4|16x2x1x1|2x1x1").n_layers
    1
    """
    header: dict[str, tuple[int, str]] = {}
    names: list[str] = []
    kinds: list[str] = []
    xs: list[list[int]] = []
    ws: list[list[int]] = []
    ys: list[list[int]] = []
    ts: list[float] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        key = fields[0]
        if key in _NET_HEADER:
            if key in header:
                raise _fail(source, lineno, f"second {key}| line (first on line "
                                            f"{header[key][0]})")
            if len(fields) < 2 or not fields[1]:
                raise _fail(source, lineno, f"{key}| line has no value")
            if names:
                raise _fail(source, lineno, f"{key}| line after the first layer row; "
                                            "header lines come first")
            header[key] = (lineno, fields[1])
            continue
        if len(fields) == 2 and _kind_of(key) is None:
            raise _fail(source, lineno, f"unknown header key {key!r}"
                                        f"{suggest(key, _NET_HEADER) or ';'} a header line is "
                                        f"one of {', '.join(k + '|...' for k in _NET_HEADER)}")
        if len(fields) not in (4, 5):
            raise _fail(source, lineno, f"layer row has {len(fields)} '|'-separated fields; "
                                        "expected NAME|x|w|y or NAME|x|w|y|t")
        kind = _kind_of(key)
        if kind is None:
            raise _fail(source, lineno, f"unknown layer kind in name {key!r}"
                                        f"{suggest(key.rstrip('0123456789_'), LAYER_KINDS) or ';'}"
                                        f" names must start with one of {', '.join(LAYER_KINDS)}")
        x = _dims(source, lineno, fields[1], "input shape")
        w = _dims(source, lineno, fields[2], "weight shape", positive=False)
        y = _dims(source, lineno, fields[3], "output shape")
        if len(x) < 2 or len(y) != len(x) or len(w) != len(x) + 1:
            raise _fail(source, lineno, f"shape ranks do not fit: input {fields[1]} and output "
                                        f"{fields[3]} need the same rank >= 2 and weights "
                                        f"{fields[2]} one more")
        if xs and len(x) != len(xs[0]):
            raise _fail(source, lineno, f"rank {len(x)} differs from the first row's "
                                        f"{len(xs[0])}; a table is all 2-D or all 3-D")
        t = math.nan
        if len(fields) == 5:
            try:
                t = float(fields[4])
            except ValueError:
                raise _fail(source, lineno, f"time {fields[4]!r} is not a number") from None
            if not math.isfinite(t) or t < 0:
                raise _fail(source, lineno, f"time {fields[4]!r} must be finite and >= 0")
        names.append(key)
        kinds.append(kind)
        xs.append(x)
        ws.append(w)
        ys.append(y)
        ts.append(t)
    for key in ("Dataset", "Input", "Model"):
        if key not in header:
            raise FormatError(f"{source}: no {key}| header line; a ParaDL table starts with "
                              "Dataset|NAME, Input|NxCxWxH and Model|NAME")
    if not names:
        raise FormatError(f"{source}: no layer rows")
    in_line, in_text = header["Input"]
    dims = _dims(source, in_line, in_text, "Input")
    if len(dims) != len(xs[0]) + 1:
        raise _fail(source, in_line, f"Input {in_text} must be N x (the first layer's input "
                                     "shape rank) numbers")
    return NetTable(
        dataset=header["Dataset"][1],
        dataset_size=dims[0],
        sample_shape=tuple(dims[1:]),
        model=header["Model"][1],
        names=tuple(names),
        kinds=tuple(kinds),
        x_shapes=_readonly(np.array(xs, dtype=np.int64)),
        w_shapes=_readonly(np.array(ws, dtype=np.int64)),
        y_shapes=_readonly(np.array(ys, dtype=np.int64)),
        t_seconds=_readonly(np.array(ts, dtype=np.float64)),
        source=source,
    )


def read_net(path: str | Path) -> NetTable:
    """Read a ParaDL layer table (``*.net``, ``*.net_sc``) from a file.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    NetTable

    Raises
    ------
    FormatError
        As :func:`parse_net`, naming the file.
    """
    p = Path(path)
    return parse_net(read_text(p, what="ParaDL layer table (.net)"), source=str(p))


_NET_HEADER = ("Dataset", "Input", "Model")
_PLAT_KEYS = ("MEM_PER_NODE", "NODE_SPEED", "BANDWIDTH", "LATENCY", "MAX_NODE", "GPU_PER_NODE")

_BYTES = {"B": 1.0, "Byte": 1.0, "Bytes": 1.0, "byte": 1.0, "bytes": 1.0,
          "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}
_COUNT = {"GPU": 1.0, "GPUs": 1.0, "gpu": 1.0, "gpus": 1.0}

#: The units each platform key accepts, with the factor to its base unit (bytes, FLOP/s,
#: bytes/s, seconds, GPUs). A bare number is in the base unit.
PLATFORM_UNITS: dict[str, dict[str, float]] = {
    "MEM_PER_NODE": _BYTES,
    "NODE_SPEED": {"FLOPS": 1.0, "FLOP/s": 1.0, "flops": 1.0, "GFLOPS": 1e9, "TFLOPS": 1e12,
                   "PFLOPS": 1e15, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15},
    "BANDWIDTH": {**{f"{u}/s": f for u, f in _BYTES.items()},
                  **{f"{u}ps": f for u, f in _BYTES.items() if u[-1] == "B"},
                  "bps": 1 / 8, "Kbps": 1e3 / 8, "Mbps": 1e6 / 8, "Gbps": 1e9 / 8,
                  "Tbps": 1e12 / 8, "Gb/s": 1e9 / 8, "Mb/s": 1e6 / 8},
    "LATENCY": {"s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3,
                "us": 1e-6, "\u00b5s": 1e-6, "ns": 1e-9},
    "MAX_NODE": _COUNT,
    "GPU_PER_NODE": _COUNT,
}


def parse_platform(text: str, source: str = "<string>") -> Platform:
    """Parse a ParaDL platform file's text.

    Parameters
    ----------
    text : str
    source : str, optional
        Name used in error messages and as :attr:`Platform.name`.

    Returns
    -------
    Platform

    Raises
    ------
    FormatError
        On an unknown, repeated or missing key, an unknown unit, a line of more than three
        fields, or a value that is not a positive number (a whole one for GPU counts); names
        the file, the line and the field.

    Examples
    --------
    >>> parse_platform("MEM_PER_NODE|16e9\\nNODE_SPEED|7.8E12\\nBANDWIDTH|12.5E9\\n"
    ...                "LATENCY|500E-9\\nMAX_NODE|4096\\nGPU_PER_NODE|4").devices_per_node
    4
    >>> parse_platform("MEM_PER_NODE|16|GB\\nNODE_SPEED|7.8|TFLOPS\\nBANDWIDTH|100|Gbps\\n"
    ...                "LATENCY|0.5|us\\nMAX_NODE|4096|GPUs\\nGPU_PER_NODE|4").memory_bytes
    16000000000.0
    """
    values: dict[str, float] = {}
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        key = fields[0]
        if key not in _PLAT_KEYS:
            raise _fail(source, lineno, f"unknown key {key!r:.40}{suggest(key, _PLAT_KEYS) or ';'}"
                                        f" expected one of {', '.join(_PLAT_KEYS)}")
        if key in seen:
            raise _fail(source, lineno, f"second {key} line (first on line {seen[key]})")
        seen[key] = lineno
        if len(fields) < 2 or not fields[1]:
            raise _fail(source, lineno, f"{key} has no value (KEY|value|unit)")
        if len(fields) > 3:
            raise _fail(source, lineno, f"{key} line has {len(fields)} '|'-separated fields; "
                                        "expected KEY|value|unit (the unit may be left out)")
        try:
            v = float(fields[1])
        except ValueError:
            raise _fail(source, lineno, f"{key} value {fields[1]!r:.40} is not a "
                                        "number") from None
        unit = fields[2] if len(fields) == 3 else ""
        units = PLATFORM_UNITS[key]
        if unit:
            if unit not in units:
                raise _fail(source, lineno, f"{key} unit {unit!r:.40} is not known"
                                            f"{suggest(unit, units) or ';'} known: "
                                            f"{', '.join(units)} (or none: the base unit)")
            v *= units[unit]
        if not (math.isfinite(v) and v > 0):
            raise _fail(source, lineno, f"{key} must be a positive number, got {fields[1]!r}")
        if key in ("MAX_NODE", "GPU_PER_NODE") and (v != int(v) or v > _MAX_DIM):
            raise _fail(source, lineno, f"{key} must be a whole number of GPUs >= 1, got "
                                        f"{fields[1]!r}")
        values[key] = v
    missing = [k for k in _PLAT_KEYS if k not in values]
    if missing:
        raise FormatError(f"{source}: missing {', '.join(missing)} (a .plat file has the "
                          f"lines {', '.join(_PLAT_KEYS)})")
    return Platform(
        memory_bytes=values["MEM_PER_NODE"],
        speed_flops=values["NODE_SPEED"],
        bandwidth_bytes_per_s=values["BANDWIDTH"],
        latency_s=values["LATENCY"],
        max_devices=int(values["MAX_NODE"]),
        devices_per_node=int(values["GPU_PER_NODE"]),
        name=source,
    )


def read_platform(path: str | Path) -> Platform:
    """Read a ParaDL platform file (``*.plat``). See :func:`parse_platform`."""
    p = Path(path)
    return parse_platform(read_text(p, what="ParaDL platform file (.plat)"), source=str(p))


def parse_mask(text: str, source: str = "<string>", *,
               names: tuple[str, ...] | None = None) -> np.ndarray:
    """Parse a ParaDL per-layer mask (``*.lc``): one ``[index] NAME|0 or 1`` line per layer.

    Parameters
    ----------
    text : str
    source : str, optional
        Name used in error messages.
    names : tuple of str, optional
        The table's layer names; when given, the mask must have one line per layer and each
        line's name must match (the index, when present, must be the row number).

    Returns
    -------
    numpy.ndarray
        Read-only bool array, ``True`` where the strategy applies.

    Raises
    ------
    FormatError
        On a line without ``|``, a value other than 0 or 1, or a mismatch with ``names``.

    Examples
    --------
    >>> parse_mask("0 CONV1 |1\\n1 RELU |0").tolist()
    [True, False]
    """
    values: list[bool] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 2 or fields[1] not in ("0", "1"):
            raise _fail(source, lineno, f"expected '[index] NAME|0' or '[index] NAME|1', got "
                                        f"{line!r}")
        label = fields[0].split()
        if names is not None:
            i = len(values)
            if i >= len(names):
                raise _fail(source, lineno, f"more mask lines than the table's {len(names)} "
                                            "layers")
            name = label[-1] if label else ""
            if len(label) == 2 and label[0] != str(i):
                raise _fail(source, lineno, f"index {label[0]} should be {i}")
            if name != names[i]:
                raise _fail(source, lineno, f"layer {name!r} does not match the table's layer "
                                            f"{i} {names[i]!r}")
        values.append(fields[1] == "1")
    if names is not None and len(values) != len(names):
        raise FormatError(f"{source}: {len(values)} mask lines for a table of {len(names)} "
                          "layers")
    return _readonly(np.array(values, dtype=bool))


def read_mask(path: str | Path, *, names: tuple[str, ...] | None = None) -> np.ndarray:
    """Read a ParaDL per-layer mask file (``*.lc``). See :func:`parse_mask`."""
    p = Path(path)
    return parse_mask(read_text(p, what="ParaDL layer mask (.lc)"), source=str(p), names=names)


def to_layer_graph(table: NetTable, *, batch_size: int = 1) -> "LayerGraph":
    """Convert a ParaDL table into a :class:`milp_parallel.graph.LayerGraph` chain.

    ParaDL tables have no edges; rows are chained in file order, except that an ``ADD`` row
    adds its predecessor to the input of the residual block it closes (the most recent
    earlier tensor of the same shape that is not in the current block's path), as in
    ResNet. Shapes come from the table; strides and paddings are inferred from the input
    and output widths.

    Parameters
    ----------
    table : NetTable
    batch_size : int, optional
        Batch size of the graph's input.

    Returns
    -------
    LayerGraph

    Raises
    ------
    InvalidGraphError
        When a row's shape cannot be produced by the corresponding LayerGraph operation.
    """
    from .. import graph as _graph  # late import: graph is a sibling stage

    g = _graph.LayerGraph()
    x0 = tuple(int(v) for v in table.x_shapes[0])
    prev = g.input("input", (batch_size, *x0))
    # tensors by shape, most recent last, for wiring ADD's skip input
    produced: list[tuple[str, tuple[int, ...]]] = [(prev, x0)]
    block_start: str = prev
    used: set[str] = set()
    for i, (name, kind) in enumerate(zip(table.names, table.kinds)):
        lname = f"{i}_{name}"
        x = tuple(int(v) for v in table.x_shapes[i])
        w = tuple(int(v) for v in table.w_shapes[i])
        y = tuple(int(v) for v in table.y_shapes[i])
        if kind == "CONV":
            k = w[2:]
            stride = tuple(max(1, round(xi / yi)) if yi else 1 for xi, yi in zip(x[1:], y[1:]))
            pad = tuple(max(0, math.ceil(((yi - 1) * s + ki - xi) / 2))
                        for xi, yi, ki, s in zip(x[1:], y[1:], k, stride))
            if k[0] == 1 and all(s > 1 for s in stride):
                pad = tuple(0 for _ in k)
            prev = g.conv(lname, prev, w[1], k if len(set(k)) > 1 else k[0],
                          stride=stride if len(set(stride)) > 1 else stride[0],
                          padding=pad if len(set(pad)) > 1 else pad[0], bias=False)
            block_start = produced[-1][0] if produced else prev
        elif kind in ("MPOOL", "APOOL"):
            k = w[2:]
            if all(yi == 1 for yi in y[1:]) and tuple(x[1:]) == tuple(k):
                prev = g.global_pool(lname, prev, kind="max" if kind == "MPOOL" else "avg")
            else:
                stride = tuple(max(1, round(xi / yi)) for xi, yi in zip(x[1:], y[1:]))
                pad = tuple(max(0, math.ceil(((yi - 1) * s + ki - xi) / 2))
                            for xi, yi, ki, s in zip(x[1:], y[1:], k, stride))
                prev = g.pool(lname, prev, k[0], kind="max" if kind == "MPOOL" else "avg",
                              stride=stride[0], padding=pad[0])
        elif kind == "FC":
            if len(g.layer(prev).output_shape) > 2:
                prev = g.flatten(f"{i}_flatten", prev)
            prev = g.linear(lname, prev, w[1], bias=False)
        elif kind == "BNORM":
            prev = g.batchnorm(lname, prev)
        elif kind == "RELU":
            prev = g.elementwise(lname, prev, fn="relu")
        elif kind == "DROPOUT":
            prev = g.dropout(lname, prev)
        elif kind == "ADD":
            skip = _skip_input(g, produced, prev, y, used)
            prev = g.add(lname, prev, skip)
            used.add(skip)
        got = tuple(g.layer(prev).output_shape[1:])
        flat = len(got) == 1 and int(np.prod(y)) == got[0]  # after FC: (F,) vs (F, 1, 1)
        if kind != "FC" and got != y and not flat:
            raise InvalidGraphError(
                f"{table.source}: layer {i} {name}: the LayerGraph op gives output {got}, the "
                f"table says {y}; fix the row or build the graph by hand")
        produced.append((prev, y))
    del block_start
    return g


def _skip_input(g, produced, prev, shape, used) -> str:
    """The residual input of an ADD: the output of the last ADD-block boundary.

    In ResNet tables a block starts after the previous block's final ReLU (or the stem's
    pool); its skip tensor is that block input, projected by a 1x1 convolution when shapes
    differ (the table has no row for the projection, so we add one).
    """
    # the block input is the last tensor produced by a RELU/pool that precedes the most recent
    # run of conv layers; find the newest tensor not on the main path since then
    names = [n for n, _ in produced]
    i = names.index(prev)
    # walk back to the first CONV of this block: blocks have 3 convs (bottleneck)
    convs = 0
    j = i
    while j > 0:
        op = g.layer(names[j]).op
        if op == "conv":
            convs += 1
            if convs == 3:
                break
        if op == "add":
            break
        j -= 1
    block_in = names[j - 1] if j > 0 else names[0]
    block_shape = tuple(g.layer(block_in).output_shape[1:])
    if block_shape == tuple(shape):
        return block_in
    proj = g.conv(f"{block_in}_proj{len(used)}", block_in, shape[0], 1,
                  stride=max(1, round(block_shape[1] / shape[1])), bias=False)
    used.add(proj)
    return proj
