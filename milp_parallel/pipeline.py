"""Pipeline, tensor, sequence and data parallelism, recomputation and ZeRO for transformers,
solved exactly over a declared space.

The declared space
------------------
A model with repeated blocks (``layers.<i>.`` or ``encoder.layers.<i>.`` layers, identical up
to their index: :func:`block_structure`) trains with a global batch of ``B`` samples on ``N``
devices:

- ``p`` pipeline stages (``p`` divides ``N``); stage ``s`` runs on devices ``[s N/p, (s+1)
  N/p)``; the layers before the first block go to stage 0, those after the last to stage
  ``p - 1``; every stage holds ``k_s >= 1`` consecutive blocks (any cut).
- inside every stage a ``d x t`` mesh: tensor-parallel groups of ``t`` consecutive devices
  (``t`` divides the GPUs of a node), ``d = N / (p t)`` data-parallel replicas.
- ``m`` micro-batches of ``B / m`` samples (``b = B / (m d)`` per group), a schedule (GPipe or
  1F1B; ``v`` interleaved chunks per device with 1F1B: device ``s`` then holds ``v`` chunks of
  ``k_s`` blocks, the model being ``v`` rounds of the stage cut);
- per stage: each layer's tensor-parallel kind (:mod:`.tensor_parallel`), the recomputation
  mode of its blocks and its ZeRO stage (:mod:`.training_memory`).

With ``tie_blocks`` (the default, and the only space searched at scale) the blocks of one stage
share one assignment of kinds: the problem then shrinks by the number of blocks, and the plan
says so.

Step time (seconds per iteration)
---------------------------------
``t_s`` is device ``s``'s time per micro-batch: forward, backward and recomputed forward of
its layers (compute and the collectives inside their groups), the re-layouts between layers
and the point-to-point messages to the next stage (forward activation, backward gradient;
Megatron-LM's scatter/gather: each of the ``t`` devices sends ``1/t``); ``y_s`` its work once
per iteration: the data-parallel gradient reduction (bucketed: bandwidth per layer, latency
once per bucket) and the optimizer update. Then

``T = (m - 1/v) max_s t_s + (1/v) sum_s t_s + max_s y_s``

which is ``(m + p - 1) t`` for ``p`` balanced stages (GPipe and 1F1B: bubble ``(p - 1) / m``)
and ``(m + (p - 1)/v) t`` with ``v`` interleaved chunks. Memory per device: model state of
its layers, the activations of the micro-batches in flight (GPipe ``m``; 1F1B ``min(m, p -
s)``; interleaved, in chunks, ``min(m v, 2 (p - s - 1) + (v - 1) p + 1)``) and the working set
of recomputation, at most the device memory (or ``memory_limit``).

How it is solved
----------------
1. For each ``(N/p, t, b)`` the tied block's assignments are enumerated exactly with
   dominance: a dynamic program over the block's layers keeps, for each choice of the layers
   that still matter (the block's input consumers, its output, layers with consumers not yet
   seen), only assignments not dominated in (time per micro-batch, flush time, model-state
   bytes, activation bytes per micro-batch in flight, working-set bytes). The same for the
   layers before and after the blocks.
2. For each ``(p, m, v, t)`` every stage's options are listed: a block count, a
   non-dominated block assignment (with its ZeRO stage and recomputation mode) and, on the
   first / last stage, compatible pre / post assignments, that fit the memory; per block count
   only those not dominated in (time per micro-batch, flush time) are kept, and options that
   no choice faster than the incumbent could use are dropped (a min-plus bound over the other
   stages). A MILP (HiGHS; UniAP-style stage variables) picks one option per stage with the
   block counts adding up and ``T >= t_s``, ``Y >= y_s`` as rows. Any assignment can be
   replaced by one that dominates it without raising the objective or breaking a memory row,
   so the MILP's optimum is the optimum of the declared space for that ``(p, m, v, t)``.
3. The outer search visits ``(p, m, v, t)`` by increasing lower bound (the bubble bound with
   the fastest kind of every layer and no re-layouts) and stops when the bound reaches the best
   step time found: the answer is proven optimal over the declared space.

The independent cross-checks (tests): the dominance program against brute-force enumeration
of a block's assignments, and the MILP against enumeration of every stage cut with every
stage assignment.

Examples
--------
>>> from milp_parallel.models.gpt import gpt
>>> g = gpt(8, layers=4, hidden=64, heads=4, vocab=128, seq_len=32)
>>> plan = solve_pipeline(g, "selene", global_batch=8, devices=4)
>>> plan.status, plan.pipeline * plan.tensor * plan.data
('optimal', 4)
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import InfeasibleError, InvalidGraphError, InvalidOptionError, SolverError
from .graph import LayerGraph
from .step_costs import StepPricer
from .tensor_parallel import Kind, layer_kinds, relayout
from .topology import Topology
from .training_memory import MixedPrecision, check_recompute, check_zero, saved_activation_bytes

__all__ = ["solve_pipeline", "evaluate_configuration", "PipelineOptions", "PipelinePlan",
           "StagePlan", "BlockStructure", "block_structure", "SCHEDULES", "megatron_kinds",
           "in_flight_micro_batches"]

logger = logging.getLogger(__name__)

#: Pipeline schedules.
SCHEDULES = ("gpipe", "1f1b")
_BLOCK_RE = re.compile(r"^(?P<prefix>(?:.*\.)?layers)\.(?P<index>\d+)\.(?P<rest>.+)$")
_N_CRIT = 5          # tau, psi, state bytes, activation bytes per micro-batch, working set
_REL_TOL = 1e-9


# ====================================================================== block structure
@dataclass(frozen=True)
class BlockStructure:
    """A model cut into the layers before its repeated blocks, the blocks, and the rest.

    Attributes
    ----------
    pre, post : tuple of str
        Layer names before the first block and after the last one.
    blocks : tuple of tuple of str
        The layer names of each block, in topological order.
    rest : tuple of str
        The block-relative names (``qkv``, ``attn``, ...), the same for every block.
    entry : tuple of (int, int)
        ``(layer position in the block, input index)`` of every use of the block's input.
    exit : int
        The position of the block's output layer.
    pre_exit : str
        The layer whose output is the first block's input.
    post_entry : tuple of (str, int)
        ``(post layer, input index)`` of every use of the last block's output.
    """

    pre: tuple[str, ...]
    blocks: tuple[tuple[str, ...], ...]
    post: tuple[str, ...]
    rest: tuple[str, ...]
    entry: tuple[tuple[int, int], ...]
    exit: int
    pre_exit: str
    post_entry: tuple[tuple[str, int], ...]

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)


def block_structure(graph: LayerGraph) -> BlockStructure:
    """Find the repeated blocks of a transformer graph (layers ``<prefix>layers.<i>.<rest>``).

    Raises
    ------
    InvalidGraphError
        No blocks, blocks that differ (ops, attributes, shapes or wiring), or a block with more
        than one input or output tensor.

    Examples
    --------
    >>> from milp_parallel.models.gpt import gpt
    >>> s = block_structure(gpt(1, layers=3, hidden=64, heads=4, vocab=128, seq_len=32))
    >>> s.n_blocks, s.rest[:3], s.pre_exit, s.post
    (3, ('ln1', 'qkv', 'attn'), 'embed.dropout', ('final_ln', 'logits', 'loss'))
    """
    names = graph.names
    where: dict[str, tuple[int, str]] = {}
    prefix = None
    for n in names:
        m = _BLOCK_RE.match(n)
        if m:
            if prefix is None:
                prefix = m["prefix"]
            if m["prefix"] == prefix:
                where[n] = (int(m["index"]), m["rest"])
    if not where:
        raise InvalidGraphError(
            f"graph {graph.name!r} has no repeated blocks (layers named '<prefix>layers.<i>."
            "<name>'); the pipeline planner needs a transformer-style model")
    n_blocks = max(i for i, _ in where.values()) + 1
    blocks: list[list[str]] = [[] for _ in range(n_blocks)]
    pre, post = [], []
    seen_block = False
    for n in names:
        if n in where:
            blocks[where[n][0]].append(n)
            seen_block = True
        elif not seen_block:
            pre.append(n)
        else:
            post.append(n)
    for i, b in enumerate(blocks):
        if not b:
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} has no layers")
    rest = tuple(where[n][1] for n in blocks[0])
    pos = [{n: j for j, n in enumerate(b)} for b in blocks]

    def signature(i: int):
        sig, outside = [], set()
        for n in blocks[i]:
            L = graph.layer(n)
            refs = []
            for u in L.inputs:
                if u in pos[i]:
                    refs.append(pos[i][u])
                else:
                    refs.append(-1)
                    outside.add(u)
            sig.append((where[n][1], L.op, tuple(sorted(L.attrs.items())), L.output_shape,
                        tuple(refs)))
        return sig, outside

    sig0, out0 = signature(0)
    if len(out0) != 1:
        raise InvalidGraphError(f"graph {graph.name!r}: block 0 takes {len(out0)} tensors "
                                f"from outside ({sorted(out0)}); a block must take one")
    pre_exit = next(iter(out0))
    for i in range(1, n_blocks):
        sig, outside = signature(i)
        if sig != sig0 or [r[0] for r in sig] != list(rest):
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} differs from block 0; "
                                    "blocks must be identical to be planned as a pipeline")
        if len(outside) != 1 or next(iter(outside)) not in pos[i - 1]:
            raise InvalidGraphError(f"graph {graph.name!r}: block {i} must take exactly one "
                                    f"tensor, the output of block {i - 1}")
    if n_blocks > 1:
        exit_pos = pos[0][next(iter(signature(1)[1]))]
    else:
        # the output of the only block is what the post layers read
        used = {u for n in post for u in graph.layer(n).inputs if u in pos[-1]}
        if len(used) != 1:
            raise InvalidGraphError(f"graph {graph.name!r}: the layers after the blocks must "
                                    f"read exactly one block output, got {sorted(used)}")
        exit_pos = pos[-1][next(iter(used))]
    entry = tuple((j, k) for j, r in enumerate(sig0) for k, ref in enumerate(r[4]) if ref == -1)
    last_out = blocks[-1][exit_pos]
    post_entry = tuple((n, k) for n in post for k, u in enumerate(graph.layer(n).inputs)
                       if u == last_out)
    bad = [n for n in post for u in graph.layer(n).inputs
           if u in where and u != last_out]
    if bad or not post_entry:
        raise InvalidGraphError(f"graph {graph.name!r}: the layers after the blocks must read "
                                f"only the last block's output {last_out!r}")
    return BlockStructure(tuple(pre), tuple(tuple(b) for b in blocks), tuple(post), rest,
                          entry, int(exit_pos), pre_exit, post_entry)


# ====================================================================== options and results
@dataclass(frozen=True)
class PipelineOptions:
    """The declared space :func:`solve_pipeline` searches (defaults: everything valid).

    Parameters
    ----------
    pipeline : sequence of int, optional
        Candidate stage counts ``p`` (default: every divisor of the devices up to the number
        of blocks).
    tensor : sequence of int, optional
        Candidate tensor-parallel group sizes ``t`` (default: the powers of two dividing the
        GPUs of a node).
    micro_batches : sequence of int, optional
        Candidate micro-batch counts ``m`` (default: every ``m`` with ``B / (m d)`` whole).
    chunks : sequence of int, default (1, 2)
        Interleaved chunks per device ``v`` (1 = not interleaved; ``v > 1`` with 1F1B only).
    schedules : sequence of str, default ("1f1b",)
        Among :data:`SCHEDULES`. GPipe takes the same time as 1F1B and keeps more micro-batches
        in flight, so it only wins where asked for alone.
    zero : sequence of int, default (0, 1, 2, 3)
        ZeRO stages a stage may use.
    recompute : sequence of str, default ("none", "selective", "full")
        Recomputation modes a stage's blocks may use.
    tie_blocks : bool, default True
        The blocks of a stage share one assignment (the only space searched; ``False`` is
        refused at present).
    flash_attention : bool, default False
        The attention core keeps no ``S x S`` tensors (a fused kernel).
    precision : MixedPrecision
        Bytes per element (16-bit training with fp32 Adam).
    time_limit : float, optional
        Seconds for the whole search; when it runs out the best plan so far is returned
        with ``status="feasible"`` and the lower bound reached.

    Raises
    ------
    InvalidOptionError
        A value outside the allowed ones.
    """

    pipeline: tuple[int, ...] | None = None
    tensor: tuple[int, ...] | None = None
    micro_batches: tuple[int, ...] | None = None
    chunks: tuple[int, ...] = (1, 2)
    schedules: tuple[str, ...] = ("1f1b",)
    zero: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    tie_blocks: bool = True
    flash_attention: bool = False
    precision: MixedPrecision = field(default_factory=MixedPrecision)
    time_limit: float | None = None

    def __post_init__(self) -> None:
        for name in ("pipeline", "tensor", "micro_batches", "chunks"):
            v = getattr(self, name)
            if v is None:
                continue
            v = (v,) if isinstance(v, int) else tuple(v)
            if not v or any(not isinstance(x, (int, np.integer)) or isinstance(x, bool)
                            or x < 1 for x in v):
                raise InvalidOptionError(f"PipelineOptions.{name} must be positive integers, "
                                         f"got {getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(sorted({int(x) for x in v})))
        sch = (self.schedules,) if isinstance(self.schedules, str) else tuple(self.schedules)
        if not sch or any(s not in SCHEDULES for s in sch):
            raise InvalidOptionError(f"PipelineOptions.schedules must be among {SCHEDULES}, "
                                     f"got {self.schedules!r}")
        object.__setattr__(self, "schedules", tuple(s for s in SCHEDULES if s in sch))
        object.__setattr__(self, "zero", check_zero(self.zero))
        object.__setattr__(self, "recompute", check_recompute(self.recompute))
        if not self.tie_blocks:
            raise InvalidOptionError("PipelineOptions.tie_blocks=False: only the tied space "
                                     "is searched at present (the plan reports the untied "
                                     "lower bound instead)")
        if self.time_limit is not None and not (self.time_limit > 0):
            raise InvalidOptionError(f"PipelineOptions.time_limit must be positive seconds, "
                                     f"got {self.time_limit!r}")


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage of a :class:`PipelinePlan`.

    Attributes
    ----------
    index : int
    blocks : tuple of int
        The block indices it holds (all its chunks).
    devices : tuple of int
        ``(first, last + 1)``.
    kinds : dict
        Block-relative layer name -> kind name (shared by the stage's blocks), plus the
        layers before / after the blocks on the first / last stage.
    recompute : str
    zero : int
    micro_batch_seconds : float
        ``t_s``: forward, backward, recomputation and messages per micro-batch.
    flush_seconds : float
        ``y_s``: data-parallel reduction and optimizer update per iteration.
    memory_bytes : float
        Peak bytes per device.
    in_flight : int
        Micro-batches (chunks when interleaved) whose activations it keeps at once.
    """

    index: int
    blocks: tuple[int, ...]
    devices: tuple[int, int]
    kinds: Mapping[str, str]
    recompute: str
    zero: int
    micro_batch_seconds: float
    flush_seconds: float
    memory_bytes: float
    in_flight: int


