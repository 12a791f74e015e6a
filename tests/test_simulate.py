"""The step simulator: equal to the separable model where nothing can overlap, and hand-built
schedules where it must differ."""

import numpy as np
import pytest

import milp_parallel as mp
from milp_parallel import clusters
from milp_parallel.costs import CostModel
from milp_parallel.costs.build import build
from milp_parallel.costs.simulator import simulate_assignment
from milp_parallel.errors import InvalidAssignmentError, InvalidTopologyError
from milp_parallel.graph import LayerGraph


def mlp(batch=32, width=256, layers=3):
    g = LayerGraph("mlp")
    x = g.input("x", (batch, width))
    for i in range(layers):
        x = g.linear(f"fc{i}", x, width)
        x = g.elementwise(f"relu{i}", x)
    g.loss("loss", x)
    return g


def two_convs():
    """x -> conv c1 -> conv c2 -> loss, on 4 x 8 x 16 x 16 (the redistribution cases)."""
    g = LayerGraph()
    g.input("x", (4, 8, 16, 16))
    g.conv("c1", "x", 8, 3, padding=1, bias=False)
    g.conv("c2", "c1", 8, 3, padding=1, bias=False)
    g.loss("loss", "c2")
    return g


def pick(built, labels):
    """Assignment from ``{node name: label}``; other nodes take ``default``."""
    p = built.problem
    default = labels.get("*")
    return [p.config_labels[v].index(labels.get(name, default))
            for v, name in enumerate(p.node_names)]


def test_one_device_equals_the_separable_model():
    t = clusters.get("abci", nodes=1, gpus_per_node=1)
    for g in (mlp(), mp.models.get("lenet5", batch_size=8)):
        b = build(g, t)
        a = [0] * b.problem.n_nodes
        sim = simulate_assignment(b, a)
        assert sim.step_seconds == pytest.approx(b.problem.evaluate(a).cost, rel=1e-12)
        assert sim.n_buckets == 0 and sim.transfer_seconds == 0


def test_the_programs_own_time_per_layer_and_per_step_is_priced():
    # on one device: every layer (not the input) pays the per-layer time, in the objective
    # and the simulator alike; the step's fixed time is the simulator's alone (it changes no
    # choice), and the certificate's bound still holds
    from milp_parallel.plan import certify
    t = clusters.get("abci", nodes=1, gpus_per_node=1)
    g = mlp()
    plain = build(g, t)
    over = build(g, t, cost_model=CostModel(t, layer_overhead_seconds=3e-5,
                                            step_overhead_seconds=2e-4))
    a = [0] * plain.problem.n_nodes
    layers = sum(1 for lay in g.layers if lay.op != "input")
    assert over.problem.evaluate(a).cost == pytest.approx(
        plain.problem.evaluate(a).cost + layers * 3e-5, rel=1e-12)
    assert simulate_assignment(over, a).step_seconds == pytest.approx(
        simulate_assignment(plain, a).step_seconds + layers * 3e-5 + 2e-4, rel=1e-12)
    bound = certify.lower_bound_problem(over, None, 1.0).evaluate(a).cost
    assert bound == pytest.approx(simulate_assignment(over, a).step_seconds, rel=1e-12)
    for bad in (-1e-6, float("nan"), True, "1e-5"):
        with pytest.raises(InvalidTopologyError, match="overhead_seconds"):
            CostModel(t, step_overhead_seconds=bad)


def test_data_parallel_without_overlap_equals_the_separable_model():
    # per-layer all-reduces that wait for the end of the backward pass: nothing overlaps,
    # and every device does the same work, so the step is the plain sum
    t = clusters.get("abci", nodes=2)
    cm = CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0)
    b = build(mlp(), t, cost_model=cm)
    a = pick(b, {"*": "n=8"})
    sim = simulate_assignment(b, a, bucket_bytes=None, overlap=False)
    assert sim.n_buckets == 3
    assert sim.step_seconds == pytest.approx(b.problem.evaluate(a).cost, rel=1e-12)


