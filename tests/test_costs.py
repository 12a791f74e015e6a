"""CostModel: hand-computed compute, sync, transfer and memory; t_x against a brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from milp_parallel import clusters
from milp_parallel.costs import CostModel
from milp_parallel.costs.configs import ConfigOptions, enumerate_configs, tile_boxes
from milp_parallel.errors import InvalidTopologyError
from milp_parallel.graph import LayerGraph
from milp_parallel.machine.topology import Device, Level, Topology

NV_BW, NV_LAT, IB_BW, IB_LAT = 50e9, 9e-6, 12.5e9, 40.31e-6


def brute_transfer(cm, producer, consumer, i, cu, cv):
    """Per device pair: receiver d gets |R_d & P_s| from every s != d over link (s, d)."""
    topo = cm.topology
    lat = np.array([lv.latency_for(2) for lv in topo.levels])
    bw = np.array([lv.bandwidth_bytes_per_s for lv in topo.levels])
    p_lo, p_hi, _ = tile_boxes(producer.output_shape, cu)
    o_lo, o_hi, _ = tile_boxes(consumer.output_shape, cv)
    out = np.zeros((len(cu), len(cv)))
    for b in range(len(cv)):
        tv = int(np.prod(cv[b]))
        r_lo, r_hi = consumer.input_region(i, o_lo[b, :tv], o_hi[b, :tv])
        for a in range(len(cu)):
            tu = int(np.prod(cu[a]))
            ov = np.clip(np.minimum(r_hi[:, None], p_hi[a, None, :tu])
                         - np.maximum(r_lo[:, None], p_lo[a, None, :tu]), 0, None).prod(axis=2)
            lev = topo.level_index(np.arange(tv)[:, None], np.arange(tu)[None, :])
            per_level = np.stack([np.where(lev == k, ov, 0).sum(axis=1)
                                  for k in range(len(bw))], axis=1)       # (tv, levels)
            # receivers of one node that get data over a level with U cards share them
            slow = np.ones(per_level.shape)
            for k, lv in enumerate(topo.levels):
                unit = topo.group_sizes[k - 1] if k else 1
                if k and lv.uplinks and unit > lv.uplinks:
                    node = np.arange(tv) // unit
                    busy = per_level[:, k] > 0
                    count = np.array([busy[node == node[d]].sum() for d in range(tv)])
                    slow[:, k] = np.maximum(count / lv.uplinks, 1.0)
            t = np.where(per_level > 0,
                         lat + per_level * cm.bytes_per_element / bw * slow, 0)
            out[a, b] = t.sum(axis=1).max()
    # forward and backward, except out of a graph input: no gradient flows into the data
    return out if producer.op == "input" else 2 * out


def test_conv_tile_flops():
    # the FLOP model (compute_model="flops"): FLOPs / (peak x efficiency), backward 2x
    g = LayerGraph()
    g.input("x", (8, 16, 32, 32))
    g.conv("conv", "x", 32, 3, padding=1)
    conv = g.layer("conv")
    fwd_per_sample = 2 * 32 * 32 * 32 * 16 * 9
    assert conv.flops == fwd_per_sample
    t = clusters.get("abci", nodes=1)
    cm = CostModel(t, compute_model="flops")
    got = cm.compute_seconds(conv, np.array([[1, 1, 1, 1], [2, 1, 2, 1], [1, 4, 1, 1]]))
    serial = 3 * 8 * fwd_per_sample / 7.8e12          # forward + 2x backward
    assert got == pytest.approx([serial, serial / 4, serial / 4])
    relu_cm = CostModel(t, backward_factor=1.0, compute_model="flops")
    assert relu_cm.compute_seconds(conv, np.array([[1, 1, 1, 1]]))[0] == \
        pytest.approx(2 * 8 * fwd_per_sample / 7.8e12)


def test_conv_roofline_by_hand():
    # the default roofline: max(FLOPs / (7.8 TFLOP/s x tile quantization), bytes / (0.88 x 900
    # GB/s)) + 4 us per kernel; forward 1 kernel, backward 2 (input and weight gradient),
    # update 1. Tile quantization: the product's output columns (32 filters) fill a quarter
    # of a 128-wide tile; its rows (samples x positions) fill whole tiles.
    g = LayerGraph()
    g.input("x", (8, 16, 32, 32))
    g.conv("conv", "x", 32, 3, padding=1)
    conv = g.layer("conv")
    cm = CostModel(clusters.get("abci", nodes=1))
    speed, bw, launch = 7.8e12, 0.88 * 900e9, 4e-6
    w = 32 * 16 * 9 + 32                               # 4640 parameters

    def expect(flops, x, y, w_shard, q):
        fwd = max(flops / (speed * q), (x + y + w_shard) * 4 / bw) + launch
        bwd = max(2 * flops / (speed * q), 2 * (x + y + w_shard) * 4 / bw) + 2 * launch
        upd = (3 + 2 * 2) * w_shard * 4 / bw + launch     # Adam: read w, g, 2 moments
        return fwd + bwd + upd
    f = 8 * 2 * 32 * 32 * 32 * 16 * 9
    serial = expect(f, 8 * 16 * 32 * 32, 8 * 32 * 32 * 32, w, 32 / 128)
    # n=2 h=2: a tile of 4 samples x 16 rows reads 18 input rows (the halo)
    nh = expect(f / 4, 4 * 16 * 18 * 32, 4 * 32 * 16 * 32, w, 32 / 128)
    # c=4: 8 of 32 output channels (8 / 128 of a tile), all input channels, a quarter of
    # the weights: a quarter of the FLOPs at a quarter of the speed
    c4 = expect(f / 4, 8 * 16 * 32 * 32, 8 * 8 * 32 * 32, w / 4, 8 / 128)
    got = cm.compute_seconds(conv, np.array([[1, 1, 1, 1], [2, 1, 2, 1], [1, 4, 1, 1]]))
    assert got == pytest.approx([serial, nh, c4], rel=1e-12)
    # the input is a graph input: no input gradient, one backward kernel
    fwd, bwd, upd = cm.compute_phases(conv, np.array([[1, 1, 1, 1]]), graph_inputs=(True,))
    assert bwd[0] == pytest.approx(f / (speed / 4) + launch, rel=1e-12)
    # without tile quantization the channel split is four times as fast per FLOP
    from milp_parallel.machine.roofline import RooflineParams
    flat = CostModel(clusters.get("abci", nodes=1), roofline=RooflineParams(gemm_tile=0))
    assert flat.compute_seconds(conv, np.array([[1, 4, 1, 1]]))[0] == pytest.approx(
        expect(f / 4, 8 * 16 * 32 * 32, 8 * 8 * 32 * 32, w / 4, 1.0), rel=1e-12)


def test_memory_bound_ops_by_hand():
    g = LayerGraph()
    g.input("x", (32, 64, 56, 56))
    g.conv("conv", "x", 64, 3, padding=1)
    g.elementwise("relu", "conv")
    g.pool("pool", "relu", 2)
    cm = CostModel(clusters.get("abci", nodes=1))
    bw, launch = 0.88 * 900e9, 4e-6
    y = 32 * 64 * 56 * 56
    relu = cm.compute_phases(g.layer("relu"), np.array([[1, 1, 1, 1]]))
    # forward reads x and writes y; backward reads dy and x, writes dx; no parameters
    assert [float(a[0]) for a in relu] == pytest.approx(
        [2 * y * 4 / bw + launch, 3 * y * 4 / bw + launch, 0.0], rel=1e-12)
    pool = cm.compute_phases(g.layer("pool"), np.array([[1, 1, 1, 1]]))
    # max pool backward reads dy, x and y and writes dx
    assert float(pool[0][0]) == pytest.approx((y + y / 4) * 4 / bw + launch, rel=1e-12)
    assert float(pool[1][0]) == pytest.approx((y / 4 + 2 * y + y / 4) * 4 / bw + launch,
                                              rel=1e-12)
    # bf16 on the tensor-core peak: the dense conv speeds up 125 / 15.7 x, relu only by
    # its halved bytes
    half = CostModel(clusters.get("abci", nodes=1), dtype="fp16")
    assert half.bytes_per_element == 2 and half.peak_flops == 125e12
    r16 = half.compute_phases(g.layer("relu"), np.array([[1, 1, 1, 1]]))
    assert float(r16[0][0]) == pytest.approx(2 * y * 2 / bw + launch, rel=1e-12)
    with pytest.raises(InvalidTopologyError, match="states no peak"):
        CostModel(clusters.get("abci", nodes=1), dtype="bf16")
    with pytest.raises(InvalidTopologyError, match="compute_model"):
        CostModel(clusters.get("abci", nodes=1), compute_model="magic")


def test_profile_lookup_and_fallbacks():
    class Table:
        def lookup(self, layer, tile_shape):
            return 0.5 if tile_shape == (4, 16, 32, 32) else None
    g = LayerGraph()
    g.input("x", (8, 16, 32, 32))
    g.conv("conv", "x", 16, 3, padding=1)
    cm = CostModel(clusters.get("abci", nodes=1), profile=Table())
    fwd, bwd, upd = cm.compute_phases(g.layer("conv"), np.array([[2, 1, 1, 1], [1, 2, 1, 1]]))
    # the measured forward+backward replaces the estimate; the update stays estimated
    assert fwd[0] + bwd[0] == pytest.approx(0.5) and fwd[1] + bwd[1] != 0.5
    assert upd[0] > 0 and fwd[0] > 0 and bwd[0] > fwd[0]   # split in the estimate's ratio
    assert cm.profile_stats == {"hits": 1, "fallbacks": 1}
    with pytest.raises(InvalidTopologyError, match="lookup"):
        CostModel(clusters.get("abci", nodes=1), profile=object())


def linear_graph():
    g = LayerGraph()
    g.input("x", (4, 8))
    g.linear("fc", "x", 8)
    g.elementwise("relu", "fc")
    return g


def test_transfer_sample_split_to_channel_split():
    g = linear_graph()
    cm = CostModel(clusters.get("abci", nodes=1))
    fc, relu = g.layer("fc"), g.layer("relu")
    n2, c2 = np.array([[2, 1]]), np.array([[1, 2]])
    # device 0 holds rows 0-1 (all columns), needs columns 0-3 of all rows: it lacks
    # rows 2-3 x columns 0-3 = 8 elements, from device 1 over NVLink; device 1 alike.
    fwd = NV_LAT + 8 * 4 / NV_BW
    assert cm.transfer_seconds(fc, relu, 0, n2, c2)[0, 0] == pytest.approx(2 * fwd)
    # swapping the layouts moves the same bytes the other way
    assert cm.transfer_seconds(fc, relu, 0, c2, n2)[0, 0] == pytest.approx(2 * fwd)
    cfg = enumerate_configs(fc, 4)
    tab = cm.transfer_seconds(fc, relu, 0, cfg, cfg)
    assert np.all(np.diag(tab) == 0)           # same layout: nothing moves
    assert np.all(tab >= 0)


def test_transfer_across_nodes_uses_infiniband():
    g = linear_graph()
    cm = CostModel(clusters.get("abci", nodes=2))
    fc, relu = g.layer("fc"), g.layer("relu")
    # n=4 on devices 0-3 (node 0) -> n=1 c=8? c=8 puts 8 tiles on both nodes
    got = cm.transfer_seconds(fc, relu, 0, np.array([[4, 1]]), np.array([[1, 8]]))[0, 0]
    # device 4 (node 1) needs column 4 of all 4 rows, all of it from node 0 over IB; so do
    # devices 5-7, and the 4 receivers of node 1 share its 2 network cards (half a card each)
    assert got == pytest.approx(2 * (IB_LAT + 4 * 4 / (IB_BW / 2)))


def test_halo_exchange():
    g = LayerGraph()
    g.input("x", (1, 1, 8, 8))
    g.conv("conv", "x", 1, 3, padding=1)
    cm = CostModel(clusters.get("abci", nodes=1))
    h2 = np.array([[1, 1, 2, 1]])
    # each half needs one row (8 elements) of its neighbour's half; out of the graph input
    # the exchange runs forward only (the data has no gradient)
    got = cm.transfer_seconds(g.layer("x"), g.layer("conv"), 0, h2, h2)[0, 0]
    assert got == pytest.approx(NV_LAT + 8 * 4 / NV_BW)
    w2 = np.array([[1, 1, 1, 2]])
    assert cm.transfer_seconds(g.layer("x"), g.layer("conv"), 0, w2, w2)[0, 0] == \
        pytest.approx(got)


@pytest.mark.parametrize("topo", [
    clusters.get("abci", nodes=2),
    Topology(Device("g", 1e9, 1e12), [Level("a", 2, 100e9, 1e-6), Level("b", 2, 10e9, 5e-6),
                                      Level("c", 2, 1e9, 2e-5)]),
])
def test_transfer_matches_brute_force(topo):
    g = LayerGraph()
    g.input("x", (4, 4, 6, 8))
    g.conv("c1", "x", 8, 3, padding=1)
    g.conv("c2", "c1", 4, 3, stride=2, padding=1)
    g.pool("p", "c2", 2)
    g.flatten("f", "p")
    g.linear("fc", "f", 6)
    cm = CostModel(topo)
    for u, v in (("x", "c1"), ("c1", "c2"), ("c2", "p"), ("p", "f"), ("f", "fc")):
        lu, lv = g.layer(u), g.layer(v)
        cu = enumerate_configs(lu, topo.n_devices)
        cv = enumerate_configs(lv, topo.n_devices)
        assert cm.transfer_seconds(lu, lv, 0, cu, cv) == \
            pytest.approx(brute_transfer(cm, lu, lv, 0, cu, cv), rel=1e-9, abs=1e-15), (u, v)


def test_allreduce_of_a_replicated_linear_layer():
    g = linear_graph()
    fc = g.layer("fc")                          # 8 * 8 + 8 = 72 parameters
    m = 72 * 4
    one = CostModel(clusters.get("abci", nodes=1), collective="ring")
    two = CostModel(clusters.get("abci", nodes=2), collective="ring")
    cfg = np.array([[4, 1], [2, 2], [1, 4], [1, 1]])
    # the layer's own all-reduce (no bucket, no overlap)
    assert one.allreduce_seconds(fc, cfg) == pytest.approx(
        [2 * 3 * (NV_LAT + m / 4 / NV_BW), 2 * 1 * (NV_LAT + m / 2 / 2 / NV_BW), 0, 0])
    # 8 replicas over two nodes: the ring crosses InfiniBand
    assert two.allreduce_seconds(fc, np.array([[8, 1]]))[0] == pytest.approx(
        2 * 7 * (IB_LAT + m / 8 / IB_BW))
    assert np.all(one.sync_seconds(g.layer("relu"), cfg) == 0)
    plain = CostModel(clusters.get("abci", nodes=1), collective="ring",
                      gradient_bucket_bytes=None, sync_overlap=0.0)
    assert plain.sync_seconds(fc, cfg) == pytest.approx(one.allreduce_seconds(fc, cfg))


def test_a_split_batchnorm_with_whole_batch_statistics_pays_two_allreduces_of_2c_floats():
    g = LayerGraph()
    g.input("x", (8, 16, 4, 4))
    g.batchnorm("bn", "x")
    bn = g.layer("bn")
    topo = clusters.get("abci", nodes=1)            # 4 GPUs over NVLink
    local = CostModel(topo, collective="ring")
    sync = CostModel(topo, collective="ring", batchnorm_stats="sync")
    # dims n c h w: samples on 4, samples x channels, channels only, height x channels
    cfg = np.array([[4, 1, 1, 1], [2, 2, 1, 1], [1, 4, 1, 1], [1, 2, 2, 1]])
    # the ranks sharing a channel slice sum 2 C_tile fp32: 4 ranks x 16 channels, then
    # 2 ranks x 8 channels (twice: the groups {0, 1} and {2, 3} run at once), none
    ring = [2 * 3 * (NV_LAT + 2 * 16 * 4 / 4 / NV_BW), 2 * 1 * (NV_LAT + 2 * 8 * 4 / 2 / NV_BW),
            0.0, 2 * 1 * (NV_LAT + 2 * 8 * 4 / 2 / NV_BW)]
    assert sync.stats_seconds(bn, cfg) == pytest.approx(ring, rel=1e-12)
    assert np.all(local.stats_seconds(bn, cfg) == 0)
    assert np.all(sync.stats_seconds(g.layer("x"), np.array([[4, 1, 1, 1]])) == 0)
    # one all-reduce in the forward and one in the backward, on the layer's critical path
    f0, b0, u0 = local.compute_phases(bn, cfg)
    f1, b1, u1 = sync.compute_phases(bn, cfg)
    assert f1 - f0 == pytest.approx(ring, rel=1e-9) and b1 - b0 == pytest.approx(ring, rel=1e-9)
    assert np.array_equal(u0, u1)
    with pytest.raises(InvalidTopologyError, match="batchnorm_stats"):
        CostModel(topo, batchnorm_stats="global")


def test_allreduce_algorithms_by_hand():
    g = linear_graph()
    fc = g.layer("fc")
    m = 72 * 4
    two = clusters.get("abci", nodes=2)          # 2 nodes x 4 GPUs, 2 cards per node
    ring = 2 * 7 * (IB_LAT + m / 8 / IB_BW)
    # NCCL's tree: a chain of 4 in the node, a binary tree of depth 1 across the 2 nodes
    tree = 2 * (3 * NV_LAT + 1 * IB_LAT) + 2 * m / IB_BW
    # hierarchical: reduce-scatter / all-gather in the node, then 4 rings (one per local
    # rank) of m/4 across the nodes, sharing the node's 2 cards (half a card each)
    hier = 2 * 3 * (NV_LAT + m / 4 / NV_BW) + 2 * 1 * (IB_LAT + m / 8 / (IB_BW / 2))
    got = {a: CostModel(two, collective=a).allreduce_seconds(fc, np.array([[8, 1]]))[0]
           for a in ("ring", "tree", "hierarchical", "auto")}
    assert got["ring"] == pytest.approx(ring, rel=1e-12)
    assert got["tree"] == pytest.approx(tree, rel=1e-12)
    assert got["hierarchical"] == pytest.approx(hier, rel=1e-12)
    assert got["auto"] == pytest.approx(min(ring, tree, hier), rel=1e-12)
    # the same through the topology, and a big buffer where the ring's bandwidth wins
    devs = list(range(8))
    assert two.allreduce_seconds(devs, m, algorithm="tree") == pytest.approx(tree, rel=1e-12)
    big = 1e9
    assert two.allreduce_seconds(devs, big, algorithm="auto") == pytest.approx(min(
        2 * 7 * (IB_LAT + big / 8 / IB_BW), 2 * (3 * NV_LAT + IB_LAT) + 2 * big / IB_BW,
        2 * 3 * (NV_LAT + big / 4 / NV_BW) + 2 * (IB_LAT + big / 8 / (IB_BW / 2))), rel=1e-12)
    with pytest.raises(InvalidTopologyError, match="collective"):
        CostModel(two, collective="butterfly")


def test_bucketing_and_overlap_by_hand():
    g = linear_graph()
    fc = g.layer("fc")
    m = 72 * 4
    one = clusters.get("abci", nodes=1)
    bucket = 1e6
    cm = CostModel(one, collective="ring", gradient_bucket_bytes=bucket, sync_overlap=0.0)
    # the layer's share m / bucket of a full bucket's ring all-reduce
    full = 2 * 3 * (NV_LAT + bucket / 4 / NV_BW)
    assert cm.sync_seconds(fc, np.array([[4, 1]]))[0] == pytest.approx(m / bucket * full)
    # overlap: the sync hides behind the layer's own backward time, never below 0
    hidden = CostModel(one, collective="ring", gradient_bucket_bytes=None, sync_overlap=1.0)
    bwd = hidden.compute_phases(fc, np.array([[4, 1]]))[1][0]
    raw = 2 * 3 * (NV_LAT + m / 4 / NV_BW)
    assert hidden.sync_seconds(fc, np.array([[4, 1]]))[0] == pytest.approx(max(raw - bwd, 0))
    assert hidden.allreduce_seconds(fc, np.array([[4, 1]]))[0] == pytest.approx(raw)
    half = CostModel(one, collective="ring", gradient_bucket_bytes=None, sync_overlap=0.5)
    assert half.sync_seconds(fc, np.array([[4, 1]]))[0] == pytest.approx(raw - 0.5 * bwd)


def test_memory_of_replicated_and_split_linear():
    g = linear_graph()
    fc = g.layer("fc")
    cm = CostModel(clusters.get("abci", nodes=1), optimizer_state_factor=2)
    mem = cm.memory_bytes(fc, np.array([[4, 1], [1, 4], [2, 1]]))
    assert mem.shape == (3, 4)
    w = 4 * 72 * 4                              # weights + grads + 2 Adam moments, fp32
    assert mem[0].tolist() == [w + 8 * 4] * 4   # replicated weights, one row each
    # split by features, every tile saves the whole input (4 x 8) for its weight gradient
    assert mem[1].tolist() == [w / 4 + 32 * 4] * 4
    assert mem[2].tolist() == [w + 16 * 4] * 2 + [0, 0]   # devices 2, 3 unused
    sgd = CostModel(clusters.get("abci", nodes=1), optimizer_state_factor=0,
                    bytes_per_element=2)
    assert sgd.memory_bytes(fc, np.array([[1, 1]]))[0, 0] == 2 * 72 * 2 + 32 * 2


def test_bad_configurations():
    g = linear_graph()
    cm = CostModel(clusters.get("abci", nodes=1))
    with pytest.raises(InvalidTopologyError, match="dims"):
        cm.compute_seconds(g.layer("fc"), np.array([[1, 1, 1]]))
    with pytest.raises(InvalidTopologyError, match="devices"):
        cm.compute_seconds(g.layer("fc"), np.array([[4, 2]]))
    with pytest.raises(InvalidTopologyError):
        CostModel(clusters.get("abci", nodes=1), bytes_per_element=0)


def test_any_divisor_space_is_consistent_with_brute_force_inside_a_node():
    t = clusters.get("pcie_box", gpus_per_node=6)
    g = LayerGraph()
    g.input("x", (6, 6))
    g.linear("fc", "x", 6)
    cm = CostModel(t)
    opts = ConfigOptions(power_of_two=False)
    cu = enumerate_configs(g.layer("x"), 6, options=opts)
    cv = enumerate_configs(g.layer("fc"), 6, options=opts)
    assert cm.transfer_seconds(g.layer("x"), g.layer("fc"), 0, cu, cv) == \
        pytest.approx(brute_transfer(cm, g.layer("x"), g.layer("fc"), 0, cu, cv))


def test_chunked_transfer_equals_unchunked(monkeypatch):
    import milp_parallel.costs.model as costs
    g = LayerGraph()
    g.input("x", (8, 4, 8, 8))
    g.conv("c", "x", 8, 3, padding=1)
    topo = clusters.get("abci", nodes=2)
    cu = enumerate_configs(g.layer("x"), 8)
    cv = enumerate_configs(g.layer("c"), 8)
    whole = CostModel(topo).transfer_seconds(g.layer("x"), g.layer("c"), 0, cu, cv)
    monkeypatch.setattr(costs, "_CHUNK_ELEMENTS", 64)
    chunked = CostModel(topo).transfer_seconds(g.layer("x"), g.layer("c"), 0, cu, cv)
    assert np.array_equal(whole, chunked)


def _assert_edges_match_reference(graph, topo, options=None, every=1):
    """Every ``every``-th graph edge: the fast t_x table equals the plain reference."""
    from reference_costs import transfer_seconds as reference
    cm = CostModel(topo)
    n = topo.n_devices
    for u, v, i in list(graph.edges)[::every]:
        lu, lv = graph.layer(u), graph.layer(v)
        cu = enumerate_configs(lu, n, options=options)
        cv = enumerate_configs(lv, n, options=options)
        got = cm.transfer_seconds(lu, lv, i, cu, cv)
        want = reference(cm, lu, lv, i, cu, cv)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{u} -> {v}")


THREE_LEVELS = Topology(Device("g", 16e9, 1e13), [Level("a", 2, 100e9, 1e-6),
                                                  Level("b", 2, 10e9, 5e-6),
                                                  Level("c", 4, 1e9, 2e-5)])


@pytest.mark.parametrize("name, topo, every", [
    ("resnet18", clusters.get("abci", nodes=2), 1),
    ("inception_v3", THREE_LEVELS, 3),
    ("mobilenet_v2", clusters.get("abci", nodes=4), 4),
    ("bert_base", clusters.get("abci", nodes=2), 2),
    ("cosmoflow", clusters.get("pcie_box"), 1),
])
def test_fast_transfer_equals_the_reference_on_zoo_models(name, topo, every):
    from milp_parallel import models
    g = models.get(name)
    g = g.with_batch_size(max(g.batch_size, topo.n_devices))
    _assert_edges_match_reference(g, topo, every=every)


def test_fast_transfer_equals_the_reference_off_powers_of_two():
    # 3 nodes x 2 GPUs, any divisor: blocks are not boxes, the bounding-box rule applies
    topo = Topology(Device("g", 16e9, 1e13), [Level("nv", 2, 50e9, 9e-6),
                                              Level("ib", 3, 12.5e9, 4e-5)])
    g = LayerGraph()
    g.input("x", (6, 3, 12, 10))
    g.conv("c1", "x", 6, 3, padding=1)
    g.conv("c2", "c1", 12, 3, stride=2, padding=1)
    g.pool("p", "c2", 2)
    g.flatten("f", "p")
    g.linear("fc", "f", 6)
    _assert_edges_match_reference(g, topo, options=ConfigOptions(power_of_two=False))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fast_kernel_equals_the_reference_on_random_boxes(data):
    """Arbitrary boxes (empty, inverted, overlapping, not from a placement) and hierarchies,
    with and without chunking and table merging."""
    import milp_parallel.costs.model as costs

    from reference_costs import receive_seconds as reference
    fanouts = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    topo = Topology(Device("g", 1e9, 1e12),
                    [Level(f"l{x}", f, 10.0 ** (11 - x), 1e-6 * (x + 1))
                     for x, f in enumerate(fanouts)])
    n = topo.n_devices
    nd = data.draw(st.integers(1, 4))
    k_h, k_r = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))

    def boxes(k):       # lo > hi along a dim (an empty box) included
        a = rng.integers(0, 9, size=(k, n, nd, 2))
        return a[..., 0], a[..., 1]

    h_lo, h_hi = boxes(k_h)
    n_lo, n_hi = boxes(k_r)
    t_h = rng.integers(1, n + 1, size=k_h)
    t_r = rng.integers(1, n + 1, size=k_r)
    cm = CostModel(topo, bytes_per_element=data.draw(st.sampled_from([2, 4])))
    want = reference(cm, h_lo, h_hi, t_h, n_lo, n_hi, t_r)
    chunk = data.draw(st.sampled_from([1, 7, 1 << 15]))
    table = data.draw(st.sampled_from([1, 50, 1 << 18]))
    saved = costs._CHUNK_ELEMENTS, costs._TABLE_ENTRIES
    try:
        costs._CHUNK_ELEMENTS, costs._TABLE_ENTRIES = chunk, table
        got = cm._receive_seconds(h_lo, h_hi, t_h, n_lo, n_hi, t_r)
    finally:
        costs._CHUNK_ELEMENTS, costs._TABLE_ENTRIES = saved
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_sync_and_memory_do_not_depend_on_the_batch_of_configurations():
    """The per-degree ring cache and the shared tile volumes answer as a fresh model does for
    each configuration alone."""
    g = LayerGraph()
    g.input("x", (8, 16, 8, 8))
    g.conv("conv", "x", 32, 3, padding=1)
    g.elementwise("relu", "conv")
    topo = clusters.get("abci", nodes=2)
    cm = CostModel(topo)
    conv, relu = g.layer("conv"), g.layer("relu")
    cfg = enumerate_configs(conv, 8)
    sync = cm.sync_seconds(conv, cfg)
    mem = cm.memory_bytes(conv, cfg)
    mem_relu = cm.memory_bytes(relu, cfg)
    for k, row in enumerate(cfg):
        alone = CostModel(topo)
        assert alone.sync_seconds(conv, row[None])[0] == sync[k]
        assert np.array_equal(alone.memory_bytes(conv, row[None])[0], mem[k])
        assert np.array_equal(alone.memory_bytes(relu, row[None])[0], mem_relu[k])
    assert cm.sync_seconds(conv, cfg[::-1]).tolist() == sync[::-1].tolist()
    mem[:] = -1     # the returned tables are the caller's
    assert (cm.memory_bytes(conv, cfg) >= 0).all()


def test_transfer_table_is_the_cached_table_and_entries_do_not_depend_on_the_batch():
    g = LayerGraph()
    g.input("x", (8, 4, 8, 8))
    g.conv("c", "x", 8, 3, padding=1)
    topo = clusters.get("abci", nodes=2)
    cm = CostModel(topo)
    x, c = g.layer("x"), g.layer("c")
    cu, cv = enumerate_configs(x, 8), enumerate_configs(c, 8)
    table = cm.transfer_table(x, c, 0, cu, cv)
    assert not table.flags.writeable
    assert cm.transfer_table(x, c, 0, cu, cv) is table
    copy = cm.transfer_seconds(x, c, 0, cu, cv)
    assert np.array_equal(copy, table) and copy.flags.writeable
    # plan breakdowns read single entries of the build's tables: the same numbers as a
    # table of one pair computed alone
    fresh = CostModel(topo)
    for a in range(0, len(cu), 3):
        for b in range(0, len(cv), 4):
            assert fresh.transfer_seconds(x, c, 0, cu[a:a + 1], cv[b:b + 1])[0, 0] == table[a, b]


def test_bytes_per_element_follow_the_dtype_of_the_topologys_peak():
    # a bf16 cluster is priced with bf16 tensors (2 bytes), an fp32 one with 4, unless told
    from milp_parallel import clusters
    assert CostModel(clusters.get("selene")).bytes_per_element == 4
    assert CostModel(clusters.get("selene", dtype="bf16")).bytes_per_element == 2
    assert CostModel(clusters.get("selene", dtype="bf16"), bytes_per_element=4
                     ).bytes_per_element == 4
