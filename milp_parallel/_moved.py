"""Old module paths that keep working one release after a module moved into a folder.

A shim module left at the old path calls :func:`alias`: the old name then *is* the new module
(``sys.modules`` holds one object under both names, so private names, ``monkeypatch`` and
``isinstance`` behave as before) and a :class:`DeprecationWarning` names the new path.
"""

from __future__ import annotations

import importlib
import sys
import warnings

__all__ = ["alias"]


def alias(old: str, new: str) -> None:
    """Make the module ``old`` (being imported) the module ``new``, with a warning."""
    warnings.warn(f"{old} moved to {new}; the old path works until the next release",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
