"""Benchmarks and load generators. Run ``python -m bench --help``."""
