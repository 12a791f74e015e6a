"""Tests of the transformer planner (issue 16): tensor-parallel kinds, mixed-precision / ZeRO /
recomputation memory against hand calculations, the dominance program against brute force,
the stage MILP against enumeration of every stage cut, and the end-to-end search."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from milp_parallel import clusters, models
from milp_parallel.errors import InfeasibleError, InvalidGraphError, InvalidOptionError
from milp_parallel.models.gpt import gpt
from milp_parallel.pipeline import (
    PipelineOptions,
    _assignment_criteria,
    _Combo,
    _ComboProblem,
    _MeshPricing,
    _StageTables,
    block_structure,
    evaluate_configuration,
    in_flight_micro_batches,
    megatron_kinds,
    solve_pipeline,
)
from milp_parallel.pipeline.step_costs import StepPricer
from milp_parallel.pipeline.tensor_parallel import layer_kinds, relayout
from milp_parallel.pipeline.training_memory import MixedPrecision, saved_activation_bytes

TINY = dict(layers=4, hidden=64, heads=4, vocab=128, seq_len=32)


def tiny(layers=4):
    return gpt(1, **{**TINY, "layers": layers})


# ------------------------------------------------------------------ kinds and re-layouts
def test_relayout_is_megatrons_f_and_g():
    assert relayout("P", "R") == "allreduce"         # row-parallel output (g forward)
    assert relayout("P", "S") == "reducescatter"     # sequence parallelism
    assert relayout("S", "R") == "allgather"
    assert relayout("R", "S") is None and relayout("R", "C") is None
    assert relayout("C", "S") == "alltoall"
    with pytest.raises(InvalidOptionError):
        relayout("R", "P")


def test_column_linear_returns_partial_input_gradients():
    g = tiny()
    k = {x.name: x for x in layer_kinds(g.layer("layers.0.qkv"), 2, micro_batch=2)}
    assert (k["column"].ins, k["column"].in_grads, k["column"].out) == (("R",), ("P",), "C")
    # backward of the replicated input: partial sums -> all-reduce (Megatron's f)
    assert relayout(k["column"].in_grads[0], "R") == "allreduce"
    row = {x.name: x for x in layer_kinds(g.layer("layers.0.proj"), 2, micro_batch=2)}["row"]
    assert (row.ins, row.out, row.out_grad) == (("C",), "P", "R")
    # t = 1: one kind; N needs the micro-batch divisible by t
    assert [x.name for x in layer_kinds(g.layer("layers.0.qkv"), 1, micro_batch=1)] == ["N"]
    assert "sample" not in [x.name for x in layer_kinds(g.layer("layers.0.qkv"), 2,
                                                        micro_batch=1)]


def test_megatron_kinds_of_a_gpt_layer():
    g = tiny()
    k = megatron_kinds(g, 8)
    assert [k[f"layers.1.{n}"] for n in ("ln1", "qkv", "attn", "proj", "drop1", "add1",
                                         "fc1", "gelu", "fc2", "add2")] == \
        ["R", "column", "head", "row", "R", "R", "column", "C", "row", "R"]
    assert (k["embed.word"], k["logits"], k["loss"]) == ("vocab", "column", "vocab")
    sp = megatron_kinds(g, 8, sequence_parallel=True)
    assert (sp["layers.0.ln1"], sp["layers.0.qkv"], sp["layers.0.add2"]) == \
        ("S", "column_sp", "S")


# ------------------------------------------------------------------ memory by hand
def test_state_bytes_per_parameter_zero_stages():
    pr = MixedPrecision()
    assert pr.state_bytes == 16                       # ZeRO paper: 2 + 2 + 12
    assert pr.state_bytes_per_param(0, 8) == 16
    assert pr.state_bytes_per_param(1, 8) == 2 + 2 + 12 / 8
    assert pr.state_bytes_per_param(2, 8) == 2 + 14 / 8
    assert pr.state_bytes_per_param(3, 8) == 16 / 8
    with pytest.raises(InvalidOptionError):
        pr.state_bytes_per_param(4, 8)


def _block_activation(g, kinds, t, b):
    total = 0.0
    for n in block_structure(g).blocks[0]:
        L = g.layer(n)
        kind = next(k for k in layer_kinds(L, t, micro_batch=b) if k.name == kinds[n])
        kept, scores = saved_activation_bytes(L, kind, t, b)
        total += kept + scores
    return total


@pytest.mark.parametrize("t", [1, 2, 4])
def test_gpt_layer_activations_equal_korthikanti(t):
    """s b h (34 + 5 a s / h) without tensor parallelism; s b h (10 + 24/t + 5 a s / (h t))
    with Megatron's; s b h (34 + 5 a s / h) / t with sequence parallelism (Korthikanti et al.,
    MLSys 2023, equations 1, 2 and 4)."""
    s, h, a, b = 32, 64, 4, 4
    g = tiny()
    if t == 1:
        got = _block_activation(g, megatron_kinds(g, 1), 1, b)
        assert got == s * b * h * (34 + 5 * a * s / h)
        return
    got = _block_activation(g, megatron_kinds(g, t), t, b)
    assert got == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    sp = _block_activation(g, megatron_kinds(g, t, sequence_parallel=True), t, b)
    assert sp == pytest.approx(s * b * h * (34 + 5 * a * s / h) / t, rel=1e-12)


def test_recomputation_memory_and_time_by_hand():
    """Full recomputation keeps the layer input split over the group (2 s b h / t bytes per
    micro-batch) and holds one layer's activations; selective drops the 5 a s^2 b scores;
    every mode holds the 2 a s^2 b / t bytes of the probabilities' gradient while the
    attention core's backward runs."""
    g = tiny(2)
    topo = clusters.get("selene")
    pr = _MeshPricing(g, StepPricer(topo), MixedPrecision(), 8, 2, 4, False)
    kinds = megatron_kinds(g, 2)
    rest = {r: kinds[n] for r, n in zip(block_structure(g).rest, block_structure(g).blocks[0])}
    s, h, a, b, t = 32, 64, 4, 4, 2
    full_act = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    scores = 5 * a * s * s * b / t
    grad = 2 * a * s * s * b / t      # the probabilities' gradient, during the core's backward
    out = {}
    for mode in ("none", "selective", "full"):
        tables = _StageTables(g, block_structure(g), pr, (0,), (mode,), False,
                              fixed=kinds)
        out[mode] = tables.block.crit[0]
        assert tables.block.assign.shape == (1, len(rest))
    assert out["none"][3] == pytest.approx(full_act)
    assert out["none"][4] == pytest.approx(grad)
    assert out["selective"][3] == pytest.approx(full_act - scores)
    assert out["selective"][4] == pytest.approx(scores + grad)
    assert out["full"][3] == pytest.approx(2 * s * b * h / t)
    assert out["full"][4] == pytest.approx(full_act + grad)
    # time: full re-runs the forward (compute and its all-reduces), selective the core only
    assert out["none"][0] < out["selective"][0] < out["full"][0]
    # model state is the same whatever is recomputed
    assert out["none"][2] == out["selective"][2] == out["full"][2]


