"""What a program adds to a training step beyond its operators, measured on this machine.

A plan's program (:mod:`.layerwise`) runs every layer through Python: it walks the traced
graph, slices and pads tiles and calls the layer's operator, and its backward runs the
autograd engine over those calls; a step also runs the loss, ``zero_grad`` and the
optimizer's fixed part. PyTorch's DDP adds its reducer (autograd hooks per parameter,
buckets). The per-op profile (:mod:`milp_parallel.measure.profile`) times each operator on
its own, so none of this is in it. On a GPU most of it hides behind the asynchronous
kernels; on a CPU it is on the critical path (a serial plan of a two-layer MLP on this
2-core machine: 0.28 ms priced, 0.65-0.72 ms measured).

:func:`measure_program_overhead` measures it, as ``CostModel(layer_overhead_seconds=...,
step_overhead_seconds=...)`` takes it, on two chains of tiny layers (``k`` blocks of a
one-feature linear and a tanh, on one element per sample) whose operators cost next to
nothing. Each chain runs as the program runs a plan (the layer-wise program: serially under
:func:`~milp_parallel.runtime.verify_plan`; DDP: data-parallel), its steps back to back, the
slowest rank's median, with ``world_size`` processes as the job runs; and is priced by the
step simulator from a profile of its own tiles timed by ``world_size`` processes at once.
The residual ``r = measured - simulated`` grows with the ``2 k`` layers by the per-layer
time and starts from the per-step one:

``layer = (r(k2) - r(k1)) / (2 (k2 - k1))``, ``step = r(k1) - 2 k1 layer`` (both >= 0).

These are the program's figures, not a fit to the plans they then price.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidOptionError, PlanMismatchError, require

__all__ = ["ProgramOverhead", "measure_program_overhead", "PROGRAMS"]

logger = logging.getLogger(__name__)

torch = require("torch", "torch", "milp_parallel.runtime.overhead")


#: The programs whose own time :func:`measure_program_overhead` measures.
PROGRAMS = ("layerwise", "ddp")


class _Chain(torch.nn.Module):
    """``k`` blocks of a one-feature linear and a tanh: a step of almost nothing but the
    program (a weighted layer and an activation, the common mix)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.fcs = torch.nn.ModuleList(torch.nn.Linear(1, 1) for _ in range(int(k)))

    def forward(self, x):
        for fc in self.fcs:
            x = torch.tanh(fc(x))
        return x


def _ddp_worker(rank, world, init, k, x, steps, optimizer, queue):  # pragma: no cover
    import torch.distributed as dist

    from ..measure.operators import make_optimizer
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(_Chain(k))
        opt = make_optimizer(torch, optimizer, model.parameters())
        local = x.chunk(world)[rank]
        times = []
        for i in range(10 + steps):
            if i == 10:
                dist.barrier()      # once: then back to back, as a training loop runs
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(local).pow(2).sum().backward()
            opt.step()
            if i >= 10:
                times.append(time.perf_counter() - t0)
        queue.put((rank, times))
    finally:
        dist.destroy_process_group()


def _ddp_step_seconds(world: int, k: int, x, steps: int, optimizer: str,
                      timeout_s: float = 600.0) -> float:
    """The median over steps of the slowest rank's DDP step of ``_Chain(k)``."""
    import multiprocessing
    import os
    import queue as queue_module
    import tempfile
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=_ddp_worker, args=(r, world, init, k, x, steps, optimizer,
                                                       queue), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        got: dict = {}
        deadline = time.monotonic() + float(timeout_s)
        try:
            while len(got) < world:
                try:
                    rank, times = queue.get(timeout=1.0)
                    got[rank] = times
                except queue_module.Empty:     # is every process still running?
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead or time.monotonic() > deadline:
                        raise PlanMismatchError(
                            "the DDP chain's processes failed (exit code "
                            f"{dead[0].exitcode})" if dead else
                            f"the DDP chain's processes gave no answer in {timeout_s} s"
                        ) from None
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.terminate()
    return float(np.median(np.max([np.asarray(got[r]) for r in range(world)], axis=0)))


@dataclass(frozen=True)
class ProgramOverhead:
    """A program's own time on this machine (see the module docstring).

    Attributes
    ----------
    layer_seconds, step_seconds : float
        ``CostModel``'s ``layer_overhead_seconds`` and ``step_overhead_seconds``.
    program : str
        ``"layerwise"`` or ``"ddp"``.
    world_size : int
    lengths : tuple of int
        The chains' block counts ``(k1, k2)`` (two layers a block).
    measured_seconds, simulated_seconds : tuple of float
        Each chain's measured step and its simulated step without the overhead.
    """

    layer_seconds: float
    step_seconds: float
    program: str
    world_size: int
    lengths: tuple[int, int]
    measured_seconds: tuple[float, float]
    simulated_seconds: tuple[float, float]


