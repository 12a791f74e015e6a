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

May import: ``errors``, ``graph``, ``.blocks``, ``.space``, ``.pricing``.
"""

from __future__ import annotations

from typing import Mapping

from ..errors import InvalidOptionError
from ..graph import LayerGraph
from .blocks import block_structure
from .pricing import Transfer, _MeshPricing
from .space import PipelineOptions

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


class _Tally:
    def __init__(self, pr: _MeshPricing, t: int, d: int):
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
    o = options or getattr(plan, "options", None) or PipelineOptions()
    st = block_structure(graph)
    p, t, d, m, v = plan.pipeline, plan.tensor, plan.data, plan.micro_batches, plan.chunks
    pr = _MeshPricing(graph, None, o.precision, plan.devices // p, t, plan.micro_batch_size,
                      o.flash_attention)
    tally = _Tally(pr, t, d)

    def kind_of(layer, name: str):
        for k in pr.kinds(layer):
            if k.name == name:
                return k
        raise InvalidOptionError(f"layer {layer.name!r} has no kind {name!r} at t={t}")

    exit_layer = graph.layer(st.blocks[0][st.exit])
    stream = float(o.precision.activation_bytes) * plan.micro_batch_size \
        * exit_layer.output_elements
    for stage in plan.stages:
        s = stage.index
        sync_key, p2p_key = (f"stage {s}", "sync"), (f"stage {s}", "p2p")
        kinds = dict(stage.kinds)
        full = stage.recompute == "full"
        zero = stage.zero
        by_name = {}
        for bi in stage.blocks:
            for rest, name in zip(st.rest, st.blocks[bi]):
                by_name[name] = kind_of(graph.layer(name), kinds[rest])
        for name in (st.pre if s == 0 else ()) + (st.post if s == p - 1 else ()):
            by_name[name] = kind_of(graph.layer(name), kinds[name])
        block_of = {n: bi for bi in stage.blocks for n in st.blocks[bi]}
        per_chunk = len(stage.blocks) // v
        first_in_chunk = {stage.blocks[r * per_chunk] for r in range(v)}
        for name, kind in by_name.items():
            layer = graph.layer(name)
            in_block = name in block_of
            fwd_n = 2.0 * m if (in_block and full) else None
            tied = p > 1 and s == p - 1 and bool(layer.attrs.get("tied_to"))
            tally.add((name, "transfer"), pr.layer_transfers(layer, kind, zero, tied_copy=tied),
                      m, fwd_times=fwd_n, sync_key=sync_key)
            for i, u in enumerate(layer.inputs):
                if u in by_name:
                    producer, ku = graph.layer(u), by_name[u]
                elif in_block and block_of[name] not in first_in_chunk:
                    raise InvalidOptionError(f"layer {name!r} reads {u!r}, not on stage {s}")
                else:
                    continue        # the message from the previous stage (below)
                if in_block and u in block_of and block_of[u] != block_of[name] \
                        and block_of[name] in first_in_chunk:
                    continue        # chunks of one stage are not consecutive blocks
                tally.add((name, "transfer"), pr.edge_transfers(producer, i, ku, kind), m,
                          fwd_times=fwd_n if (in_block and u in block_of) else None)
        if full:
            for bi in stage.blocks:
                out = by_name[st.blocks[bi][st.exit]].out
                tally.add((f"stage {s}", "recompute"), pr.recompute_transfers(stream, out), m)
        exit_kinds = [by_name[st.blocks[b][st.exit]] for b in stage.blocks[:1]]
        entry_kinds = [[by_name[st.blocks[stage.blocks[0]][j]] for j, _ in st.entry]]
        n_send = v if s < p - 1 else (v - 1 if p > 1 else 0)
        n_recv = v if s > 0 else (v - 1 if p > 1 else 0)
        if n_send:
            k = exit_kinds[0]
            _message(tally, pr.send_transfers(stream, k.out, k.out_grad), m * n_send,
                     p2p_key)
        if n_recv:
            ks = entry_kinds[0]
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
    o = options or getattr(plan, "options", None) or PipelineOptions()
    st = block_structure(graph)
    p, t = plan.pipeline, plan.tensor
    pr = _MeshPricing(graph, None, o.precision, plan.devices // p, t, plan.micro_batch_size,
                      o.flash_attention)
    prec = o.precision
    out = []
    for stage in plan.stages:
        s, kinds, zero = stage.index, dict(stage.kinds), stage.zero
        names = [(n, kinds[r]) for bi in stage.blocks for r, n in zip(st.rest, st.blocks[bi])]
        names += [(n, kinds[n]) for n in (st.pre if s == 0 else ()) +
                  (st.post if s == p - 1 else ())]
        split = {"parameters": 0.0, "gradients": 0.0, "optimizer": 0.0}
        planned_state = 0.0
        for name, kname in names:
            layer = graph.layer(name)
            kind = next((k for k in pr.kinds(layer) if k.name == kname), None)
            if kind is None:
                raise InvalidOptionError(f"layer {name!r} has no kind {kname!r} at t={t}")
            tied = p > 1 and s == p - 1 and bool(layer.attrs.get("tied_to"))
            n = pr._local_params(layer, kind, tied)
            if n <= 0:
                continue
            _, size = pr.sync_group(kind)
            w, g, opt = prec.state_split(zero, size)
            planned_state += n * (w + g + opt)
            split["parameters"] += n * w
            split["gradients"] += n * g
            adam = float(prec.optimizer_bytes) / (size if zero >= 1 else 1)
            split["optimizer"] += n * (opt - adam + adam * optimizer_state_factor / 2.0)
        split["activations"] = max(float(stage.memory_bytes) - planned_state, 0.0)
        out.append(split)
    return out


def describe_traffic(rows: Mapping[tuple[str, str], float]) -> str:  # pragma: no cover
    return "\n".join(f"{a:<40} {b:<14} {v:>14.0f}" for (a, b), v in sorted(rows.items()))
