"""The graph: :class:`LayerGraph`, built layer by layer with shape inference, and its JSON file.

Imports :mod:`.ops` and :mod:`.layer` (never the reverse), :mod:`milp_parallel.io` and
:mod:`milp_parallel.errors`.

A :class:`LayerGraph` is a directed acyclic graph with one node per layer and one edge per
tensor, its layers in insertion order, which is a topological order.

JSON format (version 1)
-----------------------
``{"format": "milp_parallel.graph", "version": 1, "name": str, "layers": [{"name", "op",
"inputs": [names], "attrs": {...}, "output_shape": [...]}, ...]}``, layers in topological
order. Attribute values are numbers, strings, booleans and lists (tuples in memory). On load the
shapes are inferred again and checked against ``output_shape`` (which may be omitted).

The reader is strict: a key that is not one of the above (at the top, in a layer, or among the
attributes of its op: :data:`~milp_parallel.graph.ops.OP_ATTRS`) or a value of the wrong type
(a string stride, a number where a list belongs) raises
:class:`~milp_parallel.errors.FormatError` naming the file, the key path
(``layers[3].attrs.paddin``) and the nearest known key. Each op's attributes and their defaults
(an attribute left out, or ``null``, takes its default) are tabled in
:mod:`milp_parallel.graph.ops`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import networkx as nx
import numpy as np

from ..errors import FormatError, InvalidGraphError
from ..io import Fields, describe_type, read_document, read_json, suggest, write_json
from .layer import FrozenAttrs, Layer, _freeze, _thaw
from .ops import _ATTR_KINDS, _RULES, MAX_EXTENT, OPS, _infer, _prod

GRAPH_FORMAT = "milp_parallel.graph"
GRAPH_FORMAT_VERSION = 1

#: The keys of a graph document and of one layer record.
_GRAPH_KEYS = frozenset({"format", "version", "name", "layers"})
_LAYER_KEYS = frozenset({"name", "op", "inputs", "attrs", "output_shape"})


def _check_attr(f: Fields, kind: str, v: Any, where: str) -> None:
    """Refuse an attribute value of the wrong JSON type (:data:`_ATTR_KINDS`)."""
    if v is None:
        return
    if kind == "int":
        f.integer(v, where)
    elif kind == "bool":
        f.boolean(v, where)
    elif kind == "str":
        f.string(v, where)
    elif kind == "number":
        f.number(v, where, finite=True)
    elif kind == "letters":
        if isinstance(v, list):
            for i, x in enumerate(v):
                f.string(x, f"{where}[{i}]")
        elif not isinstance(v, str):
            raise f.error(where, f"must be {_ATTR_KINDS[kind]}, got {describe_type(v)}")
    elif kind == "axis":
        if not isinstance(v, str):
            f.integer(v, where)
    else:  # ints, shape
        if isinstance(v, list):
            for i, x in enumerate(v):
                f.integer(x, f"{where}[{i}]")
        elif kind == "shape" or isinstance(v, bool) or not isinstance(v, int):
            raise f.error(where, f"must be {_ATTR_KINDS[kind]}, got {describe_type(v)}")


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
        if not isinstance(op, str) or op not in _RULES:
            raise InvalidGraphError(
                f"layer {name!r}: unknown op {op!r}; known ops: {', '.join(OPS)}")
        if isinstance(inputs, str):
            inputs = (inputs,)
        inputs = tuple(str(v) for v in inputs)
        lo_ar, hi_ar = _RULES[op].arity
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
        known = _RULES[op].attrs
        for k in attrs:
            if k not in known:
                raise InvalidGraphError(
                    f"layer {name!r} ({op}): unknown attribute {k!r}{suggest(k, known) or ';'} "
                    f"a {op} layer takes {', '.join(known) or 'no attributes'}")
        shapes = [self._layers[v].output_shape for v in inputs]
        dims_in = [self._layers[v].dims for v in inputs]
        if op != "input" and len({s[0] for s in shapes}) > 1:
            raise InvalidGraphError(
                f"layer {name!r} ({op}): inputs have different batch sizes {shapes}")
        try:
            attrs = {k: _freeze(v) for k, v in attrs.items()}
        except TypeError as exc:
            raise InvalidGraphError(f"layer {name!r} ({op}): {exc}") from None
        try:
            a, out, dims, params, flops = _infer(name, op, attrs, shapes, dims_in)
        except InvalidGraphError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            # a rule met an attribute of a type it does not check for: name the layer
            raise InvalidGraphError(f"layer {name!r} ({op}): invalid attributes "
                                    f"{dict(attrs)!r:.120} ({exc})") from None
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
        if _prod(out) > MAX_EXTENT:
            raise InvalidGraphError(
                f"layer {name!r} ({op}): output shape {out} has {_prod(out):.3g} elements, "
                f"more than the {MAX_EXTENT:.3g} (2**40) a layer may have")
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

    def fanout(self, name: str, x: str, *, linear_readers: bool = False) -> str:
        """The identity: ``x`` handed to the several layers that read it (the transformer
        planner inserts one where a tensor has several readers, so that its re-layout is
        priced once and its readers' gradients are summed once). ``linear_readers``: every
        reader is a linear (a sequence-split ``x`` may be gathered once for all of them)."""
        if linear_readers:
            return self.add_layer(name, "fanout", (x,), linear_readers=True)
        return self.add_layer(name, "fanout", (x,))

    def loss(self, name: str, x: str, *, shift: int = 0) -> str:
        """Cross-entropy of logits ``x`` (classes on the last dim); output ``(N,)``.

        ``shift``: the logits ``(N, S, V)`` of positions ``0 .. S-1-shift`` are scored
        against the targets at ``shift .. S-1`` (a causal language model that shifts its
        labels itself, as Hugging Face's do: ``shift=1``, ``S - 1`` positions scored).
        """
        if shift:
            return self.add_layer(name, "loss", (x,), shift=shift)
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
        if isinstance(batch_size, (bool, np.bool_)) \
                or not isinstance(batch_size, (int, np.integer)) \
                or not 1 <= batch_size <= MAX_EXTENT:
            raise InvalidGraphError(f"batch size {batch_size!r:.40} must be a positive integer "
                                    f"(at most {MAX_EXTENT})")
        b = int(batch_size)
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
    def from_dict(cls, data: Mapping, *, source: str = "<dict>") -> "LayerGraph":
        """Build a graph from :meth:`to_dict`'s format (layers may come in any order).

        Parameters
        ----------
        data : mapping
            The parsed document.
        source : str
            Where it came from (a path), the start of every error message.

        Raises
        ------
        FormatError
            Not this format, wrong version, no layers, an unknown key (at the top, in a layer
            or among its op's attributes: names the key path and the nearest known key), a
            field missing or of the wrong type (names the layer record and the field).
        InvalidGraphError
            Cycles, unknown inputs or ops, shape mismatches, an ``output_shape`` that differs
            from the inferred one (names the layer).
        """
        doc = read_document(source, GRAPH_FORMAT, GRAPH_FORMAT_VERSION, data=data,
                            what="layer graph")
        f = Fields(source)
        f.keys(doc, _GRAPH_KEYS, "", required=("layers",))
        recs = f.array(doc["layers"], "layers")
        if not recs:
            raise FormatError(f"{source}: the layer graph has no layers; a graph needs at least "
                              "one input layer")
        by_name: dict[str, dict] = {}
        for j, rec in enumerate(recs):
            where = f"layers[{j}]"
            f.keys(rec, _LAYER_KEYS, where, required=("name", "op"))
            name = f.string(rec["name"], f"{where}.name")
            if not name:
                raise f.error(f"{where}.name", "must be a non-empty string")
            if name in by_name:
                raise FormatError(f"{source}: {where}: duplicate layer name {name!r}; each "
                                  "layer needs its own name")
            op = f.string(rec["op"], f"{where}.op")
            if op not in _RULES:
                raise f.error(f"{where}.op", f"{op!r:.40} is not a known op"
                                             f"{suggest(op, OPS) or ';'} known: {', '.join(OPS)}")
            rule = _RULES[op]
            inputs = f.array(rec.get("inputs", []), f"{where}.inputs")
            attrs = f.keys(rec.get("attrs", {}), rule.names, f"{where}.attrs",
                           required=rule.required, hint=f"these are a {op} layer's attributes")
            for k, v in attrs.items():
                _check_attr(f, rule.attrs[k], v, f"{where}.attrs.{k}")
            shape = rec.get("output_shape")
            if shape is not None:
                shape = tuple(f.integer(v, f"{where}.output_shape[{i}]")
                              for i, v in enumerate(f.array(shape, f"{where}.output_shape")))
            by_name[name] = {
                "op": op,
                "inputs": tuple(f.string(u, f"{where}.inputs[{i}]")
                                for i, u in enumerate(inputs)),
                "attrs": dict(attrs), "output_shape": shape}
        graph_name = doc.get("name", "")
        graph_name = f.string(graph_name, "name") if graph_name is not None else ""
        try:
            return cls._from_records(graph_name, by_name)
        except InvalidGraphError as exc:
            if source == "<dict>":
                raise
            raise InvalidGraphError(f"{source}: {exc}") from None

    @classmethod
    def _from_records(cls, name: str, by_name: dict[str, dict]) -> "LayerGraph":
        dep = nx.DiGraph()
        dep.add_nodes_from(by_name)
        for v, rec in by_name.items():
            for u in rec["inputs"]:
                if u not in by_name:
                    raise InvalidGraphError(
                        f"layer {v!r} ({rec['op']}): unknown input layer {u!r}")
                dep.add_edge(u, v)
        if not nx.is_directed_acyclic_graph(dep):
            cyc = [u for u, _ in nx.find_cycle(dep)]
            raise InvalidGraphError(
                f"the graph has a cycle through layers {cyc}; a layer graph must be acyclic")
        pos = {v: j for j, v in enumerate(by_name)}
        order = nx.lexicographical_topological_sort(dep, key=lambda v: pos[v])
        g = cls(name)
        for v in order:
            rec = by_name[v]
            g.add_layer(v, rec["op"], rec["inputs"], **rec["attrs"])
            stored = rec["output_shape"]
            if stored is not None and stored != g._layers[v].output_shape:
                raise InvalidGraphError(
                    f"layer {v!r} ({rec['op']}): stored output_shape {stored} differs from the "
                    f"inferred {g._layers[v].output_shape}")
        return g

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON to ``path`` (gzip-compressed when it ends in .gz)."""
        write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | Path) -> "LayerGraph":
        """Read a graph written by :meth:`save` (gzip-compressed or not).

        Raises
        ------
        FormatError
            Missing or unreadable file, not JSON, not this format, no layers, a malformed
            field (names the file and the field).
        InvalidGraphError
            An inconsistent graph (names the file and the layer).
        """
        return cls.from_dict(read_json(path, what="layer graph file"), source=str(path))
