"""The answer as a value: :class:`Plan` (per layer its configuration, time and memory; the
step; the baselines; the cross-check), its text table and its JSON, and the
:class:`Explanation` of forcing one layer's configuration.

A :class:`Plan` is a frozen value: ``str(plan)`` is a readable table, ``plan.to_json()`` and
:meth:`Plan.from_json` round-trip it exactly.

May import: ``io``, ``validation``, ``errors``, ``plan.crosscheck`` (the values it holds),
``solvers.result`` (the status names), ``costs.model`` (the batch-statistics modes a saved
plan may record); :meth:`Plan.explain` reaches :mod:`.planner` lazily.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import numpy as np

from ..costs.model import BATCHNORM_STATS
from ..errors import FormatError
from ..io import Fields, decode, dumps, encode, loads, read_document, read_json, write_json
from ..solvers.result import OPTIMAL
from ..validation import unknown_name
from .crosscheck import CrossCheck

__all__ = ["Plan", "LayerChoice", "Baseline", "Explanation", "LayerChange", "format_plan",
           "PLAN_FORMAT", "PLAN_FORMAT_VERSION"]

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
    runtime_options : dict
        What the program running the plan must do as the plan was priced (the cost model's
        ``gradient_bucket_bytes``, None for one all-reduce per layer; ``bucket_copies``;
        ``batchnorm_stats``), so that a saved plan runs as priced
        (:mod:`milp_parallel.runtime`). Empty for a plan saved before it was recorded (the
        runtime then takes the cost model's defaults).
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
    simulator_certificate: Any = None
    runtime_options: Mapping[str, Any] = field(default_factory=dict)
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
        from .planner import explain  # the planner sits above its values
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
            elif f.name == "simulator_certificate":
                v = None if v is None else _enc(v.to_dict())
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
        if "runtime_options" in data:
            _check_runtime_options(f, data["runtime_options"])
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
            if kw.get("simulator_certificate") is not None:
                from .certify import SimulatorCertificate
                kw["simulator_certificate"] = SimulatorCertificate.from_dict(
                    kw["simulator_certificate"])
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
#: The keys of :attr:`Plan.runtime_options`.
RUNTIME_OPTION_KEYS = frozenset({"gradient_bucket_bytes", "bucket_copies", "batchnorm_stats"})


def _check_runtime_options(f: Fields, opts: Any) -> None:
    """Refuse runtime options a program could not follow (the field named)."""
    f.keys(opts, RUNTIME_OPTION_KEYS, "runtime_options")
    w = "runtime_options."
    if opts.get("gradient_bucket_bytes") is not None:
        f.number(opts["gradient_bucket_bytes"], w + "gradient_bucket_bytes", finite=True,
                 positive=True)
    if "bucket_copies" in opts:
        f.integer(opts["bucket_copies"], w + "bucket_copies", minimum=0)
    if "batchnorm_stats" in opts:
        v = f.string(opts["batchnorm_stats"], w + "batchnorm_stats")
        if v not in BATCHNORM_STATS:
            raise f.error(w + "batchnorm_stats", f"must be one of {', '.join(BATCHNORM_STATS)}"
                          f", got {v!r}")
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


def _simulated_lines(plan: Plan) -> list[str]:
    """Predicted and simulated step, and the speedup over the best baseline by simulation
    (never one the simulator contradicts)."""
    if plan.simulated_step_seconds is None:
        return [f"predicted step {_ms(plan.step_seconds)} ms (not simulated)"]
    sim = plan.simulated_step_seconds
    line = f"predicted step {_ms(plan.step_seconds)} ms, simulated {_ms(sim)} ms"
    base = [b for b in plan.baselines.values()
            if b.feasible and b.simulated_step_seconds is not None]
    if base:
        b = min(base, key=lambda x: x.simulated_step_seconds)
        x = b.simulated_step_seconds / sim if sim > 0 else math.inf
        line += (f"; simulated speedup {x:.2f}x over the best baseline ({b.name}, "
                 f"simulated {_ms(b.simulated_step_seconds)} ms)" if x > 1 else
                 f"; no speedup over the best baseline by simulation ({b.name}, simulated "
                 f"{_ms(b.simulated_step_seconds)} ms)")
    cert = plan.simulator_certificate
    if cert is not None:
        line += (f"; simulator-optimal: proved ({cert.enumerated} plans enumerated)"
                 if cert.proved else
                 f"; simulator-optimal not proved: every plan simulates >= "
                 f"{_ms(cert.bound_seconds)} ms (gap {cert.gap:.3g}, {cert.enumerated} "
                 "enumerated)")
    return [line]


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
    lines.extend(_simulated_lines(plan))
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


