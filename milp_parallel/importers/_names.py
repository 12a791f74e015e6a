"""Layer names for imported graphs: readable, unique, whitespace-free."""

from __future__ import annotations

import re

__all__ = ["UniqueNames"]


class UniqueNames:
    """Hands out unique layer names: ``base``, then ``base_2``, ``base_3``, ...

    Examples
    --------
    >>> names = UniqueNames()
    >>> names("conv 1"), names("conv 1"), names("")
    ('conv_1', 'conv_1_2', 'layer')
    """

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def __call__(self, base: str) -> str:
        name = re.sub(r"\s+", "_", base) or "layer"
        unique, k = name, 1
        while unique in self._taken:
            k += 1
            unique = f"{name}_{k}"
        self._taken.add(unique)
        return unique
