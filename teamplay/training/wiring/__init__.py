"""Building a run from its config, one module per kind of thing built: the task's items and the env
factory (``envs``), the team model (``model``), the generation backends (``backend``), the
decoding settings (``sampling``), the evaluation's controllers (``controllers``), where a model
goes (``placement``); the whole training run from them (``wired_run``: ``build_run``), the team of
``eval``/``play``/``serve`` (``eval_team``), and every refusal of an option combination
(``checks``: ``check_run`` before any model loads, ``check_wired`` after the wiring).

Above ``store`` and ``play``, which it builds from; below every room that builds a run.
"""
