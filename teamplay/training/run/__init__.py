"""The run shell, on four floors: the trainer (``trainer``) on top, composed from where each step's
episodes come from (``rollout_source``: one interface, a synchronous and an asynchronous source) and
the in-process Runner and Learner (``local_parts``); below them what it composes: the asynchronous
rollouts (``asynchronous``: the generator thread, what it generates with, its source), the step's
update stage that drives the learner (``update_stage``), what a run carries from step to step
(``run_state``), the held-out evaluations (``held_out``) and the warm start (``warm_start``); at the
bottom the Runner and Learner interfaces (``parts``), the data order and step seeds
(``data_order``), stopping at a signal (``preemption``) and the difficulty dial (``curriculum``).

Above ``step`` and every room below it; only ``experiments`` imports it.
"""
