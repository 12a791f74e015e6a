"""A step simulator: the time of one training step of an assignment, event by event.

The solver's objective is separable (a sum of node and edge costs), so it cannot see what
happens *between* layers: transfers that overlap compute, branches that run at the same time
on different devices, gradient buckets reduced while the backward pass goes on, network cards
shared by several transfers. :func:`simulate` runs the step instead.

Model
-----
Every device has a **compute stream** and a **communication stream**, each running its tasks in
program order (forward in the graph's topological order, backward in reverse), a task starting
when its inputs are ready and its stream is free:

- *compute*: forward, backward and update of each layer's tile on each device that holds one,
  timed by the cost model (:meth:`CostModel.compute_phases
  <milp_parallel.costs.CostModel.compute_phases>`: the roofline, or the measured profile);
- *forward transfers*: every device of a consumer receives, on its communication stream, the
  part of its input region held by other devices, as soon as those devices have produced it:
  ``alpha + bytes / bandwidth`` per level it crosses, receivers of one node over a level with
  shared network cards (``Level.uplinks``) slowed down by ``receivers / cards``;
- *backward transfers*: the gradients of those regions go back to the devices that sent them,
  with their own volumes per device (a producer device receives the sum of what every
  consumer device read from it; nothing is sent to graph inputs);
- *gradient all-reduce*: when a layer's backward is done on all its devices, its weight
  gradient joins the open bucket of its replica groups (buckets of ``bucket_bytes``, filled
  in the order gradients become ready, as PyTorch DDP does); a full bucket is all-reduced at
  once on the communication streams of its groups (:mod:`milp_parallel.collectives`, the
  cheapest algorithm for the bucket's size, concurrent groups sharing network cards), while
  the backward pass continues. The last, partial buckets go when the backward is done. With
  ``overlap=False`` every all-reduce waits for the end of the backward pass. An all-reduce
  that may overlap compute takes ``1 - sync_overlap`` of its time from its devices' compute
  streams too (a task ``allreduce_share``): a device whose cores run the collective (a CPU,
  where the measured overlap efficiency is near 0) computes that much less meanwhile, so
  ``sync_overlap=0`` conserves the device's busy time and ``1`` hides the all-reduce fully
  (processor sharing at the measured rate). With the cost
  model's ``bucket_copies`` (DDP's default reducer: 2), a gradient is copied into its bucket
  on the compute stream after the layer's backward (the bucket is ready after the copy),
  and the reduced buckets are copied back before the update;
- *update*: each device runs the optimizer update of its shards after its last all-reduce,
  then the program's fixed time per step (the cost model's ``step_overhead_seconds``).

The step time is when the last device finishes. One device and nothing to overlap gives the
separable model's time exactly; a chain whose layouts match and whose all-reduces cannot
overlap (``overlap=False``, one bucket per layer) gives it too (tested). What the simulator
does not model: contention between transfers of *different* layers on shared cards (they are
ordered on each device's communication stream), the sending side of the cards, and the
pipelining of collectives with each other.

Examples
--------
>>> import milp_parallel as mp
>>> plan = mp.solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
>>> sim = mp.simulate(plan)
>>> sim.step_seconds > 0 and sim.n_buckets >= 0
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidAssignmentError
from ..machine.collectives import cost_table
from .buckets import sync_buckets, sync_groups
from .configs import tile_boxes

__all__ = ["SimulationResult", "Task", "simulate_assignment"]

logger = logging.getLogger(__name__)

_USE_MODEL = object()


@dataclass(frozen=True)
class Task:
    """One simulated task (kept when ``trace=True``).

    Attributes
    ----------
    kind : str
        ``forward``, ``backward``, ``update``, ``recv`` (forward transfer), ``recv_grad``
        (backward transfer), ``allreduce``, ``allreduce_share`` (the part of an overlapped
        all-reduce that holds the compute stream, ``1 - sync_overlap``) or ``bucket_copy`` (a
        gradient into its bucket, or the reduced buckets back: the cost model's
        ``bucket_copies``) or ``overhead`` (the program's fixed time per step, the cost
        model's ``step_overhead_seconds``).
    name : str
        The layer (or, for an all-reduce, the bucket's layers joined by ``+``).
    device : int
    start, end : float
        Seconds from the start of the step.
    """

    kind: str
    name: str
    device: int
    start: float
    end: float


@dataclass(frozen=True)
class SimulationResult:
    """The simulated step of one assignment.

    Attributes
    ----------
    step_seconds : float
        When the last device finishes the step.
    forward_seconds : float
        When the last forward task ends.
    backward_seconds : float
        When the last backward task ends.
    compute_seconds : float
        The busiest device's compute time (forward + backward + update).
    transfer_seconds, allreduce_seconds : float
        The busiest device's time receiving activations / gradients, and all-reducing.
    n_buckets : int
        Gradient all-reduces run (per replica-group structure, buckets of ``bucket_bytes``).
    bucket_bytes : float or None
    overlap : bool
    tasks : tuple of Task
        Every task, when simulated with ``trace=True`` (else empty).
    """

    step_seconds: float
    forward_seconds: float
    backward_seconds: float
    compute_seconds: float
    transfer_seconds: float
    allreduce_seconds: float
    n_buckets: int
    bucket_bytes: float | None
    overlap: bool
    tasks: tuple[Task, ...] = field(default=(), repr=False)

    @property
    def exposed_seconds(self) -> float:
        """Step time not covered by the busiest device's compute."""
        return max(self.step_seconds - self.compute_seconds, 0.0)


# ---------------------------------------------------------------------- per-layer data
@dataclass
class _Layer:
    name: str
    node: int
    n_dev: int
    lo: np.ndarray            # (T, nd) tile boxes
    hi: np.ndarray
    fwd: float
    bwd: float
    upd: float
    grad_bytes: float         # bytes of the shard each replica all-reduces (0: not synced)
    is_input: bool
    row: np.ndarray           # the layer's degrees, aligned with its dims


def _pair_volumes(producer: _Layer, consumer: _Layer, layer, index: int) -> np.ndarray:
    """Elements device ``d`` of the consumer reads from device ``s`` of the producer,
    ``(T_consumer, T_producer)``, the diagonal (local data) included."""
    r_lo, r_hi = layer.input_region(index, consumer.lo, consumer.hi)
    ov = (np.minimum(r_hi[:, None, :], producer.hi[None, :, :])
          - np.maximum(r_lo[:, None, :], producer.lo[None, :, :]))
    return np.maximum(ov, 0).prod(axis=2).astype(float)


class _Links:
    """Receive times from per-pair volumes, by the levels of a topology."""

    def __init__(self, topology, bytes_per_element: float):
        self.topology = topology
        self.bpe = float(bytes_per_element)
        self.levels = topology.levels
        self.blocks = (1,) + topology.group_sizes
        # a redistribution is one all-to-all per edge: its measured figures, else the link's
        self.lat, self.bw = (np.array(v, float) for v in zip(
            *(lv.collective_params("alltoall", 2) for lv in self.levels)))
        n = topology.n_devices
        idx = np.arange(n)
        self.level = topology.level_index(idx[:, None], idx[None, :])

    def receive(self, vol: np.ndarray, receivers: np.ndarray, senders: np.ndarray
                ) -> np.ndarray:
        """Per receiver, its receive time of ``vol[r, s]`` elements from ``senders[s]``."""
        lev = self.level[np.ix_(receivers, senders)]
        out = np.zeros(len(receivers))
        for k in range(len(self.levels)):
            b = np.where(lev == k, vol, 0.0).sum(axis=1) * self.bpe
            busy = b > 0
            if not busy.any():
                continue
            slow = np.ones(len(receivers))
            up, unit = self.levels[k].uplinks, self.blocks[k]
            if k > 0 and up and unit > up:
                node = receivers // unit
                count = np.bincount(node, weights=busy)[node]
                slow = np.maximum(count / up, 1.0)
            out += np.where(busy, self.lat[k] + b / self.bw[k] * slow, 0.0)
        return out


# ---------------------------------------------------------------------- the simulation
def simulate_assignment(built, assignment, *, bucket_bytes: Any = _USE_MODEL,
                        overlap: bool | None = None, trace: bool = False
                        ) -> SimulationResult:
    """Simulate one step of ``assignment`` on a built problem.

    Parameters
    ----------
    built : BuiltProblem
        From :func:`milp_parallel.build.build` (its graph, topology and cost model).
    assignment : sequence of int
        A configuration index per problem node.
    bucket_bytes : float or None, optional
        Gradient bucket size (default: the cost model's ``gradient_bucket_bytes``; ``None``:
        one all-reduce per layer).
    overlap : bool, optional
        Whether all-reduces may start during the backward pass (default: whether the cost
        model gives an overlap credit).
    trace : bool, default False
        Keep every task in the result.

    Returns
    -------
    SimulationResult

    Raises
    ------
    InvalidAssignmentError
        When the assignment does not fit the problem.
    """
    cm = built.cost_model
    problem = built.problem
    a = np.asarray(assignment, dtype=np.int64).reshape(-1)
    if a.shape != (problem.n_nodes,) or np.any(a < 0) or np.any(a >= problem.n_configs):
        raise InvalidAssignmentError(
            f"the assignment has {a.size} entries for {problem.n_nodes} nodes, or an index "
            "outside a node's configurations")
    if bucket_bytes is _USE_MODEL:
        bucket_bytes = cm.gradient_bucket_bytes
    if overlap is None:
        overlap = cm.sync_overlap > 0
    graph, topo = built.graph, built.topology
    n = topo.n_devices
    links = _Links(topo, cm.bytes_per_element)
    inputs = {lay.name for lay in graph.layers if lay.op == "input"}

    layers: dict[str, _Layer] = {}
    for lay in graph.layers:
        v = built.node_of[lay.name]
        row = np.asarray(built.configs[v][a[v]], dtype=np.int64)
        t = int(row.prod())
        lo, hi, _ = tile_boxes(lay.output_shape, row[None, :])
        gi = tuple(x in inputs for x in lay.inputs)
        f, b, u = (float(x[0]) for x in cm.compute_phases(lay, row[None, :], graph_inputs=gi,
                                                           count_profile=False))
        groups, shard = sync_groups(lay, row)      # the buckets' rule: replicated shards
        gbytes = shard * cm.bytes_per_element if groups else 0.0
        layers[lay.name] = _Layer(lay.name, v, t, lo[0, :t], hi[0, :t], f, b, u, gbytes,
                                  lay.op == "input", row)

    tasks: list[Task] = []
    comp_free = np.zeros(n)
    comm_free = np.zeros(n)
    busy = {"compute": np.zeros(n), "transfer": np.zeros(n), "allreduce": np.zeros(n),
            "share": np.zeros(n)}
    share = (1.0 - cm.sync_overlap) if overlap else 0.0

    def run(kind, name, devs, ready, dur, stream, account):
        devs = np.asarray(devs, dtype=np.int64)
        start = np.maximum(np.asarray(ready, float), stream[devs])
        end = start + dur
        stream[devs] = end
        busy[account][devs] += dur
        if trace:
            for d, s0, e0 in zip(devs.tolist(), np.broadcast_to(start, devs.shape).tolist(),
                                 np.broadcast_to(end, devs.shape).tolist()):
                tasks.append(Task(kind, name, d, s0, e0))
        return end

    def receive(kind: str, name: str, vol: np.ndarray, produced: np.ndarray) -> np.ndarray:
        """When each receiver has its part of ``vol`` (receivers x senders, elements; the
        diagonal is local): once every sender holding part of it has produced it and the
        receiver's communication stream has brought the remote part in."""
        n_r, n_s = vol.shape
        remote = vol.copy()
        common = min(n_r, n_s)
        remote[np.arange(common), np.arange(common)] = 0.0
        dep = np.where(vol > 0, produced[None, :], 0.0).max(axis=1)
        need = remote.sum(axis=1) > 0
        if need.any():
            devs = np.arange(n_r)
            t = links.receive(remote, devs, np.arange(n_s))
            dep = dep.copy()
            dep[need] = run(kind, name, devs[need], dep[need], t[need], comm_free, "transfer")
        return dep

    # ------------------------------------------------------------ forward
    fwd_done: dict[str, np.ndarray] = {}
    pair_vol: dict[tuple[str, str, int], np.ndarray] = {}
    for lay in graph.layers:
        L = layers[lay.name]
        devs = np.arange(L.n_dev)
        ready = np.zeros(L.n_dev)
        for i, src in enumerate(lay.inputs):
            P = layers[src]
            if P.node == L.node:                    # a merged follower: same tiles
                ready = np.maximum(ready, fwd_done[src])
                continue
            vol = _pair_volumes(P, L, lay, i)
            pair_vol[(src, lay.name, i)] = vol
            ready = np.maximum(ready, receive("recv", lay.name, vol, fwd_done[src]))
        fwd_done[lay.name] = run("forward", lay.name, devs, ready, L.fwd, comp_free, "compute")
    forward_end = max(float(x.max()) for x in fwd_done.values())

    # ------------------------------------------------------------ backward
    consumers: dict[str, list[tuple[str, int]]] = {x.name: [] for x in graph.layers}
    for u, w, i in graph.edges:
        consumers[u].append((w, i))
    bwd_done: dict[str, np.ndarray] = {}
    # the buckets, by the one rule the layer-wise program runs them by; a full bucket's
    # all-reduce may start when its last gradient is ready, the partial ones after the
    # backward pass
    buckets = sync_buckets(graph, {lay.name: layers[lay.name].row for lay in graph.layers},
                           bucket_bytes, cm.bytes_per_element)
    closes = {b.layers[-1]: b for b in buckets if b.full}
    ready_at: dict[str, float] = {}
    pending: list = []              # full buckets (SyncBucket) that wait for the backward
    n_buckets = 0
    ar_done = np.zeros(n)
    copies_in = (cm.bucket_copies + 1) // 2     # into the bucket, after the backward
    copies_out = cm.bucket_copies - copies_in    # and back, before the update
    copied_out = np.zeros(n)

    def launch(bucket, ready: float) -> None:
        nonlocal n_buckets
        groups = np.asarray(bucket.groups, dtype=np.int64)
        lat, per_byte = cost_table(topo, groups, "allreduce", _ALGS)
        per_group = (lat + bucket.shard_bytes * per_byte).min(axis=0)  # cheapest per group
        for g, t in zip(groups, per_group):
            end = run("allreduce", bucket.name, g, ready, float(t), comm_free, "allreduce")
            ar_done[g] = np.maximum(ar_done[g], end)
            if share > 0:
                run("allreduce_share", bucket.name, g, ready, share * float(t), comp_free,
                    "share")
        n_buckets += 1

    for lay in reversed(graph.layers):
        L = layers[lay.name]
        if L.is_input:
            continue
        devs = np.arange(L.n_dev)
        ready = fwd_done[lay.name].copy()
        for w, i in consumers[lay.name]:
            W = layers[w]
            if W.node == L.node:
                ready = np.maximum(ready, bwd_done[w])
                continue
            vol = pair_vol[(lay.name, w, i)].T          # (T_L, T_w): what s sent to d
            ready = np.maximum(ready, receive("recv_grad", lay.name, vol, bwd_done[w]))
        done = run("backward", lay.name, devs, ready, L.bwd, comp_free, "compute")
        bwd_done[lay.name] = done
        if L.grad_bytes > 0:
            if copies_in:
                once = float(cm.bucket_copy_seconds(L.grad_bytes))
                done = run("bucket_copy", lay.name, devs, done, copies_in * once, comp_free,
                           "compute")
                copied_out[:L.n_dev] += copies_out * once
            ready_at[lay.name] = float(done.max())
        b = closes.get(lay.name)
        if b is not None:
            at = max(ready_at[x] for x in b.layers)
            if overlap:
                launch(b, at)
            else:
                pending.append(b)
    backward_end = max((float(x.max()) for x in bwd_done.values()), default=forward_end)
    if copies_in:                   # the last copies into buckets belong to the backward pass
        backward_end = max(backward_end, float(comp_free.max()))
    for b in pending + [b for b in buckets if not b.full]:
        launch(b, backward_end if not overlap else max(ready_at[x] for x in b.layers))

    # ------------------------------------------------------------ update
    upd = np.zeros(n)
    for L in layers.values():
        if L.upd > 0:
            upd[:L.n_dev] += L.upd
    dev = np.arange(n)
    back = copied_out > 0
    if back.any():
        run("bucket_copy", "buckets", dev[back], ar_done[back], copied_out[back], comp_free,
            "compute")
    used = upd > 0
    if used.any():
        run("update", "optimizer", dev[used], np.maximum(ar_done, comp_free)[used],
            upd[used], comp_free, "compute")
    if cm.step_overhead_seconds > 0:       # the program's fixed time per step, every device
        run("overhead", "step", dev, np.maximum(ar_done, comp_free), cm.step_overhead_seconds,
            comp_free, "compute")
    step = float(max(comp_free.max(), comm_free.max()))
    return SimulationResult(
        step_seconds=step, forward_seconds=forward_end, backward_seconds=backward_end,
        compute_seconds=float(busy["compute"].max()),
        transfer_seconds=float(busy["transfer"].max()),
        allreduce_seconds=float(busy["allreduce"].max()), n_buckets=n_buckets,
        bucket_bytes=None if bucket_bytes is None else float(bucket_bytes),
        overlap=bool(overlap), tasks=tuple(tasks))


_ALGS = ("ring", "tree", "hierarchical")
