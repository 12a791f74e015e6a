"""What the layer-wise program adds to a step beyond its operators, measured on this machine.

A plan's program (:mod:`.layerwise`) runs every layer through Python: it walks the traced
graph, slices and pads tiles and calls the layer's operator, and its backward runs the
autograd engine over those calls; a step also runs the loss, ``zero_grad`` and the
optimizer's fixed part. The per-op profile (:mod:`milp_parallel.measure.profile`) times each
operator on its own, so none of this is in it. On a GPU most of it hides behind the
asynchronous kernels; on a CPU it is on the critical path (a serial plan of a two-layer
MLP on this 2-core machine: 0.28 ms priced, 0.65-0.72 ms measured).

:func:`measure_program_overhead` measures it, as ``CostModel(layer_overhead_seconds=...,
step_overhead_seconds=...)`` takes it, on two chains of tiny layers (a one-feature linear,
then ``k`` tanh on one element per sample) whose operators cost next to nothing: each chain
runs serially under :func:`~milp_parallel.runtime.verify_plan` (``timed_steps``, the slowest
rank's median, with ``world_size`` processes as the job runs), and is priced by the step
simulator from a profile of its own tiles timed by ``world_size`` processes at once. The
residual ``measured - simulated`` grows with the layers by the per-layer time and starts
from the per-step one:

``layer = (r(k2) - r(k1)) / (k2 - k1)``, ``step = r(k1) - (k1 + 1) layer`` (both >= 0).

These are the program's figures, not a fit to the plans they then price.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..errors import InvalidOptionError, require

__all__ = ["ProgramOverhead", "measure_program_overhead"]

logger = logging.getLogger(__name__)

torch = require("torch", "torch", "milp_parallel.runtime.overhead")


class _Chain(torch.nn.Module):
    """A one-feature linear, then ``k`` tanh: a step of almost nothing but the program."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = int(k)
        self.fc = torch.nn.Linear(1, 1)

    def forward(self, x):
        x = self.fc(x)
        for _ in range(self.k):
            x = torch.tanh(x)
        return x


@dataclass(frozen=True)
class ProgramOverhead:
    """The layer-wise program's own time on this machine (see the module docstring).

    Attributes
    ----------
    layer_seconds, step_seconds : float
        ``CostModel``'s ``layer_overhead_seconds`` and ``step_overhead_seconds``.
    world_size : int
    lengths : tuple of int
        The chains' tanh counts ``(k1, k2)``.
    measured_seconds, simulated_seconds : tuple of float
        Each chain's measured step and its simulated step without the overhead.
    """

    layer_seconds: float
    step_seconds: float
    world_size: int
    lengths: tuple[int, int]
    measured_seconds: tuple[float, float]
    simulated_seconds: tuple[float, float]


def measure_program_overhead(topology, *, world_size: int = 2, lengths: tuple[int, int] = (2, 12),
                             steps: int = 200, repeats: int = 30, optimizer: str = "adam"
                             ) -> ProgramOverhead:
    """Measure the layer-wise program's per-layer and per-step time.

    Parameters
    ----------
    topology : Topology
        The machine's (a calibrated one: ``milp_parallel.measure.calibrate``), with
        ``world_size`` devices.
    world_size : int, default 2
        Processes, as the job runs (the ranks a serial chain leaves idle still run Python).
    lengths : (int, int), default (2, 12)
        The two chains' tanh counts, ``k1 < k2``.
    steps : int, default 200
        Timed steps per chain (:func:`~milp_parallel.runtime.verify_plan`'s ``timed_steps``).
    repeats : int, default 30
        Profile repeats per tile.
    optimizer : {"adam", "momentum", "sgd"}
        The step's optimizer (its fixed part is in the step's time).

    Returns
    -------
    ProgramOverhead

    Raises
    ------
    InvalidOptionError
        For lengths that are not two increasing non-negative integers, or a non-positive
        ``steps``.
    """
    import milp_parallel as mp
    from ..costs import CostModel
    from ..measure.calibrate import profile_concurrently
    from ..measure.operators import OPTIMIZER_STATE_FACTOR

    k1, k2 = (int(k) for k in lengths)
    if not 0 <= k1 < k2 or int(steps) < 1:
        raise InvalidOptionError(f"measure_program_overhead: lengths must be two increasing "
                                 f"non-negative integers and steps positive, got "
                                 f"lengths={lengths!r}, steps={steps!r}")
    measured, simulated = [], []
    for k in (k1, k2):
        torch.manual_seed(0)
        module, x = _Chain(k), torch.randn(int(world_size), 1)
        graph = mp.from_torch(module, x)
        table = profile_concurrently(graph, [(lay, lay.output_shape) for lay in graph.layers],
                                     world_size=int(world_size), repeats=int(repeats),
                                     optimizer=optimizer)
        cm = CostModel(topology, profile=table,
                       optimizer_state_factor=OPTIMIZER_STATE_FACTOR[optimizer])
        plan = mp.solve(graph, topology, solver="dp", cross_check=False, cost_model=cm,
                        fixed={lay.name: "serial" for lay in graph.layers})
        audit = mp.verify_plan(plan, module, x, world_size=int(world_size),
                               optimizer=optimizer, timed_steps=int(steps))
        measured.append(float(max(audit.step_seconds)))
        simulated.append(float(plan.simulated_step_seconds))
    r1, r2 = (m - s for m, s in zip(measured, simulated))
    layer = max(0.0, (r2 - r1) / (k2 - k1))
    step = max(0.0, r1 - (k1 + 1) * layer)
    logger.info("program overhead on %d processes: %.1f us per layer, %.1f us per step "
                "(chains of %d and %d layers: measured %s, simulated %s)", world_size,
                layer * 1e6, step * 1e6, k1 + 1, k2 + 1, measured, simulated)
    return ProgramOverhead(layer, step, int(world_size), (k1, k2), tuple(measured),
                           tuple(simulated))
