"""Import layer graphs from other frameworks: ONNX files and PyTorch modules.

=================  ===================================================================
function           what it reads
=================  ===================================================================
:func:`from_onnx`  an ONNX model (path, bytes or ``onnx.ModelProto``); needs the
                   ``onnx`` extra: ``pip install milp_parallel[onnx]``
:func:`from_torch` a ``torch.nn.Module`` traced with ``torch.fx``; needs the ``torch``
                   extra: ``pip install milp_parallel[torch]``
=================  ===================================================================

Both return a :class:`~milp_parallel.graph.LayerGraph` built through its builder API, so
the shapes, parameter counts and FLOPs follow the same rules as the model zoo's. The
optional packages are imported only when an importer is called; a missing one raises
:class:`MissingDependencyError` (an :class:`ImportError`) naming the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MissingDependencyError

if TYPE_CHECKING:  # pragma: no cover
    from ..graph import LayerGraph

__all__ = ["from_onnx", "from_torch", "MissingDependencyError"]


def from_onnx(model: Any, *, batch_size: int | None = None,
              unknown: str = "error") -> "LayerGraph":
    """Build a :class:`~milp_parallel.graph.LayerGraph` from an ONNX model.

    See :func:`milp_parallel.importers.onnx.from_onnx` for the full description.
    """
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model, batch_size=batch_size, unknown=unknown)


def from_torch(module: Any, example_input: Any, *, unknown: str = "error") -> "LayerGraph":
    """Build a :class:`~milp_parallel.graph.LayerGraph` from a PyTorch module.

    See :func:`milp_parallel.importers.torch.from_torch` for the full description.
    """
    from .torch import from_torch as _from_torch

    return _from_torch(module, example_input, unknown=unknown)
