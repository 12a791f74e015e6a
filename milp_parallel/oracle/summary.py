"""ParaDL's command line, exactly: :func:`paradl_summary` (``parallel_analysis.py -goal 1``)
and the readers of its logs (:func:`parse_summary`, :func:`parse_command`)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import FormatError, InvalidOptionError, UnknownNameError
from .formulas import (
    ProjectionRow,
    _act,
    _data,
    _data_filter,
    _data_spatial,
    _model_parallel,
    _serial,
    _spatial,
)
from .model import BYTES_PER_ELEMENT, PLX_CABLE_LATENCY_S, _cluster, _net_from_table
from .paradl_files import NetTable, Platform, read_mask, read_net, read_platform

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# ParaDL's command line, exactly


def _as_table(net) -> NetTable:
    if isinstance(net, NetTable):
        return net
    return read_net(net)


def _as_platform(plat) -> Platform:
    if isinstance(plat, Platform):
        return plat
    return read_platform(plat)


def paradl_summary(net: NetTable | str | Path, plat: Platform | str | Path,
                   strategies: str | Sequence[str], *, max_devices: float, max_batch: float,
                   batch_per_device: float, layer_mask: Any = None,
                   plx_cable_latency_s: float = PLX_CABLE_LATENCY_S,
                   ds_source: str = "code") -> list[dict]:
    """ParaDL's SUMMARY table for ``parallel_analysis.py -goal 1``.

    Reproduces ``parallel_analysis.py -net NET -plat PLAT -goal 1 --paratype STRATEGIES
    --cmaxp MAX_DEVICES --cmaxB MAX_BATCH --cBon=BATCH_PER_DEVICE --lc LAYER_MASK``: rows
    in ParaDL's order (serial, data, spatial, filter case 1 then 3, channel case 1 then 3,
    data+filter, data+spatial, whatever the order of ``strategies``), device counts the
    powers of two from 2 up to ``max_devices`` (capped by the platform and each strategy's
    limit), with ParaDL's quirks (module documentation).

    Parameters
    ----------
    net : NetTable or path
    plat : Platform or path
    strategies : str or sequence of str
        ParaDL codes ``o, d, s, f, c, df, ds`` (``a`` for all); a string may join them with
        commas, as ``--paratype``.
    max_devices, max_batch, batch_per_device : float
        ``--cmaxp``, ``--cmaxB``, ``--cBon``.
    layer_mask : path or bool array, optional
        ``--lc``: the layers filter, channel, spatial and the hybrids split (default all).
    plx_cable_latency_s : float, optional
        20 us (the ranking logs) or :data:`PLX_CABLE_LATENCY_OLD_S` (the scaling logs).
    ds_source : {"code", "log"}
        data+spatial as the current ``parallel_analysis.py`` computes it (default), or as the
        older version behind the repository's published data+spatial log
        (``log/ranking_log/resnet/64/data+spatial.log``).

    Returns
    -------
    list of dict
        Keys ``name`` (ParaDL's: single, data, spatial, filter1, filter3, chan1, chan3, df,
        ds), ``B``, ``p``, ``mem_bytes``, ``comp_s``, ``comm_s``, ``time_s`` and
        ``cost_node_minutes`` (``p * ceil(time / 60)``).

    Raises
    ------
    UnknownNameError
        For an unknown code (``p``, pipeline, is refused: ParaDL's pipeline analysis returns
        before computing anything).
    InvalidOptionError
        For a ``max_devices`` below 1, or a batch that is not a positive finite number.
    """
    from .projection import _positive
    max_devices = _positive(max_devices, "max_devices")
    if max_devices < 1:
        raise InvalidOptionError(f"max_devices must be at least 1, got {max_devices!r}")
    max_batch = _positive(max_batch, "max_batch")
    batch_per_device = _positive(batch_per_device, "batch_per_device")
    table = _as_table(net)
    platform = _as_platform(plat)
    codes = [c.strip() for c in (strategies.split(",") if isinstance(strategies, str)
                                 else strategies)]
    for c in codes:
        if c not in ("a", "o", "d", "s", "f", "c", "df", "ds"):
            raise UnknownNameError(f"unknown ParaDL strategy code {c!r}; known: a, o, d, s, "
                                   "f, c, df, ds (p, pipeline, is not implemented in ParaDL)")
    want = set(codes)
    if "a" in want:
        want |= {"o", "d", "s", "f", "c", "df", "ds"}
    cl = _cluster(platform, "paradl", plx_cable_latency_s)
    net_ = _net_from_table(table, platform.speed_flops)
    if layer_mask is None:
        mask = np.ones(net_.n_layers, bool)
    elif isinstance(layer_mask, (str, Path)):
        mask = np.asarray(read_mask(layer_mask, names=table.names))
    else:
        mask = np.asarray(layer_mask, dtype=bool)
    max_rank = min(float(max_devices), float(platform.max_devices))
    b = float(batch_per_device)
    max_b = float(max_batch)
    D = float(table.dataset_size)
    items = platform.memory_bytes / BYTES_PER_ELEMENT
    x, y = _act(net_, True)
    W = float(net_.w.sum())
    rows: list[ProjectionRow | tuple[str, ProjectionRow]] = []
    out: list[tuple[str, ProjectionRow]] = []

    def powers(limit):
        return [2.0 ** i for i in range(1, int(math.log(limit, 2)) + 1)]

    enough = (items / 2 - W) / (x + y) >= 1
    if "o" in want and enough:
        out.append(("single", _serial(net_, cl, 1, b, D, True)))
    if "d" in want and enough:
        for p in powers(max_rank):
            if b * p <= max_b:
                out.append(("data", _data(net_, cl, p, b, D, True)))
    if "s" in want:
        m = mask
        min_w = min(float(net_.x_shape[m, 1].min()), float(net_.y_shape[m, 1].min()))
        for p in powers(min(max_rank, min_w)):
            r, max_samples = _spatial(net_, cl, p, b, D, True, mask=m)
            if max_samples >= 1 and b <= max_b:
                out.append(("spatial", r))
    for code, kind, tag in (("f", "filter", "filter"), ("c", "channel", "chan")):
        if code not in want:
            continue
        if kind == "filter":
            lim = float(net_.y_shape[mask, 0].min())
        else:
            idx = np.flatnonzero(mask)
            idx = idx[idx > 0]
            lim = float(net_.x_shape[idx, 0].min()) if idx.size else 1e9
        ps = powers(min(max_rank, lim))
        for case, batch_of in ((1, lambda p: b * p), (3, lambda p: b)):
            for p in ps:
                B = batch_of(p)
                if B > max_b:
                    continue
                r = _model_parallel(kind, net_, cl, p, B, D, True, mask=mask)
                if r.memory_bytes > platform.memory_bytes:
                    logger.info("%s%d: %g samples on %g GPUs do not fit", tag, case, B, p)
                    continue
                out.append((f"{tag}{case}", r))
    P2 = float(platform.devices_per_node)
    if "df" in want and (items / 2 - W / P2) / (x + y) >= 1:
        for i in range(int(math.log(P2, 2)), int(math.log(max_rank, 2)) + 1):
            p = 2.0 ** i
            if b * p / P2 <= max_b:
                out.append(("df", _data_filter(net_, cl, p, b, D, True, mask=mask)))
    if "ds" in want:
        for i in range(int(math.log(P2, 2)), int(math.log(max_rank, 2)) + 1):
            p = 2.0 ** i
            if b * p / P2 <= max_b and p >= P2:
                out.append(("ds", _data_spatial(net_, cl, p, b, D, True, mask=mask,
                                                ds_source=ds_source)))
    del rows
    result = []
    for name, r in out:
        t = r.compute_s + r.comm_s
        result.append({"name": name, "B": r.batch, "p": r.devices, "mem_bytes": r.memory_bytes,
                       "comp_s": r.compute_s, "comm_s": r.comm_s, "time_s": t,
                       "cost_node_minutes": r.devices * math.ceil(t / 60)})
    return result


_SUMMARY_KEYS = ("name", "B", "p", "mem_bytes", "comp_s", "comm_s", "time_s",
                 "cost_node_minutes")


def parse_summary(text: str) -> list[dict]:
    """Parse the SUMMARY table(s) of a ParaDL log into dicts like :func:`paradl_summary`'s.

    Parameters
    ----------
    text : str
        A log's content.

    Returns
    -------
    list of dict
        The rows of the last SUMMARY in the log.

    Raises
    ------
    FormatError
        When the log has no SUMMARY or a row is malformed.
    """
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if "SUMMARY" in ln and ln.startswith("=")]
    if not starts:
        raise FormatError("no ==SUMMARY== section in the ParaDL log")
    rows = []
    for ln in lines[starts[-1] + 2:]:
        if not ln.strip() or ln.startswith("#") or ln.startswith("="):
            break
        parts = ln.split()
        if len(parts) != len(_SUMMARY_KEYS):
            raise FormatError(f"SUMMARY row {ln!r} has {len(parts)} columns, expected "
                              f"{len(_SUMMARY_KEYS)}")
        rows.append({"name": parts[0], **{k: float(v) for k, v in
                                          zip(_SUMMARY_KEYS[1:], parts[1:])}})
    return rows


def parse_command(text: str) -> dict:
    """The arguments of a ParaDL log's first lines (``-net``, ``--paratype``, ``--cmaxB`` ...).

    Returns
    -------
    dict
        Keys ``net``, ``plat``, ``strategies`` (list of codes), ``max_batch``,
        ``max_devices``, ``batch_per_device``.
    """
    import ast
    import re
    m1 = re.search(r"-net (\S+) -plat (\S+) -goal \d+ --paratype (\[.*?\])", text)
    m2 = re.search(r"--cmaxB (\S+) --cmaxp (\S+) --cBon (\S+)", text)
    if not (m1 and m2):
        raise FormatError("no ParaDL command line at the top of the log")
    return {"net": m1.group(1), "plat": m1.group(2),
            "strategies": ast.literal_eval(m1.group(3)),
            "max_batch": float(m2.group(1)), "max_devices": float(m2.group(2)),
            "batch_per_device": float(m2.group(3))}
