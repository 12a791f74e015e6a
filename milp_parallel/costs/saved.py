"""What a layer's backward pass keeps: the bytes autograd saves for it, per tile.

:func:`saved_bytes` prices, for every tile of every configuration, the tensors a layer's
autograd node saves for the backward pass (what ``torch.autograd.graph.saved_tensors_hooks``
sees), as the layer-wise program of :mod:`milp_parallel.runtime` runs the layer on its tile:
each input's *needed box* (``Layer.input_region``, the halo included) and, where the op
keeps it, its output tile. Parameters, buffers and shapes are not activations and are not
counted here (weights, gradients and optimizer state are priced by
:meth:`~milp_parallel.costs.CostModel.memory_parts`).

======================  ==========================================================  =======
op                      saved for backward                                          dtype
======================  ==========================================================  =======
conv                    the input window, zero padding included (the program pads  act.
                        its box explicitly, then runs the convolution unpadded)
pool (max)              the padded input window, and the indices of the output     act.,
                        tile                                                        int64
pool (avg)              the padded input window                                     act.
adaptive_pool           the input box (max: and the indices of the output tile)     act.
global_pool             avg: nothing (a mean keeps only its shape); max: the input  act.
                        box and the indices
linear, embedding       the input box (embedding: its int64 ids)                    act.
batchnorm               the input box and the batch mean / inverse std per channel  act.,
                                                                                    fp32
layernorm, rmsnorm      the input box and the mean / reciprocal std per row         act.,
                        (rmsnorm: the std only)                                     fp32
elementwise, softmax    one tensor the size of the output tile (ReLU, sigmoid,      act.
                        tanh, softmax keep the output; GELU, SiLU the input)
dropout                 the keep mask of the output tile                            bool
mul, matmul             every input's box (each factor's gradient is the other's)   act.
attention               the packed q/k/v box and the output tile (a memory-         act.
                        efficient kernel's saves, its log-sum-exp row neglected)
loss                    the input box (cross-entropy keeps its log-softmax)         act.
add, concat, flatten,   nothing (add and concat route the gradient; the others are  --
reshape, transpose,     views of their input)
slice, input
======================  ==========================================================  =======

Storage is counted once per tensor a layer saves: a layer whose saved input is the very
storage its producer also keeps (e.g. a ``linear`` right after a ReLU, same layout, no
redistribution) is priced twice, since the per-layer tables cannot see the edge (see
``docs/runtime.md``). Convolutions and pools never share: their padded window is a copy.

May import: numpy only (it reads a layer through its ``op``, ``attrs``, shapes and
``input_region``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["saved_bytes", "SAVED_RULES"]

#: Bytes of an index (int64), a mask element (bool) and a statistic (fp32).
INDEX_BYTES, MASK_BYTES, STAT_BYTES = 8, 1, 4

#: Per op, what its backward saves (the table of the module docstring, in words).
SAVED_RULES = {
    "conv": "padded input window", "pool": "padded input window (+ int64 indices: max)",
    "adaptive_pool": "input box (+ int64 indices: max)",
    "global_pool": "nothing (avg) / input box + indices (max)",
    "linear": "input box", "embedding": "int64 ids", "batchnorm": "input box + 2 C fp32",
    "layernorm": "input box + 2 rows fp32", "rmsnorm": "input box + 1 row fp32",
    "elementwise": "output tile", "softmax": "output tile", "dropout": "bool mask",
    "mul": "every input box", "matmul": "every input box",
    "attention": "input box + output tile", "loss": "input box",
    "add": "nothing", "concat": "nothing", "flatten": "nothing", "reshape": "nothing",
    "transpose": "nothing", "slice": "nothing", "input": "nothing", "fanout": "nothing",
}

_NOTHING = frozenset({"add", "concat", "flatten", "reshape", "transpose", "slice", "input",
                      "fanout"})


def _volume(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.maximum(hi - lo, 0).prod(axis=-1).astype(float)


def _window(layer, o_lo: np.ndarray, o_hi: np.ndarray) -> np.ndarray:
    """Elements of the padded input window a conv / pool tile runs on, shape (K, T)."""
    r_lo, r_hi = layer.input_region(0, o_lo, o_hi)
    ext = np.maximum(r_hi - r_lo, 0).astype(np.int64)
    a = layer.attrs
    k = np.asarray(a["kernel"], dtype=np.int64)
    s = np.asarray(a.get("stride") or k, dtype=np.int64)
    d = np.asarray(a.get("dilation") or (1,) * len(k), dtype=np.int64)
    o_ext = np.maximum(o_hi[..., 2:] - o_lo[..., 2:], 0)
    win = np.where(o_ext > 0, (o_ext - 1) * s + d * (k - 1) + 1, 0)
    ext = np.concatenate([ext[..., :2], win], axis=-1)
    return ext.prod(axis=-1).astype(float)


def saved_bytes(layer, o_lo: np.ndarray, o_hi: np.ndarray, bytes_per_element: float
                ) -> np.ndarray:
    """Bytes the layer's backward keeps on each tile, shape ``o_lo.shape[:-1]``.

    Parameters
    ----------
    layer : Layer
    o_lo, o_hi : numpy.ndarray of int, shape (K, T, ndim_out)
        The output tiles (:func:`~milp_parallel.costs.configs.tile_boxes`); empty tiles
        keep nothing.
    bytes_per_element : float
        Of the activations (indices, masks and statistics have their own sizes).

    Returns
    -------
    numpy.ndarray of float

    Examples
    --------
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (2, 3, 8, 8))
    >>> _ = g.conv("c", "x", 4, 3, padding=1)
    >>> lo, hi = np.zeros((1, 1, 4), np.int64), np.array([[[2, 4, 8, 8]]])
    >>> saved_bytes(g.layer("c"), lo, hi, 4).tolist()   # 2 x 3 x 10 x 10 floats
    [[2400.0]]
    """
    op = layer.op
    out = _volume(o_lo, o_hi)
    empty = out == 0
    bpe = float(bytes_per_element)

    def box(i: int) -> np.ndarray:
        return _volume(*layer.input_region(i, o_lo, o_hi))

    kind = layer.attrs.get("kind", "avg") if op in ("pool", "adaptive_pool",
                                                     "global_pool") else None
    if op in _NOTHING:
        res = np.zeros_like(out)
    elif op == "conv":
        res = _window(layer, o_lo, o_hi) * bpe
    elif op == "pool":
        res = _window(layer, o_lo, o_hi) * bpe + (out * INDEX_BYTES if kind == "max" else 0)
    elif op in ("adaptive_pool", "global_pool"):
        if op == "global_pool" and kind != "max":
            res = np.zeros_like(out)
        else:
            res = box(0) * bpe + (out * INDEX_BYTES if kind == "max" else 0)
    elif op == "embedding":
        res = box(0) * INDEX_BYTES
    elif op in ("linear", "loss"):
        res = box(0) * bpe
    elif op == "batchnorm":
        res = box(0) * bpe + 2.0 * np.maximum(o_hi[..., 1] - o_lo[..., 1], 0) * STAT_BYTES
    elif op in ("layernorm", "rmsnorm"):
        last = np.maximum(o_hi[..., -1] - o_lo[..., -1], 1)
        stats = 2.0 if op == "layernorm" else 1.0
        res = box(0) * bpe + stats * (out / last) * STAT_BYTES
    elif op in ("elementwise", "softmax"):
        res = out * bpe
    elif op == "dropout":
        res = out * MASK_BYTES
    elif op in ("mul", "matmul"):
        res = sum(box(i) for i in range(len(layer.inputs))) * bpe
    elif op == "attention":
        res = (box(0) + out) * bpe
    else:       # an op this table does not know: its output tile, as before
        res = out * bpe
    return np.where(empty, 0.0, res)
