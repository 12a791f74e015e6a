"""The cost model: compute, gradient sync, redistribution and memory of every configuration.

All methods take a whole ``(K, ndim)`` array of configurations (see :mod:`.configs`, whose
placement rule decides which device holds which tile) and answer for all of them at once.
Times are seconds per training step (forward + backward); memory is bytes per device.

- :meth:`CostModel.compute_seconds` (``t_c``): forward, backward and optimizer update of the
  largest tile. Default (``compute_model="roofline"``): the per-op roofline of
  :mod:`milp_parallel.roofline` (FLOPs at the op class's speed or bytes at the memory
  bandwidth, whichever is slower, plus a launch time per kernel; each phase from its own FLOPs
  and bytes). ``compute_model="flops"`` is the older model: FLOPs of the tile, forward plus
  backward, over ``peak_flops * efficiency``, backward = ``backward_factor`` (2) x forward
  for layers with parameters, ``backward_factor_no_params`` (1) x forward otherwise, no
  update. Layer FLOPs are proportional to the output elements a tile computes. With a
  ``profile`` (any object with ``lookup(layer, tile_shape) -> seconds or None``), a measured
  forward+backward time of the largest tile replaces the forward+backward estimate, and a
  measured optimizer step of its weight shard the update's (``lookup_update``, when the
  profile's ``optimizer_state_factor`` is the cost model's; else the update stays
  estimated); misses fall back and are counted in :attr:`CostModel.profile_stats`.
  :meth:`CostModel.compute_phases` gives the three phases.
- :meth:`CostModel.sync_seconds` (``t_s``): the all-reduce of the weight shard (``params /
  prod(degrees of weight_split_dims) * bytes_per_element``) among the replicas holding the
  same shard, as a collective library runs it (:mod:`milp_parallel.collectives`: ring, tree
  or hierarchical, alpha-beta per level, network cards shared by the groups that cross nodes
  at once; ``collective="auto"`` takes the cheapest per group, as NCCL's tuner); the slowest
  of the groups (they run in parallel). 0 without parameters or without replicas.
  Bucketing (``gradient_bucket_bytes``, PyTorch DDP's 25 MiB by default) and the overlap
  credit (``sync_overlap``) are approximations inside the separable objective: the layer pays
  ``m / b`` of the all-reduce of a full bucket of ``b`` bytes (the latency amortized over the
  bucket, the bytes at bandwidth, the algorithm the bucket size picks), minus ``sync_overlap``
  x its own backward time, never below 0. The credit stands for the backward compute that runs
  while the layer's bucket is reduced (in a chain, that of the layer before it, which the
  separable objective cannot see); it is never more than a perfectly pooled schedule hides
  (``sum max(0, s - b) >= max(0, sum s - sum b)``), but it ignores the last bucket, which
  nothing hides, and a model smaller than one bucket pays less than one bucket's latency.
  :func:`milp_parallel.simulate.simulate` runs the real bucket schedule.
  :meth:`CostModel.allreduce_seconds` is the layer's all-reduce on its own.
- **Batch statistics** (``batchnorm_stats``): a batch-norm split along its samples or its
  spatial dims computes, in training, the mean and variance of each channel over the whole
  batch only if the ranks that share a channel slice (its replica groups) sum them.
  ``"local"`` (the default, PyTorch DDP's ``BatchNorm`` without ``SyncBatchNorm``): each
  tile normalizes by its own statistics, no communication, a different function of the
  batch than the module's; ``"sync"`` (the module's function, as ``SyncBatchNorm`` and the
  layer-wise runtime compute it): the forward all-reduces the per-channel sum and sum of
  squares of the tile (``2 C_tile`` fp32) and the backward the sums of the gradient and of
  the gradient times the normalized input (as many), each a blocking collective on the
  layer's critical path: :meth:`CostModel.stats_seconds` is added to the layer's forward
  and to its backward (:meth:`compute_phases`, so the objective, the simulator and the
  certificate all see it).
- :meth:`CostModel.transfer_seconds` (``t_x``): redistribution of one edge's tensor. Forward:
  every consumer device receives the part of the input region its tile needs
  (``consumer.input_region``) that it does not hold under the producer's layout. A receiver's
  time is the sum over the levels the data crosses of ``alpha + bytes / bandwidth``
  (latency counted once per level that carries data: the messages over one level are issued
  together); devices receive in parallel, so the forward costs the **max over receivers**.
  Over a level whose units share network cards (``Level.uplinks = U``), the ``n`` devices of
  one node that receive over it at once share the node's ``U`` cards: their bytes move at
  ``bandwidth x min(1, U / n)`` (the receiving side; the sending side is not modelled).
  The backward pass sends the gradient of every received region back over the same links
  (the same bytes per pair of devices, reversed); it is charged the forward time, so ``t_x =
  (1 + backward_transfer_factor) x forward`` with the factor 1 by default. That is exact for
  halo exchanges and for re-layouts where every device receives as much as it sends (e.g.
  sample-split <-> channel-split on as many devices); when one side uses fewer devices the
  reverse direction may be slower (those devices receive more) and this under-estimates it.
  An edge out of a graph input (``producer.op == "input"``) has no backward: no gradient
  flows into the data, so its ``t_x`` is the forward alone.
  0 when the layouts match. :meth:`CostModel.transfer_table` is the same table as cached
  (read-only, no copy).
- **The program's own time** (``layer_overhead_seconds``, ``step_overhead_seconds``, 0 by
  default): what the program running the plan adds per layer and per step beyond the
  operators the profile or the roofline prices, measured on a chain of tiny layers run by
  that program (:mod:`milp_parallel.runtime.overhead`).
- :meth:`CostModel.memory_bytes`: per device, ``(2 + optimizer_state_factor)`` x the weight
  shard it holds (weights, gradients, optimizer state; the default 2 is Adam's two moments, 0
  gives ParaDL's accounting) plus what the layer's backward keeps on its tile, per op
  (:mod:`.saved`: a convolution's padded input window, a linear's input, a ReLU's output,
  a batch-norm's input and statistics, a max pool's window and indices, nothing for an add
  or a view). Devices a configuration does not use hold 0. :meth:`CostModel.memory_parts`
  gives the four parts.

How ``t_x`` is computed fast: data that reaches a device over level ``l`` of the hierarchy is
what its need box shares with the part of the tensor held inside its level-``l`` unit (its
node, its group of nodes) minus what it shares with the part held one level below. Under the
placement rule an aligned block of devices holds a box (exact with power-of-two degrees and
fanouts); for other spaces the bounding box is used, which may under-count remote bytes. So a
receiver needs ``levels + 1`` box intersections instead of one per sender. An intersection
volume is the product of 1-D overlaps and a dim has few distinct intervals, so the volumes are
gathered from small tables (holder interval x need interval, dims merged into joint tables
while small) over all ``(K_u, K_v, devices)`` at once, in cache-sized blocks; identical edges
(same producer tiles, same need boxes) are computed once per :class:`CostModel`.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import Any

import numpy as np

from ..errors import InvalidTopologyError
from ..machine.collectives import ALGORITHMS, cost_table
from ..machine.roofline import RooflineParams, phase_seconds
from ..machine.topology import DTYPE_BYTES, Topology
from .configs import tile_boxes, tile_extent
from .saved import saved_bytes
from .transfer import _block_boxes, _interval_ids, _level_tables

__all__ = ["CostModel", "COMPUTE_MODELS", "BATCHNORM_STATS", "DDP_BUCKET_BYTES",
           "replica_groups"]

#: PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``), bytes.
DDP_BUCKET_BYTES = 25 * 2**20

#: The compute models :class:`CostModel` knows.
COMPUTE_MODELS = ("roofline", "flops")

#: How a batch-norm split along samples or space gets its statistics (see the module
#: docstring): ``"local"``, each tile its own; ``"sync"``, the whole batch's (all-reduced).
BATCHNORM_STATS = ("local", "sync")

#: Bytes per element of the batch statistics all-reduced (fp32, as PyTorch keeps them).
STATS_BYTES_PER_ELEMENT = 4

logger = logging.getLogger(__name__)

#: Largest (holder configs x receiver devices) block t_x works on at once (about 256 KB an
#: array: the working set stays in the cache).
_CHUNK_ELEMENTS = 1 << 15
#: Largest overlap-volume table t_x gathers from (entries; float64).
_TABLE_ENTRIES = 1 << 18


def _digest(*arrays: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.digest()


def _takes(profile: Any, keyword: str) -> bool:
    """Whether ``profile.lookup`` takes ``keyword`` (False without a profile, or when its
    signature cannot be read)."""
    if profile is None:
        return False
    try:
        return keyword in inspect.signature(profile.lookup).parameters
    except (TypeError, ValueError):
        return False


def _narrow(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays as int32 when their values fit (fewer bytes to hash), else unchanged."""
    if all(a.size == 0 or (a.min() >= -(1 << 31) and a.max() < 1 << 31) for a in arrays):
        return tuple(a.astype(np.int32) for a in arrays)
    return arrays


