"""Benchmarks: one module per benchmark, each with a click command `cli` (see dsonet.cli.bench)."""