@dataclass(frozen=True)
class PipelinePlan:
    """The result of :func:`solve_pipeline` or :func:`evaluate_configuration`.

    Attributes
    ----------
    model, cluster : str
    devices, global_batch : int
    pipeline, tensor, data : int
        ``p``, ``t``, ``d`` (``p t d`` = devices).
    micro_batches, micro_batch_size : int
        ``m`` and ``b = B / (m d)`` (samples per group per micro-batch).
    schedule : str
    chunks : int
        ``v`` (interleaved chunks per device).
    stages : tuple of StagePlan
    iteration_seconds : float
        ``T`` (see the module docstring).
    bubble_fraction : float
        ``T`` over the time without the pipeline's fill and drain, minus 1.
    memory_limit_bytes : float or None
    status : str
        ``optimal`` (proven over the declared space), ``feasible`` (time limit) or
        ``evaluated`` (a given configuration, priced).
    lower_bound_seconds : float
        The best proven lower bound on ``T`` over the space (``T`` itself when optimal).
    tied : bool
        The blocks of a stage shared one assignment.
    untied_lower_bound_seconds : float or None
        A lower bound on ``T`` without tying, for the plan's own ``(p, t, m, v, schedule)``
        (each block its own non-dominated assignment; :meth:`_ComboProblem.untied_bound`);
        ``None`` for an evaluated configuration. ``1 - bound / T`` is the most tying can
        cost there.
    search : dict
        Statistics: combinations, pruned, MILPs solved, seconds, ...
    """

    model: str
    cluster: str
    devices: int
    global_batch: int
    pipeline: int
    tensor: int
    data: int
    micro_batches: int
    micro_batch_size: int
    schedule: str
    chunks: int
    stages: tuple[StagePlan, ...]
    iteration_seconds: float
    bubble_fraction: float
    memory_limit_bytes: float | None
    status: str
    lower_bound_seconds: float
    tied: bool = True
    untied_lower_bound_seconds: float | None = None
    search: Mapping[str, Any] = field(default_factory=dict)

    @property
    def samples_per_second(self) -> float:
        return self.global_batch / self.iteration_seconds

    def tflops_per_gpu(self, flops_per_iteration: float) -> float:
        """TeraFLOP/s per device for a model that does ``flops_per_iteration`` per iteration
        (e.g. :func:`~milp_parallel.models.gpt.megatron_flops`)."""
        return flops_per_iteration / self.iteration_seconds / self.devices / 1e12

    @property
    def peak_memory_bytes(self) -> float:
        return max(s.memory_bytes for s in self.stages)

    def describe(self) -> str:
        """A short readable summary (one line per stage)."""
        head = (f"{self.model} on {self.devices} x {self.cluster}: p={self.pipeline} "
                f"t={self.tensor} d={self.data} m={self.micro_batches} "
                f"b={self.micro_batch_size} {self.schedule}"
                f"{f' v={self.chunks}' if self.chunks > 1 else ''}: "
                f"{self.iteration_seconds:.4g} s/iteration ({self.status}"
                f"{', tied blocks' if self.tied else ''}"
                + (f"; untied bound {self.untied_lower_bound_seconds:.4g} s, gap "
                   f"{1 - self.untied_lower_bound_seconds / self.iteration_seconds:.2%}"
                   if self.untied_lower_bound_seconds is not None else "") + ")")
        lines = [head]
        for s in self.stages:
            if self.chunks > 1 or not s.blocks:
                where = ",".join(str(b) for b in s.blocks)
            else:
                where = f"{s.blocks[0]}..{s.blocks[-1]}"
            lines.append(f"  stage {s.index}: {len(s.blocks)} blocks [{where}] "
                         f"recompute={s.recompute} zero={s.zero} "
                         f"t_s={s.micro_batch_seconds * 1e3:.3f} ms "
                         f"y_s={s.flush_seconds * 1e3:.1f} ms "
                         f"mem={s.memory_bytes / 2**30:.1f} GiB "
                         f"kinds: {_kinds_text(s.kinds)}")
        return "\n".join(lines)

    __str__ = describe