def test_in_flight_micro_batches():
    assert in_flight_micro_batches("1f1b", 4, 2) == (2, 2, 2, 1)
    assert in_flight_micro_batches("gpipe", 3, 5) == (5, 5, 5)
    # Megatron-LM: warm-up (p - s - 1) * 2 + (v - 1) * p chunks, plus one
    assert in_flight_micro_batches("1f1b", 8, 48, 2) == tuple(2 * (7 - s) + 8 + 1
                                                              for s in range(8))
    with pytest.raises(InvalidOptionError):
        in_flight_micro_batches("gpipe", 2, 4, 2)


# ------------------------------------------------------------------ dominance vs brute force
def _front(points: np.ndarray) -> np.ndarray:
    """The non-dominated rows (exact ``<=``), by a sweep in lexicographic order."""
    pts = points[np.lexsort(points.T[::-1])]
    front = np.zeros((0, pts.shape[1]))
    for x in pts:
        if not (front <= x).all(axis=1).any():
            front = np.vstack([front, x])
    return front


def test_dominance_program_equals_brute_force_on_a_block():
    g = tiny(2)
    # micro-batch 1 on groups of 2: no sample split, 248,832 assignments of a layer
    pr = _MeshPricing(g, StepPricer(clusters.get("selene")), MixedPrecision(), 8, 2, 1, False)
    T = _StageTables(g, block_structure(g), pr, (1, 2), ("none", "full"), False)
    kinds = T.block_kinds
    a = np.array(list(itertools.product(*[range(len(k)) for k in kinds])))
    assert len(a) == 248_832
    for mode, zero in (("none", 1), ("full", 2)):
        preds, wraps = T._block_pieces(mode)
        crit = [pr.criteria(L, kinds[j], zero, mode) for j, L in enumerate(T.block_layers)]
        cr = sum(crit[j][a[:, j]] for j in range(len(crit)))
        for j, ps in enumerate(preds):
            for u, table in ps:             # an edge's time, and what it changes of memory
                cr[:, slice(None) if table.ndim == 3 else 0] += table[a[:, u], a[:, j]]
        assert np.allclose(cr[7], _assignment_criteria(a[7], crit, preds))
        brute = T._finish_block(a, cr, wraps, mode, zero)
        got = T.block
        sel = (got.zero == zero) & (got.mode == ("none", "selective", "full").index(mode))
        scale = np.abs(brute.crit).max(axis=0)
        scale[scale == 0] = 1.0

        def rounded(x):                   # sums taken in another order differ in last bits
            return np.round(x / scale, 9)
        for cls in np.unique(brute.cls):
            want = {tuple(r) for r in _front(rounded(brute.crit[brute.cls == cls]))}
            have = got.crit[sel & (got.cls == cls)]
            assert {tuple(r) for r in _front(rounded(have))} == want


