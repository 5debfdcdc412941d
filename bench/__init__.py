"""Benchmarks: they print figures (with the machine noted) and never assert timings."""
