"""from_hf: Hugging Face models and configs (tiny ones built here, on the meta device) read
into the graph both planners take, named as the module's layers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
tr = pytest.importorskip("transformers")

import milp_parallel as mp  # noqa: E402
from milp_parallel.errors import InvalidGraphError, InvalidOptionError  # noqa: E402
from milp_parallel.importers.hf import from_hf, hf_modules  # noqa: E402
from milp_parallel.pipeline import block_structure, solve_pipeline  # noqa: E402


def _configs():
    return {
        "llama": tr.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=16),
        "llama_untied_bias": tr.LlamaConfig(vocab_size=64, hidden_size=32,
                                            intermediate_size=40, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=4,
                                            head_dim=4, attention_bias=True, mlp_bias=True,
                                            tie_word_embeddings=True,
                                            max_position_embeddings=16),
        "gpt2": tr.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=16),
        "bert": tr.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=48,
                              max_position_embeddings=16),
        "vit": tr.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=48, image_size=16, patch_size=4),
    }


_BASES = {"llama": "LlamaModel", "gpt2": "GPT2Model", "bert": "BertModel", "vit": "ViTModel"}


def _meta(cls_name, config):
    with torch.device("meta"):
        return getattr(tr, cls_name)(config)


def _modules_of(graph, module, model_type):
    """Every graph layer -> the elements of the module's parameters it stands for (its
    paths are modules, or parameters: ViT's class token and position table)."""
    mods, params = dict(module.named_modules()), dict(module.named_parameters())
    out = {}
    for L in graph.layers:
        n = 0
        for p in hf_modules(L.name, model_type):
            assert p in mods or p in params, \
                f"{L.name} -> {p} is not a module of {type(module).__name__}"
            n += params[p].numel() if p in params else sum(
                q.numel() for q in mods[p].parameters(recurse=False))
        out[L.name] = n
    return out


@pytest.mark.parametrize("name", sorted(_configs()))
def test_config_graph_has_the_module_parameters_and_names(name):
    config = _configs()[name]
    g = from_hf(config, batch_size=2)
    head = mp.importers.hf.HF_FAMILIES[config.model_type][0]
    module = _meta(head, config)
    assert g.param_count() == sum(p.numel() for p in module.parameters())
    per_layer = _modules_of(g, module, config.model_type)
    # every layer holds exactly the parameters of the modules it names (a tied head's
    # module holds the embedding's table besides its own bias)
    for L in g.layers:
        a = L.attrs
        tied = a["in_features"] * a["out_features"] if a.get("tied_to") else 0
        assert per_layer[L.name] == L.params + tied, L.name
    assert block_structure(g).n_blocks == config.num_hidden_layers \
        if hasattr(config, "num_hidden_layers") else config.n_layer


@pytest.mark.parametrize("family", sorted(_BASES))
def test_base_models_read_as_modules(family):
    config = {k.split("_")[0]: v for k, v in _configs().items()}[family]
    module = _meta(_BASES[family], config)
    g = from_hf(module, batch_size=2)
    assert g.param_count() == sum(p.numel() for p in module.parameters())
    assert "loss" not in g.names


def test_llama_names_are_the_module_paths():
    config = _configs()["llama"]
    g = from_hf(config, batch_size=1, seq_len=8)
    assert g.layer("model.layers.1.self_attn.o_proj").params == 32 * 32
    assert g.layer("model.layers.0.self_attn.qkv_proj").output_shape == (1, 8, (4 + 4) * 8)
    assert g.layer("lm_head").params == 64 * 32
    assert g.layer("input_ids").output_shape == (1, 8)


def test_causal_lm_losses_score_the_shifted_positions():
    # Hugging Face's causal LMs score logits 0..S-2 against tokens 1..S-1; BERT all S
    cfg = _configs()
    for name, shift in (("llama", 1), ("gpt2", 1), ("bert", 0)):
        loss = from_hf(cfg[name], batch_size=2, seq_len=8).layer("loss")
        assert loss.attrs.get("shift", 0) == shift, name
        assert loss.flops == 3 * (8 - shift) * 64, name


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_transformer_planner_solves_it(name):
    g = from_hf(_configs()[name], batch_size=4)
    plan = solve_pipeline(g, "selene", global_batch=4, devices=4)
    assert plan.status == "optimal"
    assert plan.pipeline * plan.tensor * plan.data == 4
    block = set(block_structure(g).rest)
    assert block <= set(plan.stages[0].kinds)


@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_layerwise_planner_solves_it(name):
    g = from_hf(_configs()[name], batch_size=4)
    plan = mp.solve(g, "abci", devices=2, solver="dp", cross_check=False)
    assert plan.status == "optimal"
    assert set(g.names) <= {c.name for c in plan.layers}


def test_unsupported_architecture_names_the_supported_ones():
    config = tr.MistralConfig() if hasattr(tr, "MistralConfig") else tr.T5Config()
    with pytest.raises(InvalidGraphError, match="supported families: llama, gpt2, bert, vit"):
        from_hf(config)


def test_unsupported_class_of_a_family_is_named():
    config = _configs()["gpt2"]
    module = _meta("GPT2ForSequenceClassification", config)
    with pytest.raises(InvalidGraphError, match="GPT2ForSequenceClassification.*GPT2LMHeadModel"):
        from_hf(module)


def test_bad_input_is_typed():
    with pytest.raises(InvalidOptionError, match="PreTrainedModel or PretrainedConfig"):
        from_hf("llama")
    with pytest.raises(InvalidOptionError, match="batch_size"):
        from_hf(_configs()["gpt2"], batch_size=0)
    with pytest.raises(InvalidGraphError, match="seq_len=32 is longer than the model's 16"):
        from_hf(_configs()["gpt2"], seq_len=32)
    with pytest.raises(InvalidGraphError, match="17 tokens"):
        from_hf(_configs()["vit"], seq_len=16)


def test_an_untied_head_is_read_and_an_unmodelled_option_refused():
    config = _configs()["gpt2"]
    config.tie_word_embeddings = False      # the module then has its own head
    module = _meta("GPT2LMHeadModel", config)
    assert from_hf(module).param_count() == sum(p.numel() for p in module.parameters())
    config = _configs()["gpt2"]
    config.add_cross_attention = True       # cross-attention weights the graph lacks
    with pytest.raises(InvalidGraphError, match="parameters but GPT2LMHeadModel has"):
        from_hf(config)


def test_top_level_name_is_lazy():
    assert mp.from_hf is from_hf