# ------------------------------------------------------------------ MILP vs enumeration
def _enumerate(prob: _ComboProblem, budget: float) -> float:
    """Every stage cut and every stage's block / pre / post point, the step time written out
    again from the module's formulas."""
    T, c = prob.T, prob.c
    p, m, v = c.p, c.m, c.v
    B, pre, post = T.block, T.pre, T.post
    ins, outs = B.cls // T.n_out, B.cls % T.n_out
    best = math.inf
    L = prob.L // v
    for cut in itertools.combinations(range(1, L), p - 1):
        ks = np.diff((0,) + cut + (L,))
        for pts in itertools.product(range(len(B)), repeat=p):
            j0, jl = pts[0], pts[-1]
            qs = [q for q in range(len(pre)) if pre.cls[q] == ins[j0]
                  and pre.zero[q] == B.zero[j0]]
            rs = [r for r in range(len(post)) if post.cls[r] == outs[jl]
                  and post.zero[r] == B.zero[jl]]
            for q in qs:
                for r in rs:
                    ts, ys, ok = [], [], True
                    for s, (k, j) in enumerate(zip(ks, pts)):
                        cr = B.crit[j]
                        t_s = v * (k * cr[0] + (k - 1) * B.wrap[j]) + B.c_tau[j] \
                            + prob.send[s][outs[j]] + prob.recv[s][ins[j]]
                        y_s = v * k * cr[1] + B.c_psi[j]
                        mem = v * k * cr[2] + prob.f[s] * k * cr[3] + cr[4] \
                            + prob.boundary[s][j]
                        if s == 0:
                            t_s, y_s = t_s + pre.crit[q][0], y_s + pre.crit[q][1]
                            mem += pre.crit[q][2] + prob.f_pre * pre.crit[q][3]
                        if s == p - 1:
                            t_s, y_s = t_s + post.crit[r][0], y_s + post.crit[r][1]
                            mem += post.crit[r][2] + prob.f_post * post.crit[r][3]
                        ok &= mem <= budget
                        ts.append(t_s)
                        ys.append(y_s)
                    if ok:
                        best = min(best, (m - 1 / v) * max(ts) + sum(ts) / v + max(ys))
    return best


@pytest.mark.parametrize("p,m,v,budget_frac", [(2, 4, 1, None), (3, 3, 1, 0.8),
                                               (2, 4, 2, 0.9)])