def measure_program_overhead(topology, *, program: str = "layerwise", world_size: int = 2,
                             lengths: tuple[int, int] = (1, 16), steps: int = 200,
                             repeats: int = 30, optimizer: str = "adam",
                             cost_options: dict | None = None, rounds: int = 3
                             ) -> ProgramOverhead:
    """Measure a program's per-layer and per-step time.

    Parameters
    ----------
    topology : Topology
        The machine's (a calibrated one: ``milp_parallel.measure.calibrate``), with
        ``world_size`` devices.
    program : {"layerwise", "ddp"}, default "layerwise"
        ``"layerwise"``: this package's program of a plan (:mod:`.layerwise`), the chain
        serial on rank 0 (the other ranks run its empty tiles, as a job's idle ranks do);
        ``"ddp"``: ``torch.nn.parallel.DistributedDataParallel`` over the chain, every
        layer split by samples, priced as data parallelism.
    world_size : int, default 2
        Processes, as the job runs.
    lengths : (int, int), default (1, 16)
        The two chains' block counts, ``k1 < k2`` (30 layers apart: with 10, DDP's figure
        read 18-79 us per layer in runs an hour apart).
    steps : int, default 200
        Timed steps per chain.
    repeats : int, default 30
        Profile repeats per tile.
    optimizer : {"adam", "momentum", "sgd"}
        The step's optimizer (its fixed part is in the step's time).
    rounds : int, default 3
        Each chain measured this many times, in turn with the other; the medians kept.
    cost_options : dict, optional
        More ``CostModel`` keywords for the chain's pricing (e.g. DDP's
        ``bucket_copies=2`` and the calibrated ``sync_overlap``), as the plans it will
        price are priced.

    Returns
    -------
    ProgramOverhead

    Raises
    ------
    InvalidOptionError
        An unknown program, lengths that are not two increasing positive integers, or a
        non-positive ``steps`` or ``rounds``.
    PlanMismatchError
        When the chain's processes fail or give no answer in 10 minutes.
    """
    import milp_parallel as mp

    from ..costs import CostModel
    from ..measure.calibrate import profile_concurrently
    from ..measure.operators import OPTIMIZER_STATE_FACTOR

    if program not in PROGRAMS:
        raise InvalidOptionError(f"measure_program_overhead: program must be one of "
                                 f"{', '.join(PROGRAMS)}, got {program!r}")
    k1, k2 = (int(k) for k in lengths)
    if not 0 < k1 < k2 or int(steps) < 1 or int(rounds) < 1:
        raise InvalidOptionError(f"measure_program_overhead: lengths must be two increasing "
                                 f"positive integers, steps and rounds positive, got "
                                 f"lengths={lengths!r}, steps={steps!r}, rounds={rounds!r}")
    world = int(world_size)
    runs, simulated = [], []
    for k in (k1, k2):
        torch.manual_seed(0)
        module, x = _Chain(k), torch.randn(world, 1)
        graph = mp.from_torch(module, x)
        label = "serial" if program == "layerwise" else f"n={world}"
        tiles = [(lay, tuple(-(-d // (world if program == "ddp" and i == 0 else 1))
                             for i, d in enumerate(lay.output_shape))) for lay in graph.layers]
        table = profile_concurrently(graph, tiles, world_size=world, repeats=int(repeats),
                                     optimizer=optimizer)
        cm = CostModel(topology, profile=table,
                       optimizer_state_factor=OPTIMIZER_STATE_FACTOR[optimizer],
                       **(cost_options or {}))
        plan = mp.solve(graph, topology, solver="dp", cross_check=False, cost_model=cm,
                        fixed={lay.name: label for lay in graph.layers})
        runs.append((plan, module, x))
        simulated.append(float(plan.simulated_step_seconds))
    # the chains in turn, ``rounds`` times, medians kept: a machine's speed drifts between
    # runs seconds apart more than the difference measured
    times: list[list[float]] = [[], []]
    for _ in range(int(rounds)):
        for i, (plan, module, x) in enumerate(runs):
            if program == "layerwise":
                audit = mp.verify_plan(plan, module, x, world_size=world, optimizer=optimizer,
                                       timed_steps=int(steps))
                times[i].append(float(max(audit.step_seconds)))
            else:
                times[i].append(_ddp_step_seconds(world, len(module.fcs), x, int(steps),
                                                  optimizer))
    measured = [float(np.median(t)) for t in times]
    r1, r2 = (m - s for m, s in zip(measured, simulated))
    layer = max(0.0, (r2 - r1) / (2 * (k2 - k1)))
    step = max(0.0, r1 - 2 * k1 * layer)
    logger.info("%s program overhead on %d processes: %.1f us per layer, %.1f us per step "
                "(chains of %d and %d layers: measured %s, simulated %s)", program, world,
                layer * 1e6, step * 1e6, 2 * k1, 2 * k2, measured, simulated)
    return ProgramOverhead(layer, step, program, world, (k1, k2), tuple(measured),
                           tuple(simulated))
