"""One layer of a graph: :class:`Layer` (frozen) and its read-only attributes, :class:`FrozenAttrs`.

Imports :mod:`.ops` (the rules a layer's derived properties and input regions read) and
:mod:`milp_parallel.errors`; not :mod:`.layer_graph`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidGraphError
from .ops import _RULES, _prod


class FrozenAttrs(Mapping):
    """A read-only, hashable mapping of layer attributes (lists become tuples)."""

    __slots__ = ("_d",)

    def __init__(self, items: Mapping[str, Any] | None = None):
        self._d = {str(k): _freeze(v) for k, v in sorted((items or {}).items())}

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(tuple(self._d.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._d) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenAttrs({self._d!r})"


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, Mapping):
        raise TypeError("layer attributes may not be mappings")
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class Layer:
    """One layer: its op, inputs, attributes and everything inferred from them.

    Attributes
    ----------
    name : str
        Unique within its graph.
    op : str
        One of :data:`OPS`.
    inputs : tuple of str
        Producer layer names, in argument order.
    attrs : Mapping
        Read-only normalized attributes (``attrs["kernel"]`` is a tuple, ...).
    input_shapes : tuple of tuple of int
        The shapes of the inputs, batch first (added to the contract: the cost model needs them).
    output_shape : tuple of int
        Batch first.
    dims : tuple of str
        One letter per output dim (see :mod:`milp_parallel.graph.ops`).
    params : int
        Weights + biases + affine parameters (batch-norm running statistics are buffers).
    flops : float
        Forward FLOPs of one sample.
    """

    name: str
    op: str
    inputs: tuple[str, ...]
    attrs: FrozenAttrs
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    dims: tuple[str, ...]
    params: int
    flops: float

    # ----------------------------------------------------------------- derived properties
    @property
    def batch_size(self) -> int:
        """The first dimension of the output."""
        return self.output_shape[0]

    @property
    def output_elements(self) -> int:
        """Number of output elements of ONE sample."""
        return _prod(self.output_shape[1:])

    @property
    def input_elements(self) -> tuple[int, ...]:
        """Number of elements of ONE sample of each input."""
        return tuple(_prod(s[1:]) for s in self.input_shapes)

    @property
    def parallel_dims(self) -> tuple[str, ...]:
        """The output dims a configuration may split (the ``parallel`` column of
        :mod:`milp_parallel.graph.ops`)."""
        return _RULES[self.op].parallel(self)

    @property
    def weight_split_dims(self) -> tuple[str, ...]:
        """The dims whose split also splits this layer's parameters."""
        return _RULES[self.op].weight_split(self)

    def __repr__(self) -> str:
        return (f"Layer({self.name!r}, {self.op}, inputs={list(self.inputs)}, "
                f"shape={self.output_shape}, params={self.params})")

    # ----------------------------------------------------------------- input regions
    def input_region(self, i: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """The half-open box of input ``i`` that an output box needs.

        Parameters
        ----------
        i : int
            Input index (argument order).
        lo, hi : array_like of int, shape (..., ndim_out)
            Half-open boxes of the output tensor (batch dim first).

        Returns
        -------
        (in_lo, in_hi) : tuple of numpy.ndarray, shape (..., ndim_in)
            Half-open boxes of input ``i``, clipped to its shape. Empty output boxes give
            empty input boxes (``in_lo == in_hi`` on every dim).

        Raises
        ------
        InvalidGraphError
            ``i`` out of range or box arrays of the wrong last dimension.

        Examples
        --------
        >>> from milp_parallel.graph import LayerGraph
        >>> g = LayerGraph()
        >>> _ = g.input("x", (1, 1, 10, 10))
        >>> _ = g.conv("c", "x", 1, 3, stride=2, padding=1)
        >>> lo, hi = g.layer("c").input_region(0, [0, 0, 1, 0], [1, 1, 3, 5])
        >>> lo.tolist(), hi.tolist()
        ([0, 0, 1, 0], [1, 1, 6, 10])
        """
        if not 0 <= i < len(self.inputs):
            raise InvalidGraphError(
                f"layer {self.name!r} ({self.op}) has {len(self.inputs)} input(s); "
                f"input index {i} is out of range")
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        nd = len(self.output_shape)
        if lo.shape[-1:] != (nd,) or hi.shape != lo.shape:
            raise InvalidGraphError(
                f"layer {self.name!r}: output boxes must have shape (..., {nd}) for lo and hi "
                f"alike; got {lo.shape} and {hi.shape}")
        in_shape = np.asarray(self.input_shapes[i], dtype=np.int64)
        in_lo, in_hi = _RULES[self.op].region(self, i, lo, hi)
        in_lo = np.clip(np.broadcast_to(in_lo, lo.shape[:-1] + in_shape.shape), 0, in_shape)
        in_hi = np.clip(np.broadcast_to(in_hi, lo.shape[:-1] + in_shape.shape), 0, in_shape)
        in_hi = np.maximum(in_hi, in_lo)
        empty = np.any(hi <= lo, axis=-1)
        if np.any(empty):
            in_hi = np.where(empty[..., None], in_lo, in_hi)
        return in_lo, in_hi