def test_ddp_bucket_copies_are_priced_alike_by_the_objective_and_the_simulator():
    # DDP's default reducer copies every gradient into its bucket and back: two passes of
    # read + write over the shard at the device's memory bandwidth, on the compute stream
    t = clusters.get("abci", nodes=2)
    plain = CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0)
    cm = CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0, bucket_copies=2)
    g = mlp()
    b0, b = build(g, t, cost_model=plain), build(g, t, cost_model=cm)
    a = pick(b, {"*": "n=8"})
    shard_bytes = sum(lay.params for lay in g.layers) * cm.bytes_per_element
    bw = t.device.memory_bandwidth_bytes_per_s * cm.roofline.memory_efficiency
    extra = 2 * (2 * shard_bytes / bw)
    assert b.problem.evaluate(a).cost == pytest.approx(b0.problem.evaluate(a).cost + extra,
                                                       rel=1e-12)
    sim = simulate_assignment(b, a, bucket_bytes=None, overlap=False, trace=True)
    assert sim.step_seconds == pytest.approx(b.problem.evaluate(a).cost, rel=1e-12)
    copies = [x for x in sim.tasks if x.kind == "bucket_copy" and x.device == 0]
    assert len(copies) == 3 + 1                 # one into each layer's bucket, one back
    # a device with no replica to sync copies nothing
    one = clusters.get("abci", nodes=1, gpus_per_node=1)
    b1 = build(g, one, cost_model=CostModel(one, bucket_copies=2))
    b1p = build(g, one, cost_model=CostModel(one))
    z = [0] * b1.problem.n_nodes
    assert b1.problem.evaluate(z).cost == b1p.problem.evaluate(z).cost
    with pytest.raises(mp.errors.InvalidTopologyError, match="bucket_copies"):
        CostModel(t, bucket_copies=-1)


def test_symmetric_redistribution_equals_the_separable_model():
    # conv1 split by samples, conv2 by rows on the same 2 devices: each device receives as
    # much as it sends, both ways, so t_x = 2 x the forward exchange is exact
    g = two_convs()
    t = clusters.get("abci", nodes=1, gpus_per_node=2)
    cm = CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0)
    b = build(g, t, cost_model=cm)
    a = pick(b, {"x": "n=2", "c1": "n=2", "c2": "h=2", "loss": "n=2"})
    ev = b.problem.evaluate(a)
    assert ev.edge_cost > 0
    sim = simulate_assignment(b, a, bucket_bytes=None, overlap=False)
    assert sim.step_seconds == pytest.approx(ev.cost, rel=1e-12)


def test_a_redistribution_is_priced_by_the_levels_measured_all_to_all():
    # the program moves an edge's data with one all-to-all: a level that carries its own
    # all-to-all figures prices the edge by them, in the objective and the simulator alike
    import dataclasses

    from milp_parallel.machine.topology import Topology
    g = two_convs()
    t = clusters.get("abci", nodes=1, gpus_per_node=2)
    lv = t.levels[0]
    lat, bw = 40 * lv.latency_for(2), lv.bandwidth_bytes_per_s / 8

    def edge_seconds(collectives):
        topo = Topology(t.device, (dataclasses.replace(lv, collectives=collectives),)
                        + t.levels[1:], "measured")
        cm = CostModel(topo, gradient_bucket_bytes=None, sync_overlap=0.0)
        b = build(g, topo, cost_model=cm)
        a = pick(b, {"x": "n=2", "c1": "n=2", "c2": "h=2", "loss": "n=2"})
        ev = b.problem.evaluate(a)
        sim = simulate_assignment(b, a, bucket_bytes=None, overlap=False)
        assert sim.step_seconds == pytest.approx(ev.cost, rel=1e-12)
        return ev.edge_cost

    base = edge_seconds(())
    own = edge_seconds((("alltoall", lat, bw),))
    # t = k alpha + bytes / bandwidth: k transfers (two edges move, forward and backward)
    k = (edge_seconds((("alltoall", 2 * lat, bw),)) - own) / lat
    moved = (edge_seconds((("alltoall", lat, bw / 2),)) - own) * bw
    assert k == pytest.approx(4, rel=1e-9) and moved > 0
    assert own == pytest.approx(k * lat + moved / bw, rel=1e-9)
    # without the all-to-all's figures the link prices the same transfers
    assert base == pytest.approx(k * lv.latency_for(2) + moved / lv.bandwidth_bytes_per_s,
                                 rel=1e-9)
    # another kind's figures do not touch a redistribution
    assert edge_seconds((("allgather", lat, bw),)) == base


