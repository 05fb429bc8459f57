"""Building a run's parts from its config and checking it before any model loads (``setup``:
``build_run``, ``check_run``).

Above ``store`` and ``play``, which it builds from; below every room that builds a run.
"""
