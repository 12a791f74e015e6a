"""Build a :class:`~milp_parallel.graph.LayerGraph` from an ONNX model.

The model goes through ``onnx.shape_inference`` (with data propagation, so shapes computed
by ``Shape -> Gather -> Concat -> Reshape`` chains resolve), then every node that consumes an
activation becomes a layer through the LayerGraph builder, and the builder's output shape
is checked against the shape ONNX inferred. Initializers, ``Constant`` nodes and shape
arithmetic (``Shape``, and any node whose inputs are all constants or shapes) are not
layers; graph inputs that are not initializers become ``input`` layers.

Mapping (ONNX op type -> layer op):

=============================================  ===========================================
ONNX                                           layer
=============================================  ===========================================
Conv                                           ``conv`` (params from the weight shape)
MaxPool, AveragePool                           ``pool`` (kind max / avg)
GlobalAveragePool, GlobalMaxPool,              ``global_pool``
ReduceMean / ReduceMax over all spatial axes
Gemm, MatMul with a constant right operand     ``linear`` (a following ``Add`` of a constant
                                               bias vector is fused into it)
MatMul, Gemm of two activations                ``matmul``
BatchNormalization, LayerNormalization         ``batchnorm``, ``layernorm``
Relu, Sigmoid, Tanh, Gelu, Erf, Clip, ...      ``elementwise`` (``fn`` = op type, lower case)
Add / Sum / Sub, Mul / Div of two activations  ``add``, ``mul`` (Sub and Div cost the same)
Add, Mul, Div, Pow, ... with a constant        ``elementwise``
Concat                                         ``concat``
Flatten (axis 1)                               ``flatten``
Flatten (other axis), Reshape, Squeeze,        ``reshape`` (the inferred output shape;
Unsqueeze                                      the batch must stay first and separate)
Transpose keeping axis 0 first                 ``transpose``
Dropout                                        ``dropout``
Softmax, LogSoftmax                            ``softmax``
Gather of a constant table by activations      ``embedding``
Identity                                       no layer (an alias)
=============================================  ===========================================

Before anything is imported the model must be a DAG of well-formed nodes: a tensor written by
two nodes (or by a node and a graph input / initializer), a node input that nothing defines,
or a cycle is refused with :class:`~milp_parallel.errors.InvalidGraphError` naming the node and
the tensor (nodes listed out of order but acyclic are imported in a topological order). A weight
whose shape does not fit its input (a Conv weight's input channels times ``group``, a
Gemm / MatMul weight's rows, a normalization's scale) is refused the same way.

Anything else (ConvTranspose, Resize, Split, Slice, ...) is unsupported: with
``unknown="error"`` one :class:`~milp_parallel.errors.InvalidGraphError` lists every
unsupported op type with its node names; with ``unknown="elementwise"`` such a node becomes
a shape-preserving ``elementwise`` layer on its first activation input (``fn`` = its op
type) and a warning is logged (a node that changes the shape still raises).
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FormatError, InvalidGraphError, MilpParallelError, require
from ._names import UniqueNames

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import LayerGraph

__all__ = ["from_onnx", "SUPPORTED_OPS"]

logger = logging.getLogger(__name__)

#: Unary element-wise ONNX ops (plus binary ones with a constant operand, see below).
_UNARY = frozenset({
    "Relu", "Sigmoid", "Tanh", "Gelu", "LeakyRelu", "Elu", "Selu", "Celu", "Softplus",
    "Softsign", "HardSigmoid", "HardSwish", "Mish", "PRelu", "ThresholdedRelu", "Erf",
    "Exp", "Log", "Sqrt", "Neg", "Abs", "Clip", "Reciprocal", "Floor", "Ceil", "Round",
    "Sin", "Cos", "Sign", "Cast", "Not", "IsNaN", "IsInf", "Swish",
})
#: Binary element-wise ops: two activations -> add/mul layer, one -> elementwise.
_BINARY_ADD = frozenset({"Add", "Sub", "Sum"})
_BINARY_MUL = frozenset({"Mul", "Div"})
_BINARY_OTHER = frozenset({"Pow", "Max", "Min", "Mod", "Equal", "Less", "Greater", "Where",
                           "And", "Or", "Xor", "BitShift", "Mean"})
_RESHAPES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze"})
#: Ops whose output is shape metadata even though they read an activation.
_META = frozenset({"Shape", "Size"})
_HANDLED = frozenset({
    "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean",
    "ReduceMax", "Gemm", "MatMul", "BatchNormalization", "LayerNormalization", "Concat",
    "Flatten", "Dropout", "Softmax", "LogSoftmax", "Gather", "Identity",
}) | _UNARY | _BINARY_ADD | _BINARY_MUL | _BINARY_OTHER | _RESHAPES

#: Every ONNX op type :func:`from_onnx` maps (shape metadata ops aside).
SUPPORTED_OPS = tuple(sorted(_HANDLED))

_UNKNOWN_MODES = ("error", "elementwise")
#: ONNX TensorProto element types of integer tensors (token ids): INT8..UINT64.
_INTEGER_TYPES = frozenset({2, 3, 4, 5, 6, 7, 12, 13})


def from_onnx(model: Any, *, batch_size: int | None = None,
              unknown: str = "error") -> "LayerGraph":
    """Build a :class:`~milp_parallel.graph.LayerGraph` from an ONNX model.

    Parameters
    ----------
    model : str, os.PathLike, bytes or onnx.ModelProto
        A path to an ``.onnx`` file, its serialized bytes, or a loaded model.
    batch_size : int, optional
        The batch size of the graph. A symbolic (named or unknown) first dimension of a
        graph input is set to it before shape inference; a static one is rebatched
        afterwards with ``LayerGraph.with_batch_size``. Default: the model's static batch
        size, or 1 when it is symbolic.
    unknown : {"error", "elementwise"}
        What to do with op types this importer does not map: raise one error listing them
        all, or import each as a shape-preserving ``elementwise`` layer (with a warning).

    Returns
    -------
    LayerGraph
        One layer per activation-consuming node (see the module docstring for the
        mapping), in the model's order, named after the ONNX nodes (``op_type_i`` for
        unnamed nodes), with edges in argument order.

    Raises
    ------
    MissingDependencyError
        When the ``onnx`` package is not installed (``pip install milp_parallel[onnx]``).
    FormatError
        When ``model`` cannot be read as an ONNX model, or ``unknown``/``batch_size`` are
        invalid.
    InvalidGraphError
        When the nodes do not form a DAG (a cycle, a tensor with two writers, an input that
        nothing defines: names the node and the tensor), a weight does not fit its input,
        op types are unsupported (all listed with node names), a tensor's shape is still
        unknown after inference (names the tensor), a non-batch dimension of an input is
        symbolic, or a node's inferred shape disagrees with the layer built for it.

    Examples
    --------
    >>> from milp_parallel.importers import from_onnx
    >>> g = from_onnx("resnet18.onnx", batch_size=32)        # doctest: +SKIP
    >>> g.param_count()                                      # doctest: +SKIP
    11689512
    """
    onnx = require("onnx", "onnx", "from_onnx()")
    if unknown not in _UNKNOWN_MODES:
        raise FormatError(f"from_onnx(unknown={unknown!r}): expected one of {_UNKNOWN_MODES}")
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer))
                                   or isinstance(batch_size, bool) or batch_size < 1):
        raise FormatError(f"from_onnx(batch_size={batch_size!r}): expected a positive int")
    proto = _load(onnx, model)
    if not len(proto.graph.node) and not len(proto.graph.input):
        raise FormatError(f"{_describe(model)}: the ONNX model has no graph (no inputs and no "
                          "nodes): an empty file, or not an ONNX model?")
    try:
        _check_wiring(proto.graph)
        graph = _Importer(onnx, proto, batch_size, unknown).build()
    except InvalidGraphError as exc:
        raise InvalidGraphError(f"{_describe(model)}: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        if isinstance(exc, MilpParallelError):
            raise
        # a damaged model: an attribute of the wrong type, a missing input, ...
        raise FormatError(f"{_describe(model)}: malformed ONNX model "
                          f"({type(exc).__name__}: {exc})") from None
    if len(graph) == 0 or len(graph.layers) == len(graph.input_names) == 0:
        raise FormatError(f"{_describe(model)}: the ONNX model has no layers to import")
    return graph


def _load(onnx: Any, model: Any) -> Any:
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    try:
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_from_string(bytes(model))
        if isinstance(model, (str, os.PathLike)):
            if not os.path.exists(model):
                raise FormatError(f"ONNX file {os.fspath(model)!r} does not exist")
            return onnx.load(os.fspath(model))
    except FormatError:
        raise
    except Exception as exc:  # protobuf DecodeError and friends
        raise FormatError(f"cannot read {_describe(model)} as an ONNX model: {exc}") from exc
    raise FormatError(f"from_onnx() expects a path, bytes or onnx.ModelProto, "
                      f"got {type(model).__name__}")


def _describe(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return f"file {os.fspath(model)!r}"
    if isinstance(model, (bytes, bytearray)):
        return f"{type(model).__name__} of {len(model)} bytes"
    return f"the {type(model).__name__}"


def _label(node: Any, i: int) -> str:
    return f"{node.name or f'#{i}'!r} ({node.op_type})"


def _check_wiring(graph: Any) -> None:
    """Refuse a graph that is not a DAG of well-formed nodes; sort an unsorted one in place.

    Raises
    ------
    InvalidGraphError
        A tensor written twice (two nodes, or a node and a graph input or initializer), a
        node input that no node, graph input or initializer defines, or a cycle; names the
        node and the tensor.
    """
    import networkx as nx

    source = {vi.name: "a graph input" for vi in graph.input}
    for init in graph.initializer:
        source.setdefault(init.name, "an initializer")
    writer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for t in node.output:
            if not t:
                continue
            if t in writer:
                j = writer[t]
                raise InvalidGraphError(
                    f"ONNX tensor {t!r} is written by two nodes, {_label(graph.node[j], j)} and "
                    f"{_label(node, i)}; each tensor needs exactly one producer (rename one "
                    "output)")
            if t in source:
                raise InvalidGraphError(
                    f"ONNX node {_label(node, i)} writes tensor {t!r}, which is already "
                    f"{source[t]}; each tensor needs exactly one producer (rename the output)")
            writer[t] = i
    deps = nx.DiGraph()
    deps.add_nodes_from(range(len(graph.node)))
    for i, node in enumerate(graph.node):
        for t in node.input:
            if not t or t in source:
                continue
            if t not in writer:
                raise InvalidGraphError(
                    f"ONNX node {_label(node, i)} reads tensor {t!r}, which no node, graph "
                    "input or initializer defines; add it as a graph input or initializer, or "
                    "fix the name")
            deps.add_edge(writer[t], i, tensor=t)
    if not nx.is_directed_acyclic_graph(deps):
        cycle = nx.find_cycle(deps)
        path = "".join(f"{_label(graph.node[u], u)} -[{deps.edges[u, v]['tensor']}]-> "
                       for u, v in cycle)
        first = cycle[0][0]
        raise InvalidGraphError(
            f"the ONNX graph has a cycle: {path}{_label(graph.node[first], first)} (node "
            "-[tensor]-> reader); a model must be acyclic")
    order = list(nx.lexicographical_topological_sort(deps))
    if order != sorted(order):
        nodes = [graph.node[i] for i in order]
        copies = [type(n)() for n in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del graph.node[:]
        graph.node.extend(copies)


def _check_weight(node: Any, what: str, tensor: str, shape: tuple, expected: tuple,
                  why: str) -> None:
    if tuple(shape) != tuple(expected):
        raise InvalidGraphError(
            f"ONNX node {node.name!r} ({node.op_type}): {what} {tensor!r} has shape "
            f"{tuple(shape)}, expected {tuple(expected)} ({why})")


def _attrs(onnx: Any, node: Any) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class _Importer:
    """One import: the inferred model, tensor tables and the graph under construction."""

    def __init__(self, onnx: Any, proto: Any, batch_size: int | None, unknown: str):
        self.onnx = onnx
        self.unknown = unknown
        self.requested_batch = batch_size
        graph = proto.graph
        self.constants: dict[str, np.ndarray] = {
            init.name: onnx.numpy_helper.to_array(init) for init in graph.initializer}
        self.batch = self._fix_batch(graph, batch_size)
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False,
                                                         data_prop=True)
        except Exception as exc:
            raise InvalidGraphError(f"ONNX shape inference failed: {exc}") from exc
        self.graph = inferred.graph
        self.shapes: dict[str, tuple | None] = {}
        for vi in (*self.graph.input, *self.graph.value_info, *self.graph.output):
            self.shapes[vi.name] = self._dims(vi)
        for name, arr in self.constants.items():
            self.shapes[name] = tuple(int(d) for d in arr.shape)
        for node in self.graph.node:  # Constant nodes are constants, not layers
            if node.op_type == "Constant" and node.output:
                value = _attrs(onnx, node)
                tensor = value.get("value")
                if tensor is not None:
                    arr = onnx.numpy_helper.to_array(tensor)
                    self.constants[node.output[0]] = arr
                    self.shapes[node.output[0]] = tuple(int(d) for d in arr.shape)
        self._name = UniqueNames()
        self.layer_of: dict[str, str] = {}  # activation tensor -> layer producing it
        self.fused_add: set[int] = set()     # positions of Add nodes fused into a MatMul
        self.fused_matmul: set[int] = set()  # positions of MatMul nodes with a fused bias

    # -- inputs and shapes -------------------------------------------------------------
    def _fix_batch(self, graph: Any, batch_size: int | None) -> int:
        """Set symbolic batch dims of graph inputs; return the batch to build at."""
        batch = None
        for vi in graph.input:
            if vi.name in self.constants:
                continue
            dims = vi.type.tensor_type.shape.dim
            if not len(dims):
                continue
            first = dims[0]
            if first.HasField("dim_value") and first.dim_value > 0:
                batch = batch or int(first.dim_value)
                continue
            first.Clear()
            first.dim_value = int(batch_size or 1)
            batch = batch or int(batch_size or 1)
            for axis, dim in enumerate(dims[1:], start=1):
                if not (dim.HasField("dim_value") and dim.dim_value > 0):
                    raise InvalidGraphError(
                        f"ONNX input {vi.name!r} has a symbolic dimension "
                        f"{dim.dim_param or '?'!r} at axis {axis}; only the batch (axis 0) "
                        f"may be symbolic: export with static shapes or fix it with "
                        f"onnx.tools.update_model_dims.update_inputs_outputs_dims")
        return int(batch or batch_size or 1)

    def _dims(self, vi: Any) -> tuple | None:
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            return None
        dims = []
        for d in t.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                return None
        return tuple(dims)

    def shape(self, tensor: str, node: Any = None) -> tuple[int, ...]:
        s = self.shapes.get(tensor)
        if s is None:
            where = f" (output of node {node.name!r}, {node.op_type})" if node is not None else ""
            raise InvalidGraphError(
                f"the shape of ONNX tensor {tensor!r}{where} is unknown after shape "
                f"inference; export the model with static input shapes (or set batch_size), "
                f"or run onnxsim to fold shape computations")
        return s

    # -- classification ----------------------------------------------------------------
    def _activations(self) -> tuple[list[tuple[int, list[str]]], dict[str, list[str]]]:
        """Nodes that consume activations (with those inputs), and unsupported ones."""
        act = {vi.name for vi in self.graph.input if vi.name not in self.constants}
        nodes, unsupported = [], defaultdict(list)
        for i, node in enumerate(self.graph.node):
            ins = [t for t in node.input if t and t in act]
            if not ins or node.op_type in _META or node.op_type == "Constant":
                continue
            act.update(t for t in node.output if t)
            nodes.append((i, ins))
            if node.op_type not in _HANDLED:
                unsupported[node.op_type].append(node.name or f"#{i}")
        return nodes, unsupported

    def _fusions(self, nodes: list[tuple[int, list[str]]]) -> None:
        """Find MatMul(x, W) -> Add(., b) pairs to import as one biased linear layer."""
        consumers: dict[str, list[int]] = defaultdict(list)
        for i, node in enumerate(self.graph.node):
            for t in node.input:
                consumers[t].append(i)
        outputs = {vi.name for vi in self.graph.output}
        position = {node.output[0]: i for i, node in enumerate(self.graph.node)
                    if node.output}
        for i, ins in nodes:
            node = self.graph.node[i]
            if node.op_type != "MatMul" or len(ins) != 1 or ins[0] != node.input[0]:
                continue
            w = self.constants.get(node.input[1])
            out = node.output[0]
            users = consumers[out]
            if w is None or w.ndim != 2 or len(users) != 1 or out in outputs:
                continue
            add = self.graph.node[users[0]]
            if add.op_type != "Add" or len(add.input) != 2:
                continue
            other = add.input[1] if add.input[0] == out else add.input[0]
            b = self.constants.get(other)
            if b is not None and b.shape == (w.shape[1],):
                self.fused_add.add(users[0])
                self.fused_matmul.add(position[out])

    # -- build -------------------------------------------------------------------------
    def build(self) -> "LayerGraph":
        from ..graph import LayerGraph

        nodes, unsupported = self._activations()
        if unsupported and self.unknown == "error":
            listing = "; ".join(f"{op}: {', '.join(names)}"
                                for op, names in sorted(unsupported.items()))
            raise InvalidGraphError(
                f"the ONNX model uses operators from_onnx() does not support: {listing}. "
                f"Pass unknown='elementwise' to import them as shape-preserving element-wise "
                f"layers, or rewrite them (supported: {', '.join(SUPPORTED_OPS)})")
        self._fusions(nodes)
        g = LayerGraph()
        self.g = g
        for vi in self.graph.input:
            if vi.name in self.constants:
                continue
            shape = self.shape(vi.name)
            integer = vi.type.tensor_type.elem_type in _INTEGER_TYPES
            dims = "ns" if integer and len(shape) == 2 else None
            self.layer_of[vi.name] = g.input(self._name(vi.name), shape, dims=dims)
        for i, ins in nodes:
            node = self.graph.node[i]
            try:
                self._node(node, ins, i)
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                if isinstance(exc, MilpParallelError):
                    raise
                raise FormatError(f"ONNX node {node.name or i!r} ({node.op_type}): malformed "
                                  f"attributes or inputs ({type(exc).__name__}: {exc})"
                                  ) from None
        if self.requested_batch is not None and g.batch_size != self.requested_batch:
            g = g.with_batch_size(self.requested_batch)
        return g

    def _node(self, node: Any, ins: list[str], index: int) -> None:
        op = node.op_type
        out = node.output[0]
        if op == "Identity" or index in self.fused_add:
            self.layer_of[out] = self.layer_of[ins[0]]
            return
        name = self._name(node.name or f"{op}_{index}")
        self.position = index
        x = self.layer_of[ins[0]]
        a = _attrs(self.onnx, node)
        g = self.g
        handler = getattr(self, f"_op_{op}", None)
        if handler is not None:
            layer = handler(g, name, node, ins, a)
        elif op in _UNARY:
            layer = g.elementwise(name, x, fn=op.lower())
        elif op in _BINARY_ADD | _BINARY_MUL | _BINARY_OTHER:
            xs = [self.layer_of[t] for t in ins]
            if len(xs) >= 2 and op in _BINARY_ADD:
                layer = g.add(name, *xs)
            elif len(xs) >= 2 and op in _BINARY_MUL:
                layer = g.mul(name, *xs)
            else:
                if len(xs) >= 2:
                    logger.warning("ONNX node %r (%s) of %d activations imported as an "
                                   "element-wise layer on its first input", node.name, op,
                                   len(xs))
                layer = g.elementwise(name, x, fn=op.lower())
        elif op in _RESHAPES:
            layer = self._reshape(g, name, node, x, a)
        else:  # unsupported, unknown == "elementwise"
            in_shape, out_shape = self.shape(ins[0]), self.shape(out, node)
            if tuple(in_shape) != tuple(out_shape):
                raise InvalidGraphError(
                    f"ONNX node {node.name!r} ({op}) is not supported and changes the shape "
                    f"{in_shape} -> {out_shape}, so it cannot be imported as element-wise")
            logger.warning("ONNX node %r: unsupported op %s imported as a shape-preserving "
                           "element-wise layer", node.name, op)
            layer = g.elementwise(name, x, fn=op.lower())
        self._check(node, layer)
        self.layer_of[out] = layer

    def _check(self, node: Any, layer: str) -> None:
        expected = self.shape(node.output[0], node)
        got = tuple(self.g.layer(layer).output_shape)
        if got != tuple(expected):
            raise InvalidGraphError(
                f"ONNX node {node.name!r} ({node.op_type}): ONNX infers output shape "
                f"{expected} but the imported {self.g.layer(layer).op!r} layer has {got}; "
                f"this attribute combination is not supported")

    # -- per-op handlers ---------------------------------------------------------------
    def _spatial(self, node: Any, a: dict, kernel: tuple[int, ...]) -> tuple:
        nd = len(kernel)
        stride = tuple(a.get("strides", [1] * nd))
        dilation = tuple(a.get("dilations", [1] * nd))
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            in_sp = self.shape(node.input[0])[2:]
            out_sp = self.shape(node.output[0], node)[2:]
            total = [max(0, (o - 1) * s + (k - 1) * d + 1 - i)
                     for i, o, s, k, d in zip(in_sp, out_sp, stride, kernel, dilation)]
            begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
            end = [t - b for t, b in zip(total, begin)]
        elif auto == "VALID":
            begin = end = [0] * nd
        else:
            pads = list(a.get("pads", [0] * 2 * nd))
            begin, end = pads[:nd], pads[nd:]
        if list(begin) != list(end):
            logger.warning("ONNX node %r: asymmetric padding %s/%s imported as %s",
                           node.name, begin, end, begin)
        return stride, tuple(begin), dilation

    def _reshape(self, g, name, node, x, a):
        in_shape, out_shape = self.shape(node.input[0]), self.shape(node.output[0], node)
        if node.op_type == "Transpose":
            perm = tuple(int(p) for p in a.get("perm", range(len(in_shape))[::-1]))
            if perm and perm[0] == 0:
                return g.transpose(name, x, perm)
        if not out_shape or out_shape[0] != in_shape[0]:
            raise InvalidGraphError(
                f"ONNX node {node.name!r} ({node.op_type}) maps shape {in_shape} to "
                f"{out_shape}, moving or merging the batch dimension, which a layer graph "
                f"cannot express; keep the batch first and separate")
        return g.reshape(name, x, out_shape[1:])

    def _op_Conv(self, g, name, node, ins, a):
        wshape = self.shape(node.input[1])
        x = self.shape(node.input[0])
        group = int(a.get("group", 1))
        if len(wshape) != len(x) or group < 1 or wshape[1] * group != x[1]:
            raise InvalidGraphError(
                f"ONNX node {node.name!r} (Conv): weight {node.input[1]!r} has shape "
                f"{tuple(wshape)}, which needs a rank-{len(wshape)} input of "
                f"{wshape[1] if len(wshape) > 1 else '?'} x group {group} channels, but input "
                f"{node.input[0]!r} has shape {tuple(x)}")
        if "kernel_shape" in a:
            _check_weight(node, "weight", node.input[1], wshape[2:], tuple(a["kernel_shape"]),
                          "its spatial dims must be the kernel_shape attribute")
        if len(node.input) > 2 and node.input[2] and self.shapes.get(node.input[2]):
            _check_weight(node, "bias", node.input[2], self.shapes[node.input[2]],
                          (wshape[0],), "one per output channel")
        kernel = tuple(a.get("kernel_shape", wshape[2:]))
        stride, pad, dilation = self._spatial(node, a, kernel)
        bias = len(node.input) > 2 and bool(node.input[2])
        return g.conv(name, self.layer_of[ins[0]], int(wshape[0]), kernel, stride=stride,
                      padding=pad, dilation=dilation, groups=int(a.get("group", 1)),
                      bias=bias)

    def _pool(self, g, name, node, ins, a, kind):
        kernel = tuple(a["kernel_shape"])
        stride, pad, dilation = self._spatial(node, a, kernel)
        if any(d != 1 for d in dilation):
            raise InvalidGraphError(f"ONNX node {node.name!r}: dilated pooling is not "
                                    f"supported")
        return g.pool(name, self.layer_of[ins[0]], kernel, kind=kind, stride=stride,
                      padding=pad, ceil_mode=bool(a.get("ceil_mode", 0)))

    def _op_MaxPool(self, g, name, node, ins, a):
        return self._pool(g, name, node, ins, a, "max")

    def _op_AveragePool(self, g, name, node, ins, a):
        return self._pool(g, name, node, ins, a, "avg")

    def _op_GlobalAveragePool(self, g, name, node, ins, a):
        return g.global_pool(name, self.layer_of[ins[0]], kind="avg")

    def _op_GlobalMaxPool(self, g, name, node, ins, a):
        return g.global_pool(name, self.layer_of[ins[0]], kind="max")

    def _reduce(self, g, name, node, ins, a, kind):
        rank = len(self.shape(ins[0]))
        axes = a.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1] in self.constants:
            axes = self.constants[node.input[1]].tolist()
        axes = sorted(int(x) % rank for x in (axes or []))
        if rank >= 3 and axes == list(range(2, rank)):
            return g.global_pool(name, self.layer_of[ins[0]], kind=kind)
        return self._fallback(g, name, node, ins)

    def _op_ReduceMean(self, g, name, node, ins, a):
        return self._reduce(g, name, node, ins, a, "avg")

    def _op_ReduceMax(self, g, name, node, ins, a):
        return self._reduce(g, name, node, ins, a, "max")

    def _fallback(self, g, name, node, ins):
        if self.unknown == "error":
            raise InvalidGraphError(
                f"ONNX node {node.name!r} ({node.op_type}) with these attributes is not "
                f"supported (only reductions over all spatial axes map to global_pool); pass "
                f"unknown='elementwise' to import it anyway")
        logger.warning("ONNX node %r (%s) imported as a reshape", node.name, node.op_type)
        return self._reshape(g, name, node, self.layer_of[ins[0]], {})

    def _op_Gemm(self, g, name, node, ins, a):
        if a.get("transA", 0):
            raise InvalidGraphError(f"ONNX node {node.name!r}: Gemm with transA=1 is not "
                                    f"supported; transpose the input first")
        if node.input[1] in self.constants:
            wshape = self.shape(node.input[1])
            fin = self.shape(node.input[0])[-1]
            k = wshape[1] if a.get("transB", 0) else wshape[0]
            if len(wshape) != 2 or k != fin:
                raise InvalidGraphError(
                    f"ONNX node {node.name!r} (Gemm): weight {node.input[1]!r} has shape "
                    f"{tuple(wshape)} (transB={int(a.get('transB', 0))}), which takes {k} "
                    f"input features, but input {node.input[0]!r} has {fin} (shape "
                    f"{self.shape(node.input[0])})")
            out = wshape[0] if a.get("transB", 0) else wshape[1]
            bias = len(node.input) > 2 and bool(node.input[2])
            return g.linear(name, self.layer_of[ins[0]], int(out), bias=bias)
        return g.matmul(name, self.layer_of[node.input[0]], self.layer_of[node.input[1]])

    def _op_MatMul(self, g, name, node, ins, a):
        w = self.constants.get(node.input[1])
        if w is not None and node.input[0] in self.layer_of:
            x = self.shape(node.input[0])
            if w.ndim != 2 or w.shape[0] != x[-1]:
                raise InvalidGraphError(
                    f"ONNX node {node.name!r} (MatMul): weight {node.input[1]!r} has shape "
                    f"{tuple(w.shape)}, but input {node.input[0]!r} of shape {x} needs a "
                    f"({x[-1]}, out) matrix")
            return g.linear(name, self.layer_of[node.input[0]], int(w.shape[-1]),
                            bias=self.position in self.fused_matmul)
        if len(ins) < 2:
            raise InvalidGraphError(f"ONNX node {node.name!r}: MatMul with a constant left "
                                    f"operand is not supported")
        return g.matmul(name, self.layer_of[node.input[0]], self.layer_of[node.input[1]])

    def _op_BatchNormalization(self, g, name, node, ins, a):
        c = self.shape(ins[0])[1]
        for what, t in zip(("scale", "bias", "mean", "variance"), node.input[1:]):
            if t and self.shapes.get(t) is not None:
                _check_weight(node, what, t, self.shapes[t], (c,),
                              f"one per channel of input {ins[0]!r}")
        return g.batchnorm(name, self.layer_of[ins[0]])

    def _op_LayerNormalization(self, g, name, node, ins, a):
        x = self.shape(ins[0])
        for what, t in zip(("scale", "bias"), node.input[1:]):
            if t and self.shapes.get(t) is not None:
                _check_weight(node, what, t, self.shapes[t][-1:], x[-1:],
                              f"one per feature of the last dim of input {ins[0]!r}")
        return g.layernorm(name, self.layer_of[ins[0]])

    def _op_Concat(self, g, name, node, ins, a):
        xs = [self.layer_of[t] for t in node.input if t]
        if len(xs) != len([t for t in node.input if t]) or any(
                t not in self.layer_of for t in node.input if t):
            raise InvalidGraphError(f"ONNX node {node.name!r}: Concat of activations with "
                                    f"constants is not supported")
        first = g.layer(xs[0])
        axis = int(a.get("axis", 1)) % len(first.output_shape)
        return g.concat(name, xs, dim=first.dims[axis])

    def _op_Flatten(self, g, name, node, ins, a):
        if int(a.get("axis", 1)) == 1:
            return g.flatten(name, self.layer_of[ins[0]])
        return self._reshape(g, name, node, self.layer_of[ins[0]], a)

    def _op_Dropout(self, g, name, node, ins, a):
        p = a.get("ratio", 0.5)
        if len(node.input) > 1 and node.input[1] in self.constants:
            p = float(self.constants[node.input[1]])
        return g.dropout(name, self.layer_of[ins[0]], p=float(p))

    def _op_Softmax(self, g, name, node, ins, a):
        return g.softmax(name, self.layer_of[ins[0]])

    _op_LogSoftmax = _op_Softmax

    def _op_Gather(self, g, name, node, ins, a):
        table = self.constants.get(node.input[0])
        if table is not None and table.ndim == 2 and int(a.get("axis", 0)) == 0:
            return g.embedding(name, self.layer_of[node.input[1]], int(table.shape[0]),
                               int(table.shape[1]))
        return self._fallback(g, name, node, ins)

