"""Calibrate a cluster description on the machine it runs on.

:func:`calibrate` (``milp-parallel calibrate --out cluster.json``) measures, with
``torch.distributed`` (gloo on CPU, NCCL on GPU) and ``world_size`` processes, the time of
all-reduce, all-gather, all-to-all and point-to-point (ping-pong) over message sizes, each
as a program issues it by default (``timing="loop"``: what the collective adds to a loop of
compute chunks, back to back without barriers, so that the ranks' skew and the cores shared
with compute are in it; see :func:`measure_collectives`), the median of the repetitions
(the statistic of a profile table and of a measured step); fits an alpha-beta
pair to each kind (:func:`fit_alpha_beta`); measures the device (dense FLOP/s from a matrix
product, streaming memory bandwidth from a large copy, the fixed time of a tiny operator); and
writes a :class:`~milp_parallel.topology.Topology` of ``world_size`` devices on one level:
the link is the point-to-point fit, and the all-reduce, all-gather and all-to-all keep their
own fits (``Level.collectives``; the cost model prices a redistribution by the all-to-all's,
as the layer-wise program runs one ``all_to_all_single`` per edge), because a backend's
collective is not its link: gloo's all-to-all of 8 KiB per peer took 0.6 ms on 2 processes
where half a ping-pong of it took 0.1 ms; gloo's all-reduce
reached 1.1 GB/s where its point-to-point messages reached 2.5 GB/s on a 2-core machine,
and its all-gather of ``m`` bytes took as long as an all-reduce of ``m``, twice what the
ring formula gives from the link. One pair fitted to all three missed them by 43-53% (RMS).
With ``profile_path`` it also measures the per-op profile table of the given models
(:func:`milp_parallel.profile.profile_layers`) for their data-parallel tiles on those devices.

The fit
-------
Every measurement is one linear equation in ``(alpha, beta = 1 / bandwidth)`` (``r``
processes, ``m`` the buffer of the formulas of :mod:`milp_parallel.collectives`):

============= ============================================
all-reduce    ``t = 2 (r-1) alpha + 2 (r-1) / r * m beta``
all-gather    ``t = (r-1) alpha + (r-1) / r * m beta`` (m = gathered result)
all-to-all    ``t = alpha + m beta`` (m = what a process receives from the others)
point-to-point ``t = alpha + m beta`` (half a ping-pong)
============= ============================================

solved by least squares on relative errors (each row divided by its ``t``, so small messages
count as much as large ones), with ``alpha, beta >= 0``. The same function fits measurements
of one level of a larger machine (groups whose devices meet at that level).

The device
----------
``peak_flops`` = the measured dense FLOP/s (``efficiency`` 1.0: it is what dense ops reach),
``memory_bandwidth_bytes_per_s`` = the measured copy bandwidth divided by the roofline's
default memory efficiency (0.8), so that the roofline sees the measured figure;
``kernel_launch_s`` = the median time of a one-element add; ``memory_bytes`` = the machine's
memory divided among the processes.

Examples
--------
>>> ms = [Measurement("p2p", 2, m, 5e-6 + m / 2e9) for m in (1e3, 1e5, 1e7)]
>>> fit = fit_alpha_beta(ms)
>>> round(fit.alpha_s * 1e6, 6), round(fit.bandwidth_bytes_per_s / 1e9, 6)
(5.0, 2.0)
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidTopologyError, require
from ..machine.roofline import RooflineParams
from ..machine.topology import Device, Level, Topology

__all__ = ["Measurement", "Fit", "fit_alpha_beta", "measure_collectives", "measure_device",
           "TIMINGS",
           "overlap_efficiency", "profile_concurrently", "calibrate", "load_report",
           "DEFAULT_SIZES",
           "CALIBRATION_FORMAT"]

logger = logging.getLogger(__name__)

#: Message sizes (bytes) measured by default: 4 KiB to 16 MiB, by factors of 4.
DEFAULT_SIZES = tuple(4096 * 4 ** i for i in range(7))

CALIBRATION_FORMAT = "milp_parallel.calibration"
_KINDS = ("allreduce", "allgather", "alltoall", "p2p")
_STATISTICS = {"median": np.median, "min": np.min}
#: How :func:`measure_collectives` times a collective (see there).
TIMINGS = ("loop", "aligned")


@dataclass(frozen=True)
class Measurement:
    """One timed collective: ``kind`` over ``world_size`` processes, ``nbytes``, seconds."""

    kind: str
    world_size: int
    nbytes: float
    seconds: float


@dataclass(frozen=True)
class Fit:
    """An alpha-beta fit: latency, bandwidth, and how well it fits (RMS relative error)."""

    alpha_s: float
    bandwidth_bytes_per_s: float
    rms_relative_error: float
    n: int


def _row(m: Measurement) -> tuple[float, float]:
    r, size = m.world_size, float(m.nbytes)
    if m.kind == "allreduce":
        return 2.0 * (r - 1), 2.0 * (r - 1) / r * size
    if m.kind == "allgather":
        return float(r - 1), (r - 1) / r * size
    if m.kind in ("p2p", "alltoall"):      # all-to-all: what a rank receives from the others
        return 1.0, size
    raise InvalidTopologyError(f"unknown measurement kind {m.kind!r}; known: {_KINDS}")


def fit_alpha_beta(measurements: Sequence[Measurement]) -> Fit:
    """Fit ``alpha`` and ``bandwidth`` to collective timings (see the module docstring).

    Parameters
    ----------
    measurements : sequence of Measurement
        At least two, with at least two distinct sizes.

    Returns
    -------
    Fit

    Raises
    ------
    InvalidTopologyError
        With fewer than two usable measurements, or one that is not positive and finite.
    """
    ms = list(measurements)
    if len(ms) < 2 or len({float(m.nbytes) for m in ms}) < 2:
        raise InvalidTopologyError("fit_alpha_beta needs measurements at two sizes at least")
    for m in ms:
        if not (math.isfinite(m.seconds) and m.seconds > 0 and m.nbytes >= 0
                and m.world_size >= 2):
            raise InvalidTopologyError(f"bad measurement {m!r}: seconds must be positive, "
                                       "nbytes non-negative, world_size at least 2")
    a = np.array([_row(m) for m in ms], float)
    t = np.array([m.seconds for m in ms], float)
    w = 1.0 / t
    aw = a * w[:, None]
    # non-negative least squares on two unknowns: the unconstrained solution, else the
    # better of the two one-variable fits on the boundary
    scale = np.abs(aw).max(axis=0)
    scale[scale == 0] = 1.0
    sol, *_ = np.linalg.lstsq(aw / scale, np.ones_like(t), rcond=None)
    x = sol / scale
    if np.any(x < 0):
        cands = []
        for j in range(2):
            col = aw[:, j]
            v = max(float(col @ np.ones_like(t)) / float(col @ col), 0.0) if col.any() else 0.0
            xx = np.zeros(2)
            xx[j] = v
            cands.append(xx)
        x = min(cands, key=lambda xx: float(np.sum((aw @ xx - 1.0) ** 2)))
    alpha, beta = float(x[0]), float(x[1])
    rel = (a @ x - t) / t
    bw = 1.0 / beta if beta > 0 else math.inf
    if not math.isfinite(bw):
        raise InvalidTopologyError("the fit found no bandwidth term (every time is latency); "
                                   "measure larger messages")
    return Fit(alpha, bw, float(np.sqrt(np.mean(rel ** 2))), len(ms))


# ---------------------------------------------------------------------- measuring
def _worker(rank: int, world: int, init: str, backend: str, sizes, repeats: int,
            warmup: int, threads: int, queue, timing: str = "loop"
            ) -> None:     # pragma: no cover - subprocess
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    dev = "cuda" if backend == "nccl" else "cpu"
    if dev == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    work = _compute_chunk(torch, dev)
    out = []
    try:
        for kind in _KINDS:
            for size in sizes:
                n = max(1, int(size) // 4)
                if kind == "allgather":
                    n = max(1, n // world)
                x = torch.ones(n, dtype=torch.float32, device=dev)
                parts = [torch.empty_like(x) for _ in range(world)]
                if kind == "alltoall":          # n elements from every other rank
                    x = torch.ones(n * world, dtype=torch.float32, device=dev)
                    recv = torch.empty_like(x)

                def op():
                    if kind == "allreduce":
                        dist.all_reduce(x)
                    elif kind == "allgather":
                        dist.all_gather(parts, x)
                    elif kind == "alltoall":
                        dist.all_to_all_single(recv, x)
                    elif rank == 0:                 # ping-pong between ranks 0 and 1
                        dist.send(x, 1)
                        dist.recv(x, 1)
                    elif rank == 1:
                        dist.recv(x, 0)
                        dist.send(x, 0)
                    sync()
                half = 2.0 if kind == "p2p" else 1.0
                if timing == "loop":
                    times = _loop_times(dist, op, work, sync, repeats, warmup, half)
                else:
                    times = []
                    for i in range(warmup + repeats):
                        dist.barrier()
                        t0 = time.perf_counter()
                        op()
                        dt = time.perf_counter() - t0
                        if i >= warmup:
                            times.append(dt / half)
                nbytes = n * 4 * (world if kind == "allgather" else
                                  world - 1 if kind == "alltoall" else 1)
                out.append((kind, nbytes, times))
        queue.put((rank, out, _overlap_times(torch, dist, dev, repeats)))
    finally:
        dist.destroy_process_group()


def _compute_chunk(torch, dev: str):          # pragma: no cover - subprocess
    """A piece of compute of about a layer's length on a CPU (a chain of 128 x 128 matrix
    products, about 0.5 ms on one core), between the collectives of a timing loop."""
    a = torch.randn(128, 128, device=dev)

    def work():
        y = a
        for _ in range(4):
            y = torch.mm(y, a) * 1e-2
        return y
    return work


def _loop_times(dist, op, work, sync, repeats: int, warmup: int, half: float
                ) -> list:                     # pragma: no cover - subprocess
    """What a collective adds to a loop of compute, as a program issues it: ``repeats``
    rounds of ``work(); op()`` back to back (no barrier between them: the ranks arrive as
    their compute lets them, as in a training step), minus as many rounds of ``work()``
    alone, per round; three such pairs of loops, each one value."""
    def both():
        work()
        op()

    def loop(step) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            step()
        sync()
        return time.perf_counter() - t0
    for _ in range(warmup):
        both()
    return [max((loop(both) - loop(work)) / repeats, 1e-7) / half for _ in range(3)]


def _overlap_times(torch, dist, dev: str, repeats: int) -> list:  # pragma: no cover
    """Per repetition ``(compute alone, all-reduce alone, both at once)`` seconds: a chain
    of matrix products and an all-reduce of about the same length."""
    a = torch.randn(256, 256, device=dev)
    x = torch.ones(2 ** 20, device=dev)                    # 4 MiB

    def compute():
        y = a
        for _ in range(8):
            y = torch.mm(y, a) * 1e-3
        return y

    def timed(fn):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def both():
        work = dist.all_reduce(x, async_op=True)
        compute()
        work.wait()
    out = []
    for _ in range(max(5, repeats)):   # 7 samples gave 0.00 and 1.00 in two runs 30 min apart
        out.append((timed(compute), timed(lambda: dist.all_reduce(x)), timed(both)))
    return out


def overlap_efficiency(samples: Sequence[tuple[float, float, float]]) -> float:
    """How much of an all-reduce hides behind compute: ``(t_c + t_a - t_both) /
    min(t_c, t_a)`` on the medians, clipped to ``[0, 1]`` (1: fully hidden, 0: serialized).

    Examples
    --------
    >>> overlap_efficiency([(1.0, 1.0, 1.2)]), overlap_efficiency([(1.0, 0.5, 1.5)])
    (0.8, 0.0)
    """
    arr = np.asarray(samples, float).reshape(-1, 3)
    tc, ta, tb = np.median(arr, axis=0)
    if min(tc, ta) <= 0:
        return 0.0
    return float(np.clip((tc + ta - tb) / min(tc, ta), 0.0, 1.0))


def measure_collectives(world_size: int = 2, sizes: Sequence[float] = DEFAULT_SIZES, *,
                        repeats: int = 15, warmup: int = 3, backend: str = "gloo",
                        threads: int = 1, timeout_s: float = 300.0,
                        with_overlap: bool = False, statistic: str = "median",
                        timing: str = "loop"):
    """Time all-reduce, all-gather, all-to-all and ping-pong with ``world_size`` local
    processes.

    Parameters
    ----------
    world_size : int, default 2
    sizes : sequence of float
        Message sizes in bytes (all-gather: the gathered result).
    repeats, warmup : int
        Timed and untimed repetitions per size; each repetition's time is the slowest
        process's (for ping-pong, rank 0's round trip halved).
    timing : {"loop", "aligned"}, default "loop"
        ``"loop"``: what the collective adds to a loop of compute, as a program issues it
        (``repeats`` rounds of a compute chunk and the collective back to back, minus the
        chunk alone, three times): the ranks arrive when their compute lets them and the
        collective waits for the last, and it shares the cores with compute. On 2 cores
        with gloo an all-reduce of 16-256 KiB added 1.0-1.4 ms to such a loop and took
        0.4-0.5 ms aligned. ``"aligned"``: each repetition after a barrier, the collective
        alone (a best case no step sees).
    statistic : {"median", "min"}, default "median"
        What is kept of the repetitions. ``"median"``: the typical time, the statistic of a
        profile table's entries and of a measured step, so that a prediction built from
        both describes the same steps; ``"min"``: the fastest repetition, the one least
        disturbed by other work (timeit's rule), a best case.
    backend : {"gloo", "nccl"}
    threads : int, default 1
        ``torch.set_num_threads`` in each process.
    timeout_s : float
        Give up (and stop the processes) after this long.
    with_overlap : bool, default False
        Also return the :func:`overlap_efficiency` of an all-reduce with compute.

    Returns
    -------
    list of Measurement, or (list of Measurement, float) with ``with_overlap``

    Raises
    ------
    MissingDependencyError
        Without torch.
    InvalidTopologyError
        For a bad argument, or when the processes fail or time out.
    """
    require("torch", "torch", "measure_collectives()")
    import multiprocessing as mp
    if int(world_size) < 2:
        raise InvalidTopologyError(f"world_size must be at least 2, got {world_size!r}")
    if backend not in ("gloo", "nccl"):
        raise InvalidTopologyError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if int(repeats) < 1 or int(warmup) < 0 or int(threads) < 1:
        raise InvalidTopologyError("repeats and threads must be >= 1, warmup >= 0")
    if statistic not in _STATISTICS:
        raise InvalidTopologyError(f"statistic must be one of {', '.join(_STATISTICS)}, got "
                                   f"{statistic!r}")
    if timing not in TIMINGS:
        raise InvalidTopologyError(f"timing must be one of {', '.join(TIMINGS)}, got "
                                   f"{timing!r}")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=_worker, args=(r, int(world_size), init, backend,
                                                   tuple(sizes), int(repeats), int(warmup),
                                                   int(threads), queue, timing), daemon=True)
                 for r in range(int(world_size))]
        for p in procs:
            p.start()
        results, overlaps = {}, {}
        deadline = time.monotonic() + float(timeout_s)
        try:
            while len(results) < len(procs):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise InvalidTopologyError(f"calibration timed out after {timeout_s} s")
                try:
                    rank, out, ov = queue.get(timeout=min(left, 1.0))
                    results[rank] = out
                    overlaps[rank] = ov
                except Exception:          # queue.Empty: check the processes are alive
                    dead = [p for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        raise InvalidTopologyError(
                            f"a calibration process failed (exit code {dead[0].exitcode}); "
                            "run with -v to see its error") from None
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
    ms = []
    for i, (kind, nbytes, _) in enumerate(results[0]):
        per_rep = np.max([np.asarray(results[r][i][2]) for r in results
                          if kind != "p2p" or r == 0], axis=0)
        ms.append(Measurement(kind, int(world_size), float(nbytes),
                              float(_STATISTICS[statistic](per_rep))))
    if with_overlap:
        return ms, overlap_efficiency(np.max([np.asarray(o) for o in overlaps.values()],
                                             axis=0))
    return ms


def measure_device(*, threads: int = 1, device: str = "cpu", world_size: int = 1,
                   repeats: int = 7) -> Device:
    """Measure this machine's device: dense FLOP/s, copy bandwidth, per-op time, memory.

    Parameters
    ----------
    threads : int, default 1
        Torch threads while measuring (as each training process will have).
    device : {"cpu", "cuda"}
    world_size : int, default 1
        Processes sharing the machine (the memory is divided among them).
    repeats : int

    Returns
    -------
    Device
    """
    torch = require("torch", "torch", "measure_device()")
    saved = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def best(fn, n=repeats):
        fn()
        sync()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts))
    try:
        k = 512 if device == "cpu" else 8192
        a = torch.randn(k, k, device=device)
        b = torch.randn(k, k, device=device)
        flops = 2.0 * k ** 3 / best(lambda: torch.mm(a, b))
        n = (32 if device == "cpu" else 256) * 2 ** 20 // 4
        src = torch.randn(n, device=device)
        dst = torch.empty_like(src)
        bw = 2.0 * n * 4 / best(lambda: dst.copy_(src))
        x = torch.ones(1, device=device)
        y = torch.ones(1, device=device)
        launch = best(lambda: torch.add(x, y), n=200)
    finally:
        torch.set_num_threads(saved)
    if device.startswith("cuda"):
        mem = float(torch.cuda.get_device_properties(0).total_memory)
        name = str(torch.cuda.get_device_name(0))
    else:
        mem = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / max(
            1, int(world_size))
        name = f"cpu-{int(threads)}t ({platform.processor() or platform.machine()})"
    eff = RooflineParams().memory_efficiency
    return Device(name, mem, flops, 1.0, bw / eff, launch, ())


def _profile_worker(graph, tiles, barrier, repeats, warmup, threads, device, optimizer,
                    queue) -> None:                         # pragma: no cover - subprocess
    from .profile import profile_layers
    barrier.wait()
    table = profile_layers(graph, tiles, repeats=repeats, warmup=warmup, threads=threads,
                           device=device, optimizer=optimizer)
    queue.put(table.to_json())


def profile_concurrently(graph, tiles, *, world_size: int = 2, threads: int = 1,
                         repeats: int = 15, warmup: int = 2, device: str = "cpu",
                         optimizer: str | None = "adam", timeout_s: float = 900.0):
    """Profile tiles in ``world_size`` processes at once, as a data-parallel job runs them.

    Processes that share a machine share its cores, caches and memory bandwidth: a tile timed
    alone is faster than the same tile while the other processes of the job compute too.
    Every process times the same tiles (:func:`milp_parallel.profile.profile_layers`) after a
    common start; an entry keeps the median over the processes.

    Parameters
    ----------
    graph : LayerGraph
    tiles : iterable of (layer or name, tile shape), or a Topology
        What to time (see :func:`milp_parallel.profile.needed_tiles`).
    world_size, threads, repeats, warmup, device, optimizer, timeout_s
        As :func:`measure_collectives` and :func:`~milp_parallel.profile.profile_layers`.

    Returns
    -------
    ProfileTable
    """
    require("torch", "torch", "profile_concurrently()")
    import multiprocessing as mp

    from .profile import ProfileEntry, ProfileTable
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    barrier = ctx.Barrier(int(world_size))
    tiles = list(tiles) if not hasattr(tiles, "levels") else tiles
    procs = [ctx.Process(target=_profile_worker, args=(graph, tiles, barrier, int(repeats),
                                                       int(warmup), int(threads), device,
                                                       optimizer, queue), daemon=True)
             for _ in range(int(world_size))]
    for p in procs:
        p.start()
    try:
        tables = [ProfileTable.from_json(queue.get(timeout=timeout_s)) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
    keys = [e.key for e in tables[0].entries]
    entries = []
    for key in keys:
        secs = [t._index[key] for t in tables if key in t._index]
        upds = [t._updates[key] for t in tables if key in t._updates]
        entries.append(ProfileEntry(*key, seconds=float(np.median(secs)),
                                    update_seconds=float(np.median(upds)) if upds else None))
    meta = {**tables[0].meta, "concurrent_processes": int(world_size)}
    return ProfileTable(tuple(entries), dtype=tables[0].dtype, device=tables[0].device,
                        meta=meta, optimizer=tables[0].optimizer)


def calibrate(out_path: str | Path | None = None, *, world_size: int = 2,
              backend: str = "gloo", threads: int = 1, sizes: Sequence[float] = DEFAULT_SIZES,
              repeats: int = 15, profile_path: str | Path | None = None,
              models: Sequence[Any] = ("lenet5",), batch_size: int | None = None,
              name: str = "calibrated", statistic: str = "median", timing: str = "loop"
              ) -> tuple[Topology, dict]:
    """Measure this machine and write its :class:`Topology` (``world_size`` devices).

    Parameters
    ----------
    out_path : path, optional
        Where to write the topology JSON (``Topology.save``); the raw measurements and fits
        go to ``<out_path stem>.calibration.json`` beside it.
    world_size : int, default 2
    backend : {"gloo", "nccl"}
    threads : int, default 1
    sizes, repeats, statistic, timing
        As :func:`measure_collectives`.
    profile_path : path, optional
        Also write the per-op profile table of ``models`` there, timed by ``world_size``
        processes at once (:func:`profile_concurrently`).
    models : sequence of str or LayerGraph
        The models to profile (zoo names or graphs), for their tiles on ``world_size``
        devices.
    batch_size : int, optional
        Their global batch (default: each model's).
    name : str
        The topology's name.

    Returns
    -------
    topology : Topology
    report : dict
        ``measurements`` (list of dicts), ``statistic``, ``fit`` (one alpha-beta pair for
        all kinds: alpha, bandwidth, RMS relative error; a diagnostic), ``fits_by_kind``
        (the topology's link is ``p2p``'s, its ``collectives`` the others'),
        ``overlap_efficiency`` (:func:`overlap_efficiency`: use it as the
        cost model's ``sync_overlap``; on CPU the all-reduce runs on the cores that compute),
        ``device``.
    """
    ms, overlap = measure_collectives(world_size, sizes, repeats=repeats, backend=backend,
                                      threads=threads, with_overlap=True,
                                      statistic=statistic, timing=timing)
    fit = fit_alpha_beta(ms)
    by_kind = {}
    for kind in _KINDS:
        sub = [m for m in ms if m.kind == kind]
        if len({m.nbytes for m in sub}) >= 2:
            # a kind too noisy to fit falls back to the link (or the joint fit) and the
            # reason is kept in the report
            try:
                by_kind[kind] = fit_alpha_beta(sub)
            except InvalidTopologyError as exc:
                logger.warning("no alpha-beta fit for %s alone: %s", kind, exc)
                by_kind[kind] = str(exc)
    link = by_kind["p2p"] if isinstance(by_kind.get("p2p"), Fit) else fit
    own = tuple((kind, f.alpha_s, f.bandwidth_bytes_per_s) for kind, f in by_kind.items()
                if kind != "p2p" and isinstance(f, Fit))
    dev = measure_device(threads=threads, device="cuda" if backend == "nccl" else "cpu",
                         world_size=world_size)
    topo = Topology(dev, (Level(backend, int(world_size), link.bandwidth_bytes_per_s,
                                link.alpha_s, collectives=own),), name)
    report = {"format": CALIBRATION_FORMAT, "version": 1, "backend": backend,
              "world_size": int(world_size), "threads": int(threads),
              "statistic": statistic, "timing": timing,
              "measurements": [asdict(m) for m in ms],
              "fit": asdict(fit),
              "fits_by_kind": {k: asdict(f) if isinstance(f, Fit) else {"error": f}
                               for k, f in by_kind.items()},
              "overlap_efficiency": overlap,
              "device": dev.to_dict()}
    if out_path is not None:
        out = Path(out_path)
        topo.save(out)
        out.with_name(out.stem + ".calibration.json").write_text(json.dumps(report, indent=1))
    if profile_path is not None:
        from ..models import get as get_model
        from .profile import ProfileTable
        table = None
        for m in models:
            g = get_model(m) if isinstance(m, str) else m
            if batch_size is not None:
                g = g.with_batch_size(int(batch_size))
            part = profile_concurrently(g, topo, world_size=world_size, threads=threads,
                                        device="cuda" if backend == "nccl" else "cpu")
            table = part if table is None else table.merge(part)
        if table is not None:
            table = ProfileTable(table.entries, dtype=table.dtype, device=table.device,
                                 meta={**table.meta, "calibration": name},
                                 optimizer=table.optimizer)
            table.save(profile_path)
    logger.info("calibrated %s: alpha %.3g s, bandwidth %.3g B/s (RMS error %.1f%%)", name,
                fit.alpha_s, fit.bandwidth_bytes_per_s, 100 * fit.rms_relative_error)
    return topo, report


def load_report(topology_path: str | Path) -> dict | None:
    """The calibration report written beside a calibrated topology, or None."""
    p = Path(topology_path)
    rep = p.with_name(p.stem + ".calibration.json")
    if not rep.exists():
        return None
    return json.loads(rep.read_text())
