"""Build a :class:`~milp_parallel.graph.LayerGraph` from a PyTorch module.

The module is traced with ``torch.fx.symbolic_trace`` and run once on the example input
with ``torch.fx.passes.shape_prop.ShapeProp`` (in eval mode, without gradients; the
module's training flag is restored afterwards). Every traced node that consumes an
activation tensor becomes a layer through the LayerGraph builder, and the builder's
output shape is checked against the traced one. Parameters and buffers read with
``get_attr`` and shape arithmetic (``x.size(0)``, ``x.shape``) are not layers.

Mapping (module / function -> layer op):

====================================================  =====================================
PyTorch                                               layer
====================================================  =====================================
Conv1d/2d/3d, F.conv*                                 ``conv``
MaxPool*, AvgPool*, F.max_pool*, F.avg_pool*          ``pool``
AdaptiveAvgPool* / AdaptiveMaxPool*                   ``global_pool`` (output size 1),
                                                      else ``adaptive_pool``
x.mean(dims) / torch.mean over all spatial dims       ``global_pool``
Linear, F.linear                                      ``linear``
BatchNorm1d/2d/3d, LayerNorm                          ``batchnorm``, ``layernorm``
ReLU, GELU, SiLU, Sigmoid, Tanh, ... and their        ``elementwise`` (``fn`` = the name,
functional / method / in-place forms                  lower case)
``+`` / ``-`` / torch.add, ``*`` / ``/`` / torch.mul  ``add`` / ``mul`` with two activations,
                                                      ``elementwise`` with a constant
torch.cat                                             ``concat``
Flatten, torch.flatten, x.flatten (from dim 1)        ``flatten``
x.view, x.reshape, (un)squeeze, Unflatten            ``reshape`` (the traced output shape)
permute, transpose (batch stays first)                ``transpose``
Dropout*, F.dropout                                   ``dropout``
Softmax, LogSoftmax and their functional forms        ``softmax``
Embedding                                             ``embedding``
torch.matmul, ``@``, torch.bmm of two activations     ``matmul``
Identity, x.contiguous(), x.float(), x.detach()       no layer (an alias)
====================================================  =====================================

Anything else is unsupported: with ``unknown="error"`` one
:class:`~milp_parallel.errors.InvalidGraphError` lists every unsupported target with its node
names; with ``unknown="elementwise"`` a shape-preserving node becomes an ``elementwise``
layer on its first activation input (with a warning). A model that ``torch.fx`` cannot trace
(data-dependent control flow, ...) raises InvalidGraphError suggesting an ONNX export and
:func:`~milp_parallel.importers.from_onnx`.
"""

from __future__ import annotations

import logging
import operator
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Callable

from ..errors import FormatError, InvalidGraphError, require
from ._names import UniqueNames

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import LayerGraph

__all__ = ["from_torch"]

logger = logging.getLogger(__name__)

_UNKNOWN_MODES = ("error", "elementwise")

#: Activation function names (modules lower-cased, functions, methods; "_" = in place).
_ACTIVATIONS = frozenset({
    "relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "leaky_relu", "leakyrelu", "elu",
    "selu", "celu", "hardswish", "hardsigmoid", "hardtanh", "softplus", "softsign", "mish",
    "prelu", "logsigmoid", "tanhshrink", "softshrink", "hardshrink", "glu_", "exp", "log",
    "sqrt", "rsqrt", "neg", "abs", "clamp", "clip", "erf", "sin", "cos", "reciprocal",
    "square", "sign", "threshold",
})
_ALIAS_METHODS = frozenset({"contiguous", "float", "double", "half", "to", "type", "detach",
                            "clone", "requires_grad_"})
_RESHAPE_NAMES = frozenset({"view", "reshape", "permute", "transpose", "squeeze",
                            "unsqueeze", "t", "swapaxes", "movedim", "unflatten"})
_ADD_NAMES = frozenset({"add", "add_", "iadd", "sub", "sub_", "isub", "rsub"})
_MUL_NAMES = frozenset({"mul", "mul_", "imul", "truediv", "div", "div_", "itruediv"})
_BINARY_OTHER = frozenset({"pow", "floordiv", "maximum", "minimum"})


