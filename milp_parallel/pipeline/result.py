"""What the transformer planner answers: :class:`PipelinePlan` and its :class:`StagePlan`.

May import: nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["StagePlan", "PipelinePlan"]


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
        ``T`` (see :mod:`milp_parallel.pipeline`).
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
        (each block its own non-dominated assignment; :meth:`.combo._ComboProblem.untied_bound`);
        ``None`` for an evaluated configuration. ``1 - bound / T`` is the most tying can
        cost there.
    search : dict
        Statistics: combinations, pruned, MILPs solved, seconds, ...
    options : PipelineOptions or None
        The declared space it was searched or priced under (its precision and attention
        settings are what the plan's bytes are counted in: :func:`~.traffic.plan_traffic`).
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
    options: Any = None

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

