"""Run a plan, and check the program against the plan: :func:`parallelize`, :func:`verify_plan`.

Both dispatch on the plan's type: a layer-wise :class:`~milp_parallel.Plan` goes to
:mod:`.layerwise`, a ``pipeline.PipelinePlan`` to ``milp_parallel.runtime.transformer``.

:func:`audit_step` is the harness both use (the hook is :class:`RuntimeHooks`; see
``milp_parallel/runtime/README.md``): it runs one training step of the original module in
this process, spawns ``world_size`` CPU processes on 127.0.0.1 (a free port,
``torch.multiprocessing``), runs the same step of the parallel program in each under the
collective counter and the memory meter (:mod:`.audit`), and compares.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import InvalidOptionError, PlanMismatchError, require
from ..measure.operators import OPTIMIZERS, make_optimizer
from .audit import CollectiveRow, MemoryRow, PlanAudit

__all__ = ["RuntimeHooks", "audit_step", "parallelize", "verify_plan", "layerwise_hooks",
           "OPTIMIZERS"]



@dataclass(frozen=True)
class RuntimeHooks:
    """What a planner's runtime gives :func:`audit_step` (every callable picklable).

    Attributes
    ----------
    parallelize : callable
        ``(module, plan, mesh, example_inputs) -> nn.Module``: the parallel program.
    predicted_collectives : callable
        ``(plan, module, example_inputs) -> {(layer, kind): bytes}`` summed over the ranks.
    predicted_memory : callable
        ``(plan, module, example_inputs, optimizer) -> [{"parameters", "gradients",
        "optimizer", "activations": bytes}]``, one per rank.
    local_loss : callable
        ``(output, parallel module) -> tensor``: this rank's part of the loss (the sum over
        the ranks is ``reference_loss`` of the whole output).
    reference_loss : callable
        ``(output, inputs) -> tensor``: the single-process loss.
    full_output : callable
        ``(output, parallel module) -> tensor``: the whole output on every rank.
    full_gradients : callable
        ``(parallel module) -> {original parameter name: whole gradient}`` on every rank
        (the parameters it holds; the ranks' dictionaries are merged).
    reference_output : callable, optional
        ``(output, inputs) -> tensor``: what ``full_output`` is compared with (default: the
        reference module's output itself).
    step_runs_backward : bool, default False
        The program's forward call is the whole training step (a pipeline schedule runs
        the backward pass inside it) and returns the loss: the harness calls no
        ``backward``, and meters the whole step.
    group_labels : callable, optional
        ``(parallel module) -> (fixed, defaults)``, each ``{process group name: (layer,
        kind)}``: groups whose every collective is counted under one row, and the rows of
        groups' collectives issued under no label (:func:`~.audit.comm_counter`).
    activations : str, default "saved"
        What the measured activations are, as the runtime's cost model prices them:
        ``"saved"``, the peak of the storages autograd saves for backward
        (:meth:`~.audit.MemoryMeter.saving`; the layer-wise model prices saved tensors
        only), or ``"allocated"``, the peak of everything the step allocates besides the
        model's state (:meth:`~.audit.MemoryMeter.allocating`: working sets, communication
        and pipeline buffers too).
    """

    parallelize: Callable
    predicted_collectives: Callable
    predicted_memory: Callable
    local_loss: Callable
    reference_loss: Callable
    full_output: Callable
    full_gradients: Callable
    reference_output: Callable | None = None
    step_runs_backward: bool = False
    group_labels: Callable | None = None
    activations: str = "saved"

    def __post_init__(self) -> None:
        if self.activations not in ("saved", "allocated"):
            raise InvalidOptionError(f"RuntimeHooks: activations must be 'saved' or "
                                     f"'allocated', got {self.activations!r}")


# ---------------------------------------------------------------------- layer-wise hooks
def _lw_parallelize(module, plan, mesh, example_inputs):
    from .layerwise import parallelize_layerwise
    return parallelize_layerwise(module, plan, mesh, example_inputs=example_inputs)


def _graph(module, example_inputs):
    from ..importers import from_torch
    return from_torch(module, tuple(example_inputs))


def _lw_collectives(plan, module, example_inputs):
    from .layerwise import check_plan_fits
    from .layout import predicted_collectives
    graph = _graph(module, example_inputs)
    check_plan_fits(plan, graph)      # before any process is spawned
    return predicted_collectives(plan, graph, plan.devices)


def _lw_memory(plan, module, example_inputs, optimizer):
    from .layout import OPTIMIZER_STATE_FACTOR, predicted_memory
    return predicted_memory(plan, _graph(module, example_inputs), plan.devices,
                            OPTIMIZER_STATE_FACTOR[optimizer])


def _lw_local_loss(y, pm):
    import numpy as np
    total = float(np.prod(pm.graph.layer(pm._output_layer()).output_shape))
    return y.pow(2).sum() / total


def _reference_loss(y, inputs=None):
    return y.pow(2).sum() / y.numel()


def _lw_full_output(y, pm):
    return pm.full_output(y)


def _lw_full_gradients(pm):
    return pm.full_gradients()


def layerwise_hooks() -> RuntimeHooks:
    """The :class:`RuntimeHooks` of layer-wise plans (loss: the mean of the squared
    outputs)."""
    return RuntimeHooks(_lw_parallelize, _lw_collectives, _lw_memory, _lw_local_loss,
                        _reference_loss, _lw_full_output, _lw_full_gradients)


def _transformer() -> Any:
    name = "milp_parallel.runtime.transformer"
    if importlib.util.find_spec(name) is None:
        raise PlanMismatchError("transformer plans (pipeline.PipelinePlan) run with "
                                f"{name}, which this installation does not have yet")
    return importlib.import_module(name)


def _is_layerwise(plan) -> bool:
    from ..plan import Plan
    return isinstance(plan, Plan)


def _hooks(plan) -> RuntimeHooks:
    if _is_layerwise(plan):
        return layerwise_hooks()
    if type(plan).__name__ == "PipelinePlan":
        return _transformer().runtime_hooks()
    raise PlanMismatchError(f"cannot run a {type(plan).__name__}: expected a Plan "
                            "(mp.solve) or a PipelinePlan (pipeline.solve_pipeline)")


# ---------------------------------------------------------------------- the face
def parallelize(module, plan, mesh=None, **options) -> Any:
    """The parallel program of ``plan`` on this rank, as a ``torch.nn.Module``.

    Parameters
    ----------
    module : torch.nn.Module
    plan : Plan or PipelinePlan
    mesh : DeviceMesh, optional
        Default: the whole world.
    **options
        Passed on: a layer-wise plan needs ``example_inputs`` (the forward arguments at
        the plan's batch size).

    Raises
    ------
    PlanMismatchError
        The plan does not fit the module or the world (see
        :func:`~milp_parallel.runtime.layerwise.parallelize_layerwise`).
    """
    if _is_layerwise(plan):
        from .layerwise import parallelize_layerwise
        return parallelize_layerwise(module, plan, mesh, **options)
    if type(plan).__name__ == "PipelinePlan":
        return _transformer().parallelize_transformer(module, plan, mesh, **options)
    raise PlanMismatchError(f"cannot parallelize with a {type(plan).__name__}: expected a "
                            "Plan (mp.solve) or a PipelinePlan (pipeline.solve_pipeline)")


def verify_plan(plan, module, example_inputs, *, world_size: int | None = None,
                backend: str = "gloo", optimizer: str = "adam", lr: float = 1e-3,
                timed_steps: int = 0) -> PlanAudit:
    """Run one training step of the plan's program and of ``module``, and compare.

    Parameters
    ----------
    plan : Plan or PipelinePlan
    module : torch.nn.Module
        Picklable (its class importable), float32 for a tight comparison.
    example_inputs : tensor or tuple of tensors
        The forward arguments (the whole batch).
    world_size : int, optional
        Processes to spawn (default: the plan's devices; another count is refused).
    backend : str, default "gloo"
    optimizer : {"adam", "sgd", "momentum"}
        The step's optimizer (its state is what the memory prediction prices: 2, 0, 1
        weights per weight).
    lr : float
    timed_steps : int, default 0
        After the audited step, run this many plain training steps (no meter, no counting)
        and report each rank's median of them as ``step_seconds`` (0: the audited step's
        own time, which includes the first step's warm-up and the instruments).

    Returns
    -------
    PlanAudit

    Raises
    ------
    PlanMismatchError
        A world size other than the plan's devices, or a plan that does not fit.
    InvalidOptionError
        An unknown optimizer, or a negative ``timed_steps``.
    """
    require("torch", "torch", "verify_plan()")
    if optimizer not in OPTIMIZERS:
        raise InvalidOptionError(f"verify_plan(optimizer={optimizer!r}): expected one of "
                                 f"{', '.join(OPTIMIZERS)}")
    if (not isinstance(timed_steps, (int, np.integer)) or isinstance(timed_steps, bool)
            or timed_steps < 0):
        raise InvalidOptionError(f"verify_plan(timed_steps={timed_steps!r}): expected a "
                                 "non-negative integer")
    devices = getattr(plan, "devices", None)
    world = devices if world_size is None else int(world_size)
    if devices is not None and world != devices:
        raise PlanMismatchError(f"verify_plan(world_size={world}): the plan is for {devices} "
                                f"devices; pass world_size={devices} or solve for {world}")
    return audit_step(_hooks(plan), plan, module, example_inputs, world_size=world,
                      backend=backend, optimizer=optimizer, lr=lr,
                      timed_steps=int(timed_steps))


# ---------------------------------------------------------------------- the harness
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rel(a, b) -> float:
    """``max |a - b| / max |b|`` (inf for a shape mismatch or a non-finite value)."""
    import torch
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape or not bool(torch.isfinite(a).all()):
        return float("inf")
    if b.numel() == 0:
        return 0.0
    scale, diff = b.abs().max().item(), (a - b).abs().max().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _worker(rank: int, world: int, port: int, backend: str, hooks: RuntimeHooks, plan,
            module, inputs: tuple, optimizer: str, lr: float, out_dir: str,
            timed_steps: int = 0) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from .audit import MemoryMeter, comm_counter

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        pm = hooks.parallelize(module, plan, mesh, inputs)
        opt = make_optimizer(torch, optimizer, pm.parameters(), lr)
        meter = MemoryMeter()
        fixed, defaults = hooks.group_labels(pm) if hooks.group_labels else ({}, {})
        counter = comm_counter(fixed, defaults)
        dist.barrier()
        start = time.perf_counter()
        with counter:
            # the program's own memory (the audit's loss is outside the plan)
            if hooks.activations == "allocated":
                with meter.allocating(pm, module):
                    y = pm(*inputs)
                    loss = hooks.local_loss(y, pm)
                    if not hooks.step_runs_backward:
                        loss.backward()
            else:
                with meter.saving(pm, module):
                    y = pm(*inputs)
                    if hooks.step_runs_backward:
                        loss = hooks.local_loss(y, pm)
                if not hooks.step_runs_backward:
                    loss = hooks.local_loss(y, pm)
                    loss.backward()
            opt.step()
        seconds = time.perf_counter() - start
        memory = meter.measure(pm, opt)
        full_y = hooks.full_output(y, pm)
        grads = hooks.full_gradients(pm)
        total = loss.detach().clone()
        dist.all_reduce(total)
        counts: list = [None] * world
        dist.all_gather_object(counts, counter.totals())
        result = {"rank": rank, "memory": memory, "seconds": seconds, "grads": grads,
                  "peak_by_op": dict(meter.peak_by_op)}
        if rank == 0:
            result.update(output=full_y, loss=total, counts=counts)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        if timed_steps:
            # plain steps, no meter and no counter, after the audited one (which warms up),
            # back to back as a training loop runs them: one barrier before the first (a
            # barrier before each slowed even the plain module's 1 ms step by 0.6-0.8 ms)
            times = []
            dist.barrier()
            for _ in range(timed_steps):
                start = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss = hooks.local_loss(pm(*inputs), pm)
                if not hooks.step_runs_backward:
                    loss.backward()
                opt.step()
                times.append(time.perf_counter() - start)
            torch.save(times, os.path.join(out_dir, f"rank{rank}.steps.pt"))
    except PlanMismatchError as exc:
        # the caller raises it again, typed (the spawn wrapper would give only its text)
        with open(os.path.join(out_dir, f"rank{rank}.mismatch"), "w") as f:
            f.write(str(exc))
        raise
    finally:
        dist.destroy_process_group()


def audit_step(hooks: RuntimeHooks, plan, module, example_inputs, *, world_size: int,
               backend: str = "gloo", optimizer: str = "adam", lr: float = 1e-3,
               timed_steps: int = 0) -> PlanAudit:
    """One audited training step of ``hooks.parallelize(module, plan, mesh)`` on
    ``world_size`` spawned CPU processes (see the module docstring), then ``timed_steps``
    plain ones, timed."""
    import torch
    import torch.multiprocessing as tmp

    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (
        example_inputs,)
    ref = copy.deepcopy(module)
    out = ref(*inputs)
    ref_loss = hooks.reference_loss(out, inputs)
    ref_loss.backward()
    if hooks.reference_output is not None:
        out = hooks.reference_output(out, inputs)
    ref_grads = {n: p.grad for n, p in ref.named_parameters() if p.grad is not None}
    predicted = hooks.predicted_collectives(plan, module, inputs)
    memory_pred = hooks.predicted_memory(plan, module, inputs, optimizer)
    with tempfile.TemporaryDirectory(prefix="milp_parallel_audit_") as d:
        try:
            tmp.spawn(_worker, args=(world_size, _free_port(), backend, hooks, plan, module,
                                     inputs, optimizer, lr, d, int(timed_steps)),
                      nprocs=world_size, join=True)
        except tmp.ProcessRaisedException:
            # a rank found the plan unrunnable: the same typed error here, without the
            # rank's traceback
            for r in range(world_size):
                path = os.path.join(d, f"rank{r}.mismatch")
                if os.path.exists(path):
                    with open(path) as f:
                        raise PlanMismatchError(f.read()) from None
            raise
        results = [torch.load(os.path.join(d, f"rank{r}.pt"), weights_only=False)
                   for r in range(world_size)]
        if timed_steps:
            # each rank's median of its plain steps
            for r in results:
                r["seconds"] = float(np.median(torch.load(
                    os.path.join(d, f"rank{r['rank']}.steps.pt"), weights_only=False)))
    head = results[0]
    errors = {"output": _rel(head["output"], out), "loss": _rel(head["loss"], ref_loss)}
    grads: dict = {}
    for r in results:
        for name, g in r["grads"].items():
            grads.setdefault(name, g)
    for name, g in ref_grads.items():
        errors[f"grad:{name}"] = _rel(grads.get(name, torch.zeros(0)), g)
    counted: dict[tuple[str, str], float] = {}
    for per_rank in head["counts"]:
        for key, b in per_rank.items():
            counted[key] = counted.get(key, 0.0) + b
    keys = list(predicted) + [k for k in counted if k not in predicted]
    rows = tuple(CollectiveRow(layer, kind, float(predicted.get((layer, kind), 0.0)),
                               float(counted.get((layer, kind), 0.0))) for layer, kind in keys)
    memory = tuple(_memory_row(r, memory_pred[r], results[r]["memory"],
                               results[r]["peak_by_op"]) for r in range(world_size))
    return PlanAudit(plan_kind="layerwise" if _is_layerwise(plan) else "pipeline",
                     world_size=world_size, backend=backend,
                     max_rel_error=max(errors.values()), errors=errors, collectives=rows,
                     memory=memory,
                     step_seconds=tuple(float(r["seconds"]) for r in results))


def _memory_row(rank: int, predicted: Mapping[str, float], measured: Mapping[str, float],
                peak_by_op: Mapping[str, int]) -> MemoryRow:
    return MemoryRow(rank, float(sum(predicted.values())), float(sum(measured.values())),
                     dict(predicted), dict(measured),
                     dict(sorted(((k, float(v)) for k, v in peak_by_op.items()),
                                 key=lambda kv: -kv[1])))

