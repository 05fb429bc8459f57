"""teamplay's benchmark suite: ``python -m benchmarks [NAME ...] [--quick]``.

One module per benchmark, each with ``run(quick: bool = False, model=...) -> Result`` and a
``main()`` (``python -m benchmarks.NAME``); ``benchmarks.suite.BENCHMARKS`` lists them in run
order and ``benchmarks.common`` holds what they share. Speed and memory are reported as ratios of
two variants measured side by side in one process or command; BENCHMARKS.md holds the figures,
the commands that reproduce them and the machine they were measured on.
"""
