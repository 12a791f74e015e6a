"""DenseNet-121 exactly as torchvision.models.densenet121 (7,978,856 parameters).

Each dense layer reads the concatenation of everything before it in its block. torchvision
concatenates the whole list again in every layer; here the concatenation is a chain
(``<layer>.cat = concat(<previous cat>, <layer>.conv2)``), the same tensors with one edge per
dense layer instead of a quadratic number, which keeps the graph's treewidth small for the
exact search. Names follow torchvision: ``features.conv0``, ``features.denseblock2.denselayer5.
conv1``, ``features.transition1.conv``, ``features.norm5``, ``classifier``.
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["densenet121", "densenet"]


def densenet(blocks=(6, 12, 24, 16), growth_rate: int = 32, init_features: int = 64,
             bn_size: int = 4, batch_size: int = 32, *, image_size: int = 224,
             num_classes: int = 1000, loss: bool = True, name: str = "densenet") -> LayerGraph:
    """Build a torchvision-style DenseNet-BC.

    Parameters
    ----------
    blocks : sequence of int
        Dense layers per block.
    growth_rate, init_features, bn_size : int
        As torchvision's ``DenseNet``.
    batch_size : int
        Samples per step.
    image_size : int
        Height and width of the 3-channel input.
    num_classes : int
        Outputs of ``classifier``.
    loss : bool
        Append a cross-entropy ``loss`` layer.
    name : str
        The graph's name.

    Returns
    -------
    LayerGraph
    """
    g = LayerGraph(name)
    x = g.input("input", (batch_size, 3, image_size, image_size))
    x = g.conv("features.conv0", x, init_features, 7, stride=2, padding=3, bias=False)
    x = g.elementwise("features.relu0", g.batchnorm("features.norm0", x))
    x = g.pool("features.pool0", x, 3, stride=2, padding=1)
    ch = init_features
    for b, n in enumerate(blocks, start=1):
        for i in range(1, n + 1):
            p = f"features.denseblock{b}.denselayer{i}"
            y = g.elementwise(f"{p}.relu1", g.batchnorm(f"{p}.norm1", x))
            y = g.conv(f"{p}.conv1", y, bn_size * growth_rate, 1, bias=False)
            y = g.elementwise(f"{p}.relu2", g.batchnorm(f"{p}.norm2", y))
            y = g.conv(f"{p}.conv2", y, growth_rate, 3, padding=1, bias=False)
            x = g.concat(f"{p}.cat", [x, y])
            ch += growth_rate
        if b < len(blocks):
            p = f"features.transition{b}"
            x = g.elementwise(f"{p}.relu", g.batchnorm(f"{p}.norm", x))
            x = g.conv(f"{p}.conv", x, ch // 2, 1, bias=False)
            x = g.pool(f"{p}.pool", x, 2, kind="avg", stride=2)
            ch //= 2
    x = g.elementwise("features.relu5", g.batchnorm("features.norm5", x))
    x = g.flatten("flatten", g.global_pool("avgpool", x))
    x = g.linear("classifier", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g


def densenet121(batch_size: int = 32, **kw) -> LayerGraph:
    """torchvision's DenseNet-121 (keywords as :func:`densenet`).

    Examples
    --------
    >>> densenet121(1).param_count()
    7978856
    """
    return densenet((6, 12, 24, 16), 32, 64, 4, batch_size, name="densenet121", **kw)
