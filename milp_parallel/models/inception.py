"""Inception-v3 exactly as torchvision.models.inception_v3(aux_logits=False), 299x299 input.

23,834,568 parameters at 1000 classes (torchvision's model with the auxiliary head has
27,161,264; the head only matters in training and is left out). Every ``BasicConv2d`` is a
bias-free conv, a batch-norm and a ReLU, named ``<module>.conv``, ``<module>.bn``,
``<module>.relu`` (e.g. ``Mixed_6b.branch7x7_2.conv``); branches meet in ``<block>.concat``.
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["inception_v3"]


def _bc(g: LayerGraph, p: str, x: str, out: int, k, **kw) -> str:
    y = g.conv(f"{p}.conv", x, out, k, bias=False, **kw)
    return g.elementwise(f"{p}.relu", g.batchnorm(f"{p}.bn", y))


def _avg3(g: LayerGraph, p: str, x: str) -> str:
    return g.pool(f"{p}.avg_pool", x, 3, kind="avg", stride=1, padding=1)


def _a(g, p, x, pool_features):
    b1 = _bc(g, f"{p}.branch1x1", x, 64, 1)
    b5 = _bc(g, f"{p}.branch5x5_1", x, 48, 1)
    b5 = _bc(g, f"{p}.branch5x5_2", b5, 64, 5, padding=2)
    b3 = _bc(g, f"{p}.branch3x3dbl_1", x, 64, 1)
    b3 = _bc(g, f"{p}.branch3x3dbl_2", b3, 96, 3, padding=1)
    b3 = _bc(g, f"{p}.branch3x3dbl_3", b3, 96, 3, padding=1)
    bp = _bc(g, f"{p}.branch_pool", _avg3(g, p, x), pool_features, 1)
    return g.concat(f"{p}.concat", [b1, b5, b3, bp])


def _b(g, p, x):
    b3 = _bc(g, f"{p}.branch3x3", x, 384, 3, stride=2)
    bd = _bc(g, f"{p}.branch3x3dbl_1", x, 64, 1)
    bd = _bc(g, f"{p}.branch3x3dbl_2", bd, 96, 3, padding=1)
    bd = _bc(g, f"{p}.branch3x3dbl_3", bd, 96, 3, stride=2)
    bp = g.pool(f"{p}.max_pool", x, 3, stride=2)
    return g.concat(f"{p}.concat", [b3, bd, bp])


def _c(g, p, x, c7):
    b1 = _bc(g, f"{p}.branch1x1", x, 192, 1)
    b7 = _bc(g, f"{p}.branch7x7_1", x, c7, 1)
    b7 = _bc(g, f"{p}.branch7x7_2", b7, c7, (1, 7), padding=(0, 3))
    b7 = _bc(g, f"{p}.branch7x7_3", b7, 192, (7, 1), padding=(3, 0))
    bd = _bc(g, f"{p}.branch7x7dbl_1", x, c7, 1)
    bd = _bc(g, f"{p}.branch7x7dbl_2", bd, c7, (7, 1), padding=(3, 0))
    bd = _bc(g, f"{p}.branch7x7dbl_3", bd, c7, (1, 7), padding=(0, 3))
    bd = _bc(g, f"{p}.branch7x7dbl_4", bd, c7, (7, 1), padding=(3, 0))
    bd = _bc(g, f"{p}.branch7x7dbl_5", bd, 192, (1, 7), padding=(0, 3))
    bp = _bc(g, f"{p}.branch_pool", _avg3(g, p, x), 192, 1)
    return g.concat(f"{p}.concat", [b1, b7, bd, bp])


def _d(g, p, x):
    b3 = _bc(g, f"{p}.branch3x3_1", x, 192, 1)
    b3 = _bc(g, f"{p}.branch3x3_2", b3, 320, 3, stride=2)
    b7 = _bc(g, f"{p}.branch7x7x3_1", x, 192, 1)
    b7 = _bc(g, f"{p}.branch7x7x3_2", b7, 192, (1, 7), padding=(0, 3))
    b7 = _bc(g, f"{p}.branch7x7x3_3", b7, 192, (7, 1), padding=(3, 0))
    b7 = _bc(g, f"{p}.branch7x7x3_4", b7, 192, 3, stride=2)
    bp = g.pool(f"{p}.max_pool", x, 3, stride=2)
    return g.concat(f"{p}.concat", [b3, b7, bp])


def _e(g, p, x):
    b1 = _bc(g, f"{p}.branch1x1", x, 320, 1)
    b3 = _bc(g, f"{p}.branch3x3_1", x, 384, 1)
    b3 = g.concat(f"{p}.branch3x3.concat", [
        _bc(g, f"{p}.branch3x3_2a", b3, 384, (1, 3), padding=(0, 1)),
        _bc(g, f"{p}.branch3x3_2b", b3, 384, (3, 1), padding=(1, 0))])
    bd = _bc(g, f"{p}.branch3x3dbl_1", x, 448, 1)
    bd = _bc(g, f"{p}.branch3x3dbl_2", bd, 384, 3, padding=1)
    bd = g.concat(f"{p}.branch3x3dbl.concat", [
        _bc(g, f"{p}.branch3x3dbl_3a", bd, 384, (1, 3), padding=(0, 1)),
        _bc(g, f"{p}.branch3x3dbl_3b", bd, 384, (3, 1), padding=(1, 0))])
    bp = _bc(g, f"{p}.branch_pool", _avg3(g, p, x), 192, 1)
    return g.concat(f"{p}.concat", [b1, b3, bd, bp])


def inception_v3(batch_size: int = 32, *, image_size: int = 299, num_classes: int = 1000,
                 loss: bool = True) -> LayerGraph:
    """Build torchvision's Inception-v3 without the auxiliary classifier.

    Parameters
    ----------
    batch_size : int
        Samples per step.
    image_size : int
        Height and width of the 3-channel input (299 in the paper; at least 75).
    num_classes : int
        Outputs of ``fc``.
    loss : bool
        Append a cross-entropy ``loss`` layer.

    Returns
    -------
    LayerGraph

    Examples
    --------
    >>> inception_v3(1).param_count()
    23834568
    """
    g = LayerGraph("inception_v3")
    x = g.input("input", (batch_size, 3, image_size, image_size))
    x = _bc(g, "Conv2d_1a_3x3", x, 32, 3, stride=2)
    x = _bc(g, "Conv2d_2a_3x3", x, 32, 3)
    x = _bc(g, "Conv2d_2b_3x3", x, 64, 3, padding=1)
    x = g.pool("maxpool1", x, 3, stride=2)
    x = _bc(g, "Conv2d_3b_1x1", x, 80, 1)
    x = _bc(g, "Conv2d_4a_3x3", x, 192, 3)
    x = g.pool("maxpool2", x, 3, stride=2)
    x = _a(g, "Mixed_5b", x, 32)
    x = _a(g, "Mixed_5c", x, 64)
    x = _a(g, "Mixed_5d", x, 64)
    x = _b(g, "Mixed_6a", x)
    x = _c(g, "Mixed_6b", x, 128)
    x = _c(g, "Mixed_6c", x, 160)
    x = _c(g, "Mixed_6d", x, 160)
    x = _c(g, "Mixed_6e", x, 192)
    x = _d(g, "Mixed_7a", x)
    x = _e(g, "Mixed_7b", x)
    x = _e(g, "Mixed_7c", x)
    x = g.global_pool("avgpool", x)
    x = g.flatten("flatten", g.dropout("dropout", x))
    x = g.linear("fc", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g
