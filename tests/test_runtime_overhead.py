"""A program's own time per layer and per step (runtime/overhead.py), measured for real on
gloo processes: chains of tiny layers run by the layer-wise program and by DDP."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from milp_parallel.errors import InvalidOptionError  # noqa: E402
from milp_parallel.inputs import load_cluster  # noqa: E402
from milp_parallel.runtime.overhead import measure_program_overhead  # noqa: E402


def _check(ov, program, lengths):
    assert ov.program == program and ov.world_size == 2 and ov.lengths == lengths
    assert all(m > 0 for m in ov.measured_seconds)
    # the longer chain is priced longer (its profiled operators and updates)
    assert ov.simulated_seconds[1] > ov.simulated_seconds[0] > 0
    assert ov.layer_seconds >= 0 and ov.step_seconds >= 0
    # the two figures give back the residuals they were measured from, unless one was
    # clipped at 0
    k1, k2 = lengths
    r1, r2 = (m - s for m, s in zip(ov.measured_seconds, ov.simulated_seconds))
    if ov.layer_seconds > 0 and ov.step_seconds > 0:
        assert r1 == pytest.approx(ov.step_seconds + 2 * k1 * ov.layer_seconds, rel=1e-9)
        assert r2 == pytest.approx(ov.step_seconds + 2 * k2 * ov.layer_seconds, rel=1e-9)


def test_the_layerwise_programs_own_time_is_measured_on_two_chains():
    topo = load_cluster("abci", devices=2)[0]
    ov = measure_program_overhead(topo, world_size=2, lengths=(1, 3), steps=30, repeats=3,
                                  rounds=1)
    _check(ov, "layerwise", (1, 3))


def test_ddps_own_time_is_measured_on_the_same_chains_data_parallel():
    topo = load_cluster("abci", devices=2)[0]
    ov = measure_program_overhead(topo, program="ddp", world_size=2, lengths=(1, 3),
                                  steps=30, repeats=3, rounds=1, optimizer="momentum",
                                  cost_options={"bucket_copies": 2})
    _check(ov, "ddp", (1, 3))


@pytest.mark.parametrize("bad", [{"program": "jax"}, {"lengths": (3, 2)},
                                 {"lengths": (0, 2)}, {"steps": 0}, {"rounds": 0}])
def test_bad_arguments_are_refused_before_anything_runs(bad):
    topo = load_cluster("abci", devices=2)[0]
    with pytest.raises(InvalidOptionError, match="measure_program_overhead"):
        measure_program_overhead(topo, **bad)
