"""parallelize_transformer: transformer plans run on tiny Hugging Face Llama and GPT-2
modules in real gloo CPU processes (world sizes 2 and 4, float32), gradients and loss
against the single-process step.

The numerics tests spawn with this file's own ``_run``; the ``test_verify_plan_*`` audits
go through ``verify_plan`` (runtime/verify.py) and check every collective row and each
rank's memory against the plan. Memory at the Megatron sizes, under fake tensors, is
benchmarks/memory_audit.py's.
"""

from __future__ import annotations

import copy
import os
import tempfile
import traceback

import pytest

torch = pytest.importorskip("torch")
tr = pytest.importorskip("transformers")
dist = torch.distributed
if not dist.is_available():  # pragma: no cover
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from milp_parallel.errors import InvalidOptionError, UnsupportedProblemError  # noqa: E402
from milp_parallel.importers.hf import from_hf  # noqa: E402
from milp_parallel.pipeline import evaluate_configuration  # noqa: E402

SEQ = 16


def _config(family: str, *, layers: int = 2, tied: bool = True):
    if family == "llama":
        return tr.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                              num_hidden_layers=layers, num_attention_heads=4,
                              num_key_value_heads=2, max_position_embeddings=SEQ)
    return tr.GPT2Config(vocab_size=64, n_embd=32, n_layer=layers, n_head=4, n_positions=SEQ,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         tie_word_embeddings=tied)


def _model(config):
    torch.manual_seed(0)
    config._attn_implementation = "sdpa"
    cls = tr.LlamaForCausalLM if config.model_type == "llama" else tr.GPT2LMHeadModel
    return cls(config).float()


def _plan(config, world: int, spec: dict):
    g = from_hf(config, batch_size=spec["batch"], seq_len=SEQ)
    return evaluate_configuration(
        g, "selene", devices=world, global_batch=spec["batch"], tensor=spec.get("t", 1),
        pipeline=spec.get("p", 1), micro_batch_size=spec.get("b", 1),
        chunks=spec.get("v", 1), schedule=spec.get("schedule", "1f1b"),
        recompute=spec.get("recompute", "none"), zero=spec.get("zero", 1),
        kinds=spec.get("kinds", "megatron"), memory_limit=float("inf"))


def _worker(rank: int, world: int, path: str, spec: dict, queue) -> None:
    try:
        from torch.distributed.tensor import DTensor

        from milp_parallel.runtime.transformer import causal_lm_loss, parallelize_transformer
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank,
                                world_size=world)
        config = _config(spec["family"], layers=spec.get("layers", 2),
                         tied=spec.get("tied", True))
        model = _model(config)
        ref = copy.deepcopy(model)
        plan = _plan(config, world, spec)
        torch.manual_seed(1)
        ids = torch.randint(0, config.vocab_size, (spec["batch"], SEQ))
        pm = parallelize_transformer(model, plan, seq_len=SEQ)
        loss = pm(ids)
        ref_loss = causal_lm_loss(ref(ids).logits, ids)
        ref_loss.backward()
        want = {n: p.grad for n, p in ref.named_parameters()}
        got = pm.full_gradients()
        errs = {n: float((g - want[n]).abs().max() / want[n].abs().max()) for n, g in got.items()}
        if pm.is_last_stage:
            mean = loss.clone()
            dist.all_reduce(mean, group=pm._mesh["dp"].get_group())
            errs["loss"] = abs(float(mean) / plan.data - float(ref_loss)) / float(ref_loss)
        sharded = any(isinstance(p, DTensor) for p in pm.parameters())
        queue.put((rank, errs, sharded, None))
        dist.destroy_process_group()
    except Exception:  # the parent reports it
        queue.put((rank, {}, False, traceback.format_exc()))


