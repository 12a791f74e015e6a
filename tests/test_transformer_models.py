"""The transformer zoo of issue 16: GPT (Megatron-LM's Table 1 shapes), Llama-2/3, ViT.

Exact counts against published formulas and numbers, and against torch modules instantiated on
the meta device where the architecture exists in torch (GPT's layers are
``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")``; ViT is torchvision's, whose
numbers are in ``tests/data/torchvision_reference.json``). tests/test_models.py also
runs every zoo model layer by layer in torch (shapes, parameters, FlopCounterMode).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from milp_parallel import models
from milp_parallel.errors import InvalidGraphError
from milp_parallel.graph import LayerGraph
from milp_parallel.models.gpt import (
    GPT_SIZES,
    gpt,
    gpt_named,
    megatron_flops,
    megatron_flops_from_graph,
    megatron_params,
)
from milp_parallel.models.llama import LLAMA_SHAPES, llama, llama_params
from milp_parallel.models.vit import VIT_SHAPES

try:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
except ImportError:  # pragma: no cover
    torch = None

#: Published totals (the models' cards on their distribution sites, "params" of the
#: safetensors index; also the sums of the released configs' tensor shapes).
LLAMA_PUBLISHED = {"llama2_7b": 6_738_415_616, "llama2_70b": 68_976_648_192,
                   "llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496}


# ------------------------------------------------------------------ GPT
@pytest.mark.parametrize("size", sorted(GPT_SIZES))
def test_gpt_counts_equal_megatron_formulas(size):
    heads, hidden, layers = GPT_SIZES[size]
    g = gpt_named(size, batch_size=1)
    # equation 2 leaves out the final layer-norm (2h)
    assert g.param_count() == megatron_params(layers, hidden) + 2 * hidden
    assert round(megatron_params(layers, hidden) / 1e9, 1) == float(size.rstrip("b"))
    # equation 3 from the layers: 4 x layer products + 3 x logits, at batch 512
    assert megatron_flops_from_graph(g, 512) == pytest.approx(
        megatron_flops(512, layers, hidden), rel=1e-12)


def test_gpt_layer_shapes_and_tying():
    g = gpt(2, layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    assert g.layer("layers.1.qkv").output_shape == (2, 32, 192)
    assert g.layer("layers.1.attn").output_shape == (2, 32, 64)
    assert g.layer("layers.0.attn").attrs["causal"] is True
    assert g.layer("logits").params == 0 and g.layer("logits").attrs["tied_to"] == "embed.word"
    assert g.output_names == ("loss",)
    with pytest.raises(InvalidGraphError, match="heads=5"):
        gpt(1, layers=1, hidden=64, heads=5)
    with pytest.raises(InvalidGraphError, match="unknown GPT size"):
        gpt_named("2b")


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_gpt_equals_torch_transformer_layers_on_meta():
    """GPT = two embeddings, pre-LN nn.TransformerEncoderLayer blocks, a final LayerNorm and
    logits on the word embedding's weight: parameters and FlopCounterMode's count."""
    V, S, h, a, layers = 96, 16, 32, 4, 3
    with torch.device("meta"):
        word, pos = torch.nn.Embedding(V, h), torch.nn.Embedding(S, h)
        blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(h, a, 4 * h, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=True)
            for _ in range(layers))
        final = torch.nn.LayerNorm(h)
        model = torch.nn.ModuleList([word, pos, blocks, final]).train()
    n_torch = sum(p.numel() for p in model.parameters())
    ids = torch.zeros(1, S, dtype=torch.long, device="meta")
    mask = torch.nn.Transformer.generate_square_subsequent_mask(S, device="meta")
    with FlopCounterMode(display=False) as fc:
        x = word(ids) + pos(ids)
        for b in blocks:
            x = b(x, src_mask=mask, is_causal=True)
        torch.nn.functional.linear(final(x), word.weight)
    g = gpt(1, layers=layers, hidden=h, heads=a, vocab=V, seq_len=S)
    assert g.param_count() == n_torch
    assert g.matmul_flops() == fc.get_total_flops()


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_gpt_1_7b_layer_parameters_equal_torch_on_meta():
    heads, hidden, _ = GPT_SIZES["1.7b"]
    with torch.device("meta"):
        block = torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, norm_first=True,
                                                 activation="gelu")
    g = gpt_named("1.7b", batch_size=1)
    per_layer = sum(L.params for L in g.layers if L.name.startswith("layers.0."))
    assert per_layer == sum(p.numel() for p in block.parameters()) == 12 * hidden ** 2 + 13 * hidden


# ------------------------------------------------------------------ Llama
@pytest.mark.parametrize("name", sorted(LLAMA_PUBLISHED))
def test_llama_parameters_equal_published(name):
    g = models.get(name, batch_size=1)
    assert g.param_count() == LLAMA_PUBLISHED[name] == llama_params(**LLAMA_SHAPES[name])


def test_llama_grouped_query_attention_shapes():
    g = models.get("llama2_70b", batch_size=1, seq_len=128)
    assert g.layer("layers.0.qkv").output_shape == (1, 128, (64 + 2 * 8) * 128)
    att = g.layer("layers.0.attn")
    assert (att.attrs["heads"], att.attrs["kv_heads"], att.attrs["head_dim"]) == (64, 8, 128)
    assert att.output_shape == (1, 128, 8192)
    assert g.layer("layers.0.attn_norm").params == 8192
    assert g.layer("lm_head").params == 32000 * 8192
    # forward FLOPs per token of the products: 2 x (non-embedding parameters) + attention
    S = 128
    dense = sum(L.params for L in g.layers if L.op == "linear")
    attn = 80 * 4 * S * S * 8192
    assert g.matmul_flops() == 2 * S * dense + attn
    with pytest.raises(InvalidGraphError, match="kv_heads"):
        llama(1, layers=1, hidden=64, heads=4, kv_heads=3, ffn=32, vocab=10, seq_len=8)


# ------------------------------------------------------------------ ViT
@pytest.fixture(scope="module")
def reference() -> dict:
    text = (Path(__file__).parent / "data" / "torchvision_reference.json").read_text()
    return json.loads(text)["models"]


@pytest.mark.parametrize("name", sorted(VIT_SHAPES))
def test_vit_equals_torchvision(reference, name):
    g = models.get(name, batch_size=1)
    ref = reference[name]
    assert g.param_count() == ref["params"]
    assert g.matmul_flops() == ref["flops"]
    assert sum(L.flops for L in g.layers if L.op == "conv") == ref["by_op"]["aten.convolution"]
    assert sum(L.flops for L in g.layers if L.op == "attention") == ref["by_op"]["aten.bmm"]
    assert g.layer("heads").output_shape == (1, 1, 1000)


# ------------------------------------------------------------------ the new ops
def test_attention_region_takes_whole_key_value_groups():
    g = LayerGraph()
    x = g.input("x", (2, 8, 16), dims="nsc")
    q = g.linear("qkv", x, (8 + 2 * 2) * 4)          # 8 heads, 2 groups, head size 4
    g.attention("att", q, 8, kv_heads=2)
    att = g.layer("att")
    assert att.parallel_dims == ("n", "c")
    # heads 1..2 live in group 0: its 24 packed columns, every key position
    lo, hi = att.input_region(0, np.array([[0, 2, 4]]), np.array([[1, 5, 12]]))
    assert lo.tolist() == [[0, 0, 0]] and hi.tolist() == [[1, 8, 24]]
    # heads 3..4 straddle both groups
    lo, hi = att.input_region(0, np.array([[0, 0, 12]]), np.array([[2, 8, 20]]))
    assert lo.tolist() == [[0, 0, 0]] and hi.tolist() == [[2, 8, 48]]
    with pytest.raises(InvalidGraphError, match="head_dim"):
        g.attention("bad", q, 6)
    with pytest.raises(InvalidGraphError, match="kv_heads"):
        g.attention("bad2", q, 8, kv_heads=3)


def test_slice_rmsnorm_and_tied_linear():
    g = LayerGraph()
    ids = g.input("ids", (2, 5), dims="ns")
    e = g.embedding("emb", ids, 11, 6)
    s = g.slice("first", e, "s", 1, 3)
    assert g.layer(s).output_shape == (2, 2, 6)
    lo, hi = g.layer(s).input_region(0, np.array([0, 1, 0]), np.array([2, 2, 6]))
    assert lo.tolist() == [0, 2, 0] and hi.tolist() == [2, 3, 6]
    assert g.layer(g.rmsnorm("rn", e)).params == 6
    g.linear("head", "rn", 11, bias=False, tied_to="emb")
    assert g.layer("head").params == 0
    assert LayerGraph.from_dict(g.to_dict()) == g
    with pytest.raises(InvalidGraphError, match="tied_to"):
        g.linear("bad", "rn", 12, tied_to="emb")
    with pytest.raises(InvalidGraphError, match=r"\[4, 9\)"):
        g.slice("bad2", e, "s", 4, 9)
