"""Layer graphs: :class:`Layer`, :class:`LayerGraph`, shape inference and the JSON format.

A :class:`LayerGraph` is a directed acyclic graph with one node per layer and one edge per
tensor. Every layer knows its output shape (batch first), the letters of its dimensions, its
parameter count, its forward FLOPs per sample, which dimensions a parallel configuration may
split, and, vectorized, which box of each input a box of its output needs.

This is the face of the folder; it re-exports the names that used to live in one
``graph.py``. The modules, each importing only those above it:

- :mod:`.ops`: dimension letters, shape inference, input regions, one rule per op
  (``_RULES``, :data:`OPS`, :data:`OP_ATTRS`), and the table of ops, attributes and defaults;
- :mod:`.layer`: :class:`Layer` and :class:`FrozenAttrs`;
- :mod:`.layer_graph`: :class:`LayerGraph`, its builders and its JSON file format.

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

# FrozenAttrs, MAX_EXTENT and _RULES are not in __all__ but stay importable from here, as
# from the one graph.py before (tests/test_strict_readers.py reads the rules).
from .layer import FrozenAttrs as FrozenAttrs
from .layer import Layer
from .layer_graph import GRAPH_FORMAT, GRAPH_FORMAT_VERSION, LayerGraph
from .ops import _RULES as _RULES
from .ops import DIM_LETTERS, OP_ATTRS, OPS
from .ops import MAX_EXTENT as MAX_EXTENT

__all__ = [
    "Layer",
    "LayerGraph",
    "OPS",
    "OP_ATTRS",
    "GRAPH_FORMAT",
    "GRAPH_FORMAT_VERSION",
    "DIM_LETTERS",
]

