"""The outer search, :func:`solve_pipeline` (proven optimal) and :func:`evaluate_configuration`.

The search visits ``(p, m, v, t, schedule)`` by increasing lower bound and stops when the
bound reaches the best step time found.

May import: ``errors``, ``inputs``, ``machine``, and every module of the folder.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from ..errors import InfeasibleError, InvalidOptionError
from ..inputs import load_cluster, load_model, memory_budget_bytes
from ..machine.topology import Topology
from .blocks import block_structure
from .combo import _REL_TOL, _Choice, _Combo, _ComboProblem
from .dominance import _min_program
from .fanout import with_fanouts
from .pricing import _MeshPricing
from .result import PipelinePlan, StagePlan
from .space import SCHEDULES, PipelineOptions, _divisors
from .stages import _StageTables
from .step_costs import StepPricer
from .tensor_parallel import complete_fanout_kinds, megatron_kinds
from .training_memory import check_recompute, check_zero

__all__ = ["solve_pipeline", "evaluate_configuration"]

logger = logging.getLogger(__name__)


def _prepare(model, cluster, devices, global_batch, memory_limit):
    graph, name = load_model(model)
    graph = with_fanouts(graph)         # a tensor read by several layers: priced once
    topo, cname = load_cluster(cluster, devices=devices)
    struct = block_structure(graph)
    B = graph.batch_size if global_batch is None else global_batch
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1:
        raise InvalidOptionError(f"global_batch must be a positive integer, got "
                                 f"{global_batch!r}")
    budget = memory_budget_bytes(memory_limit, topo)
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
                            self.options.flash_attention, self.options.receive_buffers)

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
                        budget, status, lower, True, None, dict(stats), search.options)


def solve_pipeline(model, cluster, *, global_batch: int | None = None,
                   devices: int | None = None, memory_limit="device",
                   options: PipelineOptions | None = None,
                   pricer: StepPricer | None = None) -> PipelinePlan:
    """The fastest training step of a transformer over the declared space
    (:mod:`milp_parallel.pipeline`), proven optimal.

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
    memory_limit : bytes, size string, "device", "none", None or inf
        Per device (:func:`~milp_parallel.units.parse_memory_limit`); ``"device"`` (default)
        = the device memory; ``None``, ``"none"`` or ``math.inf`` = no budget.
    options : PipelineOptions, optional
        The declared space.
    pricer : StepPricer, optional
        Prices (default: :class:`~milp_parallel.pipeline.step_costs.StepPricer` of the topology).

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
                           stage_blocks: Sequence[int] | None = None,
                           memory_limit="device",
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
    elif isinstance(kinds, Mapping):
        kinds = complete_fanout_kinds(graph, kinds, tensor, micro_batch=micro_batch_size)
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