def test_bucketed_allreduce_hides_behind_the_backward_pass():
    # two linear layers, data parallel on 2 GPUs, one all-reduce per layer: fc1's all-reduce
    # starts when its backward ends and runs while fc0 computes its backward
    g = LayerGraph()
    g.input("x", (64, 1024))
    g.linear("fc0", "x", 1024)
    g.linear("fc1", "fc0", 1024)
    g.loss("loss", "fc1")
    t = clusters.get("abci", nodes=1, gpus_per_node=2)
    b = build(g, t)
    a = pick(b, {"*": "n=2"})
    cm = b.cost_model
    ph = {n: [float(x[0]) for x in cm.compute_phases(
        g.layer(n), [[2, 1]] if n != "loss" else [[2]],
        graph_inputs=(n == "fc0",), count_profile=False)] for n in ("fc0", "fc1", "loss")}
    ar = {n: t.allreduce_seconds([0, 1], g.layer(n).params * 4, algorithm="auto")
          for n in ("fc0", "fc1")}
    fwd = sum(ph[n][0] for n in ph)
    bwd_loss_fc1 = ph["loss"][1] + ph["fc1"][1]
    upd = ph["fc0"][2] + ph["fc1"][2]
    sim = simulate_assignment(b, a, bucket_bytes=None, overlap=True, trace=True)
    # hand-built schedule: the comm stream runs fc1's all-reduce during fc0's backward
    end_fc0 = fwd + bwd_loss_fc1 + ph["fc0"][1]
    end_ar1 = fwd + bwd_loss_fc1 + ar["fc1"]
    expect = max(end_fc0, end_ar1) + ar["fc0"] + upd
    assert sim.step_seconds == pytest.approx(expect, rel=1e-12)
    kinds = [(x.kind, x.name) for x in sim.tasks if x.device == 0]
    assert ("allreduce", "fc1") in kinds and ("allreduce", "fc0") in kinds
    # without overlap both wait for the backward pass: slower by the hidden part
    plain = simulate_assignment(b, a, bucket_bytes=None, overlap=False)
    assert plain.step_seconds == pytest.approx(
        fwd + bwd_loss_fc1 + ph["fc0"][1] + ar["fc0"] + ar["fc1"] + upd, rel=1e-12)
    assert sim.step_seconds < plain.step_seconds
    # one 25 MiB bucket holds both gradients: a single all-reduce of their sum
    one = simulate_assignment(b, a, bucket_bytes=25 * 2**20, overlap=True)
    assert one.n_buckets == 1
    both = t.allreduce_seconds([0, 1], (g.layer("fc0").params + g.layer("fc1").params) * 4,
                               algorithm="auto")
    assert one.step_seconds == pytest.approx(end_fc0 + both + upd, rel=1e-12)


def test_an_overlapped_allreduce_takes_its_unhidden_share_of_the_compute_stream():
    # processor sharing: with sync_overlap=e an all-reduce beside the backward pass holds
    # the compute stream for (1 - e) of its time; e=0 conserves the device's busy time (the
    # step equals the serialized one), e=1 hides it as far as the backward pass allows
    g = mlp(batch=64, width=1024, layers=4)
    t = clusters.get("abci", nodes=1, gpus_per_node=2)
    steps = {}
    for e in (0.0, 0.5, 1.0):
        b = build(g, t, cost_model=CostModel(t, gradient_bucket_bytes=None, sync_overlap=e))
        a = pick(b, {"*": "n=2"})
        sim = simulate_assignment(b, a, bucket_bytes=None, overlap=True, trace=True)
        steps[e] = sim.step_seconds
        shares = [x for x in sim.tasks if x.kind == "allreduce_share" and x.device == 0]
        ars = {x.name: x.end - x.start for x in sim.tasks
               if x.kind == "allreduce" and x.device == 0}
        assert len(ars) == 4
        if e == 1.0:
            assert not shares
        else:
            assert {x.name: x.end - x.start for x in shares} == pytest.approx(
                {n: (1 - e) * d for n, d in ars.items()}, rel=1e-12)
        if e == 0.0:
            serial = simulate_assignment(b, a, bucket_bytes=None, overlap=False)
            assert sim.step_seconds == pytest.approx(serial.step_seconds, rel=1e-12)
            assert sim.compute_seconds == serial.compute_seconds   # shares are not compute
    assert steps[1.0] < steps[0.5] < steps[0.0]


