"""``fixed=`` and ``forbid=``: layers pinned to a configuration or barred from some, read
against a built problem and applied as ``inf`` node costs.

May import: ``problem``, ``validation``, ``errors``, ``plan.baselines``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..errors import InvalidOptionError
from ..problem import Problem
from ..validation import unknown_name


def _config_index(built, layer: str, config: Any, what: str) -> tuple[int, int]:
    """``(node, configuration index)`` of ``config`` for ``layer`` of a built problem."""
    from .baselines import parse_config_label
    if not isinstance(layer, str) or layer not in built.node_of:
        raise unknown_name(what, "layer", layer, list(built.node_of))
    v = built.node_of[layer]
    head = built.graph.layer(built.members[v][0])
    labels = built.problem.config_labels[v]
    if isinstance(config, Mapping):
        want = {str(d): k for d, k in config.items()}
    elif isinstance(config, str):
        try:
            want = parse_config_label(config)
        except ValueError as exc:
            raise InvalidOptionError(f"{what}: layer {layer!r}: cannot read configuration "
                                     f"{config!r} ({exc}); write e.g. 'n=2 h=2' or 'serial'"
                                     ) from None
    else:
        raise InvalidOptionError(f"{what}: layer {layer!r}: a configuration is a label such "
                                 f"as 'n=2 h=2' or a mapping {{dim: degree}}, got "
                                 f"{type(config).__name__}")
    bad = [d for d in want if d not in head.dims]
    ok = all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1
             for k in want.values())
    if not bad and ok:
        target = np.array([int(want.get(d, 1)) for d in head.dims])
        hits = np.nonzero((built.configs[v] == target).all(axis=1))[0]
        if hits.size:
            return v, int(hits[0])
    shown = ", ".join(repr(x) for x in labels[:12]) + (", ..." if len(labels) > 12 else "")
    raise InvalidOptionError(f"{what}: layer {layer!r} has no configuration {config!r} "
                             f"(dims {''.join(head.dims)}); its configurations: {shown}")


def _constraints(built, fixed: Mapping[str, Any] | None,
                 forbid: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"fixed": {node: label}, "forbid": {node: [labels]}}`` by problem node name."""
    out: dict[str, Any] = {}
    labels = built.problem.config_labels
    names = built.problem.node_names
    for what, arg in (("fixed", fixed), ("forbid", forbid)):
        if arg is None:
            continue
        if not isinstance(arg, Mapping):
            raise InvalidOptionError(f"{what} must be a mapping {{layer: configuration}}, got "
                                     f"{type(arg).__name__}")
        for layer, value in arg.items():
            if what == "fixed":
                v, c = _config_index(built, layer, value, what)
                prev = out.setdefault("fixed", {}).get(names[v])
                if prev is not None and prev != labels[v][c]:
                    raise InvalidOptionError(
                        f"fixed: layer {layer!r} shares its layout with {names[v]!r}, already "
                        f"pinned to {prev!r}; pin one of them")
                out["fixed"][names[v]] = labels[v][c]
            else:
                many = value if isinstance(value, (list, tuple)) else [value]
                for one in many:
                    v, c = _config_index(built, layer, one, what)
                    bans = out.setdefault("forbid", {}).setdefault(names[v], [])
                    if labels[v][c] not in bans:
                        bans.append(labels[v][c])
    return out


def _constrained(built, constraints: Mapping[str, Any]) -> Problem:
    """The built problem with pinned and forbidden configurations priced ``inf``."""
    p = built.problem
    if not constraints:
        return p
    index = {n: v for v, n in enumerate(p.node_names)}
    costs = [np.array(c) for c in p.node_costs]
    for name, label in constraints.get("fixed", {}).items():
        v = index[name]
        keep = p.config_labels[v].index(label)
        pinned = np.full_like(costs[v], math.inf)
        pinned[keep] = costs[v][keep]
        costs[v] = pinned
    for name, bans in constraints.get("forbid", {}).items():
        v = index[name]
        for label in bans:
            costs[v][p.config_labels[v].index(label)] = math.inf
    for v, c in enumerate(costs):
        if not np.isfinite(c).any():
            raise InvalidOptionError(f"forbid: every configuration of layer "
                                     f"{p.node_names[v]!r} is forbidden or costs inf")
    return p.with_costs(costs, p.edge_costs)


