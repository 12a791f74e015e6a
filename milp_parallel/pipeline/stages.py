"""One stage shape's non-dominated block, pre and post assignments, and its message tables.

May import: ``errors``, ``graph``, ``.tensor_parallel``, ``.blocks``, ``.pricing``,
``.dominance``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..errors import InvalidOptionError
from ..graph import LayerGraph
from .blocks import BlockStructure
from .dominance import _assignment_criteria, _dominance_program, _prune
from .pricing import _N_CRIT, _MeshPricing, _weight_elements
from .tensor_parallel import Kind

_RECOMPUTE_INDEX = {"none": 0, "selective": 1, "full": 2}


def _kind_index(kinds: Sequence[Kind], name: str, layer: str) -> int:
    for i, k in enumerate(kinds):
        if k.name == name:
            return i
    raise InvalidOptionError(f"layer {layer!r} has no kind {name!r} here; its kinds: "
                             f"{', '.join(k.name for k in kinds)}")


@dataclass
class _Points:
    """Non-dominated assignments of a group of layers (one row each)."""

    assign: np.ndarray          # (P, n_layers) kind index per layer
    crit: np.ndarray            # (P, 5)
    cls: np.ndarray             # (P,) class id (meaning depends on the group)
    zero: np.ndarray            # (P,) ZeRO stage
    mode: np.ndarray            # (P,) recomputation mode index
    wrap: np.ndarray            # (P,) re-layout seconds between two consecutive blocks
    c_tau: np.ndarray           # (P,) per-stage seconds per micro-batch (bucket latencies)
    c_psi: np.ndarray           # (P,) per-stage seconds per iteration (bucket latencies)

    @staticmethod
    def concat(parts: Sequence["_Points"]) -> "_Points":
        return _Points(*(np.concatenate([getattr(p, f) for p in parts])
                         for f in ("assign", "crit", "cls", "zero", "mode", "wrap", "c_tau",
                                   "c_psi")))

    def __len__(self) -> int:
        return len(self.crit)


class _StageTables:
    """Non-dominated block, pre and post assignments of one stage shape ``(N/p, t, b)``."""

    def __init__(self, graph: LayerGraph, struct: BlockStructure, pricing: _MeshPricing,
                 zeros: Sequence[int], modes: Sequence[str], multi_stage: bool, *,
                 fixed: Mapping[str, str] | None = None):
        self.graph, self.struct, self.pricing = graph, struct, pricing
        # ZeRO-1 moves the same bytes as ZeRO-0 and holds and updates less: with both
        # allowed, stage 0 is dominated and not enumerated
        zeros = tuple(z for z in zeros if not (z == 0 and 1 in zeros and fixed is None))
        self.zeros, self.modes, self.multi_stage = tuple(zeros), tuple(modes), multi_stage
        blk = [graph.layer(n) for n in struct.blocks[0]]
        self.block_layers = blk
        self.block_kinds = [pricing.kinds(L) for L in blk]
        pos = {L.name: j for j, L in enumerate(blk)}
        self._block_preds_raw = [[(pos[u], i) for i, u in enumerate(L.inputs) if u in pos]
                                 for L in blk]
        if fixed is None:
            self._prune_fanout_kinds()
        self.entry_layers = [blk[j] for j, _ in struct.entry]
        self.exit_layer = blk[struct.exit]
        # classes: block input consumers' kinds, block output kind
        ent = struct.entry
        self.in_classes = list(itertools.product(*[range(len(self.block_kinds[j]))
                                                   for j, _ in ent]))
        self.in_index = {c: i for i, c in enumerate(self.in_classes)}
        self.n_out = len(self.block_kinds[struct.exit])
        ab = float(pricing.precision.activation_bytes)
        self.stream_bytes = ab * pricing.b * self.exit_layer.output_elements
        if fixed is not None:       # one given assignment (kinds by layer name)
            self.fix({r: fixed[n] for r, n in zip(struct.rest, struct.blocks[0])},
                     {n: fixed[n] for n in struct.pre}, {n: fixed[n] for n in struct.post},
                     self.zeros[0], self.modes[0])
            return
        self.block = self._block_points()
        self.pre = self._pre_points()
        self.post = self._post_points()

    def _prune_fanout_kinds(self) -> None:
        """Keep, of each fanout inside the block (its producer and readers there), the
        kinds that are the cheapest for some kinds of its neighbours: such a fanout costs
        nothing but its re-layouts inside the block time, so the others are never in an
        optimum (exact; ties keep the first). A shared gather (``gathers_input``) has costs
        of its own and changes what its readers keep: it always stays, and is not weighed."""
        blk, kinds, pr = self.block_layers, self.block_kinds, self.pricing
        weights = sorted({2.0 if m == "full" else 1.0 for m in self.modes})
        for j, L in enumerate(blk):
            preds = self._block_preds_raw[j]
            readers = [(r, i) for r, ps in enumerate(self._block_preds_raw)
                       for u, i in ps if u == j]
            # (not the block's input: its re-layout in is weighed against the first block's
            # and the others' differently for each number of blocks of a stage)
            if L.op != "fanout" or not preds or not readers or len(kinds[j]) < 2:
                continue
            u = preds[0][0]
            into = pr.edge(blk[u], L, 0, kinds[u], kinds[j])
            outs = [pr.edge(L, blk[r], i, kinds[j], kinds[r]) for r, i in readers]
            gather = np.array([k.gathers_input for k in kinds[j]])
            keep = set(np.flatnonzero(gather).tolist())
            for w in weights:
                # total[a, f, r_1, ..., r_k]: producer kind a, fanout kind f, reader kinds
                total = (w * into[0] + into[1]).reshape(into[0].shape + (1,) * len(outs))
                for n, (fw, bw) in enumerate(outs):
                    shape = [1, fw.shape[0]] + [1] * len(outs)
                    shape[2 + n] = fw.shape[1]
                    total = total + (w * fw + bw).reshape(shape)
                total = np.where(gather.reshape((1, -1) + (1,) * len(outs)), np.inf, total)
                keep |= set(np.unique(np.argmin(total, axis=1)).tolist())
            kinds[j] = tuple(k for f, k in enumerate(kinds[j]) if f in keep)

    # ------------------------------------------------------------------ constants
    def stage_constants(self, zero: int) -> tuple[float, float]:
        """Bucket latencies: (per micro-batch, per iteration) of a stage using ``zero``."""
        pr = self.pricing
        groups = ["d"] if pr.t == 1 else ["d", "dt"]
        lat = lambda name: sum(pr.terms(name, g)[0] for g in groups)  # noqa: E731
        if zero in (0, 1):
            return 0.0, lat("allreduce")
        if zero == 2:
            return lat("reducescatter"), lat("allgather")
        return 2 * lat("allgather") + lat("reducescatter"), 0.0

    def _edge_table(self, u, v, i, ku, kv, mode: str) -> np.ndarray:
        """An edge's criteria ``(K_u, K_v, 5)``, or its seconds ``(K_u, K_v)`` alone when it
        changes no memory (most edges: the dominance program adds one column, not five)."""
        table = self.pricing.edge_criteria(u, v, i, ku, kv, mode)
        return table if table[..., 1:].any() else table[..., 0]

    # ------------------------------------------------------------------ blocks
    def _block_pieces(self, mode: str):
        """Per-layer ``preds`` and the between-block re-layout tables of one mode."""
        s, blk, kinds = self.struct, self.block_layers, self.block_kinds
        preds = [[(u, self._edge_table(blk[u], L, i, kinds[u], kinds[j], mode))
                  for u, i in self._block_preds_raw[j]] for j, L in enumerate(blk)]
        # (a block's output is no fanout: between blocks, re-layouts move time only)
        wraps = [self.pricing.edge_criteria(self.exit_layer, self.entry_layers[e], i,
                                            kinds[s.exit], kinds[j], mode)[..., 0]
                 for e, (j, i) in enumerate(s.entry)]
        return preds, wraps

    def _finish_block(self, assign: np.ndarray, cr: np.ndarray, wraps, mode: str,
                      zero: int) -> _Points:
        """Class, between-block re-layout and per-stage constants of block assignments."""
        s, pr = self.struct, self.pricing
        wrap = np.zeros(len(cr))
        for e, (j, i) in enumerate(s.entry):
            wrap += wraps[e][assign[:, s.exit], assign[:, j]]
        cr = cr.copy()
        if mode == "full":
            in_bytes = float(pr.precision.activation_bytes) * pr.b \
                * self.exit_layer.output_elements
            cr[:, 3] += in_bytes / pr.t
            exit_kinds = self.block_kinds[s.exit]
            cr[:, 0] += [pr.seconds(pr.recompute_transfers(in_bytes, exit_kinds[k].out))
                         for k in assign[:, s.exit]]
        in_cls = np.array([self.in_index[tuple(int(assign[r, j]) for j, _ in s.entry)]
                           for r in range(len(cr))], dtype=np.int64)
        c_tau, c_psi = self.stage_constants(zero)
        P = len(cr)
        return _Points(assign, cr, in_cls * self.n_out + assign[:, s.exit],
                       np.full(P, zero), np.full(P, _RECOMPUTE_INDEX[mode]), wrap,
                       np.full(P, c_tau), np.full(P, c_psi))

    def _block_points(self) -> _Points:
        s, pr = self.struct, self.pricing
        blk, kinds = self.block_layers, self.block_kinds
        keep = sorted({j for j, _ in s.entry} | {s.exit})
        parts = []
        for mode in self.modes:
            preds, wraps = self._block_pieces(mode)
            for zero in self.zeros:
                crit = [pr.criteria(L, kinds[j], zero, mode) for j, L in enumerate(blk)]
                _, _, cr, assign = _dominance_program(crit, preds, keep)
                parts.append(self._finish_block(assign, cr, wraps, mode, zero))
        return _Points.concat(parts)

    def fixed_block(self, kinds_by_rest: Mapping[str, str], zero: int, mode: str) -> _Points:
        """The one block assignment given by kind names (by block-relative layer name),
        priced by the same formulas as the search."""
        s, pr = self.struct, self.pricing
        blk, kinds = self.block_layers, self.block_kinds
        a = np.array([[_kind_index(kinds[j], kinds_by_rest[r], r)
                       for j, r in enumerate(s.rest)]])
        preds, wraps = self._block_pieces(mode)
        cr = _assignment_criteria(a[0], [pr.criteria(L, kinds[j], zero, mode)
                                         for j, L in enumerate(blk)], preds)
        return self._finish_block(a, cr[None, :], wraps, mode, zero)

    def block_in_class(self, points: _Points) -> np.ndarray:
        return points.cls // self.n_out

    def block_out_class(self, points: _Points) -> np.ndarray:
        return points.cls % self.n_out

    # ------------------------------------------------------------------ pre and post
    def _group(self, names: Sequence[str], extra_first=None):
        layers = [self.graph.layer(n) for n in names]
        if extra_first is not None:
            layers = [extra_first] + layers
        pos = {L.name: j for j, L in enumerate(layers)}
        raw = [[(pos[u], i) for i, u in enumerate(L.inputs) if u in pos] for L in layers]
        return layers, raw

    def _pre_pieces(self):
        s, pr = self.struct, self.pricing
        layers, raw = self._group(s.pre)
        kinds = [pr.kinds(L) for L in layers]
        preds = [[(u, self._edge_table(layers[u], L, i, kinds[u], kinds[j], "none"))
                  for u, i in raw[j]] for j, L in enumerate(layers)]
        ex = [L.name for L in layers].index(s.pre_exit)
        into = [self.pricing.edge(layers[ex], self.entry_layers[e], i, kinds[ex],
                                  self.block_kinds[j])
                for e, (j, i) in enumerate(s.entry)]
        return layers, kinds, preds, ex, into

    def _pre_points(self, fixed: Mapping[str, str] | None = None,
                    block: _Points | None = None) -> _Points:
        pr = self.pricing
        layers, kinds, preds, ex, into = self._pre_pieces()
        parts = []
        for zero in self.zeros:
            crit = [pr.criteria(L, kinds[j], zero, "none", root=True)
                    for j, L in enumerate(layers)]
            if fixed is None:
                _, state, cr, assign = _dominance_program(crit, preds, [ex])
                classes = list(enumerate(self.in_classes))
            else:
                assign = np.array([[_kind_index(kinds[j], fixed[L.name], L.name)
                                    for j, L in enumerate(layers)]])
                cr = _assignment_criteria(assign[0], crit, preds)[None, :]
                state = assign[:, [ex]]
                ci = int(self.block_in_class(block)[0])
                classes = [(ci, self.in_classes[ci])]
            for ci, cls in classes:
                c = cr.copy()
                for e, (fw, bw) in enumerate(into):
                    c[:, 0] += (fw + bw)[state[:, 0], cls[e]]
                if fixed is None:
                    _, c, a = _prune(np.zeros((len(c), 0), np.int64), c, assign)
                else:
                    a = assign
                P = len(c)
                parts.append(_Points(a, c, np.full(P, ci), np.full(P, zero),
                                     np.zeros(P, np.int64), np.zeros(P), np.zeros(P),
                                     np.zeros(P)))
        return _Points.concat(parts)

    def _post_points(self, fixed: Mapping[str, str] | None = None,
                     block: _Points | None = None) -> _Points:
        s, pr = self.struct, self.pricing
        last = self.graph.layer(s.blocks[-1][s.exit])
        layers, raw = self._group(s.post, extra_first=last)
        ex_kinds = self.block_kinds[s.exit]
        outs = range(self.n_out) if fixed is None else [int(self.block_out_class(block)[0])]
        parts = []
        for ko in outs:
            kinds = [(ex_kinds[ko],)] + [pr.kinds(L) for L in layers[1:]]
            preds = [[(u, self._edge_table(layers[u], L, i, kinds[u], kinds[j], "none"))
                      for u, i in raw[j]] for j, L in enumerate(layers)]
            for zero in self.zeros:
                crit = [np.zeros((1, _N_CRIT))] + [
                    pr.criteria(L, kinds[j + 1], zero, "none", root=True,
                                tied_copy=self.multi_stage and bool(L.attrs.get("tied_to")))
                    for j, L in enumerate(layers[1:])]
                if self.multi_stage:
                    crit = self._tied_sync(layers, kinds, crit)
                if fixed is None:
                    _, _, cr, assign = _dominance_program(crit, preds, [])
                else:
                    assign = np.array([[0] + [_kind_index(kinds[j + 1], fixed[L.name], L.name)
                                              for j, L in enumerate(layers[1:])]])
                    cr = _assignment_criteria(assign[0], crit, preds)[None, :]
                P = len(cr)
                parts.append(_Points(assign[:, 1:], cr, np.full(P, ko), np.full(P, zero),
                                     np.zeros(P, np.int64), np.zeros(P), np.zeros(P),
                                     np.zeros(P)))
        return _Points.concat(parts)

    def fix(self, block_kinds: Mapping[str, str], pre_kinds: Mapping[str, str],
            post_kinds: Mapping[str, str], zero: int, mode: str) -> None:
        """Replace the searched points by one given assignment (for pricing it)."""
        self.zeros, self.modes = (zero,), (mode,)
        self.block = self.fixed_block(block_kinds, zero, mode)
        self.pre = self._pre_points(pre_kinds, self.block)
        self.post = self._post_points(post_kinds, self.block)

    def _tied_sync(self, layers, kinds, crit):
        """A tied linear on the last stage all-reduces its weight gradient with the first
        stage's embedding once per iteration (Megatron-LM's embedding group)."""
        pr = self.pricing
        n_dev = pr.pricer.topology.n_devices
        lat, per = pr.pricer.p2p_terms(0, n_dev - pr.stage_devices)
        out = list(crit)
        for j, L in enumerate(layers):
            if j == 0 or not L.attrs.get("tied_to"):
                continue
            c = crit[j].copy()
            for k, kind in enumerate(kinds[j]):
                el = _weight_elements(L) / (pr.t if kind.split_weights else 1)
                c[k, 1] += lat + per * el * float(pr.precision.grad_bytes)
            out[j] = c
        return out

    # ------------------------------------------------------------------ messages
    def send_table(self, devices: tuple[int, int]) -> np.ndarray:
        """``(n_out,)`` seconds per micro-batch of sending the block output to the next
        stage, by the output layer's kind."""
        return np.array([self.pricing.send_seconds(self.stream_bytes, k.out, k.out_grad,
                                                   devices)
                         for k in self.block_kinds[self.struct.exit]])

    def recv_table(self, devices: tuple[int, int]) -> np.ndarray:
        """``(n_in,)`` seconds per micro-batch of receiving a block input, by in-class."""
        s = self.struct
        out = np.zeros(len(self.in_classes))
        for c, cls in enumerate(self.in_classes):
            ks = [self.block_kinds[j][cls[e]] for e, (j, _) in enumerate(s.entry)]
            out[c] = self.pricing.recv_seconds(
                self.stream_bytes, [k.ins[i] for k, (_, i) in zip(ks, s.entry)],
                [k.in_grads[i] for k, (_, i) in zip(ks, s.entry)], devices)
        return out

    def min_tau(self) -> tuple[float, float, float]:
        """Lower bounds of the time per micro-batch of one block, of the pre layers and of
        the post layers: each layer's fastest kind, no re-layouts."""
        pr = self.pricing
        z = min(self.zeros, key=lambda x: (x >= 2, x))
        def low(layers):  # noqa: E306
            return sum(float(pr.criteria(L, pr.kinds(L), z, "none")[:, 0].min())
                       for L in layers)
        return (low(self.block_layers), low([self.graph.layer(n) for n in self.struct.pre]),
                low([self.graph.layer(n) for n in self.struct.post]))