def test_a_transfer_hides_behind_a_branch_on_another_device():
    # x -> a (serial, device 0) and x -> b (split by samples over devices 0, 1): device 1
    # receives its half of x while device 0 computes a, so the transfer costs nothing
    g = LayerGraph()
    g.input("x", (64, 2048))
    g.linear("a", "x", 2048, bias=False)
    g.linear("b", "x", 64, bias=False)
    g.loss("la", "a")
    g.loss("lb", "b")
    t = clusters.get("abci", nodes=1, gpus_per_node=2)
    cm = CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0)
    built = build(g, t, cost_model=cm)
    asg = pick(built, {"x": "serial", "a": "serial", "la": "serial", "b": "n=2", "lb": "n=2"})
    ev = built.problem.evaluate(asg)
    assert ev.edge_cost > 0
    sim = simulate_assignment(built, asg, bucket_bytes=None, overlap=False, trace=True)
    recv = [x for x in sim.tasks if x.kind == "recv" and x.device == 1]
    a_fwd = next(x for x in sim.tasks if x.kind == "forward" and x.name == "a")
    assert recv and recv[0].end <= a_fwd.end        # hidden behind a's forward
    assert sim.step_seconds < ev.cost


def test_simulate_a_plan_and_its_errors():
    plan = mp.solve("lenet5", "abci", devices=4, solver="dp", cross_check=False)
    sim = mp.simulate(plan)
    assert sim.step_seconds > 0 and sim.step_seconds >= sim.compute_seconds
    assert sim.exposed_seconds == pytest.approx(sim.step_seconds - sim.compute_seconds)
    b = build(mp.models.get("lenet5"), clusters.get("abci", nodes=1))
    with pytest.raises(InvalidAssignmentError, match="assignment"):
        simulate_assignment(b, [0])
    with pytest.raises(InvalidAssignmentError, match="needs an assignment"):
        mp.simulate(b)
    with pytest.raises(InvalidAssignmentError, match="configurations"):
        mp.simulate(plan, config_options={"max_degree": {"n": 1}})
    with pytest.raises(mp.errors.FormatError, match="lenet5"):    # a path: no such plan file
        mp.simulate("lenet5")
    with pytest.raises(mp.errors.InvalidOptionError, match="takes a Plan"):
        mp.simulate(42)


@pytest.mark.parametrize("name", ["resnet18", "inception_v3"])
def test_simulated_steps_are_bounded_by_the_work(name):
    # every simulated step lies between the busiest device's compute and the plain sum of
    # all the work with nothing overlapped (the separable model without credits)
    t = clusters.get("optcnn", nodes=2)
    g = mp.models.get(name, batch_size=64)
    b = build(g, t, cost_model=CostModel(t, gradient_bucket_bytes=None, sync_overlap=0.0))
    rng = np.random.default_rng(0)
    for _ in range(3):
        a = [int(rng.integers(k)) for k in b.problem.n_configs]
        a = [x if np.isfinite(b.problem.node_costs[v][x]) else 0 for v, x in enumerate(a)]
        sim = simulate_assignment(b, a, bucket_bytes=None, overlap=True)
        assert sim.compute_seconds <= sim.step_seconds
        assert sim.step_seconds <= b.problem.evaluate(a).cost * (1 + 1e-9) + 1e-12


