"""The ops of a layer: dimension letters, shape inference, input regions, one rule per op.

Imports only :mod:`milp_parallel.errors` (no other module of ``graph/``: :mod:`.layer` and
:mod:`.layer_graph` read the rules of :data:`_RULES`; the rules see a layer only as an argument).

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
linear, matmul and attention FLOPs are exactly what
``torch.utils.flop_counter.FlopCounterMode`` counts
(2 per multiply-add, bias not counted); :meth:`~milp_parallel.graph.LayerGraph.matmul_flops`
sums them.

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
:meth:`~milp_parallel.graph.Layer.input_region` maps half-open output boxes ``[lo, hi)`` (arrays
of shape ``(..., ndim_out)``) to half-open boxes of one input (shape ``(..., ndim_in)``),
clipped to the input's shape: conv / pool rows ``[lo*stride - pad, (hi-1)*stride - pad +
dilation*(k-1) + 1)`` and, for conv, the input channels of the groups the output channels belong
to (all channels when ``groups == 1``, channel ``c`` only for depthwise); adaptive pool the
union of its windows; linear the same rows and all input features; element-wise ops, add, mul,
dropout and batch-norm the same box (size-1 broadcast dims of mul give ``[0, 1)``); concat the
part of the box inside that input, shifted; flatten / reshape / loss the same samples and
everything else; transpose the permuted box; softmax / layer-norm the same box with the whole
last dim; embedding the ``(n, s)`` part of the box; matmul ``a``: the box's rows and all of
``K``, ``b``: all of ``K`` and the box's columns. An empty output box gives an empty input box.

Attributes and their defaults
-----------------------------
What each op takes (:data:`OP_ATTRS`; the builder and the JSON reader refuse any other). An
attribute left out, or ``null`` in a file, takes its default; **bold** ones are required:

============= ==============================================================================
op            attributes (default)
============= ==============================================================================
input         **shape**, dims (by rank)
conv          **out_channels**, **kernel**, stride (1, as torch), padding (0), dilation (1),
              groups (1), bias (true), in_channels (the input's, checked when given)
pool          **kernel**, kind ("max"), stride (the kernel, as torch), padding (0),
              dilation (1), ceil_mode (false)
adaptive_pool **output_size**, kind ("avg")
global_pool   kind ("avg")
linear        **out_features**, bias (true), in_features (checked when given), tied_to
elementwise   fn ("relu")
concat        dim ("c")
reshape       **shape**, dims (by rank)
transpose     **perm**, dims (the permuted input's)
dropout       p (0.5)
embedding     **vocab**, **dim**
attention     **heads**, kv_heads (heads), head_dim (from the width), causal (true),
              dropout (0.0)
slice         **dim**, start (0), stop (the dim's size)
loss          shift (0; a causal LM scoring next tokens: 1)
fanout        linear_readers (false; every reader is a linear)
others        none
============= ==============================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import InvalidGraphError

#: Meaning of each dimension letter.
DIM_LETTERS = {
    "n": "sample", "c": "channel / feature", "d": "depth", "h": "height", "w": "width",
    "s": "sequence position", "a": "attention head", "t": "key position",
    "x": "other", "y": "other", "z": "other", "u": "other", "v": "other", "k": "other",
}
_SPARE_LETTERS = "xyzuvktsadhwc"
_DEFAULT_DIMS = {1: "n", 2: "nc", 3: "ncw", 4: "nchw", 5: "ncdhw"}


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


# --------------------------------------------------------------------- shape inference
#: The largest extent of one dimension (and of a product of dims per sample) a layer may
#: have: beyond it the cost model's int64 tile arithmetic would overflow.
MAX_EXTENT = 2**40


class _Inference:
    """What one op's inference rule sees: the layer's name, op, attributes and inputs.

    ``a`` is the attribute dict being normalized (rules update it in place); ``x`` is the
    first input's shape and ``n`` the batch size.
    """

    __slots__ = ("name", "op", "a", "shapes", "dims_in", "x", "n")

    def __init__(self, name: str, op: str, attrs: dict, shapes: list[tuple[int, ...]],
                 dims_in: list[tuple[str, ...]]):
        self.name, self.op, self.a = name, op, dict(attrs)
        self.shapes, self.dims_in = shapes, dims_in
        self.x = shapes[0] if shapes else ()
        self.n = self.x[0] if self.x else 0

    def error(self, message: str) -> InvalidGraphError:
        return InvalidGraphError(f"layer {self.name!r} ({self.op}): {message}")

    def need_rank(self, lo_rank: int, hi_rank: int | None = None, idx: int = 0) -> None:
        r = len(self.shapes[idx])
        if r < lo_rank or (hi_rank is not None and r > hi_rank):
            want = f"{lo_rank}" if hi_rank == lo_rank else \
                f"{lo_rank}..{hi_rank}" if hi_rank else f">= {lo_rank}"
            raise self.error(f"input {idx} has shape {self.shapes[idx]} (rank {r}); expected "
                             f"rank {want} (batch first)")

    def integer(self, key: str, default: Any = None, *, minimum: int | None = 1) -> int:
        """An integer attribute (``True``, ``2.5``, ``"2"`` refused)."""
        v = self.a.get(key, default)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v) == int(v):
                v = int(v)
            else:
                raise self.error(f"{key} must be an integer, got {v!r:.40}")
        v = int(v)
        if minimum is not None and v < minimum:
            raise self.error(f"{key} {v} must be >= {minimum}")
        if v > MAX_EXTENT:
            raise self.error(f"{key} {v} is larger than {MAX_EXTENT} (2**40)")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.a.get(key, default)
        if not isinstance(v, (bool, np.bool_, int, np.integer)) or int(v) not in (0, 1):
            raise self.error(f"{key} must be true or false, got {v!r:.40}")
        return bool(v)

    def kind(self, default: str) -> str:
        v = self.a.get("kind", default)
        if v not in ("max", "avg"):
            raise self.error(f"kind {v!r:.40} is not 'max' or 'avg'")
        return v

    def ints(self, key: str, v: Any, n: int) -> tuple[int, ...]:
        """An int or a sequence of ``n`` ints (kernel, stride, padding, ...)."""
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            v = (v,) * n
        if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Iterable):
            raise self.error(f"{key} must be an int or a sequence of {n} ints, got {v!r:.40}")
        t = []
        for x in v:
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
                raise self.error(f"{key} must be an int or a sequence of {n} ints, got "
                                 f"{v!r:.40}")
            if abs(int(x)) > MAX_EXTENT:
                raise self.error(f"{key} {v!r:.40} holds a value beyond {MAX_EXTENT}")
            t.append(int(x))
        if len(t) != n:
            raise self.error(f"{key} {v!r:.40} has {len(t)} entries; the input has {n} spatial "
                             f"dims, so give {n} (or one int)")
        return tuple(t)

    def letters(self, key: str, rank: int, default: tuple[str, ...]) -> tuple[str, ...]:
        v = self.a.get(key)
        if v is None:
            return default
        if not isinstance(v, (str, tuple, list)) or not all(isinstance(c, str) for c in v):
            raise self.error(f"{key} must be a string of dim letters, got {v!r:.40}")
        dims = tuple(v)
        _check_dims(self.name, dims, rank)
        return dims


#: What a rule returns: (normalized attrs, output shape, dims, params, forward FLOPs/sample).
_Inferred = tuple[dict, tuple[int, ...], tuple[str, ...], int, float]


def _infer_input(c: _Inference) -> _Inferred:
    shape = c.a.get("shape", ())
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise c.error(f"shape must be a list of positive ints, got {shape!r:.40}")
    shape = c.ints("shape", tuple(shape), len(tuple(shape)))
    if not shape or any(v <= 0 for v in shape):
        raise c.error(f"shape {shape} must be non-empty with positive dims (batch first)")
    dims = c.letters("dims", len(shape), _default_dims(len(shape)))
    c.a["shape"], c.a["dims"] = shape, dims
    return c.a, shape, dims, 0, 0.0


def _infer_window(c: _Inference) -> _Inferred:
    """conv and pool: a sliding window over the spatial dims (1-D, 2-D or 3-D)."""
    c.need_rank(3, 5)
    a, x, name, op = c.a, c.x, c.name, c.op
    nsp = len(x) - 2
    k = c.ints("kernel", a.get("kernel"), nsp)
    stride = a.get("stride")
    if stride is None:  # torch's defaults: a convolution steps by 1, a pooling by its kernel
        stride = k if op == "pool" else 1
    s = c.ints("stride", stride, nsp)
    p = c.ints("padding", a.get("padding", 0), nsp)
    d = c.ints("dilation", a.get("dilation", 1), nsp)
    if any(v <= 0 for v in k + s + d) or any(v < 0 for v in p):
        raise c.error(f"kernel {k}, stride {s}, dilation {d} must be positive and padding {p} "
                      "non-negative")
    a.update(kernel=k, stride=s, padding=p, dilation=d)
    if op == "pool":
        a["kind"] = c.kind("max")
        if any(pp > kk // 2 for pp, kk in zip(p, k)):
            raise c.error(f"padding {p} exceeds half the kernel {k}")
        a["ceil_mode"] = c.flag("ceil_mode", False)
        out = (c.n, x[1]) + _window_out(name, op, x[2:], k, s, p, d, a["ceil_mode"])
        return a, out, c.dims_in[0], 0, float(_prod(out[1:]) * _prod(k))
    cin = x[1]
    cout = c.integer("out_channels", 0)
    g = c.integer("groups", 1)
    if a.get("in_channels") is not None and c.integer("in_channels") != cin:
        raise c.error(f"input 0 has {cin} channels (shape {x}) but "
                      f"in_channels={a['in_channels']}")
    if cin % g or cout % g:
        raise c.error(f"groups={g} must divide in_channels={cin} and out_channels={cout}")
    a.update(out_channels=cout, groups=g, bias=c.flag("bias", True), in_channels=cin)
    out = (c.n, cout) + _window_out(name, op, x[2:], k, s, p, d, False)
    params = cout * (cin // g) * _prod(k) + (cout if a["bias"] else 0)
    flops = 2.0 * _prod(out[1:]) * (cin // g) * _prod(k)
    return a, out, c.dims_in[0], params, flops


def _infer_adaptive_pool(c: _Inference) -> _Inferred:
    c.need_rank(3, 5)
    x = c.x
    osz = c.ints("output_size", c.a.get("output_size"), len(x) - 2)
    if any(v <= 0 for v in osz):
        raise c.error(f"output_size {osz} must be positive")
    c.a.update(output_size=osz, kind=c.kind("avg"))
    win = 1
    for i_, o_ in zip(x[2:], osz):
        j = np.arange(o_)
        win *= int(np.sum(-((-(j + 1) * i_) // o_) - (j * i_) // o_))
    return c.a, (c.n, x[1]) + osz, c.dims_in[0], 0, float(x[1] * win)


def _infer_global_pool(c: _Inference) -> _Inferred:
    c.need_rank(3, 5)
    c.a["kind"] = c.kind("avg")
    out = (c.n, c.x[1]) + (1,) * (len(c.x) - 2)
    return c.a, out, c.dims_in[0], 0, float(_prod(c.x[1:]))


def _infer_linear(c: _Inference) -> _Inferred:
    c.need_rank(2)
    x = c.x
    fin = x[-1]
    fout = c.integer("out_features", 0)
    if c.a.get("in_features") is not None and c.integer("in_features") != fin:
        raise c.error(f"input 0 has {fin} features (shape {x}) but "
                      f"in_features={c.a['in_features']}; add a flatten or fix in_features")
    c.a.update(out_features=fout, in_features=fin, bias=c.flag("bias", True))
    tied = c.a.pop("tied_to", None)
    if tied is not None:
        if not isinstance(tied, str) or not tied:
            raise c.error(f"tied_to must be the name of an embedding layer, got {tied!r:.40}")
        c.a["tied_to"] = tied
    params = (0 if tied else fin * fout) + (fout if c.a["bias"] else 0)
    return c.a, x[:-1] + (fout,), c.dims_in[0], params, 2.0 * _prod(x[1:-1]) * fin * fout


def _elementwise_rule(flops_per_element: int, params: Callable[[_Inference], int] | None = None,
                      check: Callable[[_Inference], None] | None = None):
    """A same-shape op: ``flops_per_element`` FLOPs per output element, ``params(c)``."""
    def rule(c: _Inference) -> _Inferred:
        if params is not None:
            c.need_rank(2)
        if check is not None:
            check(c)
        n_params = params(c) if params is not None else 0
        return c.a, c.x, c.dims_in[0], n_params, float(flops_per_element * _prod(c.x[1:]))
    return rule


def _check_fn(c: _Inference) -> None:
    fn = c.a.get("fn", "relu")
    if not isinstance(fn, str) or not fn:
        raise c.error(f"fn must be a non-empty string, got {fn!r:.40}")
    c.a["fn"] = fn


def _check_p(c: _Inference) -> None:
    pr = c.a.get("p", 0.5)
    if isinstance(pr, (bool, np.bool_)) or not isinstance(pr, (int, float, np.number)) \
            or not 0.0 <= float(pr) < 1.0:
        raise c.error(f"p={pr!r:.40} must be a number in [0, 1)")
    c.a["p"] = float(pr)


def _infer_add_mul(c: _Inference) -> _Inferred:
    shapes, op = c.shapes, c.op
    out = c.x
    if op == "mul" and len({len(s) for s in shapes}) == 1:
        out = tuple(max(col) for col in zip(*shapes))
    for j, sj in enumerate(shapes):
        if not (len(sj) == len(out) and all(v == o or (op == "mul" and v == 1)
                                            for v, o in zip(sj, out))):
            why = ("the shape of input 0; add does not broadcast" if op == "add" else
                   "the broadcast shape; mul broadcasts size-1 dims only")
            raise c.error(f"input {j} has shape {sj}, expected {out} ({why})")
    dims = c.dims_in[shapes.index(out)] if out in shapes else c.dims_in[0]
    return c.a, out, dims, 0, float((len(shapes) - 1) * _prod(out[1:]))


def _infer_concat(c: _Inference) -> _Inferred:
    x, d0 = c.x, c.dims_in[0]
    dim = c.a.get("dim", "c")
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, (bool, np.bool_)):
        if not 1 <= int(dim) < len(x):
            raise c.error(f"axis {dim} must be in 1..{len(x) - 1} (the batch axis 0 cannot be "
                          "concatenated)")
        dim = d0[int(dim)]
    if not isinstance(dim, str) or dim not in d0 or dim == d0[0]:
        raise c.error(f"dim {dim!r:.40} is not a non-batch dim of input 0 (dims "
                      f"{''.join(d0)})")
    axis = d0.index(dim)
    c.a["dim"] = dim
    for j, sj in enumerate(c.shapes):
        if len(sj) != len(x) or any(v != w for t, (v, w) in enumerate(zip(sj, x)) if t != axis):
            raise c.error(f"input {j} has shape {sj} but input 0 has {x}; all dims except "
                          f"{dim!r} (axis {axis}) must match")
    out = x[:axis] + (sum(s[axis] for s in c.shapes),) + x[axis + 1:]
    return c.a, out, d0, 0, 0.0


def _infer_flatten(c: _Inference) -> _Inferred:
    c.need_rank(2)
    return c.a, (c.n, _prod(c.x[1:])), ("n", "c"), 0, 0.0


def _infer_reshape(c: _Inference) -> _Inferred:
    x = c.x
    raw = c.a.get("shape", ())
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise c.error(f"shape must be a list of ints, got {raw!r:.40}")
    raw = tuple(raw)
    shape = list(c.ints("shape", raw, len(raw)))
    per = _prod(x[1:])
    if shape.count(-1) > 1 or any(v == 0 or v < -1 for v in shape) or not shape:
        raise c.error(f"shape {tuple(shape)} (per sample, batch excluded) must have positive "
                      "dims and at most one -1")
    if -1 in shape:
        known = _prod(v for v in shape if v != -1)
        if per % known:
            raise c.error(f"cannot reshape {per} elements per sample (input shape {x}) into "
                          f"{tuple(shape)}")
        shape[shape.index(-1)] = per // known
    if _prod(shape) != per:
        raise c.error(f"input 0 has {per} elements per sample (shape {x}) but the target shape "
                      f"{tuple(shape)} has {_prod(shape)}")
    out = (c.n,) + tuple(shape)
    dims = c.letters("dims", len(out), _default_dims(len(out)))
    c.a.update(shape=tuple(shape), dims=dims)
    return c.a, out, dims, 0, 0.0


def _infer_transpose(c: _Inference) -> _Inferred:
    x = c.x
    raw = c.a.get("perm", ())
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise c.error(f"perm must be a list of axis indices, got {raw!r:.40}")
    raw = tuple(raw)
    perm = c.ints("perm", raw, len(raw))
    if sorted(perm) != list(range(len(x))) or perm[0] != 0:
        raise c.error(f"perm {perm} must be a permutation of 0..{len(x) - 1} that keeps the "
                      "batch axis 0 first")
    out = tuple(x[p_] for p_ in perm)
    dims = c.letters("dims", len(out), tuple(c.dims_in[0][p_] for p_ in perm))
    c.a.update(perm=perm, dims=dims)
    return c.a, out, dims, 0, 0.0


def _infer_loss(c: _Inference) -> _Inferred:
    c.need_rank(2)
    flops = float(3 * _prod(c.x[1:]))
    shift = c.integer("shift", 0, minimum=0)
    if shift:
        c.need_rank(3)
        S = c.x[1]
        if shift >= S:
            raise c.error(f"shift {shift} leaves no position of the {S} to score; a causal "
                          f"language model's is 1")
        c.a.update(shift=shift)
        flops *= (S - shift) / S
    else:
        c.a.pop("shift", None)
    return c.a, (c.n,), ("n",), 0, flops


def _infer_embedding(c: _Inference) -> _Inferred:
    c.need_rank(2)
    vocab, dim = c.integer("vocab", 0), c.integer("dim", 0)
    c.a.update(vocab=vocab, dim=dim)
    dims = _unique_letters(c.dims_in[0] + ("c",))
    return c.a, c.x + (dim,), dims, vocab * dim, 0.0


def _infer_matmul(c: _Inference) -> _Inferred:
    A, B = c.shapes
    if len(A) < 3 or len(A) != len(B):
        raise c.error(f"inputs must have the same rank >= 3 ((N, *B, M, K) and (N, *B, K, P)); "
                      f"got {A} and {B}")
    if A[:-2] != B[:-2]:
        raise c.error(f"batch dims differ: input 0 {A}, input 1 {B} (no broadcasting: both "
                      "must share (N, *B))")
    if A[-1] != B[-2]:
        raise c.error(f"input 0 {A} has K={A[-1]} but input 1 {B} has K={B[-2]} (second to "
                      "last dim); transpose one of them")
    out = A[:-1] + (B[-1],)
    dims = _unique_letters(c.dims_in[0][:-1] + (c.dims_in[1][-1],))
    return c.a, out, dims, 0, 2.0 * _prod(A[1:-1]) * A[-1] * B[-1]


def _infer_attention(c: _Inference) -> _Inferred:
    c.need_rank(3, 3)
    x = c.x
    heads = c.integer("heads", 0)
    groups = c.integer("kv_heads", heads) if c.a.get("kv_heads") is not None else heads
    if heads % groups:
        raise c.error(f"heads={heads} must be a multiple of kv_heads={groups}")
    width = x[-1]
    d = width // (heads + 2 * groups) if c.a.get("head_dim") is None else c.integer("head_dim")
    if d <= 0 or (heads + 2 * groups) * d != width:
        raise c.error(f"the packed input has {width} features but (heads + 2 kv_heads) x "
                      f"head_dim = ({heads} + 2 x {groups}) x {d}; give the projection "
                      "(heads + 2 kv_heads) x head_dim outputs")
    p_drop = c.a.get("dropout", 0.0)
    if isinstance(p_drop, (bool, np.bool_)) or not isinstance(p_drop, (int, float, np.number)) \
            or not 0.0 <= float(p_drop) < 1.0:
        raise c.error(f"dropout={p_drop!r:.40} must be a number in [0, 1)")
    c.a.update(heads=heads, kv_heads=groups, head_dim=d, causal=c.flag("causal", True),
               dropout=float(p_drop))
    seq = x[1]
    return c.a, (c.n, seq, heads * d), c.dims_in[0], 0, 4.0 * seq * seq * heads * d


def _infer_slice(c: _Inference) -> _Inferred:
    x, d0 = c.x, c.dims_in[0]
    dim = c.a.get("dim")
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, (bool, np.bool_)):
        dim = d0[int(dim)] if 1 <= int(dim) < len(x) else None
    if not isinstance(dim, str) or dim not in d0[1:]:
        raise c.error(f"dim {c.a.get('dim')!r:.40} is not a non-batch dim of the input (dims "
                      f"{''.join(d0)})")
    axis = d0.index(dim)
    start = c.integer("start", 0, minimum=0)
    stop = c.integer("stop", x[axis], minimum=0)
    if not 0 <= start < stop <= x[axis]:
        raise c.error(f"[{start}, {stop}) is not a non-empty range inside dim {dim!r} of size "
                      f"{x[axis]}")
    c.a.update(dim=dim, start=start, stop=stop)
    return c.a, x[:axis] + (stop - start,) + x[axis + 1:], d0, 0, 0.0

# The rules take the layer (a :class:`~milp_parallel.graph.layer.Layer`) as a plain argument:
# layer.py imports this module, never the reverse.
def _all_dims(layer) -> tuple[str, ...]:
    return layer.dims


@dataclass(frozen=True)
class _OpRule:
    """Everything op-specific about a layer, in one row of :data:`_RULES`.

    Attributes
    ----------
    infer : callable
        ``(_Inference) -> (attrs, output shape, dims, params, flops per sample)``.
    region : callable
        ``(layer, i, lo, hi) -> (in_lo, in_hi)``, unclipped (see
        :meth:`~milp_parallel.graph.Layer.input_region`).
    arity : (int, int or None)
        Least and most inputs (``None``: no most).
    parallel : callable
        ``layer -> dims`` a configuration may split.
    weight_split : callable
        ``layer -> dims`` whose split also splits the parameters.
    attrs : mapping of str to str
        The op's attributes and the kind of JSON value each takes (:data:`_ATTR_KINDS`).
    required : tuple of str
        The attributes a layer of this op must give.
    """

    infer: Callable[[_Inference], _Inferred]
    region: Callable
    arity: tuple[int, int | None] = (1, 1)
    parallel: Callable[[Any], tuple[str, ...]] = _all_dims
    weight_split: Callable[[Any], tuple[str, ...]] = lambda layer: ()
    attrs: Mapping[str, str] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    names: frozenset = field(init=False, repr=False)  # the keys of attrs, for Fields.keys

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.attrs))


#: What each kind of attribute value may be in a file (``null`` always means the default).
_ATTR_KINDS = {
    "int": "an integer", "ints": "an integer or a list of integers", "bool": "true or false",
    "str": "a string", "number": "a number", "letters": "a string of dim letters",
    "axis": "a dim letter or an axis index", "shape": "a list of integers",
}

def _batch_dim(layer) -> tuple[str, ...]:
    return ("n",) if "n" in layer.dims else layer.dims[:1]


_WINDOW = {"kernel": "ints", "stride": "ints", "padding": "ints", "dilation": "ints"}

_RULES: dict[str, _OpRule] = {
    "input": _OpRule(_infer_input, _region_none, arity=(0, 0),
                     attrs={"shape": "shape", "dims": "letters"}, required=("shape",)),
    "conv": _OpRule(_infer_window, _region_window,
                    weight_split=lambda layer: (layer.dims[1],),
                    attrs={"out_channels": "int", **_WINDOW, "groups": "int", "bias": "bool",
                           "in_channels": "int"}, required=("out_channels", "kernel")),
    "pool": _OpRule(_infer_window, _region_window,
                    attrs={**_WINDOW, "kind": "str", "ceil_mode": "bool"},
                    required=("kernel",)),
    "adaptive_pool": _OpRule(_infer_adaptive_pool, _region_adaptive,
                             attrs={"output_size": "ints", "kind": "str"},
                             required=("output_size",)),
    "global_pool": _OpRule(_infer_global_pool, _region_global,
                           parallel=lambda layer: layer.dims[:2], attrs={"kind": "str"}),
    "linear": _OpRule(_infer_linear, _region_lastdim_all,
                      weight_split=lambda layer: (layer.dims[-1],),
                      attrs={"out_features": "int", "bias": "bool", "in_features": "int",
                             "tied_to": "str"}, required=("out_features",)),
    "batchnorm": _OpRule(_elementwise_rule(2, params=lambda c: 2 * c.x[1]), _region_same,
                         weight_split=lambda layer: (layer.dims[1],)),
    "layernorm": _OpRule(_elementwise_rule(5, params=lambda c: 2 * c.x[-1]),
                         _region_lastdim_all, parallel=lambda layer: layer.dims[:-1]),
    "elementwise": _OpRule(_elementwise_rule(1, check=_check_fn), _region_same,
                           attrs={"fn": "str"}),
    "add": _OpRule(_infer_add_mul, _region_same, arity=(2, None)),
    "mul": _OpRule(_infer_add_mul, _region_same, arity=(2, None)),
    "concat": _OpRule(_infer_concat, _region_concat, arity=(1, None),
                      attrs={"dim": "axis"}),
    "flatten": _OpRule(_infer_flatten, _region_samples, parallel=_batch_dim),
    "reshape": _OpRule(_infer_reshape, _region_samples, parallel=_batch_dim,
                       attrs={"shape": "shape", "dims": "letters"}, required=("shape",)),
    "transpose": _OpRule(_infer_transpose, _region_transpose,
                         attrs={"perm": "shape", "dims": "letters"}, required=("perm",)),
    "dropout": _OpRule(_elementwise_rule(1, check=_check_p), _region_same,
                       attrs={"p": "number"}),
    "softmax": _OpRule(_elementwise_rule(3), _region_lastdim_all,
                       parallel=lambda layer: layer.dims[:-1]),
    "fanout": _OpRule(_elementwise_rule(0), _region_same, attrs={"linear_readers": "bool"}),
    "loss": _OpRule(_infer_loss, _region_samples, parallel=_batch_dim,
                    attrs={"shift": "int"}),
    "embedding": _OpRule(_infer_embedding, _region_embedding,
                         weight_split=lambda layer: (layer.dims[-1],),
                         attrs={"vocab": "int", "dim": "int"}, required=("vocab", "dim")),
    "matmul": _OpRule(_infer_matmul, _region_matmul, arity=(2, 2)),
    "rmsnorm": _OpRule(_elementwise_rule(4, params=lambda c: c.x[-1]), _region_lastdim_all,
                       parallel=lambda layer: layer.dims[:-1]),
    "attention": _OpRule(_infer_attention, _region_attention,
                         parallel=lambda layer: (layer.dims[0], layer.dims[-1]),
                         attrs={"heads": "int", "kv_heads": "int", "head_dim": "int",
                                "causal": "bool", "dropout": "number"}, required=("heads",)),
    "slice": _OpRule(_infer_slice, _region_slice,
                     attrs={"dim": "axis", "start": "int", "stop": "int"}, required=("dim",)),
}

#: Every op a layer may have.
OPS = tuple(_RULES)

#: The attributes each op takes (any other is refused, by the builder and the reader).
OP_ATTRS: Mapping[str, tuple[str, ...]] = {op: tuple(r.attrs) for op, r in _RULES.items()}


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
           dims_in: list[tuple[str, ...]]) -> _Inferred:
    """Return (normalized attrs, output shape, dims, params, flops per sample)."""
    return _RULES[op].infer(_Inference(name, op, attrs, shapes, dims_in))


def _check_dims(name: str, dims: tuple[str, ...], rank: int) -> None:
    if len(dims) != rank or len(set(dims)) != rank or any(d not in DIM_LETTERS for d in dims):
        raise InvalidGraphError(
            f"layer {name!r}: dims {''.join(map(str, dims))!r} must be {rank} distinct letters "
            f"from {''.join(DIM_LETTERS)}")

