"""What a transformer plan's training step moves and holds, in the runtime audit's units.

:func:`plan_traffic`: the bytes its collectives move, by layer. :func:`stage_memory`: each
stage's peak bytes per device split into parameters, gradients, optimizer state and
activations.

The same :class:`~.pricing.Transfer` events the plan's seconds are priced from (each layer's,
each re-layout's, each message's), multiplied out over the plan's micro-batches, blocks,
recomputed forwards and device groups, and counted as the runtime audit counts a program's
collectives (:mod:`milp_parallel.runtime.audit`), summed over the ranks:

- an all-reduce of a ``B``-byte buffer: ``B`` per rank;
- an all-gather of a ``B``-byte result: each rank's ``B / r`` piece;
- a reduce-scatter of a ``B``-byte input: ``B`` per rank;
- an all-to-all: what each rank sends to the others;
- a point-to-point message: its bytes, at the sender.

Rows (``(layer, kind)`` keys):

- ``(graph layer, "transfer")``: the tensor-parallel collectives of a layer (a
  sequence-parallel linear's input gather, the vocabulary-parallel loss) and of the
  re-layouts of its inputs (attributed to the consumer, as the cost model does);
- ``("stage <s>", "sync")``: the data-parallel gradient and ZeRO traffic of stage ``s``;
- ``("stage <s>", "p2p")``: the messages stage ``s`` sends (its output forward, the gradient
  of its input backward); ``("stage <s>", "p2p relayout")``: their re-layouts to and from
  ``1/t`` pieces.

May import: ``errors``, ``graph``, ``.tensor_parallel``, ``.blocks``, ``.fanout``,
``.space``, ``.pricing``.
"""

from __future__ import annotations

from ..errors import InvalidOptionError
from ..graph import LayerGraph
from .blocks import block_structure
from .fanout import with_fanouts
from .pricing import Transfer, _MeshPricing
from .space import PipelineOptions, message_counts
from .tensor_parallel import Kind

__all__ = ["plan_traffic", "counted_bytes", "stage_memory"]


def counted_bytes(move: Transfer, group_size: int) -> float:
    """Bytes one group's ranks together count for one ``move`` (module docstring)."""
    r, nb = group_size, float(move.nbytes)
    if move.collective == "p2p":
        return nb
    if r <= 1:
        return 0.0
    if move.collective in ("allreduce", "reducescatter"):
        return r * nb
    if move.collective == "allgather":
        return nb
    if move.collective == "alltoall":
        return nb * (r - 1) / r
    raise InvalidOptionError(f"counted_bytes: unknown collective {move.collective!r}")


def _pricing(plan, graph: LayerGraph, options: PipelineOptions | None) -> _MeshPricing:
    """The plan's stage shape priced under its options (no step pricer: bytes only)."""
    o = options or getattr(plan, "options", None) or PipelineOptions()
    return _MeshPricing(graph, None, o.precision, plan.devices // plan.pipeline, plan.tensor,
                        plan.micro_batch_size, o.flash_attention, o.receive_buffers)


def _kind(pr: _MeshPricing, layer, name: str) -> Kind:
    for k in pr.kinds(layer):
        if k.name == name:
            return k
    raise InvalidOptionError(f"layer {layer.name!r} has no kind {name!r} at t={pr.t}; its "
                             f"kinds: {', '.join(k.name for k in pr.kinds(layer))}")


def _stage_kinds(pr: _MeshPricing, graph: LayerGraph, st, plan, stage) -> dict[str, Kind]:
    """Every layer of ``stage`` (its blocks, and the layers before / after them on the first
    / last stage) with its kind."""
    kinds = dict(stage.kinds)
    out = {name: _kind(pr, graph.layer(name), kinds[rest])
           for bi in stage.blocks for rest, name in zip(st.rest, st.blocks[bi])}
    ends = (st.pre if stage.index == 0 else ()) + \
        (st.post if stage.index == plan.pipeline - 1 else ())
    out.update({name: _kind(pr, graph.layer(name), kinds[name]) for name in ends})
    return out


class _Tally:
    def __init__(self, t: int, d: int):
        self.rows: dict[tuple[str, str], float] = {}
        # (size, number of groups of the stage) per group name
        self.groups = {"tp": (t, d), "d": (d, t), "dt": (d * t, 1), "pp": (1, d * t)}

    def add(self, key: tuple[str, str], moves, times: float = 1.0, *,
            fwd_times: float | None = None, sync_key: tuple[str, str] | None = None) -> None:
        for m in moves:
            n = times           # per micro-batch ...
            if m.phase == "fwd" and fwd_times is not None:
                n = fwd_times       # ... forward passes with the recomputed ones ...
            elif m.phase == "step":
                n = 1.0             # ... or once per step
            size, count = self.groups[m.group]
            where = sync_key if m.phase in ("sync", "step") and sync_key else key
            b = counted_bytes(m, size) * count * n
            self.rows[where] = self.rows.get(where, 0.0) + b