# ---------------------------------------------------------------------- k best and rerank
def test_k_best_matches_brute_force_with_and_without_a_budget():
    import itertools

    from milp_parallel.solvers.kbest import k_best
    b = build(mlp(batch=8, width=32, layers=4), clusters.get("abci", nodes=1, gpus_per_node=2))
    for p in (b.problem.with_memory_limit(None), None):
        if p is None:       # a budget that cuts off some of the best assignments
            free = b.problem.with_memory_limit(None)
            peaks = sorted({float(free.evaluate(a).peak_memory.max())
                            for a in itertools.product(*[range(k) for k in free.n_configs])})
            p = free.with_memory_limit(peaks[len(peaks) // 3])
        every = []
        for a in itertools.product(*[range(k) for k in p.n_configs]):
            ev = p.evaluate(a)
            if ev.feasible:
                every.append(ev.cost)
        every.sort()
        got = k_best(p, 12)
        assert [s.objective for s in got] == pytest.approx(every[:12], rel=1e-12)
        assert len({s.assignment for s in got}) == len(got)
        assert all(p.evaluate(s.assignment).feasible for s in got)
        if p.has_budget:        # the budget did cut some of the best assignments off
            assert [s.assignment for s in got] != [
                s.assignment for s in k_best(p.with_memory_limit(None), 12)]


def test_solve_reranks_by_simulated_time():
    plan = mp.solve("alexnet", "optcnn", devices=4, solver="dp", cross_check=False, rerank=4)
    best4 = [c for c in plan.rerank if c["rank"] is not None]
    assert len(best4) == 4 and sum(c["chosen"] for c in plan.rerank) == 1
    preds = [c["predicted_seconds"] for c in best4]
    assert preds == sorted(preds) and preds[0] == pytest.approx(plan.objective)
    chosen = next(c for c in plan.rerank if c["chosen"])
    assert chosen["simulated_seconds"] == min(c["simulated_seconds"] for c in plan.rerank)
    assert plan.simulated_step_seconds == pytest.approx(chosen["simulated_seconds"])
    assert plan.step_seconds == pytest.approx(chosen["predicted_seconds"])
    # the baselines compete too: the plan is never slower in simulation than any of them
    assert {c["baseline"] for c in plan.rerank if c["rank"] is None} <= set(plan.baselines)
    assert all(plan.simulated_step_seconds <= b.simulated_step_seconds * (1 + 1e-12)
               for b in plan.baselines.values() if b.feasible)
    assert mp.Plan.from_json(plan.to_json()) == plan
    assert "re-ranked the 4 best plans and the baselines" in str(plan)
    quiet = mp.solve("lenet5", "abci", devices=2, solver="dp", cross_check=False,
                     simulate=False)
    assert quiet.simulated_step_seconds is None and quiet.rerank == ()
    with pytest.raises(mp.InvalidOptionError, match="rerank"):
        mp.solve("lenet5", "abci", devices=2, solver="dp", cross_check=False, rerank=0)


@pytest.mark.parametrize("bucket", [None, 1e3, 3e4, 25 * 2**20])
def test_the_runtimes_gradient_buckets_are_the_simulators(bucket):
    # the layer-wise program reduces gradients in layout.sync_buckets; the simulator prices
    # its own bucket schedule: the same buckets, the same layers in each, the same bytes
    from milp_parallel.runtime.layout import sync_buckets
    g = mlp(batch=32, width=64, layers=4)
    t = clusters.get("abci", nodes=1, gpus_per_node=4)
    cm = CostModel(t, gradient_bucket_bytes=bucket)
    b = build(g, t, cost_model=cm)
    a = pick(b, {"*": "n=4", "fc1": "n=2 c=2", "relu1": "n=2 c=2", "fc3": "serial",
                 "relu3": "serial", "loss": "serial"})
    sim = simulate_assignment(b, a, trace=True)
    ran = [x.name for x in sim.tasks if x.kind == "allreduce" and x.device == 0]
    cfg = {lay.name: np.asarray(b.configs[b.node_of[lay.name]][a[b.node_of[lay.name]]])
           for lay in g.layers}
    ours = sync_buckets(g, cfg, bucket, cm.bytes_per_element)
    assert [x.name for x in ours if 0 in {d for grp in x.groups for d in grp}] == ran
    assert len(ours) == sim.n_buckets
    total = sum(x.shard_bytes * sum(len(grp) for grp in x.groups) for x in ours)
    assert total == pytest.approx(sum(
        # every rank of the 4 holds a shard: all of a layer's, half of fc1's (c=2)
        cm.bytes_per_element * lay.params / (2 if lay.name == "fc1" else 1) * 4
        for lay in g.layers
        if lay.params and lay.name != "fc3"), rel=1e-12)
