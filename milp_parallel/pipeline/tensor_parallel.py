"""Megatron-style tensor parallelism as per-layer configurations ("split kinds").

Inside a pipeline stage the devices form a logical ``d x t`` mesh: ``t`` consecutive devices
(inside one node) make a tensor-parallel group, and ``d`` such groups hold different samples
(data parallelism). Every layer picks a **kind**: how its output, its inputs and its weights
lie over the ``t`` devices of a group. A kind is described by the layouts it needs and gives:

======== ==============================================================================
layout   what each of the ``t`` devices of a group holds of a tensor
======== ==============================================================================
``R``    all of it (replicated)
``S``    a ``1/t`` slice of the sequence (``s``) dimension
``C``    a ``1/t`` slice of the feature dimension (columns; whole heads for attention)
``N``    a ``1/t`` slice of the samples (data parallelism inside the group)
``P``    partial sums of all of it (the output of a row-parallel linear: its reduction
         dimension is split, so the ``t`` pieces must be added)
======== ==============================================================================

=================== ======================= ======== ======== ======== ====== =============
op                  kind                    inputs   in-grad  output   out-   weights
                                                                       grad
=================== ======================= ======== ======== ======== ====== =============
linear              ``column``              R        P        C        C      split
linear              ``column_sp``           S        S        C        C      split
linear              ``row``                 C        C        P        R      split
linear              ``seq`` / ``sample``    S / N    S / N    S / N    S / N  replicated
attention           ``head`` / ``sample``   C / N    C / N    C / N    C / N  (none)
norms               ``R`` ``S`` ``N``       same     same     same     same   replicated
pointwise ops       ``R`` ``S`` ``C`` ``N`` same     same     same     same   (none)
embedding           ``vocab``               R        --       P        R      split (rows)
embedding           ``R`` ``S`` ``N``       same     --       same     same   replicated
loss                ``vocab``               C        C        R        R      (none)
loss                ``R`` ``S`` ``N``       same     same     R        R      (none)
other ops           ``R`` ``N``             same     same     same     same   replicated
fanout              ``L/G`` (``L`` of RSN)  L        G        L        G      (none)
fanout              ``S>R/P``               S        S        R        P      (none)
=================== ======================= ======== ======== ======== ====== =============

``column`` is Megatron-LM's column-parallel linear (its input gradient is a partial sum:
the "f" operator's backward all-reduce), ``row`` the row-parallel linear (the "g" operator),
``column_sp`` the column-parallel linear of sequence parallelism (Korthikanti et al. 2022): it
all-gathers its sequence-split input in the forward pass and again in the backward pass (it
keeps only its slice; in a fully recomputed block the backward reads the recomputed
forward's gathered input instead), and reduce-scatters its input gradient. ``vocab`` is the
vocabulary-parallel embedding (each device holds ``V / t`` rows and outputs partial sums) and
the vocabulary-parallel cross-entropy (three all-reduces of one number per token). A
``fanout`` (:mod:`.fanout`) is the shared copy of a tensor several layers read; ``S>R/P``
gathers a sequence-split tensor once for all its readers, as ``column_sp`` does for one. Pointwise
ops are element-wise functions, dropout and residual adds. With ``t = 1`` every layer has the
single kind ``N``.

Re-layouts between a producer's output layout and a consumer's input layout are collectives
inside the group (:func:`relayout`): ``R -> S, C, N`` take a slice (free), ``S, C, N -> R`` an
all-gather, a split to another split an all-to-all, ``P -> R`` an all-reduce and ``P -> S,
C, N`` a reduce-scatter. The backward pass runs the conjugate re-layout from the consumer's
input-gradient layout to the producer's output-gradient layout (so ``P -> R`` forward is an
all-reduce forward and nothing backward, and ``R -> column`` is free forward and an
all-reduce backward: Megatron-LM's ``g`` and ``f``).

May import: ``errors``, ``graph`` (types only).

Examples
--------
>>> relayout("P", "R"), relayout("R", "C"), relayout("S", "R"), relayout("S", "C")
('allreduce', None, 'allgather', 'alltoall')
>>> from milp_parallel.models.gpt import gpt
>>> g = gpt(1, layers=1, hidden=64, heads=4, vocab=128, seq_len=32)
>>> [k.name for k in layer_kinds(g.layer("layers.0.proj"), 2, micro_batch=2)]
['column', 'column_sp', 'row', 'seq', 'sample']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidOptionError

if TYPE_CHECKING:
    from ..graph import LayerGraph

__all__ = ["LAYOUTS", "Kind", "GATHERED_FANOUT", "layer_kinds", "relayout", "megatron_kinds",
           "shared_input_kind", "complete_fanout_kinds", "COLLECTIVES"]

#: Layout letters (see the module docstring).
LAYOUTS = ("R", "S", "C", "N", "P")
#: The layouts a fanout's shared copy may take (:func:`layer_kinds`): a shared tensor is a
#: block's stream, replicated or split by sequence or sample.
_FANOUT_LAYOUTS = "RSN"
#: Collective names :func:`relayout` returns.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")

_POINTWISE = frozenset({"elementwise", "dropout", "add", "mul"})
_NORMS = frozenset({"layernorm", "rmsnorm"})


@dataclass(frozen=True)
class Kind:
    """One tensor-parallel configuration of a layer inside a group of ``t`` devices.

    Attributes
    ----------
    name : str
        ``column``, ``row``, ``head``, ``vocab``, or a layout letter for layers whose input,
        output and weights follow one layout.
    ins : tuple of str
        The layout each input must arrive in.
    in_grads : tuple of str or None
        The layout of the gradient returned for each input (``None``: no gradient, e.g.
        token ids).
    out, out_grad : str
        The output's layout, and the layout its gradient must arrive in.
    split_compute : bool
        The work is divided by ``t`` (``False``: every device of the group does all of it).
    split_weights : bool
        The parameters are sharded ``t`` ways (``False``: every device holds all of them).
    gathers_input : bool
        ``column_sp`` and the fanout kind ``S>R/P``: the layer all-gathers its input itself
        (forward, and again in the backward pass: it keeps only its slice) and
        reduce-scatters the input gradient.
    reduces_loss : bool
        ``vocab`` loss: three all-reduces of one fp32 number per token in the forward pass.
    """

    name: str
    ins: tuple[str, ...]
    in_grads: tuple[str | None, ...]
    out: str
    out_grad: str
    split_compute: bool = True
    split_weights: bool = False
    gathers_input: bool = False
    reduces_loss: bool = False

    @property
    def weights_sync_tp(self) -> bool:
        """Whether weight gradients differ across the group (so they are reduced over the
        group too): replicated weights used on split data."""
        return not self.split_weights and self.name != "R"


#: The fanout kind of sequence parallelism's shared gather: a sequence-split tensor
#: all-gathered once for all its readers (forward, and again in the backward pass: only the
#: slice is kept), their gradients summed as partial sums and reduce-scattered once
#: (Megatron-LM's MLP input under sequence parallelism: its gate and up projections are
#: column-parallel linears reading the gathered copy). Offered to a fanout whose readers are
#: all linears (its attribute ``linear_readers``).
GATHERED_FANOUT = Kind("S>R/P", ("S",), ("S",), "R", "P", split_compute=False,
                       split_weights=False, gathers_input=True)


def _fits(layer, layout: str, t: int, micro_batch: int) -> bool:
    """Whether the layer's output can be split ``t`` ways along ``layout``'s dimension."""
    shape = layer.output_shape
    if layout == "N":
        return micro_batch % t == 0
    if layout == "S":
        return "s" in layer.dims and shape[layer.dims.index("s")] % t == 0
    if layout == "C":
        return len(shape) >= 2 and layer.dims[-1] == "c" and shape[-1] % t == 0
    return True


def layer_kinds(layer, t: int, *, micro_batch: int) -> tuple[Kind, ...]:
    """The kinds a layer may take in a tensor-parallel group of ``t`` devices.

    Parameters
    ----------
    layer : Layer
        A layer of a :class:`~milp_parallel.graph.LayerGraph`.
    t : int
        Devices of the group (1 gives the single kind ``N``).
    micro_batch : int
        Samples each group processes at once (``N`` needs ``t`` to divide it).

    Returns
    -------
    tuple of Kind
        Never empty: ``R`` (replicated work) is always possible for layers that have no
        better kind.

    Raises
    ------
    InvalidOptionError
        ``t`` or ``micro_batch`` not a positive integer.
    """
    for what, v in (("t", t), ("micro_batch", micro_batch)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InvalidOptionError(f"layer_kinds: {what} must be a positive integer, "
                                     f"got {v!r}")
    op = layer.op
    n_in = len(layer.inputs)
    needs_grad = op not in ("input", "embedding")
    if t == 1:
        return (Kind("N", ("N",) * n_in, (("N" if needs_grad else None),) * n_in, "N", "N",
                     split_compute=True, split_weights=False),)
    ok = {L: _fits(layer, L, t, micro_batch) for L in "SCN"}
    out: list[Kind] = []
    if op == "input":
        return tuple(Kind(L, (), (), L, L, split_compute=L != "R")
                     for L in "RSN" if L == "R" or ok[L])
    if op == "linear":
        fin, fout = layer.input_shapes[0][-1], layer.output_shape[-1]
        seq_ok = "s" in layer.dims and layer.output_shape[layer.dims.index("s")] % t == 0
        if fout % t == 0:
            out.append(Kind("column", ("R",), ("P",), "C", "C", True, True))
            if seq_ok:
                out.append(Kind("column_sp", ("S",), ("S",), "C", "C", True, True,
                                gathers_input=True))
        if fin % t == 0:
            out.append(Kind("row", ("C",), ("C",), "P", "R", True, True))
        if seq_ok:
            out.append(Kind("seq", ("S",), ("S",), "S", "S", True, False))
        if ok["N"]:
            out.append(Kind("sample", ("N",), ("N",), "N", "N", True, False))
        if not out:
            out.append(Kind("R", ("R",), ("R",), "R", "R", False, False))
        return tuple(out)
    if op == "attention":
        if layer.attrs["kv_heads"] % t == 0:
            out.append(Kind("head", ("C",), ("C",), "C", "C", True, False))
        if ok["N"]:
            out.append(Kind("sample", ("N",), ("N",), "N", "N", True, False))
        if not out:
            out.append(Kind("R", ("R",), ("R",), "R", "R", False, False))
        return tuple(out)
    if op == "embedding":
        if layer.attrs["vocab"] % t == 0:
            out.append(Kind("vocab", ("R",), (None,), "P", "R", False, True))
        for L in "RSN":
            if L == "R" or ok[L]:
                out.append(Kind(L, (L,), (None,), L, L, L != "R", False))
        return tuple(out)
    if op == "fanout":
        # where the shared copy lives / where the readers' gradients are summed
        # (milp_parallel.pipeline.fanout)
        for L in _FANOUT_LAYOUTS:
            if L == "R" or ok[L]:
                for G in dict.fromkeys((L, "P")):
                    out.append(Kind(f"{L}/{G}", (L,), (G,), L, G, False, False))
        if ok["S"] and layer.attrs.get("linear_readers"):
            out.append(GATHERED_FANOUT)
        return tuple(out)
    if op == "loss":
        if layer.input_shapes[0][-1] % t == 0 and len(layer.input_shapes[0]) >= 2:
            out.append(Kind("vocab", ("C",), ("C",), "R", "R", True, False,
                            reduces_loss=True))
        for L in "RSN":
            if L == "R" or (L == "N" and micro_batch % t == 0) or (
                    L == "S" and len(layer.input_shapes[0]) == 3
                    and layer.input_shapes[0][1] % t == 0):
                out.append(Kind(L, (L,), (L,), "R", "R", L != "R", False))
        return tuple(out)
    if op in _NORMS:
        layouts = "RSN"
    elif op in _POINTWISE:
        layouts = "RSCN"
        shapes = set(tuple(s) for s in layer.input_shapes)
        if len(shapes) > 1:         # a broadcasting mul: keep it simple
            layouts = "RN"
    else:
        layouts = "RN"
    for L in layouts:
        if L == "R" or ok[L]:
            out.append(Kind(L, (L,) * n_in, ((L if needs_grad else None),) * n_in, L, L,
                            split_compute=L != "R", split_weights=False))
    return tuple(out)


def relayout(src: str, dst: str) -> str | None:
    """The collective that turns layout ``src`` into ``dst`` inside a group (``None``: free).

    Raises
    ------
    InvalidOptionError
        An unknown layout, or ``dst == "P"`` (nothing needs partial sums as input).
    """
    if src not in LAYOUTS or dst not in LAYOUTS:
        raise InvalidOptionError(f"relayout: layouts must be among {LAYOUTS}, got {src!r} -> "
                                 f"{dst!r}")
    if dst == "P":
        raise InvalidOptionError(f"relayout: no layer takes partial sums as input ({src!r} -> "
                                 "'P')")
    if src == dst or src == "R":
        return None
    if src == "P":
        return "allreduce" if dst == "R" else "reducescatter"
    if dst == "R":
        return "allgather"
    return "alltoall"


def megatron_kinds(graph: LayerGraph, t: int, *, sequence_parallel: bool = False
                   ) -> dict[str, str]:
    """Megatron-LM's tensor-parallel layout of every layer, by name.

    Column-parallel linears where the input is whole (query/key/value, first MLP layers,
    logits), row-parallel where it is split (attention output, last MLP layer), heads split in
    attention, split pointwise ops between a column- and a row-parallel linear, a
    vocabulary-parallel embedding and cross-entropy, everything else replicated (``R``), or
    sequence-split (``S``) with ``sequence_parallel`` (Korthikanti et al.; the column-parallel
    linears then gather their input: ``column_sp``, or once for several linears reading one
    tensor: the fanout kind ``S>R/P``, read by ``column`` linears). With ``t = 1``: ``N``
    everywhere.

    Examples
    --------
    >>> from milp_parallel.models.gpt import gpt
    >>> k = megatron_kinds(gpt(1, layers=1, hidden=64, heads=4, vocab=128, seq_len=32), 2)
    >>> [k[f"layers.0.{n}"] for n in ("ln1", "qkv", "attn", "proj", "add1", "gelu", "fc2")]
    ['R', 'column', 'head', 'row', 'R', 'C', 'row']
    """
    if t == 1:
        return {L.name: "N" for L in graph.layers}
    rep = "S" if sequence_parallel else "R"
    out: dict[str, str] = {}
    layout: dict[str, str] = {}
    for L in graph.layers:
        src = [layout[u] for u in L.inputs]
        if L.op == "input":
            k, lay = "R", "R"
        elif L.op == "embedding":
            k, lay = ("vocab", "P") if L.attrs.get("vocab", 0) > L.output_shape[1] else \
                ("R", "R")
        elif L.op == "linear":
            if src[0] == "C":
                k, lay = "row", "P"
            else:
                k, lay = ("column_sp" if src[0] == "S" else "column"), "C"
        elif L.op == "attention":
            k, lay = "head", "C"
        elif L.op == "loss":
            k, lay = ("vocab" if src[0] == "C" else "R"), "R"
        elif L.op in ("elementwise", "dropout", "mul") and all(x == "C" for x in src):
            k, lay = "C", "C"
        elif L.op in ("elementwise", "dropout", "add", "mul", "layernorm", "rmsnorm"):
            k, lay = rep, rep
        elif L.op == "fanout" and src[0] == "S" and L.attrs.get("linear_readers"):
            k, lay = GATHERED_FANOUT.name, "R"      # linears' shared sequence-parallel gather
        elif L.op == "fanout":      # the shared copy; its kind from its readers' (below)
            k, lay = None, (rep if src[0] == "P" else src[0])
        else:
            k, lay = "R", "R"
        out[L.name] = k
        layout[L.name] = lay
    # (the readers' kinds do not depend on the micro-batch: any that the sample split fits)
    return complete_fanout_kinds(graph, {n: k for n, k in out.items() if k is not None}, t,
                                 micro_batch=t)


def shared_input_kind(readers) -> str:
    """The fanout kind ``L/G`` (:mod:`.fanout`) a program runs for readers of these kinds
    (``(reader kind, input index)`` pairs): the readers' common input layout (``R``, from
    which every layout is a free slice, when they differ), and their gradients summed in
    that layout when they all return it, else as partial sums (``P``: every gradient joins
    one for free, and the sum is re-laid out once).

    Examples
    --------
    >>> col = Kind("column", ("R",), ("P",), "C", "C")
    >>> norm = Kind("R", ("R",), ("R",), "R", "R")
    >>> shared_input_kind([(col, 0), (col, 0)]), shared_input_kind([(norm, 0), (norm, 0)])
    ('R/P', 'R/R')
    >>> split = Kind("C", ("C",), ("C",), "C", "C")     # no fanout kind keeps a C copy
    >>> shared_input_kind([(split, 0), (split, 0)]), shared_input_kind([(norm, 0), (col, 0)])
    ('R/P', 'R/P')
    """
    ins = {k.ins[i] for k, i in readers}
    grads = {k.in_grads[i] for k, i in readers} - {None}
    L = ins.pop() if len(ins) == 1 and next(iter(ins)) in _FANOUT_LAYOUTS else "R"
    G = L if grads <= {L} else "P"
    return f"{L}/{G}"


def complete_fanout_kinds(graph: LayerGraph, kinds: Mapping[str, str], t: int, *,
                          micro_batch: int) -> dict[str, str]:
    """``kinds`` (by layer name) with the kind of every fanout of ``graph`` it leaves out:
    :func:`shared_input_kind` of its readers' kinds (a fanout whose readers' kinds are not
    all known stays out, and is named where the kinds are read)."""
    out = dict(kinds)
    readers: dict[str, list] = {}
    for L in graph.layers:
        for i, u in enumerate(L.inputs):
            readers.setdefault(u, []).append((L, i))
    for L in graph.layers:
        if L.op != "fanout" or L.name in out:
            continue
        if t == 1:
            out[L.name] = "N"
            continue
        rs = []
        for r, i in readers.get(L.name, ()):
            ks = {k.name: k for k in layer_kinds(r, t, micro_batch=micro_batch)}
            if out.get(r.name) not in ks:
                break
            rs.append((ks[out[r.name]], i))
        else:
            out[L.name] = shared_input_kind(rs)
    return out
