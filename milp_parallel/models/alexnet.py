"""AlexNet exactly as torchvision.models.alexnet (61,100,840 parameters at 1000 classes).

Layer names are torchvision's module names (``features.0``, ``classifier.6``, ...).
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["alexnet"]


def alexnet(batch_size: int = 32, *, image_size: int = 224, num_classes: int = 1000,
            loss: bool = True) -> LayerGraph:
    """Build torchvision's AlexNet.

    Parameters
    ----------
    batch_size : int
        Samples per step.
    image_size : int
        Height and width of the 3-channel input.
    num_classes : int
        Outputs of the classifier.
    loss : bool
        Append a cross-entropy ``loss`` layer.

    Returns
    -------
    LayerGraph

    Examples
    --------
    >>> alexnet(1).param_count()
    61100840
    """
    g = LayerGraph("alexnet")
    x = g.input("input", (batch_size, 3, image_size, image_size))
    x = g.conv("features.0", x, 64, 11, stride=4, padding=2)
    x = g.elementwise("features.1", x)
    x = g.pool("features.2", x, 3, stride=2)
    x = g.conv("features.3", x, 192, 5, padding=2)
    x = g.elementwise("features.4", x)
    x = g.pool("features.5", x, 3, stride=2)
    x = g.conv("features.6", x, 384, 3, padding=1)
    x = g.elementwise("features.7", x)
    x = g.conv("features.8", x, 256, 3, padding=1)
    x = g.elementwise("features.9", x)
    x = g.conv("features.10", x, 256, 3, padding=1)
    x = g.elementwise("features.11", x)
    x = g.pool("features.12", x, 3, stride=2)
    x = g.adaptive_pool("avgpool", x, (6, 6))
    x = g.flatten("flatten", x)
    x = g.dropout("classifier.0", x)
    x = g.linear("classifier.1", x, 4096)
    x = g.elementwise("classifier.2", x)
    x = g.dropout("classifier.3", x)
    x = g.linear("classifier.4", x, 4096)
    x = g.elementwise("classifier.5", x)
    x = g.linear("classifier.6", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g
