"""Read a Hugging Face ``transformers`` model or config into a :class:`LayerGraph`.

:func:`from_hf` builds the module on the meta device (``from_config``: no weights, nothing
downloaded) and writes the graph the transformer planner (:func:`milp_parallel.pipeline.
solve_pipeline`) and the layer-wise planner (:func:`milp_parallel.solve`) take, at the
granularity of :mod:`milp_parallel.models.llama` / :mod:`~milp_parallel.models.gpt`: a norm, a
packed query/key/value projection, the attention core, the output projection, the residual
add, the MLP's linears and its activation, per block.

Layer names are the module's own (``model.layers.3.self_attn.o_proj`` is the module of that
path) with two exceptions, both undone by :func:`hf_modules`:

- the blocks' container is called ``layers`` as the transformer planner expects
  (``transformer.h.3`` -> ``transformer.layers.3`` for GPT-2, ``bert.encoder.layer.3`` ->
  ``bert.encoder.layers.3`` for BERT; Llama's and ViT's are already ``layers``);
- one packed projection stands for the separate query, key and value projections (Llama's
  ``self_attn.qkv_proj`` for ``q_proj, k_proj, v_proj``, BERT's ``attention.self.qkv`` for
  ``query, key, value``, ViT's ``attention.qkv``); GPT-2's ``attn.c_attn`` is packed already.

Layers without a module of their own (residual adds, the attention core, the loss) get a
name inside their block (``attn_residual``, ``self_attn.core``, ...).

================ ================================ =========================================
family           classes read                     from a config
================ ================================ =========================================
``llama``        ``LlamaForCausalLM``,            ``LlamaForCausalLM``
                 ``LlamaModel``
``gpt2``         ``GPT2LMHeadModel``,             ``GPT2LMHeadModel``
                 ``GPT2Model``
``bert``         ``BertForMaskedLM``,             ``BertForMaskedLM``
                 ``BertModel``
``vit``          ``ViTForImageClassification``,   ``ViTForImageClassification``
                 ``ViTModel``
================ ================================ =========================================

The graph's parameter count is checked against the module's (a configuration option the
reader does not know, e.g. a bias it does not model, is an error rather than a silent
miscount).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import InvalidGraphError, InvalidOptionError, require
from ..graph import LayerGraph

__all__ = ["from_hf", "hf_modules", "HF_FAMILIES", "BLOCK_MODULES", "hf_family"]

#: family -> (class read from a config, the other classes read).
HF_FAMILIES = MappingProxyType({
    "llama": ("LlamaForCausalLM", ("LlamaModel",)),
    "gpt2": ("GPT2LMHeadModel", ("GPT2Model",)),
    "bert": ("BertForMaskedLM", ("BertModel",)),
    "vit": ("ViTForImageClassification", ("ViTModel",)),
})
#: family -> the name of the block container in Hugging Face's module (the graph calls it
#: ``layers``).
_CONTAINERS = MappingProxyType({"llama": "layers", "gpt2": "h", "bert": "layer",
                                "vit": "layers"})
#: family -> block-relative graph layer name -> the Hugging Face modules (block-relative) it
#: stands for; layers not listed are the module of their own name, or none (see
#: :func:`hf_modules`).
BLOCK_MODULES = MappingProxyType({
    "llama": MappingProxyType({"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj",
                                                      "self_attn.v_proj")}),
    "gpt2": MappingProxyType({}),
    "bert": MappingProxyType({"attention.self.qkv": ("attention.self.query",
                                                     "attention.self.key",
                                                     "attention.self.value")}),
    "vit": MappingProxyType({"attention.qkv": ("attention.q_proj", "attention.k_proj",
                                               "attention.v_proj"),
                             # the block's one dropout module, used twice
                             "attn_dropout": ("dropout",), "mlp_dropout": ("dropout",)}),
})
#: Block-relative names of layers that have no module (ops inside a module's forward).
_NO_MODULE = frozenset({"self_attn.core", "attn_residual", "mlp_residual", "mlp.mul",
                        "attn.core", "attention.self.core", "attention.output.add",
                        "output.add", "attention.core"})
_BLOCK_RE = re.compile(r"^(?P<base>(?:.*\.)?)layers\.(?P<index>\d+)\.(?P<rest>.+)$")


@dataclass(frozen=True)
class _Read:
    """What :func:`from_hf` learnt about the model: family, head and base-model prefix."""

    family: str
    config: Any
    module: Any
    head: bool
    prefix: str


def hf_family(model_type: str) -> str:
    """The family of a config's ``model_type`` (raises naming the supported ones)."""
    if model_type not in HF_FAMILIES:
        raise InvalidGraphError(
            f"from_hf: architecture {model_type!r} is not supported; supported families: "
            f"{', '.join(HF_FAMILIES)} (classes "
            + "; ".join(f"{f}: {', '.join((c, *o))}" for f, (c, o) in HF_FAMILIES.items())
            + ")")
    return model_type


