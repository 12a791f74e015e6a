"""Layer graphs: :class:`Layer`, :class:`LayerGraph`, shape inference and the JSON format.

A :class:`LayerGraph` is a directed acyclic graph with one node per layer and one edge per
tensor. Every layer knows its output shape (batch first), the letters of its dimensions, its
parameter count, its forward FLOPs per sample, which dimensions a parallel configuration may
split, and, vectorized, which box of each input a box of its output needs.

Dimension letters
-----------------
``n`` sample, ``c`` channel / feature, ``d`` depth, ``h`` height, ``w`` width, ``s`` sequence
position, ``a`` attention head, ``t`` key position (the second sequence axis of attention
scores); ``x y z u v k`` are generic letters used when a reshape or transpose leaves no better
name. The letters of one layer are always distinct. Defaults by rank: 1 ``n``, 2 ``nc``,
3 ``ncw``, 4 ``nchw``, 5 ``ncdhw``.

Ops and their rules
-------------------
========== ============================ ================ =========================== =========
op         output shape                 params           forward FLOPs per sample    parallel
========== ============================ ================ =========================== =========
input      as given                     0                0                           all dims
conv       torch Conv1d/2d/3d           Cout*Cin/g*K(+C) 2*|y|*(Cin/g)*prod(kernel)  all dims
pool       torch Max/AvgPool (ceil)     0                |y|*prod(kernel)            all dims
adaptive_  (N, C, *output_size)         0                sum of window sizes         all dims
pool
global_    (N, C, 1, ..., 1)            0                |x|                         n, c
pool
linear     last dim -> out_features     in*out(+out)     2*in*out per row            all dims
batchnorm  same (channel axis 1)        2*C              2*|y|                       all dims
layernorm  same (normalizes last dim)   2*C              5*|y|                       all but last
rmsnorm    same (normalizes last dim)   C                4*|y|                       all but last
elementwi  same                         0                |y|                         all dims
add, mul   same (mul: size-1 broadcast) 0                (k-1)*|y| for k inputs      all dims
concat     sum along ``dim``            0                0                           all dims
flatten    (N, prod(rest))              0                0                           n
reshape    (N, *shape)                  0                0                           n
transpose  permuted (batch stays first) 0                0                           all dims
dropout    same                         0                |y|                         all dims
softmax    same (over the last dim)     0                3*|y|                       all but last
loss       (N,) cross-entropy           0                3*|x|                       n
embedding  (N, S, dim) from ids (N, S)  vocab*dim        0                           all dims
matmul     (N, *B, M, P)                0                2*prod(B)*M*K*P             all dims
attention  (N, S, A*D) from packed qkv  0                4*S*S*A*D                   n, c
slice      ``dim`` cut to stop - start  0                0                           all dims
========== ============================ ================ =========================== =========

``|y|`` is the number of output elements of one sample, ``|x|`` of the input. Convolution,
linear, matmul and attention FLOPs are exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts
(2 per multiply-add, bias not counted); :meth:`LayerGraph.matmul_flops` sums them.

``matmul(a, b)`` is a batched matrix product without broadcasting: ``a`` is ``(N, *B, M, K)``
and ``b`` is ``(N, *B, K, P)``; the result is ``(N, *B, M, P)``. Attention is written with
``reshape``/``transpose``: ``Q (N, A, S, Dh) @ K^T (N, A, Dh, S) -> (N, A, S, S)``.

``attention(qkv, heads, kv_heads=, head_dim=)`` is the attention core of a transformer layer
(scores, scale, mask, softmax, dropout, the product with the values) on a packed projection
``qkv`` of shape ``(N, S, (A + 2G) D)`` (``A`` query heads, ``G`` key/value groups, ``D`` the
head size): its columns are grouped per key/value group, ``[A/G query heads | key | value]``
(Megatron-LM's layout; torch's ``[Q | K | V]`` is a permutation of the weight's rows), so a split
of the output features into whole groups needs only its own groups' columns. Its FLOPs are
the two batched products over the full ``S x S`` square (what FlopCounterMode counts for
``scaled_dot_product_attention`` and what Megatron-LM's formula counts, causal or not).
A ``linear`` with ``tied_to=`` (the name of an embedding of shape ``out x in``) shares that
embedding's weight matrix: its ``params`` are its bias only (GPT's logits).
``slice(x, dim, start, stop)`` keeps ``[start, stop)`` of one non-batch dim (ViT's class token).

``weight_split_dims`` is ``("c",)`` for conv, linear, embedding and batch-norm (splitting the
output channels / features splits their parameters), ``()`` otherwise (layer-norm's weights are
replicated because its last dim is not split).

Input regions
-------------
:meth:`Layer.input_region` maps half-open output boxes ``[lo, hi)`` (arrays of shape
``(..., ndim_out)``) to half-open boxes of one input (shape ``(..., ndim_in)``), clipped to the
input's shape: conv / pool rows ``[lo*stride - pad, (hi-1)*stride - pad + dilation*(k-1) + 1)``
and, for conv, the input channels of the groups the output channels belong to (all channels
when ``groups == 1``, channel ``c`` only for depthwise); adaptive pool the union of its
windows; linear the same rows and all input features; element-wise ops, add, mul, dropout and
batch-norm the same box (size-1 broadcast dims of mul give ``[0, 1)``); concat the part of the
box inside that input, shifted; flatten / reshape / loss the same samples and everything else;
transpose the permuted box; softmax / layer-norm the same box with the whole last dim;
embedding the ``(n, s)`` part of the box; matmul ``a``: the box's rows and all of ``K``,
``b``: all of ``K`` and the box's columns. An empty output box gives an empty input box.

JSON format (version 1)
-----------------------
``{"format": "milp_parallel.graph", "version": 1, "name": str, "layers": [{"name", "op",
"inputs": [names], "attrs": {...}, "output_shape": [...]}, ...]}``, layers in topological
order. Attribute values are numbers, strings, booleans and lists (tuples in memory). On load the
shapes are inferred again and checked against ``output_shape`` (which may be omitted).

Examples
--------
>>> g = LayerGraph("tiny")
>>> x = g.input("x", (8, 3, 32, 32))
>>> y = g.conv("conv1", x, 16, 3, padding=1)
>>> g.layer("conv1").output_shape
(8, 16, 32, 32)
>>> g.layer("conv1").params
448
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import networkx as nx
import numpy as np

from .errors import FormatError, InvalidGraphError

__all__ = [
    "Layer",
    "LayerGraph",
    "OPS",
    "GRAPH_FORMAT",
    "GRAPH_FORMAT_VERSION",
    "DIM_LETTERS",
]

logger = logging.getLogger(__name__)

GRAPH_FORMAT = "milp_parallel.graph"
GRAPH_FORMAT_VERSION = 1

#: Meaning of each dimension letter.
DIM_LETTERS = {
    "n": "sample", "c": "channel / feature", "d": "depth", "h": "height", "w": "width",
    "s": "sequence position", "a": "attention head", "t": "key position",
    "x": "other", "y": "other", "z": "other", "u": "other", "v": "other", "k": "other",
}
_SPARE_LETTERS = "xyzuvktsadhwc"
_DEFAULT_DIMS = {1: "n", 2: "nc", 3: "ncw", 4: "nchw", 5: "ncdhw"}
_SPATIAL_LETTERS = {1: "w", 2: "hw", 3: "dhw"}

#: Per-element forward FLOPs of ops that are not matrix products.
_ELEMENT_FLOPS = {"batchnorm": 2, "layernorm": 5, "rmsnorm": 4, "elementwise": 1,
                  "dropout": 1, "softmax": 3}


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


def _prod(xs: Iterable[int]) -> int:
    return int(math.prod(int(x) for x in xs))


def _unique_letters(letters: Sequence[str]) -> tuple[str, ...]:
    """Replace repeated letters by unused spare ones, keeping the first occurrence."""
    out: list[str] = []
    for ch in letters:
        if ch in out:
            ch = next(c for c in _SPARE_LETTERS if c not in out and c not in letters)
        out.append(ch)
    return tuple(out)


def _default_dims(rank: int) -> tuple[str, ...]:
    if rank in _DEFAULT_DIMS:
        return tuple(_DEFAULT_DIMS[rank])
    return _unique_letters(("n",) + ("x",) * (rank - 1))


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
        One letter per output dim (see the module docstring).
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
        """The output dims a configuration may split (see the module docstring)."""
        op = self.op
        if op == "global_pool":
            return self.dims[:2]
        if op in ("flatten", "reshape", "loss"):
            return ("n",) if "n" in self.dims else self.dims[:1]
        if op in ("layernorm", "rmsnorm", "softmax"):
            return self.dims[:-1]
        if op == "attention":
            return (self.dims[0], self.dims[-1])
        return self.dims

    @property
    def weight_split_dims(self) -> tuple[str, ...]:
        """The dims whose split also splits this layer's parameters."""
        if self.op in ("conv", "batchnorm"):
            return (self.dims[1],)
        if self.op in ("linear", "embedding"):
            return (self.dims[-1],)
        return ()

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
        in_lo, in_hi = _REGION[self.op](self, i, lo, hi)
        in_lo = np.clip(np.broadcast_to(in_lo, lo.shape[:-1] + in_shape.shape), 0, in_shape)
        in_hi = np.clip(np.broadcast_to(in_hi, lo.shape[:-1] + in_shape.shape), 0, in_shape)
        in_hi = np.maximum(in_hi, in_lo)
        empty = np.any(hi <= lo, axis=-1)
        if np.any(empty):
            in_hi = np.where(empty[..., None], in_lo, in_hi)
        return in_lo, in_hi