def _run(world: int, **spec) -> list:
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)
    procs = [ctx.Process(target=_worker, args=(r, world, path, spec, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    out = sorted((queue.get(timeout=600) for _ in procs), key=lambda x: x[0])
    for p in procs:
        p.join()
    for rank, _, _, err in out:
        assert err is None, f"rank {rank}:\n{err}"
    return out


def _check(out, n_params: int, *, sharded: bool = True) -> None:
    names = set()
    for _, errs, is_sharded, _ in out:
        assert max(errs.values()) <= 1e-4, errs
        assert is_sharded == sharded
        names |= set(errs)
    assert "loss" in names
    assert len(names - {"loss"}) == n_params          # every parameter's gradient, somewhere


LLAMA_PARAMS, GPT2_PARAMS, GPT2_UNTIED = 21, 28, 29


@pytest.mark.slow
def test_llama_tensor_parallel_vocab_loss_selective_recompute_world2():
    _check(_run(2, family="llama", batch=2, t=2, b=2, recompute="selective"), LLAMA_PARAMS)


@pytest.mark.slow
def test_llama_sequence_parallel_zero3_full_recompute_world4():
    _check(_run(4, family="llama", batch=4, t=2, b=1, zero=3, recompute="full",
                kinds="megatron_sp"), LLAMA_PARAMS)


@pytest.mark.slow
def test_llama_tensor_parallel_distributed_checkpoints_world2():
    # full recomputation with replicated norms: each rank keeps its sequence slice of a
    # block's input and all-gathers it for the recompute (Megatron's distributed checkpoints)
    _check(_run(2, family="llama", batch=2, t=2, b=2, recompute="full"), LLAMA_PARAMS)


@pytest.mark.slow
def test_gpt2_tensor_parallel_zero3_full_recompute_world4():
    _check(_run(4, family="gpt2", batch=4, t=2, b=1, zero=3, recompute="full"), GPT2_PARAMS)


@pytest.mark.slow
def test_gpt2_sequence_parallel_world2():
    _check(_run(2, family="gpt2", batch=2, t=2, b=2, kinds="megatron_sp"), GPT2_PARAMS)


@pytest.mark.slow
def test_gpt2_tensor_parallel_zero2_world4():
    _check(_run(4, family="gpt2", batch=4, t=2, b=1, zero=2), GPT2_PARAMS)


@pytest.mark.slow
def test_gpt2_pipeline_1f1b_zero1_world4():
    _check(_run(4, family="gpt2", tied=False, batch=4, p=2, b=1, zero=1), GPT2_UNTIED,
           sharded=True)


@pytest.mark.slow
def test_llama_pipeline_gpipe_with_sequence_parallel_world4():
    _check(_run(4, family="llama", batch=2, p=2, t=2, b=1, schedule="gpipe",
                kinds="megatron_sp"), LLAMA_PARAMS)


@pytest.mark.slow
def test_llama_interleaved_pipeline_world2():
    _check(_run(2, family="llama", layers=4, batch=4, p=2, b=1, v=2), 39, sharded=False)


@pytest.mark.slow
def test_llama_data_parallel_zero0_world2():
    _check(_run(2, family="llama", batch=2, b=1, zero=0), LLAMA_PARAMS, sharded=False)


# ---------------------------------------------------------------- plans that do not fit
def _meta_model(config):
    with torch.device("meta"):
        return tr.LlamaForCausalLM(config) if config.model_type == "llama" \
            else tr.GPT2LMHeadModel(config)


def test_a_plan_for_another_model_is_refused():
    from milp_parallel.runtime.transformer import parallelize_transformer
    plan = _plan(_config("llama", layers=4), 2, dict(batch=2, t=2, b=2))
    with pytest.raises(InvalidOptionError, match="module has 2 blocks"):
        parallelize_transformer(_meta_model(_config("llama")), plan)


def test_a_kind_the_runtime_does_not_run_is_named():
    from milp_parallel.pipeline import megatron_kinds
    from milp_parallel.runtime.transformer import parallelize_transformer
    config = _config("llama")
    g = from_hf(config, batch_size=2, seq_len=SEQ)
    kinds = megatron_kinds(g, 2)
    kinds["model.layers.0.mlp.down_proj"] = kinds["model.layers.1.mlp.down_proj"] = "seq"
    kinds["model.layers.0.mlp.mul"] = kinds["model.layers.1.mlp.mul"] = "S"
    kinds["model.layers.0.mlp.up_proj"] = kinds["model.layers.1.mlp.up_proj"] = "seq"
    kinds["model.layers.0.mlp.gate_proj"] = kinds["model.layers.1.mlp.gate_proj"] = "seq"
    kinds["model.layers.0.mlp.act_fn"] = kinds["model.layers.1.mlp.act_fn"] = "S"
    plan = evaluate_configuration(g, "selene", devices=2, global_batch=2, tensor=2,
                                  pipeline=1, micro_batch_size=2, kinds=kinds,
                                  memory_limit=float("inf"))
    with pytest.raises(UnsupportedProblemError, match="'mlp.gate_proj' has kind 'seq'"):
        parallelize_transformer(_meta_model(config), plan)


def test_an_unsupported_module_is_named():
    from milp_parallel.runtime.transformer import parallelize_transformer
    plan = _plan(_config("llama"), 2, dict(batch=2, t=2, b=2))
    with torch.device("meta"):
        other = tr.BertModel(tr.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=48))
    with pytest.raises(UnsupportedProblemError, match="LlamaForCausalLM, GPT2LMHeadModel"):
        parallelize_transformer(other, plan)


def test_tied_gpt2_over_stages_is_refused_without_a_process_group():
    from milp_parallel.runtime.transformer import parallelize_transformer
    config = _config("gpt2")
    plan = _plan(config, 2, dict(batch=2, p=2, b=1))
    with pytest.raises(UnsupportedProblemError, match="tie_word_embeddings=False"):
        parallelize_transformer(_meta_model(config), plan)


#: float32 training, as the audited step runs (CPU dropout masks in float32)
FP32 = dict(param_bytes=4, grad_bytes=4, master_bytes=0, optimizer_bytes=8,
            activation_bytes=4, mask_bytes=4)


def _audited(family: str, world: int, spec: dict, *, tied: bool = True,
             activations: str | None = None):
    """The audit of ``spec``'s plan; ``activations``: another memory meter than the
    runtime's (:class:`~milp_parallel.runtime.verify.RuntimeHooks`)."""
    import dataclasses

    from milp_parallel.pipeline import PipelineOptions
    from milp_parallel.pipeline.training_memory import MixedPrecision
    from milp_parallel.runtime.transformer import runtime_hooks
    from milp_parallel.runtime.verify import audit_step, verify_plan
    config = _config(family, tied=tied)
    g = from_hf(config, batch_size=spec["batch"], seq_len=SEQ)
    plan = evaluate_configuration(
        g, "selene", devices=world, global_batch=spec["batch"], tensor=spec.get("t", 1),
        pipeline=spec.get("p", 1), micro_batch_size=spec.get("b", 1),
        recompute=spec.get("recompute", "none"), zero=spec.get("zero", 1),
        kinds=spec.get("kinds", "megatron"), memory_limit=float("inf"),
        options=PipelineOptions(precision=MixedPrecision(**FP32)))
    ids = torch.randint(0, 64, (spec["batch"], SEQ), generator=torch.Generator().manual_seed(1))
    if activations is None:
        audit = verify_plan(plan, _model(config), ids, world_size=world)
    else:
        hooks = dataclasses.replace(runtime_hooks(), activations=activations)
        audit = audit_step(hooks, plan, _model(config), ids, world_size=world)
    return audit, {(r.layer, r.kind): r for r in audit.collectives}


def _within(rows, keys, tol=0.05):
    for k in keys:
        r = rows[k]
        assert r.predicted_bytes > 0 and r.rel_error <= tol, (k, r)


def test_verify_plan_audits_a_tensor_parallel_llama():
    audit, rows = _audited("llama", 2, dict(batch=4, t=2, b=2))
    assert audit.plan_kind == "pipeline" and audit.max_rel_error <= 1e-4
    # a shared input is re-laid out once and its readers' gradients summed once (the
    # embedding's partial sums, the gate and up projections' input gradient)
    keys = [(f"model.layers.{i}.{n}", "transfer") for i in (0, 1)
            for n in ("self_attn.qkv_proj", "post_attention_layernorm.fanout", "attn_residual",
                      "mlp_residual")]
    _within(rows, keys + [("model.layers.0.input_fanout", "transfer"),
                          ("lm_head", "transfer")])
    assert all(r.rel_error <= 0.05 for r in audit.collectives), audit.collectives
    # the vocabulary-parallel loss scores the S - 1 next tokens (three sums per token)
    assert rows[("loss", "transfer")].predicted_bytes == rows[("loss", "transfer")].counted_bytes
    assert not [k for k in rows if k[0] == "(unlabelled)"]
    assert audit.max_memory_error <= 0.10, audit.memory


def test_verify_plan_audits_sequence_parallel_saves_and_regathers():
    # SP column linears keep their input's slice and gather it again in backward (once for
    # q, k, v and once for gate, up: the MLP input's fanout gathers for both), as priced:
    # every row of collectives and the memory agree
    audit, rows = _audited("llama", 2, dict(batch=4, t=2, b=1, kinds="megatron_sp"))
    assert audit.max_rel_error <= 1e-4
    assert ("model.layers.0.post_attention_layernorm.fanout", "transfer") in rows
    assert ("stage 0", "sync") in rows      # the SP norms' partial gradients, summed once
    _within(rows, list(rows))
    for row in audit.memory:    # sharded weights keep sharded gradients
        assert row.measured["gradients"] == row.predicted["gradients"]
    # the meter sees every saved tensor through the regather's hooks (the slice in place of
    # the gathered input), and the model prices them
    assert audit.max_memory_error <= 0.10, audit.memory


def test_verify_plan_audits_pipeline_sequence_parallel_and_full_recompute():
    # metered over the whole step: the recompute's working set is no saved tensor
    audit, rows = _audited("llama", 4, dict(batch=4, t=2, p=2, b=1, kinds="megatron_sp",
                                            recompute="full"), activations="allocated")
    assert audit.max_rel_error <= 1e-4
    # a recomputed block runs its last reduce-scatter again, as priced (no early stop), and
    # its SP gathers are read by the recomputed forward (two gathers, not three): every row
    assert {("stage 0", "p2p"), ("stage 1", "p2p"),
            ("model.layers.1.post_attention_layernorm.fanout", "transfer")} <= set(rows)
    _within(rows, list(rows))
    assert not [k for k in rows if k[0] == "(unlabelled)"]
    # the recomputed block's gathered inputs, PipelineStage's receive buffers (one per
    # micro-batch and direction) and the head's backward working set, as priced
    assert audit.max_memory_error <= 0.10, audit.memory


def test_verify_plan_audits_a_replicated_pipeline_with_distributed_checkpoints():
    # without SP a replicated stream travels between stages as each rank's sequence slice
    # (cut on sending, all-gathered on receiving: Megatron-LM's scatter-gather), and a fully
    # recomputed block keeps its input's slice and gathers it once for the recompute, as
    # priced: every row; before, the whole stream travelled (2x the priced messages) and
    # the recompute gathered three times
    audit, rows = _audited("llama", 4, dict(batch=4, t=2, p=2, b=1, recompute="full"),
                           activations="allocated")
    assert audit.max_rel_error <= 1e-4
    assert {("stage 0", "p2p relayout"), ("stage 1", "p2p relayout"),
            ("stage 0", "recompute")} <= set(rows)
    _within(rows, list(rows))
    # PipelineStage's receive buffers of slices, the boundary slices, the recompute
    assert audit.max_memory_error <= 0.10, audit.memory


def test_verify_plan_audits_a_sequence_parallel_gpt2_pipeline():
    # GPT-2's tanh gelu runs as one op (gelu_new's seven keep their intermediates), its SP
    # blocks' collectives and the pipeline's slices as priced: every row
    audit, rows = _audited("gpt2", 4, dict(batch=4, t=2, p=2, b=1, kinds="megatron_sp",
                                           recompute="selective"), tied=False,
                           activations="allocated")
    assert audit.max_rel_error <= 1e-4
    assert {("stage 0", "p2p"), ("stage 1", "p2p"), ("lm_head", "transfer")} <= set(rows)
    _within(rows, list(rows))
    assert audit.max_memory_error <= 0.10, audit.memory


def test_verify_plan_audits_gpt2_zero3_with_selective_recompute():
    # metered over the whole step: FSDP's gathered weights are no saved tensors
    audit, rows = _audited("gpt2", 4, dict(batch=4, t=2, b=1, zero=3,
                                           recompute="selective"), tied=False,
                           activations="allocated")
    assert audit.max_rel_error <= 1e-4
    keys = [(f"transformer.layers.{i}.{n}", "transfer") for i in (0, 1)
            for n in ("attn.c_attn", "attn.resid_dropout", "mlp.c_fc", "mlp.dropout")]
    assert set(keys) | {("stage 0", "sync"), ("transformer.embed_add", "transfer"),
                        ("lm_head", "transfer")} <= set(rows)
    _within(rows, list(rows))
    # ZeRO-3 holds the gathered weights of the unit running and the one prefetched, and the
    # layers outside the blocks for the step (training_memory.zero3_gathered_bytes)
    assert audit.max_memory_error <= 0.10, audit.memory
