"""Run a layer-wise :class:`~milp_parallel.Plan`: every layer on its own tiles.

:func:`parallelize_layerwise` traces the module (``torch.fx``, the same trace and layer names
as :func:`~milp_parallel.from_torch`) and runs it node by node on local tiles: rank ``r``
computes the box of every layer's output that the plan's configuration gives it
(:mod:`.layout`: row-major tiles on ranks ``0 .. prod(degrees) - 1``; a layer on fewer
ranks leaves the others an empty tile), from the box of each input its tile needs.

- **Transitions** (the redistribution between two layers' layouts, halos of spatial splits
  included): one ``all_to_all_single`` of the functional collectives per edge that moves
  anything, every rank sending exactly the boxes the receivers need and do not hold (the
  minimal halo, never an all-gather); its backward sends the gradients of those boxes back
  by the reverse all-to-all, summing overlapping halos at their owner.
- **Layers**: a convolution / pooling tile runs on its input box padded explicitly where the
  box meets the border (zeros; ``-inf`` for max pooling), with the module's stride and
  dilation; a convolution, linear or batch-norm split along its channels / features holds
  only its slice of the weights; any other op runs the traced node on the local pieces.
- **Batch statistics**: a batch-norm split along samples or space, in training, normalizes
  by the whole batch's statistics when the plan was priced so (``CostModel(...,
  batchnorm_stats="sync")``): the ranks sharing a channel slice all-reduce each channel's
  sum and sum of squares forward, and the gradients of those sums backward (two
  all-reduces of ``2 C`` fp32 per step, the cost model's ``stats_seconds``); a plan priced
  ``"local"`` is refused, as its tiles' own statistics are not the module's function.
- **Gradient sync**: a layer's weight-shard gradient is summed among the ranks that hold
  the same shard (:func:`~milp_parallel.costs.replica_groups`) in gradient buckets, as the
  cost model and the step simulator price it (:func:`.layout.plan_sync_buckets`, the plan's
  ``gradient_bucket_bytes``): the backward pass copies each gradient into its bucket's flat
  buffer (one copy: the cost model's ``bucket_copies=1``) and starts the bucket's
  all-reduce, without waiting, as soon as its last gradient is in; when the backward pass
  is done the program waits for the buckets and sets each parameter's ``.grad`` to its
  reduced slice (a view of the bucket, no copy back).

The program is PyTorch's own machinery: ``torch.distributed._functional_collectives``
(``all_to_all_single``, ``all_reduce``) inside ``torch.autograd.Function`` s, the autograd
engine's end-of-backward callback, and ``torch.distributed.new_group`` for the replica
groups; no communication of our own.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np

from ..errors import PlanMismatchError, require
from . import audit
from .layout import (
    edge_exchange,
    layer_degrees,
    plan_batchnorm_stats,
    plan_sync_buckets,
    stats_groups,
    tiles,
)

__all__ = ["parallelize_layerwise", "LayerwiseModule"]

logger = logging.getLogger(__name__)

torch = require("torch", "torch", "milp_parallel.runtime")
nn = torch.nn
F = torch.nn.functional
funcol = require("torch.distributed._functional_collectives", "torch",
                 "milp_parallel.runtime")
dist = torch.distributed

#: Ops that run the traced node on the local pieces unchanged when the plan splits only
#: these dims of them (``None``: any dim).
_PLAIN_OPS = {"elementwise": None, "add": None, "mul": None, "concat": None,
              "dropout": None, "transpose": None, "matmul": None, "slice": None,
              "softmax": None, "flatten": None, "reshape": None, "global_pool": None,
              "loss": None, "layernorm": None, "rmsnorm": None, "fanout": None,
              "adaptive_pool": ("n", "c"), "embedding": ("n", "s")}
_SLICED = {"conv", "linear", "batchnorm"}


def _slices(lo, hi) -> tuple[slice, ...]:
    return tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))


class _Exchange(torch.autograd.Function):
    """``all_to_all_single`` forward, the reverse one backward, both labelled."""

    @staticmethod
    def forward(ctx, send, out_splits, in_splits, group, name):
        ctx.splits, ctx.group, ctx.name = (out_splits, in_splits), group, name
        with audit.label(name, "transfer"):
            out = funcol.all_to_all_single(send.contiguous(), out_splits, in_splits, group)
            return funcol.wait_tensor(out)

    @staticmethod
    def backward(ctx, grad):
        out_splits, in_splits = ctx.splits
        with audit.label(ctx.name, "transfer"):
            g = funcol.all_to_all_single(grad.contiguous(), in_splits, out_splits, ctx.group)
            g = funcol.wait_tensor(g)
        return g, None, None, None, None


class _SyncBatchNorm(torch.autograd.Function):
    """Training batch-norm of a tile by the whole batch's statistics.

    Forward: the tile's per-channel sum and sum of squares, all-reduced (sum) over
    ``group``, give the mean and the inverse standard deviation of ``count`` elements per
    channel; backward: the tile's sums of the output gradient and of it times the normalized
    input, all-reduced likewise, give the input gradient (the weight and bias gradients stay
    the tile's own: the gradient sync sums them). It keeps the input and ``2 C`` statistics
    for the backward, what the cost model's saved-tensor rule prices; both all-reduces are
    labelled ``stats``. Returns the output, the mean and the (biased) variance.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps, count, group, name):
        dims = [d for d in range(x.dim()) if d != 1]
        shape = (1, -1) + (1,) * (x.dim() - 2)
        with audit.label(name, "stats"):
            sums = funcol.wait_tensor(funcol.all_reduce(
                torch.stack([x.sum(dims), (x * x).sum(dims)]), "sum", group))
        mean = sums[0] / count
        var = sums[1] / count - mean * mean
        invstd = torch.rsqrt(var + eps)
        y = (x - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.meta = (dims, shape, count, group, name, bias is not None)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(ctx, gy, _mean, _var):
        x, weight, mean, invstd = ctx.saved_tensors
        dims, shape, count, group, name, has_bias = ctx.meta
        xhat = (x - mean.view(shape)) * invstd.view(shape)
        sum_dy, sum_dy_xhat = gy.sum(dims), (gy * xhat).sum(dims)
        with audit.label(name, "stats"):
            total = funcol.wait_tensor(funcol.all_reduce(
                torch.stack([sum_dy, sum_dy_xhat]), "sum", group))
        scale = invstd if weight is None else invstd * weight
        gx = scale.view(shape) * (gy - (total[0].view(shape) + xhat * total[1].view(shape))
                                  / count)
        return (gx, sum_dy_xhat if weight is not None else None,
                sum_dy if has_bias else None, None, None, None, None)


class _SyncGrad(torch.autograd.Function):
    """Identity forward; backward hands the gradient to its bucket (:class:`_GradBuckets`),
    which sets the parameter's ``.grad`` once the bucket is reduced."""

    @staticmethod
    def forward(ctx, x, buckets, key):
        ctx.buckets, ctx.key = buckets, key
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.buckets.ready(ctx.key, grad)
        return None, None, None


class _GradBuckets:
    """This rank's gradient buckets: each a flat buffer of its parameters' gradients,
    all-reduced (sum) over this rank's replica group when its last gradient is in.

    ``buckets``: ``(label, process group, [(shard key, parameter)])`` per bucket this rank
    takes part in, in the order every rank of the group starts them.
    """

    def __init__(self, buckets: list) -> None:
        self._buckets = buckets
        self._slot: dict[str, tuple[int, int, int]] = {}    # key -> (bucket, offset, size)
        self._size: list[int] = []
        for b, (_, _, params) in enumerate(buckets):
            offset = 0
            for key, p in params:
                self._slot[key] = (b, offset, p.numel())
                offset += p.numel()
            self._size.append(offset)
        self._reset()

    def _reset(self) -> None:
        self._flat: dict[int, Any] = {}
        self._filled = [0] * len(self._buckets)
        self._pending: dict[int, Any] = {}      # bucket -> its all-reduce's result
        self._queued = False

    def ready(self, key: str, grad) -> None:
        """Copy ``grad`` into its bucket; start the bucket's all-reduce once it is full."""
        if not self._queued:    # every rank queues it at its first gradient to sync
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            self._queued = True
        b, offset, size = self._slot[key]
        flat = self._flat.get(b)
        if flat is None:
            flat = self._flat[b] = grad.new_zeros(self._size[b])
        flat[offset:offset + size].copy_(grad.reshape(-1))
        self._filled[b] += 1
        if self._filled[b] == len(self._buckets[b][2]):
            self._launch(b)

    def _launch(self, b: int) -> None:
        name, group, params = self._buckets[b]
        flat = self._flat.get(b)
        if flat is None:
            flat = params[0][1].new_zeros(self._size[b])
        with audit.label(name, "sync"):
            self._pending[b] = funcol.all_reduce(flat, "sum", group)

    def _finish(self) -> None:
        """After the backward pass: start the buckets some gradient never reached (zeros
        in its place, as every rank of the group does), wait, and set the ``.grad`` s."""
        for b in range(len(self._buckets)):
            if b not in self._pending:
                self._launch(b)
        for b in sorted(self._pending):
            flat = funcol.wait_tensor(self._pending[b])
            for key, p in self._buckets[b][2]:
                _, offset, size = self._slot[key]
                g = flat[offset:offset + size].view_as(p)
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad.add_(g)
        self._reset()


class LayerwiseModule(nn.Module):
    """The parallel program of a layer-wise plan on this rank (see the module docstring).

    ``forward`` takes the module's arguments (the whole batch, the same on every rank) and
    returns this rank's tile of the output (an empty tensor on a rank the output layer does
    not use); :meth:`full_output` gathers it. Parameters are this rank's shards, named as
    in the original module (``conv1.weight`` -> ``shards["conv1__weight"]``;
    :meth:`shard_of`).
    """

    def __init__(self, module, plan, graph, gm, layer_of, group=None) -> None:
        super().__init__()
        self.plan = plan
        self.graph = graph
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._group = group or dist.group.WORLD
        self.__dict__["_gm"] = gm     # not a submodule: its parameters are the originals
        self._layer_of = layer_of
        self._cfg = {lc.name: layer_degrees(graph.layer(lc.name), lc.degrees)
                     for lc in plan.layers}
        self._tiles = {n: tiles(graph.layer(n).output_shape, c, self.world)
                       for n, c in self._cfg.items()}
        self._exchanges = {(v, i): edge_exchange(graph.layer(u), graph.layer(v), i,
                                                 self._cfg[u], self._cfg[v], self.world)
                           for u, v, i in graph.edges}
        self.shards = nn.ParameterDict()
        self._param_names: dict[str, str] = {}      # original name -> key in shards
        self._boxes: dict[str, tuple] = {}          # original name -> (slices in the full)
        self._output_node = None
        self._make_shards(module)
        self._process_groups: dict[tuple[int, ...], Any] = {}   # ranks -> new_group
        self._buckets = self._make_buckets()
        self._stats_groups = self._make_stats_groups()
        self._tether: list = []
        # what each step recomputes otherwise: a node's activation inputs, the slices of a
        # layer's input that moves nothing, a window layer's padding
        self._acts: dict[Any, list] = {}
        self._local_slices: dict[tuple[str, int], tuple[slice, ...]] = {}
        self._pads: dict[str, list[int]] = {}

    # ---------------------------------------------------------------- set-up
    def _module_nodes(self):
        for node in self._gm.graph.nodes:
            if node.op == "call_module" and node in self._layer_of:
                yield node, self._layer_of[node]

    def _make_shards(self, module) -> None:
        seen: set[str] = set()
        for node, name in self._module_nodes():
            m = self._gm.get_submodule(node.target)
            layer = self.graph.layer(name)
            lo, hi = self._tiles[name]
            own = self.rank < int(np.prod(self._cfg[name]))
            for pname, p in m.named_parameters(recurse=False):
                full = f"{node.target}.{pname}"
                if full in seen:
                    raise PlanMismatchError(f"parameter {full!r} is used by more than one "
                                            "layer; the layer-wise runtime needs one layer "
                                            "per parameter")
                seen.add(full)
                box = self._weight_box(layer, pname, p, lo[self.rank], hi[self.rank], own)
                key = full.replace(".", "__")
                data = p.detach()[box].clone()
                self.shards[key] = nn.Parameter(data, requires_grad=p.requires_grad)
                self._param_names[full] = key
                self._boxes[full] = box
        missing = {n for n, _ in module.named_parameters()} - set(self._param_names)
        if missing:
            raise PlanMismatchError(
                f"parameters {sorted(missing)} of {type(module).__name__} belong to no "
                "module the plan's layers call; the layer-wise runtime shards parameters "
                "of modules (nn.Conv2d, nn.Linear, ...) only")

    def _make_buckets(self) -> "_GradBuckets":
        """The plan's gradient buckets on this rank (:func:`.layout.plan_sync_buckets`), and
        which layers' weights feed one (``self._synced``)."""
        keys: dict[str, list[str]] = {}
        for full, key in self._param_names.items():
            keys.setdefault(self._layer_of_param(full), []).append(key)
        groups = self._process_groups
        mine = []
        self._synced: set[str] = set()
        for bucket in plan_sync_buckets(self.plan, self.graph, self._cfg):
            for g in bucket.groups:     # every rank creates every group, in the same order
                if g not in groups:
                    groups[g] = dist.new_group(list(g))
            own = [g for g in bucket.groups if self.rank in g]
            if own:
                params = [(k, self.shards[k]) for n in bucket.layers for k in keys.get(n, ())
                          if self.shards[k].requires_grad]
                if params:      # frozen weights: nothing to reduce (on every replica alike)
                    self._synced.update(bucket.layers)
                    mine.append((bucket.name, groups[own[0]], params))
        return _GradBuckets(mine)

    def _make_stats_groups(self) -> dict[str, Any] | None:
        """Layer name -> this rank's process group of batch statistics, for every split
        batch-norm (``None`` when the plan was priced with each tile's own statistics)."""
        if plan_batchnorm_stats(self.plan) != "sync":
            return None
        out = {}
        for layer in self.graph.layers:
            for g in stats_groups(layer, self._cfg[layer.name]):   # every rank, same order
                if g not in self._process_groups:
                    self._process_groups[g] = dist.new_group(list(g))
                if self.rank in g:
                    out[layer.name] = self._process_groups[g]
        return out

    def _weight_box(self, layer, pname, p, lo, hi, own) -> tuple[slice, ...]:
        if not own:
            return tuple(slice(0, 0) for _ in p.shape)
        if layer.op in _SLICED:
            c = layer.dims.index(layer.weight_split_dims[0])
            rows = slice(int(lo[c]), int(hi[c]))
            return (rows,) + tuple(slice(None) for _ in p.shape[1:])
        split = [layer.dims[i] for i, k in enumerate(self._cfg[layer.name])
                 if k > 1 and layer.dims[i] in layer.weight_split_dims]
        if split:
            raise PlanMismatchError(
                f"layer {layer.name!r} ({layer.op}) is split along {', '.join(split)}, which "
                "splits its weights; the layer-wise runtime slices the weights of conv, "
                "linear and batchnorm layers only: pin it with fixed={layer: 'serial'} or "
                "split other dims")
        return tuple(slice(None) for _ in p.shape)

    def shard_of(self, name: str) -> Any:
        """This rank's shard of the original parameter ``name`` and its box in the full
        tensor (a tuple of slices)."""
        return self.shards[self._param_names[name]], self._boxes[name]

    # ---------------------------------------------------------------- run
    def forward(self, *args):
        self._tether = []
        env: dict[Any, Any] = {}
        placeholders = iter(args)
        out = None
        for node in self._gm.graph.nodes:
            if node.op == "placeholder":
                x = next(placeholders)
                name = self._layer_of[node]
                lo, hi = self._tiles[name]
                env[node] = x[_slices(lo[self.rank], hi[self.rank])]
            elif node.op == "output":
                out = node.args[0]
            elif node in self._layer_of and self.graph.layer(self._layer_of[node]).op != \
                    "input" and not self._is_alias(node):
                env[node] = self._run_layer(node, env)
            else:
                if node in self._layer_of:
                    env[node] = env[self._act_args(node)[0]]
                    continue
                args_, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                      lambda n: env[n])
                env[node] = self._call(node, args_, kwargs)
        y = torch.fx.node.map_arg(out, lambda n: env[n])
        if not isinstance(y, torch.Tensor):
            raise PlanMismatchError("the layer-wise runtime needs a module whose forward "
                                    f"returns one tensor, got {type(y).__name__}")
        if self._tether:     # every rank takes part in every backward collective
            y = y + 0.0 * sum(t.sum() for t in self._tether)
        return y

    def _is_alias(self, node) -> bool:
        acts = self._act_args(node)
        return bool(acts) and self._layer_of[node] == self._layer_of.get(acts[0])

    def _act_args(self, node) -> list:
        found = self._acts.get(node)
        if found is None:       # the node's activation inputs, once (the graph is fixed)
            found = []
            torch.fx.node.map_arg((node.args, node.kwargs),
                                  lambda n: found.append(n) if n in self._layer_of
                                  and n not in found else None)
            self._acts[node] = found
        return found

    def _call(self, node, args, kwargs):
        if node.op == "call_module":
            return self._gm.get_submodule(node.target)(*args, **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "get_attr":
            obj = self._gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part)
            return obj
        raise PlanMismatchError(f"unexpected fx node {node.op} {node.name!r}")

    def _gather(self, name: str, i: int, local):
        """This rank's needed box of input ``i`` of layer ``name``, from the producer's
        local tile ``local``."""
        cut = self._local_slices.get((name, i))
        if cut is not None:
            return local[cut]
        ex = self._exchanges[(name, i)]
        me = self.rank
        n_lo, n_hi = ex.need_lo[me], ex.need_hi[me]
        h_lo = ex.hold_lo[me]
        if not ex.moves:
            cut = self._local_slices[(name, i)] = _slices(n_lo - h_lo, n_hi - h_lo)
            return local[cut]
        pieces = [local.reshape(-1)[:0]]
        for r in range(self.world):
            if ex.elements[me, r]:
                lo, hi = ex.piece(me, r)
                pieces.append(local[_slices(lo - h_lo, hi - h_lo)].reshape(-1))
        send = torch.cat(pieces)
        recv = _Exchange.apply(send, ex.elements[:, me].tolist(), ex.elements[me, :].tolist(),
                               self._group, name)
        self._tether.append(recv)
        shape = tuple(int(x) for x in n_hi - n_lo)
        if not all(shape):
            return recv[:0].reshape(shape)
        need = local.new_zeros(shape)
        lo, hi = ex.piece(me, me)
        if np.all(hi > lo):
            need[_slices(lo - n_lo, hi - n_lo)] = local[_slices(lo - h_lo, hi - h_lo)]
        offset = 0
        for s in range(self.world):
            k = int(ex.elements[s, me])
            if k:
                lo, hi = ex.piece(s, me)
                need[_slices(lo - n_lo, hi - n_lo)] = recv[offset:offset + k].view(
                    tuple(int(x) for x in hi - lo))
                offset += k
        return need

    def _weights(self, node, name: str) -> dict[str, Any]:
        out = {}
        synced = name in self._synced
        for full, key in self._param_names.items():
            prefix, _, pname = full.rpartition(".")
            if prefix == str(node.target):
                p = self.shards[key]
                out[pname] = (_SyncGrad.apply(p, self._buckets, key)
                              if synced and p.requires_grad else p)
        return out

    def _run_layer(self, node, env):
        name = self._layer_of[node]
        layer = self.graph.layer(name)
        acts = self._act_args(node)
        if len(acts) != len(layer.inputs):
            raise PlanMismatchError(f"layer {name!r}: traced node has {len(acts)} activation "
                                    f"inputs, the graph {len(layer.inputs)}")
        pieces = {a: self._gather(name, i, env[a]) for i, a in enumerate(acts)}
        lo, hi = self._tiles[name]
        o_lo, o_hi = lo[self.rank], hi[self.rank]
        want = tuple(int(x) for x in o_hi - o_lo)
        if not all(want):   # no tile here: an empty one, tied to the same graph as elsewhere
            tied = [t.sum() for t in pieces.values()]
            tied += [w.sum() for w in self._weights(node, name).values()]
            return pieces[acts[0]].new_zeros(want) + 0.0 * sum(tied)
        if layer.op in ("conv", "pool"):
            y = self._window(node, layer, pieces[acts[0]], o_lo, o_hi)
        elif layer.op in ("linear", "batchnorm"):
            y = self._sliced(node, layer, pieces[acts[0]])
        elif layer.op in _PLAIN_OPS:
            allowed = _PLAIN_OPS[layer.op]
            split = [d for d, k in zip(layer.dims, self._cfg[name]) if k > 1]
            if allowed is not None and set(split) - set(allowed):
                raise PlanMismatchError(
                    f"layer {name!r} ({layer.op}) is split along {', '.join(split)}; the "
                    f"layer-wise runtime runs {layer.op} split along {', '.join(allowed)} "
                    f"only: pin it with fixed={{{name!r}: 'serial'}}")
            args_, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                                  lambda n: pieces.get(n, env.get(n)))
            weights = self._weights(node, name) if node.op == "call_module" else {}
            if weights:
                m = self._gm.get_submodule(node.target)
                y = torch.func.functional_call(m, weights, args_, kwargs)
            else:
                y = self._call(node, args_, kwargs)
        else:
            raise PlanMismatchError(f"layer {name!r}: the layer-wise runtime cannot run "
                                    f"{layer.op!r} layers")
        if tuple(y.shape) != want:
            raise PlanMismatchError(f"layer {name!r}: the local tile came out {tuple(y.shape)}"
                                    f", the plan's box is {want}; the module does not compute"
                                    " what the graph it was planned on says")
        return y

    def _sliced(self, node, layer, x):
        if node.op != "call_module":
            raise PlanMismatchError(f"layer {layer.name!r}: the layer-wise runtime needs "
                                    f"{layer.op} as a module (nn.Linear, nn.BatchNorm*), not "
                                    "a function call")
        m = self._gm.get_submodule(node.target)
        w = self._weights(node, layer.name)
        if layer.op == "linear":
            return F.linear(x, w["weight"], w.get("bias"))
        split = [d for d, k in zip(layer.dims, self._cfg[layer.name]) if k > 1 and d != "c"]
        lo, hi = self._tiles[layer.name]
        c = slice(int(lo[self.rank][1]), int(hi[self.rank][1]))
        rm = m.running_mean[c] if m.running_mean is not None else None
        rv = m.running_var[c] if m.running_var is not None else None
        if m.training and split:
            if self._stats_groups is None:
                raise PlanMismatchError(
                    f"layer {layer.name!r} (batchnorm) is split along {', '.join(split)} in "
                    "training mode, and the plan was priced with each tile's own batch "
                    "statistics (CostModel batchnorm_stats='local'), which is not the "
                    "module's function; solve with cost_model=CostModel(topology, "
                    "batchnorm_stats='sync'), split it along c only, or run the module in "
                    "eval mode")
            return self._batchnorm_synced(m, layer, x, w, rm, rv)
        return F.batch_norm(x, rm, rv, w.get("weight"), w.get("bias"),
                            m.training or rm is None, m.momentum or 0.0, m.eps)

    def _batchnorm_synced(self, m, layer, x, w, rm, rv):
        """Training batch-norm of a tile by the statistics of the whole batch: the sums over
        this rank's tile, all-reduced among the ranks sharing its channels."""
        count = float(np.prod(layer.output_shape)) / float(layer.output_shape[1])
        y, mean, var = _SyncBatchNorm.apply(x, w.get("weight"), w.get("bias"), float(m.eps),
                                            count, self._stats_groups[layer.name], layer.name)
        self._tether.append(y)
        momentum = m.momentum or 0.0
        if rm is not None and momentum:
            with torch.no_grad():       # as F.batch_norm: the unbiased variance
                rm.mul_(1.0 - momentum).add_(mean.detach(), alpha=momentum)
                rv.mul_(1.0 - momentum).add_(var.detach() * (count / max(count - 1.0, 1.0)),
                                             alpha=momentum)
        return y

    def _window(self, node, layer, x, o_lo, o_hi):
        a = layer.attrs
        nsp = len(a["kernel"])
        k = np.asarray(a["kernel"])
        s = np.asarray(a["stride"])
        d = np.asarray(a.get("dilation", (1,) * nsp))
        if layer.name not in self._pads:
            self._pads[layer.name] = self._padding(layer, o_lo, o_hi)
        pad = self._pads[layer.name]
        if layer.op == "conv":
            m = self._gm.get_submodule(node.target) if node.op == "call_module" else None
            if m is None or getattr(m, "padding_mode", "zeros") != "zeros":
                raise PlanMismatchError(f"layer {layer.name!r}: the layer-wise runtime runs "
                                        "convolutions that are modules with zero padding")
            w = self._weights(node, layer.name)
            groups = int(a["groups"])
            if groups > 1:
                per_out = layer.output_shape[1] // groups
                width = int(o_hi[1] - o_lo[1])
                if o_lo[1] % per_out or width % per_out:
                    raise PlanMismatchError(f"layer {layer.name!r}: a channel split must "
                                            f"keep whole groups of {per_out} channels")
                groups = max(width // per_out, 1)
            conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
            return conv(F.pad(x, pad), w["weight"], w.get("bias"), tuple(int(v) for v in s),
                        0, tuple(int(v) for v in d), groups)
        kind = a["kind"]
        if a.get("ceil_mode") and any(self._cfg[layer.name][2:] > 1):
            raise PlanMismatchError(f"layer {layer.name!r}: a spatial split of a pooling "
                                    "layer with ceil_mode=True is not supported")
        sizes = tuple(int(v) for v in k)
        strides = tuple(int(v) for v in s)
        if kind == "max":
            pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
            return pool(F.pad(x, pad, value=-math.inf), sizes, strides, 0,
                        tuple(int(v) for v in d))
        m = self._gm.get_submodule(node.target) if node.op == "call_module" else None
        if any(pad) and m is not None and not getattr(m, "count_include_pad", True):
            raise PlanMismatchError(f"layer {layer.name!r}: average pooling with "
                                    "count_include_pad=False cannot be split spatially")
        pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nsp]
        return pool(F.pad(x, pad), sizes, strides, 0)

    def _padding(self, layer, o_lo, o_hi) -> list[int]:
        """``F.pad``'s padding of this rank's input box of a window layer: the module's own
        padding where the box meets the border, and nothing a neighbour's halo brings. The
        operator then runs unpadded on the copy, whose size the memory model prices
        (:mod:`milp_parallel.costs.saved`)."""
        a = layer.attrs
        nsp = len(a["kernel"])
        k = np.asarray(a["kernel"])
        s = np.asarray(a["stride"])
        p = np.asarray(a["padding"])
        d = np.asarray(a.get("dilation", (1,) * nsp))
        ex = self._exchanges[(layer.name, 0)]
        n_lo, n_hi = ex.need_lo[self.rank], ex.need_hi[self.rank]
        want_lo = o_lo[2:] * s - p
        want_hi = (o_hi[2:] - 1) * s - p + d * (k - 1) + 1
        before = np.maximum(n_lo[2:] - want_lo, 0)
        after = np.maximum(want_hi - n_hi[2:], 0)
        if np.any(o_hi <= o_lo):
            before = after = np.zeros(nsp, dtype=np.int64)
        return [int(v) for pair in zip(before[::-1], after[::-1]) for v in pair]

    # ---------------------------------------------------------------- results
    def full_output(self, y):
        """The whole output on every rank, from every rank's tile (an all-gather outside
        the plan: use it to check, not to train)."""
        name = self._output_layer()
        return self._assemble(y, *self._tiles[name], self.graph.layer(name).output_shape)

    def _output_layer(self) -> str:
        outs = self.graph.output_names
        if len(outs) != 1:
            raise PlanMismatchError(f"the graph has {len(outs)} outputs; the layer-wise "
                                    "runtime runs modules with one output")
        return outs[0]

    def _assemble(self, local, lo, hi, shape):
        flat = [t.reshape(-1) for t in funcol.all_gather_single(
            torch.nn.functional.pad(local.detach().reshape(-1),
                                    (0, int(max(np.prod(hi - lo, axis=1))) - local.numel())),
            0, self._group).chunk(self.world)]
        full = local.new_zeros(tuple(int(x) for x in shape))
        for r in range(self.world):
            if np.all(hi[r] > lo[r]):
                n = int(np.prod(hi[r] - lo[r]))
                full[_slices(lo[r], hi[r])] = flat[r][:n].view(tuple(int(x) for x in
                                                                     hi[r] - lo[r]))
        return full

    def full_gradients(self) -> dict[str, Any]:
        """Every original parameter's whole gradient on every rank (after backward; an
        all-gather outside the plan)."""
        out = {}
        for full, key in self._param_names.items():
            p = self.shards[key]
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            name = self._layer_of_param(full)
            lo, hi = self._tiles[name]
            layer = self.graph.layer(name)
            out[full] = self._assemble_param(g, layer, lo, hi, full)
        return out

    def _layer_of_param(self, full: str) -> str:
        prefix = full.rpartition(".")[0]
        for node, name in self._module_nodes():
            if str(node.target) == prefix:
                return name
        raise KeyError(full)

    def _assemble_param(self, g, layer, lo, hi, full):
        shape = self._gm.get_parameter(full).shape
        if layer.op not in _SLICED:
            return g.detach().clone()
        c = layer.dims.index(layer.weight_split_dims[0])
        used = int(np.prod(self._cfg[layer.name]))
        rest = tuple(int(x) for x in shape[1:])
        p_lo = np.zeros((self.world, len(shape)), np.int64)
        p_hi = np.zeros((self.world, len(shape)), np.int64)
        for r in range(used):
            p_lo[r, 0], p_hi[r, 0] = lo[r][c], hi[r][c]
            p_hi[r, 1:] = rest
        return self._assemble(g, p_lo, p_hi, tuple(shape))