def test_stage_milp_equals_enumeration_of_stage_cuts(p, m, v, budget_frac):
    g = tiny(6)
    topo = clusters.get("selene")
    Ds = 8 // p if 8 % p == 0 else None
    N = 8 if Ds else 6
    topo = topo.with_devices(N)
    Ds = N // p
    pr = _MeshPricing(g, StepPricer(topo), MixedPrecision(), Ds, 2 if Ds % 2 == 0 else 1,
                      2, False)
    T = _StageTables(g, block_structure(g), pr, (1,), ("none", "full"), True)
    # keep the enumeration small: a few block points
    keep = np.argsort(T.block.crit[:, 0])[:5]
    for f in ("assign", "crit", "cls", "zero", "mode", "wrap", "c_tau", "c_psi"):
        setattr(T.block, f, getattr(T.block, f)[keep])
    combo = _Combo(p, pr.t, m, v, "1f1b", 2, 0.0)
    free = _ComboProblem(T, combo, 6, N, None)
    budget = None
    if budget_frac is not None:
        _, ub = free.heuristic()
        mems = [x[2] for x in free.stage_values(free.solve()[1])]
        least = free.least_memory()
        budget = least + budget_frac * (max(mems) - least)
    prob = _ComboProblem(T, combo, 6, N, budget)
    status, ch, it, _ = prob.solve()
    want = _enumerate(prob, math.inf if budget is None else budget * (1 + 1e-9))
    assert status == "optimal"
    assert it == pytest.approx(want, rel=1e-9)
    assert prob.valid(ch)
    if budget is not None:
        assert max(x[2] for x in prob.stage_values(ch)) <= budget * (1 + 1e-9)


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def small_plan():
    g = gpt(8, **TINY)
    return g, solve_pipeline(g, "selene", global_batch=16, devices=8,
                             options=PipelineOptions(chunks=(1, 2)))


def test_search_returns_a_consistent_proven_plan(small_plan):
    g, plan = small_plan
    assert plan.status == "optimal" and plan.lower_bound_seconds == plan.iteration_seconds
    assert plan.pipeline * plan.tensor * plan.data == 8
    assert plan.micro_batches * plan.micro_batch_size * plan.data == 16
    assert sorted(b for s in plan.stages for b in s.blocks) == list(range(4))
    assert plan.tied and plan.search["milps"] >= 1
    assert all(s.memory_bytes <= plan.memory_limit_bytes for s in plan.stages)
    assert "optimal" in str(plan) and "stage 0" in str(plan)


@pytest.mark.parametrize("t,p,b,v", [(1, 1, 1, 1), (2, 2, 1, 1), (2, 2, 1, 2), (4, 1, 2, 1)])
def test_optimum_never_slower_than_megatron_configuration(small_plan, t, p, b, v):
    g, plan = small_plan
    meg = evaluate_configuration(g, "selene", global_batch=16, devices=8, tensor=t,
                                 pipeline=p, micro_batch_size=b, chunks=v)
    assert meg.status == "evaluated" and meg.search["fits"]
    assert plan.iteration_seconds <= meg.iteration_seconds * (1 + 1e-12)


def test_evaluation_is_priced_by_the_search_formulas():
    """The search restricted to Megatron's exact configuration finds Megatron's time."""
    g = gpt(8, **TINY)
    meg = evaluate_configuration(g, "selene", global_batch=16, devices=8, tensor=2,
                                 pipeline=2, micro_batch_size=1, recompute="full", zero=1)
    opts = PipelineOptions(pipeline=(2,), tensor=(2,), micro_batches=(8,), chunks=(1,),
                           zero=(1,), recompute=("full",))
    best = solve_pipeline(g, "selene", global_batch=16, devices=8, options=opts)
    assert best.iteration_seconds <= meg.iteration_seconds * (1 + 1e-12)
    assert best.stages[0].recompute == "full" and best.stages[0].zero == 1


def test_infeasible_budget_names_the_least_memory_and_it_is_enough():
    g = gpt(8, **TINY)
    opts = PipelineOptions(chunks=(1,), pipeline=(1, 2), tensor=(1, 2), zero=(1, 3),
                           recompute=("none", "full"))
    with pytest.raises(InfeasibleError) as e:
        solve_pipeline(g, "selene", global_batch=16, devices=8, memory_limit=1e4,
                       options=opts)
    least = e.value.least_memory_bytes
    assert least > 1e4 and e.value.budget_bytes == 1e4
    assert "least peak memory" in str(e.value)
    plan = solve_pipeline(g, "selene", global_batch=16, devices=8,
                          memory_limit=least * (1 + 1e-9), options=opts)
    assert plan.peak_memory_bytes <= least * (1 + 1e-9)


