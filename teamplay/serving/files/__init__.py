"""A trained team as files others load: the exported folder (``export``: PEFT adapters per role,
``team.yaml``, the Hub upload), its schema (``team_file``), its model card (``card``) and an lm-eval
task that scores the served team (``lm_eval_task``).

The bottom floor of ``teamplay.serving`` with ``episodes``: it imports no other room.
"""