def parallelize_layerwise(module, plan, mesh=None, *, example_inputs: Sequence | None = None
                          ) -> LayerwiseModule:
    """The program of a layer-wise plan on this rank.

    Parameters
    ----------
    module : torch.nn.Module
        The model the plan was solved for (``mp.solve(mp.from_torch(module, x), ...)``);
        not modified.
    plan : Plan
    mesh : torch.distributed.device_mesh.DeviceMesh, optional
        A one-dimensional mesh over the ranks (default: the whole world); its size must be
        the plan's device count.
    example_inputs : tensor or tuple of tensors
        The forward arguments at the plan's batch size (the whole batch), to trace shapes.

    Returns
    -------
    LayerwiseModule

    Raises
    ------
    PlanMismatchError
        A world size other than the plan's devices, a plan and a module whose layers,
        shapes or batch differ, or a configuration the runtime cannot run.
    """
    from ..importers.torch import _Importer, _trace

    if not dist.is_initialized():
        raise PlanMismatchError("parallelize() runs inside an initialized process group: "
                                "launch with torchrun and call "
                                "torch.distributed.init_process_group() first")
    group = None
    if mesh is not None:
        if mesh.ndim != 1:
            raise PlanMismatchError(f"a layer-wise plan runs on a one-dimensional mesh, got "
                                    f"{mesh.ndim} dimensions; pass init_device_mesh('cpu', "
                                    f"({plan.devices},))")
        group = mesh.get_group()
    world = dist.get_world_size(group)
    if world != plan.devices:
        raise PlanMismatchError(f"the plan is for {plan.devices} devices but the process "
                                f"group has {world} ranks; launch {plan.devices} processes "
                                f"or solve for {world} devices")
    if example_inputs is None:
        raise PlanMismatchError("parallelize() of a layer-wise plan needs example_inputs "
                                "(the forward arguments at the plan's batch size)")
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (
        example_inputs,)
    gm = _trace(torch, module, inputs)
    imp = _Importer(torch, module, gm, "error")
    graph = imp.build()
    check_plan_fits(plan, graph)
    return LayerwiseModule(module, plan, graph, gm, imp.layer_of, group)


