"""ResNet-18/34/50/101/152 exactly as torchvision (v1.5: stride on the 3x3 conv).

Parameters at 1000 classes: resnet18 11,689,512; resnet34 21,797,672; resnet50 25,557,032;
resnet101 44,549,160; resnet152 60,192,808. Names follow torchvision (``conv1``, ``bn1``,
``layer3.2.conv2``, ``layer2.0.downsample.0``, ``fc``); the ReLUs, which torchvision shares as one
module, are ``<block>.relu1``, ``<block>.relu2`` and ``<block>.relu`` (after the residual
``<block>.add``).
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet", "DEPTHS"]

#: depth -> (bottleneck?, blocks per stage)
DEPTHS = {
    18: (False, (2, 2, 2, 2)),
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
    101: (True, (3, 4, 23, 3)),
    152: (True, (3, 8, 36, 3)),
}


def _block(g: LayerGraph, p: str, x: str, in_ch: int, planes: int, stride: int,
           bottleneck: bool) -> tuple[str, int]:
    out_ch = planes * (4 if bottleneck else 1)
    if bottleneck:
        y = g.conv(f"{p}.conv1", x, planes, 1, bias=False)
        y = g.elementwise(f"{p}.relu1", g.batchnorm(f"{p}.bn1", y))
        y = g.conv(f"{p}.conv2", y, planes, 3, stride=stride, padding=1, bias=False)
        y = g.elementwise(f"{p}.relu2", g.batchnorm(f"{p}.bn2", y))
        y = g.batchnorm(f"{p}.bn3", g.conv(f"{p}.conv3", y, out_ch, 1, bias=False))
    else:
        y = g.conv(f"{p}.conv1", x, planes, 3, stride=stride, padding=1, bias=False)
        y = g.elementwise(f"{p}.relu1", g.batchnorm(f"{p}.bn1", y))
        y = g.batchnorm(f"{p}.bn2", g.conv(f"{p}.conv2", y, planes, 3, padding=1, bias=False))
    if stride != 1 or in_ch != out_ch:
        x = g.conv(f"{p}.downsample.0", x, out_ch, 1, stride=stride, bias=False)
        x = g.batchnorm(f"{p}.downsample.1", x)
    y = g.add(f"{p}.add", y, x)
    return g.elementwise(f"{p}.relu", y), out_ch


def resnet(depth: int, batch_size: int = 32, *, image_size: int = 224,
           num_classes: int = 1000, loss: bool = True) -> LayerGraph:
    """Build torchvision's ResNet of the given depth.

    Parameters
    ----------
    depth : int
        18, 34, 50, 101 or 152.
    batch_size : int
        Samples per step.
    image_size : int
        Height and width of the 3-channel input.
    num_classes : int
        Outputs of ``fc``.
    loss : bool
        Append a cross-entropy ``loss`` layer.

    Returns
    -------
    LayerGraph

    Raises
    ------
    KeyError
        Unknown depth.

    Examples
    --------
    >>> resnet(50, 1).param_count()
    25557032
    """
    bottleneck, blocks = DEPTHS[depth]
    g = LayerGraph(f"resnet{depth}")
    x = g.input("input", (batch_size, 3, image_size, image_size))
    x = g.conv("conv1", x, 64, 7, stride=2, padding=3, bias=False)
    x = g.elementwise("relu", g.batchnorm("bn1", x))
    x = g.pool("maxpool", x, 3, stride=2, padding=1)
    ch = 64
    for stage, (n, planes) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        for b in range(n):
            stride = 2 if (b == 0 and stage > 1) else 1
            x, ch = _block(g, f"layer{stage}.{b}", x, ch, planes, stride, bottleneck)
    x = g.flatten("flatten", g.global_pool("avgpool", x))
    x = g.linear("fc", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g


def resnet18(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's ResNet-18 (keywords as :func:`resnet`)."""
    return resnet(18, batch_size, **kw)


def resnet34(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's ResNet-34 (keywords as :func:`resnet`)."""
    return resnet(34, batch_size, **kw)


def resnet50(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's ResNet-50 (keywords as :func:`resnet`)."""
    return resnet(50, batch_size, **kw)


def resnet101(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's ResNet-101 (keywords as :func:`resnet`)."""
    return resnet(101, batch_size, **kw)


def resnet152(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's ResNet-152 (keywords as :func:`resnet`)."""
    return resnet(152, batch_size, **kw)
