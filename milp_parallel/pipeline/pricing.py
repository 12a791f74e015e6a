"""Prices of one stage shape: each layer's criteria under each kind, re-layouts, messages.

May import: ``graph``, ``.step_costs``, ``.tensor_parallel``, ``.training_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..graph import LayerGraph
from .step_costs import StepPricer
from .tensor_parallel import Kind, layer_kinds, relayout
from .training_memory import (
    MixedPrecision,
    backward_working_bytes,
    saved_activation_bytes,
    saved_input_bytes,
    zero3_gathered_bytes,
)

#: The criteria of an assignment: tau, psi, state bytes, activation bytes per micro-batch,
#: working set.
_N_CRIT = 5


def _share(layout: str | None, t: int) -> float:
    return 1.0 / t if layout in ("S", "C", "N") else 1.0


def _weight_elements(layer) -> int:
    """Elements of the weights the layer reads (a tied linear reads its embedding's)."""
    if layer.op == "linear" and layer.attrs.get("tied_to"):
        a = layer.attrs
        return a["in_features"] * a["out_features"] + (a["out_features"] if a["bias"] else 0)
    return int(layer.params)


@dataclass(frozen=True)
class Transfer:
    """One collective of a layer, a re-layout or a message: what is priced, and what the
    audit counts (:mod:`.accounting`).

    Attributes
    ----------
    collective : str
        ``"allreduce"``, ``"allgather"``, ``"reducescatter"``, ``"alltoall"`` or ``"p2p"``
        (one message to the next or previous stage).
    group : str
        ``"tp"``, ``"d"`` or ``"dt"`` (:attr:`_MeshPricing.groups`); ``"pp"`` for ``p2p``.
    nbytes : float
        The whole buffer (the gathered output, the reduced input; a message's bytes).
    phase : str
        ``"fwd"`` / ``"bwd"`` (per micro-batch, in that pass), ``"sync"`` (the bucketed
        data-parallel gradient traffic of each micro-batch) or ``"step"`` (bucketed, once per
        iteration).
    """

    collective: str
    group: str
    nbytes: float
    phase: str


class _MeshPricing:
    """Costs of the layers and re-layouts of one stage shape: ``stage_devices`` devices as a
    ``d x t`` mesh, ``b`` samples per group per micro-batch. Stage 0's devices stand for every
    stage (stages are translates of each other)."""

    def __init__(self, graph: LayerGraph, pricer: StepPricer, precision: MixedPrecision,
                 stage_devices: int, t: int, b: int, flash: bool,
                 receive_buffers: str = "preallocated"):
        self.graph, self.pricer, self.precision = graph, pricer, precision
        self.stage_devices, self.t, self.b, self.flash = stage_devices, t, b, flash
        #: how received pipeline messages are held (training_memory.pipeline_receive_bytes)
        self.receive_buffers = receive_buffers
        self.d = stage_devices // t
        # the groups that run at the same time (they share the nodes' network cards)
        grid = np.arange(stage_devices).reshape(self.d, t)
        self.groups = {"tp": grid, "d": grid.T, "dt": grid.reshape(1, -1)}
        self._terms: dict = {}
        self._kinds: dict = {}

    def terms(self, name: str, group: str, nbytes: float = 64 * 2**20
              ) -> tuple[float, float]:
        """Latency and seconds per byte of a collective on one of the stage's groups (the
        algorithm chosen for ``nbytes``; 64 MiB: a data-parallel gradient bucket)."""
        key = (name, group, nbytes)
        hit = self._terms.get(key)
        if hit is None:
            hit = self.pricer.collective_terms(name, self.groups[group], nbytes=nbytes)
            self._terms[key] = hit
        return hit

    def coll(self, name: str | None, group: str, nbytes: float) -> float:
        if name is None or nbytes <= 0:
            return 0.0
        lat, per = self.terms(name, group, float(nbytes))
        return lat + per * nbytes

    def kinds(self, layer) -> tuple[Kind, ...]:
        hit = self._kinds.get(layer.name)
        if hit is None:
            hit = layer_kinds(layer, self.t, micro_batch=self.b)
            self._kinds[layer.name] = hit
        return hit

    def sync_group(self, kind: Kind) -> tuple[str, int]:
        if kind.split_weights or kind.name == "R" or self.t == 1:
            return "d", self.d
        return "dt", self.d * self.t

    # ------------------------------------------------------------------ one layer
    def layer_costs(self, layer, kind: Kind, zero: int, *, tied_copy: bool = False,
                    recomputed: bool = False) -> dict[str, float]:
        """Per micro-batch (``fwd``, ``bwd``, ``zero_tau``), per iteration (``psi``),
        bytes (``state``, ``kept``, ``scores``) of one layer under one kind and ZeRO stage.
        ``tied_copy``: a tied linear on another stage than its embedding keeps (and
        synchronizes) its own copy of the weight. ``recomputed``: the layer is in a fully
        recomputed block (its backward reads what the recomputed forward kept)."""
        t, b, pr = self.t, self.b, self.precision
        ab = float(pr.activation_bytes)
        op = layer.op
        out: dict[str, float] = {}
        if op == "input" or (op == "fanout" and not kind.gathers_input):
            # a fanout runs nothing but its shared gather: its edges move
            return dict(fwd=0.0, bwd=0.0, zero_tau=0.0, psi=0.0, state=0.0, kept=0.0,
                        scores=0.0, fwd_comm=0.0, grad_ws=0.0)
        flops = float(layer.flops) * b / (t if kind.split_compute else 1)
        w_el = _weight_elements(layer)
        w_local = w_el / t if kind.split_weights else float(w_el)
        ins = layer.input_elements
        if op == "embedding":
            moved = 2.0 * ab * b * layer.output_elements * _share(kind.out, t)
        else:
            moved = ab * b * (sum(n * _share(L, t) for n, L in zip(ins, kind.ins))
                              + layer.output_elements * _share(kind.out, t))
            moved += float(pr.param_bytes) * w_local
        scores = 0.0
        dropout = False
        if op == "attention" and not self.flash:
            s = layer.output_shape[1]
            scores = layer.attrs["heads"] * s * s * b / (t if kind.split_compute else 1)
            dropout = layer.attrs.get("dropout", 0.0) > 0
        fwd, bwd = self.pricer.compute_seconds(op, flops, moved, score_elements=scores,
                                               attention_dropout=dropout)
        moves = self.layer_transfers(layer, kind, zero, tied_copy=tied_copy,
                                     recomputed=recomputed)
        comm = self.seconds(m for m in moves if m.phase == "fwd")
        fwd += comm
        bwd += self.seconds(m for m in moves if m.phase == "bwd")
        zero_tau = self.seconds(m for m in moves if m.phase == "sync")
        psi = self.seconds(m for m in moves if m.phase == "step")
        params = self._local_params(layer, kind, tied_copy)
        state = 0.0
        if params > 0:
            group, size = self.sync_group(kind)
            psi += self.pricer.optimizer_seconds(params / (size if zero >= 1 else 1))
            state = params * pr.state_bytes_per_param(zero, size)
        kept, sc = saved_activation_bytes(layer, kind, t, b, pr, flash=self.flash,
                                          recomputed=recomputed)
        out.update(fwd=fwd, bwd=bwd, zero_tau=zero_tau, psi=psi, state=state, kept=kept,
                   scores=sc, fwd_comm=comm,
                   grad_ws=backward_working_bytes(layer, kind, t, b, pr, flash=self.flash))
        return out

    def _local_params(self, layer, kind: Kind, tied_copy: bool) -> float:
        w_el = _weight_elements(layer)
        w_local = w_el / self.t if kind.split_weights else float(w_el)
        return w_local if (w_el > 0 and (layer.params > 0 or tied_copy)) else 0.0

    def layer_transfers(self, layer, kind: Kind, zero: int, *, tied_copy: bool = False,
                        recomputed: bool = False) -> list[Transfer]:
        """The collectives one layer issues under one kind and ZeRO stage (inside the
        tensor-parallel group per micro-batch; its data-parallel gradient traffic).

        A sequence-parallel linear gathers its input in the forward pass and, since it keeps
        only its slice, again in the backward pass (Megatron-LM's); in a fully
        ``recomputed`` block the backward reads the recomputed forward's gathered input, so
        the forward's gather runs twice (priced with the recomputed forward) and the
        backward gathers nothing.
        """
        if layer.op == "input":
            return []
        b, pr = self.b, self.precision
        ab = float(pr.activation_bytes)
        ins = layer.input_elements
        out: list[Transfer] = []
        if kind.gathers_input:
            nb = ab * b * ins[0]
            out.append(Transfer("allgather", "tp", nb, "fwd"))
            if not recomputed:
                out.append(Transfer("allgather", "tp", nb, "bwd"))
            out.append(Transfer("reducescatter", "tp", nb, "bwd"))
        if kind.reduces_loss:
            # the positions scored (a causal LM's shifted labels leave S - shift)
            tokens = b * (ins[0] // layer.input_shapes[0][-1] - layer.attrs.get("shift", 0))
            out.append(Transfer("allreduce", "tp", 3.0 * 4.0 * tokens, "fwd"))
        params = self._local_params(layer, kind, tied_copy)
        if params > 0:
            group, _ = self.sync_group(kind)
            gb, wb = params * float(pr.grad_bytes), params * float(pr.param_bytes)
            if zero == 2:
                out.append(Transfer("reducescatter", group, gb, "sync"))
            elif zero == 3:
                out += [Transfer("allgather", group, wb, "sync"),
                        Transfer("allgather", group, wb, "sync"),
                        Transfer("reducescatter", group, gb, "sync")]
            if zero in (0, 1):
                out.append(Transfer("allreduce", group, gb, "step"))
            elif zero == 2:
                out.append(Transfer("allgather", group, wb, "step"))
        return out

    def recompute_transfers(self, block_input_bytes: float, layout: str) -> list[Transfer]:
        """Full recomputation of a block keeps each rank's ``1/t`` slice of a replicated
        (``layout="R"``) block input and all-gathers it again for the recompute (Megatron-LM's
        distributed checkpoints); a sequence-split input is its slice already."""
        if self.t == 1 or layout != "R":
            return []
        return [Transfer("allgather", "tp", block_input_bytes, "bwd")]

    def seconds(self, moves) -> float:
        """Seconds of transfers: per-pass ones at their own size's algorithm, the bucketed
        data-parallel ones (``sync``, ``step``) at the bucket's bandwidth, their latencies
        counted once per stage (:meth:`.stages._StageTables.stage_constants`)."""
        total = 0.0
        for m in moves:
            if m.phase in ("sync", "step"):
                total += self.terms(m.collective, m.group)[1] * m.nbytes
            else:
                total += self.coll(m.collective, m.group, m.nbytes)
        return total

    def criteria(self, layer, kinds: Sequence[Kind], zero: int, mode: str, *,
                 tied_copy: bool = False, root: bool = False) -> np.ndarray:
        """``(K, 5)``: tau, psi, state, activation per micro-batch in flight, working set.

        ``root``: the layer is one of the stage's layers outside its blocks (the ZeRO-3
        unit gathered for the whole step, :func:`.training_memory.zero3_gathered_bytes`).
        """
        out = np.zeros((len(kinds), _N_CRIT))
        for k, kind in enumerate(kinds):
            c = self.layer_costs(layer, kind, zero, tied_copy=tied_copy,
                                 recomputed=mode == "full")
            tau = c["fwd"] + c["bwd"] + c["zero_tau"]
            act, ws = c["kept"] + c["scores"], c["grad_ws"]
            if mode == "full":
                tau += c["fwd"]
                act, ws = 0.0, c["kept"] + c["scores"] + c["grad_ws"]
            elif mode == "selective" and layer.op == "attention":
                tau += c["fwd"] - c["fwd_comm"]
                act, ws = c["kept"], c["scores"] + c["grad_ws"]
            if zero == 3:
                ws += zero3_gathered_bytes(self._local_params(layer, kind, tied_copy),
                                           self.precision, root=root)
            out[k] = (tau, c["psi"], c["state"], act, ws)
        return out

    # ------------------------------------------------------------------ one edge
    def edge_transfers(self, producer, index: int, x: Kind, y: Kind) -> list[Transfer]:
        """The re-layout of ``producer``'s output (kind ``x``) into input ``index`` of a
        consumer of kind ``y``: forward, and its gradient back."""
        if producer.op == "input":
            return []
        nb = float(self.precision.activation_bytes) * self.b * producer.output_elements
        out = []
        fw = relayout(x.out, y.ins[index])
        if fw is not None:
            out.append(Transfer(fw, "tp", nb, "fwd"))
        g = y.in_grads[index]
        # a gradient joins a partial sum (a fanout's readers' summed in P) for free
        bw = relayout(g, x.out_grad) if g is not None and x.out_grad != "P" else None
        if bw is not None:
            out.append(Transfer(bw, "tp", nb, "bwd"))
        return out

    def edge_kept(self, producer, consumer, index: int, x: Kind, y: Kind) -> float:
        """Bytes the consumer (kind ``y``) keeps of its input ``index`` beyond its own
        criteria, which count that input whole (never positive): a reader of a shared
        gather's copy (a fanout of kind :data:`.tensor_parallel.GATHERED_FANOUT`) keeps the
        slice the fanout holds, not a copy of its own (it is gathered again with the
        others' for the backward pass, or held once by a recomputed forward)."""
        if producer.op != "fanout" or not x.gathers_input or y.ins[index] != x.out:
            return 0.0
        return -saved_input_bytes(consumer, y, index, self.t, self.b, self.precision)

    def edge_criteria(self, producer, consumer, index: int, ku: Sequence[Kind],
                      kv: Sequence[Kind], mode: str) -> np.ndarray:
        """``(K_u, K_v, 5)``: an edge's share of the criteria (:meth:`criteria`) in a block
        of recomputation ``mode``: its re-layout seconds per micro-batch (the forward's
        twice when fully recomputed) and :meth:`edge_kept` (in the working set when fully
        recomputed, else in the activations kept)."""
        fw, bw = self.edge(producer, consumer, index, ku, kv)
        out = np.zeros(fw.shape + (_N_CRIT,))
        out[..., 0] = (2.0 if mode == "full" else 1.0) * fw + bw
        if producer.op == "fanout":
            col = 4 if mode == "full" else 3
            for a, x in enumerate(ku):
                for c, y in enumerate(kv):
                    out[a, c, col] = self.edge_kept(producer, consumer, index, x, y)
        return out

    def edge(self, producer, consumer, index: int, ku: Sequence[Kind], kv: Sequence[Kind]
             ) -> tuple[np.ndarray, np.ndarray]:
        """``(forward, backward)`` re-layout seconds, each ``(K_u, K_v)``."""
        fw = np.zeros((len(ku), len(kv)))
        bw = np.zeros((len(ku), len(kv)))
        if producer.op == "input":
            return fw, bw
        for a, x in enumerate(ku):
            for c, y in enumerate(kv):
                moves = self.edge_transfers(producer, index, x, y)
                fw[a, c] = self.seconds(m for m in moves if m.phase == "fwd")
                bw[a, c] = self.seconds(m for m in moves if m.phase == "bwd")
        return fw, bw

    def send_transfers(self, nbytes: float, out: str, out_grad: str) -> list[Transfer]:
        """The sending stage's half of one inter-stage message, per micro-batch.

        Messages travel as ``1/t`` sequence pieces, one per device of the group, each over
        its own link (Megatron-LM's scatter/gather): the sender re-lays its output out to
        pieces (free from a replicated or sequence-split output), sends them, and in the
        backward pass re-lays the gradient pieces it receives to the layout it needs. The
        gradient's transfer is the receiver's (:meth:`recv_transfers`).
        """
        t = self.t
        moves = [Transfer("p2p", "pp", nbytes / t, "fwd")]
        if t > 1:
            to, back = relayout(out, "S"), relayout("S", out_grad)
            if to is not None:
                moves.append(Transfer(to, "tp", nbytes, "fwd"))
            if back is not None:
                moves.append(Transfer(back, "tp", nbytes, "bwd"))
        return moves

    def recv_transfers(self, nbytes: float, ins: Sequence[str],
                       in_grads: Sequence[str | None]) -> list[Transfer]:
        """The receiving stage's half: re-lay the pieces out for each consumer, and in the
        backward pass re-lay each consumer's input gradient to pieces (a reduce-scatter for
        partial sums), add them and send them back."""
        t = self.t
        grads = [g for g in in_grads if g is not None]
        moves = []
        if t > 1:
            moves += [Transfer(c, "tp", nbytes, "fwd") for c in
                      (relayout("S", d) for d in ins) if c is not None]
            moves += [Transfer(c, "tp", nbytes, "bwd") for c in
                      (relayout(g, "S") for g in grads) if c is not None]
        if grads:
            moves.append(Transfer("p2p", "pp", nbytes / t, "bwd"))
        return moves

    def message_seconds(self, moves, devices: tuple[int, int]) -> float:
        """Seconds of a stage's half of its messages (:meth:`send_transfers`,
        :meth:`recv_transfers`) between ``devices``."""
        lat, per = self.pricer.p2p_terms(*devices)
        return sum(lat + per * m.nbytes if m.collective == "p2p"
                   else self.coll(m.collective, m.group, m.nbytes) for m in moves)

    def send_seconds(self, nbytes: float, out: str, out_grad: str,
                     devices: tuple[int, int]) -> float:
        """Seconds of :meth:`send_transfers`."""
        return self.message_seconds(self.send_transfers(nbytes, out, out_grad), devices)

    def recv_seconds(self, nbytes: float, ins: Sequence[str], in_grads: Sequence[str | None],
                     devices: tuple[int, int]) -> float:
        """Seconds of :meth:`recv_transfers`."""
        return self.message_seconds(self.recv_transfers(nbytes, ins, in_grads), devices)
