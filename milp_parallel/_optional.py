"""Import optional packages with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["require"]


def require(package: str, extra: str, feature: str) -> ModuleType:
    """Import ``package`` or raise :class:`MissingDependencyError`.

    Parameters
    ----------
    package : str
        The module to import, e.g. ``"onnx"``.
    extra : str
        The milp_parallel extra that installs it, e.g. ``"onnx"``.
    feature : str
        What needs it, for the message, e.g. ``"from_onnx()"``.

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    MissingDependencyError
        When ``package`` cannot be imported.
    """
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{feature} needs the '{package}' package, which is not installed ({exc}); "
            f"install it with: pip install 'milp_parallel[{extra}]'") from exc
