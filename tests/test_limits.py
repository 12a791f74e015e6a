"""Size guards before allocation, device counts the configuration space cannot use, and the
one reading of memory_limit."""

from __future__ import annotations

import math
import resource

import pytest

from milp_parallel import clusters, models, solve
from milp_parallel.costs.build import build, build_problem
from milp_parallel.costs.configs import ConfigOptions, SizeLimits, enumerate_configs
from milp_parallel.errors import (
    InvalidOptionError,
    InvalidTopologyError,
    ProblemTooLargeError,
    UnknownOptionError,
)
from milp_parallel.graph import LayerGraph
from milp_parallel.units import parse_memory_limit


def test_a_million_devices_is_refused_before_any_allocation():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ProblemTooLargeError, match=r"1,000,000 exceeds the limit "
                                                   r"max_devices=4,096.*'max_devices'"):
        solve("lenet5", "abci", devices=10**6, solver="dp", cross_check=False)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024      # nothing of the size of a 10**6-column table


def test_limits_are_raised_by_the_option_they_name():
    g = models.get("lenet5")
    topo = clusters.get("abci", nodes=2)
    with pytest.raises(ProblemTooLargeError, match="max_devices"):
        build(g, topo, max_devices=4)
    assert build(g, topo, max_devices=8).problem.n_devices == 8
    with pytest.raises(ProblemTooLargeError, match="max_edge_entries"):
        build(g, topo, max_edge_entries=10)
    with pytest.raises(ProblemTooLargeError, match="max_memory_entries"):
        build(g, topo, limits=SizeLimits(max_memory_entries=100))
    with pytest.raises(ProblemTooLargeError, match=r"layer '.*' has more than 3 "
                                                   r"configurations.*max_configs"):
        build(g, topo, max_configs=3)
    plan = solve("lenet5", "abci", devices=8, solver="dp", cross_check=False,
                 config_options={"max_configs": 500})
    assert plan.devices == 8
    with pytest.raises(UnknownOptionError, match="max_colours"):
        build(g, topo, max_colours=3)
    with pytest.raises(InvalidOptionError, match="positive integer"):
        SizeLimits(max_devices=-1)


def test_configurations_are_enumerated_without_the_full_cross_product():
    g = LayerGraph()
    # every dim has 21 divisors <= 64: 194,481 candidate tuples, far fewer with product <= 64
    g.input("x", (720, 720, 720, 720))
    layer = g.layer("x")
    cfg = enumerate_configs(layer, 64, options=ConfigOptions(power_of_two=False))
    assert len(cfg) > 1000 and (cfg.prod(axis=1) <= 64).all()
    assert [tuple(r) for r in cfg] == sorted(tuple(r) for r in cfg)
    with pytest.raises(ProblemTooLargeError, match="max_configs=100"):
        enumerate_configs(layer, 64, options=ConfigOptions(power_of_two=False),
                          max_configs=100)


@pytest.mark.parametrize("devices", [3, 12])
def test_device_counts_power_of_two_degrees_cannot_use_are_refused(devices):
    with pytest.raises(InvalidTopologyError, match=rf"{devices} devices.*power-of-two.*"
                                                   r"power_of_two': False"):
        solve("lenet5", "abci", devices=devices, solver="dp", cross_check=False)


def test_a_cluster_of_six_devices_needs_any_divisor():
    from milp_parallel.machine.topology import Device, Level, Topology
    six = Topology(Device("g", 16e9, 1e13), [Level("nv", 2, 50e9, 9e-6),
                                             Level("ib", 3, 12.5e9, 4e-5)], "six")
    with pytest.raises(InvalidTopologyError, match="cluster 'six' has 6 devices.*use 4 or 8"):
        build_problem(models.get("lenet5"), six)
    p = build_problem(models.get("lenet5", batch_size=60), six, power_of_two=False)
    assert p.n_devices == 6


def test_any_divisor_plans_three_devices_and_labels_them_right():
    plan = solve("alexnet", "abci", devices=3, solver="dp", cross_check=False,
                 batch_size=384, config_options={"power_of_two": False})
    assert plan.devices == 3
    assert max(lc.n_devices for lc in plan.layers) == 3    # the third device is used


def test_memory_limit_has_one_reading_everywhere():
    topo = clusters.get("abci", nodes=1)
    g = models.get("lenet5")
    dev = topo.device.memory_bytes
    assert parse_memory_limit(None, device_bytes=dev) is None    # None: no budget, always
    assert parse_memory_limit("device", device_bytes=dev) == dev
    assert parse_memory_limit("none", device_bytes=dev) is None
    assert parse_memory_limit(math.inf) is None
    assert parse_memory_limit("1KiB") == 1024.0
    for bad in (0, -1, math.nan, "lots", "16Gb", True, [1], 10**400):
        with pytest.raises(InvalidOptionError, match="memory_limit"):
            parse_memory_limit(bad, device_bytes=dev)
    with pytest.raises(InvalidOptionError, match="needs a cluster"):
        parse_memory_limit("device")
    # None means no budget everywhere; "device" (the default of build and solve) the device
    assert build_problem(g, topo, memory_limit=None).memory_limit is None
    assert solve(g, topo, solver="dp", cross_check=False,
                 memory_limit=None).memory_limit_bytes is None
    assert build_problem(g, topo, memory_limit="device").memory_limit[0] == dev
    assert solve(g, topo, solver="dp", cross_check=False).memory_limit_bytes == dev
    assert solve(g, topo, solver="dp", cross_check=False,
                 memory_limit="none").memory_limit_bytes is None
    assert solve(g, topo, solver="dp", cross_check=False,
                 memory_limit="device").memory_limit_bytes == dev
