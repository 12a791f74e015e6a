"""The machine stage: the cluster a model is planned for.

=====================  ===================================================================
module                 what lives there
=====================  ===================================================================
:mod:`.topology`       ``Topology``, ``Device``, ``Level``: devices, levels, links, dtype
:mod:`.clusters`       the presets (``clusters.get("abci")``) and cluster files
:mod:`.collectives`    alpha-beta costs of collectives over a topology's levels
:mod:`.roofline`       the per-op roofline: a tile's FLOPs and bytes at the device's speed
=====================  ===================================================================

May import: ``io``, ``units``, ``errors``, ``validation``, ``solvers.base`` (option checks).
"""

from .topology import Device, Level, Topology

__all__ = ["Topology", "Device", "Level"]
