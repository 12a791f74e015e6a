"""build / build_problem: merging, edge summing, labels, memory budget, mapping back."""

import numpy as np
import pytest

from milp_parallel import clusters, models, solve_problem
from milp_parallel.costs import CostModel
from milp_parallel.costs.build import BuiltProblem, build, build_problem
from milp_parallel.costs.configs import ConfigOptions, enumerate_configs
from milp_parallel.errors import InvalidOptionError, InvalidTopologyError
from milp_parallel.graph import LayerGraph
from milp_parallel.problem import Problem


def block():
    g = LayerGraph("block")
    g.input("x", (8, 4, 8, 8))
    g.conv("c1", "x", 8, 3, padding=1)
    g.batchnorm("bn1", "c1")
    g.elementwise("r1", "bn1")
    g.conv("c2", "r1", 8, 3, padding=1)
    g.add("sum", "c2", "r1")                  # reads r1 (merged into c1) again
    g.elementwise("r2", "sum")
    g.global_pool("gp", "r2")
    g.flatten("f", "gp")
    g.linear("fc", "f", 10)
    g.loss("loss", "fc")
    return g


def test_merging_and_names():
    g = block()
    t = clusters.get("abci", nodes=1)
    b = build(g, t)
    assert isinstance(b, BuiltProblem) and isinstance(b.problem, Problem)
    assert b.problem.node_names == ("x", "c1", "c2", "sum", "gp", "f", "fc", "loss")
    assert b.members[1] == ("c1", "bn1", "r1") and b.members[3] == ("sum", "r2")
    assert b.node_of["r1"] == 1 and b.node_of["r2"] == 3
    assert b.problem.config_labels[1][0] == "serial"
    assert b.problem.n_configs.tolist() == [len(c) for c in b.configs]
    assert sorted(sum((list(m) for m in b.members), [])) == sorted(g.names)
    # c1 -> sum (through r1) and c2 -> sum: distinct node pairs, no duplicates
    pairs = {tuple(e) for e in b.problem.edges.tolist()}
    assert len(pairs) == b.problem.n_edges
    assert b.degrees(1, 0) == {"n": 1, "c": 1, "h": 1, "w": 1}
    unmerged = build(g, t, merge_elementwise=False)
    assert unmerged.problem.n_nodes == len(g)


def test_node_costs_add_the_members():
    g = block()
    t = clusters.get("abci", nodes=1)
    cm = CostModel(t)
    b = build(g, t, cost_model=cm)
    cfg = b.configs[1]
    # c1 reads the graph input x: the roofline skips its input gradient
    gi = {"c1": (True,), "bn1": (False,), "r1": (False,)}
    want = sum(cm.compute_seconds(g.layer(m), cfg, graph_inputs=gi[m])
               + cm.sync_seconds(g.layer(m), cfg, graph_inputs=gi[m])
               for m in ("c1", "bn1", "r1"))
    assert b.problem.node_costs[1] == pytest.approx(want)
    mem = sum(cm.memory_bytes(g.layer(m), cfg) for m in ("c1", "bn1", "r1"))
    assert np.array_equal(b.problem.memory[1], mem)


def test_follow_edge_is_free_on_the_diagonal():
    g = block()
    t = clusters.get("abci", nodes=2)
    cm = CostModel(t)
    cfg = enumerate_configs(g.layer("c1"), t.n_devices)
    for u, v in (("c1", "bn1"), ("bn1", "r1")):
        tab = cm.transfer_seconds(g.layer(u), g.layer(v), 0, cfg, cfg)
        assert np.all(np.diag(tab) == 0) and np.all(tab[~np.eye(len(cfg), dtype=bool)] > 0)


def test_edges_between_the_same_nodes_are_summed():
    g = LayerGraph()
    g.input("x", (4, 8))
    g.linear("a", "x", 8)
    g.add("twice", "a", "a")
    t = clusters.get("abci", nodes=1)
    cm = CostModel(t)
    b = build(g, t, cost_model=cm)
    assert b.problem.n_edges == 2
    e = [tuple(x) for x in b.problem.edges.tolist()].index((1, 2))
    one = cm.transfer_seconds(g.layer("a"), g.layer("twice"), 0, b.configs[1], b.configs[2])
    assert b.problem.edge_costs[e] == pytest.approx(2 * one)
    assert b.edge_members[e] == (("a", "twice", 0), ("a", "twice", 1))