# --------------------------------------------------------------------- region rules
def _region_same(layer, i, lo, hi):
    in_shape = layer.input_shapes[i]
    if tuple(in_shape) == layer.output_shape:
        return lo, hi
    # broadcast (mul): size-1 dims need [0, 1)
    one = np.asarray(in_shape) == 1
    return np.where(one, 0, lo), np.where(one, 1, hi)


def _region_window(layer, i, lo, hi):
    a = layer.attrs
    nsp = len(a["kernel"])
    in_lo = lo.copy()
    in_hi = hi.copy()
    k = np.asarray(a["kernel"])
    s = np.asarray(a["stride"])
    p = np.asarray(a["padding"])
    d = np.asarray(a.get("dilation", (1,) * nsp))
    in_lo[..., 2:] = lo[..., 2:] * s - p
    in_hi[..., 2:] = (hi[..., 2:] - 1) * s - p + d * (k - 1) + 1
    if layer.op == "conv":
        g = a["groups"]
        cin = layer.input_shapes[0][1]
        cout = layer.output_shape[1]
        per_out, per_in = cout // g, cin // g
        g_lo = lo[..., 1] // per_out
        g_hi = -((-hi[..., 1]) // per_out)
        in_lo[..., 1] = g_lo * per_in
        in_hi[..., 1] = g_hi * per_in
    return in_lo, in_hi


def _region_adaptive(layer, i, lo, hi):
    ins = np.asarray(layer.input_shapes[0][2:])
    outs = np.asarray(layer.output_shape[2:])
    in_lo = lo.copy()
    in_hi = hi.copy()
    in_lo[..., 2:] = (lo[..., 2:] * ins) // outs
    in_hi[..., 2:] = -((-hi[..., 2:] * ins) // outs)
    return in_lo, in_hi


def _region_global(layer, i, lo, hi):
    in_shape = np.asarray(layer.input_shapes[0])
    in_lo = np.zeros(lo.shape, dtype=np.int64)
    in_hi = np.broadcast_to(in_shape, lo.shape).copy()
    in_lo[..., :2] = lo[..., :2]
    in_hi[..., :2] = hi[..., :2]
    return in_lo, in_hi


def _region_lastdim_all(layer, i, lo, hi):
    in_lo = lo.copy()
    in_hi = hi.copy()
    in_lo[..., -1] = 0
    in_hi[..., -1] = layer.input_shapes[i][-1]
    return in_lo, in_hi


def _region_samples(layer, i, lo, hi):
    in_shape = np.asarray(layer.input_shapes[i])
    shape = lo.shape[:-1] + in_shape.shape
    in_lo = np.zeros(shape, dtype=np.int64)
    in_hi = np.broadcast_to(in_shape, shape).copy()
    in_lo[..., 0] = lo[..., 0]
    in_hi[..., 0] = hi[..., 0]
    return in_lo, in_hi


def _region_concat(layer, i, lo, hi):
    axis = layer.dims.index(layer.attrs["dim"])
    offset = sum(s[axis] for s in layer.input_shapes[:i])
    size = layer.input_shapes[i][axis]
    in_lo = lo.copy()
    in_hi = hi.copy()
    in_lo[..., axis] = np.clip(lo[..., axis] - offset, 0, size)
    in_hi[..., axis] = np.clip(hi[..., axis] - offset, 0, size)
    return in_lo, in_hi


def _region_transpose(layer, i, lo, hi):
    perm = layer.attrs["perm"]
    inv = np.argsort(perm)
    return lo[..., inv], hi[..., inv]


def _region_embedding(layer, i, lo, hi):
    r = len(layer.input_shapes[0])
    return lo[..., :r], hi[..., :r]


def _region_matmul(layer, i, lo, hi):
    in_shape = layer.input_shapes[i]
    in_lo = lo.copy()
    in_hi = hi.copy()
    if i == 0:    # rows of the box, all of K
        in_lo[..., -1] = 0
        in_hi[..., -1] = in_shape[-1]
    else:         # all of K, columns of the box
        in_lo[..., -2] = 0
        in_hi[..., -2] = in_shape[-2]
    return in_lo, in_hi


def _region_attention(layer, i, lo, hi):
    """All key positions; the packed columns of the key/value groups the output heads use."""
    a = layer.attrs
    per = a["heads"] // a["kv_heads"]                   # query heads per group
    width = (per + 2) * a["head_dim"]                   # packed columns per group
    in_lo = lo.copy()
    in_hi = hi.copy()
    in_lo[..., 1] = 0
    in_hi[..., 1] = layer.input_shapes[0][1]
    heads_hi = -((-hi[..., -1]) // a["head_dim"])      # ceil
    g_lo = (lo[..., -1] // a["head_dim"]) // per
    g_hi = -((-heads_hi) // per)
    in_lo[..., -1] = g_lo * width
    in_hi[..., -1] = g_hi * width
    return in_lo, in_hi


def _region_slice(layer, i, lo, hi):
    axis = layer.dims.index(layer.attrs["dim"])
    in_lo = lo.copy()
    in_hi = hi.copy()
    in_lo[..., axis] = lo[..., axis] + layer.attrs["start"]
    in_hi[..., axis] = hi[..., axis] + layer.attrs["start"]
    return in_lo, in_hi


def _region_none(layer, i, lo, hi):  # pragma: no cover - input has no inputs
    raise InvalidGraphError(f"layer {layer.name!r} is an input and has no input region")


_REGION = {
    "input": _region_none, "conv": _region_window, "pool": _region_window,
    "adaptive_pool": _region_adaptive, "global_pool": _region_global,
    "linear": _region_lastdim_all, "batchnorm": _region_same, "layernorm": _region_lastdim_all,
    "elementwise": _region_same, "add": _region_same, "mul": _region_same,
    "concat": _region_concat, "flatten": _region_samples, "reshape": _region_samples,
    "transpose": _region_transpose, "dropout": _region_same, "softmax": _region_lastdim_all,
    "loss": _region_samples, "embedding": _region_embedding, "matmul": _region_matmul,
    "rmsnorm": _region_lastdim_all, "attention": _region_attention, "slice": _region_slice,
}

#: Every op a layer may have.
OPS = tuple(_REGION)

# --------------------------------------------------------------------- shape inference
_ARITY = {"input": (0, 0), "add": (2, None), "mul": (2, None), "concat": (1, None),
          "matmul": (2, 2)}


def _tuple_n(layer: str, what: str, v: Any, n: int) -> tuple[int, ...]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise InvalidGraphError(
            f"layer {layer!r}: {what} must be an int or a sequence of {n} ints, got {v!r}"
        ) from None
    if len(t) != n:
        raise InvalidGraphError(
            f"layer {layer!r}: {what} {v!r} has {len(t)} entries; the input has {n} "
            f"spatial dims, so give {n} (or one int)")
    return t


def _window_out(name, op, in_sp, k, s, p, d, ceil_mode):
    out = []
    for ax, (i, kk, ss, pp, dd) in enumerate(zip(in_sp, k, s, p, d)):
        span = i + 2 * pp - dd * (kk - 1) - 1
        if ceil_mode:
            o = -(-span // ss) + 1
            if (o - 1) * ss >= i + pp:
                o -= 1
        else:
            o = span // ss + 1
        if o <= 0 or span < 0:
            raise InvalidGraphError(
                f"layer {name!r} ({op}): spatial dim {ax} of size {i} with kernel {kk}, "
                f"stride {ss}, padding {pp}, dilation {dd} gives an output of size "
                f"{max(o, 0) if span >= 0 else 0} <= 0; use a smaller kernel or more padding")
        out.append(int(o))
    return tuple(out)


def _infer(name: str, op: str, attrs: dict, shapes: list[tuple[int, ...]],
           dims_in: list[tuple[str, ...]]):
    """Return (normalized attrs, output shape, dims, params, flops per sample)."""
    a = dict(attrs)

    def need_rank(lo_rank, hi_rank=None, idx=0):
        r = len(shapes[idx])
        if r < lo_rank or (hi_rank is not None and r > hi_rank):
            want = f"{lo_rank}" if hi_rank == lo_rank else \
                f"{lo_rank}..{hi_rank}" if hi_rank else f">= {lo_rank}"
            raise InvalidGraphError(
                f"layer {name!r} ({op}): input {idx} has shape {shapes[idx]} (rank {r}); "
                f"expected rank {want} (batch first)")

    if op == "input":
        shape = tuple(int(x) for x in a.get("shape", ()))
        if not shape or any(x <= 0 for x in shape):
            raise InvalidGraphError(
                f"layer {name!r} (input): shape {shape} must be non-empty with positive dims "
                "(batch first)")
        dims = a.get("dims")
        dims = _default_dims(len(shape)) if dims is None else tuple(dims)
        _check_dims(name, dims, len(shape))
        a["shape"], a["dims"] = shape, dims
        return a, shape, dims, 0, 0.0

    x = shapes[0] if shapes else ()
    N = x[0] if x else 0

    if op in ("conv", "pool"):
        need_rank(3, 5)
        nsp = len(x) - 2
        k = _tuple_n(name, "kernel", a.get("kernel"), nsp)
        s = _tuple_n(name, "stride", a.get("stride") if a.get("stride") is not None else k,
                     nsp)
        p = _tuple_n(name, "padding", a.get("padding", 0), nsp)
        d = _tuple_n(name, "dilation", a.get("dilation", 1), nsp)
        if any(v <= 0 for v in k + s + d) or any(v < 0 for v in p):
            raise InvalidGraphError(
                f"layer {name!r} ({op}): kernel {k}, stride {s}, dilation {d} must be "
                f"positive and padding {p} non-negative")
        a.update(kernel=k, stride=s, padding=p, dilation=d)
        if op == "pool":
            kind = a.get("kind", "max")
            if kind not in ("max", "avg"):
                raise InvalidGraphError(
                    f"layer {name!r} (pool): kind {kind!r} is not 'max' or 'avg'")
            if any(pp > kk // 2 for pp, kk in zip(p, k)):
                raise InvalidGraphError(
                    f"layer {name!r} (pool): padding {p} exceeds half the kernel {k}")
            a["kind"] = kind
            a["ceil_mode"] = bool(a.get("ceil_mode", False))
            out_sp = _window_out(name, op, x[2:], k, s, p, d, a["ceil_mode"])
            out = (N, x[1]) + out_sp
            return a, out, dims_in[0], 0, float(_prod(out[1:]) * _prod(k))
        cin = x[1]
        cout = int(a.get("out_channels", 0))
        g = int(a.get("groups", 1))
        if cout <= 0 or g <= 0:
            raise InvalidGraphError(
                f"layer {name!r} (conv): out_channels {cout} and groups {g} must be positive")
        if a.get("in_channels") is not None and int(a["in_channels"]) != cin:
            raise InvalidGraphError(
                f"layer {name!r} (conv): input 0 has {cin} channels (shape {x}) but "
                f"in_channels={a['in_channels']}")
        if cin % g or cout % g:
            raise InvalidGraphError(
                f"layer {name!r} (conv): groups={g} must divide in_channels={cin} and "
                f"out_channels={cout}")
        a.update(out_channels=cout, groups=g, bias=bool(a.get("bias", True)), in_channels=cin)
        out_sp = _window_out(name, op, x[2:], k, s, p, d, False)
        out = (N, cout) + out_sp
        params = cout * (cin // g) * _prod(k) + (cout if a["bias"] else 0)
        flops = 2.0 * _prod(out[1:]) * (cin // g) * _prod(k)
        return a, out, dims_in[0], params, flops

    if op == "adaptive_pool":
        need_rank(3, 5)
        nsp = len(x) - 2
        osz = _tuple_n(name, "output_size", a.get("output_size"), nsp)
        if any(v <= 0 for v in osz):
            raise InvalidGraphError(
                f"layer {name!r} (adaptive_pool): output_size {osz} must be positive")
        kind = a.get("kind", "avg")
        if kind not in ("max", "avg"):
            raise InvalidGraphError(
                f"layer {name!r} (adaptive_pool): kind {kind!r} is not 'max' or 'avg'")
        a.update(output_size=osz, kind=kind)
        win = 1
        for i_, o_ in zip(x[2:], osz):
            j = np.arange(o_)
            win *= int(np.sum(-((-(j + 1) * i_) // o_) - (j * i_) // o_))
        return a, (N, x[1]) + osz, dims_in[0], 0, float(x[1] * win)

    if op == "global_pool":
        need_rank(3, 5)
        kind = a.get("kind", "avg")
        if kind not in ("max", "avg"):
            raise InvalidGraphError(
                f"layer {name!r} (global_pool): kind {kind!r} is not 'max' or 'avg'")
        a["kind"] = kind
        out = (N, x[1]) + (1,) * (len(x) - 2)
        return a, out, dims_in[0], 0, float(_prod(x[1:]))

    if op == "linear":
        need_rank(2)
        fin = x[-1]
        fout = int(a.get("out_features", 0))
        if fout <= 0:
            raise InvalidGraphError(
                f"layer {name!r} (linear): out_features {fout} must be positive")
        if a.get("in_features") is not None and int(a["in_features"]) != fin:
            raise InvalidGraphError(
                f"layer {name!r} (linear): input 0 has {fin} features (shape {x}) but "
                f"in_features={a['in_features']}; add a flatten or fix in_features")
        a.update(out_features=fout, in_features=fin, bias=bool(a.get("bias", True)))
        tied = a.get("tied_to")
        if tied is not None and (not isinstance(tied, str) or not tied):
            raise InvalidGraphError(
                f"layer {name!r} (linear): tied_to must be the name of an embedding layer, "
                f"got {tied!r}")
        a.pop("tied_to", None)
        if tied is not None:
            a["tied_to"] = tied
        out = x[:-1] + (fout,)
        params = (0 if tied else fin * fout) + (fout if a["bias"] else 0)
        return a, out, dims_in[0], params, 2.0 * _prod(x[1:-1]) * fin * fout

    if op in ("batchnorm", "layernorm", "rmsnorm", "elementwise", "dropout", "softmax"):
        if op == "batchnorm":
            need_rank(2)
            params = 2 * x[1]
        elif op == "layernorm":
            need_rank(2)
            params = 2 * x[-1]
        elif op == "rmsnorm":
            need_rank(2)
            params = x[-1]
        else:
            params = 0
        if op == "elementwise":
            fn = a.get("fn", "relu")
            if not isinstance(fn, str) or not fn:
                raise InvalidGraphError(
                    f"layer {name!r} (elementwise): fn must be a non-empty string, got {fn!r}")
            a["fn"] = fn
        if op == "dropout":
            pr = float(a.get("p", 0.5))
            if not 0.0 <= pr < 1.0:
                raise InvalidGraphError(f"layer {name!r} (dropout): p={pr} must be in [0, 1)")
            a["p"] = pr
        return a, x, dims_in[0], params, float(_ELEMENT_FLOPS[op] * _prod(x[1:]))

    if op in ("add", "mul"):
        out = x
        if op == "mul":
            out = tuple(max(col) for col in zip(*shapes)) if \
                len({len(s) for s in shapes}) == 1 else x
        for j, sj in enumerate(shapes):
            ok = len(sj) == len(out) and all(
                v == o or (op == "mul" and v == 1) for v, o in zip(sj, out))
            if not ok:
                why = ("the shape of input 0; add does not broadcast" if op == "add" else
                       "the broadcast shape; mul broadcasts size-1 dims only")
                raise InvalidGraphError(
                    f"layer {name!r} ({op}): input {j} has shape {sj}, expected {out} ({why})")
        dims = dims_in[shapes.index(out)] if out in shapes else dims_in[0]
        return a, out, dims, 0, float((len(shapes) - 1) * _prod(out[1:]))

    if op == "concat":
        dim = a.get("dim", "c")
        d0 = dims_in[0]
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
            if not 1 <= int(dim) < len(x):
                raise InvalidGraphError(
                    f"layer {name!r} (concat): axis {dim} must be in 1..{len(x) - 1} "
                    "(the batch axis 0 cannot be concatenated)")
            dim = d0[int(dim)]
        if dim not in d0 or dim == d0[0]:
            raise InvalidGraphError(
                f"layer {name!r} (concat): dim {dim!r} is not a non-batch dim of input 0 "
                f"(dims {''.join(d0)})")
        axis = d0.index(dim)
        a["dim"] = dim
        for j, sj in enumerate(shapes):
            if len(sj) != len(x) or any(v != w for t, (v, w) in enumerate(zip(sj, x))
                                        if t != axis):
                raise InvalidGraphError(
                    f"layer {name!r} (concat): input {j} has shape {sj} but input 0 has {x}; "
                    f"all dims except {dim!r} (axis {axis}) must match")
        out = x[:axis] + (sum(s[axis] for s in shapes),) + x[axis + 1:]
        return a, out, d0, 0, 0.0

    if op == "flatten":
        need_rank(2)
        return a, (N, _prod(x[1:])), ("n", "c"), 0, 0.0

    if op == "reshape":
        shape = [int(v) for v in a.get("shape", ())]
        per = _prod(x[1:])
        if shape.count(-1) > 1 or any(v == 0 or v < -1 for v in shape) or not shape:
            raise InvalidGraphError(
                f"layer {name!r} (reshape): shape {tuple(shape)} (per sample, batch excluded) "
                "must have positive dims and at most one -1")
        if -1 in shape:
            known = _prod(v for v in shape if v != -1)
            if per % known:
                raise InvalidGraphError(
                    f"layer {name!r} (reshape): cannot reshape {per} elements per sample "
                    f"(input shape {x}) into {tuple(shape)}")
            shape[shape.index(-1)] = per // known
        if _prod(shape) != per:
            raise InvalidGraphError(
                f"layer {name!r} (reshape): input 0 has {per} elements per sample (shape "
                f"{x}) but the target shape {tuple(shape)} has {_prod(shape)}")
        out = (N,) + tuple(shape)
        dims = a.get("dims")
        dims = _default_dims(len(out)) if dims is None else tuple(dims)
        _check_dims(name, dims, len(out))
        a.update(shape=tuple(shape), dims=dims)
        return a, out, dims, 0, 0.0

    if op == "transpose":
        perm = tuple(int(v) for v in a.get("perm", ()))
        if sorted(perm) != list(range(len(x))) or perm[0] != 0:
            raise InvalidGraphError(
                f"layer {name!r} (transpose): perm {perm} must be a permutation of "
                f"0..{len(x) - 1} that keeps the batch axis 0 first")
        out = tuple(x[p_] for p_ in perm)
        dims = a.get("dims")
        dims = tuple(dims_in[0][p_] for p_ in perm) if dims is None else tuple(dims)
        _check_dims(name, dims, len(out))
        a.update(perm=perm, dims=dims)
        return a, out, dims, 0, 0.0

    if op == "loss":
        need_rank(2)
        return a, (N,), ("n",), 0, float(3 * _prod(x[1:]))

    if op == "embedding":
        need_rank(2)
        vocab, dim = int(a.get("vocab", 0)), int(a.get("dim", 0))
        if vocab <= 0 or dim <= 0:
            raise InvalidGraphError(
                f"layer {name!r} (embedding): vocab {vocab} and dim {dim} must be positive")
        a.update(vocab=vocab, dim=dim)
        dims = _unique_letters(dims_in[0] + ("c",))
        return a, x + (dim,), dims, vocab * dim, 0.0

    if op == "matmul":
        A, B = shapes
        if len(A) < 3 or len(A) != len(B):
            raise InvalidGraphError(
                f"layer {name!r} (matmul): inputs must have the same rank >= 3 "
                f"((N, *B, M, K) and (N, *B, K, P)); got {A} and {B}")
        if A[:-2] != B[:-2]:
            raise InvalidGraphError(
                f"layer {name!r} (matmul): batch dims differ: input 0 {A}, input 1 {B} "
                "(no broadcasting: both must share (N, *B))")
        if A[-1] != B[-2]:
            raise InvalidGraphError(
                f"layer {name!r} (matmul): input 0 {A} has K={A[-1]} but input 1 {B} has "
                f"K={B[-2]} (second to last dim); transpose one of them")
        out = A[:-1] + (B[-1],)
        dims = _unique_letters(dims_in[0][:-1] + (dims_in[1][-1],))
        flops = 2.0 * _prod(A[1:-1]) * A[-1] * B[-1]
        return a, out, dims, 0, flops

    if op == "attention":
        need_rank(3, 3)
        heads = int(a.get("heads", 0))
        groups = int(a.get("kv_heads") or heads)
        if heads <= 0 or groups <= 0 or heads % groups:
            raise InvalidGraphError(
                f"layer {name!r} (attention): heads={heads} must be positive and a multiple "
                f"of kv_heads={groups}")
        width = x[-1]
        d = a.get("head_dim")
        d = width // (heads + 2 * groups) if d is None else int(d)
        if d <= 0 or (heads + 2 * groups) * d != width:
            raise InvalidGraphError(
                f"layer {name!r} (attention): the packed input has {width} features but "
                f"(heads + 2 kv_heads) x head_dim = ({heads} + 2 x {groups}) x {d}; give the "
                "projection (heads + 2 kv_heads) x head_dim outputs")
        p_drop = float(a.get("dropout", 0.0))
        if not 0.0 <= p_drop < 1.0:
            raise InvalidGraphError(
                f"layer {name!r} (attention): dropout={p_drop} must be in [0, 1)")
        a.update(heads=heads, kv_heads=groups, head_dim=d, causal=bool(a.get("causal", True)),
                 dropout=p_drop)
        S = x[1]
        out = (N, S, heads * d)
        return a, out, dims_in[0], 0, 4.0 * S * S * heads * d

    if op == "slice":
        d0 = dims_in[0]
        dim = a.get("dim")
        if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
            dim = d0[int(dim)] if 1 <= int(dim) < len(x) else None
        if dim not in d0[1:]:
            raise InvalidGraphError(
                f"layer {name!r} (slice): dim {a.get('dim')!r} is not a non-batch dim of the "
                f"input (dims {''.join(d0)})")
        axis = d0.index(dim)
        start, stop = int(a.get("start", 0)), int(a.get("stop", x[axis]))
        if not 0 <= start < stop <= x[axis]:
            raise InvalidGraphError(
                f"layer {name!r} (slice): [{start}, {stop}) is not a non-empty range inside "
                f"dim {dim!r} of size {x[axis]}")
        a.update(dim=dim, start=start, stop=stop)
        out = x[:axis] + (stop - start,) + x[axis + 1:]
        return a, out, d0, 0, 0.0

    raise InvalidGraphError(  # pragma: no cover - op checked by the caller
        f"layer {name!r}: unknown op {op!r}")


def _check_dims(name: str, dims: tuple[str, ...], rank: int) -> None:
    if len(dims) != rank or len(set(dims)) != rank or any(d not in DIM_LETTERS for d in dims):
        raise InvalidGraphError(
            f"layer {name!r}: dims {''.join(map(str, dims))!r} must be {rank} distinct letters "
            f"from {''.join(DIM_LETTERS)}")


# --------------------------------------------------------------------- the graph
class LayerGraph:
    """A DAG of :class:`Layer` objects, built layer by layer with shape inference.

    Parameters
    ----------
    name : str, optional
        A label (e.g. the model's name), kept in the JSON file.

    Notes
    -----
    Builder methods check their layer at once and raise :class:`InvalidGraphError` naming it.
    Layers are kept in insertion order, which is a topological order.

    Examples
    --------
    >>> g = LayerGraph("mlp")
    >>> x = g.input("x", (4, 10))
    >>> h = g.elementwise("relu", g.linear("fc1", x, 20))
    >>> _ = g.loss("loss", g.linear("fc2", h, 3))
    >>> g.param_count(), g.matmul_flops()
    (283, 520.0)
    """

    def __init__(self, name: str = ""):
        self.name = str(name)
        self._g = nx.DiGraph()
        self._layers: dict[str, Layer] = {}

    # ------------------------------------------------------------- generic builder
    def add_layer(self, name: str, op: str, inputs: Sequence[str] = (), **attrs: Any) -> str:
        """Add a layer of any op; the builders below call this.

        Parameters
        ----------
        name : str
            New, unique layer name.
        op : str
            One of :data:`OPS`.
        inputs : sequence of str
            Existing layer names, in argument order.
        **attrs
            The op's attributes (see the builders).

        Returns
        -------
        str
            ``name``.

        Raises
        ------
        InvalidGraphError
            Unknown op, duplicate name, unknown input, wrong number of inputs, shape mismatch,
            non-positive dimension, ...
        """
        name = str(name)
        if not name:
            raise InvalidGraphError("a layer name must be a non-empty string")
        if name in self._layers:
            raise InvalidGraphError(
                f"duplicate layer name {name!r}: each layer needs its own name")
        if op not in _REGION:
            raise InvalidGraphError(
                f"layer {name!r}: unknown op {op!r}; known ops: {', '.join(OPS)}")
        if isinstance(inputs, str):
            inputs = (inputs,)
        inputs = tuple(str(v) for v in inputs)
        lo_ar, hi_ar = _ARITY.get(op, (1, 1))
        if len(inputs) < lo_ar or (hi_ar is not None and len(inputs) > hi_ar):
            want = f"{lo_ar}" if lo_ar == hi_ar else f"at least {lo_ar}" if hi_ar is None \
                else f"{lo_ar}..{hi_ar}"
            raise InvalidGraphError(
                f"layer {name!r} ({op}) takes {want} input(s), got {len(inputs)}: "
                f"{list(inputs)}")
        for v in inputs:
            if v not in self._layers:
                raise InvalidGraphError(
                    f"layer {name!r} ({op}): unknown input layer {v!r}; add it first")
        shapes = [self._layers[v].output_shape for v in inputs]
        dims_in = [self._layers[v].dims for v in inputs]
        if op != "input" and len({s[0] for s in shapes}) > 1:
            raise InvalidGraphError(
                f"layer {name!r} ({op}): inputs have different batch sizes {shapes}")
        attrs = {k: _freeze(v) for k, v in attrs.items()}
        a, out, dims, params, flops = _infer(name, op, attrs, shapes, dims_in)
        if op == "linear" and a.get("tied_to") is not None:
            t = self._layers.get(a["tied_to"])
            if t is None or t.op != "embedding" or (t.attrs["vocab"], t.attrs["dim"]) != (
                    a["out_features"], a["in_features"]):
                raise InvalidGraphError(
                    f"layer {name!r} (linear): tied_to={a['tied_to']!r} must name an earlier "
                    f"embedding with vocab={a['out_features']} and dim={a['in_features']}")
        if op == "input" and self._layers:
            b = self.batch_size
            if b is not None and out[0] != b:
                raise InvalidGraphError(
                    f"layer {name!r} (input): batch size {out[0]} differs from the graph's "
                    f"{b}; all inputs must share the batch size")
        if any(v <= 0 for v in out):
            raise InvalidGraphError(
                f"layer {name!r} ({op}): output shape {out} has a non-positive dimension")
        layer = Layer(name=name, op=op, inputs=inputs, attrs=FrozenAttrs(a),
                      input_shapes=tuple(shapes), output_shape=tuple(int(v) for v in out),
                      dims=tuple(dims), params=int(params), flops=float(flops))
        self._layers[name] = layer
        self._g.add_node(name, layer=layer)
        for v in inputs:
            self._g.add_edge(v, name)
        return name

    # ------------------------------------------------------------- builders
    def input(self, name: str, shape: Sequence[int], *, dims: Sequence[str] | None = None
              ) -> str:
        """An input tensor of ``shape`` (batch first); ``dims`` letters default by rank
        (use ``dims="ns"`` for token ids)."""
        return self.add_layer(name, "input", (), shape=tuple(shape),
                              dims=None if dims is None else tuple(dims))

    def conv(self, name: str, x: str, out_channels: int, kernel, *, stride=1, padding=0,
             dilation=1, groups: int = 1, bias: bool = True, in_channels: int | None = None
             ) -> str:
        """Convolution, 1-D/2-D/3-D from the input's rank (torch semantics; symmetric
        padding). ``in_channels``, when given, is checked against the input."""
        return self.add_layer(name, "conv", (x,), out_channels=out_channels, kernel=kernel,
                              stride=stride, padding=padding, dilation=dilation,
                              groups=groups, bias=bias, in_channels=in_channels)

    def pool(self, name: str, x: str, kernel, *, kind: str = "max", stride=None, padding=0,
             ceil_mode: bool = False) -> str:
        """Max or average pooling (stride defaults to the kernel), 1-D/2-D/3-D."""
        return self.add_layer(name, "pool", (x,), kernel=kernel, kind=kind, stride=stride,
                              padding=padding, ceil_mode=ceil_mode)

    def adaptive_pool(self, name: str, x: str, output_size, *, kind: str = "avg") -> str:
        """torch's AdaptiveAvg/MaxPool to ``output_size`` (an identity-shaped op when the input
        already has that size)."""
        return self.add_layer(name, "adaptive_pool", (x,), output_size=output_size, kind=kind)

    def global_pool(self, name: str, x: str, kind: str = "avg") -> str:
        """Pool every spatial dim to 1 (keeps the rank: ``(N, C, 1, 1)``)."""
        return self.add_layer(name, "global_pool", (x,), kind=kind)

    def linear(self, name: str, x: str, out_features: int, *, bias: bool = True,
               in_features: int | None = None, tied_to: str | None = None) -> str:
        """Fully connected layer on the last dim (``(N, C)`` or ``(N, S, C)`` inputs);
        ``tied_to`` names an embedding whose ``out x in`` table is this layer's weight."""
        return self.add_layer(name, "linear", (x,), out_features=out_features, bias=bias,
                              in_features=in_features, tied_to=tied_to)

    def batchnorm(self, name: str, x: str) -> str:
        """Batch normalization over channel axis 1 (2*C affine parameters)."""
        return self.add_layer(name, "batchnorm", (x,))

    def layernorm(self, name: str, x: str) -> str:
        """Layer normalization over the last dim (2*C affine parameters)."""
        return self.add_layer(name, "layernorm", (x,))

    def rmsnorm(self, name: str, x: str) -> str:
        """RMS normalization over the last dim (C scale parameters, no bias)."""
        return self.add_layer(name, "rmsnorm", (x,))

    def attention(self, name: str, qkv: str, heads: int, *, kv_heads: int | None = None,
                  head_dim: int | None = None, causal: bool = True, dropout: float = 0.0
                  ) -> str:
        """The attention core on a packed ``(N, S, (heads + 2 kv_heads) head_dim)``
        projection (columns grouped per key/value group): ``(N, S, heads x head_dim)``."""
        return self.add_layer(name, "attention", (qkv,), heads=heads, kv_heads=kv_heads,
                              head_dim=head_dim, causal=causal, dropout=dropout)

    def slice(self, name: str, x: str, dim: str | int, start: int, stop: int) -> str:
        """Keep ``[start, stop)`` of the non-batch dim ``dim`` (letter or axis)."""
        return self.add_layer(name, "slice", (x,), dim=dim, start=start, stop=stop)

    def elementwise(self, name: str, x: str, fn: str = "relu") -> str:
        """An element-wise function (relu, relu6, gelu, sigmoid, tanh, silu, ...)."""
        return self.add_layer(name, "elementwise", (x,), fn=fn)

    def add(self, name: str, *xs: str) -> str:
        """Element-wise sum of two or more tensors of equal shape."""
        return self.add_layer(name, "add", xs)

    def mul(self, name: str, *xs: str) -> str:
        """Element-wise product (size-1 dims broadcast)."""
        return self.add_layer(name, "mul", xs)

    def concat(self, name: str, xs: Sequence[str], *, dim: str | int = "c") -> str:
        """Concatenate along the dim with letter ``dim`` (or axis index)."""
        return self.add_layer(name, "concat", tuple(xs), dim=dim)

    def flatten(self, name: str, x: str) -> str:
        """Flatten every non-batch dim: ``(N, prod(rest))``."""
        return self.add_layer(name, "flatten", (x,))

    def reshape(self, name: str, x: str, shape: Sequence[int], *,
                dims: Sequence[str] | None = None) -> str:
        """Reshape each sample to ``shape`` (batch excluded; one -1 allowed)."""
        return self.add_layer(name, "reshape", (x,), shape=tuple(shape),
                              dims=None if dims is None else tuple(dims))

    def transpose(self, name: str, x: str, perm: Sequence[int], *,
                  dims: Sequence[str] | None = None) -> str:
        """Permute axes (``perm`` over all axes, ``perm[0] == 0``); letters follow the
        permutation unless ``dims`` is given."""
        return self.add_layer(name, "transpose", (x,), perm=tuple(perm),
                              dims=None if dims is None else tuple(dims))

    def dropout(self, name: str, x: str, p: float = 0.5) -> str:
        """Dropout with probability ``p``."""
        return self.add_layer(name, "dropout", (x,), p=p)

    def softmax(self, name: str, x: str) -> str:
        """Softmax over the last dim."""
        return self.add_layer(name, "softmax", (x,))

    def loss(self, name: str, x: str) -> str:
        """Cross-entropy of logits ``x`` (classes on the last dim); output ``(N,)``."""
        return self.add_layer(name, "loss", (x,))

    def embedding(self, name: str, x: str, vocab: int, dim: int) -> str:
        """Look up ids ``x`` (``(N, S)``) in a ``vocab x dim`` table: ``(N, S, dim)``."""
        return self.add_layer(name, "embedding", (x,), vocab=vocab, dim=dim)

    def matmul(self, name: str, a: str, b: str) -> str:
        """Batched ``a @ b``: ``(N, *B, M, K) @ (N, *B, K, P) -> (N, *B, M, P)``."""
        return self.add_layer(name, "matmul", (a, b))

    # ------------------------------------------------------------- queries
    @property
    def layers(self) -> tuple[Layer, ...]:
        """All layers, in topological (insertion) order."""
        return tuple(self._layers.values())

    @property
    def names(self) -> tuple[str, ...]:
        """All layer names, in topological order."""
        return tuple(self._layers)

    def layer(self, name: str) -> Layer:
        """The layer called ``name`` (raises :class:`InvalidGraphError` if there is none)."""
        try:
            return self._layers[name]
        except KeyError:
            raise InvalidGraphError(f"no layer named {name!r} in graph {self.name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._layers

    def __len__(self) -> int:
        return len(self._layers)

    def __iter__(self):
        return iter(self._layers.values())

    def predecessors(self, name: str) -> tuple[str, ...]:
        """Distinct producers of ``name``, in argument order."""
        return tuple(dict.fromkeys(self.layer(name).inputs))

    def successors(self, name: str) -> tuple[str, ...]:
        """Distinct consumers of ``name``, in topological order."""
        self.layer(name)
        succ = set(self._g.successors(name))
        return tuple(v for v in self._layers if v in succ)

    @property
    def edges(self) -> tuple[tuple[str, str, int], ...]:
        """``(producer, consumer, input index)`` for every tensor use, topological order."""
        return tuple((u, L.name, i) for L in self._layers.values()
                     for i, u in enumerate(L.inputs))

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the ``input`` layers."""
        return tuple(L.name for L in self._layers.values() if L.op == "input")

    @property
    def output_names(self) -> tuple[str, ...]:
        """Names of the layers nobody consumes."""
        return tuple(v for v in self._layers if self._g.out_degree(v) == 0)

    @property
    def batch_size(self) -> int | None:
        """The shared batch size of the inputs (``None`` for an empty graph)."""
        for L in self._layers.values():
            if L.op == "input":
                return L.output_shape[0]
        return None

    @property
    def nx(self) -> nx.DiGraph:
        """A copy as a networkx DiGraph (node attribute ``layer``)."""
        return self._g.copy()

    def param_count(self) -> int:
        """Total parameters (weights, biases, affine)."""
        return sum(L.params for L in self._layers.values())

    def matmul_flops(self) -> float:
        """Forward FLOPs per sample of conv, linear, matmul and attention layers
        (FlopCounterMode's count at batch 1)."""
        return float(sum(L.flops for L in self._layers.values()
                         if L.op in ("conv", "linear", "matmul", "attention")))

    def flops(self) -> float:
        """Forward FLOPs per sample of all layers."""
        return float(sum(L.flops for L in self._layers.values()))

    def validate(self) -> None:
        """Re-check the whole graph (acyclic, every layer re-inferred to the same result).

        Raises
        ------
        InvalidGraphError
            Naming the first offending layer.
        """
        if not nx.is_directed_acyclic_graph(self._g):  # pragma: no cover - builders prevent
            cyc = nx.find_cycle(self._g)
            raise InvalidGraphError(f"the graph has a cycle through {[u for u, _ in cyc]}")
        again = LayerGraph.from_dict(self.to_dict())
        for L in self._layers.values():
            if again._layers[L.name] != L:  # pragma: no cover - layers are frozen
                raise InvalidGraphError(f"layer {L.name!r} is inconsistent with its inputs")

    def with_batch_size(self, batch_size: int) -> "LayerGraph":
        """A copy whose inputs (and so every layer) have batch size ``batch_size``.

        Raises
        ------
        InvalidGraphError
            ``batch_size`` not a positive int.
        """
        b = int(batch_size)
        if b <= 0 or b != batch_size:
            raise InvalidGraphError(f"batch size {batch_size!r} must be a positive integer")
        d = self.to_dict()
        for rec in d["layers"]:
            rec.pop("output_shape", None)
            if rec["op"] == "input":
                rec["attrs"]["shape"][0] = b
        return LayerGraph.from_dict(d)

    # ------------------------------------------------------------- equality
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LayerGraph):
            return NotImplemented
        return self.name == other.name and self.layers == other.layers

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (f"LayerGraph({self.name!r}, {len(self)} layers, batch {self.batch_size}, "
                f"{self.param_count():,} params)")

    # ------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """The JSON-ready dict of the format described in the module docstring."""
        return {
            "format": GRAPH_FORMAT,
            "version": GRAPH_FORMAT_VERSION,
            "name": self.name,
            "layers": [{"name": L.name, "op": L.op, "inputs": list(L.inputs),
                        "attrs": {k: _thaw(v) for k, v in L.attrs.items()},
                        "output_shape": list(L.output_shape)}
                       for L in self._layers.values()],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> "LayerGraph":
        """Build a graph from :meth:`to_dict`'s format (layers may come in any order).

        Raises
        ------
        FormatError
            Not this format, wrong version, missing keys.
        InvalidGraphError
            Cycles, unknown inputs or ops, shape mismatches, an ``output_shape`` that differs
            from the inferred one.
        """
        if not isinstance(data, Mapping) or data.get("format") != GRAPH_FORMAT:
            raise FormatError(
                f"not a layer graph: expected 'format': {GRAPH_FORMAT!r}")
        if data.get("version") != GRAPH_FORMAT_VERSION:
            raise FormatError(
                f"layer graph format version {data.get('version')!r} is not supported "
                f"(this library reads version {GRAPH_FORMAT_VERSION})")
        recs = data.get("layers")
        if not isinstance(recs, list):
            raise FormatError("layer graph: 'layers' must be a list of layer records")
        by_name: dict[str, Mapping] = {}
        for j, rec in enumerate(recs):
            if not isinstance(rec, Mapping) or "name" not in rec or "op" not in rec:
                raise FormatError(f"layer record {j} needs at least 'name' and 'op'")
            if rec["name"] in by_name:
                raise InvalidGraphError(
                    f"duplicate layer name {rec['name']!r}: each layer needs its own name")
            by_name[rec["name"]] = rec
        dep = nx.DiGraph()
        dep.add_nodes_from(by_name)
        for rec in recs:
            for u in rec.get("inputs", []):
                if u not in by_name:
                    raise InvalidGraphError(
                        f"layer {rec['name']!r} ({rec['op']}): unknown input layer {u!r}")
                dep.add_edge(u, rec["name"])
        if not nx.is_directed_acyclic_graph(dep):
            cyc = [u for u, _ in nx.find_cycle(dep)]
            raise InvalidGraphError(
                f"the graph has a cycle through layers {cyc}; a layer graph must be acyclic")
        pos = {r["name"]: j for j, r in enumerate(recs)}
        order = nx.lexicographical_topological_sort(dep, key=lambda v: pos[v])
        g = cls(data.get("name", ""))
        for v in order:
            rec = by_name[v]
            g.add_layer(v, rec["op"], tuple(rec.get("inputs", ())), **dict(rec.get("attrs", {})))
            if "output_shape" in rec and tuple(rec["output_shape"]) != g._layers[v].output_shape:
                raise InvalidGraphError(
                    f"layer {v!r} ({rec['op']}): stored output_shape {tuple(rec['output_shape'])}"
                    f" differs from the inferred {g._layers[v].output_shape}")
        return g

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "LayerGraph":
        """Read a graph written by :meth:`save`.

        Raises
        ------
        FormatError
            Unreadable file or not JSON of this format (names the file).
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise FormatError(f"cannot read layer graph {str(path)!r}: {e}") from e
        try:
            return cls.from_dict(data)
        except FormatError as e:
            raise FormatError(f"{path}: {e}") from e