def check_plan_fits(plan, graph) -> None:
    """Refuse a plan whose layers or batch differ from the module's graph.

    Raises
    ------
    PlanMismatchError
        Naming the layers only one side has, or the batch sizes.
    """
    ours, theirs = set(graph.names), {lc.name for lc in plan.layers}
    if ours != theirs:
        only_plan, only_mod = sorted(theirs - ours), sorted(ours - theirs)
        raise PlanMismatchError(
            f"the plan of {plan.model!r} does not fit the module: layers only in the plan: "
            f"{only_plan[:8] or 'none'}; only in the module: {only_mod[:8] or 'none'}; solve "
            "the plan on mp.from_torch(module, example_input)")
    for lc in plan.layers:
        layer = graph.layer(lc.name)
        if lc.op != layer.op:
            raise PlanMismatchError(f"layer {lc.name!r} is {lc.op!r} in the plan but "
                                    f"{layer.op!r} in the module")
        deg = layer_degrees(layer, lc.degrees)
        if int(np.prod(deg)) > plan.devices:
            raise PlanMismatchError(f"layer {lc.name!r} uses {int(np.prod(deg))} devices, "
                                    f"the plan has {plan.devices}")
    if graph.batch_size is not None and graph.batch_size != plan.batch_size:
        raise PlanMismatchError(f"the example inputs have batch {graph.batch_size} but the "
                                f"plan was solved for batch {plan.batch_size}; pass inputs of "
                                f"batch {plan.batch_size}")