def replica_groups(degrees, split) -> np.ndarray:
    """The groups of devices that hold the same weight shard under a configuration.

    Parameters
    ----------
    degrees : sequence of int
        One configuration (aligned with the layer's dims); tile ``t`` is on device ``t``.
    split : sequence of bool
        Per dim, whether splitting it splits the weights (``layer.weight_split_dims``).

    Returns
    -------
    numpy.ndarray of int, shape (shards, replicas)
        Row ``j``: the devices holding shard ``j``, increasing.

    Examples
    --------
    >>> replica_groups([2, 2], [False, True]).tolist()     # n=2 c=2: shards c=0 and c=1
    [[0, 2], [1, 3]]
    """
    d = np.asarray(degrees, dtype=np.int64)
    t = np.arange(int(d.prod()))
    coord = np.stack(np.unravel_index(t, d), axis=1)
    mask = np.asarray(split, bool)
    if mask.any():
        shard = np.ravel_multi_index(tuple(coord[:, mask].T), tuple(d[mask]))
        n_shards = int(d[mask].prod())
    else:
        shard, n_shards = np.zeros(len(t), np.int64), 1
    return t[np.argsort(shard, kind="stable")].reshape(n_shards, -1)


class CostModel:
    """Vectorized costs of layer configurations on a topology.

    Parameters
    ----------
    topology : Topology
    bytes_per_element : int, optional
        4 for fp32, 2 for bf16 / fp16 (activations, weights and gradients alike). Default:
        the size of ``dtype``, else of the topology's dtype (what its ``peak_flops`` is the
        peak of: fp32, 4 bytes, for every preset by default).
    optimizer_state_factor : float, default 2.0
        Optimizer state per weight, in weights (Adam: 2, SGD with momentum: 1, plain SGD: 0).
    backward_factor : float, default 2.0
        Backward FLOPs / forward FLOPs for layers with parameters (``compute_model="flops"``
        only; the roofline counts each op's backward itself).
    backward_factor_no_params : float, default 1.0
        The same for layers without parameters.
    backward_transfer_factor : float, default 1.0
        Backward redistribution time / forward redistribution time (see the module docstring).
    profile : object, optional
        Has ``lookup(layer, tile_shape) -> seconds or None`` (a forward+backward time);
        optionally ``lookup_update`` (the same for the optimizer step of the tile's weight
        shard) and ``optimizer_state_factor`` (the optimizer it timed), as
        :class:`~milp_parallel.measure.profile.ProfileTable` has. A ``lookup`` that takes
        ``graph_inputs`` is told which inputs of a layer are graph inputs (a training step
        computes no gradient of the data).
    compute_model : {"roofline", "flops"}, default "roofline"
        See the module docstring.
    roofline : RooflineParams, optional
        The roofline's efficiencies (default :class:`~milp_parallel.roofline.RooflineParams`).
    dtype : str, optional
        ``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``, ...: the compute peak is the device's
        data-sheet peak for it (``Device.peak_flops_for``) instead of ``peak_flops``, and
        ``bytes_per_element`` defaults to its size.
    collective : {"auto", "ring", "tree", "hierarchical"}, default "auto"
        The all-reduce algorithm of the gradient sync (``auto``: the cheapest per group).
    gradient_bucket_bytes : float or None, default :data:`DDP_BUCKET_BYTES` (25 MiB)
        Gradient bucket size; ``None``: every layer's gradient is all-reduced on its own.
    sync_overlap : float, default 1.0
        Fraction of a layer's backward time its sync may hide behind (0: no overlap).
    bucket_copies : int, default 0
        Copies of each gradient shard per step between the gradient and its bucket: PyTorch
        DDP's default reducer copies a gradient into its bucket before the all-reduce and the
        reduced bucket back (2; 0: the gradient is reduced where it lies, as DDP's
        ``gradient_as_bucket_view=True`` does). Each copy reads and writes the
        shard at the device's memory bandwidth (times the roofline's memory efficiency), on
        the device's compute stream, so no overlap hides it. Measured on a 2-core CPU: DDP
        with a comm hook that reduces nothing took 3-4 ms more per step than the module
        alone for 7.4 MB of gradients; two copies at the measured copy bandwidth are 2.7 ms.
    batchnorm_stats : {"local", "sync"}, default "local"
        The batch statistics of a batch-norm split along samples or space (see the module
        docstring): ``"local"``, each tile's own (DDP's ``BatchNorm``, free); ``"sync"``,
        the whole batch's, as the module computes them (two all-reduces of ``2 C_tile``
        fp32 per step, :meth:`stats_seconds`; the layer-wise runtime runs such a plan, and
        refuses a ``"local"`` one whose batch-norm is split so in training).
    layer_overhead_seconds : float, default 0.0
        What the program that runs the plan adds to every layer of a step beyond the
        layer's own operators (an interpreter's dispatch: the layer-wise runtime's Python
        per layer), half to its forward and half to its backward, on every configuration
        (0: a program whose overhead hides behind the device, as a GPU's asynchronous
        launches do). Measured, not assumed: :func:`milp_parallel.runtime.overhead.
        measure_program_overhead`.
    step_overhead_seconds : float, default 0.0
        The program's fixed time per training step (the loss, the autograd engine's start,
        ``zero_grad`` and the optimizer step's fixed part), the same for every plan: the
        step simulator adds it once per step; the separable objective leaves it out (it
        changes no choice). Measured with ``layer_overhead_seconds``.

    Raises
    ------
    InvalidTopologyError
        When ``topology`` is not a Topology, a factor is negative, the compute model is
        unknown, or the device states no peak for ``dtype``.

    Examples
    --------
    >>> from milp_parallel import clusters
    >>> from milp_parallel.graph import LayerGraph
    >>> g = LayerGraph()
    >>> _ = g.input("x", (8, 16))
    >>> _ = g.linear("fc", "x", 16)
    >>> cm = CostModel(clusters.get("abci", nodes=1), gradient_bucket_bytes=None,
    ...                sync_overlap=0.0)
    >>> # ring: 2 (r - 1) (alpha + shard / r / bw), shard = 272 params x 4 B, r = 4 replicas
    >>> cm.sync_seconds(g.layer("fc"), np.array([[1, 1], [4, 1], [1, 4]])).tolist()
    [0.0, 5.403264e-05, 0.0]
    >>> # bucketed (25 MiB) and hidden behind the layer's backward: nothing left exposed
    >>> CostModel(clusters.get("abci", nodes=1)).sync_seconds(g.layer("fc"), [[4, 1]]).tolist()
    [0.0]
    """

    def __init__(self, topology: Topology, *, bytes_per_element: int | None = None,
                 optimizer_state_factor: float = 2.0, backward_factor: float = 2.0,
                 backward_factor_no_params: float = 1.0, backward_transfer_factor: float = 1.0,
                 profile: Any = None, compute_model: str = "roofline",
                 roofline: RooflineParams | None = None, dtype: str | None = None,
                 collective: str = "auto",
                 gradient_bucket_bytes: float | None = DDP_BUCKET_BYTES,
                 sync_overlap: float = 1.0, bucket_copies: int = 0,
                 batchnorm_stats: str = "local", layer_overhead_seconds: float = 0.0,
                 step_overhead_seconds: float = 0.0) -> None:
        if not isinstance(topology, Topology):
            raise InvalidTopologyError(f"CostModel needs a Topology, got {topology!r}")
        if compute_model not in COMPUTE_MODELS:
            raise InvalidTopologyError(f"CostModel: unknown compute_model {compute_model!r}; "
                                       f"known: {', '.join(COMPUTE_MODELS)}")
        if collective != "auto" and collective not in ALGORITHMS:
            raise InvalidTopologyError(f"CostModel: unknown collective {collective!r}; known: "
                                       f"auto, {', '.join(ALGORITHMS)}")
        if gradient_bucket_bytes is not None and not (
                isinstance(gradient_bucket_bytes, (int, float, np.number))
                and np.isfinite(gradient_bucket_bytes) and gradient_bucket_bytes > 0):
            raise InvalidTopologyError("CostModel: gradient_bucket_bytes must be a positive "
                                       f"number of bytes or None, got {gradient_bucket_bytes!r}")
        if not (isinstance(sync_overlap, (int, float, np.number))
                and 0 <= sync_overlap <= 1):
            raise InvalidTopologyError(f"CostModel: sync_overlap must be in [0, 1], got "
                                       f"{sync_overlap!r}")
        if (not isinstance(bucket_copies, (int, np.integer)) or isinstance(bucket_copies, bool)
                or bucket_copies < 0):
            raise InvalidTopologyError("CostModel: bucket_copies must be a non-negative "
                                       f"integer (DDP's default reducer: 2), got "
                                       f"{bucket_copies!r}")
        if batchnorm_stats not in BATCHNORM_STATS:
            raise InvalidTopologyError(f"CostModel: batchnorm_stats must be one of "
                                       f"{', '.join(BATCHNORM_STATS)}, got "
                                       f"{batchnorm_stats!r}")
        if roofline is not None and not isinstance(roofline, RooflineParams):
            raise InvalidTopologyError(f"CostModel: roofline must be a RooflineParams, got "
                                       f"{roofline!r}")
        if dtype is not None:
            if dtype not in DTYPE_BYTES:
                raise InvalidTopologyError(f"CostModel: unknown dtype {dtype!r}; known: "
                                           f"{', '.join(DTYPE_BYTES)}")
            self.peak_flops = topology.device.peak_flops_for(dtype)
            if bytes_per_element is None:
                bytes_per_element = DTYPE_BYTES[dtype]
        else:
            self.peak_flops = float(topology.device.peak_flops)
        #: the dtype compute is priced in (the topology's unless ``dtype`` says otherwise)
        self.dtype = dtype or getattr(topology, "dtype", "fp32")
        if bytes_per_element is None:        # the size of the dtype the peak is of
            bytes_per_element = DTYPE_BYTES.get(self.dtype, 4)
        for what, v in (("bytes_per_element", bytes_per_element),
                        ("optimizer_state_factor", optimizer_state_factor),
                        ("backward_factor", backward_factor),
                        ("backward_factor_no_params", backward_factor_no_params),
                        ("backward_transfer_factor", backward_transfer_factor),
                        ("layer_overhead_seconds", layer_overhead_seconds),
                        ("step_overhead_seconds", step_overhead_seconds)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)):
                raise InvalidTopologyError(f"CostModel: {what} must be a number, got {v!r}")
            if not np.isfinite(v) or v < 0 or (what == "bytes_per_element" and v <= 0):
                raise InvalidTopologyError(f"CostModel: {what} must be a non-negative number "
                                           f"(bytes_per_element positive), got {v!r}")
        if profile is not None and not callable(getattr(profile, "lookup", None)):
            raise InvalidTopologyError("CostModel: profile must have a lookup(layer, "
                                       f"tile_shape) method, got {profile!r}")
        self.topology = topology
        self.bytes_per_element = bytes_per_element
        self.optimizer_state_factor = float(optimizer_state_factor)
        self.backward_factor = float(backward_factor)
        self.backward_factor_no_params = float(backward_factor_no_params)
        self.backward_transfer_factor = float(backward_transfer_factor)
        self.profile = profile
        self._profile_knows_inputs = _takes(profile, "graph_inputs")
        self.compute_model = compute_model
        self.roofline = roofline or RooflineParams()
        self.dtype = dtype
        self.collective = collective
        self._algorithms = ALGORITHMS if collective == "auto" else (collective,)
        self.gradient_bucket_bytes = (None if gradient_bucket_bytes is None
                                      else float(gradient_bucket_bytes))
        self.sync_overlap = float(sync_overlap)
        self.bucket_copies = int(bucket_copies)
        self.batchnorm_stats = batchnorm_stats
        self.layer_overhead_seconds = float(layer_overhead_seconds)
        self.step_overhead_seconds = float(step_overhead_seconds)
        #: ``{"hits": int, "fallbacks": int}``: profile lookups answered / estimated.
        self.profile_stats = {"hits": 0, "fallbacks": 0}
        #: What :meth:`check_profile` found (a ``ProfileCoverage``), or None.
        self.profile_coverage = None
        self._profile_layers: dict[str, list[int]] = {}  # name -> [hits, fallbacks]
        self._sync_cache: dict = {}
        self._tx_cache: dict = {}
        self._tile_cache: dict = {}
        lv = topology.levels
        # a redistribution is one all-to-all per edge: its measured figures, else the link's
        self._lat, self._bw = (np.array(v, float) for v in zip(
            *(x.collective_params("alltoall", 2) for x in lv)))
        self._blocks = (1,) + topology.group_sizes
        self._n_devices = topology.n_devices

    def __repr__(self) -> str:
        return (f"CostModel({self.topology.name!r}, {self.topology.n_devices} devices, "
                f"{self.bytes_per_element} B/element, optimizer x{self.optimizer_state_factor:g}"
                f", {self.compute_model}{', profiled' if self.profile is not None else ''})")

    def check_profile(self, graph) -> Any:
        """Which layers of ``graph`` the profile priced; refuse a profile that priced none.

        Built from this cost model's own counted lookups (the tiles it priced so far, see
        :attr:`profile_stats`), so call it after pricing the graph's layers, as
        :func:`~milp_parallel.build.build` does. The answer is kept in
        :attr:`profile_coverage`; a partial match is logged as a warning.

        Returns
        -------
        ProfileCoverage or None
            :class:`milp_parallel.profile.ProfileCoverage` (matched / partial / unmatched
            layers); None without a profile.

        Raises
        ------
        InvalidOptionError
            When no tile of any layer of the graph was found in the profile.
        """
        if self.profile is None:
            return None
        from ..measure.profile import ProfileCoverage

        cov = ProfileCoverage.of(self.profile, graph, self._profile_layers)
        self.profile_coverage = cov.check()
        return cov

    def _configs(self, layer, configs) -> np.ndarray:
        c = np.atleast_2d(np.asarray(configs, dtype=np.int64))
        if c.shape[1] != len(layer.dims):
            raise InvalidTopologyError(
                f"layer {layer.name!r}: configurations have {c.shape[1]} degrees, the layer "
                f"has {len(layer.dims)} dims {layer.dims}")
        if c.prod(axis=1).max() > self._n_devices:
            raise InvalidTopologyError(
                f"layer {layer.name!r}: a configuration uses {int(c.prod(axis=1).max())} "
                f"devices, the topology has {self.topology.n_devices}")
        return c

    # ------------------------------------------------------------------ t_c
    def _weight_shards(self, layer, c: np.ndarray) -> np.ndarray:
        mask = np.array([d in layer.weight_split_dims for d in layer.dims], bool)
        return c[:, mask].prod(axis=1) if mask.any() else np.ones(len(c), np.int64)

    def compute_phases(self, layer, configs, *, graph_inputs: tuple[bool, ...] | None = None,
                       count_profile: bool = True
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward, backward and update time of the largest tile, each of shape (K,).

        Parameters
        ----------
        layer : Layer
        configs : array_like of int, shape (K, ndim)
        graph_inputs : tuple of bool, optional
            Per input of the layer, whether it is a graph input (no input gradient is
            computed for it; default: none is).
        count_profile : bool, default True
            Count the profile's hits and misses in :attr:`profile_stats` (the simulator and
            the overlap credit look the same tiles up again without counting).

        Returns
        -------
        fwd, bwd, update : numpy.ndarray
            With a profile hit, the measured forward+backward time split in the estimate's
            proportion (half and half when the estimate is 0).
        """
        return self._phases(layer, self._configs(layer, configs), graph_inputs,
                            count=count_profile)

    def _phases(self, layer, c: np.ndarray, graph_inputs, *, count: bool):
        key = ("phases", layer.op, layer.attrs, tuple(layer.input_shapes),
               tuple(layer.output_shape), tuple(layer.dims), tuple(layer.weight_split_dims),
               int(layer.params), float(layer.flops), c.tobytes(), c.shape,
               None if graph_inputs is None else tuple(graph_inputs))
        try:
            hit = self._tile_cache.get(key)
        except TypeError:       # unhashable attrs
            key, hit = None, None
        if hit is not None and self.profile is None:
            return hit
        out = self._phases_uncached(layer, c, graph_inputs, count=count)
        if key is not None and self.profile is None:
            for a in out:
                a.setflags(write=False)
            self._tile_cache[key] = out
        return out

    def _phases_uncached(self, layer, c: np.ndarray, graph_inputs, *, count: bool):
        shape = np.asarray(layer.output_shape, dtype=np.int64)
        ext = tile_extent(shape, c)
        if self.compute_model == "flops":
            frac = ext.prod(axis=1).astype(float) / float(np.prod(shape, dtype=float))
            factor = (self.backward_factor if layer.params > 0
                      else self.backward_factor_no_params)
            fwd = (float(layer.flops) * float(layer.output_shape[0]) * frac
                   / (self.peak_flops * float(self.topology.device.efficiency)))
            bwd, upd = factor * fwd, np.zeros(len(c))
        else:
            fwd, bwd, upd = phase_seconds(
                layer, ext, self.topology.device, bytes_per_element=self.bytes_per_element,
                weight_shards=self._weight_shards(layer, c),
                optimizer_state_factor=self.optimizer_state_factor, params=self.roofline,
                peak_flops=self.peak_flops, graph_inputs=graph_inputs)
        if self.profile is not None and layer.op != "input":
            fwd, bwd, upd = fwd.copy(), bwd.copy(), np.array(upd, dtype=float)
            # the measured update, when the profile timed this cost model's optimizer
            updates = (getattr(self.profile, "lookup_update", None) if layer.params > 0
                       and getattr(self.profile, "optimizer_state_factor", None)
                       == self.optimizer_state_factor else None)
            # a table that tells graph inputs apart: the tile timed without the data's
            # gradient, as the step runs it
            data = ({"graph_inputs": tuple(graph_inputs)} if graph_inputs and any(graph_inputs)
                    and self._profile_knows_inputs else {})
            for k in range(len(c)):
                tile = tuple(int(x) for x in ext[k])
                t = self.profile.lookup(layer, tile, **data)
                if count:
                    self.profile_stats["fallbacks" if t is None else "hits"] += 1
                    self._profile_layers.setdefault(layer.name, [0, 0])[t is None] += 1
                if t is None:
                    continue
                est = fwd[k] + bwd[k]
                share = fwd[k] / est if est > 0 else 0.5
                fwd[k], bwd[k] = float(t) * share, float(t) * (1.0 - share)
                u = updates(layer, tile, **data) if updates is not None else None
                if u is not None:
                    upd[k] = float(u)
        if self.batchnorm_stats == "sync" and layer.op == "batchnorm":
            t = self._stats(layer, c)       # one all-reduce forward, one backward
            fwd, bwd = fwd + t, bwd + t
        if self.layer_overhead_seconds and layer.op != "input":
            half = 0.5 * self.layer_overhead_seconds
            fwd, bwd = fwd + half, bwd + half
        return fwd, bwd, upd

    def compute_seconds(self, layer, configs, *, graph_inputs: tuple[bool, ...] | None = None
                        ) -> np.ndarray:
        """Forward + backward + update time of the largest tile, shape (K,)
        (:meth:`compute_phases` summed; a new array)."""
        fwd, bwd, upd = self.compute_phases(layer, configs, graph_inputs=graph_inputs)
        return fwd + bwd + upd

    # ------------------------------------------------------------------ t_s
    def _sync_table(self, configs: np.ndarray, split: tuple[bool, ...]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per configuration, algorithm and replica group, the all-reduce's ``time(m) = A +
        m B``: ``(A (K, n_alg, G), B (K, n_alg, G), r (K,))``, padding groups 0 (so they are
        never the slowest). Algorithms in the order of :attr:`_algorithms`."""
        key = (configs.tobytes(), configs.shape, split)
        hit = self._sync_cache.get(key)
        if hit is None:
            per_cfg = [self._row_sync(row, split) for row in configs.tolist()]
            g = max(a.shape[1] for a, _, _ in per_cfg)
            n_alg = len(self._algorithms)
            a = np.zeros((len(configs), n_alg, g))
            b = np.zeros((len(configs), n_alg, g))
            for k, (ak, bk, _) in enumerate(per_cfg):
                a[k, :, :ak.shape[1]], b[k, :, :bk.shape[1]] = ak, bk
            r = np.array([r for _, _, r in per_cfg], dtype=np.int64)
            hit = (a, b, r)
            self._sync_cache[key] = hit
        return hit

    def _row_sync(self, row: list, split: tuple[bool, ...]
                  ) -> tuple[np.ndarray, np.ndarray, int]:
        """``(A (n_alg, G'), B (n_alg, G'), r)`` of one configuration's replica groups (the
        distinct ones), cached by degrees: layers of every shape share them."""
        key = (tuple(row), split)
        hit = self._sync_cache.get(key)
        if hit is None:
            groups = replica_groups(row, split)
            r = groups.shape[1]
            a = np.zeros((len(self._algorithms), len(groups)))
            b = np.zeros_like(a)
            if r > 1:
                a, b = cost_table(self.topology, groups, "allreduce", self._algorithms)
                # the groups of one configuration often cost the same: keep the distinct
                ab = np.unique(np.concatenate([a, b], axis=0).T, axis=0).T
                a, b = ab[:len(self._algorithms)], ab[len(self._algorithms):]
            hit = (a, b, r)
            self._sync_cache[key] = hit
        return hit

    def allreduce_seconds(self, layer, configs) -> np.ndarray:
        """The layer's gradient all-reduce on its own (no bucketing, no overlap), shape (K,):
        the shard's bytes among the replicas holding it, by the cheapest algorithm allowed
        (``collective``), the slowest of the concurrent replica groups."""
        return self._sync(layer, self._configs(layer, configs), bucket=None)

    def stats_seconds(self, layer, configs) -> np.ndarray:
        """A batch-norm's statistics all-reduce with ``batchnorm_stats="sync"``, shape (K,):
        ``2 C_tile`` fp32 among the ranks sharing a channel slice, by the cheapest algorithm
        allowed, the slowest of the groups; 0 for another op, an unsplit batch, or
        ``"local"``. The step pays it twice (forward and backward), inside the layer's
        :meth:`compute_phases`."""
        c = self._configs(layer, configs)
        if self.batchnorm_stats != "sync" or layer.op != "batchnorm":
            return np.zeros(len(c))
        return self._stats(layer, c)

    def _stats(self, layer, c: np.ndarray) -> np.ndarray:
        split = tuple(d in layer.weight_split_dims for d in layer.dims)
        a, b, r = self._sync_table(c, split)
        ext = tile_extent(np.asarray(layer.output_shape, dtype=np.int64), c)
        channels = ext[:, layer.dims.index(layer.weight_split_dims[0])].astype(float)
        m = 2.0 * STATS_BYTES_PER_ELEMENT * channels
        t = (a + m[:, None, None] * b).min(axis=1)                    # (K, G)
        return np.where(r > 1, t.max(axis=1), 0.0)

    def _shard_bytes(self, layer, c: np.ndarray) -> np.ndarray:
        return float(layer.params) * self.bytes_per_element / self._weight_shards(layer, c)

    def _sync(self, layer, c: np.ndarray, bucket: float | None) -> np.ndarray:
        if layer.params <= 0:
            return np.zeros(len(c))
        split = tuple(d in layer.weight_split_dims for d in layer.dims)
        m = self._shard_bytes(layer, c)
        a, b, r = self._sync_table(c, split)
        if bucket is None:
            t = (a + m[:, None, None] * b).min(axis=1)               # (K, G)
        else:
            # the algorithm a full bucket uses; the layer pays its share of the bucket
            size = float(bucket)
            pick = (a + size * b).argmin(axis=1)[:, None, :]          # (K, 1, G)
            a_sel = np.take_along_axis(a, pick, axis=1)[:, 0]
            b_sel = np.take_along_axis(b, pick, axis=1)[:, 0]
            t = m[:, None] * (a_sel / size + b_sel)
        return np.where(r > 1, t.max(axis=1), 0.0)

    def sync_seconds(self, layer, configs, *, graph_inputs: tuple[bool, ...] | None = None
                     ) -> np.ndarray:
        """Exposed gradient synchronization of the layer, shape (K,).

        The weight shard's all-reduce among its replicas (see the module docstring): with
        ``gradient_bucket_bytes``, the layer's share of a bucketed all-reduce; minus the
        overlap credit ``sync_overlap x`` the layer's backward time, never below 0.
        """
        c = self._configs(layer, configs)
        t = self._sync(layer, c, self.gradient_bucket_bytes)
        synced = t > 0
        if self.sync_overlap > 0 and layer.params > 0:
            bwd = self._phases(layer, c, graph_inputs, count=False)[1]
            t = np.maximum(t - self.sync_overlap * bwd, 0.0)
        if self.bucket_copies and layer.params > 0:
            t = t + np.where(synced, self.bucket_copy_seconds(
                self._shard_bytes(layer, c) * self.bucket_copies), 0.0)
        return t

    def bucket_copy_seconds(self, nbytes):
        """Seconds to copy ``nbytes`` once between a gradient and its bucket (each byte read
        and written at the device's memory bandwidth; 0 when that is unknown)."""
        nbytes = np.asarray(nbytes, float)
        bw = self.topology.device.memory_bandwidth_bytes_per_s * self.roofline.memory_efficiency
        return 2.0 * nbytes / bw if bw > 0 else np.zeros_like(nbytes)

    def _tiles(self, shape, configs: np.ndarray, n_tiles: int | None = None):
        key = (tuple(shape), configs.tobytes(), configs.shape, n_tiles)
        hit = self._tile_cache.get(key)
        if hit is None:
            hit = tile_boxes(shape, configs, n_tiles=n_tiles)
            for a in hit:
                a.setflags(write=False)
            self._tile_cache[key] = hit
        return hit

    # ------------------------------------------------------------------ memory
    def memory_parts(self, layer, configs) -> dict[str, np.ndarray]:
        """What each device holds for this layer, split: ``{"parameters", "gradients",
        "optimizer", "activations": array of shape (K, n_devices)}`` in bytes.

        Parameters, gradients and optimizer state (``optimizer_state_factor`` x) are the
        weight shard a device holds; activations are what the layer's backward keeps on the
        device's tile (:func:`~milp_parallel.costs.saved.saved_bytes`: the input box a
        convolution or linear saves, the output a ReLU saves, nothing for an add or a
        view, ...). Devices a configuration does not use hold 0. The arrays are new.
        """
        c = self._configs(layer, configs)
        n = self._n_devices
        key = ("saved", layer.op, layer.attrs, tuple(layer.input_shapes),
               tuple(layer.output_shape), tuple(layer.dims), c.tobytes(), c.shape)
        try:
            hit = self._tile_cache.get(key)
        except TypeError:       # unhashable attrs
            key, hit = None, None
        if hit is None:     # members of a merged node share their shape and configurations
            lo, hi, valid = self._tiles(layer.output_shape, c, n_tiles=n)
            act = saved_bytes(layer, lo, hi, self.bytes_per_element)
            act.setflags(write=False)
            hit = (act, valid)
            if key is not None:
                self._tile_cache[key] = hit
        act, valid = hit
        w = np.zeros(act.shape)
        if layer.params > 0:
            shard = float(layer.params) * self.bytes_per_element / self._weight_shards(layer, c)
            w = np.where(valid, shard[:, None], 0.0)
        return {"parameters": w, "gradients": w.copy(),
                "optimizer": self.optimizer_state_factor * w, "activations": act.copy()}

    def memory_bytes(self, layer, configs) -> np.ndarray:
        """Bytes each device holds for this layer, shape (K, n_devices): the sum of
        :meth:`memory_parts`."""
        parts = self.memory_parts(layer, configs)
        w = parts["parameters"]
        return parts["activations"] + (2.0 + self.optimizer_state_factor) * w

    # ------------------------------------------------------------------ t_x
    def transfer_seconds(self, producer, consumer, input_index: int, cfg_u, cfg_v
                         ) -> np.ndarray:
        """Redistribution time of the tensor ``producer -> consumer`` (its input
        ``input_index``), forward and backward, for every pair of configurations.

        ``cfg_u`` rows are degrees aligned with ``producer.dims``, ``cfg_v`` with
        ``consumer.dims``; tiles are placed by the rule of :mod:`.configs`.

        Returns
        -------
        numpy.ndarray, shape (K_u, K_v)
            A new array (see :meth:`transfer_table` for the cached one).
        """
        return self.transfer_table(producer, consumer, input_index, cfg_u, cfg_v).copy()

    def transfer_table(self, producer, consumer, input_index: int, cfg_u, cfg_v
                       ) -> np.ndarray:
        """:meth:`transfer_seconds` without the copy: the cost model's cached, read-only
        table (cheap to look up again with the same configurations, e.g. to read single
        entries of a built problem's edges)."""
        cu = self._configs(producer, cfg_u)
        cv = self._configs(consumer, cfg_v)
        # the table depends on the producer's tiles and on what the consumer's tiles need,
        # i.e. on everything input_region reads: not on the layers' names
        # an input carries no gradient: its redistribution runs forward only
        forward_only = producer.op == "input"
        key = (forward_only, tuple(producer.output_shape), cu.tobytes(), cu.shape,
               consumer.op, consumer.attrs, tuple(consumer.input_shapes),
               tuple(consumer.output_shape), tuple(consumer.dims), int(input_index),
               cv.tobytes(), cv.shape)
        try:
            hit = self._tx_cache.get(key)
        except TypeError:   # unhashable attrs: fall back to a digest of the boxes
            key, hit = None, None
        if hit is None:
            p_lo, p_hi, _ = self._tiles(producer.output_shape, cu)
            o_lo, o_hi, ok = self._tiles(consumer.output_shape, cv)
            r_lo, r_hi = consumer.input_region(input_index, o_lo, o_hi)
            r_lo = np.where(ok[..., None], r_lo, 0)
            r_hi = np.where(ok[..., None], r_hi, 0)
            if r_lo.shape[-1] != p_lo.shape[-1]:
                raise InvalidTopologyError(
                    f"edge {producer.name!r} -> {consumer.name!r}: input {input_index} has "
                    f"{r_lo.shape[-1]} dims, the producer's output {p_lo.shape[-1]}")
            # different layers may need the same boxes (e.g. convs with other widths); the
            # producer's tiles are fixed by its shape and configurations
            dkey = (forward_only, tuple(producer.output_shape), cu.tobytes(), cu.shape,
                    _digest(*_narrow(r_lo, r_hi)))
            hit = self._tx_cache.get(dkey)
            if hit is None:
                passes = 1.0 if forward_only else 1.0 + self.backward_transfer_factor
                hit = passes * self._receive_seconds(
                    p_lo, p_hi, cu.prod(axis=1), r_lo, r_hi, cv.prod(axis=1))
                hit.setflags(write=False)
                self._tx_cache[dkey] = hit
            if key is not None:
                self._tx_cache[key] = hit
        return hit

    def _nic_slowdown(self, level: int, hit: np.ndarray) -> np.ndarray | None:
        """``max(1, receivers / uplinks)`` per receiver over a level whose units share
        network cards (``hit``: (J, T, K) receivers that get data over it); None when the
        level shares nothing."""
        up = self.topology.levels[level].uplinks
        unit = self._blocks[level]          # devices per unit of the level below
        if level == 0 or up <= 0 or unit <= up:
            return None
        j, t, k = hit.shape
        n_units = -(-t // unit)
        padded = np.zeros((j, n_units * unit, k), dtype=np.int32)
        padded[:, :t] = hit
        count = padded.reshape(j, n_units, unit, k).sum(axis=2)
        slow = np.maximum(count / up, 1.0)
        return np.repeat(slow, unit, axis=1)[:, :t]

    def _receive_seconds(self, h_lo, h_hi, t_h, n_lo, n_hi, t_r) -> np.ndarray:
        """Max over receiving devices of their receive time, shape (K_h, K_r).

        Holders: configuration ``k`` keeps box ``[h_lo[k, t], h_hi[k, t])`` on device ``t <
        t_h[k]``; receivers: configuration ``j``'s device ``t < t_r[j]`` needs ``[n_lo[j, t],
        n_hi[j, t])``. Data the holders do not have at all is not moved.

        Volumes are products of 1-D overlaps, and a dim has few distinct intervals (a
        splitting of degree ``d`` has ``d``), so each level's volumes come from small
        precomputed tables (:func:`_level_tables`) by one gather per group of dims; receiver
        configurations with the same device count are laid out densely as ``(J, T, K_h)``
        blocks of at most ``_CHUNK_ELEMENTS`` entries. Every entry is computed with the same
        float operations in the same order whatever the batch of configurations, so a table
        entry equals the one-pair table of the same configurations.
        """
        k_h = h_lo.shape[0]
        t_h = np.asarray(t_h, dtype=np.int64)
        t_r = np.asarray(t_r, dtype=np.int64)
        d_max = int(t_r.max())
        need = np.arange(d_max)[None, :] < t_r[:, None]
        n_ids, n_vals = [], []
        for i in range(h_lo.shape[2]):
            ids, vals = _interval_ids(np.where(need, n_lo[:, :d_max, i], 0),
                                      np.where(need, n_hi[:, :d_max, i], 0))
            n_ids.append(ids)
            n_vals.append(vals)
        n_cache: dict = {}
        # a joint table is worth building while smaller than the gathers it saves
        m = int(t_r.sum())
        levels = []
        for b in self._blocks:
            b_lo, b_hi, block = _block_boxes(h_lo, h_hi, t_h, b, d_max)
            levels.append(_level_tables(b_lo, b_hi, block, n_ids, n_vals, n_cache,
                                        min(_TABLE_ENTRIES, len(b_lo) * m)))
        cost = [self.bytes_per_element / bw for bw in self._bw]
        out = np.empty((k_h, len(t_r)))
        # blocks are laid out (receiver configs J, devices T, holder configs K): K innermost
        # keeps numpy's inner loops long and the max over devices cheap
        for n_dev in np.unique(t_r):
            n_dev = int(n_dev)
            cols = np.flatnonzero(t_r == n_dev)
            step = max(1, _CHUNK_ELEMENTS // (k_h * n_dev))
            for s in range(0, len(cols), step):
                jj = cols[s:s + step]
                total = prev = None
                for lvl, groups in enumerate(levels):
                    vol = None
                    for h_code, n_id, table in groups:
                        idx = h_code[None, :n_dev, :] + n_id[jj, :n_dev, None]
                        v = np.take(table, idx, mode="clip")    # indices are in range
                        vol = v if vol is None else np.multiply(vol, v, out=vol)
                    if prev is not None:
                        # bytes over level lvl - 1: alpha + bytes / bandwidth where any
                        moved = vol - prev
                        hit = moved > 0
                        moved *= cost[lvl - 1]
                        slow = self._nic_slowdown(lvl - 1, hit)
                        if slow is not None:
                            moved *= slow
                        moved += self._lat[lvl - 1]
                        moved *= hit
                        if total is None:
                            total = moved
                        elif total.shape == moved.shape:
                            total += moved
                        else:
                            total = total + moved
                    prev = vol
                if total is None:       # a single level: nothing crosses a link
                    total = np.zeros((len(jj), n_dev, 1))
                out[:, jj] = np.broadcast_to(total.max(axis=1).T, (k_h, len(jj)))
        return out