def test_bad_inputs_are_typed_errors():
    g = gpt(8, **TINY)
    with pytest.raises(InvalidOptionError, match=r"micro-batch count 3 .*batch 16"):
        solve_pipeline(g, "selene", global_batch=16, devices=8,
                       options=PipelineOptions(micro_batches=(3,)))
    with pytest.raises(InvalidOptionError, match=r"global batch 16 .*3"):
        evaluate_configuration(g, "selene", global_batch=16, devices=8, tensor=2,
                               pipeline=1, micro_batch_size=3)
    with pytest.raises(InvalidOptionError, match="schedules"):
        PipelineOptions(schedules=("zb",))
    with pytest.raises(InvalidOptionError, match="zero"):
        PipelineOptions(zero=(5,))
    with pytest.raises(InvalidGraphError, match="no repeated blocks"):
        block_structure(models.get("resnet18", batch_size=1))


def test_plan_states_its_untied_bound(small_plan):
    g, plan = small_plan
    b = plan.untied_lower_bound_seconds
    assert b is not None and 0 < b <= plan.iteration_seconds
    assert "untied bound" in str(plan)
    meg = evaluate_configuration(g, "selene", global_batch=16, devices=8, tensor=2,
                                 pipeline=2, micro_batch_size=1)
    assert meg.untied_lower_bound_seconds is None


def test_the_step_prices_gemms_at_bf16_whatever_dtype_the_preset_defaults_to():
    # presets default to fp32 peaks; the transformer step is mixed precision (bf16, or fp16
    # where the device states no bf16 peak), so the name alone must not price it at fp32
    from milp_parallel import clusters
    from milp_parallel.pipeline.step_costs import StepPricer
    fp32 = StepPricer(clusters.get("selene"))
    bf16 = StepPricer(clusters.get("selene", dtype="bf16"))
    assert fp32.dtype == bf16.dtype == "bf16" and fp32.flops_per_s == bf16.flops_per_s
    assert StepPricer(clusters.get("abci")).dtype == "fp16"         # V100: no bf16
    assert StepPricer(clusters.get("selene"), dtype="fp32").flops_per_s < fp32.flops_per_s / 10


def test_end_chunk_counts_follow_the_interleaved_warm_up():
    from milp_parallel.pipeline.space import end_chunk_counts
    # Megatron-LM's 145.6B row: p=8, m=48, v=2; stage 0 holds 23 chunk micro-batches, run in
    # groups of 8 cycling chunks 0, 1, 0: 8 + 7 of them of the model's first chunk
    assert end_chunk_counts("1f1b", 8, 48, 2, 0) == (15, 0)
    assert end_chunk_counts("1f1b", 8, 48, 2, 7) == (0, 1)
    assert end_chunk_counts("1f1b", 8, 48, 2, 3) == (0, 0)       # a middle stage
    # without interleaving every micro-batch in flight runs the stage's one chunk
    assert end_chunk_counts("1f1b", 4, 8, 1, 0) == (4, 0)
    assert end_chunk_counts("gpipe", 4, 8, 1, 3) == (0, 8)
    # one stage: the first chunk is the last
    assert end_chunk_counts("1f1b", 1, 8, 1, 0) == (1, 1)
    # fewer micro-batches than stages: groups of m
    assert end_chunk_counts("1f1b", 4, 2, 2, 0) == (2, 0)