def _read(model_or_config) -> _Read:
    tr = require("transformers", "hf", "from_hf()")
    torch = require("torch", "torch", "from_hf()")
    if isinstance(model_or_config, tr.PretrainedConfig):
        config = model_or_config
        family = hf_family(config.model_type)
        cls = getattr(tr, HF_FAMILIES[family][0])
        with torch.device("meta"):
            module = cls(config)
    elif isinstance(model_or_config, tr.PreTrainedModel):
        module = model_or_config
        config = module.config
        family = hf_family(config.model_type)
        head_cls, others = HF_FAMILIES[family]
        name = type(module).__name__
        if name not in (head_cls, *others):
            raise InvalidGraphError(
                f"from_hf: {name} is not supported for the {family!r} family; supported: "
                f"{', '.join((head_cls, *others))}")
    else:
        raise InvalidOptionError(
            f"from_hf takes a transformers PreTrainedModel or PretrainedConfig, got "
            f"{type(model_or_config).__name__}")
    head = module.base_model is not module
    prefix = f"{module.base_model_prefix}." if head else ""
    return _Read(family, config, module, head, prefix)


def hf_modules(layer_name: str, model_type: str) -> tuple[str, ...]:
    """The Hugging Face module paths a graph layer of :func:`from_hf` stands for.

    Parameters
    ----------
    layer_name : str
        A layer of the graph (``transformer.layers.0.attn.c_attn``).
    model_type : str
        The config's ``model_type`` (``"gpt2"``).

    Returns
    -------
    tuple of str
        The module paths (``("transformer.h.0.attn.c_attn",)``); empty for a layer that is
        an op inside a module's forward (a residual add, the attention core, the loss).

    Examples
    --------
    >>> hf_modules("transformer.layers.0.attn.c_attn", "gpt2")
    ('transformer.h.0.attn.c_attn',)
    >>> hf_modules("model.layers.1.self_attn.qkv_proj", "llama")
    ('model.layers.1.self_attn.q_proj', 'model.layers.1.self_attn.k_proj', \
'model.layers.1.self_attn.v_proj')
    >>> hf_modules("model.layers.1.attn_residual", "llama")
    ()
    """
    family = hf_family(model_type)
    m = _BLOCK_RE.match(layer_name)
    if m is None:
        if layer_name in ("loss", "input_ids", "position_ids", "token_type_ids",
                          "pixel_values", "class_id") or layer_name.endswith(
                              (".embed_add", ".add", ".patches", ".tokens", ".with_class",
                               ".cls", ".tanh")):
            return ()
        return (layer_name,)
    rest = m["rest"]
    if rest in _NO_MODULE:
        return ()
    block = f"{m['base']}{_CONTAINERS[family]}.{m['index']}"
    return tuple(f"{block}.{r}" for r in BLOCK_MODULES[family].get(rest, (rest,)))


