"""The user-facing entry point: :func:`solve` a model on a cluster and get a :class:`Plan`.

``solve`` runs the whole pipeline: the model (a zoo name, a :class:`~milp_parallel.graph.
LayerGraph` or a graph JSON file) and the cluster (a preset name, a :class:`~milp_parallel.
topology.Topology` or a cluster JSON file) become a :class:`~milp_parallel.Problem`
(:func:`~milp_parallel.build.build_problem`), a solver picks one configuration per node
(:func:`~milp_parallel.solvers.solve_problem`), the exact graph search checks the answer, and
the result is mapped back to layers: per layer its configuration, its predicted compute,
gradient-synchronization and transfer time and its memory; for the whole step the time, the
memory per device against the budget, the solver's statistics, and the same numbers for four
baselines (:mod:`milp_parallel.baselines`), all evaluated by the same problem.

A :class:`Plan` is a frozen value: ``str(plan)`` is a readable table, ``plan.to_json()`` and
:meth:`Plan.from_json` round-trip it exactly.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .baselines import NodeConfigs, baseline_assignments, degrees_dict
from .crosscheck import CROSS_CHECK_RTOL, NOT_RUN, CrossCheck
from .crosscheck import compare as cross_check_results
from .crosscheck import cross_check as run_cross_check
from .errors import (
    FormatError,
    InfeasibleError,
    InvalidGraphError,
    InvalidOptionError,
    InvalidTopologyError,
)
from .io import Fields, decode, dumps, encode, loads, read_document, read_json, write_json
from .problem import MEMORY_RTOL, Problem
from .solvers import SolveResult, solve_problem
from .solvers.options import Deadline, validate_time_limit
from .solvers.result import INFEASIBLE, OPTIMAL
from .validation import (
    check_exclusive,
    check_keys,
    check_mapping,
    check_whole,
    show,
    unknown_name,
)

__all__ = ["solve", "make_problem", "explain", "Plan", "LayerChoice", "Baseline", "CrossCheck",
           "Explanation", "LayerChange", "cross_check_results", "least_memory_bytes",
           "PLAN_FORMAT", "PLAN_FORMAT_VERSION", "CROSS_CHECK_RTOL"]

logger = logging.getLogger(__name__)

PLAN_FORMAT = "milp_parallel.plan"
PLAN_FORMAT_VERSION = 1



# ---------------------------------------------------------------------- values
@dataclass(frozen=True)
class LayerChoice:
    """The chosen configuration of one layer and what it costs.

    Attributes
    ----------
    name, op : str
        The layer's name and op.
    config : str
        The configuration, readable: ``"n=2 h=2"`` or ``"serial"``.
    degrees : dict
        ``{dim: degree}`` of the split dimensions (empty when serial).
    n_devices : int
        Devices the layer runs on (the product of its degrees).
    compute_seconds, sync_seconds, transfer_seconds : float
        Predicted forward+backward compute of the largest tile, gradient all-reduce, and the
        redistribution of the layer's inputs (attributed to the consumer) per step.
    memory_bytes : float
        The layer's memory on its most loaded device (weights, gradients, optimizer state,
        kept activations).
    node : str
        The problem node the layer belongs to: its own name, or, for an element-wise layer
        merged into its producer, the producer's name (it follows the producer's layout).
    """

    name: str
    op: str
    config: str
    degrees: Mapping[str, int]
    n_devices: int
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    memory_bytes: float
    node: str = ""

    @property
    def seconds(self) -> float:
        """Compute + sync + transfer."""
        return self.compute_seconds + self.sync_seconds + self.transfer_seconds

    @property
    def merged(self) -> bool:
        """Whether the layer was merged into its producer (follows it)."""
        return bool(self.node) and self.node != self.name


@dataclass(frozen=True)
class Baseline:
    """A hand-written strategy evaluated by the same problem as the plan.

    Attributes
    ----------
    name : str
        ``"data"``, ``"model"``, ``"owt"`` or ``"best_uniform"`` (see
        :mod:`milp_parallel.baselines`).
    step_seconds, compute_seconds, sync_seconds, transfer_seconds : float
        Predicted step time (``inf`` if the strategy makes a forbidden choice) and its split.
    peak_memory_bytes : float
        The largest per-device peak memory.
    feasible : bool
        Whether it fits within the memory budget (and makes no forbidden choice).
    speedup : float
        ``baseline step time / plan step time`` (> 1: the plan is faster).
    description : str
        The strategy in a few words (e.g. ``"n=4"`` for a uniform one).
    assignment : tuple of int
        The configuration index of each problem node.
    simulated_step_seconds : float or None
        The step simulator's time of the same assignment (:func:`milp_parallel.simulate`;
        ``None`` when not simulated).
    """

    name: str
    step_seconds: float
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    peak_memory_bytes: float
    feasible: bool
    speedup: float
    description: str = ""
    assignment: tuple[int, ...] = ()
    simulated_step_seconds: float | None = None


@dataclass(frozen=True)
class Plan:
    """An optimized parallelization plan: one configuration per layer, with its costs.

    Attributes
    ----------
    model, cluster : str
        Names of the model and the cluster.
    devices : int
        Devices used.
    batch_size : int
        Global batch (samples per step, over all devices).
    layers : tuple of LayerChoice
        Every layer of the graph, in topological order (merged element-wise layers included).
    step_seconds : float
        Predicted time of one training step (the problem's objective for the assignment).
    compute_seconds, sync_seconds, transfer_seconds : float
        Its split (sums over the layers).
    throughput : float
        Samples per second, ``batch_size / step_seconds``.
    memory_bytes : tuple of float
        Peak memory per device.
    memory_capacity_bytes : float
        Memory of one device of the cluster.
    solver, status : str
        The solver that produced the plan and its status (``"optimal"`` only when proved).
    objective, bound, gap : float
        The solver's objective, proved lower bound and relative gap.
    solve_seconds : float
        Wall-clock time of the solver.
    cross_check : CrossCheck
    baselines : dict
        ``name -> Baseline``.
    memory_limit_bytes : float or None
        The budget per device the problem was solved under (``None``: no budget).
    budget_effect : dict
        When the budget binds: ``device`` (the one with the least room), ``headroom_bytes``
        (budget minus its peak), ``unconstrained_step_seconds`` (the optimum without the
        budget, when the exact search could compute it) and ``cost_of_budget`` (the plan's
        step over that, minus one). Empty otherwise. See also :attr:`binding_device`.
    assignment : tuple of int
        The configuration index of each problem node (to re-evaluate the plan on the
        problem).
    solver_stats : dict
        The solver's statistics (JSON-ready).
    problem_size : dict
        ``n_layers``, ``n_nodes``, ``n_edges``, ``n_configs`` (total), ``max_configs``,
        ``edge_table_entries``, ``build_seconds``.
    constraints : dict
        The ``fixed`` (``{node: label}``) and ``forbid`` (``{node: [labels]}``) choices the
        plan was solved under (empty when none), by problem node.
    simulated_step_seconds : float or None
        The step simulator's time of the plan (:func:`milp_parallel.simulate`: transfers,
        bucketed all-reduces overlapped with the backward pass, concurrent branches); ``None``
        when not simulated. ``step_seconds`` is the solver's separable prediction.
    rerank : tuple of dict
        With ``solve(..., rerank=k)``: the candidates, the ``k`` best assignments by predicted
        time then the baselines not among them, each ``{"rank", "baseline",
        "predicted_seconds", "simulated_seconds", "chosen"}`` (``rank`` by prediction for
        the k best, ``baseline`` the baseline's name otherwise; the plan is the chosen one:
        the fastest simulated). Empty otherwise.
    dtype : str
        The dtype the cluster's peak FLOP/s refers to and the plan is priced in
        (``Topology.dtype``, or the cost model's own ``dtype``).
    batch_origin : str
        Where ``batch_size`` came from: ``"batch_size"`` (given), ``"batch_per_device"``
        (given per device, times the devices) or ``"default"`` (the model's own global
        batch, whatever the device count). Empty for a plan saved before it was recorded.
    profile_coverage : dict
        With ``solve(..., profile=...)``: which layers the profile table priced,
        ``{"table", "matched", "partial", "unmatched"}`` (layer names; ``partial`` and
        ``unmatched`` ones are priced, in part or whole, by the FLOP estimate). Empty
        without a profile.
    inputs : object
        The arguments of the :func:`solve` call that made the plan, for :meth:`explain`
        (not saved; ``None`` for a loaded plan).
    """

    model: str
    cluster: str
    devices: int
    batch_size: int
    layers: tuple[LayerChoice, ...]
    step_seconds: float
    compute_seconds: float
    sync_seconds: float
    transfer_seconds: float
    throughput: float
    memory_bytes: tuple[float, ...]
    memory_capacity_bytes: float
    solver: str
    status: str
    objective: float
    bound: float
    gap: float
    solve_seconds: float
    cross_check: CrossCheck
    baselines: Mapping[str, Baseline]
    memory_limit_bytes: float | None = None
    assignment: tuple[int, ...] = ()
    solver_stats: Mapping[str, Any] = field(default_factory=dict)
    problem_size: Mapping[str, Any] = field(default_factory=dict)
    constraints: Mapping[str, Any] = field(default_factory=dict)
    budget_effect: Mapping[str, Any] = field(default_factory=dict)
    simulated_step_seconds: float | None = None
    rerank: tuple[Mapping[str, Any], ...] = ()
    dtype: str = "fp32"
    batch_origin: str = ""
    profile_coverage: Mapping[str, Any] = field(default_factory=dict)
    inputs: Any = field(default=None, compare=False, repr=False)

    # -------------------------------------------------------------- queries
    @property
    def is_optimal(self) -> bool:
        """Whether the solver proved the plan optimal."""
        return self.status == OPTIMAL

    @property
    def peak_memory_bytes(self) -> float:
        """The largest per-device peak memory."""
        return max(self.memory_bytes) if self.memory_bytes else 0.0

    @property
    def binding_device(self) -> int | None:
        """The device with the least room under the budget (``None`` without a budget)."""
        if self.memory_limit_bytes is None or not self.memory_bytes:
            return None
        return int(np.argmax(np.asarray(self.memory_bytes)))

    @property
    def batch_per_device(self) -> float:
        """``batch_size / devices``: the samples each device sees per step."""
        return self.batch_size / self.devices if self.devices else float(self.batch_size)

    @property
    def better_baseline(self) -> Baseline | None:
        """The feasible baseline the step simulator finds faster than the plan (the fastest
        such), or ``None``: the simulator and the solver's prediction disagree on it."""
        if self.simulated_step_seconds is None:
            return None
        faster = [b for b in self.baselines.values() if b.feasible
                  and b.simulated_step_seconds is not None
                  and b.simulated_step_seconds < self.simulated_step_seconds]
        return min(faster, key=lambda b: b.simulated_step_seconds) if faster else None

    @property
    def memory_headroom_bytes(self) -> float | None:
        """Budget minus the peak of :attr:`binding_device` (``None`` without a budget)."""
        d = self.binding_device
        return None if d is None else float(self.memory_limit_bytes - self.memory_bytes[d])

    def layer(self, name: str) -> LayerChoice:
        """The :class:`LayerChoice` of the layer called ``name``.

        Raises
        ------
        UnknownNameError
            (a ``KeyError``) If the plan has no such layer: names the nearest ones.
        """
        for lc in self.layers:
            if lc.name == name:
                return lc
        raise unknown_name(f"plan of {self.model}", "layer", name,
                           [lc.name for lc in self.layers])

    def explain(self, layer: str, config: str | Mapping[str, int], *,
                model: Any = None, cluster: Any = None) -> "Explanation":
        """What forcing one layer's configuration would cost: re-solve and compare.

        The plan's problem is solved again with ``layer`` pinned to ``config`` (and the
        plan's own constraints); the answer says how the step time changes, split into
        compute / sync / transfer, how the peak memory changes, and which other layers
        change configuration as a consequence (graph neighbours flagged).

        Parameters
        ----------
        layer : str
            A layer of the plan.
        config : str or mapping
            A configuration label (``"h=2 w=2"``, ``"serial"``) or ``{dim: degree}``.
        model, cluster : optional
            The model and cluster to rebuild from, for a plan loaded from a file whose
            model or cluster is not a zoo / preset name (a plan returned by :func:`solve`
            in this process remembers its inputs).

        Returns
        -------
        Explanation

        Raises
        ------
        UnknownNameError
            The plan has no such layer.
        InvalidOptionError
            The layer has no such configuration (lists those it has), or the plan's
            inputs are unknown (pass ``model`` and ``cluster``).

        Examples
        --------
        >>> import milp_parallel as mp
        >>> plan = mp.solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
        >>> e = plan.explain("conv1", "serial")
        >>> e.delta_seconds >= 0
        True
        """
        return explain(self, layer, config, model=model, cluster=cluster)

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        """The plan as JSON-ready data (``inf``/``nan`` written as strings).

        :meth:`from_dict` gives back an equal plan.
        """
        out = {"format": PLAN_FORMAT, "version": PLAN_FORMAT_VERSION}
        for f in fields(self):
            if f.name == "inputs":
                continue
            v = getattr(self, f.name)
            if f.name == "layers":
                v = [_enc({g.name: getattr(lc, g.name) for g in fields(lc)}) for lc in v]
            elif f.name == "baselines":
                v = {k: _enc({g.name: getattr(b, g.name) for g in fields(b)})
                     for k, b in v.items()}
            elif f.name == "cross_check":
                v = _enc(v.to_dict())
            else:
                v = _enc(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, data: Mapping, *, source: str = "<dict>") -> "Plan":
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        FormatError
            If the data is not a plan document of a known version.
        """
        data = read_document(source, PLAN_FORMAT, PLAN_FORMAT_VERSION, data=data,
                             what="plan")
        f = Fields(source)
        f.keys(data, _PLAN_KEYS, required=_PLAN_REQUIRED)
        f.records(data["layers"], _LAYER_KEYS, "layers", required=_LAYER_KEYS - {"node"})
        for k, b in f.mapping(data["baselines"], "baselines").items():
            f.keys(b, _BASELINE_KEYS, f"baselines.{k}", required=_BASELINE_REQUIRED)
        f.keys(data["cross_check"], _CROSS_CHECK_KEYS, "cross_check")
        try:
            kw = {g.name: _dec(data[g.name]) for g in fields(cls) if g.name in data}
            kw["layers"] = tuple(
                LayerChoice(**{**d, "degrees": {k: int(x) for k, x in d["degrees"].items()}})
                for d in kw["layers"])
            kw["baselines"] = {k: Baseline(**{**d, "assignment": tuple(d["assignment"])})
                               for k, d in kw["baselines"].items()}
            kw["cross_check"] = CrossCheck.from_dict(kw["cross_check"])
            kw["memory_bytes"] = tuple(kw["memory_bytes"])
            kw["assignment"] = tuple(kw.get("assignment", ()))
            kw["rerank"] = tuple(kw.get("rerank", ()))
            return cls(**kw)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise FormatError(f"{source}: malformed plan document ({type(exc).__name__}: "
                              f"{exc})") from None

    def to_json(self, *, indent: int | None = 2) -> str:
        """The plan as a JSON string (see :meth:`to_dict`)."""
        return dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Inverse of :meth:`to_json`.

        Raises
        ------
        FormatError
            If the text is not JSON or not a plan document.
        """
        return cls.from_dict(loads(text, source="<json>", what="plan"), source="<json>")

    def save(self, path: str | os.PathLike) -> None:
        """Write the plan as JSON to ``path`` (gzip-compressed when it ends in ``.gz``)."""
        write_json(path, self.to_dict(), indent=2)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Plan":
        """Read a plan written by :meth:`save` (gzip-compressed or not).

        Raises
        ------
        FormatError
            If the file is missing, unreadable, not JSON, or not a plan (names the file).
        """
        return cls.from_dict(read_json(path, what="plan file"), source=str(path))

    # -------------------------------------------------------------- text
    def __str__(self) -> str:
        return format_plan(self)


# ---------------------------------------------------------------------- JSON helpers
_enc, _dec = encode, decode

#: The keys of a plan document, of one layer and of one baseline (others are refused, the
#: nearest known key named: :meth:`milp_parallel.io.Fields.keys`).
_PLAN_KEYS = frozenset({"format", "version"} | {f.name for f in fields(Plan)} - {"inputs"})
_PLAN_REQUIRED = frozenset(f.name for f in fields(Plan)
                           if f.default is dataclasses.MISSING
                           and f.default_factory is dataclasses.MISSING)
_LAYER_KEYS = frozenset(f.name for f in fields(LayerChoice))
_BASELINE_KEYS = frozenset(f.name for f in fields(Baseline))
_BASELINE_REQUIRED = frozenset(f.name for f in fields(Baseline)
                               if f.default is dataclasses.MISSING)
#: CrossCheck.to_dict's keys and those of the first version's form.
_CROSS_CHECK_KEYS = frozenset({f.name for f in fields(CrossCheck)}
                              | {"verdict", "exact_solver", "exact_objective", "exact_seconds"})


def _json_safe(stats: Mapping) -> dict:
    """Solver stats as plain JSON data (arrays become lists, objects their repr)."""
    return _dec(_enc(dict(stats)))


# ---------------------------------------------------------------------- text table
def _ms(s: float) -> str:
    return "inf" if not math.isfinite(s) else f"{s * 1e3:.4g}"


def _gib(b: float) -> str:
    return "inf" if not math.isfinite(b) else f"{b / 2**30:.3f}"


def format_plan(plan: Plan) -> str:
    """The plan as a readable text table (what ``str(plan)`` returns)."""
    lines = []
    status = plan.status.upper()
    if plan.status != OPTIMAL:
        status += f" (NOT proved optimal; bound {_ms(plan.bound)} ms, gap {plan.gap:.3g})"
    lines.append(f"Plan for {plan.model} on {plan.cluster}: {plan.devices} devices, "
                 f"{plan.dtype}, {_batch_text(plan)}")
    better = plan.better_baseline
    if better is not None:
        lines.append(
            f"WARNING: the step simulator ranks the {better.name} baseline above this plan: "
            f"plan predicted {_ms(plan.step_seconds)} ms, simulated "
            f"{_ms(plan.simulated_step_seconds)} ms; {better.name} predicted "
            f"{_ms(better.step_seconds)} ms, simulated {_ms(better.simulated_step_seconds)} "
            "ms (the plan is optimal for the solver's prediction only; solve(..., rerank=k) "
            "chooses by simulated time)")
    lines.append(f"solver {plan.solver}: {status}, objective {_ms(plan.objective)} ms, "
                 f"{plan.solve_seconds:.3f} s")
    lines.append(f"step {_ms(plan.step_seconds)} ms = compute {_ms(plan.compute_seconds)} + "
                 f"sync {_ms(plan.sync_seconds)} + transfer {_ms(plan.transfer_seconds)} ms; "
                 f"throughput {plan.throughput:.1f} samples/s")
    if plan.simulated_step_seconds is not None:
        lines.append(f"simulated step {_ms(plan.simulated_step_seconds)} ms (overlap, buckets "
                     "and concurrency; the line above is the solver's separable prediction)")
    if plan.rerank:
        chosen = next(c for c in plan.rerank if c["chosen"])
        which = (f"the #{chosen['rank'] + 1} by prediction" if chosen["rank"] is not None
                 else f"the {chosen['baseline']} baseline")
        k = sum(c["rank"] is not None for c in plan.rerank)
        lines.append(f"re-ranked the {k} best plans and the baselines by simulated time: "
                     f"chose {which}")
    cov = plan.profile_coverage
    if cov:
        n = sum(len(cov.get(k, ())) for k in ("matched", "partial", "unmatched"))
        line = (f"profile {cov.get('table', '')}: {len(cov.get('matched', ()))} of {n} layers "
                "priced from measurements")
        for key, what in (("partial", "in part"), ("unmatched", "by the FLOP estimate only")):
            names = cov.get(key, ())
            if names:
                line += (f"; {len(names)} {what} ({', '.join(names[:4])}"
                         f"{', ...' if len(names) > 4 else ''})")
        lines.append(line)
    budget = ("no budget" if plan.memory_limit_bytes is None
              else f"budget {_gib(plan.memory_limit_bytes)} GiB")
    lines.append(f"memory: peak {_gib(plan.peak_memory_bytes)} GiB per device "
                 f"(capacity {_gib(plan.memory_capacity_bytes)} GiB, {budget})")
    eff = plan.budget_effect
    if eff:
        line = (f"the budget binds on device {eff['device']} ({_gib(eff['headroom_bytes'])} GiB "
                "left)")
        if eff.get("unconstrained_step_seconds") is not None:
            line += (f"; without it the step would be "
                     f"{_ms(eff['unconstrained_step_seconds'])} ms: the budget costs "
                     f"{100 * eff['cost_of_budget']:.3g}%")
        lines.append(line)
    lines.append("")
    w = max([len("layer")] + [len(lc.name) for lc in plan.layers])
    wo = max([len("op")] + [len(lc.op) for lc in plan.layers])
    wc = max([len("config")] + [len(lc.config) for lc in plan.layers])
    head = (f"{'layer':<{w}}  {'op':<{wo}}  {'config':<{wc}}  {'dev':>4}  {'compute ms':>10}  "
            f"{'sync ms':>9}  {'xfer ms':>9}  {'mem MiB':>9}")
    lines += [head, "-" * len(head)]
    for lc in plan.layers:
        cfg = lc.config + ("" if not lc.merged else "")
        note = f"  (follows {lc.node})" if lc.merged else ""
        lines.append(f"{lc.name:<{w}}  {lc.op:<{wo}}  {cfg:<{wc}}  {lc.n_devices:>4}  "
                     f"{_ms(lc.compute_seconds):>10}  {_ms(lc.sync_seconds):>9}  "
                     f"{_ms(lc.transfer_seconds):>9}  {lc.memory_bytes / 2**20:>9.2f}{note}")
    if plan.baselines:
        lines += ["", f"{'baseline':<12}  {'step ms':>10}  {'sim ms':>9}  {'compute':>9}  "
                      f"{'sync':>9}  {'xfer':>9}  {'peak GiB':>8}  {'fits':>4}  {'speedup':>7}  "
                      f"{'sim x':>7}  strategy"]
        for b in plan.baselines.values():
            sim = "-" if b.simulated_step_seconds is None else _ms(b.simulated_step_seconds)
            sim_x = "-"
            if b.simulated_step_seconds is not None and plan.simulated_step_seconds:
                sim_x = f"{b.simulated_step_seconds / plan.simulated_step_seconds:.2f}x"
            lines.append(f"{b.name:<12}  {_ms(b.step_seconds):>10}  {sim:>9}  "
                         f"{_ms(b.compute_seconds):>9}"
                         f"  {_ms(b.sync_seconds):>9}  {_ms(b.transfer_seconds):>9}  "
                         f"{_gib(b.peak_memory_bytes):>8}  {'yes' if b.feasible else 'NO':>4}  "
                         f"{b.speedup:>6.2f}x  {sim_x:>7}  {b.description}")
        lines.append("(speedup: baseline / plan by the solver's prediction; sim x: the same "
                     "by the step simulator, < 1 where the simulator finds the baseline faster)")
    cc = plan.cross_check
    extra = ""
    if cc.checker_objective is not None:
        extra = (f" ({cc.checker} {cc.checker_status}: {_ms(cc.checker_objective)} ms in "
                 f"{cc.checker_seconds:.3f} s; {plan.solver}: {plan.solve_seconds:.3f} s)")
    lines += ["", f"cross-check: {cc.verdict}{extra}"]
    return "\n".join(lines)


def _batch_text(plan: Plan) -> str:
    """``"batch 512 (global, 32 per device)"`` and where the batch came from."""
    per = plan.batch_per_device
    text = (f"batch {plan.batch_size} (global, {per:.4g} per device"
            f"{'' if per == int(per) else ', uneven'})")
    if plan.batch_origin == "default":
        text += (" - the model's default global batch, not scaled with the devices; give "
                 "batch_size= (global) or batch_per_device=")
    return text


# ---------------------------------------------------------------------- memory diagnosis
def least_memory_bytes(problem: Problem) -> np.ndarray | None:
    """Per device, the least memory any assignment needs (all-live model).

    The sum over nodes of each node's least memory among its configurations of finite cost:
    exact per device for the all-live model (every node live at once), a lower bound for the
    interval model. ``None`` without memory tables.
    """
    if problem.memory is None:
        return None
    total = np.zeros(problem.n_devices)
    for c, m in zip(problem.node_costs, problem.memory):
        fin = np.isfinite(c)
        total += (m[fin] if fin.any() else m).min(axis=0)
    return total


def _infeasible_error(problem: Problem, result: SolveResult | None, what: str
                      ) -> InfeasibleError:
    budget = problem.memory_limit
    least = None
    for key in ("least_memory", "least_peak_memory"):     # dp's and brute's stats
        if result is not None and key in result.stats and problem.memory is not None:
            least = np.broadcast_to(np.asarray(result.stats[key], dtype=float),
                                    (problem.n_devices,))
            break
    if least is None:
        least = least_memory_bytes(problem)
    if least is None or budget is None:
        return InfeasibleError(f"{what}: no assignment has a finite cost (every choice of some "
                               "layer is forbidden); check the configuration options")
    over = least - budget
    d = int(np.argmax(over))
    need, have = float(least[d]), float(budget[d])
    if need > have * (1 + MEMORY_RTOL):
        msg = (f"{what}: no assignment fits in memory: the least memory any assignment needs "
               f"on device {d} is {need:.6g} bytes ({need / 2**30:.3f} GiB), the budget is "
               f"{have:.6g} bytes ({have / 2**30:.3f} GiB); raise memory_limit, use more "
               "devices or a smaller batch")
    else:
        need = float(np.max(least))
        have = float(np.min(budget))
        msg = (f"{what}: no assignment fits in memory on every device at once, although each "
               f"device alone can reach {need:.6g} bytes ({need / 2**30:.3f} GiB) against the "
               f"budget of {have:.6g} bytes ({have / 2**30:.3f} GiB); raise memory_limit, use "
               "more devices or a smaller batch")
    return InfeasibleError(msg, least_memory_bytes=need, budget_bytes=have)


# ---------------------------------------------------------------------- inputs
def _is_path(x) -> bool:
    if isinstance(x, os.PathLike):
        return True
    return isinstance(x, str) and (x.endswith((".json", ".json.gz")) or os.sep in x
                                   or (os.altsep is not None and os.altsep in x))


def _load_model(model, batch_size: int | None):
    """``(graph, name)`` from a zoo name, a LayerGraph or a graph JSON path."""
    from .graph import LayerGraph
    if batch_size is not None:
        if isinstance(batch_size, (bool, np.bool_)) \
                or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidGraphError(f"batch_size must be a positive integer, got "
                                    f"{batch_size!r:.40}")
        batch_size = int(batch_size)
    if isinstance(model, LayerGraph):
        graph, name = model, getattr(model, "name", None) or "graph"
    elif _is_path(model):
        path = Path(model)
        if not path.exists():
            raise FormatError(f"{path}: no such model file (give a zoo name such as 'alexnet', "
                              "a LayerGraph, or the path of a graph JSON file)")
        graph = LayerGraph.load(path)
        name = getattr(graph, "name", None) or path.name.split(".")[0]
    elif isinstance(model, str):
        from . import models
        graph = models.get(model, batch_size=batch_size)
        return graph, model
    else:
        raise InvalidGraphError(f"model must be a zoo name, a LayerGraph or a path, got "
                                f"{type(model).__name__}")
    if len(graph) == 0:
        raise InvalidGraphError(f"model {name!r} has no layers; add at least an input layer")
    if batch_size is not None and batch_size != graph.batch_size:
        graph = graph.with_batch_size(batch_size)
    return graph, str(name)


def _is_count(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _load_cluster(cluster, devices: int | None):
    """``(topology, name)`` from a preset name, a Topology or a cluster JSON path."""
    from .topology import Topology
    if devices is not None and (not _is_count(devices) or devices < 1):
        raise InvalidTopologyError(f"devices={devices!r:.40}: give a whole number >= 1 (the "
                                   "first devices of the cluster)")
    if isinstance(cluster, Topology):
        topo = cluster
    elif _is_path(cluster):
        path = Path(cluster)
        if not path.exists():
            raise FormatError(f"{path}: no such cluster file (give a preset name, a Topology, "
                              "or the path of a cluster JSON file)")
        topo = Topology.load(path)
    elif isinstance(cluster, str):
        from . import clusters
        topo = clusters.get(cluster)
    else:
        raise InvalidTopologyError(f"cluster must be a preset name, a Topology or a path, got "
                                   f"{type(cluster).__name__}")
    name = getattr(topo, "name", None) or (cluster if isinstance(cluster, str) else "cluster")
    if (devices is not None and isinstance(cluster, str) and not _is_path(cluster)
            and devices > topo.n_devices):
        # a preset grows to as many nodes as the devices asked for need (the builder then
        # checks the count against its size limits before allocating anything)
        from . import clusters
        per_node = topo.levels[0].fanout if len(topo.levels) > 1 else topo.n_devices
        topo = clusters.get(cluster, nodes=-(-int(devices) // per_node))
    if devices is not None:
        if not 1 <= devices <= topo.n_devices:
            raise InvalidTopologyError(
                f"devices={devices!r}: give a whole number from 1 to {topo.n_devices} (the "
                f"devices of cluster {name!r}), or a larger cluster")
        if devices != topo.n_devices:
            topo = topo.with_devices(int(devices))
    return topo, str(name)


def _memory_budget(memory_limit, topo) -> float | None:
    """The budget per device in bytes (:func:`~milp_parallel.units.parse_memory_limit`):
    ``None`` or ``"device"`` -> the device memory; ``"none"`` or ``inf`` -> no budget."""
    from .units import DEVICE_MEMORY, parse_memory_limit
    return parse_memory_limit(memory_limit, device_bytes=float(topo.device.memory_bytes),
                              default=DEVICE_MEMORY)


# ---------------------------------------------------------------------- layer accounting
class _Accounting:
    """Maps assignments of a built problem back to layers and splits their costs.

    Per-layer compute, sync and memory are the rows of the builder's per-member tables for the
    chosen configuration (the very numbers summed into the problem's node costs); transfers
    are the cost model's ``t_x`` of each graph edge between two nodes, attributed to the
    consumer (the Problem's edge tables are sums of these). So the split adds up to the
    objective.
    """

    def __init__(self, built):
        self.built = built
        self.problem: Problem = built.problem
        self.graph = built.graph
        self.cm = built.cost_model
        self.layers = tuple(self.graph.layers)
        self.node_of = dict(built.node_of)
        self.heads = tuple(m[0] for m in built.members)
        self.member_index = {name: (v, j) for v, ms in enumerate(built.members)
                             for j, name in enumerate(ms)}
        self.edges = [(u, w, i) for e in built.edge_members for (u, w, i) in e]
        self.nodes = [NodeConfigs(self.graph.layer(h).op, tuple(self.graph.layer(h).dims),
                                  np.asarray(c, dtype=np.int64))
                      for h, c in zip(self.heads, built.configs)]

    def degrees(self, name: str, a: np.ndarray) -> np.ndarray:
        v = self.node_of[name]
        return np.asarray(self.built.configs[v][a[v]], dtype=np.int64)

    def breakdown(self, a: np.ndarray) -> dict[str, list[float]]:
        """Per layer ``[compute, sync, transfer, memory on its most loaded device]``."""
        res = {}
        for lay in self.layers:
            v, j = self.member_index[lay.name]
            mc = self.built.member_costs[v][j]
            c = a[v]
            res[lay.name] = [float(mc.compute_seconds[c]), float(mc.sync_seconds[c]), 0.0,
                             float(np.max(mc.memory_bytes[c]))]
        configs = self.built.configs
        for u, w, i in self.edges:
            # the build's (cached) table of this graph edge: one lookup, not a new t_x
            nu, nw = self.node_of[u], self.node_of[w]
            t = self.cm.transfer_table(self.graph.layer(u), self.graph.layer(w), i,
                                       configs[nu], configs[nw])
            res[w][2] += float(t[a[nu], a[nw]])
        return res

    def totals(self, a: np.ndarray) -> tuple[float, float, float]:
        parts = np.array([x[:3] for x in self.breakdown(a).values()]).reshape(-1, 3)
        return tuple(float(s) for s in parts.sum(axis=0))


# ---------------------------------------------------------------------- solve
def _describe(labels: Sequence[str]) -> str:
    """``"n=4"`` when every node has the same label, else the labels with their counts."""
    uniq: dict[str, int] = {}
    for s in labels:
        uniq[s] = uniq.get(s, 0) + 1
    if len(uniq) == 1:
        return next(iter(uniq))
    return ", ".join(f"{s} x{k}" for s, k in sorted(uniq.items(), key=lambda t: -t[1]))


@dataclass(frozen=True)
class _Built:
    built: Any                      # build.BuiltProblem (budget applied)
    budget: float | None
    model_name: str
    cluster_name: str
    batch_origin: str = "default"   # see Plan.batch_origin


def _build(model, cluster, *, batch_size=None, devices=None, memory_limit=None,
           config_options=None, cost_model=None, profile=None,
           batch_per_device=None) -> _Built:
    from .build import build

    check_exclusive(batch_size=batch_size, batch_per_device=batch_per_device)
    check_exclusive(cost_model=cost_model, profile=profile)
    space = _config_space(config_options)
    _check_cost_model(cost_model)
    topo, cluster_name = _load_cluster(cluster, devices)
    if batch_per_device is not None:
        batch_size = check_whole("batch_per_device", batch_per_device) * topo.n_devices
    graph, model_name = _load_model(model, batch_size)
    _check_dims(space, graph, model_name)
    if profile is not None:
        from .costs import CostModel
        from .profile import ProfileTable
        if not isinstance(profile, ProfileTable):
            if not isinstance(profile, (str, os.PathLike)):
                raise InvalidOptionError(f"profile must be a ProfileTable or the path of a "
                                         f"profile table file, got {type(profile).__name__}")
            profile = ProfileTable.load(profile)
        cost_model = CostModel(topo, profile=profile)
    budget = _memory_budget(memory_limit, topo)
    b = build(graph, topo, cost_model=cost_model, memory_limit=budget, **space)
    origin = ("batch_per_device" if batch_per_device is not None
              else "batch_size" if batch_size is not None else "default")
    return _Built(b, budget if b.problem.has_budget else None, model_name, cluster_name,
                  origin)


def _config_space(config_options) -> dict[str, Any]:
    """``config_options`` as build keywords, every key and value checked (see
    :class:`~milp_parallel.configs.ConfigOptions` and :class:`~milp_parallel.configs.
    SizeLimits`)."""
    from .configs import ConfigOptions, SizeLimits
    if config_options is None:
        return {}
    if isinstance(config_options, ConfigOptions):
        return {"config_options": config_options}
    opts = check_mapping("config_options", config_options, "of ConfigOptions fields and "
                         "size limits, e.g. {'power_of_two': False, 'max_degree': {'h': 4}}")
    known = [f.name for f in fields(ConfigOptions)] + list(SizeLimits.field_names())
    check_keys("config_options", opts, known)
    space = {k: v for k, v in opts.items() if k not in SizeLimits.field_names()}
    limits = {k: v for k, v in opts.items() if k in SizeLimits.field_names()}
    out: dict[str, Any] = {"config_options": ConfigOptions(**space)}
    if limits:
        out["limits"] = SizeLimits(**limits)
    return out


def _check_dims(space: Mapping[str, Any], graph, model_name: str) -> None:
    """Refuse a cap or tile extent on a dimension no layer of the graph has (it would be
    ignored without a word)."""
    opts = space.get("config_options")
    if opts is None:
        return
    dims = list(dict.fromkeys(d for lay in graph.layers for d in lay.dims))
    for what in ("max_degree", "min_tile"):
        for d in getattr(opts, what):
            if d not in dims:
                from .graph import DIM_LETTERS
                raise InvalidOptionError(
                    f"config_options.{what}: no layer of {model_name} has dimension {d!r} "
                    f"({DIM_LETTERS[d]}), so it would change nothing; its dimensions: "
                    + ", ".join(f"{x} ({DIM_LETTERS.get(x, 'other')})" for x in dims))


def _check_cost_model(cost_model) -> None:
    from .costs import CostModel
    if cost_model is not None and not isinstance(cost_model, CostModel):
        raise InvalidOptionError(
            f"cost_model must be a milp_parallel.costs.CostModel made for the cluster (e.g. "
            f"CostModel(topology, dtype='bf16')) or None for the default, got "
            f"{type(cost_model).__name__} {show(cost_model, 40)}; for measured layer times "
            "pass profile=, for another dtype clusters.get(..., dtype=...)")


# ---------------------------------------------------------------------- constraints
@dataclass(frozen=True)
class _SolveInputs:
    """The arguments of one :func:`solve` call, so that a plan can be solved again."""

    model: Any
    cluster: Any
    batch_size: Any = None
    batch_per_device: Any = None
    devices: Any = None
    solver: str = "auto"
    memory_limit: Any = None
    time_limit: Any = None
    config_options: Any = None
    cost_model: Any = None
    profile: Any = None
    solver_options: Mapping[str, Any] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    forbid: Mapping[str, Any] = field(default_factory=dict)


def _config_index(built, layer: str, config: Any, what: str) -> tuple[int, int]:
    """``(node, configuration index)`` of ``config`` for ``layer`` of a built problem."""
    from .baselines import parse_config_label
    if not isinstance(layer, str) or layer not in built.node_of:
        raise unknown_name(what, "layer", layer, list(built.node_of))
    v = built.node_of[layer]
    head = built.graph.layer(built.members[v][0])
    labels = built.problem.config_labels[v]
    if isinstance(config, Mapping):
        want = {str(d): k for d, k in config.items()}
    elif isinstance(config, str):
        try:
            want = parse_config_label(config)
        except ValueError as exc:
            raise InvalidOptionError(f"{what}: layer {layer!r}: cannot read configuration "
                                     f"{config!r} ({exc}); write e.g. 'n=2 h=2' or 'serial'"
                                     ) from None
    else:
        raise InvalidOptionError(f"{what}: layer {layer!r}: a configuration is a label such "
                                 f"as 'n=2 h=2' or a mapping {{dim: degree}}, got "
                                 f"{type(config).__name__}")
    bad = [d for d in want if d not in head.dims]
    ok = all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1
             for k in want.values())
    if not bad and ok:
        target = np.array([int(want.get(d, 1)) for d in head.dims])
        hits = np.nonzero((built.configs[v] == target).all(axis=1))[0]
        if hits.size:
            return v, int(hits[0])
    shown = ", ".join(repr(x) for x in labels[:12]) + (", ..." if len(labels) > 12 else "")
    raise InvalidOptionError(f"{what}: layer {layer!r} has no configuration {config!r} "
                             f"(dims {''.join(head.dims)}); its configurations: {shown}")


def _constraints(built, fixed: Mapping[str, Any] | None,
                 forbid: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"fixed": {node: label}, "forbid": {node: [labels]}}`` by problem node name."""
    out: dict[str, Any] = {}
    labels = built.problem.config_labels
    names = built.problem.node_names
    for what, arg in (("fixed", fixed), ("forbid", forbid)):
        if arg is None:
            continue
        if not isinstance(arg, Mapping):
            raise InvalidOptionError(f"{what} must be a mapping {{layer: configuration}}, got "
                                     f"{type(arg).__name__}")
        for layer, value in arg.items():
            if what == "fixed":
                v, c = _config_index(built, layer, value, what)
                prev = out.setdefault("fixed", {}).get(names[v])
                if prev is not None and prev != labels[v][c]:
                    raise InvalidOptionError(
                        f"fixed: layer {layer!r} shares its layout with {names[v]!r}, already "
                        f"pinned to {prev!r}; pin one of them")
                out["fixed"][names[v]] = labels[v][c]
            else:
                many = value if isinstance(value, (list, tuple)) else [value]
                for one in many:
                    v, c = _config_index(built, layer, one, what)
                    bans = out.setdefault("forbid", {}).setdefault(names[v], [])
                    if labels[v][c] not in bans:
                        bans.append(labels[v][c])
    return out


def _constrained(built, constraints: Mapping[str, Any]) -> Problem:
    """The built problem with pinned and forbidden configurations priced ``inf``."""
    p = built.problem
    if not constraints:
        return p
    index = {n: v for v, n in enumerate(p.node_names)}
    costs = [np.array(c) for c in p.node_costs]
    for name, label in constraints.get("fixed", {}).items():
        v = index[name]
        keep = p.config_labels[v].index(label)
        pinned = np.full_like(costs[v], math.inf)
        pinned[keep] = costs[v][keep]
        costs[v] = pinned
    for name, bans in constraints.get("forbid", {}).items():
        v = index[name]
        for label in bans:
            costs[v][p.config_labels[v].index(label)] = math.inf
    for v, c in enumerate(costs):
        if not np.isfinite(c).any():
            raise InvalidOptionError(f"forbid: every configuration of layer "
                                     f"{p.node_names[v]!r} is forbidden or costs inf")
    return Problem(costs, p.edges, p.edge_costs, memory=p.memory, memory_limit=p.memory_limit,
                   intervals=p.intervals, node_names=p.node_names, config_labels=p.config_labels)


# ---------------------------------------------------------------------- explanations
@dataclass(frozen=True)
class LayerChange:
    """A layer whose configuration changes when another one is forced.

    Attributes
    ----------
    name : str
    before, after : str
        Its configuration in the plan and in the forced plan.
    neighbour : bool
        Whether it is adjacent (producer or consumer) to the forced layer in the graph.
    delta_seconds : float
        Its own compute + sync + transfer, forced minus plan.
    """

    name: str
    before: str
    after: str
    neighbour: bool
    delta_seconds: float


@dataclass(frozen=True)
class Explanation:
    """What forcing one layer's configuration costs (:meth:`Plan.explain`).

    Attributes
    ----------
    layer, config : str
        The layer and the configuration forced on it.
    original_config : str
        The plan's configuration of that layer.
    feasible : bool
        Whether a plan with that choice exists (``False``: ``reason`` says why).
    reason : str
        Empty when feasible.
    step_seconds : float
        The forced plan's step time (``inf`` when infeasible).
    delta_seconds, delta_compute_seconds, delta_sync_seconds, delta_transfer_seconds : float
        Forced minus plan: the step time and its split (``> 0``: the choice is slower).
    delta_memory_bytes : float
        Forced minus plan peak memory per device (largest device).
    changes : tuple of LayerChange
        The other layers whose configuration changes, graph neighbours first.
    plan : Plan or None
        The forced plan.
    """

    layer: str
    config: str
    original_config: str
    feasible: bool
    reason: str
    step_seconds: float
    delta_seconds: float
    delta_compute_seconds: float
    delta_sync_seconds: float
    delta_transfer_seconds: float
    delta_memory_bytes: float
    changes: tuple[LayerChange, ...] = ()
    plan: Any = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        head = f"{self.layer}: {self.config} instead of {self.original_config}"
        if not self.feasible:
            return f"{head}: infeasible ({self.reason})"
        if self.config == self.original_config:
            return f"{head}: the plan's own choice (no change)"
        sign = "slower" if self.delta_seconds > 0 else "faster" if self.delta_seconds < 0 \
            else "as fast"
        lines = [f"{head}: step {_ms(self.step_seconds)} ms, {_signed_ms(self.delta_seconds)} "
                 f"ms ({sign}) = compute {_signed_ms(self.delta_compute_seconds)} + sync "
                 f"{_signed_ms(self.delta_sync_seconds)} + transfer "
                 f"{_signed_ms(self.delta_transfer_seconds)} ms; peak memory "
                 f"{self.delta_memory_bytes / 2**20:+.2f} MiB per device"]
        if not self.changes:
            lines.append("  no other layer changes")
        for ch in self.changes:
            lines.append(f"  {ch.name}: {ch.before} -> {ch.after} "
                         f"({_signed_ms(ch.delta_seconds)} ms)"
                         + ("  [neighbour]" if ch.neighbour else ""))
        return "\n".join(lines)


def _signed_ms(seconds: float) -> str:
    return "inf" if not math.isfinite(seconds) else f"{seconds * 1e3:+.4g}"


def explain(plan: Plan, layer: str, config: str | Mapping[str, int], *, model: Any = None,
            cluster: Any = None) -> Explanation:
    """:meth:`Plan.explain` as a function (see there)."""
    from . import clusters, models
    from .errors import UnknownNameError
    inputs: _SolveInputs | None = plan.inputs
    if model is not None or cluster is not None or inputs is None:
        m = model if model is not None else (inputs.model if inputs else plan.model)
        c = cluster if cluster is not None else (inputs.cluster if inputs else plan.cluster)
        if inputs is None:
            if (isinstance(m, str) and not _is_path(m) and m not in models.names()) or \
                    (isinstance(c, str) and not _is_path(c) and c not in clusters.names()):
                raise InvalidOptionError(
                    f"this plan ({plan.model} on {plan.cluster}) was not made by solve() in "
                    "this process and its model or cluster is not a zoo / preset name: pass "
                    "model=... and cluster=... to explain()")
            cons = plan.constraints or {}
            inputs = _SolveInputs(
                model=m, cluster=c, batch_size=plan.batch_size, devices=plan.devices,
                solver=plan.solver,
                memory_limit="none" if plan.memory_limit_bytes is None
                else plan.memory_limit_bytes,
                fixed=dict(cons.get("fixed", {})), forbid=dict(cons.get("forbid", {})))
        else:
            inputs = dataclasses.replace(inputs, model=m, cluster=c)
    try:
        before = plan.layer(layer)
    except KeyError:
        names = [lc.name for lc in plan.layers]
        raise UnknownNameError(f"explain: the plan has no layer {layer!r:.60}; its layers "
                               f"include {', '.join(names[:8])}"
                               f"{', ...' if len(names) > 8 else ''}") from None
    label = config if isinstance(config, str) else " ".join(
        f"{d}={int(k)}" for d, k in config.items() if int(k) > 1) or "serial"
    kw = dict(batch_size=inputs.batch_size, batch_per_device=inputs.batch_per_device,
              devices=inputs.devices, solver=inputs.solver,
              memory_limit=inputs.memory_limit, time_limit=inputs.time_limit,
              config_options=inputs.config_options, cost_model=inputs.cost_model,
              profile=inputs.profile, cross_check=False, **inputs.solver_options)
    node = before.node or before.name     # the forced choice replaces the node's own limits
    kw["forbid"] = {k: v for k, v in inputs.forbid.items() if k != node} or None
    fixed = {k: v for k, v in inputs.fixed.items() if k != node}
    fixed[layer] = config
    try:
        forced = solve(inputs.model, inputs.cluster, fixed=fixed, **kw)
    except InfeasibleError as exc:
        return Explanation(layer, label, before.config, False, str(exc), math.inf, math.inf,
                           math.inf, math.inf, math.inf, math.nan)
    after = {lc.name: lc for lc in forced.layers}
    graph, _ = _load_model(inputs.model, inputs.batch_size)
    near = set(graph.predecessors(layer)) | set(graph.successors(layer)) \
        if layer in graph else set()
    changes = [LayerChange(lc.name, lc.config, after[lc.name].config, lc.name in near,
                           after[lc.name].seconds - lc.seconds)
               for lc in plan.layers
               if lc.name != layer and lc.name in after and after[lc.name].config != lc.config]
    changes.sort(key=lambda ch: (not ch.neighbour, -abs(ch.delta_seconds)))
    return Explanation(
        layer=layer, config=after[layer].config, original_config=before.config, feasible=True,
        reason="", step_seconds=forced.step_seconds,
        delta_seconds=forced.step_seconds - plan.step_seconds,
        delta_compute_seconds=forced.compute_seconds - plan.compute_seconds,
        delta_sync_seconds=forced.sync_seconds - plan.sync_seconds,
        delta_transfer_seconds=forced.transfer_seconds - plan.transfer_seconds,
        delta_memory_bytes=forced.peak_memory_bytes - plan.peak_memory_bytes,
        changes=tuple(changes), plan=forced)


def make_problem(model, cluster, *, batch_size: int | None = None, devices: int | None = None,
                 memory_limit: float | str | None = None,
                 config_options: Mapping[str, Any] | None = None, cost_model=None,
                 profile=None) -> Problem:
    """The :class:`~milp_parallel.Problem` that :func:`solve` would solve.

    Same inputs and defaults as :func:`solve` (the budget included), for exporting the
    problem, solving it with :func:`~milp_parallel.solve_problem` directly, or evaluating
    assignments such as a plan's ``assignment``.

    Raises
    ------
    UnknownNameError, FormatError, InvalidGraphError, InvalidTopologyError,
    InvalidProblemError
        As :func:`solve`.
    """
    return _build(model, cluster, batch_size=batch_size, devices=devices,
                  memory_limit=memory_limit, config_options=config_options,
                  cost_model=cost_model, profile=profile).built.problem


def solve(model, cluster, *, batch_size: int | None = None,
          batch_per_device: int | None = None, devices: int | None = None,
          solver: str = "auto", memory_limit: float | str | None = None,
          time_limit: float | None = None, cross_check: bool = True,
          config_options: Mapping[str, Any] | None = None, cost_model=None,
          profile=None, fixed: Mapping[str, Any] | None = None,
          forbid: Mapping[str, Any] | None = None, simulate: bool = True,
          rerank: int | None = None, progress: bool | None = None,
          **solver_options: Any) -> Plan:
    """Find the fastest layer-wise parallelization of a model on a cluster.

    Parameters
    ----------
    model : str, LayerGraph or path
        A zoo name (``milp_parallel.models.names()``), a :class:`~milp_parallel.graph.
        LayerGraph`, or the path of a graph JSON file.
    cluster : str, Topology or path
        A preset name (``milp_parallel.clusters.names()``), a :class:`~milp_parallel.topology.
        Topology`, or the path of a cluster JSON file.
    batch_size : int, optional
        The global batch; default: the zoo model's default (or the graph's own).
    batch_per_device : int, optional
        The batch per device instead (the global batch is this times the devices); give
        ``batch_size`` or ``batch_per_device``, not both. With neither, the model's default
        global batch is used whatever the device count, and the plan says so.
    devices : int, optional
        Use the first ``devices`` devices of the cluster (default: all). A preset named by
        ``cluster`` grows to as many nodes as that takes.
    solver : str
        ``"auto"`` (default), ``"dp"``, ``"highs"``, ``"cbc"``, ``"cpsat"`` or ``"brute"``.
    memory_limit : float or str, optional
        The memory budget per device (read by :func:`~milp_parallel.units.
        parse_memory_limit`): bytes (``12e9``), a size (``"12GiB"``), ``"device"`` (each
        device's memory), ``"none"`` or ``math.inf`` (no budget). ``None`` (default) is
        ``"device"``.
    time_limit : float, optional
        Seconds for the solver (and the cross-check); a solver that runs out returns its
        best assignment with status ``"feasible"``, shown as not proved optimal.
    cross_check : bool
        Also run an independent exact solver and compare (default ``True``): the graph
        search ``dp``, or, when ``solver="dp"``, a MILP backend. Where it cannot run, the
        plan's ``cross_check.verdict`` says ``"not run: <why>"``.
    config_options : ConfigOptions or mapping, optional
        The configuration space (:class:`~milp_parallel.configs.ConfigOptions`, or a mapping
        of its fields such as ``{"power_of_two": False, "max_degree": {"h": 4}}``); the
        mapping may also raise the builder's size limits
        (:class:`~milp_parallel.configs.SizeLimits`: ``{"max_devices": 8192}``).
    cost_model : CostModel, optional
        Default: ``CostModel(topology)`` (it must be made for the same topology, after
        ``devices`` is applied).
    profile : ProfileTable or path, optional
        Measured layer times (:func:`milp_parallel.profile.profile_layers`) used for the
        compute cost instead of FLOP estimates where the table has the tile (the rest fall
        back to estimates). Not together with ``cost_model``.
    fixed : mapping, optional
        Pin layers to a configuration: ``{"conv5_3": "h=2 w=2", "fc6": {"c": 4}}`` (a label
        as :attr:`LayerChoice.config` writes it, or ``{dim: degree}``). A layer merged into
        its producer pins the producer's node (they share the layout).
    forbid : mapping, optional
        Forbid configurations: ``{"conv1": "serial", "fc6": ["c=4", "n=2 c=2"]}``.
    progress : bool, optional
        Show the solver's best cost, bound and gap while it works, on one line of stderr
        (:class:`~milp_parallel.progress.ProgressLine`); default: when stderr is a terminal.
        A ``callback`` in ``solver_options`` is used instead.
    simulate : bool, default True
        Also run the step simulator (:func:`milp_parallel.simulate`) on the plan and every
        baseline (``simulated_step_seconds``).
    rerank : int, optional
        Re-rank the ``rerank`` best distinct assignments (by predicted time,
        :func:`milp_parallel.kbest.k_best`) and the baselines by simulated time and return
        the fastest simulated one (``plan.rerank`` lists them). Costs about ``rerank`` x
        nodes exact solves. ``status``, ``objective`` and ``bound`` stay the solver's (of the
        predicted optimum); ``step_seconds`` is the chosen plan's prediction.
    **solver_options
        Passed to the solver (``threads``, ``gap``, ``verbose``, ...).

    Returns
    -------
    Plan
        With ``plan.explain(layer, config)`` to see what another choice would cost.

    Raises
    ------
    UnknownNameError
        For an unknown model, cluster or solver name, or a layer of ``fixed`` / ``forbid``
        the model does not have (lists the known ones).
    FormatError
        For a model or cluster file that is missing or malformed.
    InvalidGraphError, InvalidTopologyError
        For a bad ``batch_size`` or ``devices`` (a device count the configuration space
        cannot use, e.g. 3 under power-of-two degrees).
    InvalidOptionError
        For a bad ``memory_limit``, ``time_limit``, ``config_options`` or a configuration of
        ``fixed`` / ``forbid`` the layer does not have (lists the ones it has).
    ProblemTooLargeError
        When a size exceeds the builder's limits (names the size and the option).
    InfeasibleError
        When no assignment fits in the memory budget: says the least memory any assignment
        needs and the budget.
    CrossCheckError
        When the solver and the exact search disagree.
    SolverError
        When the solver ends without any assignment (e.g. the time limit ran out first).

    Examples
    --------
    >>> from milp_parallel.plan import solve
    >>> plan = solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
    >>> plan.status, plan.devices, plan.layer("conv1").op
    ('optimal', 4, 'conv')
    >>> print(plan)                                         # doctest: +SKIP
    """
    inputs = _SolveInputs(model=model, cluster=cluster, batch_size=batch_size,
                          batch_per_device=batch_per_device,
                          devices=devices, solver=solver, memory_limit=memory_limit,
                          time_limit=time_limit, config_options=config_options,
                          cost_model=cost_model, profile=profile,
                          solver_options=dict(solver_options))
    try:
        time_limit = validate_time_limit(time_limit)
    except OverflowError:          # an int beyond the float range
        raise InvalidOptionError(f"time_limit={time_limit!r:.30}... is beyond the float range; "
                                 "give seconds > 0 or None") from None
    clock = Deadline(time_limit)          # time_limit covers the whole call
    built = _build(model, cluster, batch_size=batch_size, devices=devices,
                   memory_limit=memory_limit, config_options=config_options,
                   cost_model=cost_model, profile=profile, batch_per_device=batch_per_device)
    b = built.built
    graph, topo, problem, budget = b.graph, b.topology, b.problem, built.budget
    model_name, cluster_name = built.model_name, built.cluster_name
    constraints = _constraints(b, fixed, forbid)
    target = _constrained(b, constraints)       # the problem solved: pins and bans applied

    options = dict(solver_options)
    if time_limit is not None:            # what building left of it
        options["time_limit"] = max(clock.left(), _MIN_SOLVE_SECONDS)
    line = None
    if (sys.stderr.isatty() if progress is None else progress) and "callback" not in options:
        from .progress import ProgressLine
        line = ProgressLine(f"{model_name} on {cluster_name} ({topo.n_devices} devices)")
        options["callback"] = line
    try:
        result = solve_problem(target, solver, **options)
    finally:
        if line is not None:
            line.close()
    logger.info("%s on %s (%d devices): %r", model_name, cluster_name, topo.n_devices, result)

    check = CrossCheck(NOT_RUN, "cross_check=False", solver_seconds=float(result.seconds))
    if cross_check:
        left = clock.left()
        if left is not None and left < _MIN_SOLVE_SECONDS:
            check = CrossCheck(NOT_RUN, f"no time left of time_limit={time_limit:g} s for the "
                               "cross-check (raise time_limit to run it)",
                               solver_seconds=float(result.seconds))
        else:
            check, _ = run_cross_check(target, result, time_limit=left)
    what = f"{model_name} on {cluster_name} ({topo.n_devices} devices)"
    if constraints:
        n_fix, n_ban = len(constraints.get("fixed", {})), len(constraints.get("forbid", {}))
        what += f" with {n_fix} pinned and {n_ban} restricted layer(s)"
    if result.status == INFEASIBLE:
        raise _infeasible_error(target, result, what)
    if result.assignment is None:
        from .errors import SolverError
        raise SolverError(f"{what}: solver {result.solver!r} ended {result.status} without an "
                          f"assignment after {result.seconds:.3g} s; raise time_limit or try "
                          "another solver")

    acc = _Accounting(b)
    a = np.asarray(result.assignment, dtype=np.int64)
    base_asg = baseline_assignments(problem, acc.nodes, topo.n_devices)
    left = None if time_limit is None else max(clock.left(), _MIN_SOLVE_SECONDS)
    sims, reranked = _simulations(b, target, a, simulate, rerank, left, base_asg)
    if reranked:
        a = np.asarray(next(c["assignment"] for c in reranked if c["chosen"]), dtype=np.int64)
        reranked = tuple({k: v for k, v in c.items() if k != "assignment"} for c in reranked)
    ev = problem.evaluate(a)
    parts = acc.breakdown(a)
    layers = []
    for lay in acc.layers:
        v = acc.node_of[lay.name]
        d = acc.degrees(lay.name, a)
        comp, sync, xfer, mem = parts[lay.name]
        layers.append(LayerChoice(
            name=lay.name, op=lay.op, config=problem.config_labels[v][a[v]],
            degrees=degrees_dict(lay.dims, d), n_devices=int(np.prod(d)),
            compute_seconds=comp, sync_seconds=sync, transfer_seconds=xfer, memory_bytes=mem,
            node=acc.heads[v]))
    comp, sync, xfer = (float(sum(p[i] for p in parts.values())) for i in range(3))
    step = float(ev.cost)
    if abs(comp + sync + xfer - step) > 1e-6 * max(abs(step), 1e-300):
        logger.warning("%s: the per-layer split (%.6g s) does not add up to the problem's "
                       "objective (%.6g s)", what, comp + sync + xfer, step)

    baselines = {}
    for name, ba in base_asg.items():
        bev = problem.evaluate(ba)
        bc, bs, bx = acc.totals(ba)
        labels = [problem.config_labels[v][c] for v, c in enumerate(ba)]
        baselines[name] = Baseline(
            name=name, step_seconds=float(bev.cost), compute_seconds=bc, sync_seconds=bs,
            transfer_seconds=bx,
            peak_memory_bytes=float(np.max(bev.peak_memory)) if bev.peak_memory is not None
            else 0.0,
            feasible=bool(bev.feasible),
            speedup=float(bev.cost) / step if step > 0 else math.inf,
            description=_describe(labels), assignment=tuple(int(x) for x in ba),
            simulated_step_seconds=sims(ba))

    plan = Plan(
        model=model_name, cluster=cluster_name, devices=int(topo.n_devices),
        batch_size=int(graph.batch_size), layers=tuple(layers), step_seconds=step,
        compute_seconds=comp, sync_seconds=sync, transfer_seconds=xfer,
        throughput=float(graph.batch_size) / step if step > 0 else math.inf,
        memory_bytes=tuple(float(x) for x in ev.peak_memory) if ev.peak_memory is not None
        else (),
        memory_capacity_bytes=float(topo.device.memory_bytes), solver=result.solver,
        status=result.status, objective=float(result.objective), bound=float(result.bound),
        gap=float(result.gap), solve_seconds=float(result.seconds), cross_check=check,
        baselines=baselines, memory_limit_bytes=budget,
        assignment=tuple(int(x) for x in a), solver_stats=_json_safe(result.stats),
        problem_size={"n_layers": len(acc.layers), "n_nodes": int(problem.n_nodes),
                      "n_edges": int(problem.n_edges),
                      "n_configs": int(problem.n_configs.sum()),
                      "max_configs": int(problem.n_configs.max()),
                      "edge_table_entries": int(sum(t.size for t in problem.edge_costs)),
                      "build_seconds": float(b.build_seconds)},
        constraints=constraints, simulated_step_seconds=sims(a), rerank=tuple(reranked),
        budget_effect=_budget_effect(target, ev, budget, step),
        dtype=_priced_dtype(b.cost_model, topo), batch_origin=built.batch_origin,
        profile_coverage=_coverage(b.cost_model),
        inputs=dataclasses.replace(inputs, fixed=dict(constraints.get("fixed", {})),
                                   forbid=dict(constraints.get("forbid", {}))))
    return plan


def _priced_dtype(cost_model, topo) -> str:
    """The dtype the plan's compute is priced in: the cost model's own, else the cluster's."""
    return str(getattr(cost_model, "dtype", None) or getattr(topo, "dtype", "fp32"))


def _coverage(cost_model) -> dict:
    """:attr:`Plan.profile_coverage` from the cost model's lookups (empty without a profile)."""
    cov = getattr(cost_model, "profile_coverage", None)
    if cov is None:
        return {}
    return {"table": str(cov.table), "matched": list(cov.matched),
            "partial": list(cov.partial), "unmatched": list(cov.unmatched)}



#: The least time a solve or the cross-check is started with under ``time_limit`` (a
#: limit used up by the build still gives the solver this, so it returns an answer).
_MIN_SOLVE_SECONDS = 0.05

#: The most plans ``solve(..., rerank=k)`` re-ranks (each is one more exact solve).
MAX_RERANK = 1000

#: The budget binds when the plan leaves less than this share of it free on some device.
_BINDING_SHARE = 0.01


def _budget_effect(problem: Problem, ev, budget: float | None, step: float) -> dict:
    """What the memory budget costs the plan (see :attr:`Plan.budget_effect`)."""
    if budget is None or ev.peak_memory is None:
        return {}
    d = int(np.argmax(ev.peak_memory))
    headroom = float(budget - ev.peak_memory[d])
    if headroom > _BINDING_SHARE * budget:
        return {}
    out: dict[str, Any] = {"device": d, "headroom_bytes": headroom,
                           "unconstrained_step_seconds": None, "cost_of_budget": None}
    try:
        free = solve_problem(problem.with_memory_limit(None), "dp", time_limit=10.0)
    except Exception as exc:          # noqa: BLE001 - a diagnosis only
        logger.info("the unconstrained optimum was not computed: %s", exc)
        return out
    if free.status == OPTIMAL and free.objective > 0:
        out["unconstrained_step_seconds"] = float(free.objective)
        out["cost_of_budget"] = step / float(free.objective) - 1.0
    return out


def _simulations(built, problem: Problem, a: np.ndarray, simulate: bool,
                 rerank: int | None, time_limit: float | None,
                 baselines: Mapping[str, np.ndarray]):
    """``(simulated time of an assignment or None, re-ranked candidates)`` for solve().

    The candidates are the ``rerank`` best assignments of ``problem`` by predicted time and
    the baselines (feasible ones, not already among them), so the plan is never slower in
    simulation than a baseline."""
    from .simulate import simulate_assignment
    cache: dict[tuple, float] = {}

    def sim(assignment) -> float | None:
        if not simulate and not rerank:
            return None
        key = tuple(int(x) for x in assignment)
        if key not in cache:
            cache[key] = float(simulate_assignment(built, key).step_seconds)
        return cache[key]
    if rerank is None:
        return sim, ()
    from .solvers.kbest import k_best
    rerank = check_whole("rerank", rerank, 1, MAX_RERANK,
                         "each plan re-ranked is one more exact solve")
    opts = {"time_limit": time_limit} if time_limit is not None else {}
    sols = k_best(problem, int(rerank), first=a, **opts)
    cands = [{"rank": i, "baseline": None, "predicted_seconds": s.objective,
              "simulated_seconds": sim(s.assignment), "assignment": s.assignment}
             for i, s in enumerate(sols)]
    seen = {c["assignment"] for c in cands}
    for name, ba in baselines.items():
        key = tuple(int(x) for x in ba)
        ev = problem.evaluate(key)
        if key in seen or not ev.feasible or not np.isfinite(ev.cost):
            continue
        seen.add(key)
        cands.append({"rank": None, "baseline": name, "predicted_seconds": float(ev.cost),
                      "simulated_seconds": sim(key), "assignment": key})
    best = min(cands, key=lambda c: (c["simulated_seconds"], c["predicted_seconds"],
                                     c["rank"] if c["rank"] is not None else len(cands)))
    return sim, [{**c, "chosen": c is best} for c in cands]
