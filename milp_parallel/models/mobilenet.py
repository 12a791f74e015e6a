"""MobileNet-V2 exactly as torchvision.models.mobilenet_v2 (3,504,872 parameters).

Names follow torchvision: ``features.0.0`` (conv), ``features.0.1`` (bn), ``features.0.2``
(ReLU6); inverted residual ``features.i.conv.j.k``; residual sums ``features.i.add``;
``classifier.0`` (dropout 0.2), ``classifier.1`` (linear).
"""

from __future__ import annotations

from ..graph import LayerGraph

__all__ = ["mobilenet_v2", "SETTINGS"]

#: (expand ratio t, channels c, repeats n, first stride s), torchvision's table.
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _cbr(g: LayerGraph, p: str, x: str, out: int, k: int, stride: int = 1,
         groups: int = 1) -> str:
    y = g.conv(f"{p}.0", x, out, k, stride=stride, padding=(k - 1) // 2, groups=groups,
               bias=False)
    return g.elementwise(f"{p}.2", g.batchnorm(f"{p}.1", y), fn="relu6")


def mobilenet_v2(batch_size: int = 32, *, image_size: int = 224, num_classes: int = 1000,
                 width_mult: float = 1.0, loss: bool = True) -> LayerGraph:
    """Build torchvision's MobileNet-V2.

    Parameters
    ----------
    batch_size : int
        Samples per step.
    image_size : int
        Height and width of the 3-channel input.
    num_classes : int
        Outputs of the classifier.
    width_mult : float
        Channel multiplier (rounded to multiples of 8 as torchvision does).
    loss : bool
        Append a cross-entropy ``loss`` layer.

    Returns
    -------
    LayerGraph

    Examples
    --------
    >>> mobilenet_v2(1).param_count()
    3504872
    """
    g = LayerGraph("mobilenet_v2")
    x = g.input("input", (batch_size, 3, image_size, image_size))
    ch = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = _cbr(g, "features.0", x, ch, 3, stride=2)
    i = 1
    for t, c, n, s in SETTINGS:
        out = _make_divisible(c * width_mult)
        for r in range(n):
            stride = s if r == 0 else 1
            p = f"features.{i}.conv"
            hidden = int(round(ch * t))
            y, j = x, 0
            if t != 1:
                y, j = _cbr(g, f"{p}.0", y, hidden, 1), 1
            y = _cbr(g, f"{p}.{j}", y, hidden, 3, stride=stride, groups=hidden)
            y = g.conv(f"{p}.{j + 1}", y, out, 1, bias=False)
            y = g.batchnorm(f"{p}.{j + 2}", y)
            if stride == 1 and ch == out:
                y = g.add(f"features.{i}.add", x, y)
            x, ch, i = y, out, i + 1
    x = _cbr(g, f"features.{i}", x, last, 1)
    x = g.flatten("flatten", g.global_pool("avgpool", x))
    x = g.dropout("classifier.0", x, p=0.2)
    x = g.linear("classifier.1", x, num_classes)
    if loss:
        g.loss("loss", x)
    return g
