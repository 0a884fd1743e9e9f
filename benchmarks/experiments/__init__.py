"""Reproductions of the papers' experiments, shared by tests, benchmarks and notebooks."""
