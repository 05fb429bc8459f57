"""The run shell: the trainer (``trainer``) composed from a Runner and a Learner (``parts``), the
step's update stage that drives the learner (``update_stage``), what a run carries from step to
step (``run_state``), the data order (``data_order``), stopping at a signal (``preemption``), the
held-out evaluations (``held_out``) and asynchronous rollouts (``async_rollouts``: the generator
thread; ``async_step``: the trainer's side of it).

Above ``step`` and every room below it; only ``experiments`` imports it.
"""