def plan_traffic(plan, graph: LayerGraph, *, options: PipelineOptions | None = None
                 ) -> dict[tuple[str, str], float]:
    """Bytes of every collective ``plan`` prices, per training step, by ``(layer, kind)``.

    Parameters
    ----------
    plan : PipelinePlan
        From :func:`~.search.solve_pipeline` or :func:`~.search.evaluate_configuration`.
    graph : LayerGraph
        The graph it was planned on.
    options : PipelineOptions, optional
        Default: the plan's own (``plan.options``), else the defaults.

    Returns
    -------
    dict
        ``{(layer, kind): bytes}`` summed over the ranks, zero rows left out.

    Raises
    ------
    InvalidOptionError
        A plan whose stages do not fit the graph's blocks or kinds.
    """
    graph = with_fanouts(graph)
    pr = _pricing(plan, graph, options)
    st = block_structure(graph)
    p, m, v = plan.pipeline, plan.micro_batches, plan.chunks
    tally = _Tally(plan.tensor, plan.data)
    exit_layer = graph.layer(st.blocks[0][st.exit])
    stream = float(pr.precision.activation_bytes) * plan.micro_batch_size \
        * exit_layer.output_elements
    for stage in plan.stages:
        s, zero = stage.index, stage.zero
        sync_key, p2p_key = (f"stage {s}", "sync"), (f"stage {s}", "p2p")
        full = stage.recompute == "full"
        by_name = _stage_kinds(pr, graph, st, plan, stage)
        block_of = {n: bi for bi in stage.blocks for n in st.blocks[bi]}
        for name, kind in by_name.items():
            layer = graph.layer(name)
            in_block = name in block_of
            fwd_n = 2.0 * m if (in_block and full) else None
            tied = p > 1 and s == p - 1 and bool(layer.attrs.get("tied_to"))
            tally.add((name, "transfer"),
                      pr.layer_transfers(layer, kind, zero, tied_copy=tied,
                                         recomputed=in_block and full),
                      m, fwd_times=fwd_n, sync_key=sync_key)
            # inputs from this stage (the previous stage's arrive as messages, below); a
            # re-layout between blocks is recomputed with them, one into the first block not
            for i, u in enumerate(layer.inputs):
                if u in by_name:
                    tally.add((name, "transfer"),
                              pr.edge_transfers(graph.layer(u), i, by_name[u], kind), m,
                              fwd_times=fwd_n if u in block_of else None)
        if full:
            for bi in stage.blocks:
                out = by_name[st.blocks[bi][st.exit]].out
                tally.add((f"stage {s}", "recompute"), pr.recompute_transfers(stream, out), m)
        n_send, n_recv = message_counts(p, v, s)
        first = stage.blocks[0]
        if n_send:
            k = by_name[st.blocks[first][st.exit]]
            _message(tally, pr.send_transfers(stream, k.out, k.out_grad), m * n_send,
                     p2p_key)
        if n_recv:
            ks = [by_name[st.blocks[first][j]] for j, _ in st.entry]
            _message(tally, pr.recv_transfers(
                stream, [k.ins[i] for k, (_, i) in zip(ks, st.entry)],
                [k.in_grads[i] for k, (_, i) in zip(ks, st.entry)]), m * n_recv, p2p_key)
    return {k: b for k, b in tally.rows.items() if b > 0}


def _message(tally: _Tally, moves, times: float, key: tuple[str, str]) -> None:
    tally.add(key, [x for x in moves if x.collective == "p2p"], times)
    tally.add((key[0], "p2p relayout"), [x for x in moves if x.collective != "p2p"], times)


def stage_memory(plan, graph: LayerGraph, *, options: PipelineOptions | None = None,
                 optimizer_state_factor: float = 2.0) -> list[dict[str, float]]:
    """Each stage's predicted peak per device (``plan.stages[s].memory_bytes``), split.

    Parameters
    ----------
    plan : PipelinePlan
    graph : LayerGraph
    options : PipelineOptions, optional
        Default: the plan's own.
    optimizer_state_factor : float, default 2
        The optimizer's state in weights per weight (Adam 2, momentum 1, SGD 0): the
        plan's ``optimizer_bytes`` are Adam's, scaled by ``factor / 2``.

    Returns
    -------
    list of dict
        ``{"parameters", "gradients", "optimizer", "activations": bytes}`` per stage
        (activations: the rest of the peak, with the recomputation working set).
    """
    graph = with_fanouts(graph)
    pr = _pricing(plan, graph, options)
    st = block_structure(graph)
    prec = pr.precision
    # the plan's optimizer bytes are Adam's; another optimizer keeps factor / 2 of them
    adam = float(prec.master_bytes + prec.optimizer_bytes)
    scale = (prec.master_bytes + prec.optimizer_bytes * optimizer_state_factor / 2.0) / adam \
        if adam > 0 else 0.0
    out = []
    for stage in plan.stages:
        s = stage.index
        split = {"parameters": 0.0, "gradients": 0.0, "optimizer": 0.0}
        planned_state = 0.0
        for name, kind in _stage_kinds(pr, graph, st, plan, stage).items():
            layer = graph.layer(name)
            tied = plan.pipeline > 1 and s == plan.pipeline - 1 and bool(
                layer.attrs.get("tied_to"))
            n = pr._local_params(layer, kind, tied)
            if n <= 0:
                continue
            w, g, opt = prec.state_split(stage.zero, pr.sync_group(kind)[1])
            planned_state += n * (w + g + opt)
            split["parameters"] += n * w
            split["gradients"] += n * g
            split["optimizer"] += n * opt * scale
        split["activations"] = max(float(stage.memory_bytes) - planned_state, 0.0)
        out.append(split)
    return out
