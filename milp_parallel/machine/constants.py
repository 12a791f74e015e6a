"""The model's efficiency, latency, launch-time and bytes-per-parameter constants, each with
its source next to the number (issue 26.2).

A constant is a :class:`Sourced`: its value, its unit and where the value comes from (a data
sheet, a paper's table, a public measurement, a derivation, or a calibration against
published logs). ``checked`` is ``False`` where the figure could not be checked against its
source here; such a constant says so in its ``source``. :func:`table` lists them all (what
``benchmarks/megatron.py --sensitivity`` varies and ``tests/test_constants_sourced.py``
checks). Modules read ``.value``; no number of this kind is written bare in
``clusters.py``, ``roofline.py``, ``step_costs.py`` or the oracle.

May import: nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sourced", "table", "GEMM_EFFICIENCY_16BIT", "MEMORY_EFFICIENCY",
           "VECTOR_COMPUTE_FRACTION", "GEMM_TILE", "DEFAULT_EFFICIENCY", "KERNEL_LAUNCH_S",
           "NVLINK_LATENCY_S", "IB_LATENCY_S", "OPTIMIZER_BYTES_PER_PARAM",
           "SCORE_BYTES_DROPOUT", "SCORE_BYTES_NO_DROPOUT", "PARADL_BYTES_PER_ELEMENT"]


@dataclass(frozen=True)
class Sourced:
    """A number and where it comes from.

    Parameters
    ----------
    value : float
    unit : str
        E.g. ``"fraction of peak"``, ``"s"``, ``"B per parameter"``.
    source : str
        The data sheet, paper (section / table), measurement or derivation behind ``value``.
    checked : bool, default True
        ``False`` when the figure could not be checked against its source here.
    """

    value: float
    unit: str
    source: str
    checked: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or len(self.source.strip()) < 10:
            raise ValueError(f"Sourced({self.value!r}): a constant needs its source, got "
                             f"{self.source!r}")


#: Fraction of the 16-bit tensor-core peak a transformer's matrix products reach (the
#: pipeline step model, :class:`milp_parallel.pipeline.step_costs.StepPricer`).
GEMM_EFFICIENCY_16BIT = Sourced(
    0.869, "fraction of the 16-bit dense peak",
    "S. Bekman, Machine Learning Engineering, compute/accelerator/README.md, 'Maximum "
    "Achievable Matmul FLOPS comparison table' (github.com/stas00/ml-engineering): NVIDIA "
    "A100 SXM, BF16 torch.matmul, 271.2 of 312 TFLOP/s = 86.9% (best shape 1024x10240x5120, "
    "torch 2.6.0+cu126; mean of 100 iterations after 50 warm-up). A best-shape ceiling: "
    "Megatron's GEMMs (h = 2304..12288, 4h MLP) are of that size class. Replaces 0.75, "
    "which had no source.")

#: Fraction of the data-sheet HBM bandwidth a streaming kernel sustains (the roofline).
MEMORY_EFFICIENCY = Sourced(
    0.88, "fraction of the data-sheet HBM bandwidth",
    "NVIDIA developer forum, 'Trouble to reach peak bandwidth of A100' "
    "(forums.developer.nvidia.com/t/339083): a read kernel on A100 80GB SXM sustains "
    "1.80 of 2.04 TB/s, Nsight Compute agrees at 88% of peak; the thread cites a GTC talk "
    "whose best kernel reached about 90%. A third-party measurement on A100 (the GTC talk "
    "was not read here); replaces 0.8, which had no source.")

#: FLOP/s of non-dense ops as a fraction of the dense speed (the roofline).
VECTOR_COMPUTE_FRACTION = Sourced(
    0.5, "fraction of the dense FLOP/s",
    "derivation: NVIDIA data-sheet peaks count a fused multiply-add as 2 FLOPs; element-wise "
    "kernels issue one operation per element, so at most half the dense rate. These ops are "
    "memory-bound on every preset, so the figure rarely binds.")

#: Output tile of a GPU matrix product, elements (tile quantization in the roofline).
GEMM_TILE = Sourced(
    128, "elements per output-tile side",
    "NVIDIA, Matrix Multiplication Background User's Guide (Deep Learning Performance "
    "documentation), 'Tile Quantization': cuBLAS thread-block tiles of 128 x 128 / 256 x 128.")

#: Fraction of the fp32 peak the layer-wise (CNN) cost model and ParaDL reach.
DEFAULT_EFFICIENCY = Sourced(
    0.5, "fraction of the device's peak",
    "ParaDL (Kahira et al., HPDC 2021) platform file ABCI.plat: NODE_SPEED 7.8e12 FLOP/s, "
    "its measured fp32 speed, for a V100 SXM2 whose data-sheet fp32 peak is 15.7e12 "
    "(7.8 / 15.7 = 0.497); reproduces ParaDL's measured compute times "
    "(shared/reference/paradl/ABCI.plat).")

#: Fixed time per GPU kernel (launch and scheduling gap), seconds.
KERNEL_LAUNCH_S = Sourced(
    4e-6, "s per kernel",
    "NOT CHECKED against a source: the usual gap between back-to-back asynchronous kernel "
    "launches from a framework on V100/A100-class GPUs (a few microseconds). NVIDIA's Nsight "
    "Systems guide quotes about 20 us for a PyTorch element-wise op's host round trip on "
    "V100, a host-side figure, not this GPU-side gap. 'milp-parallel calibrate --profile' "
    "replaces it by a measured table where it has the tile.", checked=False)

#: NCCL-level per-message latency on NVLink, seconds.
NVLINK_LATENCY_S = Sourced(
    9e-6, "s per ring step",
    "calibration to ParaDL's published ranking_* logs (shared/reference/paradl/logs; "
    "DESIGN.md section 6): ABCI's NVLink alpha that reproduces their SUMMARY exactly.")

#: NCCL-level per-message latency on InfiniBand, seconds.
IB_LATENCY_S = Sourced(
    40.31e-6, "s per ring step",
    "calibration to ParaDL's published ranking_* logs (DESIGN.md section 6): ABCI's "
    "InfiniBand EDR alpha for rings of at most 68 GPUs (40.49 us up to 136, 40.98 us beyond: "
    "2 x (20 us PLX cable + 110 ns) plus the switches crossed, ParaDL's parallel_analysis.py).")

#: HBM bytes per Adam update of one parameter in mixed precision.
OPTIMIZER_BYTES_PER_PARAM = Sourced(
    28.0, "B per parameter",
    "derivation from mixed-precision Adam (Micikevicius et al., ICLR 2018; Rajbhandari et "
    "al., ZeRO, SC'20, section 3.1: fp32 master weight, momentum and variance, 4 B each): "
    "3 x 4 B read + 3 x 4 B written + 2 B 16-bit gradient read + 2 B 16-bit weight written.")

#: HBM bytes per attention-score element of scale-mask-softmax and dropout, forward.
SCORE_BYTES_DROPOUT = Sourced(
    13.0, "B per score element",
    "derivation: 16-bit scores read (2) and softmax written (2) by the fused "
    "scale-mask-softmax, softmax read (2), 1-byte dropout mask written (1) and 16-bit "
    "output written (2), then read by the second batched product (2) and the mask read "
    "back (2 for the fused kernel's pass); Korthikanti et al. (MLSys 2023) section 4.1 "
    "store 2 + 1 + 2 bytes per element of these tensors.", checked=False)

#: As :data:`SCORE_BYTES_DROPOUT` without dropout.
SCORE_BYTES_NO_DROPOUT = Sourced(
    8.0, "B per score element",
    "derivation: scores read (2), softmax written (2), read by the second batched product "
    "(2), plus the scale-mask pass's write and read of the masked scores (2) in 16 bits.",
    checked=False)

#: Bytes per tensor element in ParaDL's oracle.
PARADL_BYTES_PER_ELEMENT = Sourced(
    4.0, "B per element",
    "ParaDL (Kahira et al., HPDC 2021) section 3: delta = 4 (fp32 training); "
    "parallel_analysis.py of TruongThaoNguyen/paraDL-analysis.")


def table() -> list[tuple[str, Sourced]]:
    """Every constant of this module, ``(name, Sourced)``, in declaration order."""
    return [(k, v) for k, v in globals().items() if isinstance(v, Sourced)]