def test_zero3_holds_the_gathered_units_beside_its_shards():
    # ZeRO-3 against ZeRO-2 on the same plan: the weights are sharded over d, and while they
    # are used a device holds two blocks' gathered weights and one block's gradients (the
    # unit running and the one prefetched) and the layers outside the blocks gathered
    g = gpt(1, layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    prec = MixedPrecision()
    kw = dict(global_batch=4, devices=2, tensor=1, pipeline=1, micro_batch_size=2,
              memory_limit=float("inf"))
    z2, z3 = (evaluate_configuration(g, "selene", zero=z, **kw) for z in (2, 3))
    block = sum(g.layer(n).params for n in g.names if n.startswith("layers.0."))
    root = sum(L.params for L in g.layers if not L.name.startswith("layers."))
    total = g.param_count()
    pb, gb = float(prec.param_bytes), float(prec.grad_bytes)
    extra = -total * pb / 2 + block * (2 * pb + gb) + root * (pb + gb)
    assert z3.stages[0].memory_bytes - z2.stages[0].memory_bytes == pytest.approx(extra)


# ---------------------------------------------------------------- shared inputs (fanouts)
def test_a_tensor_with_several_readers_gets_one_fanout_per_block():
    from milp_parallel.models.llama import llama
    from milp_parallel.pipeline.fanout import with_fanouts
    g = llama(2, layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=128, seq_len=16)
    f = with_fanouts(g)
    fans = [n for n in f.names if f.layer(n).op == "fanout"]
    assert fans == [f"layers.{i}.{n}" for i in (0, 1)
                    for n in ("input_fanout", "add1.fanout", "mlp_norm.fanout")]
    assert with_fanouts(f) is f and f.param_count() == g.param_count()
    assert f.flops() == g.flops()
    assert set(f.layer("layers.0.mlp_norm.fanout").inputs) == {"layers.0.mlp_norm"}
    assert f.layer("layers.0.gate").inputs == f.layer("layers.0.up").inputs \
        == ("layers.0.mlp_norm.fanout",)
    st = block_structure(f)
    assert st.entry == ((0, 0),) and st.rest[0] == "input_fanout"


def test_the_gate_and_up_input_gradient_is_summed_once():
    # Megatron's f: the two column linears' partial input gradients are added as partial
    # sums and all-reduced once, on the fanout; the block input's readers share one copy
    from milp_parallel.models.llama import llama
    from milp_parallel.pipeline.accounting import counted_bytes, plan_traffic
    from milp_parallel.pipeline.pricing import Transfer
    g = llama(2, layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=128, seq_len=16)
    plan = evaluate_configuration(g, "selene", devices=2, global_batch=2, tensor=2,
                                  pipeline=1, micro_batch_size=2, recompute="none",
                                  memory_limit=float("inf"))
    kinds = dict(plan.stages[0].kinds)
    assert kinds["mlp_norm.fanout"] == "R/P" and kinds["input_fanout"] == "R/R"
    rows = plan_traffic(plan, g)
    hidden = 2 * 16 * 64 * plan.options.precision.activation_bytes      # b S h bytes
    one = counted_bytes(Transfer("allreduce", "tp", hidden, "bwd"), 2)
    for i in (0, 1):
        assert rows[(f"layers.{i}.mlp_norm.fanout", "transfer")] == one
        assert (f"layers.{i}.gate", "transfer") not in rows
        assert (f"layers.{i}.up", "transfer") not in rows
    # the embedding's partial sums, reduced once for the block's two readers
    assert rows[("layers.0.input_fanout", "transfer")] == one
    assert ("layers.0.add1", "transfer") in rows        # the row linear's own reduction
    assert rows[("layers.0.add1", "transfer")] == one


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_sequence_parallel_gate_and_up_input_is_gathered_once(recompute):
    # Megatron-LM's SP MLP: the norm's slice is gathered once for the gate and up projections
    # (and again in the backward pass), their partial input gradients are reduce-scattered
    # once, and one slice is kept for both (one gathered copy in a recomputed block); priced
    # per linear, each would gather and keep its own
    from milp_parallel.models.llama import llama
    from milp_parallel.pipeline.accounting import counted_bytes, plan_traffic
    from milp_parallel.pipeline.fanout import with_fanouts
    from milp_parallel.pipeline.pricing import Transfer
    g = llama(2, layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=128, seq_len=16)
    shared = megatron_kinds(with_fanouts(g), 2, sequence_parallel=True)
    each = dict(shared)
    for i in (0, 1):
        assert shared[f"layers.{i}.mlp_norm.fanout"] == "S>R/P"
        assert shared[f"layers.{i}.gate"] == shared[f"layers.{i}.up"] == "column"
        each[f"layers.{i}.mlp_norm.fanout"] = "S/S"
        each[f"layers.{i}.gate"] = each[f"layers.{i}.up"] = "column_sp"
    plans = [evaluate_configuration(g, "selene", devices=2, global_batch=2, tensor=2,
                                    pipeline=1, micro_batch_size=2, recompute=recompute,
                                    kinds=k, memory_limit=float("inf")) for k in (shared, each)]
    hidden = 2 * 16 * 64 * plans[0].options.precision.activation_bytes      # b S h bytes
    # two gathers: the backward's, or (recomputed) the recomputed forward's
    one = sum(counted_bytes(Transfer(c, "tp", hidden, "fwd"), 2)
              for c in ("allgather", "allgather", "reducescatter"))
    rows, rows_each = plan_traffic(plans[0], g), plan_traffic(plans[1], g)
    for i in (0, 1):
        assert rows[(f"layers.{i}.mlp_norm.fanout", "transfer")] == one
        assert (f"layers.{i}.gate", "transfer") not in rows
        assert rows_each[(f"layers.{i}.gate", "transfer")] == one
        assert rows_each[(f"layers.{i}.up", "transfer")] == one
    assert plans[0].iteration_seconds < plans[1].iteration_seconds
    # kept: one slice per block instead of two; recomputed: one block's gathered copy, not two
    saved = 2 * hidden / 2 if recompute == "none" else hidden
    assert plans[1].stages[0].memory_bytes - plans[0].stages[0].memory_bytes == saved


def test_pruned_fanout_kinds_keep_every_non_dominated_block(monkeypatch):
    # a fanout costs only its re-layouts, so the kinds never cheapest for any neighbours'
    # are dropped before the block program: the non-dominated blocks are the same
    from milp_parallel.models.llama import llama
    from milp_parallel.pipeline.fanout import with_fanouts
    g = with_fanouts(llama(2, layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=128,
                           seq_len=16))
    pr = _MeshPricing(g, StepPricer(clusters.get("selene")), MixedPrecision(), 4, 2, 2, False)
    args = (g, block_structure(g), pr, (1, 3), ("none", "full"), False)
    pruned = _StageTables(*args)
    monkeypatch.setattr(_StageTables, "_prune_fanout_kinds", lambda self: None)
    full = _StageTables(*args)
    n_pruned = sum(len(k) for k in pruned.block_kinds)
    assert n_pruned < sum(len(k) for k in full.block_kinds)

    def front(T):
        c = np.column_stack([T.block.crit, T.block.wrap, T.block.zero, T.block.mode])
        return np.unique(np.round(c, 12), axis=0)

    a, b = front(pruned), front(full)
    assert a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=0)
    # the front holds the SP program's block (its MLP input gathered once, which changes
    # what the linears keep) or one at least as good in every criterion
    sp = megatron_kinds(g, 2, sequence_parallel=True)
    rel = {r: sp[n] for r, n in zip(full.struct.rest, full.struct.blocks[0])}
    for mode, zero in (("none", 1), ("full", 3)):
        x = full.fixed_block(rel, zero, mode).crit[0]
        sel = (pruned.block.zero == zero) & (pruned.block.mode == (0 if mode == "none" else 2))
        assert (pruned.block.crit[sel] <= x + 1e-9 * np.abs(x)).all(axis=1).any(), mode


