"""Seconds of the pieces of a transformer training step: layer compute, collectives inside a
tensor-parallel group, bucketed data-parallel collectives, pipeline point-to-point messages
and the optimizer update.

:class:`StepPricer` is the one place the pipeline planner asks for seconds. It prices with the
project's roofline and collectives (issue 15); what is still its own (marked below) is the
efficiency of 16-bit matrix products, until the presets state one with evidence. Its rules:

   - compute: per layer, ``max(FLOPs / (peak x gemm_efficiency), bytes /
     (HBM bandwidth x memory_efficiency))`` for matrix products (linear, attention's two
     batched products, matmul, conv; backward = 2 x forward), ``bytes / (HBM bandwidth x
     memory_efficiency)`` for everything else (backward = 2 x the forward's bytes), plus
     ``kernel_seconds`` per kernel; the attention core adds the memory-bound passes over its
     ``S x S`` scores (scale-mask-softmax and dropout: 13 bytes per score element forward with
     dropout, 8 without; twice that backward) unless it is a flash kernel.
   - compute: :func:`milp_parallel.machine.roofline.roofline_seconds` of the layer's FLOPs
     and bytes.
   - collectives: :mod:`milp_parallel.machine.collectives` (ring / tree / hierarchical, the fastest
     for the message, network cards shared per node); all-to-all, which that module does not
     model, ``(r - 1) (alpha + m / (r^2 bw))`` on the slowest link.
   - point to point: ``alpha + m / bw`` of the link between the two devices.
   - optimizer (Adam, mixed precision): 28 bytes of HBM traffic per local parameter (fp32
     master weight and two moments read and written, the 16-bit gradient read and weight
     written).
   - constants: the device's HBM bandwidth and kernel launch time from the preset
     (``Device.memory_bandwidth_bytes_per_s``, ``kernel_launch_s``), else A100 80 GB 2,039
     GB/s HBM2e, A100 40 GB PCIe 1,555 GB/s, H100 SXM 3,350 GB/s HBM3, H200 4,800 GB/s, V100
     900 GB/s, P100 732 GB/s (NVIDIA datasheets) and the presets' kernel launch time;
     ``gemm_efficiency`` 0.869 of the 16-bit peak for matrix products (A100 SXM's measured
     best-shape bf16 matmul, 271.2 of 312 TFLOP/s) and ``memory_efficiency`` 0.88 (the
     roofline module's default) of the HBM bandwidth. Every figure is a
     :class:`~milp_parallel.machine.constants.Sourced` whose ``source`` cites it; none is
     fitted to the Megatron rows (``benchmarks/megatron.md`` shows each at +-15%).
     Not yet the roofline's ``Device.efficiency`` for matrix products: the presets' 0.5
     comes from ParaDL's fp32 V100 measurement and has no evidence for 16-bit tensor-core
     products (see the issue-16 report).

May import: ``errors``, ``machine`` (``topology``, ``roofline``, ``collectives``).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidTopologyError
from ..machine import collectives
from ..machine import constants as _c
from ..machine.roofline import RooflineParams, roofline_seconds
from ..machine.topology import Topology

__all__ = ["StepPricer", "HBM_BYTES_PER_S"]

#: HBM bandwidth by device-name prefix (NVIDIA datasheets), bytes/s.
HBM_BYTES_PER_S = {
    "A100-40GB-PCIe": 1.555e12, "A100": 2.039e12, "H100": 3.35e12, "H200": 4.8e12,
    "V100": 0.9e12, "P100": 0.732e12,
}
_GEMM_OPS = frozenset({"linear", "matmul", "conv", "attention"})
#: HBM bytes per Adam update of one parameter in mixed precision.
OPTIMIZER_BYTES_PER_PARAM = _c.OPTIMIZER_BYTES_PER_PARAM.value


def _gemm_dtype(topology: Topology, dtype: str) -> str:
    """``dtype``, or fp16 for bf16 on a device without bf16 (see :class:`StepPricer`)."""
    stated = dict(topology.device.peak_flops_by_dtype)
    if dtype == topology.dtype or dtype in stated:
        return dtype
    if dtype == "bf16" and "fp16" in stated:
        return "fp16"
    raise InvalidTopologyError(
        f"StepPricer: device {topology.device.name!r} states no {dtype} peak (it states "
        f"{', '.join(stated) or 'none'}; the topology's peak_flops is {topology.dtype}); pass "
        f"dtype= one of those")


class StepPricer:
    """Seconds of step pieces on one topology (see the module docstring: a placeholder).

    Parameters
    ----------
    topology : Topology
    gemm_efficiency, memory_efficiency : float
        Fractions of the device's peak FLOP/s and HBM bandwidth reached.
    kernel_seconds : float, optional
        Fixed time per kernel launch (default: the device's ``kernel_launch_s``, else
        ``constants.KERNEL_LAUNCH_S``).
    hbm_bytes_per_s : float, optional
        Default: the device's ``memory_bandwidth_bytes_per_s`` (the presets state it), else
        :data:`HBM_BYTES_PER_S` by the device's name.
    dtype : str
        The dtype of the step's GEMMs (default ``"bf16"``: the transformer step is mixed
        precision, as Megatron-LM trains). Its peak is the device's stated peak for that
        dtype, whatever dtype the topology's ``peak_flops`` refers to (presets default to
        fp32); a device that states no bf16 peak (V100, P100) runs ``"fp16"`` instead; the
        topology's own ``peak_flops`` is used when ``dtype`` is the topology's dtype.

    Raises
    ------
    InvalidTopologyError
        An unknown device without ``hbm_bytes_per_s``, efficiencies outside ``(0, 1]``, or
        a device that states no peak for ``dtype``.
    """

    def __init__(self, topology: Topology, *,
                 gemm_efficiency: float = _c.GEMM_EFFICIENCY_16BIT.value,
                 memory_efficiency: float = RooflineParams().memory_efficiency,
                 kernel_seconds: float | None = None,
                 hbm_bytes_per_s: float | None = None, dtype: str = "bf16") -> None:
        if not isinstance(topology, Topology):
            raise InvalidTopologyError(f"StepPricer needs a Topology, got {topology!r}")
        for what, v in (("gemm_efficiency", gemm_efficiency),
                        ("memory_efficiency", memory_efficiency)):
            if not 0 < v <= 1:
                raise InvalidTopologyError(f"StepPricer: {what} must be in (0, 1], got {v!r}")
        dev = topology.device
        if hbm_bytes_per_s is None and getattr(dev, "memory_bandwidth_bytes_per_s", 0) > 0:
            hbm_bytes_per_s = float(dev.memory_bandwidth_bytes_per_s)   # the preset's figure
        if kernel_seconds is None:
            kernel_seconds = (float(getattr(dev, "kernel_launch_s", 0.0))
                              or _c.KERNEL_LAUNCH_S.value)
        if hbm_bytes_per_s is None:
            name = topology.device.name
            hit = [v for k, v in HBM_BYTES_PER_S.items() if name.startswith(k)]
            if not hit:
                raise InvalidTopologyError(
                    f"StepPricer: no HBM bandwidth known for device {name!r}; pass "
                    "hbm_bytes_per_s=")
            hbm_bytes_per_s = hit[0]
        self.topology = topology
        self.dtype = _gemm_dtype(topology, dtype)
        peak = (dev.peak_flops if self.dtype == topology.dtype
                else dev.peak_flops_for(self.dtype))
        self.flops_per_s = float(peak) * gemm_efficiency
        self.bytes_per_s = float(hbm_bytes_per_s) * memory_efficiency
        self._cache: dict = {}
        self.kernel_seconds = float(kernel_seconds)

    # ------------------------------------------------------------------ compute
    def compute_seconds(self, op: str, flops: float, bytes_moved: float, *,
                        score_elements: float = 0.0, attention_dropout: bool = False
                        ) -> tuple[float, float]:
        """``(forward, backward)`` seconds of one layer's tile.

        Parameters
        ----------
        op : str
            The layer's op (decides matrix product vs memory-bound).
        flops, bytes_moved : float
            Forward FLOPs and HBM bytes (inputs read, output written, weights read).
        score_elements : float
            Attention only: elements of the ``S x S`` score tensors the tile computes (0 for
            a flash kernel).
        attention_dropout : bool
            Attention only: dropout on the probabilities.
        """
        k = self.kernel_seconds
        rf = dict(flops_per_s=self.flops_per_s, bytes_per_s=self.bytes_per_s, launch_s=k)
        if op in _GEMM_OPS:
            fwd = float(roofline_seconds(flops, bytes_moved, 1, **rf))
            bwd = float(roofline_seconds(2.0 * flops, 2.0 * bytes_moved, 2, **rf))
            if op == "attention" and score_elements > 0:
                per = (_c.SCORE_BYTES_DROPOUT if attention_dropout
                       else _c.SCORE_BYTES_NO_DROPOUT).value
                fwd += per * score_elements / self.bytes_per_s + 2 * k
                bwd += 2.0 * per * score_elements / self.bytes_per_s + 2 * k
            return fwd, bwd
        if bytes_moved <= 0:
            return 0.0, 0.0
        fwd = bytes_moved / self.bytes_per_s + k
        return fwd, 2.0 * (fwd - k) + k

    def optimizer_seconds(self, params: float) -> float:
        """Adam's update of ``params`` local parameters (memory-bound)."""
        return _c.OPTIMIZER_BYTES_PER_PARAM.value * float(params) / self.bytes_per_s

    # ------------------------------------------------------------------ communication
    def collective_terms(self, name: str, devices, *, nbytes: float = 64 * 2**20
                         ) -> tuple[float, float]:
        """``(latency seconds, seconds per byte of the whole buffer)`` of a collective.

        All-reduce, all-gather and reduce-scatter come from :mod:`milp_parallel.machine.collectives`
        (ring, tree or hierarchical, the fastest for an ``nbytes`` message, as NCCL's tuner
        picks; network cards shared by the groups that run at once); all-to-all, which it
        does not model, is ``(r - 1) (alpha + m / (r^2 bw))`` on the slowest link.

        Parameters
        ----------
        name : {"allreduce", "allgather", "reducescatter", "alltoall"}
        devices : array_like of int, shape (r,) or (G, r)
            One group, or ``G`` groups that run at the same time (the first one's cost).
        nbytes : float
            The message size the algorithm is chosen for.
        """
        d = np.atleast_2d(np.asarray(devices, dtype=np.int64))
        key = (name, d.tobytes(), d.shape, float(nbytes))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        r = d.shape[1]
        if r <= 1:
            hit = (0.0, 0.0)
        elif name == "alltoall":
            alpha, bw, _ = self.topology.ring_parameters(d[0])
            hit = ((r - 1) * float(alpha), (r - 1) / (r * r) / float(bw))
        elif name in ("allreduce", "allgather", "reducescatter"):
            fn = getattr(collectives, f"{name}_cost")
            c = fn(self.topology, d, algorithm="auto", nbytes=float(nbytes))[0]
            hit = (float(c.latency_s), float(c.seconds_per_byte))
        else:
            raise InvalidTopologyError(f"unknown collective {name!r}")
        self._cache[key] = hit
        return hit

    def collective_seconds(self, name: str, devices, nbytes: float) -> float:
        """Seconds of one collective over ``devices`` on an ``nbytes`` buffer."""
        lat, per_byte = self.collective_terms(name, devices)
        return lat + per_byte * float(nbytes)

    def p2p_terms(self, src: int, dst: int) -> tuple[float, float]:
        """``(latency, seconds per byte)`` of a message from device ``src`` to ``dst``."""
        if src == dst:
            return 0.0, 0.0
        return (float(self.topology.latency(src, dst)),
                1.0 / float(self.topology.bandwidth(src, dst)))
