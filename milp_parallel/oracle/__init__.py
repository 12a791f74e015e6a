"""ParaDL's analytical oracle: time per epoch and memory per device of uniform strategies.

The oracle of Kahira et al. (HPDC 2021; tech report "A Model-driven Analysis of the Practical
Limits of Large-scale DNN Training", 2020) projects, for a whole-model strategy (every layer
split the same way), the compute and communication time of one epoch and the memory each
device needs (DESIGN section 4). With ``D`` samples, global batch ``B``, ``p`` devices,
``I = ceil(D / B)`` iterations, ``delta`` bytes per element and ring collectives
(all-reduce ``2(p-1)(alpha + m beta / p)``, all-gather ``(p-1)(alpha + m beta / p)`` per
``m``-byte result):

========== ================================================ =====================================
strategy   communication per iteration                      memory per device
========== ================================================ =====================================
serial     none                                             ``2 delta (B sum(|x|+|y|) + sum|w|)``
data       all-reduce of ``sum|w|``                         ``2 delta ((B/p) sum(|x|+|y|) + |w|)``
spatial    halo of each kernel > 1 layer (both passes),     activations of split layers / p
           all-gather at the last split layer, all-reduce
filter     all-gather of ``B|y_l|`` (forward) and           weights of split layers / p
           all-reduce (backward) per split layer but last
channel    all-reduce (forward) and all-gather (backward)   as filter
data+filt. filter inside a node, all-reduce across nodes    activations / p1, weights / p2
data+spat. spatial inside a node, data across nodes          activations / p
pipeline   point-to-point between stages (GPipe, S micro-   the largest stage
           batches)
========== ================================================ =====================================

Two modes:

``mode="paradl"``
    Reproduces ParaDL's published numbers exactly (see :func:`paradl_summary` and the
    "Quirks" list below). The network is ParaDL's built-in ABCI model (NVLink 50 GB/s and
    9 us inside a node of 4; beyond, InfiniBand 12.5 GB/s with a latency of
    ``2 (plx_cable + 110 ns) + switches``: 40.31 us up to 68 GPUs, 40.49 us up to 136, 40.98 us
    beyond); the ``.plat`` bandwidth and latency lines are not used, as in ParaDL. The
    ``*_scaling_proj`` logs of the repository were produced with an older PLX cable latency of
    15 us instead of 20 us (``plx_cable_latency_s=15e-6``), i.e. 10 us less per ring step
    beyond one node.
    Data+spatial follows ParaDL's **current** ``parallel_analysis.py`` (repository
    TruongThaoNguyen/paraDL-analysis, unchanged from commit 82cdf91 to ce36803) by default;
    ``ds_source="log"`` reproduces the repository's published data+spatial log, which an
    older version of that code produced (see quirk 5).
``mode="default"``
    The strategies as ChainerMN-X implements them (the code ParaDL measured), priced on our
    :class:`~milp_parallel.topology.Topology` (or a ``.plat``'s single bandwidth and latency)
    with the roofline and this package's collectives: :mod:`milp_parallel.oracle.implementation`
    (compute spread by the roofline, split tiles priced as tiles, chained blocking halo
    exchanges, NCCL all-gathers and the hybrid optimizer's all-reduces). Serial, pipeline and
    the memory formulas are ParaDL's with the quirks below corrected.

Memory, the two modes side by side. Both count ``2 delta (samples on the device x sum(|x| +
|y|) + |w| on the device)`` bytes: the inputs and outputs kept for the backward pass and their
gradients, the weights and their gradients, no optimizer state, no workspace
(:func:`~milp_parallel.oracle.formulas.memory_note`, printed under the command line's table,
with ``GB`` = 1e9 bytes as the cluster capacities). ``delta`` is 4 bytes in ParaDL mode and
the size of the topology's ``dtype`` in default mode (4 for the fp32 presets). What differs:
ParaDL mode leaves RELU and BNORM rows out (quirk 1), default mode counts every row, which
roughly doubles the activations. For ResNet-50, data parallelism at 32 samples per GPU:
``oracle --paradl`` on ParaDL's table gives 7.81 GB (ParaDL's number, reproduced); ``oracle
resnet50 --cluster abci`` gives 19.5 GB (18.2 GiB) on the zoo's ResNet-50, of which 8.89 GB
with ParaDL's rule; the rest is the zoo graph itself, whose four projection shortcuts
(convolution and batch norm) ParaDL's table leaves out (25.6 M weights against 22.7 M).
Default mode keeps counting every row: Chainer keeps the outputs of ReLU and batch norm for
the backward pass, so leaving them out understates the memory.

Package layout: :mod:`~milp_parallel.oracle.model` (the formulas' inputs and ParaDL's ABCI
network), :mod:`~milp_parallel.oracle.formulas` (one function per strategy),
:mod:`~milp_parallel.oracle.implementation` (the default mode's physics),
:mod:`~milp_parallel.oracle.projection` (:func:`project`, :func:`rank`),
:mod:`~milp_parallel.oracle.summary` (ParaDL's command line, :func:`paradl_summary`).

Quirks of ParaDL reproduced in ``paradl`` mode (corrected in ``default`` mode)
--------------------------------------------------------------------------------
1. Activation memory of serial, data, filter, channel and data+filter leaves out RELU and
   BNORM rows (counted as in place); spatial and data+spatial count every row. Default:
   every row counts.
2. Filter and channel memory divide the split layers' weights by ``p`` twice. Default: once.
3. Integer iteration counts ``ceil(D/B)``, but data parallelism's compute uses
   ``ceil(D/p)`` samples and spatial's all-reduce uses ``D/B`` (not rounded). Default:
   ``I = ceil(D/B)`` everywhere (compute is ``I * B/p`` samples per device).
4. Spatial halos use the memory capacity in samples (``maxSamplePerNode``, a real number)
   instead of the batch, and a halo of ``W * floor((K-1)/2)`` elements (width only, no
   channels or height); ``floor`` makes 2x2 pools exchange nothing yet pay the latency.
   Default: ``B * C * H * floor(K/2)`` elements per side, only layers with ``K > 1``.
5. Data+filter: the across-node all-reduce sends the full weights (the ChainerMNx
   implementation limit) over a bandwidth divided by ``2 * GPUs per node`` (contention on
   the PCIe switch). Data+spatial (current code): halos of the masked kernel > 1 layers,
   ``C H floor((K-1)/2)`` elements per sample for both passes, at ``16 GB/s / (2 p2)`` and
   3 ms latency (no GPUDirect); the all-gather at ``16 GB/s / 2``, over ``p2`` only; a
   hierarchical all-reduce with the across-node bandwidth divided by ``2 p2``; compute and
   memory leave out the layers after the last spatially split one. The published log's
   older version: halos of every kernel > 1 layer up to the split, masked or not, of
   ``W floor((K-1)/2)`` elements, at ``16 GB/s / p2``; the all-gather at the same bandwidth;
   the across-node bandwidth halved. Default: see :mod:`~milp_parallel.oracle.implementation`.
6. Filter and channel rows that do not fit in memory are dropped (they are reported as
   not fitting in :func:`project`); data, data+filter and data+spatial rows are kept
   whatever their memory.
7. The measured per-sample time covers forward, backward and the weight update, spread
   over layers in proportion to ``2 * forward FLOPs + |w|``, which leaves memory-bound layers
   (batch norm, ReLU) almost nothing. Default: spread by each layer's roofline time on the
   cluster's device.

Examples
--------
>>> from milp_parallel import paradl, oracle
>>> net = paradl.read_net("data/paradl/RESNET50_ImageNet_profall.net_sc")  # doctest: +SKIP
>>> rows = oracle.paradl_summary(net, "data/paradl/ABCI.plat", "d", max_devices=16,
...                              max_batch=262144, batch_per_device=64)  # doctest: +SKIP
"""

from .formulas import FORMULAS, ProjectionRow
from .model import (
    BYTES_PER_ELEMENT,
    PARADL_CODES,
    PLX_CABLE_LATENCY_OLD_S,
    PLX_CABLE_LATENCY_S,
    STRATEGIES,
    abci_link,
)
from .projection import Projection, compare_with_layerwise, project, rank
from .summary import _SUMMARY_KEYS, paradl_summary, parse_command, parse_summary  # noqa: F401

__all__ = [
    "STRATEGIES",
    "PARADL_CODES",
    "ProjectionRow",
    "Projection",
    "project",
    "rank",
    "paradl_summary",
    "parse_summary",
    "parse_command",
    "abci_link",
    "compare_with_layerwise",
    "PLX_CABLE_LATENCY_S",
    "PLX_CABLE_LATENCY_OLD_S",
    "BYTES_PER_ELEMENT",
    "FORMULAS",
]