def _kinds_text(kinds: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in kinds.items())


def in_flight_micro_batches(schedule: str, p: int, m: int, v: int = 1) -> tuple[int, ...]:
    """Micro-batches (chunk micro-batches when ``v > 1``) whose activations each stage keeps
    at once.

    Examples
    --------
    >>> in_flight_micro_batches("1f1b", 4, 8), in_flight_micro_batches("gpipe", 4, 8)
    ((4, 3, 2, 1), (8, 8, 8, 8))
    >>> in_flight_micro_batches("1f1b", 4, 8, 2)
    (11, 9, 7, 5)
    """
    if schedule == "gpipe":
        if v != 1:
            raise InvalidOptionError(f"GPipe is not interleaved: chunks={v} needs '1f1b'")
        return (m,) * p
    if v == 1:
        return tuple(min(m, p - s) for s in range(p))
    return tuple(min(m * v, 2 * (p - s - 1) + (v - 1) * p + 1) for s in range(p))


# ====================================================================== per-layer prices
_RECOMPUTE_INDEX = {"none": 0, "selective": 1, "full": 2}


def _share(layout: str | None, t: int) -> float:
    return 1.0 / t if layout in ("S", "C", "N") else 1.0


def _weight_elements(layer) -> int:
    """Elements of the weights the layer reads (a tied linear reads its embedding's)."""
    if layer.op == "linear" and layer.attrs.get("tied_to"):
        a = layer.attrs
        return a["in_features"] * a["out_features"] + (a["out_features"] if a["bias"] else 0)
    return int(layer.params)


