"""Human sizes, bandwidths, durations and integer ranges (milp_parallel.units)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from milp_parallel.errors import FormatError
from milp_parallel.units import (
    format_bytes,
    format_seconds,
    parse_bandwidth,
    parse_bytes,
    parse_int_range,
    parse_seconds,
)


@pytest.mark.parametrize("text,expected", [
    ("16GiB", 16 * 2**30), ("16GB", 16 * 10**9), ("16 gb".upper(), 16 * 10**9),
    ("512MiB", 512 * 2**20), ("1.5KiB", 1536), ("100", 100), ("0", 0), ("2e9", 2 * 10**9),
    ("16giB", 16 * 2**30), ("3TB", 3 * 10**12), (1024, 1024), (1.5e3, 1500), ("7B", 7),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "16 XB", "-1GB", "16Gb", "16gib", "1..2", "inf", True,
                                  float("nan"), -5])
def test_parse_bytes_rejects(text):
    with pytest.raises(FormatError):
        parse_bytes(text)


def test_parse_bytes_message_names_the_text():
    with pytest.raises(FormatError, match="'sixteen'.*16GiB"):
        parse_bytes("sixteen")


@pytest.mark.parametrize("text,expected", [
    ("100Gbps", 12.5e9), ("12.5GB/s", 12.5e9), ("50 GB/s", 50e9), ("1GiB/s", 2.0**30),
    ("800Mbps", 1e8), ("1e9", 1e9), (25e9, 25e9), ("10Gbit/s", 1.25e9),
])
def test_parse_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["0Gbps", "fast", "-3GB/s", "10 Gbpss"])
def test_parse_bandwidth_rejects(text):
    with pytest.raises(FormatError):
        parse_bandwidth(text)


@pytest.mark.parametrize("text,expected", [
    ("60", 60.0), ("90s", 90.0), ("250ms", 0.25), ("2min", 120.0), ("1h", 3600.0),
    ("5us", 5e-6), (3, 3.0),
])
def test_parse_seconds(text, expected):
    assert parse_seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["soon", "-1", "5 parsecs"])
def test_parse_seconds_rejects(text):
    with pytest.raises(FormatError):
        parse_seconds(text)


@pytest.mark.parametrize("text,expected", [
    ("4..1024", (4, 8, 16, 32, 64, 128, 256, 512, 1024)),
    ("4..1000", (4, 8, 16, 32, 64, 128, 256, 512)),
    ("1..5:+1", (1, 2, 3, 4, 5)), ("3..30:*3", (3, 9, 27)), ("8", (8,)),
    ("4,1,2,2", (1, 2, 4)), ("1, 3..12:+3", (1, 3, 6, 9, 12)), (7, (7,)), ([2, "1..4"], (1, 2, 4)),
])
def test_parse_int_range(text, expected):
    assert parse_int_range(text) == expected


@pytest.mark.parametrize("text", ["", "0..4", "8..4", "1..8:+0", "1..8:*1", "a..b", "1...4",
                                  "1..", "-2", "0"])
def test_parse_int_range_rejects(text):
    with pytest.raises(FormatError):
        parse_int_range(text)


@given(st.integers(min_value=1, max_value=2**20), st.integers(min_value=0, max_value=12))
def test_doubling_range_is_every_power_step(lo, k):
    hi = lo * 2**k
    got = parse_int_range(f"{lo}..{hi}")
    assert got == tuple(lo * 2**i for i in range(k + 1))


@given(st.integers(min_value=0, max_value=2**60))
def test_format_then_parse_bytes_is_close(n):
    text = format_bytes(n, digits=15)
    assert parse_bytes(text) == pytest.approx(n, rel=1e-12, abs=1)


@given(st.floats(min_value=1e-9, max_value=1e5))
def test_format_then_parse_seconds_is_close(x):
    assert parse_seconds(format_seconds(x, digits=15)) == pytest.approx(x, rel=1e-12)


def test_format_examples():
    assert format_bytes(16 * 2**30) == "16GiB"
    assert format_bytes(16e9, binary=False) == "16GB"
    assert format_seconds(0.0123) == "12.3ms"
    assert format_seconds(0) == "0s"
    assert format_bytes(math.inf) == "inf"
