"""The model zoo: :func:`get` a :class:`~milp_parallel.graph.LayerGraph` by name.

========================= ============================================== ==============
name                      model                                          default batch
========================= ============================================== ==============
lenet5                    LeNet-5, 1x32x32                               32
alexnet                   torchvision AlexNet, 224x224                   32
vgg16, vgg19              torchvision VGG, 224x224                       32
resnet18 ... resnet152    torchvision ResNet (v1.5), 224x224             32
inception_v3              torchvision Inception-v3, no aux head, 299     32
densenet121               torchvision DenseNet-121, 224x224              32
mobilenet_v2              torchvision MobileNet-V2, 224x224              32
cosmoflow, cosmoflow512   ParaDL's CosmoFlow, 4x128^3 and 4x512^3        8
bert_base                 BERT-base encoder, sequence 128                32
gpt_1.7b, gpt_18.4b,      Megatron-LM GPT (SC'21 Table 1 shapes),        8
gpt_145.6b                sequence 2048, vocabulary 51,200
llama2_7b, llama2_70b     Llama-2 (GQA for 70B), sequence 4096           8
llama3_8b, llama3_70b     Llama-3 (GQA), sequence 8192                   8
vit_b_16, vit_l_16,       torchvision ViT, 224x224                       32
vit_h_14
========================= ============================================== ==============

The transformers (``gpt_*``, ``llama*``, ``vit_*``) are built at the granularity where
tensor-parallel choices are visible (:mod:`.gpt`, :mod:`.llama`, :mod:`.vit`): one layer per
projection, attention core, norm, activation, dropout and residual add; other shapes come from
their builders (``models.gpt.gpt(...)``, ``models.llama.llama(...)``, ``models.vit.vit(...)``).

The image models follow torchvision's definitions exactly: same parameter counts, and
``graph.matmul_flops()`` equals ``torch.utils.flop_counter.FlopCounterMode``'s count at batch 1
(checked in tests/test_models.py against ``milp_parallel/data/torchvision_reference.json``).
Every model ends with a cross-entropy ``loss`` layer (``loss=False`` leaves it out).

Examples
--------
>>> from milp_parallel import models
>>> g = models.get("resnet50", batch_size=64)
>>> g.batch_size, g.param_count()
(64, 25557032)
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnknownNameError
from ..graph import LayerGraph
from .alexnet import alexnet
from .cosmoflow import cosmoflow
from .densenet import densenet121
from .gpt import gpt_named
from .inception import inception_v3
from .lenet import lenet5
from .llama import llama_named
from .mobilenet import mobilenet_v2
from .resnet import resnet18, resnet34, resnet50, resnet101, resnet152
from .transformer import bert_base
from .vgg import vgg16, vgg19
from .vit import vit_named

__all__ = ["get", "names", "default_batch_size"]


def _cosmoflow512(batch_size: int = 8, **kw: Any) -> LayerGraph:
    return cosmoflow(batch_size, input_size=512, **kw)


def _named(builder: Callable[..., LayerGraph], key: str) -> Callable[..., LayerGraph]:
    def build(batch_size: int, **kw: Any) -> LayerGraph:
        return builder(key, batch_size, **kw)
    build.__name__ = key.replace(".", "_")
    return build


#: name -> (builder(batch_size, **options), default batch size). Read-only by convention.
_REGISTRY: dict[str, tuple[Callable[..., LayerGraph], int]] = {
    "lenet5": (lenet5, 32),
    "alexnet": (alexnet, 32),
    "vgg16": (vgg16, 32),
    "vgg19": (vgg19, 32),
    "resnet18": (resnet18, 32),
    "resnet34": (resnet34, 32),
    "resnet50": (resnet50, 32),
    "resnet101": (resnet101, 32),
    "resnet152": (resnet152, 32),
    "inception_v3": (inception_v3, 32),
    "densenet121": (densenet121, 32),
    "mobilenet_v2": (mobilenet_v2, 32),
    "cosmoflow": (cosmoflow, 8),
    "cosmoflow512": (_cosmoflow512, 8),
    "bert_base": (bert_base, 32),
    "gpt_1.7b": (_named(gpt_named, "1.7b"), 8),
    "gpt_18.4b": (_named(gpt_named, "18.4b"), 8),
    "gpt_145.6b": (_named(gpt_named, "145.6b"), 8),
    "llama2_7b": (_named(llama_named, "llama2_7b"), 8),
    "llama2_70b": (_named(llama_named, "llama2_70b"), 8),
    "llama3_8b": (_named(llama_named, "llama3_8b"), 8),
    "llama3_70b": (_named(llama_named, "llama3_70b"), 8),
    "vit_b_16": (_named(vit_named, "vit_b_16"), 32),
    "vit_l_16": (_named(vit_named, "vit_l_16"), 32),
    "vit_h_14": (_named(vit_named, "vit_h_14"), 32),
}


def names() -> tuple[str, ...]:
    """The known model names, in the order of the table above."""
    return tuple(_REGISTRY)


def _entry(name: str):
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        from ..io import suggest
        hint = (suggest(name, _REGISTRY) if isinstance(name, str) else "") or ";"
        raise UnknownNameError(
            f"unknown model {name!r}{hint} known models: {', '.join(_REGISTRY)}") from None


def default_batch_size(name: str) -> int:
    """The batch size :func:`get` uses when none is given.

    Raises
    ------
    UnknownNameError
        ``name`` is not in :func:`names`.
    """
    return _entry(name)[1]


def get(name: str, batch_size: int | None = None, **options: Any) -> LayerGraph:
    """Build the model called ``name``.

    Parameters
    ----------
    name : str
        One of :func:`names`.
    batch_size : int, optional
        Samples per step (default: :func:`default_batch_size`).
    **options
        Passed to the builder (e.g. ``image_size=``, ``num_classes=``, ``seq_len=`` for
        bert_base, ``loss=False``).

    Returns
    -------
    LayerGraph

    Raises
    ------
    UnknownNameError
        ``name`` is not known (the message lists the known names).
    UnknownOptionError
        (a ``TypeError``) A keyword the model's builder does not take.
    InvalidGraphError
        The options give an impossible model (e.g. an image too small for the strides).

    Examples
    --------
    >>> get("alexnet", batch_size=1).layer("classifier.6").output_shape
    (1, 1000)
    """
    builder, default = _entry(name)
    b = default if batch_size is None else batch_size
    from ..errors import InvalidGraphError
    if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
        raise InvalidGraphError(f"batch_size {batch_size!r} for model {name!r} must be a "
                                "positive integer")
    try:
        return builder(b, **options)
    except TypeError as e:
        from ..errors import UnknownOptionError
        raise UnknownOptionError(
            f"model {name!r} does not take {', '.join(map(repr, options)) or 'that'} ({e}); "
            f"see help(milp_parallel.models.get) and the builder's own docstring for the "
            "keywords each zoo family takes") from None