def from_hf(model_or_config, *, seq_len: int | None = None, batch_size: int = 8,
            loss: bool = True) -> LayerGraph:
    """Build the layer graph of a Hugging Face ``transformers`` model (module docstring).

    Parameters
    ----------
    model_or_config : transformers.PreTrainedModel or transformers.PretrainedConfig
        A model of a supported class, or a config (the family's pre-training head is built
        on the meta device: no weights, no download).
    seq_len : int, optional
        Tokens per sequence (default: the config's positions; for ViT the patches and the
        class token, which ``seq_len`` must equal when given).
    batch_size : int
        Samples per step.
    loss : bool
        Append the cross-entropy ``loss`` after a head (no loss on a base model).

    Returns
    -------
    LayerGraph
        Named as the module's layers (:func:`hf_modules` maps back); its parameter count is
        the module's.

    Raises
    ------
    InvalidGraphError
        An unsupported architecture or class (the message names the supported ones), a
        sequence longer than the positions, or a configuration whose parameter count the
        graph does not reproduce.
    InvalidOptionError
        Not a model or config, or a non-positive ``batch_size`` / ``seq_len``.
    MissingDependencyError
        ``transformers`` or ``torch`` is not installed (``pip install 'milp_parallel[hf]'``).
    """
    for what, v in (("batch_size", batch_size), ("seq_len", seq_len)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise InvalidOptionError(f"from_hf: {what} must be a positive integer, got {v!r}")
    r = _read(model_or_config)
    g = _BUILDERS[r.family](r, batch_size, seq_len, loss)
    want = sum(p.numel() for p in r.module.parameters())
    if g.param_count() != want:
        raise InvalidGraphError(
            f"from_hf: the {r.family} graph has {g.param_count()} parameters but "
            f"{type(r.module).__name__} has {want}: its config uses an option this reader "
            "does not model; supported: the families' default layouts")
    return g


# ====================================================================== the families
def _positions(r: _Read, seq_len: int | None, max_positions: int) -> int:
    s = max_positions if seq_len is None else seq_len
    if s > max_positions:
        raise InvalidGraphError(f"from_hf: seq_len={s} is longer than the model's "
                                f"{max_positions} positions")
    return s


def _llama(r: _Read, batch: int, seq_len: int | None, loss: bool) -> LayerGraph:
    c, p0 = r.config, r.prefix
    h, A = c.hidden_size, c.num_attention_heads
    G = c.num_key_value_heads or A
    D = getattr(c, "head_dim", None) or h // A
    S = _positions(r, seq_len, c.max_position_embeddings)
    bias, mlp_bias = bool(c.attention_bias), bool(getattr(c, "mlp_bias", False))
    g = LayerGraph(f"hf_{c.model_type}")
    x = g.embedding(f"{p0}embed_tokens", g.input("input_ids", (batch, S), dims="ns"),
                    c.vocab_size, h)
    for i in range(c.num_hidden_layers):
        p = f"{p0}layers.{i}"
        y = g.linear(f"{p}.self_attn.qkv_proj", g.rmsnorm(f"{p}.input_layernorm", x),
                     (A + 2 * G) * D, bias=bias)
        y = g.attention(f"{p}.self_attn.core", y, A, kv_heads=G, head_dim=D, causal=True,
                        dropout=float(c.attention_dropout))
        x = g.add(f"{p}.attn_residual", g.linear(f"{p}.self_attn.o_proj", y, h, bias=bias), x)
        z = g.rmsnorm(f"{p}.post_attention_layernorm", x)
        act = g.elementwise(f"{p}.mlp.act_fn", g.linear(f"{p}.mlp.gate_proj", z,
                                                        c.intermediate_size, bias=mlp_bias),
                            fn="silu")
        y = g.mul(f"{p}.mlp.mul", act, g.linear(f"{p}.mlp.up_proj", z, c.intermediate_size,
                                                bias=mlp_bias))
        x = g.add(f"{p}.mlp_residual", g.linear(f"{p}.mlp.down_proj", y, h, bias=mlp_bias), x)
    x = g.rmsnorm(f"{p0}norm", x)
    if r.head:
        tied = f"{p0}embed_tokens" if c.tie_word_embeddings else None
        x = g.linear("lm_head", x, c.vocab_size, bias=False, tied_to=tied)
        if loss:
            g.loss("loss", x, shift=1)     # the causal LM scores S - 1 next tokens
    return g


def _gpt2(r: _Read, batch: int, seq_len: int | None, loss: bool) -> LayerGraph:
    c, p0 = r.config, r.prefix
    h, f = c.n_embd, c.n_inner or 4 * c.n_embd
    S = _positions(r, seq_len, c.n_positions)
    g = LayerGraph(f"hf_{c.model_type}")
    ids = g.input("input_ids", (batch, S), dims="ns")
    pos = g.input("position_ids", (batch, S), dims="ns")
    x = g.add(f"{p0}embed_add", g.embedding(f"{p0}wte", ids, c.vocab_size, h),
              g.embedding(f"{p0}wpe", pos, c.n_positions, h))
    x = g.dropout(f"{p0}drop", x, p=float(c.embd_pdrop))
    for i in range(c.n_layer):
        p = f"{p0}layers.{i}"
        y = g.linear(f"{p}.attn.c_attn", g.layernorm(f"{p}.ln_1", x), 3 * h)
        y = g.attention(f"{p}.attn.core", y, c.n_head, causal=True, dropout=float(c.attn_pdrop))
        y = g.dropout(f"{p}.attn.resid_dropout", g.linear(f"{p}.attn.c_proj", y, h),
                      p=float(c.resid_pdrop))
        x = g.add(f"{p}.attn_residual", y, x)
        y = g.elementwise(f"{p}.mlp.act", g.linear(f"{p}.mlp.c_fc",
                                                   g.layernorm(f"{p}.ln_2", x), f), fn="gelu")
        y = g.dropout(f"{p}.mlp.dropout", g.linear(f"{p}.mlp.c_proj", y, h),
                      p=float(c.resid_pdrop))
        x = g.add(f"{p}.mlp_residual", y, x)
    x = g.layernorm(f"{p0}ln_f", x)
    if r.head:
        tied = f"{p0}wte" if c.tie_word_embeddings else None
        x = g.linear("lm_head", x, c.vocab_size, bias=False, tied_to=tied)
        if loss:
            g.loss("loss", x, shift=1)
    return g


def _bert(r: _Read, batch: int, seq_len: int | None, loss: bool) -> LayerGraph:
    c, p0 = r.config, r.prefix
    h, A = c.hidden_size, c.num_attention_heads
    S = _positions(r, seq_len, c.max_position_embeddings)
    drop, a_drop = float(c.hidden_dropout_prob), float(c.attention_probs_dropout_prob)
    act = "gelu" if "gelu" in str(c.hidden_act) else str(c.hidden_act)
    g = LayerGraph(f"hf_{c.model_type}")
    e = f"{p0}embeddings"
    x = g.add(f"{e}.add",
              g.embedding(f"{e}.word_embeddings", g.input("input_ids", (batch, S), dims="ns"),
                          c.vocab_size, h),
              g.embedding(f"{e}.position_embeddings",
                          g.input("position_ids", (batch, S), dims="ns"),
                          c.max_position_embeddings, h),
              g.embedding(f"{e}.token_type_embeddings",
                          g.input("token_type_ids", (batch, S), dims="ns"),
                          c.type_vocab_size, h))
    x = g.dropout(f"{e}.dropout", g.layernorm(f"{e}.LayerNorm", x), p=drop)
    for i in range(c.num_hidden_layers):
        p = f"{p0}encoder.layers.{i}"
        y = g.linear(f"{p}.attention.self.qkv", x, 3 * h)
        y = g.attention(f"{p}.attention.self.core", y, A, causal=False, dropout=a_drop)
        o = f"{p}.attention.output"
        y = g.dropout(f"{o}.dropout", g.linear(f"{o}.dense", y, h), p=drop)
        x = g.layernorm(f"{o}.LayerNorm", g.add(f"{o}.add", y, x))
        y = g.elementwise(f"{p}.intermediate.intermediate_act_fn",
                          g.linear(f"{p}.intermediate.dense", x, c.intermediate_size), fn=act)
        y = g.dropout(f"{p}.output.dropout", g.linear(f"{p}.output.dense", y, h), p=drop)
        x = g.layernorm(f"{p}.output.LayerNorm", g.add(f"{p}.output.add", y, x))
    if r.head:
        t = "cls.predictions.transform"
        x = g.elementwise(f"{t}.transform_act_fn", g.linear(f"{t}.dense", x, h), fn=act)
        x = g.layernorm(f"{t}.LayerNorm", x)
        tied = f"{e}.word_embeddings" if c.tie_word_embeddings else None
        x = g.linear("cls.predictions.decoder", x, c.vocab_size, tied_to=tied)
        if loss:
            g.loss("loss", x)
    elif getattr(r.module, "pooler", None) is not None:
        x = g.slice(f"{p0}pooler.cls", x, "s", 0, 1)
        g.elementwise(f"{p0}pooler.activation", g.linear(f"{p0}pooler.dense", x, h),
                      fn="tanh")
    return g


def _vit(r: _Read, batch: int, seq_len: int | None, loss: bool) -> LayerGraph:
    c, p0 = r.config, r.prefix
    h, A = c.hidden_size, c.num_attention_heads
    n_patch = (c.image_size // c.patch_size) ** 2
    S = n_patch + 1
    if seq_len is not None and seq_len != S:
        raise InvalidGraphError(f"from_hf: a ViT of {c.image_size}-pixel images and "
                                f"{c.patch_size}-pixel patches has {S} tokens, not "
                                f"seq_len={seq_len}; leave seq_len out")
    drop, a_drop = float(c.hidden_dropout_prob), float(c.attention_probs_dropout_prob)
    g = LayerGraph(f"hf_{c.model_type}")
    e = f"{p0}embeddings"
    img = g.input("pixel_values", (batch, c.num_channels, c.image_size, c.image_size))
    x = g.conv(f"{e}.patch_embeddings.projection", img, h, c.patch_size, stride=c.patch_size)
    x = g.reshape(f"{e}.patches", x, (h, n_patch), dims="ncs")
    x = g.transpose(f"{e}.tokens", x, (0, 2, 1))
    cls = g.embedding(f"{e}.cls_token", g.input("class_id", (batch, 1), dims="ns"), 1, h)
    x = g.concat(f"{e}.with_class", (cls, x), dim="s")
    pos = g.embedding(f"{e}.position_embeddings",
                      g.input("position_ids", (batch, S), dims="ns"), S, h)
    x = g.dropout(f"{e}.dropout", g.add(f"{e}.add", x, pos), p=drop)
    for i in range(c.num_hidden_layers):
        p = f"{p0}layers.{i}"
        y = g.linear(f"{p}.attention.qkv", g.layernorm(f"{p}.layernorm_before", x), 3 * h,
                     bias=bool(c.qkv_bias))
        y = g.attention(f"{p}.attention.core", y, A, causal=False, dropout=a_drop)
        y = g.dropout(f"{p}.attn_dropout", g.linear(f"{p}.attention.o_proj", y, h), p=drop)
        x = g.add(f"{p}.attn_residual", y, x)
        y = g.elementwise(f"{p}.mlp.activation_fn",
                          g.linear(f"{p}.mlp.fc1", g.layernorm(f"{p}.layernorm_after", x),
                                   c.intermediate_size), fn="gelu")
        y = g.dropout(f"{p}.mlp_dropout", g.linear(f"{p}.mlp.fc2", y, h), p=drop)
        x = g.add(f"{p}.mlp_residual", y, x)
    x = g.slice(f"{p0}cls", g.layernorm(f"{p0}layernorm", x), "s", 0, 1)
    if r.head:
        x = g.linear("classifier", x, c.num_labels)
        if loss:
            g.loss("loss", x)
    elif getattr(r.module, "pooler", None) is not None:
        out = getattr(c, "pooler_output_size", None) or h
        g.elementwise(f"{p0}pooler.tanh", g.linear(f"{p0}pooler.dense", x, out), fn="tanh")
    return g


_BUILDERS = {"llama": _llama, "gpt2": _gpt2, "bert": _bert, "vit": _vit}
