"""The benchmarks, run as ``python -m benchmarks.NAME`` from a source checkout (not installed)."""