class _MeshPricing:
    """Costs of the layers and re-layouts of one stage shape: ``stage_devices`` devices as a
    ``d x t`` mesh, ``b`` samples per group per micro-batch. Stage 0's devices stand for every
    stage (stages are translates of each other)."""

    def __init__(self, graph: LayerGraph, pricer: StepPricer, precision: MixedPrecision,
                 stage_devices: int, t: int, b: int, flash: bool):
        self.graph, self.pricer, self.precision = graph, pricer, precision
        self.stage_devices, self.t, self.b, self.flash = stage_devices, t, b, flash
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
    def layer_costs(self, layer, kind: Kind, zero: int, *, tied_copy: bool = False
                    ) -> dict[str, float]:
        """Per micro-batch (``fwd``, ``bwd``, ``zero_tau``), per iteration (``psi``),
        bytes (``state``, ``kept``, ``scores``) of one layer under one kind and ZeRO stage.
        ``tied_copy``: a tied linear on another stage than its embedding keeps (and
        synchronizes) its own copy of the weight."""
        t, b, pr = self.t, self.b, self.precision
        ab = float(pr.activation_bytes)
        op = layer.op
        out: dict[str, float] = {}
        if op == "input":
            return dict(fwd=0.0, bwd=0.0, zero_tau=0.0, psi=0.0, state=0.0, kept=0.0,
                        scores=0.0, fwd_comm=0.0)
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
        comm = 0.0
        if kind.gathers_input:
            nb = ab * b * ins[0]
            ag = self.coll("allgather", "tp", nb)
            comm = ag
            bwd += ag + self.coll("reducescatter", "tp", nb)
        if kind.reduces_loss:
            tokens = b * (ins[0] // layer.input_shapes[0][-1])
            comm += self.coll("allreduce", "tp", 3.0 * 4.0 * tokens)
        fwd += comm
        params = w_local if (w_el > 0 and (layer.params > 0 or tied_copy)) else 0.0
        zero_tau = psi = state = 0.0
        if params > 0:
            group, size = self.sync_group(kind)
            gb, wb = float(pr.grad_bytes), float(pr.param_bytes)
            if zero == 2:
                zero_tau = self.terms("reducescatter", group)[1] * params * gb
            elif zero == 3:
                zero_tau = (2 * self.terms("allgather", group)[1] * params * wb
                            + self.terms("reducescatter", group)[1] * params * gb)
            if zero in (0, 1):
                psi = self.terms("allreduce", group)[1] * params * gb
            elif zero == 2:
                psi = self.terms("allgather", group)[1] * params * wb
            psi += self.pricer.optimizer_seconds(params / (size if zero >= 1 else 1))
            state = params * pr.state_bytes_per_param(zero, size)
        kept, sc = saved_activation_bytes(layer, kind, t, b, pr, flash=self.flash)
        out.update(fwd=fwd, bwd=bwd, zero_tau=zero_tau, psi=psi, state=state, kept=kept,
                   scores=sc, fwd_comm=comm)
        return out

    def criteria(self, layer, kinds: Sequence[Kind], zero: int, mode: str, *,
                 tied_copy: bool = False) -> np.ndarray:
        """``(K, 5)``: tau, psi, state, activation per micro-batch in flight, working set."""
        out = np.zeros((len(kinds), _N_CRIT))
        for k, kind in enumerate(kinds):
            c = self.layer_costs(layer, kind, zero, tied_copy=tied_copy)
            tau = c["fwd"] + c["bwd"] + c["zero_tau"]
            act, ws = c["kept"] + c["scores"], 0.0
            if mode == "full":
                tau += c["fwd"]
                act, ws = 0.0, c["kept"] + c["scores"]
            elif mode == "selective" and layer.op == "attention":
                tau += c["fwd"] - c["fwd_comm"]
                act, ws = c["kept"], c["scores"]
            out[k] = (tau, c["psi"], c["state"], act, ws)
        return out

    # ------------------------------------------------------------------ one edge
    def edge(self, producer, consumer, index: int, ku: Sequence[Kind], kv: Sequence[Kind]
             ) -> tuple[np.ndarray, np.ndarray]:
        """``(forward, backward)`` re-layout seconds, each ``(K_u, K_v)``."""
        fw = np.zeros((len(ku), len(kv)))
        bw = np.zeros((len(ku), len(kv)))
        if producer.op == "input":
            return fw, bw
        nb = float(self.precision.activation_bytes) * self.b * producer.output_elements
        for a, x in enumerate(ku):
            for c, y in enumerate(kv):
                fw[a, c] = self.coll(relayout(x.out, y.ins[index]), "tp", nb)
                g = y.in_grads[index]
                if g is not None:
                    bw[a, c] = self.coll(relayout(g, x.out_grad), "tp", nb)
        return fw, bw

    def send_seconds(self, nbytes: float, out: str, out_grad: str,
                     devices: tuple[int, int]) -> float:
        """The sending stage's half of one inter-stage message, per micro-batch.

        Messages travel as ``1/t`` sequence pieces, one per device of the group, each over
        its own link (Megatron-LM's scatter/gather): the sender re-lays its output out to
        pieces (free from a replicated or sequence-split output), sends them, and in the
        backward pass re-lays the gradient pieces it receives to the layout it needs. The
        gradient's transfer is the receiver's (:meth:`recv_seconds`).
        """
        lat, per = self.pricer.p2p_terms(*devices)
        t = self.t
        if t == 1:
            return lat + per * nbytes
        return (self.coll(relayout(out, "S"), "tp", nbytes) + lat + per * nbytes / t
                + self.coll(relayout("S", out_grad), "tp", nbytes))

    def recv_seconds(self, nbytes: float, ins: Sequence[str], in_grads: Sequence[str | None],
                     devices: tuple[int, int]) -> float:
        """The receiving stage's half: re-lay the pieces out for each consumer, and in the
        backward pass re-lay each consumer's input gradient to pieces (a reduce-scatter for
        partial sums), add them and send them back."""
        lat, per = self.pricer.p2p_terms(*devices)
        t = self.t
        grads = [g for g in in_grads if g is not None]
        if t == 1:
            return lat + per * nbytes if grads else 0.0
        cost = sum(self.coll(relayout("S", d), "tp", nbytes) for d in ins)
        if grads:
            cost += sum(self.coll(relayout(g, "S"), "tp", nbytes) for g in grads)
            cost += lat + per * nbytes / t
        return cost


# ====================================================================== dominance program
def _kind_index(kinds: Sequence[Kind], name: str, layer: str) -> int:
    for i, k in enumerate(kinds):
        if k.name == name:
            return i
    raise InvalidOptionError(f"layer {layer!r} has no kind {name!r} here; its kinds: "
                             f"{', '.join(k.name for k in kinds)}")


def _assignment_criteria(assign: np.ndarray, crit: Sequence[np.ndarray],
                         preds: Sequence[Sequence[tuple]]) -> np.ndarray:
    """The criteria of one assignment: the layers' own plus the re-layouts (time)."""
    out = np.zeros(_N_CRIT)
    for j, k in enumerate(assign):
        out += crit[j][k]
        for u, table in preds[j]:
            out[0] += table[assign[u], k]
    return out


def _pareto_mask(c: np.ndarray) -> np.ndarray:
    """Rows of ``c`` (minimized criteria) not dominated by another row (``<=`` everywhere);
    of equal rows the first in lexicographic order stays."""
    n = len(c)
    if n <= 1:
        return np.ones(n, bool)
    if n <= 48:
        le = (c[:, None, :] <= c[None, :, :]).all(axis=2)        # le[a, b]: a <= b
        eq = le & le.T
        first = np.arange(n)[:, None] < np.arange(n)[None, :]
        return ~((le & ~eq) | (eq & first)).any(axis=0)
    order = np.lexsort(c.T[::-1])
    cs = c[order]
    keep = np.ones(n, bool)
    step = max(1, (1 << 22) // (n * c.shape[1]))
    for s0 in range(1, n, step):
        blk = cs[s0:s0 + step]
        hi = s0 + len(blk)
        le = (cs[None, :hi, :] <= blk[:, None, :]).all(axis=2)
        le &= np.arange(hi)[None, :] < (s0 + np.arange(len(blk)))[:, None]
        keep[s0:hi] = ~le.any(axis=1)
    mask = np.empty(n, bool)
    mask[order] = keep
    return mask


def _prune(state: np.ndarray, crit: np.ndarray, assign: np.ndarray):
    """Keep, for every distinct state row, the non-dominated criteria rows."""
    if state.shape[1] == 0:
        m = _pareto_mask(crit)
        return state[m], crit[m], assign[m]
    base = int(state.max()) + 1
    key = np.zeros(len(state), np.int64)
    for col in state.T:
        key = key * base + col
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    sizes = np.diff(np.r_[starts, len(ks)])
    keep = np.zeros(len(crit), bool)
    small = sizes <= 48
    # the small groups at once: (G, g, g) comparisons on padded blocks
    if small.any():
        g = int(sizes[small].max())
        st, sz = starts[small], sizes[small]
        pos = st[:, None] + np.arange(g)[None, :]
        valid = np.arange(g)[None, :] < sz[:, None]
        idx = order[np.where(valid, pos, st[:, None])]
        c = np.where(valid[..., None], crit[idx], np.inf)
        le = (c[:, :, None, :] <= c[:, None, :, :]).all(axis=3)     # le[G, a, b]: a <= b
        eq = le & le.transpose(0, 2, 1)
        first = np.arange(g)[:, None] < np.arange(g)[None, :]
        dom = ((le & ~eq) | (eq & first[None])) & valid[:, :, None]
        ok = ~dom.any(axis=1) & valid
        keep[idx[ok]] = True
    for s0, n in zip(starts[~small], sizes[~small]):
        idx = order[s0:s0 + n]
        keep[idx[_pareto_mask(crit[idx])]] = True
    return state[keep], crit[keep], assign[keep]


def _dominance_program(crit: Sequence[np.ndarray], preds: Sequence[Sequence[tuple]],
                       keep_final: Sequence[int]):
    """Every non-dominated assignment of a chain-like group of layers.

    Parameters
    ----------
    crit : list of (K_j, 5) arrays
        The layers' own criteria, in topological order.
    preds : list of lists of ``(u, table)``
        Internal inputs of layer ``j``: producer position ``u < j`` and the ``(K_u, K_j)``
        re-layout seconds (added to the time criterion).
    keep_final : sequence of int
        Layers whose kind distinguishes the results (their classes).

    Returns
    -------
    (kept_positions, state, criteria, assignment)
        ``state[:, i]`` is the kind of ``kept_positions[i]``; ``assignment`` has one column
        per layer. Within each state, no row is dominated.
    """
    n = len(crit)
    last_use: dict[int, int] = {}
    for j, ps in enumerate(preds):
        for u, _ in ps:
            last_use[u] = max(last_use.get(u, -1), j)
    keep = set(keep_final)
    open_ops: list[int] = []
    state = np.zeros((1, 0), np.int64)
    cr = np.zeros((1, _N_CRIT))
    assign = np.zeros((1, 0), np.int64)
    for j in range(n):
        K = len(crit[j])
        P = len(cr)
        kj = np.tile(np.arange(K), P)
        state = np.repeat(state, K, axis=0)
        assign = np.column_stack([np.repeat(assign, K, axis=0), kj])
        cr = np.repeat(cr, K, axis=0) + crit[j][kj]
        for u, table in preds[j]:
            cr[:, 0] += table[state[:, open_ops.index(u)], kj]
        state = np.column_stack([state, kj])
        open_ops.append(j)
        alive = [o for o in open_ops if o in keep or last_use.get(o, -1) > j]
        state = state[:, [open_ops.index(o) for o in alive]]
        open_ops = alive
        state, cr, assign = _prune(state, cr, assign)
    order = np.argsort(open_ops)
    open_ops = [open_ops[i] for i in order]
    return open_ops, state[:, order], cr, assign


def _min_program(cost: Sequence[np.ndarray], preds: Sequence[Sequence[tuple]]) -> float:
    """The least total cost of a chain-like group of layers (own costs ``cost[j]`` of
    shape ``(K_j,)`` plus re-layout tables): the dominance program with one criterion."""
    last_use: dict[int, int] = {}
    for j, ps in enumerate(preds):
        for u, _ in ps:
            last_use[u] = max(last_use.get(u, -1), j)
    open_ops: list[int] = []
    state = np.zeros((1, 0), np.int64)
    val = np.zeros(1)
    for j, c in enumerate(cost):
        K = len(c)
        kj = np.tile(np.arange(K), len(val))
        state = np.repeat(state, K, axis=0)
        val = np.repeat(val, K) + c[kj]
        for u, table in preds[j]:
            val = val + table[state[:, open_ops.index(u)], kj]
        state = np.column_stack([state, kj])
        open_ops.append(j)
        alive = [o for o in open_ops if last_use.get(o, -1) > j]
        state = state[:, [open_ops.index(o) for o in alive]]
        open_ops = alive
        if state.shape[1] == 0:
            state, val = state[:1], np.array([val.min()])
            continue
        base = int(state.max()) + 1
        key = np.zeros(len(state), np.int64)
        for colv in state.T:
            key = key * base + colv
        order = np.lexsort((val, key))
        first = np.r_[True, key[order][1:] != key[order][:-1]]
        keep = order[first]
        state, val = state[keep], val[keep]
    return float(val.min())


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
        fw, bw = self.pricing.edge(u, v, i, ku, kv)
        return (2.0 if mode == "full" else 1.0) * fw + bw

    # ------------------------------------------------------------------ blocks
    def _block_pieces(self, mode: str):
        """Per-layer ``preds`` and the between-block re-layout tables of one mode."""
        s, blk, kinds = self.struct, self.block_layers, self.block_kinds
        preds = [[(u, self._edge_table(blk[u], L, i, kinds[u], kinds[j], mode))
                  for u, i in self._block_preds_raw[j]] for j, L in enumerate(blk)]
        wraps = [self._edge_table(self.exit_layer, self.entry_layers[e], i,
                                  kinds[s.exit], kinds[j], mode)
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
            if pr.t > 1:
                cr[:, 0] += pr.coll("allgather", "tp", in_bytes)
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
            crit = [pr.criteria(L, kinds[j], zero, "none") for j, L in enumerate(layers)]
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
                    pr.criteria(L, kinds[j + 1], zero, "none",
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


# ====================================================================== the stage MILP
class _Model:
    """A small sparse MILP built column by column, solved by HiGHS (highspy)."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integer: list[bool] = []
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def var(self, cost=0.0, lo=0.0, hi=math.inf, integer=False, n=None):
        if n is None:
            self.cost.append(float(cost))
            self.lo.append(float(lo))
            self.hi.append(float(hi))
            self.integer.append(bool(integer))
            return len(self.cost) - 1
        start = len(self.cost)
        cost = np.broadcast_to(np.asarray(cost, float), (n,))
        self.cost.extend(cost.tolist())
        self.lo.extend([float(lo)] * n)
        self.hi.extend([float(hi)] * n)
        self.integer.extend([bool(integer)] * n)
        return np.arange(start, start + n)

    def row(self, idx, val, lo=-math.inf, hi=math.inf) -> None:
        idx = np.asarray(idx, np.int64).ravel()
        val = np.broadcast_to(np.asarray(val, float), idx.shape).ravel()
        nz = val != 0
        self.rows.append((float(lo), float(hi), idx[nz].tolist(), val[nz].tolist()))

    def solve(self, time_limit: float | None, start: np.ndarray | None = None):
        """``(status, objective, values, bound)`` with status optimal/infeasible/feasible/
        unknown; ``start``: a feasible solution to begin from."""
        import highspy

        from ._fdio import c_stdout_to
        with c_stdout_to(None):        # HiGHS prints a banner on construction
            h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 1e-7)
        h.setOptionValue("mip_abs_gap", 0.0)
        h.setOptionValue("threads", 1)
        # HiGHS's thread pool is process-wide: run() fails (kError, model status "Not
        # Set") when another solve started it with another thread count
        highspy.Highs.resetGlobalScheduler(True)
        if time_limit is not None:
            h.setOptionValue("time_limit", max(float(time_limit), 0.01))
        inf = highspy.kHighsInf
        lp = highspy.HighsLp()
        n = len(self.cost)
        lp.num_col_ = n
        lp.num_row_ = len(self.rows)
        lp.col_cost_ = np.asarray(self.cost)
        lp.col_lower_ = np.asarray(self.lo)
        lp.col_upper_ = np.where(np.isfinite(self.hi), self.hi, inf)
        start, index, value = [0], [], []
        for _, _, idx, val in self.rows:
            index.extend(idx)
            value.extend(val)
            start.append(len(index))
        lo = np.array([r[0] for r in self.rows])
        hi = np.array([r[1] for r in self.rows])
        lp.row_lower_ = np.where(np.isfinite(lo), lo, -inf)
        lp.row_upper_ = np.where(np.isfinite(hi), hi, inf)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.asarray(start, np.int32)
        lp.a_matrix_.index_ = np.asarray(index, np.int32)
        lp.a_matrix_.value_ = np.asarray(value, float)
        lp.a_matrix_.num_col_ = n
        lp.a_matrix_.num_row_ = len(self.rows)
        lp.integrality_ = [highspy.HighsVarType.kInteger if b else
                           highspy.HighsVarType.kContinuous for b in self.integer]
        h.passModel(lp)
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = np.asarray(start, float).tolist()
            sol.value_valid = True
            h.setSolution(sol)
        if h.run() == highspy.HighsStatus.kError:
            raise SolverError("pipeline: HiGHS failed on a stage MILP "
                              f"({h.modelStatusToString(h.getModelStatus())})")
        ms = h.getModelStatus()
        M = highspy.HighsModelStatus
        info = h.getInfo()
        has = info.primal_solution_status == 2
        vals = np.asarray(h.getSolution().col_value) if has else None
        obj = float(info.objective_function_value) if has else math.inf
        bound = float(getattr(info, "mip_dual_bound", obj))
        if ms == M.kOptimal:
            return "optimal", obj, vals, obj
        if ms == M.kInfeasible:
            return "infeasible", math.inf, None, math.inf
        return ("feasible" if has else "unknown"), obj, vals, bound


@dataclass
class _Combo:
    """One point of the outer search."""

    p: int
    t: int
    m: int
    v: int
    schedule: str
    b: int
    lower_bound: float


@dataclass(frozen=True)
class _Choice:
    """A pipeline: per stage its block count and block point; the pre and post points."""

    k: tuple[int, ...]
    point: tuple[int, ...]
    pre: int
    post: int




def _minplus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[n] = min_i a[i] + b[n - i]`` over the common length."""
    n = len(a)
    out = np.full(n, np.inf)
    for i in np.flatnonzero(np.isfinite(a)):
        np.minimum(out[i:], a[i] + b[:n - i], out=out[i:])
    return out


def _front_2d(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points not dominated in (t, y) (ties: the first kept)."""
    order = np.lexsort((y, t))
    ys = y[order]
    best = np.minimum.accumulate(ys)
    keep = np.ones(len(order), bool)
    keep[1:] = ys[1:] < best[:-1]
    return order[keep]


class _ComboProblem:
    """One ``(p, m, v, t, schedule)``: each stage's options (block count and assignment with
    its time, flush time and memory) and the MILP choosing one option per stage; and the
    exact evaluation of a choice under the same formulas."""

    def __init__(self, tables: _StageTables, combo: _Combo, n_blocks: int, n_devices: int,
                 budget: float | None):
        self.T, self.c, self.L, self.budget = tables, combo, n_blocks, budget
        p, v = combo.p, combo.v
        self.f = in_flight_micro_batches(combo.schedule, p, combo.m, v)
        Ds = n_devices // p
        n_in, n_out = len(tables.in_classes), tables.n_out
        self.send, self.recv = [], []
        for s in range(p):
            snd, rcv = np.zeros(n_out), np.zeros(n_in)
            if s < p - 1:
                snd += v * tables.send_table((s * Ds, (s + 1) * Ds))
            elif v > 1 and p > 1:
                snd += (v - 1) * tables.send_table(((p - 1) * Ds, 0))
            if s > 0:
                rcv += v * tables.recv_table(((s - 1) * Ds, s * Ds))
            elif v > 1 and p > 1:
                rcv += (v - 1) * tables.recv_table(((p - 1) * Ds, 0))
            self.send.append(snd)
            self.recv.append(rcv)

    # ------------------------------------------------------------------ exact evaluation
    def stage_values(self, ch: _Choice) -> list[tuple[float, float, float]]:
        """``(t_s, y_s, memory_s)`` of every stage of a choice."""
        T, p, v = self.T, self.c.p, self.c.v
        B, pre, post = T.block, T.pre, T.post
        ins, outs = T.block_in_class(B), T.block_out_class(B)
        out = []
        for s in range(p):
            j, k = ch.point[s], ch.k[s]
            c = B.crit[j]
            ts = v * (k * c[0] + (k - 1) * B.wrap[j]) + B.c_tau[j]
            ts += self.send[s][outs[j]] + self.recv[s][ins[j]]
            ys = v * k * c[1] + B.c_psi[j]
            mem = v * k * c[2] + self.f[s] * k * c[3] + c[4]
            if s == 0:
                q = pre.crit[ch.pre]
                ts, ys = ts + q[0], ys + q[1]
                mem += q[2] + self.f[0] * q[3] + q[4]
            if s == p - 1:
                r = post.crit[ch.post]
                ts, ys = ts + r[0], ys + r[1]
                mem += r[2] + self.f[-1] * r[3] + r[4]
            out.append((float(ts), float(ys), float(mem)))
        return out

    def iteration_seconds(self, values) -> float:
        m, v = self.c.m, self.c.v
        ts = [x[0] for x in values]
        return (m - 1.0 / v) * max(ts) + sum(ts) / v + max(x[1] for x in values)

    def valid(self, ch: _Choice) -> bool:
        """Block counts add up; the pre / post layers agree with the first / last stage's
        classes and ZeRO stage."""
        T, v = self.T, self.c.v
        B = T.block
        if sum(ch.k) * v != self.L or min(ch.k) < 1:
            return False
        j0, jl = ch.point[0], ch.point[-1]
        return bool(T.pre.cls[ch.pre] == T.block_in_class(B)[j0]
                    and T.pre.zero[ch.pre] == B.zero[j0]
                    and T.post.cls[ch.post] == T.block_out_class(B)[jl]
                    and T.post.zero[ch.post] == B.zero[jl])

    # ------------------------------------------------------------------ options
    def _pairs(self, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Block points of stage ``s`` with the pre / post points they may go with
        (``-1``: none): arrays ``j, q, r``."""
        T, p = self.T, self.c.p
        B = T.block
        j = np.arange(len(B))
        q = np.full(len(B), -1)
        r = np.full(len(B), -1)
        for first, pts, cls in ((True, T.pre, T.block_in_class(B)),
                                (False, T.post, T.block_out_class(B))):
            if (s != 0) if first else (s != p - 1):
                continue
            key_b = B.zero[j] * 100_000 + cls[j]
            key_p = pts.zero * 100_000 + pts.cls
            order = np.argsort(key_p, kind="stable")
            lo = np.searchsorted(key_p[order], key_b, "left")
            hi = np.searchsorted(key_p[order], key_b, "right")
            cnt = hi - lo
            rep = np.repeat(np.arange(len(j)), cnt)
            offs = np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            pick = order[np.repeat(lo, cnt) + offs]
            j, q, r = j[rep], q[rep], r[rep]
            if first:
                q = pick
            else:
                r = pick
        return j, q, r

    def options(self, s: int, t_cap: float = math.inf, only=None) -> dict[str, np.ndarray]:
        """Feasible options of stage ``s`` with ``t_s <= t_cap``: arrays ``k, t, y, mem, j,
        q, r`` (``q`` / ``r``: the pre / post point, -1 when the stage has none), for each
        block count (``only``: these counts) only those not dominated in (time, flush)."""
        T, c = self.T, self.c
        p, v = c.p, c.v
        B, pre, post = T.block, T.pre, T.post
        j, q, r = self._pairs(s)
        ins, outs = T.block_in_class(B), T.block_out_class(B)
        cr = B.crit[j]
        a_t = v * (cr[:, 0] + B.wrap[j])
        c_t = B.c_tau[j] - v * B.wrap[j] + self.send[s][outs[j]] + self.recv[s][ins[j]]
        a_y, c_y = v * cr[:, 1], B.c_psi[j].copy()
        a_m = v * cr[:, 2] + self.f[s] * cr[:, 3]
        c_m = cr[:, 4].copy()
        for pts, idx, f in ((pre, q, self.f[0]), (post, r, self.f[-1])):
            has = idx >= 0
            if has.any():
                u = pts.crit[idx[has]]
                c_t[has] += u[:, 0]
                c_y[has] += u[:, 1]
                c_m[has] += u[:, 2] + f * u[:, 3] + u[:, 4]
        kmax = self.L // v - (p - 1)
        ks = np.arange(1, kmax + 1) if only is None else np.asarray(only, np.int64)
        t = ks[:, None] * a_t[None, :] + c_t[None, :]                     # (K, J)
        ok = t <= t_cap
        if self.budget is not None:
            ok &= ks[:, None] * a_m[None, :] + c_m[None, :] <= self.budget * (1 + _REL_TOL)
        y = ks[:, None] * a_y[None, :] + c_y[None, :]
        tt = np.where(ok, t, np.inf)
        order = np.argsort(tt, axis=1, kind="stable")
        ys = np.take_along_axis(np.where(ok, y, np.inf), order, axis=1)
        best = np.minimum.accumulate(ys, axis=1)
        front = np.ones_like(ys, bool)
        front[:, 1:] = ys[:, 1:] < best[:, :-1]
        front &= np.take_along_axis(ok, order, axis=1)
        rows, cols = np.nonzero(front)
        pick = order[rows, cols]
        kk = ks[rows]
        out = {"k": kk, "t": t[rows, pick], "y": y[rows, pick],
               "mem": kk * a_m[pick] + c_m[pick], "j": j[pick], "q": q[pick], "r": r[pick]}
        return out

    def least_memory(self) -> float:
        """The least peak memory over every choice of this combination (no budget): the
        least memory of each stage for each block count, then the allocation of blocks
        whose largest stage is smallest (exact, by a min-max program over stages)."""
        c = self.c
        p, v = c.p, c.v
        T = self.T
        B = T.block
        total = self.L // v
        g = np.full((p, total + 1), np.inf)
        for s in range(p):
            j, q, r = self._pairs(s)
            cr = B.crit[j]
            a_m = v * cr[:, 2] + self.f[s] * cr[:, 3]
            c_m = cr[:, 4].copy()
            for pts, idx, f in ((T.pre, q, self.f[0]), (T.post, r, self.f[-1])):
                has = idx >= 0
                if has.any():
                    u = pts.crit[idx[has]]
                    c_m[has] += u[:, 2] + f * u[:, 3] + u[:, 4]
            for k in range(1, total - p + 2):
                g[s, k] = float((k * a_m + c_m).min())
        best = np.r_[0.0, np.full(total, np.inf)]
        for s in range(p):
            nxt = np.full(total + 1, np.inf)
            for k in range(1, total + 1):
                if np.isfinite(g[s, k]):
                    nxt[k:] = np.minimum(nxt[k:], np.maximum(best[:total + 1 - k], g[s, k]))
            best = nxt
        return float(best[total])

    # ------------------------------------------------------------------ the MILP
    def _milp(self, opts):
        """One option per stage (binaries ``z``), block counts adding up, ``top >= t_s``,
        ``ymax >= y_s``; times in units of ``scale`` (the largest option time) so that the
        solver's tolerances are relative."""
        c = self.c
        p, v, m = c.p, c.v, c.m
        scale = max(float(max(o["t"].max(), o["y"].max())) for o in opts) or 1.0
        M = _Model()
        z = [M.var(integer=True, hi=1, n=len(o["k"])) for o in opts]
        ts = [M.var(lo=0) for _ in range(p)]
        ys = [M.var(lo=0) for _ in range(p)]
        top, ymax = M.var(lo=0), M.var(lo=0)
        kk, kv = [], []
        for s, o in enumerate(opts):
            M.row(z[s], 1.0, 1, 1)
            M.row(np.r_[z[s], ts[s]], np.r_[o["t"] / scale, -1.0], 0, 0)
            M.row(np.r_[z[s], ys[s]], np.r_[o["y"] / scale, -1.0], 0, 0)
            M.row([top, ts[s]], [1.0, -1.0], lo=0)
            M.row([ymax, ys[s]], [1.0, -1.0], lo=0)
            kk.extend(z[s].tolist())
            kv.extend(o["k"].tolist())
        M.row(kk, kv, self.L // v, self.L // v)
        M.cost[top] = m - 1.0 / v
        M.cost[ymax] = 1.0
        for s in range(p):
            M.cost[ts[s]] = 1.0 / v
        return M, dict(z=z, t=ts, y=ys, top=top, ymax=ymax, scale=scale)

    def _start(self, opts, ref, model: _Model, ch: _Choice) -> np.ndarray | None:
        """The MILP's column values of a choice (None when it is not among the options)."""
        x = np.zeros(len(model.cost))
        vals = self.stage_values(ch)
        for s, o in enumerate(opts):
            hit = np.flatnonzero((o["k"] == ch.k[s]) & (o["j"] == ch.point[s])
                                 & (o["q"] == (ch.pre if s == 0 else -1))
                                 & (o["r"] == (ch.post if s == self.c.p - 1 else -1)))
            if len(hit) == 0:
                return None
            x[ref["z"][s][hit[0]]] = 1.0
            x[ref["t"][s]] = vals[s][0] / ref["scale"]
            x[ref["y"][s]] = vals[s][1] / ref["scale"]
        x[ref["top"]] = max(v[0] for v in vals) / ref["scale"]
        x[ref["ymax"]] = max(v[1] for v in vals) / ref["scale"]
        return x

    def _tighten(self, opts, upper: float):
        """Drop options that no choice faster than ``upper`` can use.

        With ``g_s(k)`` the least time of stage ``s`` holding ``k`` blocks, an option ``(k,
        t)`` of stage ``s`` needs ``m t + R_s(total - k) / v + max_s min y <= upper``, where
        ``R_s(n)`` is the least total time of the other stages holding ``n`` blocks (a
        min-plus convolution of their ``g``): ``T >= (m - 1/v) t_s + sum_s t_s / v``. Options
        whose block count the others cannot complement go too. ``None`` when a stage has no
        option left."""
        c = self.c
        m, v, p = c.m, c.v, c.p
        total = self.L // v
        tol = 1 + _REL_TOL
        while True:
            if any(len(o["k"]) == 0 for o in opts):
                return None
            g = np.full((p, total + 1), np.inf)
            for s, o in enumerate(opts):
                np.minimum.at(g[s], o["k"].astype(np.int64), o["t"])
            ymin = max(o["y"].min() for o in opts)
            pre = [np.r_[0.0, np.full(total, np.inf)]]
            for s in range(p - 1):
                pre.append(_minplus(pre[-1], g[s]))
            suf = [np.r_[0.0, np.full(total, np.inf)]]
            for s in range(p - 1, 0, -1):
                suf.append(_minplus(suf[-1], g[s]))
            suf = suf[::-1]
            changed = False
            for s, o in enumerate(opts):
                rest = _minplus(pre[s], suf[s])            # the other stages, by blocks
                need = rest[total - o["k"].astype(np.int64)]
                keep = np.isfinite(need)
                if math.isfinite(upper):
                    keep &= m * o["t"] + need / v + ymin <= upper * tol
                if not keep.all():
                    opts[s] = {n: a[keep] for n, a in o.items()}
                    changed = True
            if not changed:
                return opts

    def untied_bound(self) -> float:
        """A lower bound on ``T`` of this combination without tying: each stage's blocks may
        mix any non-dominated assignments (an LP over how many blocks use each; every block
        pays at least the cheapest re-layout into it, the first one none; per-stage
        constants, messages and pre / post layers at their least; the largest working set at
        its least). ``inf`` when even that does not fit the memory."""
        T, c = self.T, self.c
        p, v, m = c.p, c.v, c.m
        B = T.block
        ins = T.block_in_class(B)
        wmin_cls = np.full(len(T.in_classes), np.inf)
        np.minimum.at(wmin_cls, ins, B.wrap)
        w_in = wmin_cls[ins]
        pre_t, pre_y = T.pre.crit[:, 0].min(), T.pre.crit[:, 1].min()
        pre_m = (T.pre.crit[:, 2] + self.f[0] * T.pre.crit[:, 3]).min()
        post_t, post_y = T.post.crit[:, 0].min(), T.post.crit[:, 1].min()
        post_m = (T.post.crit[:, 2] + self.f[-1] * T.post.crit[:, 3]).min()
        scale = max(float(B.crit[:, 0].max()) * self.L, 1e-30)
        M = _Model()
        top, ymax = M.var(lo=0), M.var(lo=0)
        counts = []
        for s in range(p):
            lam = M.var(lo=0, n=len(B))
            counts.extend(lam.tolist())
            ts, ys = M.var(lo=0), M.var(lo=0)
            M.row(lam, 1.0, lo=1)
            const_t = B.c_tau.min() + self.send[s].min() + self.recv[s].min() \
                - v * float(w_in.max()) + (pre_t if s == 0 else 0) \
                + (post_t if s == p - 1 else 0)
            const_y = B.c_psi.min() + (pre_y if s == 0 else 0) + (post_y if s == p - 1 else 0)
            const_m = B.crit[:, 4].min() + (pre_m if s == 0 else 0) \
                + (post_m if s == p - 1 else 0)
            M.row(np.r_[lam, ts], np.r_[v * (B.crit[:, 0] + w_in) / scale, -1.0],
                  hi=-max(const_t, 0.0) / scale)
            M.row(np.r_[lam, ys], np.r_[v * B.crit[:, 1] / scale, -1.0], hi=-const_y / scale)
            if self.budget is not None:
                M.row(lam, (v * B.crit[:, 2] + self.f[s] * B.crit[:, 3]) / self.budget,
                      hi=(self.budget - const_m) / self.budget)
            M.row([top, ts], [1.0, -1.0], lo=0)
            M.row([ymax, ys], [1.0, -1.0], lo=0)
            M.cost[ts] = 1.0 / v
        M.row(counts, 1.0, self.L / v, self.L / v)
        M.cost[top] = m - 1.0 / v
        M.cost[ymax] = 1.0
        status, obj, _, bound = M.solve(None)
        if status == "infeasible":
            return math.inf
        return float(min(obj, bound)) * scale if status == "optimal" else 0.0

    def heuristic(self) -> tuple[_Choice | None, float]:
        """A quick feasible choice: blocks spread evenly (extra blocks on the last stages,
        which keep fewer micro-batches in flight), each stage its best option for that
        count by ``m t + y``."""
        c = self.c
        p, v = c.p, c.v
        total = self.L // v
        ks = [total // p + (1 if s >= p - total % p else 0) for s in range(p)]
        pick = []
        for s in range(p):
            o = self.options(s, only=[ks[s]])
            sel = np.flatnonzero(o["k"] == ks[s]) if len(o["k"]) else np.zeros(0, int)
            if len(sel) == 0:
                return None, math.inf
            best = sel[np.argmin(c.m * o["t"][sel] + o["y"][sel])]
            pick.append((int(o["j"][best]), int(o["q"][best]), int(o["r"][best])))
        ch = _Choice(tuple(ks), tuple(x[0] for x in pick), pick[0][1], pick[-1][2])
        return ch, self.iteration_seconds(self.stage_values(ch))

    def solve(self, time_limit: float | None = None, upper: float = math.inf,
              start: _Choice | None = None):
        """``(status, choice or None, iteration seconds, lower bound)``; only choices not
        slower than ``upper`` are looked for (``infeasible`` when there are none); ``start``
        (a choice not slower than ``upper``) seeds the MILP."""
        p = self.c.p
        cap = upper / self.c.m * (1 + _REL_TOL) if math.isfinite(upper) else math.inf
        opts = self._tighten([self.options(s, cap) for s in range(p)], upper)
        if opts is None:
            return "infeasible", None, math.inf, math.inf
        model, ref = self._milp(opts)
        x0 = self._start(opts, ref, model, start) if start is not None else None
        status, obj, vals, bound = model.solve(time_limit, x0)
        obj, bound = obj * ref["scale"], bound * ref["scale"]
        if vals is None:
            return status, None, math.inf, bound
        pick = [int(np.argmax(vals[ref["z"][s]])) for s in range(p)]
        o = [opts[s] for s in range(p)]
        ch = _Choice(tuple(int(o[s]["k"][i]) for s, i in enumerate(pick)),
                     tuple(int(o[s]["j"][i]) for s, i in enumerate(pick)),
                     int(o[0]["q"][pick[0]]), int(o[-1]["r"][pick[-1]]))
        got = self.iteration_seconds(self.stage_values(ch))
        if not math.isclose(got, obj, rel_tol=1e-6, abs_tol=1e-9):
            raise SolverError(f"pipeline MILP: objective {obj} but its plan evaluates to "
                              f"{got} (p={p}, m={self.c.m}, t={self.c.t})")
        return status, ch, got, (got if status == "optimal" else bound)


# ====================================================================== Megatron's kinds
def megatron_kinds(graph: LayerGraph, t: int, *, sequence_parallel: bool = False
                   ) -> dict[str, str]:
    """Megatron-LM's tensor-parallel layout of every layer, by name.

    Column-parallel linears where the input is whole (query/key/value, first MLP layers,
    logits), row-parallel where it is split (attention output, last MLP layer), heads split in
    attention, split pointwise ops between a column- and a row-parallel linear, a
    vocabulary-parallel embedding and cross-entropy, everything else replicated (``R``), or
    sequence-split (``S``) with ``sequence_parallel`` (Korthikanti et al.; the column-parallel
    linears then gather their input: ``column_sp``). With ``t = 1``: ``N`` everywhere.

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
                k, lay = ("column_sp" if sequence_parallel else "column"), "C"
        elif L.op == "attention":
            k, lay = "head", "C"
        elif L.op == "loss":
            k, lay = ("vocab" if src[0] == "C" else "R"), "R"
        elif L.op in ("elementwise", "dropout", "mul") and all(x == "C" for x in src):
            k, lay = "C", "C"
        elif L.op in ("elementwise", "dropout", "add", "mul", "layernorm", "rmsnorm"):
            k, lay = rep, rep
        else:
            k, lay = "R", "R"
        out[L.name] = k
        layout[L.name] = lay
    return out


# ====================================================================== the search
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _prepare(model, cluster, devices, global_batch, memory_limit):
    from .plan import _load_cluster, _load_model, _memory_budget
    graph, name = _load_model(model, None)
    topo, cname = _load_cluster(cluster, devices)
    struct = block_structure(graph)
    B = graph.batch_size if global_batch is None else global_batch
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
        raise InvalidOptionError(f"global_batch must be a positive integer, got "
                                 f"{global_batch!r}")
    budget = _memory_budget(memory_limit, topo)
    return graph, name, topo, cname, struct, int(B), budget


def _node_size(topo: Topology) -> int:
    return topo.levels[0].fanout if len(topo.levels) > 1 else topo.n_devices


class _Search:
    """Tables shared by the combinations of one search (cached by stage shape)."""

    def __init__(self, graph, struct, topo, pricer, options: PipelineOptions):
        self.graph, self.struct, self.topo, self.pricer = graph, struct, topo, pricer
        self.options = options
        self._tables: dict = {}
        self._low: dict = {}

    def pricing(self, Ds: int, t: int, b: int) -> _MeshPricing:
        return _MeshPricing(self.graph, self.pricer, self.options.precision, Ds, t, b,
                            self.options.flash_attention)

    def tables(self, Ds: int, t: int, b: int, multi: bool) -> _StageTables:
        key = (Ds, t, b, multi)
        hit = self._tables.get(key)
        if hit is None:
            hit = _StageTables(self.graph, self.struct, self.pricing(Ds, t, b),
                               self.options.zero, self.options.recompute, multi)
            self._tables[key] = hit
        return hit

    def _least(self, pr: _MeshPricing, names: Sequence[str], col: int) -> float:
        """The least time (``col=0``, per micro-batch, with the re-layouts inside the
        group: a min-sum program over the layers' kinds) or flush time (``col=1``: each
        layer's least) of a group of layers over every assignment and ZeRO stage, without
        recomputation."""
        layers = [self.graph.layer(n) for n in names]
        kinds = [pr.kinds(L) for L in layers]
        zs = self.options.zero
        if col == 1:
            return sum(min(float(pr.criteria(L, ks, z, "none")[:, 1].min()) for z in zs)
                       for L, ks in zip(layers, kinds))
        z = min(zs, key=lambda x: (x >= 2, x))        # ZeRO 2 / 3 only add time
        pos = {L.name: j for j, L in enumerate(layers)}
        crit = [pr.criteria(L, ks, z, "none")[:, 0] for L, ks in zip(layers, kinds)]
        preds = [[(pos[u], np.add(*pr.edge(layers[pos[u]], L, i, kinds[pos[u]], kinds[j])))
                  for i, u in enumerate(L.inputs) if u in pos] for j, L in enumerate(layers)]
        return _min_program(crit, preds)

    def low(self, Ds: int, t: int, b: int) -> tuple[float, ...]:
        """Lower bounds per micro-batch (one block, the pre layers, the post layers) and per
        iteration (the same three): the least over every assignment and ZeRO stage without
        recomputation, memory or messages between stages."""
        key = (Ds, t, b)
        hit = self._low.get(key)
        if hit is None:
            pr = self.pricing(Ds, t, b)
            hit = tuple(self._least(pr, names, col) for col in (0, 1)
                        for names in (self.struct.blocks[0], self.struct.pre,
                                      self.struct.post))
            self._low[key] = hit
        return hit


def _combos(search: _Search, N: int, B: int, L: int) -> list[_Combo]:
    o = search.options
    node = _node_size(search.topo)
    ps = o.pipeline or [p for p in _divisors(N) if p <= L]
    out = []
    for p in ps:
        if N % p or p > L:
            continue
        Ds = N // p
        ts = o.tensor or [t for t in _divisors(node) if t & (t - 1) == 0]
        for t in ts:
            if Ds % t:
                continue
            d = Ds // t
            ms = o.micro_batches or [m for m in _divisors(B) if (B // m) % d == 0]
            for m in ms:
                if B % m or (B // m) % d:
                    continue
                b = B // (m * d)
                for v in o.chunks:
                    if L % v or L // v < p or (v > 1 and p == 1):
                        continue
                    for sched in o.schedules:
                        if v > 1 and sched != "1f1b":
                            continue
                        blk, pre, post, y_blk, y_pre, y_post = search.low(Ds, t, b)
                        S = L * blk + pre + post
                        Y = L * y_blk + y_pre + y_post
                        lb = (m - 1.0 / v) * S / p + S / v + Y / p
                        out.append(_Combo(p, t, m, v, sched, b, lb))
    out.sort(key=lambda c: (c.lower_bound, c.p, c.t, c.m, c.v))
    return out


def _plan(search, combo: _Combo, prob: _ComboProblem, ch: _Choice, *, name, cname, N, B,
          budget, status, lower, stats) -> PipelinePlan:
    T, struct = prob.T, search.struct
    vals = prob.stage_values(ch)
    p, v = combo.p, combo.v
    Ds = N // p
    B_pts = T.block
    stages = []
    start = 0
    chunk_starts = []   # block index where each (round, stage) chunk starts
    for rnd in range(v):
        for s in range(p):
            chunk_starts.append((rnd, s, start))
            start += ch.k[s]
    for s in range(p):
        blocks = []
        for rnd, s2, st in chunk_starts:
            if s2 == s:
                blocks.extend(range(st, st + ch.k[s]))
        j = ch.point[s]
        kinds = {r: T.block_kinds[i][B_pts.assign[j, i]].name
                 for i, r in enumerate(struct.rest)}
        if s == 0:
            kinds.update({n: T.pricing.kinds(T.graph.layer(n))[T.pre.assign[ch.pre, i]].name
                          for i, n in enumerate(struct.pre)})
        if s == p - 1:
            kinds.update({n: T.pricing.kinds(T.graph.layer(n))[T.post.assign[ch.post, i]].name
                          for i, n in enumerate(struct.post)})
        ts, ys, mem = vals[s]
        stages.append(StagePlan(s, tuple(blocks), (s * Ds, (s + 1) * Ds), kinds,
                                ("none", "selective", "full")[int(B_pts.mode[j])],
                                int(B_pts.zero[j]), ts, ys, mem, int(prob.f[s])))
    it = prob.iteration_seconds(vals)
    tmax = max(x[0] for x in vals)
    ideal = combo.m * tmax + max(x[1] for x in vals)
    return PipelinePlan(name, cname, N, B, p, combo.t, Ds // combo.t, combo.m, combo.b,
                        combo.schedule, v, tuple(stages), it, it / ideal - 1.0,
                        budget, status, lower, True, None, dict(stats))


def solve_pipeline(model, cluster, *, global_batch: int | None = None,
                   devices: int | None = None, memory_limit=None,
                   options: PipelineOptions | None = None,
                   pricer: StepPricer | None = None) -> PipelinePlan:
    """The fastest training step of a transformer over the declared space (module
    docstring), proven optimal.

    Parameters
    ----------
    model : str or LayerGraph or path
        A zoo name (``"gpt_145.6b"``), a graph, or a graph JSON file; it must have repeated
        blocks (:func:`block_structure`).
    cluster : str or Topology or path
        A preset (``"selene"``), a topology or a cluster JSON file.
    global_batch : int, optional
        Samples per iteration (default: the graph's batch size).
    devices : int, optional
        The first ``devices`` devices (a preset grows to enough nodes).
    memory_limit : bytes, size string, None or inf
        Per device; ``None`` = the device memory, ``math.inf`` = no budget.
    options : PipelineOptions, optional
        The declared space.
    pricer : StepPricer, optional
        Prices (default: :class:`~milp_parallel.step_costs.StepPricer` of the topology).

    Returns
    -------
    PipelinePlan
        ``status="optimal"`` (proven over the space), or ``"feasible"`` when
        ``options.time_limit`` ran out (``lower_bound_seconds`` then says how far it may be).

    Raises
    ------
    InvalidGraphError
        The model has no repeated blocks.
    InvalidOptionError
        Options that leave no combination (e.g. micro-batch counts that do not divide the
        batch: the message names both numbers).
    InfeasibleError
        No configuration fits the memory; ``least_memory_bytes`` is the least peak any
        configuration of the space needs.
    """
    t0 = time.perf_counter()
    opts = options or PipelineOptions()
    graph, name, topo, cname, struct, B, budget = _prepare(model, cluster, devices,
                                                           global_batch, memory_limit)
    N, L = topo.n_devices, struct.n_blocks
    if opts.micro_batches:
        bad = [m for m in opts.micro_batches if B % m]
        if bad:
            raise InvalidOptionError(f"micro-batch count {bad[0]} does not divide the global "
                                     f"batch {B}; give counts that divide {B}")
    search = _Search(graph, struct, topo, pricer or StepPricer(topo), opts)
    combos = _combos(search, N, B, L)
    if not combos:
        raise InvalidOptionError(
            f"no (pipeline, tensor, micro-batch, chunks) combination fits {N} devices, a "
            f"batch of {B} and {L} blocks with options {opts!r}: the micro-batches of each "
            "data-parallel replica must be whole")
    best = (math.inf, None, None, None)
    stats = {"combinations": len(combos), "milps": 0, "tables": 0, "infeasible": 0}
    lower = math.inf
    status = "optimal"
    for i, c in enumerate(combos):
        if c.lower_bound >= best[0] * (1 - 1e-9):
            stats["pruned_by_bound"] = len(combos) - i
            break
        left = None
        if opts.time_limit is not None:
            left = opts.time_limit - (time.perf_counter() - t0)
            if left <= 0:
                status = "feasible"
                lower = c.lower_bound
                stats["not_visited"] = len(combos) - i
                break
        tables = search.tables(N // c.p, c.t, c.b, c.p > 1)
        prob = _ComboProblem(tables, c, L, N, budget)
        start, ub = prob.heuristic()
        upper = min(best[0], ub)
        st, ch, it, _ = prob.solve(left, upper, start if ub <= best[0] else None)
        stats["milps"] += 1
        if ch is None and start is not None and ub < best[0]:
            ch, it = start, ub
        logger.debug("combo p=%d t=%d m=%d v=%d %s b=%d: bound %.6g, heuristic %.6g, "
                     "%s %.6g", c.p, c.t, c.m, c.v, c.schedule, c.b, c.lower_bound, ub, st,
                     it)
        if ch is not None and it < best[0]:
            best = (it, c, prob, ch)
        elif ch is None and st == "infeasible" and start is None:
            stats["infeasible"] += 1
        if st not in ("optimal", "infeasible"):
            status = "feasible"
    stats["tables"] = len(search._tables)
    stats["seconds"] = time.perf_counter() - t0
    if best[1] is None:
        least = _least_memory(search, N, B, L, budget)
        raise InfeasibleError(
            f"{name} does not fit {N} devices of {cname} with {budget:.4g} bytes each under "
            f"any configuration of the declared space; the least peak memory any "
            f"configuration needs is {least:.4g} bytes per device (add devices, or allow "
            "more recomputation / ZeRO stages)", least_memory_bytes=least,
            budget_bytes=budget)
    it, c, prob, ch = best
    if status == "optimal":
        lower = it
    else:
        lower = min(lower, it)
    plan = _plan(search, c, prob, ch, name=name, cname=cname, N=N, B=B, budget=budget,
                 status=status, lower=lower, stats=stats)
    untied = min(prob.untied_bound(), it)
    return replace(plan, untied_lower_bound_seconds=untied)


def _least_memory(search: _Search, N: int, B: int, L: int, budget) -> float:
    """The least peak memory over the declared space: for each ``(p, t)``, the most
    micro-batches (the least activation memory), no interleaving."""
    best = math.inf
    seen = set()
    for c in sorted(_combos(search, N, B, L), key=lambda c: (c.p, c.t, -c.m, c.v)):
        if (c.p, c.t) in seen or c.v != 1:
            continue
        seen.add((c.p, c.t))
        sched = "1f1b" if "1f1b" in search.options.schedules else c.schedule
        c = replace(c, schedule=sched)
        prob = _ComboProblem(search.tables(N // c.p, c.t, c.b, c.p > 1), c, L, N, None)
        best = min(best, prob.least_memory())
    return best


def evaluate_configuration(model, cluster, *, global_batch: int, tensor: int, pipeline: int,
                           micro_batch_size: int, devices: int | None = None,
                           chunks: int = 1, schedule: str = "1f1b", recompute: str = "full",
                           zero: int = 0, kinds: Mapping[str, str] | str = "megatron",
                           stage_blocks: Sequence[int] | None = None, memory_limit=None,
                           options: PipelineOptions | None = None,
                           pricer: StepPricer | None = None) -> PipelinePlan:
    """Price one given configuration (e.g. Megatron-LM's own) with the search's formulas.

    Parameters
    ----------
    tensor, pipeline : int
        ``t`` and ``p``; the data-parallel size is ``devices / (t p)``.
    micro_batch_size : int
        Samples per data-parallel replica per micro-batch (``b``); ``m = B / (b d)``.
    chunks, schedule, recompute, zero : as in :class:`PipelineOptions`
        One value each.
    kinds : ``"megatron"``, ``"megatron_sp"`` or mapping
        Every layer's kind by name (:func:`megatron_kinds`).
    stage_blocks : sequence of int, optional
        Blocks per stage (per chunk with interleaving); default: equal.

    Returns
    -------
    PipelinePlan
        ``status="evaluated"``; ``memory_bytes`` per stage may exceed the budget (the plan
        says so in ``search["fits"]``).

    Raises
    ------
    InvalidOptionError
        A batch, micro-batch size or stage split that does not divide (the message names
        both numbers), or a kind a layer does not have.
    """
    opts = options or PipelineOptions()
    graph, name, topo, cname, struct, B, budget = _prepare(model, cluster, devices,
                                                           global_batch, memory_limit)
    N, L = topo.n_devices, struct.n_blocks
    for what, v in (("tensor", tensor), ("pipeline", pipeline),
                    ("micro_batch_size", micro_batch_size), ("chunks", chunks)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InvalidOptionError(f"{what} must be a positive integer, got {v!r}")
    if N % (tensor * pipeline):
        raise InvalidOptionError(f"tensor x pipeline = {tensor * pipeline} does not divide "
                                 f"the {N} devices")
    d = N // (tensor * pipeline)
    if B % (micro_batch_size * d):
        raise InvalidOptionError(f"the global batch {B} is not a whole number of "
                                 f"micro-batches of {micro_batch_size} on {d} data-parallel "
                                 f"replicas ({micro_batch_size * d} per micro-batch)")
    m = B // (micro_batch_size * d)
    if schedule not in SCHEDULES:
        raise InvalidOptionError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if L % (chunks * pipeline) and stage_blocks is None:
        raise InvalidOptionError(f"{L} blocks do not split evenly into {pipeline} stages x "
                                 f"{chunks} chunks; give stage_blocks")
    ks = tuple(stage_blocks) if stage_blocks is not None else \
        (L // (chunks * pipeline),) * pipeline
    if len(ks) != pipeline or sum(ks) * chunks != L or min(ks) < 1:
        raise InvalidOptionError(f"stage_blocks {ks} must give each of the {pipeline} stages "
                                 f"at least one block and add up to {L} / chunks={chunks}")
    if isinstance(kinds, str):
        if kinds not in ("megatron", "megatron_sp"):
            raise InvalidOptionError(f"kinds must be 'megatron', 'megatron_sp' or a mapping, "
                                     f"got {kinds!r}")
        kinds = megatron_kinds(graph, tensor, sequence_parallel=kinds == "megatron_sp")
    check_zero((zero,))
    check_recompute((recompute,))
    search = _Search(graph, struct, topo, pricer or StepPricer(topo), opts)
    pricing = search.pricing(N // pipeline, tensor, micro_batch_size)
    tables = _StageTables(graph, struct, pricing, (zero,), (recompute,), pipeline > 1,
                          fixed=kinds)
    combo = _Combo(pipeline, tensor, m, chunks, schedule, micro_batch_size, 0.0)
    prob = _ComboProblem(tables, combo, L, N, budget)
    ch = _Choice(ks, (0,) * pipeline, 0, 0)
    vals = prob.stage_values(ch)
    fits = budget is None or max(x[2] for x in vals) <= budget * (1 + _REL_TOL)
    it = prob.iteration_seconds(vals)
    return _plan(search, combo, prob, ch, name=name, cname=cname, N=N, B=B, budget=budget,
                 status="evaluated", lower=it, stats={"fits": bool(fits)})
