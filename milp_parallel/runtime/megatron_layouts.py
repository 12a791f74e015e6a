"""The kinds the transformer runtime runs (Megatron-LM's layouts), by graph layer name:
what :mod:`.transformer` checks a plan against.

May import: nothing of the package.
"""

from __future__ import annotations

__all__ = ["expected_kinds"]


def expected_kinds(model_type: str, t: int, *, sequence_parallel: bool, vocab_loss: bool = True
                   ) -> dict[str, str]:
    """The kinds the runtime runs, by graph layer name (block layers block-relative).

    Parameters
    ----------
    model_type : {"llama", "gpt2"}
    t : int
        Tensor-parallel size (``1``: ``N`` everywhere).
    sequence_parallel : bool
        Norms, dropouts and residual adds sequence-split (``S``) rather than replicated.
    vocab_loss : bool
        Vocabulary-parallel cross-entropy (else the logits are gathered, ``R``).

    Examples
    --------
    >>> expected_kinds("llama", 2, sequence_parallel=False)["self_attn.qkv_proj"]
    'column'
    """
    rep = "S" if sequence_parallel else "R"
    col = "column_sp" if sequence_parallel else "column"
    # a block's input and its residual stream are shared where they are laid out; the gate
    # and up projections' input is gathered once for both (sequence parallelism), or shared
    # as column linears read it, their input gradients summed as partial sums
    shared = f"{rep}/{rep}"
    mlp_in, mlp_col = ("S>R/P", "column") if sequence_parallel else ("R/P", col)
    if model_type == "llama":
        block = {"input_fanout": shared, "input_layernorm": rep, "self_attn.qkv_proj": col,
                 "self_attn.core": "head", "self_attn.o_proj": "row", "attn_residual": rep,
                 "attn_residual.fanout": shared, "post_attention_layernorm": rep,
                 "post_attention_layernorm.fanout": mlp_in,
                 "mlp.gate_proj": mlp_col, "mlp.act_fn": "C", "mlp.up_proj": mlp_col,
                 "mlp.mul": "C",
                 "mlp.down_proj": "row", "mlp_residual": rep}
        pre = {"input_ids": "R", "model.embed_tokens": "vocab"}
        post = {"model.norm": rep, "lm_head": col}
    else:
        block = {"input_fanout": shared, "ln_1": rep, "attn.c_attn": col, "attn.core": "head",
                 "attn.c_proj": "row", "attn.resid_dropout": rep, "attn_residual": rep,
                 "attn_residual.fanout": shared, "ln_2": rep,
                 "mlp.c_fc": col, "mlp.act": "C", "mlp.c_proj": "row", "mlp.dropout": rep,
                 "mlp_residual": rep}
        pre = {"input_ids": "R", "position_ids": "R", "transformer.wte": "vocab",
               "transformer.wpe": "vocab", "transformer.embed_add": rep,
               "transformer.drop": rep}
        post = {"transformer.ln_f": rep, "lm_head": col}
    out = {**pre, **block, **post, "loss": "vocab" if vocab_loss else "R"}
    if t == 1:
        return {k: "N" for k in out}
    return out
