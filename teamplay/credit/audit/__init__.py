"""Checks on the credit methods rather than methods: what each one estimates (``cards``), how well
its advantages agree with the true advantage (``fidelity``), and a testbed with an exact answer for
COSAC's estimators (``bandit``). Only the trainer, the CLI and the benchmarks import these.
"""