def test_pipeline_stage_receive_buffers_are_priced_per_micro_batch():
    # torch.distributed.pipelining's PipelineStage allocates a receive buffer per micro-batch
    # for each chunk's input (but the model's first) and output gradient (but its last), and
    # keeps them; Megatron-LM allocates each message as it arrives ("in_flight")
    from milp_parallel.models.llama import llama
    g = llama(8, layers=4, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=128, seq_len=16)

    def plan(buffers, kinds):
        return evaluate_configuration(g, "selene", devices=4, global_batch=8, tensor=2,
                                      pipeline=2, micro_batch_size=1, recompute="none",
                                      kinds=kinds, memory_limit=float("inf"),
                                      options=PipelineOptions(receive_buffers=buffers))
    # a message is each rank's sequence slice, with or without SP
    message = 1 * 16 * 64 * MixedPrecision().activation_bytes / 2        # b S h / t bytes
    for kinds in ("megatron", "megatron_sp"):
        pre, fly = plan("preallocated", kinds), plan("in_flight", kinds)
        m = pre.micro_batches
        assert m == 8
        # stage 0 receives gradients only; stage 1 activations only, and its first layers
        # keep the in-flight ones' (1F1B: one) with what they keep
        extra = [pre.stages[s].memory_bytes - fly.stages[s].memory_bytes for s in (0, 1)]
        assert extra == [m * message, (m - 1) * message]
    with pytest.raises(InvalidOptionError, match="receive_buffers"):
        PipelineOptions(receive_buffers="lazy")
