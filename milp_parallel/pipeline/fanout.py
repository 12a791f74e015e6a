"""Tensors read by several layers, priced once: the planner's ``fanout`` layers.

A tensor that several layers read (a block's input: its first norm and its residual add; a
norm's output: a gated MLP's gate and up projections) is re-laid out once for all its
readers, and their gradients are summed once before the sum is re-laid out back: Megatron-LM's
``f`` operator is one all-reduce for the gate and up projections together, not one each.
Priced edge by edge, every reader would pay its own re-layout. :func:`with_fanouts` inserts a
``fanout`` layer (the identity) between such a tensor and its readers, whose kind ``L/G``
says where the shared copy lives (layout ``L``: one forward re-layout from the producer) and
where the readers' gradients are summed (layout ``G``: each reader's gradient re-laid out to
``G``, the sum re-laid out once to the producer's). ``G = P`` sums partial gradients as they
are, which every layout can join for free; pairwise, this is exact.

Names: ``<producer>.fanout`` for a tensor made inside a block (or outside the blocks), and
``<prefix>layers.<i>.input_fanout`` for block ``i``'s input, so that every block keeps its
own copy and all blocks stay alike.

Their kinds are :func:`.tensor_parallel.layer_kinds`'; in a given configuration, its readers'
(:func:`.tensor_parallel.complete_fanout_kinds`). A fanout whose readers are all linears is
marked ``linear_readers``: it may also gather a sequence-split tensor once for all of them
(``S>R/P``, sequence parallelism's MLP input), its readers keeping the one slice it holds.

May import: ``graph``, ``.blocks``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..graph import LayerGraph
from .blocks import _BLOCK_RE

__all__ = ["with_fanouts"]


def _readers(graph: LayerGraph) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {n: [] for n in graph.names}
    for L in graph.layers:
        for i, u in enumerate(L.inputs):
            out[u].append((L.name, i))
    return out


def _block_of(name: str) -> tuple[str, str] | None:
    m = _BLOCK_RE.match(name)
    return (m["prefix"], m["index"]) if m else None


def _fanout_name(producer: str, readers: Sequence[tuple[str, int]]) -> str:
    """A block's input gets its block's fanout; any other tensor its producer's."""
    blocks = {_block_of(r) for r, _ in readers}
    if len(blocks) == 1 and None not in blocks and _block_of(producer) not in blocks:
        prefix, index = blocks.pop()
        return f"{prefix}.{index}.input_fanout"
    return f"{producer}.fanout"


def with_fanouts(graph: LayerGraph) -> LayerGraph:
    """``graph`` with a ``fanout`` layer between every tensor read by several layers and its
    readers (the graph itself when there is none, or it has them already).

    Inputs are left alone (token ids read by several embeddings move nothing).

    Examples
    --------
    >>> from milp_parallel.models.gpt import gpt
    >>> g = with_fanouts(gpt(1, layers=2, hidden=64, heads=4, vocab=128, seq_len=32))
    >>> [n for n in g.names if g.layer(n).op == "fanout"][:3]
    ['layers.0.input_fanout', 'layers.0.add1.fanout', 'layers.1.input_fanout']
    """
    readers = _readers(graph)
    shared = {u: rs for u, rs in readers.items()
              if len(rs) > 1 and graph.layer(u).op != "input"}
    if not shared or any(L.op == "fanout" for L in graph.layers):
        return graph
    out = LayerGraph(graph.name)
    rename: dict[tuple[str, int], str] = {}
    for L in graph.layers:
        out.add_layer(L.name, L.op, [rename.get((L.name, i), u) for i, u in
                                     enumerate(L.inputs)], **dict(L.attrs))
        rs = shared.get(L.name)
        if rs:
            f = out.fanout(_fanout_name(L.name, rs), L.name,
                           linear_readers=all(graph.layer(r).op == "linear" for r, _ in rs))
            rename.update({r: f for r in rs})
    return out