def from_torch(module: Any, example_input: Any, *, unknown: str = "error") -> "LayerGraph":
    """Build a :class:`~milp_parallel.graph.LayerGraph` from a ``torch.nn.Module``.

    Parameters
    ----------
    module : torch.nn.Module
        The model. It is traced, not modified (its training flag is restored).
    example_input : torch.Tensor or tuple of torch.Tensor
        One input per ``forward`` argument, batch first; its batch size becomes the
        graph's.
    unknown : {"error", "elementwise"}
        What to do with modules/functions this importer does not map: raise one error
        listing them all, or import each shape-preserving one as ``elementwise``.

    Returns
    -------
    LayerGraph
        One layer per activation-consuming traced node, named after the module path
        (``layer1.0.conv1``) or the fx node name (``add_3``), inputs named after
        ``forward``'s arguments.

    Raises
    ------
    MissingDependencyError
        When torch is not installed (``pip install milp_parallel[torch]``).
    FormatError
        When ``module`` is not a torch module, ``example_input`` not tensors, or
        ``unknown`` invalid.
    InvalidGraphError
        When the module cannot be traced by ``torch.fx`` or run on the example input
        (the message suggests ``torch.onnx.export`` + ``from_onnx``), when targets are
        unsupported (all listed with node names), or when a traced shape disagrees with
        the layer built for it.

    Examples
    --------
    >>> import torch
    >>> from milp_parallel.importers import from_torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
    >>> g = from_torch(net, torch.randn(2, 3, 16, 16))
    >>> [layer.op for layer in g.layers]
    ['input', 'conv', 'elementwise']
    """
    torch = require("torch", "torch", "from_torch()")
    if not isinstance(module, torch.nn.Module):
        raise FormatError(f"from_torch() expects a torch.nn.Module, got "
                          f"{type(module).__name__}")
    if unknown not in _UNKNOWN_MODES:
        raise FormatError(f"from_torch(unknown={unknown!r}): expected one of "
                          f"{_UNKNOWN_MODES}")
    inputs = tuple(example_input) if isinstance(example_input, (tuple, list)) else (
        example_input,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise FormatError("from_torch(example_input=...): expected a tensor or a tuple of "
                          "tensors, one per forward() argument, batch first")
    gm = _trace(torch, module, inputs)
    return _Importer(torch, module, gm, unknown).build()


def _trace(torch: Any, module: Any, inputs: tuple) -> Any:
    from torch.fx.passes.shape_prop import ShapeProp

    hint = ("; export it with torch.onnx.export(model, example_input, 'model.onnx', "
            "dynamo=False) and import it with milp_parallel.importers.from_onnx() instead")
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as exc:
        raise InvalidGraphError(f"torch.fx cannot trace {type(module).__name__}: "
                                f"{type(exc).__name__}: {exc}{hint}") from exc
    training = module.training
    try:
        gm.eval()
        with torch.no_grad():
            ShapeProp(gm).propagate(*inputs)
    except Exception as exc:
        raise InvalidGraphError(f"running the traced {type(module).__name__} on the example "
                                f"input failed: {type(exc).__name__}: {exc}{hint}") from exc
    finally:
        module.train(training)
        gm.train(training)
    return gm


def _target_name(node: Any) -> str:
    """A readable name of what a node calls, for messages and for dispatch."""
    if node.op == "call_module":
        return str(node.target)
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    return getattr(target, "__name__", str(target))


class _Importer:
    def __init__(self, torch: Any, module: Any, gm: Any, unknown: str):
        self.torch = torch
        self.module = module
        self.gm = gm
        self.unknown = unknown
        self.layer_of: dict[Any, str] = {}  # fx Node -> layer name
        self._name = UniqueNames()
        F = torch.nn.functional
        nn = torch.nn
        self.nn = nn
        self.functions: dict[Any, str] = {
            torch.flatten: "flatten", torch.cat: "cat", torch.concat: "cat",
            torch.matmul: "matmul", operator.matmul: "matmul", torch.bmm: "matmul",
            torch.mm: "matmul", F.linear: "linear", F.softmax: "softmax",
            torch.softmax: "softmax", F.log_softmax: "softmax", torch.log_softmax: "softmax",
            F.dropout: "dropout", F.dropout2d: "dropout", torch.dropout: "dropout",
            torch.mean: "mean", F.adaptive_avg_pool1d: "adaptive_avg",
            F.adaptive_avg_pool2d: "adaptive_avg", F.adaptive_avg_pool3d: "adaptive_avg",
            F.adaptive_max_pool1d: "adaptive_max", F.adaptive_max_pool2d: "adaptive_max",
            F.adaptive_max_pool3d: "adaptive_max", F.max_pool1d: "max_pool",
            F.max_pool2d: "max_pool", F.max_pool3d: "max_pool", F.avg_pool1d: "avg_pool",
            F.avg_pool2d: "avg_pool", F.avg_pool3d: "avg_pool", torch.reshape: "reshape",
            torch.permute: "reshape", torch.transpose: "reshape", torch.squeeze: "reshape",
            torch.unsqueeze: "reshape", F.batch_norm: "batchnorm",
            F.layer_norm: "layernorm", F.embedding: "embedding",
            F.conv1d: "conv", F.conv2d: "conv", F.conv3d: "conv",
        }

    # -- helpers -----------------------------------------------------------------------
    def _shape(self, node: Any) -> tuple[int, ...] | None:
        meta = node.meta.get("tensor_meta")
        shape = getattr(meta, "shape", None)
        if shape is None:
            return None
        return tuple(int(d) for d in shape)

    def _act_args(self, node: Any, act: set) -> list[Any]:
        from torch.fx.node import map_arg

        found: list[Any] = []
        map_arg((node.args, node.kwargs),
                lambda n: found.append(n) if n in act and n not in found else None)
        return found

    def _arg(self, node: Any, index: int, key: str, default: Any = None) -> Any:
        if len(node.args) > index:
            return node.args[index]
        return node.kwargs.get(key, default)

    def _attr_value(self, arg: Any) -> Any:
        """The tensor behind a get_attr node (a parameter or buffer), else None."""
        from torch.fx import Node

        if isinstance(arg, Node) and arg.op == "get_attr":
            obj: Any = self.gm
            for part in str(arg.target).split("."):
                obj = getattr(obj, part)
            return obj
        return None

    # -- dispatch ----------------------------------------------------------------------
    def _kind(self, node: Any) -> str | None:
        """The mapping rule for an activation-consuming node, or None if unsupported."""
        if node.op == "call_module":
            m = self.gm.get_submodule(node.target)
            return self._module_kind(m)
        if node.op == "call_method":
            t = str(node.target)
        elif node.op == "call_function":
            if node.target in self.functions:
                return self.functions[node.target]
            t = getattr(node.target, "__name__", "")
            if node.target in (operator.getitem, getattr):
                return "meta" if self._shape(node) is None and not _holds_tensor(node) \
                    else None
        else:
            return None
        t = t.lower()
        if t in ("size", "dim", "numel"):
            return "meta"
        if t in _ALIAS_METHODS:
            return "alias"
        if t in _RESHAPE_NAMES:
            return "reshape"
        if t == "flatten":
            return "flatten"
        if t in ("softmax", "log_softmax"):
            return "softmax"
        if t == "mean":
            return "mean"
        if t in ("matmul", "bmm", "mm"):
            return "matmul"
        if t in _ADD_NAMES:
            return "add"
        if t in _MUL_NAMES:
            return "mul"
        if t in _BINARY_OTHER:
            return "binary"
        if t.rstrip("_") in _ACTIVATIONS:
            return "activation"
        return None

    def _module_kind(self, m: Any) -> str | None:
        nn = self.nn
        table: list[tuple[tuple, str]] = [
            ((nn.Conv1d, nn.Conv2d, nn.Conv3d), "conv"),
            ((nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d), "max_pool"),
            ((nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d), "avg_pool"),
            ((nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d),
             "adaptive_avg"),
            ((nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d),
             "adaptive_max"),
            ((nn.Linear,), "linear"),
            ((nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d), "batchnorm"),
            ((nn.LayerNorm,), "layernorm"),
            ((nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout),
             "dropout"),
            ((nn.Flatten,), "flatten"),
            ((nn.Unflatten,), "reshape"),
            ((nn.Embedding,), "embedding"),
            ((nn.Softmax, nn.LogSoftmax), "softmax"),
            ((nn.Identity,), "alias"),
        ]
        for classes, kind in table:
            if isinstance(m, classes):
                return kind
        if type(m).__name__.lower() in _ACTIVATIONS:
            return "activation"
        return None

    # -- build -------------------------------------------------------------------------
    def build(self) -> "LayerGraph":
        from ..graph import LayerGraph

        nodes = list(self.gm.graph.nodes)
        act: set = set()
        plan: list[tuple[Any, str, list[Any]]] = []
        unsupported: dict[str, list[str]] = defaultdict(list)
        for node in nodes:
            if node.op == "placeholder":
                if self._shape(node) is None:
                    raise InvalidGraphError(f"forward() argument {node.target!r} got no "
                                            f"tensor in example_input")
                act.add(node)
                plan.append((node, "input", []))
                continue
            if node.op in ("output", "get_attr"):
                continue
            args = self._act_args(node, act)
            if not args:
                continue  # constants and shape arithmetic
            kind = self._kind(node)
            if kind == "meta":
                continue
            if kind is None:
                if self._shape(node) is None and not _holds_tensor(node):
                    continue  # e.g. x.shape[0]: not a tensor
                unsupported[_target_name(node) if node.op != "call_module"
                            else type(self.gm.get_submodule(node.target)).__name__].append(
                    node.name)
                kind = "unknown"
            act.add(node)
            plan.append((node, kind, args))
        if unsupported and self.unknown == "error":
            listing = "; ".join(f"{t}: {', '.join(ns)}" for t, ns in sorted(unsupported.items()))
            raise InvalidGraphError(
                f"from_torch() does not support these modules/functions of "
                f"{type(self.module).__name__}: {listing}. Pass unknown='elementwise' to "
                f"import shape-preserving ones as element-wise layers, or export the model "
                f"to ONNX and use from_onnx()")
        g = LayerGraph()
        self.g = g
        for node, kind, args in plan:
            if kind == "input":
                meta = node.meta["tensor_meta"]
                shape = self._shape(node)
                ids = not meta.dtype.is_floating_point and len(shape) == 2
                self.layer_of[node] = g.input(self._name(node.name), shape,
                                              dims="ns" if ids else None)
                continue
            if kind == "alias":
                self.layer_of[node] = self.layer_of[args[0]]
                continue
            layer = getattr(self, f"_build_{kind}")(node, args)
            self._check(node, layer)
            self.layer_of[node] = layer
        self._check_params()
        return g

    def _check(self, node: Any, layer: str) -> None:
        expected = self._shape(node)
        got = tuple(self.g.layer(layer).output_shape)
        if expected is not None and got != expected:
            raise InvalidGraphError(
                f"traced node {node.name!r} ({_target_name(node)}) has output shape "
                f"{expected} but the imported {self.g.layer(layer).op!r} layer has {got}; "
                f"this argument combination is not supported")

    def _check_params(self) -> None:
        total = sum(p.numel() for p in self.module.parameters())
        got = self.g.param_count()
        if got != total:
            logger.warning("imported graph has %d parameters but %s has %d (parameters "
                           "used outside mapped modules, shared, or norm layers without "
                           "affine weights)", got, type(self.module).__name__, total)

    def _layer_name(self, node: Any) -> str:
        return self._name(str(node.target) if node.op == "call_module" else node.name)

    def _x(self, args: list[Any]) -> str:
        return self.layer_of[args[0]]

    def _module(self, node: Any) -> Any:
        return self.gm.get_submodule(node.target) if node.op == "call_module" else None

    # -- builders per kind ---------------------------------------------------------------
    def _build_conv(self, node, args):
        m = self._module(node)
        if m is not None:
            k, s, d, groups = m.kernel_size, m.stride, m.dilation, m.groups
            out, bias, pad = m.out_channels, m.bias is not None, m.padding
        else:
            w = self._attr_value(self._arg(node, 1, "weight"))
            if w is None:
                return self._build_unknown(node, args)
            out, k = int(w.shape[0]), tuple(w.shape[2:])
            nd = len(k)
            s = _tuple(self._arg(node, 3, "stride", 1), nd)
            pad = self._arg(node, 4, "padding", 0)
            d = _tuple(self._arg(node, 5, "dilation", 1), nd)
            groups = int(self._arg(node, 6, "groups", 1))
            bias = self._arg(node, 2, "bias") is not None
        nd = len(k)
        if isinstance(pad, str):
            pad = (0,) * nd if pad == "valid" else tuple(
                (dd * (kk - 1)) // 2 for kk, dd in zip(k, _tuple(d, nd)))
        return self.g.conv(self._layer_name(node), self._x(args), int(out), tuple(k),
                           stride=_tuple(s, nd), padding=_tuple(pad, nd),
                           dilation=_tuple(d, nd), groups=int(groups), bias=bool(bias))

    def _pool(self, node, args, kind):
        m = self._module(node)
        if m is not None:
            k, s, p = m.kernel_size, m.stride, m.padding
            ceil, dil = m.ceil_mode, getattr(m, "dilation", 1)
        else:
            k = self._arg(node, 1, "kernel_size")
            s = self._arg(node, 2, "stride") or k
            p = self._arg(node, 3, "padding", 0)
            dil = self._arg(node, 4, "dilation", 1) if kind == "max" else 1
            ceil = self._arg(node, 5 if kind == "max" else 4, "ceil_mode", False)
        nd = len(self._shape(args[0])) - 2
        if any(x != 1 for x in _tuple(dil, nd)):
            raise InvalidGraphError(f"traced node {node.name!r}: dilated pooling is not "
                                    f"supported")
        return self.g.pool(self._layer_name(node), self._x(args), _tuple(k, nd), kind=kind,
                           stride=_tuple(s if s is not None else k, nd),
                           padding=_tuple(p, nd), ceil_mode=bool(ceil))

    def _build_max_pool(self, node, args):
        return self._pool(node, args, "max")

    def _build_avg_pool(self, node, args):
        return self._pool(node, args, "avg")

    def _adaptive(self, node, args, kind):
        m = self._module(node)
        size = m.output_size if m is not None else self._arg(node, 1, "output_size")
        in_shape = self._shape(args[0])
        spatial = in_shape[2:]
        nd = len(spatial)
        if not isinstance(size, (tuple, list)):
            size = (size,) * nd
        out = tuple(i if o is None else int(o) for o, i in zip(size, spatial))
        if all(o == 1 for o in out):
            return self.g.global_pool(self._layer_name(node), self._x(args), kind=kind)
        return self.g.adaptive_pool(self._layer_name(node), self._x(args), out, kind=kind)

    def _build_adaptive_avg(self, node, args):
        return self._adaptive(node, args, "avg")

    def _build_adaptive_max(self, node, args):
        return self._adaptive(node, args, "max")

    def _build_mean(self, node, args):
        rank = len(self._shape(args[0]))
        dims = self._arg(node, 1, "dim")
        dims = sorted(int(d) % rank for d in _tuple(dims, 1)) if dims is not None else []
        if rank >= 3 and dims == list(range(2, rank)):
            return self.g.global_pool(self._layer_name(node), self._x(args), kind="avg")
        return self._build_unknown(node, args, reason="a mean over non-spatial dims")

    def _build_linear(self, node, args):
        m = self._module(node)
        if m is not None:
            out, bias = m.out_features, m.bias is not None
        else:
            w = self._attr_value(self._arg(node, 1, "weight"))
            if w is None:
                return self._build_unknown(node, args, reason="a weight that is an activation")
            out, bias = int(w.shape[0]), self._arg(node, 2, "bias") is not None
        return self.g.linear(self._layer_name(node), self._x(args), int(out), bias=bool(bias))

    def _build_batchnorm(self, node, args):
        return self.g.batchnorm(self._layer_name(node), self._x(args))

    def _build_layernorm(self, node, args):
        return self.g.layernorm(self._layer_name(node), self._x(args))

    def _build_dropout(self, node, args):
        m = self._module(node)
        p = m.p if m is not None else self._arg(node, 1, "p", 0.5)
        return self.g.dropout(self._layer_name(node), self._x(args), p=float(p))

    def _build_flatten(self, node, args):
        m = self._module(node)
        if m is not None:
            start, end = m.start_dim, m.end_dim
        else:
            start = self._arg(node, 1, "start_dim", 0)  # torch.flatten(x, ...), x.flatten(...)
            end = self._arg(node, 2, "end_dim", -1)
        rank = len(self._shape(args[0]))
        if start == 1 and end % rank == rank - 1:
            return self.g.flatten(self._layer_name(node), self._x(args))
        return self._build_reshape(node, args)

    def _build_reshape(self, node, args):
        in_shape, out_shape = self._shape(args[0]), self._shape(node)
        perm = self._perm(node, len(in_shape))
        if perm is not None and perm[0] == 0:
            return self.g.transpose(self._layer_name(node), self._x(args), perm)
        if out_shape is None or not out_shape or out_shape[0] != in_shape[0]:
            raise InvalidGraphError(
                f"traced node {node.name!r} ({_target_name(node)}) maps shape {in_shape} to "
                f"{out_shape}, moving or merging the batch dimension, which a layer graph "
                f"cannot express; keep the batch first and separate")
        return self.g.reshape(self._layer_name(node), self._x(args), out_shape[1:])

    def _perm(self, node, rank):
        """The axis permutation of a permute/transpose node, else None."""
        name = _target_name(node)
        if name in ("permute",):
            rest = node.args[1:] if node.op == "call_method" else node.args[1:]
            if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
                rest = rest[0]
            if not rest:
                rest = node.kwargs.get("dims", ())
            return tuple(int(d) % rank for d in rest)
        if name in ("transpose", "swapaxes"):
            a0 = int(self._arg(node, 1, "dim0")) % rank
            a1 = int(self._arg(node, 2, "dim1")) % rank
            perm = list(range(rank))
            perm[a0], perm[a1] = perm[a1], perm[a0]
            return tuple(perm)
        if name == "t" and rank == 2:
            return (1, 0)
        return None

    def _build_embedding(self, node, args):
        m = self._module(node)
        if m is None:
            w = self._attr_value(self._arg(node, 1, "weight"))
            if w is None:
                return self._build_unknown(node, args)
            vocab, dim = w.shape
        else:
            vocab, dim = m.num_embeddings, m.embedding_dim
        return self.g.embedding(self._layer_name(node), self._x(args), int(vocab), int(dim))

    def _build_softmax(self, node, args):
        return self.g.softmax(self._layer_name(node), self._x(args))

    def _build_activation(self, node, args):
        if node.op == "call_module":
            fn = type(self._module(node)).__name__.lower()
        else:
            fn = _target_name(node).lower().rstrip("_")
        fn = {"leakyrelu": "leaky_relu"}.get(fn, fn)
        return self.g.elementwise(self._layer_name(node), self._x(args), fn=fn)

    def _binary(self, node, args, combine: Callable[..., str], fn: str):
        if len(args) >= 2:
            return combine(self._layer_name(node), *[self.layer_of[a] for a in args])
        return self.g.elementwise(self._layer_name(node), self._x(args), fn=fn)

    def _build_add(self, node, args):
        return self._binary(node, args, self.g.add, _target_name(node).lower().rstrip("_"))

    def _build_mul(self, node, args):
        return self._binary(node, args, self.g.mul, _target_name(node).lower().rstrip("_"))

    def _build_binary(self, node, args):
        if len(args) >= 2:
            return self._build_unknown(node, args)
        return self.g.elementwise(self._layer_name(node), self._x(args),
                                  fn=_target_name(node).lower())

    def _build_cat(self, node, args):
        tensors = self._arg(node, 0, "tensors")
        if any(t not in self.layer_of for t in tensors):
            return self._build_unknown(node, args, reason="constants among the inputs")
        rank = len(self._shape(args[0]))
        dim = int(self._arg(node, 1, "dim", 0)) % rank
        first = self.g.layer(self.layer_of[tensors[0]])
        return self.g.concat(self._layer_name(node), [self.layer_of[t] for t in tensors],
                             dim=first.dims[dim])

    def _build_matmul(self, node, args):
        if len(args) >= 2:
            return self.g.matmul(self._layer_name(node), self.layer_of[args[0]],
                                 self.layer_of[args[1]])
        w = self._attr_value(node.args[1]) if len(node.args) > 1 else None
        if w is not None and w.dim() == 2 and node.args[0] is args[0]:
            return self.g.linear(self._layer_name(node), self._x(args), int(w.shape[1]),
                                 bias=False)
        return self._build_unknown(node, args)

    def _build_unknown(self, node, args, reason: str = "an unsupported target"):
        what = f"traced node {node.name!r} ({_target_name(node)})"
        if self.unknown == "error":
            raise InvalidGraphError(f"{what} is {reason}; pass unknown='elementwise' to "
                                    f"import it as an element-wise layer")
        in_shape, out_shape = self._shape(args[0]), self._shape(node)
        if out_shape is None or in_shape != out_shape:
            raise InvalidGraphError(f"{what} is not supported and changes the shape "
                                    f"{in_shape} -> {out_shape}, so it cannot be imported "
                                    f"as element-wise")
        logger.warning("%s: unsupported, imported as a shape-preserving element-wise layer",
                       what)
        fn = (type(self._module(node)).__name__ if node.op == "call_module"
              else _target_name(node)).lower()
        return self.g.elementwise(self._layer_name(node), self._x(args), fn=fn)


def _holds_tensor(node: Any) -> bool:
    """Whether a node's traced value is (or contains) tensors, e.g. torch.split's tuple."""
    meta = node.meta.get("tensor_meta")
    if meta is None:
        return False
    if hasattr(meta, "shape"):
        return True
    try:
        return any(hasattr(m, "shape") for m in meta)
    except TypeError:
        return False


def _tuple(value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        if len(value) == 1 and n > 1:
            return tuple(int(value[0]) for _ in range(n))
        return tuple(int(v) for v in value)
    return tuple(int(value) for _ in range(n))

