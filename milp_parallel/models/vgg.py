"""VGG-16 and VGG-19 (configurations D and E, no batch-norm) exactly as torchvision.

Parameters at 1000 classes: vgg16 138,357,544; vgg19 143,667,240. Layer names are
torchvision's module names (``features.0``, ``classifier.6``, ...).
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["vgg16", "vgg19", "CONFIGS"]

#: Channels per 3x3 conv, "M" for a 2x2 max pool (torchvision's cfgs "D" and "E").
CONFIGS = {
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
         512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"),
}


def _vgg(depth: int, batch_size: int, image_size: int, num_classes: int,
         loss: bool) -> LayerGraph:
    g = LayerGraph(f"vgg{depth}")
    x = g.input("input", (batch_size, 3, image_size, image_size))
    i = 0
    for v in CONFIGS[depth]:
        if v == "M":
            x = g.pool(f"features.{i}", x, 2, stride=2)
            i += 1
        else:
            x = g.conv(f"features.{i}", x, v, 3, padding=1)
            x = g.elementwise(f"features.{i + 1}", x)
            i += 2
    x = g.adaptive_pool("avgpool", x, (7, 7))
    x = g.flatten("flatten", x)
    x = g.linear("classifier.0", x, 4096)
    x = g.elementwise("classifier.1", x)
    x = g.dropout("classifier.2", x)
    x = g.linear("classifier.3", x, 4096)
    x = g.elementwise("classifier.4", x)
    x = g.dropout("classifier.5", x)
    x = g.linear("classifier.6", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g


def vgg16(batch_size: int = 32, *, image_size: int = 224, num_classes: int = 1000,
          loss: bool = True) -> LayerGraph:
    """Build torchvision's VGG-16 (see :func:`vgg19` for the parameters).

    Examples
    --------
    >>> vgg16(1).param_count()
    138357544
    """
    return _vgg(16, batch_size, image_size, num_classes, loss)


def vgg19(batch_size: int = 32, *, image_size: int = 224, num_classes: int = 1000,
          loss: bool = True) -> LayerGraph:
    """Build torchvision's VGG-19.

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
    """
    return _vgg(19, batch_size, image_size, num_classes, loss)