def test_memory_limit_and_options():
    g = block()
    t = clusters.get("abci", nodes=1)
    assert build_problem(g, t).memory_limit.tolist() == [16e9] * 4
    assert build_problem(g, t, memory_limit=None).memory_limit is None
    assert build_problem(g, t, memory_limit=1e6).memory_limit.tolist() == [1e6] * 4
    with pytest.raises(InvalidOptionError, match="memory_limit"):
        build_problem(g, t, memory_limit="lots")
    assert build_problem(g, t, memory_limit="none").memory_limit is None
    assert build_problem(g, t, memory_limit="1MB").memory_limit.tolist() == [1e6] * 4
    small = build_problem(g, t, require_all_devices=True)
    assert all(lab != "serial" for labs in small.config_labels[1:4] for lab in labs)
    capped = build(g, t, config_options=ConfigOptions(max_degree={"h": 1, "w": 1}))
    assert all("h=" not in lab for labs in capped.problem.config_labels for lab in labs)
    with pytest.raises(TypeError, match="unknown build option"):
        build_problem(g, t, power_of_three=True)
    with pytest.raises(InvalidTopologyError, match="another topology"):
        build(g, t, cost_model=CostModel(clusters.get("abci", nodes=2)))


def test_evaluate_a_data_parallel_assignment():
    g = block()
    t = clusters.get("abci", nodes=1)
    # the FLOP model: compute splits perfectly; every layer's gradient all-reduced alone
    b = build(g, t, cost_model=CostModel(t, compute_model="flops", gradient_bucket_bytes=None,
                                         sync_overlap=0.0))
    p = b.problem
    data = [b.problem.config_labels[v].index("n=4") for v in range(p.n_nodes)]
    ev = p.evaluate(data)
    assert ev.feasible and ev.edge_cost == 0.0     # every layer splits samples alike
    serial = p.evaluate([0] * p.n_nodes)
    assert serial.edge_cost == 0.0

    def compute(built, assignment):
        return sum(m.compute_seconds[k] for v, k in enumerate(assignment)
                   for m in built.member_costs[v])
    # n=4 divides every layer's batch of 8: exactly a quarter of the serial compute
    assert compute(b, data) == pytest.approx(compute(b, [0] * p.n_nodes) / 4)
    # a tiny model: the gradient all-reduce makes data parallelism slower than serial
    assert ev.node_cost > serial.node_cost
    # in 25 MiB buckets a layer pays a sliver of the latency: sync all but vanishes
    bucketed = build(g, t, cost_model=CostModel(t, compute_model="flops", sync_overlap=0.0))
    sync = sum(m.sync_seconds[k] for v, k in enumerate(data) for m in b.member_costs[v])
    sync_b = sum(m.sync_seconds[k] for v, k in enumerate(data)
                 for m in bucketed.member_costs[v])
    assert 0 < sync_b < sync / 100
    assert "nodes" in b.summary() and b.edge_table_size() > 0
    assert b.config_counts()["c1"] == p.n_configs[1]
    # the roofline: every kernel pays its launch time, which splitting does not divide,
    # so a quarter of the tile is more than a quarter of the time
    r = build(g, t)
    assert compute(r, [0] * p.n_nodes) / 4 < compute(r, data) < compute(r, [0] * p.n_nodes)


# ---------------------------------------------------------------------- the whole zoo
@pytest.mark.slow
@pytest.mark.parametrize("cluster", clusters.names())
def test_every_zoo_model_builds_on_every_preset(cluster):
    topo = clusters.get(cluster)
    for name in models.names():
        built = build(models.get(name), topo)
        p = built.problem
        assert p.n_nodes == len(built.members) > 0, name
        # every layer keeps at least one allowed configuration, and the all-serial-ish
        # assignment of cheapest configs evaluates to a finite cost
        cheapest = [int(np.argmin(c)) for c in p.node_costs]
        assert all(np.isfinite(c).any() for c in p.node_costs), name
        assert np.isfinite(p.evaluate(cheapest).node_cost), name


@pytest.mark.slow
@pytest.mark.parametrize("name", models.names())
def test_exact_search_solves_every_zoo_model_on_a_small_cluster(name):
    p = build(models.get(name), clusters.get("pcie_box"), memory_limit=None).problem
    res = solve_problem(p, "dp")
    assert res.status == "optimal"
    assert res.objective == pytest.approx(p.evaluate(res.assignment).cost, rel=1e-12)
