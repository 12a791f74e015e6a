"""The measure stage: numbers taken on real hardware, fed back into the cost model.

=====================  ===================================================================
module                 what lives there
=====================  ===================================================================
:mod:`.profile`        per-op forward+backward times of a model's tiles (``ProfileTable``)
:mod:`.calibrate`      collectives and device speed measured, alpha-beta fits
=====================  ===================================================================

May import: ``graph``, ``costs.configs``, ``machine``, ``models``, ``io``, ``errors`` (torch
only inside the functions that measure).
"""
