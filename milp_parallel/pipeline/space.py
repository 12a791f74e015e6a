"""The declared space: :class:`PipelineOptions`, the schedules and what each keeps in flight.

May import: ``errors``, ``.training_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidOptionError
from .training_memory import RECEIVE_BUFFERS, MixedPrecision, check_recompute, check_zero

__all__ = ["SCHEDULES", "PipelineOptions", "in_flight_micro_batches", "end_chunk_counts",
           "message_counts"]

#: Pipeline schedules.
SCHEDULES = ("gpipe", "1f1b")


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
    receive_buffers : {"preallocated", "in_flight"}, default "preallocated"
        How a stage holds the messages it receives: one buffer per micro-batch and chunk for
        the whole step (``torch.distributed.pipelining``'s ``PipelineStage``: the program
        :func:`~milp_parallel.parallelize` emits), or only those in flight (Megatron-LM)
        (:func:`.training_memory.pipeline_receive_bytes`).
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
    receive_buffers: str = "preallocated"

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
        if self.receive_buffers not in RECEIVE_BUFFERS:
            raise InvalidOptionError(f"PipelineOptions.receive_buffers must be among "
                                     f"{RECEIVE_BUFFERS}, got {self.receive_buffers!r}")
        if self.time_limit is not None and not (self.time_limit > 0):
            raise InvalidOptionError(f"PipelineOptions.time_limit must be positive seconds, "
                                     f"got {self.time_limit!r}")


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


def end_chunk_counts(schedule: str, p: int, m: int, v: int, s: int) -> tuple[int, int]:
    """Of the chunk micro-batches stage ``s`` holds at its peak
    (:func:`in_flight_micro_batches`), how many run the model's first chunk and how many its
    last one: ``(first, last)``.

    The interleaved 1F1B schedule (Narayanan et al., SC'21, section 2.2; torch's
    ``ScheduleInterleaved1F1B``) runs a stage's forwards in groups of ``min(p, m)``
    micro-batches, cycling through its ``v`` chunks; the peak is at the end of the warm-up,
    after the first ``f_s`` of them. Without interleaving every micro-batch runs the stage's
    one chunk. Only stage 0 holds the first chunk and only stage ``p - 1`` the last.

    Examples
    --------
    >>> end_chunk_counts("1f1b", 8, 48, 2, 0)      # 23 in flight: 8 + 7 of chunk 0
    (15, 0)
    >>> end_chunk_counts("1f1b", 8, 48, 2, 7)      # 9 in flight: one of chunk 1
    (0, 1)
    >>> end_chunk_counts("1f1b", 4, 8, 1, 3)
    (0, 1)
    """
    f = in_flight_micro_batches(schedule, p, m, v)[s]
    group = max(1, min(p, m))
    chunk = (np.arange(f) // group) % v
    first = int(np.sum(chunk == 0)) if s == 0 else 0
    last = int(np.sum(chunk == v - 1)) if s == p - 1 else 0
    return first, last


def message_counts(p: int, v: int, s: int) -> tuple[int, int]:
    """Messages stage ``s`` sends to the next stage and receives from the previous one per
    micro-batch, ``(sends, receives)``: one per chunk, except that the model's last chunk
    sends none and its first receives none (with ``v`` interleaved chunks stage ``p - 1``
    also sends to stage 0).

    Examples
    --------
    >>> message_counts(4, 1, 0), message_counts(4, 1, 3), message_counts(4, 2, 3)
    ((1, 0), (0, 1), (1, 2))
    """
    if p == 1:
        return 0, 0
    return (v if s < p - 1 else v - 1), (v if s > 0 else v - 1)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
